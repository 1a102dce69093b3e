"""Storage faults: a full disk (a real tmpfs), a partial last metrics line, edited manifests.

Every write is all or nothing: nothing is committed short, a failed checkpoint leaves no parts
behind, a failed append leaves no partial line, and a damaged run directory is read with one
clear error or a fallback, never a traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pytest

from mariana.cli import main
from mariana.errors import StorageError
from mariana.storage import RunDir, load_params, save_params
from mariana.storage.checkpoint import Checkpoints

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]

GRAPH = Path(__file__).resolve().parents[1] / "engine" / "data" / "small.e"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Callable[[int], Path]]:
    """``small_disk(kib)``: a fresh tmpfs of that size mounted under ``tmp_path`` (unmounted at
    the end). A real full disk: short writes, then ENOSPC. Skips where mounting is not allowed."""
    mounted: list[Path] = []

    def mount(kib: int) -> Path:
        where = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
        where.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", str(where)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip() or done.returncode}")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _leftovers(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*.tmp"))


# -- a full disk -------------------------------------------------------------------------------------
def test_a_short_write_is_never_committed(small_disk):
    disk = small_disk(1024)
    run_dir = RunDir(str(disk / "run"))
    big = np.arange(512 * 1024, dtype=np.float32).reshape(512, 1024)  # 2 MiB: only part of it fits
    with pytest.raises(StorageError, match=r"params/big\.npy: .*No space left on device"):
        save_params(run_dir, [("small", np.ones(3)), ("big", big)])
    assert not (disk / "run" / "params" / "big.npy").exists() and not (disk / "run" / "params" / "index.json").exists()
    assert _leftovers(disk) == []
    with pytest.raises(StorageError, match="No space left on device"):
        run_dir.write_bytes("blob", bytes(2 << 20))
    assert not (disk / "run" / "blob").exists() and _leftovers(disk) == []


def test_a_failed_append_leaves_no_partial_line(small_disk):
    disk = small_disk(256)
    run_dir = RunDir(str(disk / "run"))
    run_dir.append_jsonl("metrics.jsonl", [{"superstep": 0}])
    (disk / "fill").write_bytes(b"\0" * ((256 << 10) - 8192))  # nearly full
    with pytest.raises(StorageError, match="No space left on device"):
        run_dir.append_jsonl("metrics.jsonl", [{"superstep": 1, "pad": "x" * 20000}])
    assert (disk / "run" / "metrics.jsonl").read_text() == '{"superstep": 0}\n'


def test_a_training_run_on_a_full_disk_commits_nothing_short(small_disk):
    """The issue's reproduction, smaller: a disk with room for the model but not for every
    checkpoint. Failed checkpoints leave nothing behind, the parameters are whole, and job.json
    says how the job ended."""
    disk = small_disk(6 * 1024)
    run = disk / "r1"
    code = main(["run", "dnn-dp", "--workers", "2", "--set", "checkpoint_every=5", "--set", "epochs=2",
                 "--set", 'model=["dense:512:relu","dense:512:relu","dense:10"]', "--run-dir", str(run)])
    status = json.loads((run / "job.json").read_text())["status"]
    assert (code, status) in ((0, "finished"), (1, "failed"))
    ck = Checkpoints(RunDir(str(run)))
    for store in (ck, ck.params):
        for ss in store.supersteps():  # every folder left is a committed, intact checkpoint
            assert store.inspect(ss).valid, (store.root, ss, store.inspect(ss).why)
    if code == 0:
        assert [name for name, _ in load_params(RunDir(str(run)))]  # every tensor matches its checksum
        assert main(["params", "export", str(run), "--to", str(disk / "p.npz")]) in (0, 1)
    assert _leftovers(disk) == []


# -- a partial last line ---------------------------------------------------------------------------------
def _pagerank(tmp_path: Path, name: str, *extra: str) -> tuple[list[str], Path]:
    out = tmp_path / f"{name}.tsv"
    return ["run", "pagerank", "--set", f"graph={GRAPH}", "--set", f"output={out}", "--set", "tol=0",
            "--set", "iterations=40", "--run-dir", str(tmp_path / name), *extra], out


def test_resume_after_a_partial_metrics_line(tmp_path, capsys):
    argv, out = _pagerank(tmp_path, "full")
    assert main(argv) == 0
    argv, part = _pagerank(tmp_path, "cut", "--set", "checkpoint_every=7")
    assert main(argv + ["--max-supersteps", "23"]) == 0
    with open(tmp_path / "cut" / "metrics.jsonl", "a") as f:
        f.write('{"superstep": 23, "aggreg')  # a full disk cut this append short
    assert main(["trace", "summary", str(tmp_path / "cut")]) == 0
    assert main(["run", "--resume", str(tmp_path / "cut")]) == 0
    assert part.read_bytes() == out.read_bytes()
    lines = [json.loads(x) for x in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()]
    full = (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()
    assert [m["superstep"] for m in lines] == list(range(len(full)))


def test_a_damaged_line_in_the_middle_is_one_clear_error(tmp_path):
    run_dir = RunDir(str(tmp_path / "r"))
    (tmp_path / "r" / "metrics.jsonl").write_text('{"superstep": 0}\n{"super\n{"superstep": 2}\n')
    with pytest.raises(StorageError, match=r"metrics\.jsonl:2: not a JSON record"):
        run_dir.read_jsonl("metrics.jsonl")


# -- edited manifests ---------------------------------------------------------------------------------
def _checkpointed(tmp_path: Path) -> tuple[Path, list[str], Path, Path]:
    argv, out = _pagerank(tmp_path, "full")
    assert main(argv) == 0
    argv, part = _pagerank(tmp_path, "cut", "--set", "checkpoint_every=10", "--workers", "2")
    assert main(argv + ["--max-supersteps", "25"]) == 0
    return tmp_path / "cut", argv, part, out


@pytest.mark.parametrize("edit", ["no-bytes", "a-worker-removed", "bytes-a-string"])
def test_an_edited_manifest_is_invalid_and_resume_falls_back(tmp_path, edit, capsys, caplog):
    run, _, part, out = _checkpointed(tmp_path)
    path = run / "checkpoints" / "ss-000020" / "manifest.json"
    manifest = json.loads(path.read_text())
    if edit == "no-bytes":
        del manifest["parts"][0]["bytes"]
    elif edit == "bytes-a-string":
        manifest["parts"][0]["bytes"] = "12"
    else:
        manifest["parts"] = [p for p in manifest["parts"] if p["name"] != "worker-1"]
    path.write_text(json.dumps(manifest))
    info = Checkpoints(RunDir(str(run))).inspect(20)
    assert not info.valid and "manifest" in info.why
    assert main(["checkpoint", "list", "--json", str(run)]) == 0
    listed = {c["superstep"]: c for c in json.loads(capsys.readouterr().out.splitlines()[-1])}
    assert not listed[20]["valid"] and listed[10]["valid"]
    assert main(["run", "--resume", str(run)]) == 0
    assert "skipping checkpoint at superstep 20" in caplog.text
    assert part.read_bytes() == out.read_bytes()
    assert not os.path.exists(run / "checkpoints" / "ss-000020" / "worker-9.part")
