"""The built-in jobs across emulated hosts (bench/netcluster.py): the master on host 0, each
worker a `mariana worker` on a host of its own, over real TCP between network namespaces with
CURVE keys made by `mariana keys init`/`add` (docs/across-hosts.md). dnn-dp, cnn-hybrid
(groups x partitions), cpu-cluster (groups x workers per group), PageRank and WCC (a small graph
file every host reads) on 2, 4 and 8 hosts, dnn-dp and WCC also on 16, each bit-identical to the local
runtime with the same worker count. Off loopback a plaintext master is refused; shared memory
is used between workers on one host and never across hosts. Skips, saying why, where not root
or without ``ip netns``."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

from mariana.cli import main

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import netcluster as nc  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

#: worker hosts the module's cluster offers (host 0 runs the masters)
MAX_WORKERS = 16
#: a run across hosts that has not ended by then is a hang
RUN_TIMEOUT = 90.0
_PORTS = itertools.count(7100)

CNN = 'model=["conv:4:3:1:1:relu", "maxpool:2", "conv:8:3:1:1:relu", "dense:16:relu", "dense:10"]'
MLP = 'model=["dense:32:relu", "dense:16:relu", "dense:10"]'


def _job_sets(job: str, n: int, graph: Path) -> list[str]:
    """The config of ``job`` on ``n`` workers: every worker holds a share of the work."""
    if job == "dnn-dp":
        return ["steps=6"]
    if job == "cnn-hybrid":  # groups x partitions = n
        return [CNN, "steps=4", "batch_size=32", f"groups={max(n // 2, 1)}", "partitions=2"]
    if job == "cpu-cluster":  # groups x workers per group = n
        return [MLP, "steps=6", f"groups={max(n // 2, 1)}", "workers_per_group=2"]
    return [f"graph={graph}"]


GRAPH_JOBS = ("pagerank", "wcc")
CASES = [(job, n) for n in (2, 4, 8) for job in ("dnn-dp", "cnn-hybrid", "cpu-cluster", *GRAPH_JOBS)]
CASES += [("dnn-dp", 16), ("wcc", 16)]


@pytest.fixture(scope="module")
def cluster() -> Iterator[nc.Cluster]:
    reason = nc.why_not()
    if reason:
        pytest.skip(reason)
    with nc.Cluster(MAX_WORKERS + 1, rate="1gbit") as c:
        yield c


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A key folder as the docs make it: the master's keypair and one key per worker host."""
    folder = tmp_path_factory.mktemp("multihost-keys") / "keys"
    assert main(["keys", "init", str(folder)]) == 0
    for i in range(1, MAX_WORKERS + 1):
        assert main(["keys", "add", str(folder), f"host{i}"]) == 0
    return folder


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small directed graph every host reads: 600 vertices, 2,400 edges, a few components."""
    rng = np.random.default_rng(47)
    src, dst = rng.integers(0, 600, 2400), rng.integers(0, 600, 2400)
    keep = (src // 150 == dst // 150) | (rng.random(2400) < 0.02)  # mostly inside four blocks
    path = tmp_path_factory.mktemp("multihost-graph") / "graph.txt"
    path.write_text("".join(f"{a} {b}\n" for a, b in zip(src[keep], dst[keep])))
    return path


def _mariana(*args: str) -> list[str]:
    return [sys.executable, "-m", "mariana", *args]


def _tail(path: Path, n: int = 1500) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else "(no log)"


def run_across(c: nc.Cluster, where: Path, job: str, sets: list[str], hosts: list[int], keys: Path | None) -> Path:
    """Run ``job`` with a master on host 0 and worker w on host ``hosts[w]``; with ``keys`` over
    CURVE (worker keys ``host{i}``), without them in plaintext (``--insecure``). Returns the run
    directory once every process ended 0."""
    h0 = c.hosts[0]
    where.mkdir(parents=True)
    run, master_file = where / "run", where / "master.json"
    security = ["--keys", str(keys)] if keys else ["--insecure"]
    config = [a for s in sets for a in ("--set", s)]
    logs: list[Path] = [where / "master.log"]
    procs: list[subprocess.Popen] = []
    try:
        with open(logs[0], "wb") as log:
            procs.append(h0.popen(_mariana("master", job, "--bind", f"tcp://{h0.address}:{next(_PORTS)}",
                                           "--workers", str(len(hosts)), *security, "--master-file",
                                           str(master_file), "--run-dir", str(run), *config),
                                  stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        deadline = time.monotonic() + 30
        while not (master_file.exists() and master_file.stat().st_size > 0):
            assert procs[0].poll() is None, f"master exited {procs[0].returncode}:\n{_tail(logs[0])}"
            assert time.monotonic() < deadline, f"no {master_file} in 30 s:\n{_tail(logs[0])}"
            time.sleep(0.05)
        info = json.loads(master_file.read_text())
        assert info["endpoint"].startswith(f"tcp://{h0.address}:") and ("server_key" in info) == bool(keys), info
        for w, i in enumerate(hosts):
            h = c.hosts[i]
            auth = ["--key", str(keys / f"host{i}.key_secret")] if keys else ["--insecure"]
            logs.append(where / f"worker{w}-h{i}.log")
            with open(logs[-1], "wb") as log:
                procs.append(h.popen(_mariana("worker", "--master-file", str(master_file), *auth),
                                     stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
    finally:
        failed = nc.wait_all(procs, logs, RUN_TIMEOUT)
    assert failed is None, failed
    return run


def run_local(where: Path, job: str, sets: list[str], workers: int) -> Path:
    """The same job on the local runtime (in this process) with the same worker count."""
    run = where / "run"
    config = [a for s in sets for a in ("--set", s)]
    assert main(["run", job, "--runtime", "local", "--workers", str(workers), "--run-dir", str(run), *config]) == 0
    return run


def params(run: Path) -> dict[str, bytes]:
    """A run's final parameters, unsplit (`mariana params export`), as raw bytes by name."""
    out = run.parent / "params.npz"
    assert main(["params", "export", str(run), "--to", str(out)]) == 0
    with np.load(out) as npz:
        return {k: npz[k].tobytes() for k in npz.files}


def worker_traces(run: Path) -> dict[int, list[dict]]:
    """Each worker's superstep records (RUN/trace/worker-W.jsonl)."""
    return {int(p.stem.split("-")[1]): [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
            for p in sorted((run / "trace").glob("worker-*.jsonl"))}


def shm_bytes(run: Path) -> dict[tuple[int, int], int]:
    """Bytes each worker sent each peer through shared memory over the run ({(from, to): bytes})."""
    total: dict[tuple[int, int], int] = {}
    for w, records in worker_traces(run).items():
        for r in records:
            for peer, b in r.get("shm_bytes_out", {}).items():
                total[w, int(peer)] = total.get((w, int(peer)), 0) + b
    return total


def summary(run: Path, capsys: pytest.CaptureFixture) -> dict:
    capsys.readouterr()
    assert main(["trace", "summary", "--json", str(run)]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(("job", "n"), CASES, ids=[f"{j}-{n}hosts" for j, n in CASES])
def test_a_job_on_n_hosts_is_bit_identical_to_the_local_runtime(cluster, keys, graph, tmp_path, capsys, job, n):
    sets = _job_sets(job, n, graph)
    if job in GRAPH_JOBS:
        sets_hosts, sets_local = [*sets, f"output={tmp_path / 'hosts.txt'}"], [*sets, f"output={tmp_path / 'local.txt'}"]
    else:
        sets_hosts = sets_local = sets
    sent = [cluster.link_bytes(i)["sent"] for i in range(1, n + 1)]
    run = run_across(cluster, tmp_path / "hosts", job, sets_hosts, list(range(1, n + 1)), keys)
    local = run_local(tmp_path / "local", job, sets_local, n)
    if job in GRAPH_JOBS:
        hosts_out, local_out = (tmp_path / "hosts.txt").read_bytes(), (tmp_path / "local.txt").read_bytes()
        assert local_out.count(b"\n") > 500 and hosts_out == local_out
    else:
        ours, reference = params(run), params(local)
        assert reference and ours.keys() == reference.keys()
        assert [k for k in ours if ours[k] != reference[k]] == []
    s = summary(run, capsys)
    assert s["workers"] == n and sorted(s["hosts"]) == sorted(f"h{i}" for i in range(1, n + 1))
    # every worker's traffic crossed its own link, none went through shared memory (one per host)
    grew = [cluster.link_bytes(i)["sent"] - sent[i - 1] for i in range(1, n + 1)]
    assert min(grew) > 1000, grew
    assert sum(shm_bytes(run).values()) == 0


def test_a_plaintext_master_bound_off_loopback_is_refused(cluster, tmp_path) -> None:
    h0 = cluster.hosts[0]
    done = h0.run(_mariana("master", "wcc", "--bind", f"tcp://{h0.address}:{next(_PORTS)}", "--workers", "2",
                           "--run-dir", str(tmp_path / "run")), timeout=30)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done
    assert f"tcp://{h0.address}" in lines[0] and "not loopback" in lines[0] and "--keys" in lines[0]
    assert not (tmp_path / "run").exists()


def test_shared_memory_is_used_between_workers_on_one_host_and_not_across_hosts(cluster, graph, tmp_path) -> None:
    """Two workers on host 1 and one on host 2 (plaintext: shared memory is never used with CURVE)."""
    sets = ["steps=6", "batch_size=48"]
    run = run_across(cluster, tmp_path / "hosts", "dnn-dp", sets, [1, 1, 2], keys=None)
    host = {w: records[0]["host"] for w, records in worker_traces(run).items()}
    assert sorted(host.values()) == ["h1", "h1", "h2"]
    shm = shm_bytes(run)
    same = [(a, b) for a in host for b in host if a != b and host[a] == host[b]]
    across = [(a, b) for a in host for b in host if host[a] != host[b]]
    assert all(shm.get(pair, 0) > 0 for pair in same), (host, shm)
    assert [pair for pair in across if shm.get(pair, 0)] == [], (host, shm)
    ours, reference = params(run), params(run_local(tmp_path / "local", "dnn-dp", sets, 3))
    assert ours == reference


def test_auto_runs_linear_as_hier_across_hosts_with_fewer_link_bytes_and_the_same_parameters(cluster, tmp_path):
    """Two hosts of two workers (plaintext): ``auto`` (4 members, a host holding two) sends each
    gradient piece across the boundary once and each fresh piece once per host, where ``linear``
    sends every member's slices and every member its pieces; the parameters are the same bytes."""
    sets = ['model=["dense:256:relu", "dense:10"]', "steps=6", "batch_size=48"]
    moved, runs = {}, {}
    for ex in ("linear", "auto"):
        before = [cluster.link_bytes(i)["sent"] for i in (1, 2)]
        runs[ex] = run_across(cluster, tmp_path / ex, "dnn-dp", [*sets, f"exchange={ex}"], [1, 1, 2, 2], keys=None)
        moved[ex] = sum(cluster.link_bytes(i)["sent"] - b for i, b in zip((1, 2), before))
    assert params(runs["auto"]) == params(runs["linear"])
    assert moved["auto"] < 0.8 * moved["linear"], moved
