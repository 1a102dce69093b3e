"""A shard index is checked against the shards before training: every field against the shard's
own arrays, every label against the number of classes; and the index is the commit point of
``mariana data shard`` (a directory without one is refused; a rerun replaces what was left)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

from mariana.cli import main
from mariana.vertices.train.shards import open_shards, write_shards

pytestmark = pytest.mark.timeout(120)


def synthetic(n: int, seed: int = 0, classes: int = 4, side: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """Separable uint8 images (N, 1, side, side): class c lights row c % side, plus noise."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    x = rng.integers(0, 60, (n, 1, side, side)).astype(np.uint8)
    for c in range(classes):
        x[y == c, 0, c % side, :] = 200
    return x, y


@pytest.fixture(scope="module")
def shard_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("shards")
    write_shards(str(d), synthetic(960), synthetic(240, seed=1), shard_mb=0.01, source="test")
    return d


def _copy(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for p in src.iterdir():
        (dst / p.name).write_bytes(p.read_bytes())
    return dst


def _edit(d: Path, change: Callable[[dict[str, Any]], None]) -> None:
    index = json.loads((d / "index.json").read_text())
    change(index)
    (d / "index.json").write_text(json.dumps(index))


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("mariana: error:") and "\n" not in err and "Traceback" not in err, err
    return err


def _run_refused(data: str, capsys, tmp_path: Path, *sets: str, outputs: int = 4) -> str:
    """``mariana run dnn-dp`` on ``data`` with a model of ``outputs`` classes (so that nothing but
    the data could stop it): exit 2, one line, no training step run."""
    run = tmp_path / "run"
    argv = ["run", "dnn-dp", "--run-dir", str(run), "--set", f"data={data}", "--set", "batch_size=32",
            "--set", "epochs=1", "--set", f'model=["dense:16:relu", "dense:{outputs}"]',
            *(a for s in sets for a in ("--set", s))]
    assert main(argv) == 2
    err = _one_error_line(capsys)
    assert not (run / "metrics.jsonl").exists()  # refused before training started
    return err


def _entry(i: int, split: str = "train") -> Callable[[Callable[[dict[str, Any]], None]], Callable[[dict[str, Any]], None]]:
    def wrap(change: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
        return lambda index: change(index["splits"][split][i])
    return wrap


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda e: e.__setitem__(key, value(e[key]) if callable(value) else value)


LIES = {  # what the index says wrongly -> what the one line must name
    "x_offset one row late": (_entry(1)(_set("x_offset", lambda v: v + 36)), ("x_offset", "train-00001.npz")),
    "y_offset one label late": (_entry(1)(_set("y_offset", lambda v: v + 8)), ("y_offset", "train-00001.npz")),
    "too few samples": (_entry(2)(_set("samples", lambda v: v - 5)), ("samples", "train-00002.npz")),
    "too many samples": (_entry(0, "test")(_set("samples", lambda v: v + 1)), ("samples", "test-00000.npz")),
    "x_shape flattened": (_set("x_shape", [36]), ("x_shape", "[36]")),
    "x_dtype float32": (_set("x_dtype", "float32"), ("float32", "uint8")),
    "y_dtype int32": (_set("y_dtype", "int32"), ("y_dtype", "int32")),
    "y_dtype not integer": (_set("y_dtype", "float64"), ("y_dtype", "integer")),
    "a shard listed twice": (lambda ix: ix["splits"]["train"].append(dict(ix["splits"]["train"][0])),
                             ("listed twice", "train-00000.npz")),
    "a file outside the directory": (_entry(0)(_set("file", "../elsewhere.npz")), ("file", "elsewhere.npz")),
    "samples not a number": (_entry(0)(_set("samples", "many")), ("samples", "'many'")),
    "a malformed sha256": (_entry(0)(_set("sha256", "abc")), ("sha256", "'abc'")),
    "an unknown split": (lambda ix: ix["splits"].__setitem__("validation", []), ("unknown split", "validation")),
    "another version": (_set("version", 2), ("version", "2")),
    "fewer classes than labels": (_set("classes", 3), ("label 3", "out of range for 3 classes", "says classes 3")),
}


@pytest.mark.parametrize("verify", ["true", "false"])
@pytest.mark.parametrize("lie", list(LIES))
def test_an_index_that_disagrees_with_its_shards_is_one_line_before_training(tmp_path, capsys, shard_dir, lie, verify):
    d = _copy(shard_dir, tmp_path / "d")
    change, needles = LIES[lie]
    _edit(d, change)
    err = _run_refused(str(d), capsys, tmp_path, f"verify_data={verify}")
    assert all(n in err for n in needles), err
    assert main(["data", "info", str(d), "--no-verify"]) == 2  # and `data info` says the same
    assert _one_error_line(capsys) == err


def _rewrite_label(d: Path, file: str, row: int, label: int) -> None:
    """Put ``label`` at ``row`` of a shard's y (the shard rewritten as a valid .npz) and its new
    sha256 into the index: an index consistent with its files, whose labels are wrong."""
    index = json.loads((d / "index.json").read_text())
    entry = next(e for s in index["splits"].values() for e in s if e["file"] == file)
    with np.load(d / file) as npz:
        x, y = npz["x"], npz["y"].copy()
    y[row] = label
    buf = io.BytesIO()
    np.savez(buf, x=x, y=y)  # the same shapes and dtypes: the same size and offsets
    blob = buf.getvalue()
    assert len(blob) == entry["bytes"]
    (d / file).write_bytes(blob)
    entry["sha256"] = hashlib.sha256(blob).hexdigest()
    (d / "index.json").write_text(json.dumps(index))


def test_labels_out_of_range_for_the_classes_are_one_line_before_training(tmp_path, capsys):
    d = tmp_path / "sixteen"
    write_shards(str(d), synthetic(640, classes=16), synthetic(64, seed=1, classes=16), shard_mb=0.01)
    x, y = synthetic(640, classes=16)
    first = int(np.flatnonzero(y >= 10)[0])  # the first label out of range, in storage order (no shuffle)
    _edit(d, _set("classes", 10))  # the index says 10 classes: labels 10..15 would index past the logits
    err = _run_refused(str(d), capsys, tmp_path, outputs=10)
    per = json.loads((d / "index.json").read_text())["splits"]["train"][0]["samples"]
    assert f"label {y[first]} at row {first % per} is out of range for 10 classes" in err, err
    assert f"train-{first // per:05d}.npz" in err and "index.json says classes 10" in err, err
    # an index that says nothing wrong, the config asking for fewer classes than the labels hold
    _edit(d, _set("classes", 16))
    err = _run_refused(str(d), capsys, tmp_path, "classes=12", outputs=12)
    assert "out of range for 12 classes" in err and "config key 'classes'" in err, err


def test_a_negative_label_is_one_line_before_training(tmp_path, capsys, shard_dir):
    d = _copy(shard_dir, tmp_path / "d")
    _rewrite_label(d, "train-00001.npz", 2, -7)
    err = _run_refused(str(d), capsys, tmp_path)
    assert "label -7 at row 2" in err and "train-00001.npz" in err, err
    # shards without an index, named by a glob, with the classes given: the same check
    err = _run_refused(str(d / "*.npz"), capsys, tmp_path, "classes=4")
    assert "label -7 at row 2" in err and "train-00001.npz" in err, err


def test_the_writer_refuses_labels_beyond_the_classes_it_is_given(tmp_path):
    from mariana.vertices.train.shards import DataError

    with pytest.raises(DataError, match="label 15 is out of range for 10 classes"):
        write_shards(str(tmp_path / "s"), synthetic(100, classes=16), None, classes=10)
    assert not (tmp_path / "s" / "index.json").exists()


# -- the index is the commit point --------------------------------------------------------------------
_KILLED_WRITER = """
import resource, signal, sys
from mariana.cli import main
# a file may grow to LIMIT bytes: the shards fit, the index (an entry per shard) does not; the
# kernel then kills the process in the middle of that write (SIGXFSZ, which Python ignores)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))
signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
main(sys.argv[2:])
"""


def test_an_interrupted_data_shard_leaves_no_data_set_and_a_rerun_replaces_its_leftovers(tmp_path, capsys):
    x, y = synthetic(960)
    np.savez(tmp_path / "src.npz", x=x, y=y, x_test=x[:96], y_test=y[:96])
    d = tmp_path / "shards"
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([sys.executable, "-c", _KILLED_WRITER, "4096", "data", "shard", str(tmp_path / "src.npz"),
                           "--to", str(d), "--shard-mb", "0.002"], env=env, capture_output=True, text=True, timeout=90)
    assert proc.returncode == -signal.SIGXFSZ, (proc.returncode, proc.stderr)
    left = sorted(p.name for p in d.iterdir())
    shards = [n for n in left if n.endswith(".npz")]
    assert len(shards) > 20 and "index.json" not in left, left  # every shard there, the index cut off mid-write
    assert any(n.startswith(".index.json.") and n.endswith(".tmp") for n in left), left
    # no index, no data set: `data info` and training refuse it with one line
    assert main(["data", "info", str(d)]) == 2
    err = _one_error_line(capsys)
    assert str(d) in err and "no index.json" in err and "mariana data shard" in err, err
    err = _run_refused(str(d), capsys, tmp_path)
    assert str(d) in err and "no index.json" in err, err
    # a rerun into the same directory: fewer, larger shards; nothing of the first attempt is left
    keep = d / "notes.txt"
    keep.write_text("not the writer's: left alone")
    assert main(["data", "shard", str(tmp_path / "src.npz"), "--to", str(d), "--shard-mb", "0.02"]) == 0
    capsys.readouterr()
    index = json.loads((d / "index.json").read_text())
    listed = sorted(e["file"] for s in index["splits"].values() for e in s)
    assert sorted(p.name for p in d.iterdir()) == sorted([*listed, "index.json", "notes.txt"])
    assert len(listed) < len(shards) and keep.read_text().startswith("not the writer's")
    ss = open_shards(str(d))
    assert ss.train.size == 960 and ss.test.size == 96
    assert main(["data", "info", str(d)]) == 0
    assert "every sha256 matches" in capsys.readouterr().out


def test_data_info_on_shards_without_an_index_does_not_claim_a_checksum(tmp_path, capsys, shard_dir):
    assert main(["data", "info", str(shard_dir / "train-*.npz")]) == 0
    out = capsys.readouterr().out
    assert "sha256 matches" not in out and "no index" in out, out
