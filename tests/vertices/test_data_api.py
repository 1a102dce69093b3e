"""The data-loading API for users' own training jobs: ``open_dataset`` opens what ``data=`` names
the way the built-in jobs open it, and ``load_dataset`` loads every one of those names whole,
split as the job that trained on them split them."""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest

import mariana
from mariana.cli import main
from mariana.jobs import get_job, resolve_config
from mariana.storage import RunDir
from mariana.jobs.trainjob import dataset_of, train_source
from mariana.vertices.train.data import Dataset, load_dataset, open_dataset
from mariana.vertices.train.shards import write_shards
from mariana.vertices.train.stream import StreamedDataset

pytestmark = pytest.mark.timeout(120)


def synthetic(n: int, seed: int = 0, classes: int = 10, side: int = 10, light: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images (N, 1, side, side): class c lights row c (``light`` of 255) over noise in [0, 60)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    x = rng.integers(0, 60, (n, 1, side, side)).astype(np.uint8)
    for c in range(classes):
        x[y == c, 0, c, :] += np.uint8(light)
    return x, y


def _idx(arr: np.ndarray) -> bytes:
    return bytes([0, 0, 0x08, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.astype(np.uint8).tobytes()


@pytest.fixture
def fashion(tmp_path, monkeypatch) -> tuple[np.ndarray, np.ndarray]:
    """A small Fashion-MNIST-layout data set (IDX, gzipped) in a data directory: 320 train, 80 test."""
    monkeypatch.setenv("MARIANA_CACHE", str(tmp_path / "cache"))
    x, y = synthetic(400, light=50)  # a faint signal: a model that learns something, not everything
    root = tmp_path / "data" / "fashion-mnist"
    root.mkdir(parents=True)
    for name, arr in (("train-images-idx3-ubyte", x[:320, 0]), ("train-labels-idx1-ubyte", y[:320]),
                      ("t10k-images-idx3-ubyte", x[320:, 0]), ("t10k-labels-idx1-ubyte", y[320:])):
        (root / f"{name}.gz").write_bytes(gzip.compress(_idx(arr)))
    monkeypatch.setenv("MARIANA_DATA", str(tmp_path / "data"))
    return x, y


def test_load_dataset_opens_a_named_data_set(fashion):
    x, y = fashion
    ds = load_dataset("fashion-mnist", test_fraction=0.2, seed=0)
    assert isinstance(ds, Dataset) and ds.classes == 10 and ds.input_shape == (1, 10, 10)
    assert ds.x_train.dtype == np.float32 and ds.train_size == 320 and len(ds.x_test) == 80
    assert np.array_equal(ds.y_train, y[:320]) and np.array_equal(ds.y_test, y[320:])  # the official test set
    assert np.allclose(ds.x_train, x[:320] / 255.0) and np.allclose(ds.x_test, x[320:] / 255.0)
    raw = load_dataset("fashion-mnist", test_fraction=0.2, seed=0, raw=True)  # for an input pipeline
    assert raw.x_train.dtype == np.uint8 and raw.scale == pytest.approx(1 / 255) and raw.x_test.dtype == np.float32


def test_load_dataset_opens_shard_directories_and_globs(tmp_path):
    x, y = synthetic(300, classes=4)
    write_shards(str(tmp_path / "s"), (x[:240], y[:240]), (x[240:], y[240:]), shard_mb=0.005)
    ds = load_dataset(str(tmp_path / "s"), test_fraction=0.2, seed=0)
    assert ds.classes == 4 and np.array_equal(ds.y_train, y[:240]) and np.array_equal(ds.y_test, y[240:])
    assert np.allclose(ds.x_train, x[:240] / 255.0)
    flat = load_dataset(str(tmp_path / "s" / "train-*.npz"), test_fraction=0.25, seed=0, image_shape=(100,))
    assert flat.x_train.shape == (180, 100) and flat.x_test.shape == (60, 100)  # the last quarter is the test set
    assert np.array_equal(np.concatenate([flat.y_train, flat.y_test]), y[:240])


def test_open_dataset_is_what_the_built_in_jobs_open(fashion):
    config = resolve_config(get_job("dnn-dp"), None, ["data=fashion-mnist", "batch_size=32"])
    theirs = dataset_of(config)
    mine = open_dataset("fashion-mnist", seed=config["seed"])
    assert isinstance(mine, StreamedDataset) and mine.train_size == theirs.train_size == 320
    a, b = mine.source(config["seed"], 32, decode=True), train_source(theirs, config, decode=True)
    for step in (0, 3, 11):  # the same batches, step by step
        assert all(np.array_equal(p, q) for p, q in zip(a.rows(step, 0, 32), b.rows(step, 0, 32)))
    digits = open_dataset("digits", images=True)
    assert isinstance(digits, Dataset) and digits.input_shape == (1, 8, 8)


def test_a_model_a_job_trained_scores_on_load_dataset_what_the_job_reported(fashion, tmp_path):
    run = tmp_path / "run"
    sets = ["data=fashion-mnist", "epochs=3", "batch_size=32", "lr=0.05", 'model=["dense:32:relu", "dense:10"]']
    assert main(["run", "dnn-dp", "--run-dir", str(run), *(a for s in sets for a in ("--set", s))]) == 0
    metrics = RunDir(str(run), create=False).read_jsonl("metrics.jsonl")
    reported = [m["test_accuracy"] for m in metrics if "test_accuracy" in m][-1]
    model = mariana.load_model(str(run))
    ds = load_dataset("fashion-mnist", test_fraction=0.2, seed=0)
    mine = float((model.predict(ds.x_test).argmax(1) == ds.y_test).mean())
    assert mine == pytest.approx(reported, abs=1e-9) and 0.2 < mine < 1.0, (mine, reported)  # learned, not trivially


def test_open_dataset_says_one_line_for_a_name_it_does_not_know(tmp_path):
    from mariana.errors import UsageError

    with pytest.raises(UsageError, match="did you mean data=fashion-mnist") as info:
        open_dataset("fashion-mnst")
    assert "\n" not in str(info.value)

