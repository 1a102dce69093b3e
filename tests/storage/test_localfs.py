"""``storage.localfs``: plain paths without fsspec, with the answers of fsspec's ``LocalFileSystem``."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fsspec.implementations.local import LocalFileSystem

from mariana.storage.localfs import LOCAL, LocalFS, is_plain_path
from mariana.storage.rundir import _fs

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A folder with files at three levels, a hidden file and folder, an empty folder, a gzip file."""
    (tmp_path / "a" / "b" / "c").mkdir(parents=True)
    (tmp_path / ".hidden").mkdir()
    (tmp_path / "empty").mkdir()
    for rel, text in (("x.e", "1 2\n"), ("y.e", "2 3\n3 4\n"), ("a/z.e", "5 6\n"), ("a/b/w.txt", "w"),
                      ("a/b/c/deep.e", "7 8\n"), (".dot.e", "9 9\n"), (".hidden/h.e", "h")):
        (tmp_path / rel).write_text(text)
    (tmp_path / "g.e.gz").write_bytes(gzip.compress(b"1 2\n"))
    return tmp_path


def test_paths_are_stripped_as_fsspec_strips_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ref = LocalFileSystem()
    for p in ("runs/x", "runs/x/", "./runs", ".", "/abs/path/", "~/data", "a//b", "/"):
        assert LOCAL.strip(p) == ref._strip_protocol(p), p
    assert LOCAL.unstrip_protocol("runs") == ref.unstrip_protocol("runs")


def test_plain_paths_and_urls():
    assert is_plain_path("runs/x") and is_plain_path("/tmp/g.e") and is_plain_path("C-drive/x:y")
    for url in ("s3://b/k", "memory://x", "file:///tmp/x", "file:x", "local:x", "simplecache::s3://b/k"):
        assert not is_plain_path(url), url


def test_a_plain_path_or_file_url_opens_on_localfs_and_other_urls_on_fsspec(tmp_path):
    fs, path = _fs(str(tmp_path / "x"))
    assert fs is LOCAL and path == str(tmp_path / "x")
    fs, path = _fs(f"file://{tmp_path}/x")
    assert fs is LOCAL and path == str(tmp_path / "x")
    fs, path = _fs("memory://m/x")
    assert not isinstance(fs, LocalFS) and "memory" in fs.protocol


def test_listings_and_reads_match_fsspec(tree):
    ref, root = LocalFileSystem(), str(tree)
    assert sorted(LOCAL.ls(root)) == sorted(ref.ls(root, detail=False))
    assert LOCAL.ls(f"{root}/x.e") == ref.ls(f"{root}/x.e", detail=False)
    for p in (root, f"{root}/x.e"):  # fsspec's entries: name, size, file or directory
        entries = [(d["name"], d["size"], d["type"]) for d in LOCAL.ls(p, detail=True)]
        assert sorted(entries) == sorted((d["name"], d["size"], d["type"]) for d in ref.ls(p, detail=True)), p
    with pytest.raises(FileNotFoundError):
        LOCAL.ls(f"{root}/missing")
    for depth in (None, 1, 2, 3):
        assert LOCAL.find(root, maxdepth=depth) == sorted(ref.find(root, maxdepth=depth)), depth
    assert LOCAL.find(f"{root}/x.e") == ref.find(f"{root}/x.e") and LOCAL.find(f"{root}/missing") == []
    for pattern in ("*.e", "a/*", "**/*.e", "a/**/*.e", "?.e", "[xy].e", "a/b/c/deep.e", "none*"):
        assert LOCAL.glob(f"{root}/{pattern}") == sorted(ref.glob(f"{root}/{pattern}")), pattern
    for rel in ("x.e", "a", "missing", "empty"):
        p = f"{root}/{rel}"
        assert (LOCAL.exists(p), LOCAL.isdir(p)) == (ref.exists(p), ref.isdir(p)), rel
    assert LOCAL.size(f"{root}/y.e") == ref.size(f"{root}/y.e") == 8
    for start, end in ((None, None), (2, None), (None, 3), (2, 6), (-4, None), (1, -2), (5, 100)):
        assert LOCAL.cat_file(f"{root}/y.e", start, end) == ref.cat_file(f"{root}/y.e", start, end), (start, end)
    with LOCAL.open(f"{root}/g.e.gz", "rb", compression="gzip") as f:
        assert f.read() == b"1 2\n"
    with LOCAL.open(f"{root}/y.e", "rt", encoding="utf-8") as f:
        assert f.read() == "2 3\n3 4\n"


def test_writes_moves_and_removals(tree):
    root = str(tree)
    LOCAL.makedirs(f"{root}/new/deeper", exist_ok=True)
    LOCAL.makedirs(f"{root}/new/deeper", exist_ok=True)
    with pytest.raises(FileExistsError):
        LOCAL.makedirs(f"{root}/new/deeper")
    LOCAL.pipe_file(f"{root}/new/p.bin", b"\x00\x01")
    assert (tree / "new" / "p.bin").read_bytes() == b"\x00\x01"
    LOCAL.mv(f"{root}/new/p.bin", f"{root}/new/deeper/q.bin")
    assert not (tree / "new" / "p.bin").exists() and (tree / "new/deeper/q.bin").read_bytes() == b"\x00\x01"
    with pytest.raises(ValueError, match="recursive"):
        LOCAL.rm(f"{root}/new")
    LOCAL.rm(f"{root}/x.e")
    LOCAL.rm(f"{root}/new", recursive=True)
    assert not (tree / "x.e").exists() and not (tree / "new").exists()
    with pytest.raises(FileNotFoundError):
        LOCAL.rm(f"{root}/x.e")


@pytest.mark.parametrize("workers", [1, 2])
def test_a_job_on_local_files_imports_neither_fsspec_nor_asyncio(tmp_path, workers):
    """The CLI, a job (one worker: the local runtime; two: a cluster without CURVE) and its run
    directory and output on local paths: no fsspec, nor the asyncio and ssl that it and zmq's
    authenticator bring (~10 MB and ~50 ms of every process); ``job.json`` still names fsspec's version."""
    graph = tmp_path / "g.e"
    graph.write_text("1 2\n2 3\n3 1\n")
    code = "\n".join([
        "import sys",
        "from mariana.cli import main",
        f"rc = main(['run', 'pagerank', '--set', 'graph={graph}', '--set', 'output={tmp_path}/out/',"
        f" '--run-dir', '{tmp_path}/run', '--workers', '{workers}'])",
        "print(rc, sorted(m for m in ('fsspec', 'asyncio', 'ssl', 'zmq') if m in sys.modules))",
    ])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env,
                         cwd=tmp_path)
    # (one worker: not even zmq, which job.json's versions imported before)
    assert out.stdout.split("\n")[-2] == ("0 []" if workers == 1 else "0 ['zmq']"), out.stdout + out.stderr
    assert '"fsspec": "' in (tmp_path / "run" / "job.json").read_text()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [f"part-{i:05d}.tsv" for i in range(workers)]
