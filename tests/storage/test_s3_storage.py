"""mariana.storage against a real S3 server (SeaweedFS on 127.0.0.1, see tests/s3_fixture.py).

Each test gets a fresh bucket (``s3_url``); the CLI tests run ``python -m mariana`` in a
subprocess that finds the server through the environment ``s3_url`` sets.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys

import numpy as np
import pytest
from s3_fixture import list_keys

from mariana import StorageError
from mariana.storage import RunDir, load_params, read_bytes, read_text, save_params, write_bytes, write_text

CLI_TIMEOUT_S = 90  # each subprocess; the test itself has 120 s


def _cli(*args: str, cwd) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "mariana", *args], cwd=cwd, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    assert proc.returncode == 0, (f"mariana {' '.join(args)} exited {proc.returncode}\n"
                                  f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}")
    return proc


@pytest.mark.timeout(120)
def test_server_requires_credentials(s3_server, s3_url):
    """The fixture's identity is what lets s3fs in: anonymous and wrong-secret requests are refused."""
    import s3fs

    write_bytes(f"{s3_url}/secret.txt", b"x")
    bucket = s3_url[len("s3://"):]
    anon = s3fs.S3FileSystem(anon=True, endpoint_url=s3_server.endpoint_url, skip_instance_cache=True,
                             config_kwargs={"retries": {"max_attempts": 1}})
    wrong = s3fs.S3FileSystem(key=s3_server.access_key, secret="not-the-secret", skip_instance_cache=True,
                              endpoint_url=s3_server.endpoint_url, config_kwargs={"retries": {"max_attempts": 1}})
    for fs in (anon, wrong):
        fs.retries = 1
        with pytest.raises(PermissionError):
            fs.cat_file(f"{bucket}/secret.txt")
    assert read_bytes(f"{s3_url}/secret.txt") == b"x"


@pytest.mark.timeout(120)
def test_rundir_json_and_bytes(s3_url):
    rd = RunDir(f"{s3_url}/run")
    doc = {"job": "pagerank", "config": {"damping": 0.85, "graph": None}, "name": "zürich ✓", "n": [1, 2, 3]}
    rd.write_json("job.json", doc)
    assert rd.read_json("job.json") == doc
    rd.write_json("job.json", {**doc, "status": "finished"})  # a rewrite replaces the whole object
    assert rd.read_json("job.json") == {**doc, "status": "finished"}

    blob = bytes(range(256)) * 1000
    rd.write_bytes("trace/worker-0.bin", blob)
    assert rd.read_bytes("trace/worker-0.bin") == blob
    rd.write_bytes("empty.bin", b"")
    assert rd.read_bytes("empty.bin") == b""

    # a single PUT per document: no temp objects next to them
    assert list_keys(s3_url) == ["run/empty.bin", "run/job.json", "run/trace/worker-0.bin"]
    # and a second RunDir (another process, later) sees the same
    again = RunDir(f"{s3_url}/run")
    assert again.read_json("job.json")["status"] == "finished"
    assert again.read_bytes("trace/worker-0.bin") == blob


@pytest.mark.timeout(120)
def test_rundir_exists_and_missing(s3_url):
    rd = RunDir(f"{s3_url}/run")
    assert not rd.exists("job.json")
    assert not rd.exists("params/index.json")
    rd.write_json("job.json", {"a": 1})
    rd.write_bytes("params/index.json", b"{}")
    assert rd.exists("job.json")
    assert rd.exists("params/index.json")
    assert not rd.exists("params/other.json")
    with pytest.raises(StorageError, match="no such file"):
        rd.read_bytes("missing.bin")
    with pytest.raises(StorageError, match="no such file"):
        rd.read_json("params/missing.json")


@pytest.mark.timeout(120)
def test_rundir_append_jsonl_accumulates(s3_url):
    """Object stores cannot append: RunDir rewrites the object with every line so far."""
    rd = RunDir(f"{s3_url}/run")
    rd.append_jsonl("metrics.jsonl", [{"superstep": 0, "active": 5}])
    assert rd.read_jsonl("metrics.jsonl") == [{"superstep": 0, "active": 5}]
    rd.append_jsonl("metrics.jsonl", [{"superstep": 1, "active": 3}, {"superstep": 2, "active": 1}])
    rd.append_jsonl("metrics.jsonl", [])  # nothing to add: no change
    rd.append_jsonl("metrics.jsonl", [{"superstep": 3, "active": 0, "note": "ünïcode"}])
    rd.append_jsonl("trace/worker-0.jsonl", [{"w": 0}])  # a second file, in a "subdirectory"
    rd.append_jsonl("trace/worker-0.jsonl", [{"w": 1}])

    expected = [{"superstep": 0, "active": 5}, {"superstep": 1, "active": 3}, {"superstep": 2, "active": 1},
                {"superstep": 3, "active": 0, "note": "ünïcode"}]
    assert rd.read_jsonl("metrics.jsonl") == expected
    assert RunDir(f"{s3_url}/run").read_jsonl("metrics.jsonl") == expected  # as a new reader sees it
    raw = read_bytes(f"{s3_url}/run/metrics.jsonl").decode()
    assert raw.endswith("\n") and [json.loads(x) for x in raw.splitlines()] == expected
    assert rd.read_jsonl("trace/worker-0.jsonl") == [{"w": 0}, {"w": 1}]
    assert list_keys(s3_url) == ["run/metrics.jsonl", "run/trace/worker-0.jsonl"]


@pytest.mark.timeout(120)
def test_rundir_append_jsonl_from_a_second_rundir_keeps_earlier_lines(s3_url):
    RunDir(f"{s3_url}/run").append_jsonl("metrics.jsonl", [{"superstep": 0}])
    RunDir(f"{s3_url}/run").append_jsonl("metrics.jsonl", [{"superstep": 1}])
    assert RunDir(f"{s3_url}/run").read_jsonl("metrics.jsonl") == [{"superstep": 0}, {"superstep": 1}]


@pytest.mark.timeout(120)
def test_read_write_text_and_bytes_at_s3_urls(s3_url):
    text = "vertex\tvalue\nzürich\t0.038\n€ ✓\n"
    write_text(f"{s3_url}/out/ranks.tsv", text)
    assert read_text(f"{s3_url}/out/ranks.tsv") == text
    assert read_bytes(f"{s3_url}/out/ranks.tsv") == text.encode("utf-8")

    data = np.arange(1000, dtype=np.float64).tobytes()
    write_bytes(f"{s3_url}/blob.bin", data)
    assert read_bytes(f"{s3_url}/blob.bin") == data
    write_bytes(f"{s3_url}/blob.bin", b"shorter")  # overwrite
    assert read_bytes(f"{s3_url}/blob.bin") == b"shorter"

    write_bytes(f"{s3_url}/latin1.txt", "café".encode("latin-1"))
    with pytest.raises(StorageError, match="not UTF-8"):
        read_text(f"{s3_url}/latin1.txt")
    with pytest.raises(StorageError, match="no such file"):
        read_text(f"{s3_url}/missing.txt")
    with pytest.raises(StorageError, match="no such file"):
        read_bytes(f"{s3_url}/missing.bin")
    assert list_keys(s3_url) == ["blob.bin", "latin1.txt", "out/ranks.tsv"]


def _named_arrays() -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(7)
    return [("0.W", rng.standard_normal((64, 32)).astype(np.float32)),
            ("0.b", np.zeros(32, dtype=np.float32)),
            ("1.W", rng.standard_normal((32, 10))),  # float64
            ("1.b", np.arange(10, dtype=np.int64)),
            ("t", np.asfortranarray(rng.standard_normal((3, 4, 5)).astype(np.float32)))]


@pytest.mark.timeout(120)
def test_params_round_trip(s3_url):
    named = _named_arrays()
    save_params(RunDir(f"{s3_url}/run"), named, job="test", supersteps=7)

    rd = RunDir(f"{s3_url}/run")
    loaded = load_params(rd)
    assert [n for n, _ in loaded] == [n for n, _ in named]
    for (_, want), (_, got) in zip(named, loaded):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)

    index = rd.read_json("params/index.json")
    assert index["job"] == "test" and index["supersteps"] == 7
    for entry, (name, arr) in zip(index["tensors"], named):
        data = rd.read_bytes(f"params/{name}.npy")
        assert entry["name"] == name and entry["shape"] == list(arr.shape) and entry["dtype"] == str(arr.dtype)
        assert entry["bytes"] == len(data) and entry["sha256"] == hashlib.sha256(data).hexdigest()
    assert list_keys(f"{s3_url}/run") == sorted([f"params/{n}.npy" for n, _ in named] + ["params/index.json"])

    # another prefix in the same run directory
    save_params(rd, named[:1], prefix="params/best")
    assert [n for n, _ in load_params(rd, prefix="params/best")] == ["0.W"]


@pytest.mark.timeout(120)
def test_params_round_trip_keeps_0d_arrays(s3_url):
    rd = RunDir(f"{s3_url}/run")
    save_params(rd, [("scale", np.array(0.5, dtype=np.float32))])
    assert rd.read_json("params/index.json")["tensors"][0]["shape"] == []
    (name, got), = load_params(rd)
    assert got.shape == () and got.dtype == np.float32 and got == np.float32(0.5)


@pytest.mark.timeout(120)
def test_params_checksum_mismatch_is_a_storage_error(s3_url):
    rd = RunDir(f"{s3_url}/run")
    save_params(rd, _named_arrays())
    data = bytearray(rd.read_bytes("params/1.W.npy"))
    data[-1] ^= 0xFF  # same size, one byte of the array changed
    write_bytes(f"{s3_url}/run/params/1.W.npy", bytes(data))
    with pytest.raises(StorageError, match=r"1\.W\.npy does not match its checksum"):
        load_params(RunDir(f"{s3_url}/run"))

    rd.write_bytes("params/1.W.npy", b"")  # truncated to nothing
    with pytest.raises(StorageError, match="checksum"):
        load_params(rd)

    rd.fs.rm_file(rd.path("params/0.b.npy"))  # a tensor the index lists is gone
    with pytest.raises(StorageError, match="no such file"):
        load_params(rd)


@pytest.mark.timeout(120)
def test_load_params_without_index_is_a_storage_error(s3_url):
    with pytest.raises(StorageError, match="no params/index.json"):
        load_params(RunDir(f"{s3_url}/empty-run"))


@pytest.mark.timeout(120)
def test_load_params_with_corrupt_index_is_a_storage_error(s3_url):
    rd = RunDir(f"{s3_url}/run")
    save_params(rd, _named_arrays()[:2])
    rd.write_bytes("params/index.json", b'{"tensors": [')
    with pytest.raises(StorageError):
        load_params(rd)


@pytest.mark.timeout(120)
def test_cli_pagerank_run_dir_and_output_on_s3(s3_url, tmp_path):
    run, out = f"{s3_url}/run1", f"{s3_url}/out.tsv"
    _cli("run", "pagerank", "--run-dir", run, "--set", f"output={out}", cwd=tmp_path)

    job = RunDir(run).read_json("job.json")
    assert job["job"] == "pagerank" and job["status"] == "finished", job
    assert job["config"]["output"] == out
    assert job["supersteps"] > 1
    metrics = RunDir(run).read_jsonl("metrics.jsonl")
    assert [m["superstep"] for m in metrics] == list(range(job["supersteps"]))  # every append kept, in order

    rows = [line.split("\t") for line in read_text(out).splitlines()]
    assert rows and all(len(r) == 2 for r in rows)
    assert [v for v, _ in rows] == sorted(v for v, _ in rows)
    assert sum(float(x) for _, x in rows) == pytest.approx(1.0, abs=1e-6)
    keys = list_keys(s3_url)
    assert {"run1/job.json", "run1/metrics.jsonl", "out.tsv"} <= set(keys), keys

    # the same run on a local directory writes the same ranks and the same supersteps
    _cli("run", "pagerank", "--run-dir", str(tmp_path / "local"), "--set", f"output={tmp_path / 'out.tsv'}",
         cwd=tmp_path)
    assert read_text(out) == (tmp_path / "out.tsv").read_text()
    local = [json.loads(x) for x in (tmp_path / "local" / "metrics.jsonl").read_text().splitlines()]
    assert [m["superstep"] for m in local] == [m["superstep"] for m in metrics]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_cli_dnn_dp_params_on_s3_and_export(s3_url, tmp_path):
    run = f"{s3_url}/run2"
    _cli("run", "dnn-dp", "--set", "epochs=1", "--run-dir", run, cwd=tmp_path)
    rd = RunDir(run)
    job = rd.read_json("job.json")
    assert job["job"] == "dnn-dp" and job["status"] == "finished", job
    assert len(rd.read_jsonl("metrics.jsonl")) == job["supersteps"]
    index = rd.read_json("params/index.json")
    names = [t["name"] for t in index["tensors"]]
    assert names and set(list_keys(f"{run}/params")) == {f"{n}.npy" for n in names} | {"index.json"}

    proc = _cli("params", "export", run, "--to", str(tmp_path / "p.npz"), cwd=tmp_path)
    assert f"wrote {len(names)} arrays" in proc.stdout
    with np.load(tmp_path / "p.npz", allow_pickle=False) as z:
        exported = {k: z[k] for k in z.files}
    assert list(exported) == names
    loaded = dict(load_params(rd))  # in this process, checksums checked
    for t in index["tensors"]:
        arr = exported[t["name"]]
        assert list(arr.shape) == t["shape"] and str(arr.dtype) == t["dtype"]
        assert np.isfinite(arr).all()
        np.testing.assert_array_equal(arr, loaded[t["name"]])
    # the default model: dense 256 relu, dense 256 relu, dense 10 on 8x8 digits
    assert [exported[f"{i}.W"].shape for i in range(3)] == [(64, 256), (256, 256), (256, 10)]
    assert [exported[f"{i}.b"].shape for i in range(3)] == [(256,), (256,), (10,)]

    # export to S3 too (write_bytes at an s3:// URL from the CLI)
    _cli("params", "export", run, "--to", f"{s3_url}/export/p.npz", cwd=tmp_path)
    with np.load(io.BytesIO(read_bytes(f"{s3_url}/export/p.npz")), allow_pickle=False) as z:
        assert list(z.files) == names
        for n in names:
            np.testing.assert_array_equal(z[n], exported[n])


@pytest.mark.timeout(120)
def test_a_large_part_streams_through_multipart_upload_and_reads_back_verified(s3_url):
    """A part bigger than s3fs's 5 MiB upload block goes up in pieces and is read back into arrays,
    sha256-checked on the way; a part damaged on the server is refused."""
    from mariana.storage.checkpoint import Checkpoints

    rd = RunDir(f"{s3_url}/run")
    ck = Checkpoints(rd)
    state = {"w": np.random.default_rng(3).standard_normal(3_000_000).astype(np.float32), "n": 7}  # 12 MB
    entry = ck.write_part(5, "worker-0", state)
    ck.commit(5, [entry], workers=1)
    data = rd.read_bytes("checkpoints/ss-000005/worker-0.part")
    assert len(data) == entry["bytes"] and hashlib.sha256(data).hexdigest() == entry["sha256"]
    info = ck.newest_valid(load=True)
    assert info.superstep == 5 and info.loaded["worker-0"]["n"] == 7
    assert np.array_equal(info.loaded["worker-0"]["w"], state["w"])
    damaged = bytearray(data)
    damaged[len(damaged) // 2] ^= 1
    rd.write_bytes("checkpoints/ss-000005/worker-0.part", bytes(damaged))
    with pytest.raises(StorageError, match="does not match its sha256"):
        ck.read(5, "worker-0")
    assert not ck.inspect(5).valid


@pytest.mark.timeout(120)
def test_a_write_that_fails_midway_leaves_no_object(s3_url):
    """An upload interrupted by an error is discarded, never completed with part of the data."""
    rd = RunDir(f"{s3_url}/run")
    with pytest.raises(StorageError, match="cannot write .*half.bin: .*the writer failed"):
        with rd.open_write("half.bin") as f:
            f.write(b"x" * (12 << 20))  # more than two upload blocks already sent
            raise RuntimeError("the writer failed")
    assert not rd.exists("half.bin")
    assert not [k for k in list_keys(s3_url) if k.endswith("half.bin")]


# -- a store that never answered is not waited for ------------------------------------------------------
@pytest.fixture
def refused_endpoint(tmp_path):
    """``http://127.0.0.1:PORT`` where a socket holds PORT bound but never listens: every connection
    is refused, and no other process can take the port meanwhile."""
    import socket

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("data", ["s3://bucket/shards", "s3://bucket/data.npz", "ENDPOINT/data.npz"])
def test_an_unreachable_data_url_fails_fast_naming_the_endpoint_and_the_attempts(refused_endpoint, tmp_path, data):
    import os
    import time

    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "FSSPEC_"))}
    env.update(AWS_ACCESS_KEY_ID="k", AWS_SECRET_ACCESS_KEY="s", AWS_DEFAULT_REGION="us-east-1",
               AWS_ENDPOINT_URL_S3=refused_endpoint, AWS_EC2_METADATA_DISABLED="true",
               AWS_CONFIG_FILE=str(tmp_path / "none"), AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
               FSSPEC_CONFIG_DIR=str(tmp_path / "fsspec"))
    data = data.replace("ENDPOINT", refused_endpoint)
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "mariana", "run", "dnn-dp", "--run-dir", str(tmp_path / "run"),
                           "--set", f"data={data}"], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    took = time.monotonic() - start
    errors = [line for line in proc.stderr.splitlines() if line.startswith("mariana: error:")]
    assert proc.returncode == 2 and len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    line = errors[0]
    assert data in line and refused_endpoint in line and "attempt" in line and "over" in line, line
    assert took < 8.0, (took, line)  # the retry window (120 s) is for a store reached before, not this one


@pytest.mark.timeout(120)
def test_shards_on_s3_commit_with_their_index_and_a_rewrite_leaves_only_its_own(s3_url):
    from mariana.vertices.train.shards import DataError, open_shards, write_shards

    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 255, (300, 1, 6, 6)).astype(np.uint8), rng.integers(0, 4, 300)
    url = f"{s3_url}/shards"
    write_shards(url, (x[:240], y[:240]), (x[240:], y[240:]), shard_mb=0.002)
    many = list_keys(url)
    assert "index.json" in many and len(many) > 5
    write_bytes(f"{url}/README.txt", b"someone else's")
    write_shards(url, (x[:240], y[:240]), (x[240:], y[240:]), shard_mb=0.02)  # fewer, larger shards
    index = json.loads(read_bytes(f"{url}/index.json"))
    listed = sorted(e["file"] for s in index["splits"].values() for e in s)
    assert list_keys(url) == sorted([*listed, "README.txt", "index.json"]) and len(listed) < len(many) - 1
    ss = open_shards(url)
    assert ss.train.size == 240 and np.array_equal(ss.train.read_rows(0, 0, 5)[1], y[:5])
    import fsspec

    fsspec.filesystem("s3").rm(f"{url[len('s3://'):]}/index.json")
    with pytest.raises(DataError, match="no index.json"):
        open_shards(url)
