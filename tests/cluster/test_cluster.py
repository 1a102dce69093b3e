"""The cluster runtime with real processes on loopback: identical results, launching, liveness,
refusals and malformed traffic. Every test starts its processes itself and checks none is left."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import msgpack
import numpy as np
import pytest
import zmq

from mariana import MarianaError, __version__
from mariana.cluster.master import WorkerLost
from mariana.cli import main
from mariana.jobs.launch import run_job
from mariana.partitioner.fragment import LOAD_STEPS
from mariana.messages import codec
from mariana.messages.kinds import Kind

pytestmark = pytest.mark.timeout(120)

GRAPH = Path(__file__).parent.parent / "engine" / "data" / "small.e"


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def reap(*procs) -> None:
    """Kill and wait for every process of ``procs`` still running (a test's clean-up)."""
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def worker_hint(master: subprocess.Popen) -> str:
    """The last word of the line the master prints for other hosts (`mariana worker --master URL`
    or `mariana worker --master-file FILE --key DIR/NAME.key_secret`)."""
    for line in master.stderr:  # ends if the master exits
        if line.strip().startswith("mariana worker --master"):
            return line.split()[-1]
    raise AssertionError(f"the master exited ({master.wait()}) without printing the worker command")


def env_with_tests() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), *sys.path])
    return env


@pytest.mark.slow
@pytest.mark.parametrize("job,extra", [("pagerank", ["--set", "tol=1e-12"]), ("sssp", ["--set", "source=n3"]),
                                       ("wcc", [])])
@pytest.mark.parametrize("mode", ["block", "vertex"])
def test_cli_outputs_are_byte_identical_to_local_for_1_to_4_workers(tmp_path, job, extra, mode):
    outputs = {}
    for workers, runtime in [(1, "local"), (1, "cluster"), (2, "cluster"), (3, "cluster"), (4, "cluster")]:
        out = tmp_path / f"{workers}-{runtime}.tsv"
        code = main(["run", job, "--set", f"graph={GRAPH}", "--set", f"output={out}", "--set", f"mode={mode}",
                     "--workers", str(workers), "--runtime", runtime, "--run-dir", str(tmp_path / f"run-{workers}-{runtime}"),
                     *extra])
        assert code == 0
        outputs[(workers, runtime)] = out.read_bytes()
    reference = outputs[(1, "local")]
    assert reference.count(b"\n") == 59
    assert all(v == reference for v in outputs.values())


def test_metrics_of_a_cluster_run_count_bytes(tmp_path):
    lines = []
    res = run_job("pagerank", sets=[f"graph={GRAPH}", "iterations=3", "tol=0"], workers=2, runtime="cluster",
                  on_superstep=lines.append)
    assert res.supersteps == 4 + LOAD_STEPS  # block mode loads the graph in supersteps first
    assert all(line["bytes"] > 0 for line in [lines[1], *lines[LOAD_STEPS:LOAD_STEPS + 3]])  # edges, then ranks
    assert all(line["dropped"] == 0 for line in lines)


def test_two_hosts_on_loopback(tmp_path):
    """A master on 127.0.0.2 and `mariana worker` processes on 127.0.0.3 and 127.0.0.4."""
    out = tmp_path / "wcc.tsv"
    master = subprocess.Popen(
        [sys.executable, "-m", "mariana", "master", "wcc", "--bind", "tcp://127.0.0.2:0", "--workers", "2",
         "--set", f"graph={GRAPH}", "--set", f"output={out}", "--run-dir", str(tmp_path / "run")],
        stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    workers = []
    try:
        endpoint = worker_hint(master)
        assert endpoint.startswith("tcp://127.0.0.2:")
        for host in ("127.0.0.3", "127.0.0.4"):
            workers.append(subprocess.Popen([sys.executable, "-m", "mariana", "worker", "--master", endpoint,
                                             "--host", host]))
        assert master.wait(timeout=60) == 0
        assert [w.wait(timeout=30) for w in workers] == [0, 0]
    finally:
        reap(master, *workers)
    local = tmp_path / "local.tsv"
    assert main(["run", "wcc", "--set", f"graph={GRAPH}", "--set", f"output={local}", "--run-dir", str(tmp_path / "l")]) == 0
    assert out.read_bytes() == local.read_bytes()


def test_workers_may_start_before_the_master(tmp_path):
    with zmq.Context() as ctx:  # reserve a free port on loopback, then release it for the master
        s = ctx.socket(zmq.ROUTER)
        port = s.bind_to_random_port("tcp://127.0.0.1")
        s.close(linger=0)
    endpoint = f"tcp://127.0.0.1:{port}"
    workers = [subprocess.Popen([sys.executable, "-m", "mariana", "worker", "--master", endpoint]) for _ in range(2)]
    try:
        assert main(["master", "sssp", "--bind", endpoint, "--workers", "2", "--run-dir", str(tmp_path / "r"),
                     "--set", f"graph={GRAPH}", "--set", "source=n0", "--set", f"output={tmp_path / 'o.tsv'}"]) == 0
        assert [w.wait(timeout=30) for w in workers] == [0, 0]
    finally:
        reap(*workers)


def _forever_job(**kw):
    return dict(sets=["max_supersteps=100000"], workers=2, runtime="cluster", **kw)


def test_kill_9_of_a_worker_fails_the_job_with_a_clear_error_and_leaves_no_process():
    procs = []

    def kill_at_5(line):
        if line["superstep"] == 5:
            os.kill(procs[1].pid, signal.SIGKILL)

    t0 = time.monotonic()
    with pytest.raises(WorkerLost) as info:
        run_job("contract_jobs:forever", **_forever_job(on_superstep=kill_at_5, worker_timeout=5, max_restarts=0,
                                                          on_start=lambda m, p: procs.extend(p)))
    assert time.monotonic() - t0 < 30
    msg = str(info.value)
    assert f"pid {procs[1].pid})" in msg and "host" in msg and "at superstep 6" in msg and "code -9" in msg
    assert not any(alive(p.pid) for p in procs)


@pytest.mark.slow
def test_a_worker_that_stops_answering_is_detected_by_heartbeat():
    procs = []

    def stop_at_3(line):
        if line["superstep"] == 3:
            os.kill(procs[0].pid, signal.SIGSTOP)

    t0 = time.monotonic()
    with pytest.raises(WorkerLost) as info:
        run_job("contract_jobs:forever", **_forever_job(on_superstep=stop_at_3, worker_timeout=1.5, max_restarts=0,
                                                          heartbeat_interval=0.2, on_start=lambda m, p: procs.extend(p)))
    assert f"pid {procs[0].pid}) stopped answering at superstep 4" in str(info.value)
    assert 1.5 < time.monotonic() - t0 < 30
    assert not any(alive(p.pid) for p in procs)


@pytest.mark.slow
def test_a_worker_whose_master_vanishes_exits_by_itself(tmp_path):
    master = subprocess.Popen(
        [sys.executable, "-m", "mariana", "run", "contract_jobs:forever", "--set", "max_supersteps=1000000",
         "--workers", "2", "--worker-timeout", "1.5", "--heartbeat-interval", "0.2", "--run-dir", str(tmp_path)],
        env=env_with_tests(), stderr=subprocess.DEVNULL)
    try:
        kids = wait_for(lambda: len(children(master.pid)) == 2 and children(master.pid), 30, "two workers")
        wait_for(lambda: (tmp_path / "metrics.jsonl").exists(), 30, "the job to start")
        master.kill()
        master.wait()
        wait_for(lambda: not any(alive(k) for k in kids), 20, "orphaned workers to exit")
    finally:
        if master.poll() is None:
            master.kill()
            master.wait()


def test_ctrl_c_stops_the_job_and_its_workers(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "mariana", "run", "contract_jobs:forever", "--set", "max_supersteps=1000000",
         "--workers", "2", "--run-dir", str(tmp_path)], env=env_with_tests(), stderr=subprocess.PIPE, text=True)
    try:
        kids = wait_for(lambda: len(children(proc.pid)) == 2 and children(proc.pid), 30, "two workers")
        wait_for(lambda: (tmp_path / "metrics.jsonl").exists(), 30, "the job to start")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130
        assert "interrupted" in proc.stderr.read()
        assert not any(alive(k) for k in kids)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_worker_of_another_version_is_refused_on_both_sides(caplog):
    replies = []

    def intruder(endpoint):
        with zmq.Context() as ctx:
            s = ctx.socket(zmq.DEALER)
            s.linger = 0
            s.connect(endpoint)
            s.send_multipart(codec.encode({"kind": Kind.HELLO, "version": "0.0.1", "host": "elsewhere", "pid": 1,
                                           "data": "tcp://127.0.0.1:1"}))
            if s.poll(20_000):
                replies.append(codec.decode(s.recv_multipart()))
            s.close(linger=0)

    threads = []

    def start_intruder(master, procs):
        threads.append(threading.Thread(target=intruder, args=(master.endpoint,)))
        threads[0].start()

    res = run_job("contract_jobs:delivery", workers=2, runtime="cluster", on_start=start_intruder)
    threads[0].join(timeout=30)
    assert res.values["c"] == [[2, "b", 11]]  # the real job is unaffected
    assert replies and replies[0]["kind"] == Kind.REFUSE
    assert "0.0.1" in replies[0]["reason"] and __version__ in replies[0]["reason"]
    assert "refused a worker from host elsewhere" in caplog.text


def test_a_job_the_workers_cannot_import_is_reported(monkeypatch):
    import contract_jobs

    ghost = types.ModuleType("ghost_jobs")  # importable here, nowhere on disk
    ghost.delivery = contract_jobs.delivery
    monkeypatch.setitem(sys.modules, "ghost_jobs", ghost)
    monkeypatch.setenv("MARIANA_NO_FORK", "1")  # a forked worker has this process's modules, ghost_jobs too
    with pytest.raises(MarianaError, match=r"worker \d \(host .*\) cannot run job ghost_jobs:delivery: "
                                           r"cannot import job module 'ghost_jobs'"):
        run_job("ghost_jobs:delivery", workers=2, runtime="cluster")


# -- malformed traffic ---------------------------------------------------------------------------
def _fuzz_messages(rng: random.Random, n: int) -> list[list[bytes]]:
    """Seeded random and mutated multipart messages: none of them is a valid message of the job."""
    arr = np.arange(6, dtype=np.float64)
    bases = [
        codec.encode({"kind": Kind.BATCH, "job": "0" * 32, "ss": 3, "src": 0, "msgs": [["a", "b", None, arr]]}),
        codec.encode({"kind": Kind.DONE, "job": "f" * 32, "ss": 3, "partials": {}, "active": 1}),
        codec.encode({"kind": Kind.HEARTBEAT, "job": "x", "t": 1.0}),
        codec.encode({"kind": 99, "job": "", "payload": arr}),
    ]
    out = []
    for i in range(n):
        frames = [bytes(f) for f in rng.choice(bases)]
        op = i % 7
        if op == 0:  # random garbage frames
            frames = [rng.randbytes(rng.randrange(1, 64)) for _ in range(rng.randrange(1, 4))]
        elif op == 1:  # flip bytes in the header
            h = bytearray(frames[0])
            for _ in range(rng.randrange(1, 4)):
                h[rng.randrange(len(h))] ^= 1 << rng.randrange(8)
            frames[0] = bytes(h)
        elif op == 2:  # wrong frame count
            frames = frames + [b"extra"] if rng.random() < 0.5 or len(frames) == 1 else frames[:1]
        elif op == 3:  # truncated array frame
            frames = frames[:1] + [f[: len(f) // 2] for f in frames[1:]] if len(frames) > 1 else [frames[0][:-1]]
        elif op == 4:  # wrong protocol version
            frames[0] = msgpack.packb({"v": 999, "kind": Kind.BATCH, "job": "j"})
        elif op == 5:  # forbidden dtype
            ext = msgpack.ExtType(1, msgpack.packb([1, 1, "|O", [2]]))
            frames = [msgpack.packb({"v": codec.PROTOCOL_VERSION, "kind": Kind.BATCH, "x": ext}), b"\0" * 16]
        # op == 6: the well-formed base message itself: unknown sender / job id / kind
        out.append(frames)
    return out


def test_fuzzed_traffic_is_dropped_counted_and_harmless():
    rng = random.Random(20261202)
    to_master, to_worker = _fuzz_messages(rng, 1000), _fuzz_messages(rng, 1000)
    state = {}

    def fuzz_at_3(line):
        if line["superstep"] != 3:
            return
        master = state["master"]
        with zmq.Context() as ctx:
            socks = []
            for endpoint, messages in [(master.endpoint, to_master), (master.by_index[1].data, to_worker)]:
                s = ctx.socket(zmq.DEALER)
                s.linger = 2000  # deliver everything before closing
                s.connect(endpoint)
                for frames in messages:
                    s.send_multipart(frames)
                socks.append(s)
            for s in socks:
                s.close()

    reference = run_job("pagerank", sets=[f"graph={GRAPH}", "iterations=150", "tol=0", "mode=vertex"], workers=3,
                        runtime="local")
    res = run_job("pagerank", sets=[f"graph={GRAPH}", "iterations=150", "tol=0", "mode=vertex"], workers=3,
                  runtime="cluster", on_superstep=fuzz_at_3, on_start=lambda m, p: state.update(master=m))
    assert res.values == reference.values
    dropped = state["master"].dropped
    assert sum(dropped.values()) == 2000, dropped
    assert {"header", "frame_count", "version", "dtype", "sender"} <= set(dropped)


# -- two hosts in network namespaces joined by a veth pair ---------------------------------------
def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)


@pytest.fixture
def two_namespaces():
    """Namespaces A (10.231.N.1) and B (10.231.N.2) joined by a veth pair; removed afterwards."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    tag = f"mt{os.getpid() % 100000}"
    a, b, subnet = f"{tag}a", f"{tag}b", f"10.231.{os.getpid() % 250}"
    probe = _ip("netns", "add", a) if shutil.which("ip") else None
    if probe is None or probe.returncode != 0:
        pytest.skip(f"`ip netns` does not work here: {probe.stderr.strip() if probe else 'no ip command'}")
    try:
        steps = [("netns", "add", b), ("link", "add", f"{tag}va", "type", "veth", "peer", "name", f"{tag}vb"),
                 ("link", "set", f"{tag}va", "netns", a), ("link", "set", f"{tag}vb", "netns", b),
                 ("-n", a, "addr", "add", f"{subnet}.1/24", "dev", f"{tag}va"),
                 ("-n", b, "addr", "add", f"{subnet}.2/24", "dev", f"{tag}vb"),
                 ("-n", a, "link", "set", f"{tag}va", "up"), ("-n", b, "link", "set", f"{tag}vb", "up"),
                 ("-n", a, "link", "set", "lo", "up"), ("-n", b, "link", "set", "lo", "up")]
        for step in steps:
            r = _ip(*step)
            if r.returncode != 0:
                pytest.skip(f"cannot set up the veth pair (ip {' '.join(step)}): {r.stderr.strip()}")
        yield a, b, f"{subnet}.1", f"{subnet}.2"
    finally:
        _ip("netns", "del", a)
        _ip("netns", "del", b)


def test_two_hosts_in_network_namespaces(two_namespaces, tmp_path):
    """Off loopback the master needs CURVE keys: a secure job across two namespaces."""
    a, b, addr_a, addr_b = two_namespaces
    out = tmp_path / "pr.tsv"
    keys = tmp_path / "keys"
    py = [sys.executable, "-m", "mariana"]
    for args in (["keys", "init", str(keys)], ["keys", "add", str(keys), "w0"], ["keys", "add", str(keys), "w1"]):
        assert main(args) == 0
    assert main(["master", "pagerank", "--bind", f"tcp://{addr_a}:0", "--workers", "2"]) == 2  # no keys: refused
    master = subprocess.Popen(
        ["ip", "netns", "exec", a, *py, "master", "pagerank", "--bind", f"tcp://{addr_a}:0", "--workers", "2",
         "--keys", str(keys), "--set", f"graph={GRAPH}", "--set", f"output={out}", "--run-dir", str(tmp_path / "run")],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    workers = []
    try:
        assert worker_hint(master).startswith(str(keys / "NAME.key_secret"))  # the hint names the key to use
        assert json.loads((keys / "master.json").read_text())["endpoint"].startswith(f"tcp://{addr_a}:")
        for i, (ns, host) in enumerate(((a, addr_a), (b, addr_b))):
            workers.append(subprocess.Popen(["ip", "netns", "exec", ns, *py, "worker", "--master-file",
                                             str(keys / "master.json"), "--key", str(keys / f"w{i}.key_secret"),
                                             "--host", host]))
        assert master.wait(timeout=60) == 0
        assert [w.wait(timeout=30) for w in workers] == [0, 0]
    finally:
        reap(master, *workers)
    local = tmp_path / "local.tsv"
    assert main(["run", "pagerank", "--set", f"graph={GRAPH}", "--set", f"output={local}",
                 "--run-dir", str(tmp_path / "l")]) == 0
    assert out.read_bytes() == local.read_bytes()


@pytest.mark.parametrize("workers", [1, 2])
def test_spawned_workers_get_their_share_of_the_cores_for_blas(workers, monkeypatch):
    """The launcher starts workers one at a time, but each one's BLAS pool is sized for the job's
    worker count (cores // workers), not for a lone process: threadpoolctl inside each worker."""
    pytest.importorskip("threadpoolctl")
    from mariana.engine.threads import THREAD_VARS, blas_threads

    for var in THREAD_VARS:
        monkeypatch.delenv(var, raising=False)
    res = run_job("contract_jobs:blas", workers=workers, runtime="cluster")
    expected = blas_threads(workers)
    assert len(res.values) == workers
    for vid, libs in res.values.items():
        assert libs, f"{vid}: no BLAS library loaded in the worker"
        assert {n for _, n in libs} == {expected}, (vid, libs)


def test_blas_threads_respect_a_users_setting(monkeypatch):
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    res = run_job("contract_jobs:blas", workers=2, runtime="cluster")
    assert all({n for _, n in libs} == {1} for libs in res.values.values())
