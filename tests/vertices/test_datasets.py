"""Sharded data sets: the shard format and index, ``mariana data``, IDX and CIFAR sources, named data
sets (found in data directories or downloaded from a loopback HTTP server), the streamed sample
order, and bad input refused with one line."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import json
import struct
import threading
from pathlib import Path

import numpy as np
import pytest

from mariana.cli import main
from mariana.vertices.train import named
from mariana.vertices.train.named import NamedDataset, NamedFile, get_files
from mariana.vertices.train.shards import DataError, open_shards, read_idx, write_shards
from mariana.vertices.train.stream import StreamOrder, StreamSource


def synthetic(n: int, seed: int = 0, classes: int = 4, side: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """Separable uint8 images (N, 1, side, side): class c lights row c, plus noise."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    x = rng.integers(0, 60, (n, 1, side, side)).astype(np.uint8)
    for c in range(classes):
        x[y == c, 0, c, :] = 200
    return x, y


@pytest.fixture(scope="module")
def shard_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("shards")
    write_shards(str(d), synthetic(960), synthetic(240, seed=1), shard_mb=0.01, shuffle_seed=None, source="test")
    return d


def test_shards_round_trip_through_the_index_and_byte_ranges(shard_dir):
    index = json.loads((shard_dir / "index.json").read_text())
    assert index["x_shape"] == [1, 6, 6] and index["x_dtype"] == "uint8" and index["classes"] == 4
    entries = index["splits"]["train"]
    assert len(entries) > 3 and sum(e["samples"] for e in entries) == 960
    for e in entries:  # the index's sha256 and size are the file's
        blob = (shard_dir / e["file"]).read_bytes()
        assert hashlib.sha256(blob).hexdigest() == e["sha256"] and len(blob) == e["bytes"]
        with np.load(shard_dir / e["file"]) as npz:  # plain .npz: numpy reads it as it is
            assert npz["x"].dtype == np.uint8 and len(npz["y"]) == e["samples"]
    ss = open_shards(str(shard_dir))
    x_all, y_all = synthetic(960)
    x, y = ss.train.read_rows(1, 3, 9)  # rows 3..8 of shard 1: one byte range each
    first = entries[0]["samples"]
    assert x.dtype == np.uint8 and np.array_equal(x, x_all[first + 3:first + 9]) and np.array_equal(y, y_all[first + 3:first + 9])
    assert ss.test is not None and ss.test.size == 240


def test_mariana_data_shard_from_npz_idx_and_cifar(tmp_path, capsys):
    x, y = synthetic(300)
    np.savez(tmp_path / "d.npz", x=x, y=y)
    assert main(["data", "shard", str(tmp_path / "d.npz"), "--to", str(tmp_path / "s"), "--shard-mb", "0.005",
                 "--shuffle-seed", "3", "--test-fraction", "0.2"]) == 0
    ss = open_shards(str(tmp_path / "s"))
    assert ss.train.size == 240 and ss.test.size == 60 and len(ss.train.shards) > 1
    # IDX, gzipped and not
    idx = tmp_path / "idx"
    idx.mkdir()
    for name, arr, gz in (("train-images-idx3-ubyte", x[:, 0], True), ("train-labels-idx1-ubyte", y.astype(np.uint8), False),
                          ("t10k-images-idx3-ubyte", x[:50, 0], True), ("t10k-labels-idx1-ubyte", y[:50].astype(np.uint8), True)):
        blob = _idx_bytes(arr)
        (idx / (name + (".gz" if gz else ""))).write_bytes(gzip.compress(blob) if gz else blob)
    assert np.array_equal(read_idx(str(idx / "train-images-idx3-ubyte.gz")), x[:, 0])
    assert main(["data", "shard", str(idx), "--to", str(tmp_path / "i")]) == 0
    ss = open_shards(str(tmp_path / "i"))
    assert ss.input_shape == (1, 6, 6) and ss.train.size == 300 and ss.test.size == 50
    # CIFAR-10 binary batches: 1 label byte + 3072 pixel bytes
    cif = tmp_path / "cifar"
    cif.mkdir()
    rng = np.random.default_rng(0)
    for name, n in (("data_batch_1.bin", 20), ("data_batch_2.bin", 10), ("test_batch.bin", 5)):
        rec = rng.integers(0, 256, (n, 3073)).astype(np.uint8)
        rec[:, 0] %= 10
        (cif / name).write_bytes(rec.tobytes())
    assert main(["data", "shard", str(cif), "--to", str(tmp_path / "c"), "--json"]) == 0
    ss = open_shards(str(tmp_path / "c"))
    assert ss.input_shape == (3, 32, 32) and ss.train.size == 30 and ss.test.size == 5
    assert main(["data", "info", str(tmp_path / "c")]) == 0
    assert "every sha256 matches" in capsys.readouterr().out


def _idx_bytes(arr: np.ndarray) -> bytes:
    return bytes([0, 0, 0x08, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.astype(np.uint8).tobytes()


def _copy(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for p in src.iterdir():
        (dst / p.name).write_bytes(p.read_bytes())
    return dst


def _run_refused(argv_data: str, capsys, tmp_path, *extra: str) -> str:
    run = tmp_path / "run"
    argv = ["run", "dnn-dp", "--run-dir", str(run), "--set", f"data={argv_data}", "--set", "batch_size=32",
            "--set", "epochs=1", *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mariana: error:") and "\n" not in err and "Traceback" not in err, err
    assert not (run / "metrics.jsonl").exists()  # refused before training started
    return err


@pytest.mark.parametrize("damage,needle", [
    ("flip", "does not match the index"),
    ("truncate", "truncated or replaced"),
    ("missing", "no such file"),
    ("index", "not a readable index"),
])
def test_damaged_shards_are_refused_before_training(tmp_path, capsys, shard_dir, damage, needle):
    d = _copy(shard_dir, tmp_path / "d")
    target = d / "train-00001.npz"
    if damage == "flip":
        blob = bytearray(target.read_bytes())
        blob[len(blob) // 2] ^= 1
        target.write_bytes(bytes(blob))
    elif damage == "truncate":
        target.write_bytes(target.read_bytes()[:-10])
    elif damage == "missing":
        target.unlink()
    else:
        (d / "index.json").write_text("{not json")
    err = _run_refused(str(d), capsys, tmp_path)
    assert needle in err and (damage == "index" or "train-00001.npz" in err), err


def test_unindexed_shards_that_disagree_or_are_unreadable_are_refused(tmp_path, capsys):
    x, y = synthetic(100)
    np.savez(tmp_path / "a.npz", x=x, y=y)
    np.savez(tmp_path / "b.npz", x=x[:, :, :4, :4].copy(), y=y)
    err = _run_refused(str(tmp_path / "*.npz"), capsys, tmp_path)
    assert "every shard must agree" in err and "b.npz" in err
    (tmp_path / "b.npz").write_bytes(b"PK\x03\x04 not really a zip")
    err = _run_refused(f"{tmp_path / 'a.npz'},{tmp_path / 'b.npz'}", capsys, tmp_path)
    assert "not a readable .npz" in err and "b.npz" in err


def test_a_named_data_set_whose_files_are_missing_says_how_to_get_them(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MARIANA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(named, "SYSTEM_DIR", str(tmp_path / "system"))
    err = _run_refused("mnist", capsys, tmp_path, "--data-dir", str(tmp_path / "empty"))
    assert "data set mnist" in err and "--data-dir" in err and "download=true" in err and str(tmp_path / "empty") in err
    err = _run_refused("fashion-mnist", capsys, tmp_path)
    assert "apt-get install dataset-fashion-mnist" in err


def test_a_named_data_set_is_found_in_a_data_dir_and_sharded_once(tmp_path, monkeypatch):
    monkeypatch.setenv("MARIANA_CACHE", str(tmp_path / "cache"))
    x, y = synthetic(120)
    root = tmp_path / "data" / "mnist"
    root.mkdir(parents=True)
    for name, arr in (("train-images-idx3-ubyte", x[:100, 0]), ("train-labels-idx1-ubyte", y[:100]),
                      ("t10k-images-idx3-ubyte", x[100:, 0]), ("t10k-labels-idx1-ubyte", y[100:])):
        (root / f"{name}.gz").write_bytes(gzip.compress(_idx_bytes(arr)))
    monkeypatch.setenv("MARIANA_DATA", str(tmp_path / "data"))
    first = named.named_shards("mnist")
    assert named.named_shards("mnist") == first  # cached
    ss = open_shards(first)
    assert ss.train.size == 100 and ss.test.size == 20 and ss.classes == 10


class _Files(http.server.BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}

    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        blob = self.files.get(self.path)
        if blob is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(blob)))
        self.end_headers()
        self.wfile.write(blob)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Files)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_download_checks_the_published_checksum_and_shows_progress(tmp_path, monkeypatch, capsys, http_server):
    server, base = http_server
    monkeypatch.setenv("MARIANA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(named, "SYSTEM_DIR", str(tmp_path / "system"))
    x, y = synthetic(80)
    blobs = {"train-images-idx3-ubyte.gz": gzip.compress(_idx_bytes(x[:60, 0])),
             "train-labels-idx1-ubyte.gz": gzip.compress(_idx_bytes(y[:60])),
             "t10k-images-idx3-ubyte.gz": gzip.compress(_idx_bytes(x[60:, 0])),
             "t10k-labels-idx1-ubyte.gz": gzip.compress(_idx_bytes(y[60:]))}
    _Files.files = {f"/tiny/{k}": v for k, v in blobs.items()}
    files = tuple(NamedFile(k, (f"{base}/missing/{k}", f"{base}/tiny/{k}"), "sha256:" + hashlib.sha256(v).hexdigest())
                  for k, v in blobs.items())
    monkeypatch.setitem(named.DATASETS, "tiny", NamedDataset("tiny", "idx", files, named._IDX_NEEDED))
    with pytest.raises(DataError, match="allow the download"):
        get_files("tiny")
    where = get_files("tiny", download=True)  # the first address 404s, the second serves
    assert where == tmp_path / "cache" / "datasets" / "tiny"
    assert "downloading tiny/train-images-idx3-ubyte.gz" in capsys.readouterr().err
    assert main(["run", "dnn-dp", "--set", "data=tiny", "--set", "batch_size=20", "--set", "epochs=2",
                 "--run-dir", str(tmp_path / "run")]) == 0
    # a mirror serving other bytes than the published ones: refused, nothing kept
    _Files.files = {f"/mnist/{k}": v for k, v in blobs.items()}
    monkeypatch.setenv("MARIANA_DATA_MIRROR", base)
    assert main(["data", "get", "mnist"]) == 2
    err = capsys.readouterr().err
    assert "does not match the published" in err and "Traceback" not in err
    assert not (tmp_path / "cache" / "datasets" / "mnist" / "train-images-idx3-ubyte.gz").exists()


def test_the_stream_order_trains_every_sample_once_per_epoch_however_the_batch_is_split(shard_dir):
    ss = open_shards(str(shard_dir))
    B = 32
    order = StreamOrder(ss.train, seed=5, global_batch=B, buffer=100)
    assert order.W == 128 and order.steps_per_epoch == 30
    for epoch in range(2):
        seen = np.concatenate([order.batch_ids(epoch * 30 + k) for k in range(30)])
        assert np.array_equal(np.sort(seen), np.arange(960))  # every sample once
    assert not np.array_equal(order.batch_ids(0), order.batch_ids(30))  # epochs differ
    whole = StreamSource(ss.train, 5, B, 100, None, prefetch=False)
    halves = [StreamSource(ss.train, 5, B, 100, None, prefetch=False) for _ in range(2)]
    for step in (0, 5, 31, 59):
        x, y, pos = whole.rows(step, 0, B)
        parts = [h.rows(step, r * 16, 16) for r, h in enumerate(halves)]
        assert np.array_equal(np.concatenate([p[0] for p in parts]), x) and np.array_equal(np.concatenate([p[1] for p in parts]), y)
        assert np.array_equal(pos, np.arange(B))
    # each half read about half the bytes the whole batch's reader read
    assert all(h.bytes_read < 0.75 * whole.bytes_read for h in halves), (whole.bytes_read, [h.bytes_read for h in halves])


def test_npy_and_compressed_npz_shards_without_an_index(tmp_path):
    x, y = synthetic(200)
    rec = np.zeros(100, dtype=[("x", np.uint8, (1, 6, 6)), ("y", np.int64)])
    rec["x"], rec["y"] = x[:100], y[:100]
    np.save(tmp_path / "part-0.npy", rec)  # one structured array: byte ranges of records
    np.savez_compressed(tmp_path / "part-1.npz", x=x[100:], y=y[100:])  # deflated: read whole
    ss = open_shards(str(tmp_path / "part-*"), test_fraction=0.25)
    assert ss.train.size == 150 and ss.test.size == 50 and ss.input_shape == (1, 6, 6)
    got = [ss.train.read_rows(i, lo, hi) for i, lo, hi in ss.train.segments]
    assert np.array_equal(np.concatenate([g[0] for g in got]), x[:150])
    assert np.array_equal(np.concatenate([g[1] for g in got]), y[:150])


def test_shards_on_an_fsspec_url_train_like_local_ones(tmp_path):
    import fsspec

    x, y = synthetic(320)
    write_shards("memory://mariana-test/shards", (x[:256], y[:256]), (x[256:], y[256:]), shard_mb=0.003)
    try:
        ss = open_shards("memory://mariana-test/shards")
        assert ss.train.size == 256 and len(ss.train.shards) > 2 and ss.train.shards[0].url.startswith("memory://")
        src = StreamSource(ss.train, 1, 32, 64, None, prefetch=False)
        got = np.concatenate([src.rows(s, 0, 32)[1] for s in range(8)])
        assert np.array_equal(np.sort(src.order.batch_ids(0)), src.order.batch_ids(0))
        assert np.array_equal(np.bincount(got, minlength=4), np.bincount(y[:256], minlength=4))  # one epoch
        ahead = StreamSource(ss.train, 1, 32, 64, None)  # off the local disk: the next window on a thread
        assert ahead.prefetch and not StreamSource(open_shards(str(tmp_path_shards(tmp_path))).train, 1, 32, 64, None).prefetch
        for s in range(12):  # the same rows, prefetched or not
            assert all(np.array_equal(a, b) for a, b in zip(ahead.rows(s, 0, 32), src.rows(s, 0, 32)))
    finally:
        fsspec.filesystem("memory").rm("/mariana-test", recursive=True)


def test_cifar10_by_name_from_its_batches_in_a_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("MARIANA_CACHE", str(tmp_path / "cache"))
    batches = tmp_path / "data" / "cifar10" / "cifar-10-batches-bin"
    batches.mkdir(parents=True)
    rng = np.random.default_rng(1)
    for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
        rec = rng.integers(0, 256, (4, 3073)).astype(np.uint8)
        rec[:, 0] %= 10
        (batches / name).write_bytes(rec.tobytes())
    monkeypatch.setenv("MARIANA_DATA", str(tmp_path / "data"))
    ss = open_shards(named.named_shards("cifar10"))
    assert ss.train.size == 20 and ss.test.size == 4 and ss.input_shape == (3, 32, 32) and ss.classes == 10
    first = np.frombuffer((batches / "data_batch_1.bin").read_bytes(), np.uint8).reshape(-1, 3073)[0]
    x, y = ss.train.read_rows(0, 0, 1)
    assert y[0] == first[0] and np.array_equal(x[0].ravel(), first[1:])


def tmp_path_shards(tmp_path: Path) -> Path:
    d = tmp_path / "local"
    if not d.exists():
        write_shards(str(d), synthetic(64), None, shard_mb=0.01)
    return d
