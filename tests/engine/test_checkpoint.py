"""Checkpoints: vertex state capture, commit protocol, corruption fallback, failing storage,
resume (local and cluster), and recovery from a killed worker with bit-identical results."""

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
from pathlib import Path

import fsspec
import numpy as np
import pytest
from fsspec.implementations.memory import MemoryFileSystem

import mariana
from mariana import Vertex
from mariana.cluster.forking import fork_is_safe
from mariana.engine.state import load_vertex_state, vertex_state
from mariana.jobs import get_job, resolve_config
from mariana.cli import main
from mariana.jobs.dnn_data_parallel import final_params
from mariana.jobs.launch import run_job
from mariana.storage import RunDir
from mariana.storage.checkpoint import Checkpoints, pack, unpack
from mariana.partitioner.fragment import LOAD_STEPS
from test_cluster import alive, children, reap, wait_for

pytestmark = pytest.mark.timeout(180)

GRAPH = Path(__file__).parent / "data" / "small.e"
DNN = get_job("dnn-dp")


# -- state capture -------------------------------------------------------------------------------
class Stateful(Vertex):
    state_fields = (*Vertex.state_fields, "rng", "count", "names")  # not the table, never the function

    def __init__(self, id):
        super().__init__(id, np.arange(4.0), [("x", 1.0)])
        self.rng = np.random.default_rng(7)
        self.count, self.names, self.table, self.fn = 3, ("a", "b"), np.ones(1000), print


def test_a_declared_field_that_is_not_plain_data_fails_naming_vertex_and_field():
    class Bad(Stateful):
        state_fields = (*Stateful.state_fields, "fn")

    with pytest.raises(mariana.MarianaError, match="vertex 'v': state field 'fn' of Bad holds a builtin_function"):
        vertex_state(Bad("v"))


def test_every_vertex_class_of_the_library_says_what_it_checkpoints():
    """Explicit state: a library vertex declares its ``state_fields`` (or a ``state_dict``) in its own
    class body, so nothing it holds is captured, or left out, by accident."""
    import importlib
    import inspect
    import pkgutil

    import mariana.vertices

    modules = [importlib.import_module(m.name)  # the graph algorithms' home (vertices/graph/) too
               for m in pkgutil.walk_packages(mariana.vertices.__path__, "mariana.vertices.")]
    found = [c for m in modules for _, c in inspect.getmembers(m, inspect.isclass)
             if issubclass(c, Vertex) and c is not Vertex and c.__module__ == m.__name__]
    assert len(found) >= 10
    silent = [c.__name__ for c in found if not {"state_fields", "state_dict"} & set(vars(c))]
    assert not silent, f"declare state_fields (Vertex.state_fields if only the value) in: {sorted(silent)}"


def test_default_state_captures_plain_data_and_rngs_and_restores_in_place():
    v = Stateful("v")
    v.rng.random(5)
    state = unpack(pack(vertex_state(v)))  # the state survives the checkpoint format
    assert set(state) == {"value", "rng", "count", "names"}  # no id/edges, static, or callable
    expected_draw = v.rng.random()
    w = Stateful("v")
    buffer = w.value
    load_vertex_state(w, state)
    assert w.value is buffer and list(w.value) == [0, 1, 2, 3]  # copied into the existing buffer
    assert w.rng.random() == expected_draw and w.names == ("a", "b") and w.count == 3


# -- local runtime ----------------------------------------------------------------------------------
def _pagerank(tmp_path, name, *extra):
    out = tmp_path / f"{name}.tsv"
    argv = ["run", "pagerank", "--set", f"graph={GRAPH}", "--set", f"output={out}", "--set", "tol=0",
            "--set", "iterations=40", "--run-dir", str(tmp_path / name), *extra]
    return argv, out


def test_pagerank_resumes_from_a_checkpoint_to_identical_ranks(tmp_path):
    argv, out = _pagerank(tmp_path, "full")
    assert main(argv) == 0
    argv, part = _pagerank(tmp_path, "cut", "--set", "checkpoint_every=7")
    assert main(argv + ["--max-supersteps", "23"]) == 0  # stops early; newest checkpoint before 21
    ck = Checkpoints(RunDir(str(tmp_path / "cut")))
    assert ck.supersteps() == [21, 14, 7]
    assert main(["run", "--resume", str(tmp_path / "cut")]) == 0
    assert part.read_bytes() == out.read_bytes()
    lines = [json.loads(x) for x in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()]
    # continues, no duplicate or gap (block mode loads the graph in LOAD_STEPS supersteps first)
    assert [m["superstep"] for m in lines] == list(range(41 + LOAD_STEPS))
    assert ck.supersteps() == [42, 35, 28]  # keep_checkpoints=3


@pytest.mark.parametrize("damage", ["flip", "truncate", "no-manifest"])
def test_a_damaged_checkpoint_is_detected_and_resume_falls_back(tmp_path, damage, caplog, capsys):
    argv, out = _pagerank(tmp_path, "full")
    assert main(argv) == 0
    argv, part = _pagerank(tmp_path, "cut", "--set", "checkpoint_every=10")
    assert main(argv + ["--max-supersteps", "25"]) == 0
    folder = tmp_path / "cut" / "checkpoints" / "ss-000020"
    target = folder / "worker-0.part"
    if damage == "flip":
        data = bytearray(target.read_bytes())
        data[len(data) // 2] ^= 0x40
        target.write_bytes(bytes(data))
    elif damage == "truncate":
        target.write_bytes(target.read_bytes()[:-100])
    else:
        (folder / "manifest.json").unlink()
    info = Checkpoints(RunDir(str(tmp_path / "cut"))).inspect(20)
    assert not info.valid and info.why
    assert main(["checkpoint", "list", str(tmp_path / "cut")]) == 0
    if damage != "no-manifest":  # without --verify only the manifests are read: the damage goes unseen
        assert main(["checkpoint", "list", "--no-verify", "--json", str(tmp_path / "cut")]) == 0
        listed = {c["superstep"]: c for c in json.loads(capsys.readouterr().out.splitlines()[-1])}
        assert listed[20]["valid"] and not listed[20]["verified"] and listed[20]["size"] == info.size
    assert main(["run", "--resume", str(tmp_path / "cut")]) == 0
    assert "skipping checkpoint at superstep 20" in caplog.text  # fell back to superstep 10
    assert part.read_bytes() == out.read_bytes()


class FlakyMemory(MemoryFileSystem):
    """An in-memory filesystem whose writes under one checkpoint folder fail."""

    protocol = ("flakymem",)
    root_marker = "/"
    fail_under = "checkpoints/ss-000020"

    def pipe_file(self, path, value, **kwargs):
        self._check(path)
        return super().pipe_file(path, value, **kwargs)

    def _open(self, path, mode="rb", **kwargs):
        if "w" in mode or "a" in mode:
            self._check(path)
        return super()._open(path, mode, **kwargs)

    def _check(self, path):
        if self.fail_under in path:
            raise OSError(28, "No space left on device (simulated)")


def test_a_failing_checkpoint_write_is_reported_and_the_job_goes_on():
    fsspec.register_implementation("flakymem", FlakyMemory, clobber=True)
    run_dir = RunDir(f"flakymem://run-{random.Random().random()}")
    lines = []
    result = run_job("pagerank", sets=[f"graph={GRAPH}", "tol=0", f"iterations={35 - LOAD_STEPS}",
                                       "checkpoint_every=10"], run_dir=run_dir, on_superstep=lines.append)
    assert result.supersteps == 36
    failed = [m for m in lines if "checkpoint_failed" in m]  # reported once the background write has failed
    assert len(failed) == 1 and failed[0]["checkpoint_failed"].startswith("superstep 20: ")
    assert "No space left" in failed[0]["checkpoint_failed"] and 19 <= failed[0]["superstep"] <= 29
    assert [m["checkpoint"] for m in lines if "checkpoint" in m][:1] == [10]  # 30 may commit after the last line
    ck = Checkpoints(run_dir)
    assert [ss for ss in ck.supersteps() if ck.inspect(ss).valid] == [30, 10]


def test_master_compute_can_ask_for_a_checkpoint(tmp_path):
    run_dir = RunDir(str(tmp_path / "r"))
    run_job("contract_jobs:forever", sets=["max_supersteps=6"], run_dir=run_dir)
    assert Checkpoints(run_dir).supersteps() == []
    from mariana import Graph

    class Tick(Vertex):
        def compute(self, ctx, messages):
            self.value = ctx.superstep

    g = Graph(max_supersteps=6)
    g.add_vertex(Tick("t", 0))
    g.master_compute = lambda m: m.checkpoint() if m.superstep == 3 else None
    mariana.run(g, run_dir=run_dir)
    assert Checkpoints(run_dir).supersteps() == [4]


@pytest.mark.slow
@pytest.mark.parametrize("background", [True, False])
def test_a_checkpoint_holds_the_state_at_its_barrier_while_the_job_goes_on(tmp_path, runtime, background):
    """Checkpoints are written in the background while the vertices keep changing their arrays
    in place (and the inbox holds those very buffers): each part still has its barrier's values.
    With ``checkpoint_background=false`` they are written before the next superstep instead."""
    run_dir = RunDir(str(tmp_path / "r"))
    lines = []
    sets = ["checkpoint_every=3", "keep_checkpoints=20", f"checkpoint_background={str(background).lower()}"]
    result = run_job("contract_jobs:inplace", sets=sets, workers=2, runtime=runtime, run_dir=run_dir,
                     on_superstep=lines.append)
    ck = Checkpoints(run_dir, keep=20)
    assert ck.supersteps() == list(range(39, 0, -3))  # every one committed, the last one too
    for ss in ck.supersteps():
        parts = ck.load(ss)
        for name in ("worker-0", "worker-1"):
            for state in parts[name]["vertices"].values():
                assert np.all(state["value"] == ss)  # ss supersteps added 1 each: not one more
            for _src, _dst, _tag, payload in parts[name]["inbox"]:
                assert np.all(payload == ss)  # a sender's buffer, as sent at that barrier
    assert all(np.all(v == 40) for v in result.values.values())
    if not background:  # committed before the metrics line of its own barrier
        assert [(m["superstep"] + 1, m["checkpoint"]) for m in lines if "checkpoint" in m] == \
            [(ss, ss) for ss in range(3, 40, 3)]
    events = [json.loads(x) for x in (tmp_path / "r" / "trace" / "master.jsonl").read_text().splitlines()
              if '"event"' in x]
    assert sorted(e["superstep"] for e in events if e["event"] == "checkpoint" and e["ok"]) == list(range(3, 40, 3))
    for ss in ck.supersteps():
        if ss > 21:
            shutil.rmtree(tmp_path / "r" / "checkpoints" / f"ss-{ss:06d}")
    resumed = run_job("contract_jobs:inplace", sets=sets, workers=2, runtime=runtime, run_dir=run_dir, resume=True)
    assert resumed.supersteps == 40 and all(np.all(v == 40) for v in resumed.values.values())


# -- cluster: resume and recovery ----------------------------------------------------------------------
SETS = ["epochs=3", "checkpoint_every=8"]


def _train(run_dir, workers=2, runtime="cluster", sets=(), **kw):
    config = resolve_config(DNN, None, SETS + list(sets))
    result = run_job(DNN, config, workers=workers, runtime=runtime, run_dir=RunDir(str(run_dir)), **kw)
    return {k: v.tobytes() for k, v in final_params(result, config)}, result


@pytest.mark.parametrize("exchange", ["linear", "allreduce"])
def test_killing_one_worker_recovers_to_bit_identical_parameters(tmp_path, exchange):
    sets = [f"exchange={exchange}"]
    reference, ref = _train(tmp_path / "reference", sets=sets)
    at = random.Random(5).randrange(20, ref.supersteps - 10)  # a seeded random superstep
    procs, killed = [], []

    def kill(line):
        if line["superstep"] == at and not killed:
            killed.append(procs[1].pid)
            os.kill(procs[1].pid, signal.SIGKILL)

    masters = []
    # forked when this test process may fork (one thread: a test of another tier can leave one behind)
    first = "ForkedWorker" if fork_is_safe() is None else "Popen"
    recovered, result = _train(tmp_path / "killed", sets=sets, on_superstep=kill,
                               on_start=lambda m, p: (procs.extend(p), masters.append(m)))
    assert killed and recovered == reference
    assert [type(p).__name__ for p in procs] == [first] * 2
    assert sorted(type(p).__name__ for p in masters[0].children) == sorted([first, "Popen"])  # a fresh replacement
    assert result.metrics[-1]["restarts"] == 1
    assert [m["superstep"] for m in result.metrics] == list(range(result.supersteps))


def test_without_checkpoints_a_lost_worker_restarts_the_job_from_its_input(tmp_path):
    """Nothing to roll back to: every worker starts again from superstep 0 (the job's input), and
    the parameters are those of an uninterrupted run."""
    reference, _ = _train(tmp_path / "reference", sets=["checkpoint_every=0"])
    procs, killed = [], []

    def kill(line):
        if line["superstep"] == 12 and not killed:
            killed.append(procs[0].pid)
            os.kill(procs[0].pid, signal.SIGKILL)

    recovered, result = _train(tmp_path / "killed", sets=["checkpoint_every=0"], on_superstep=kill,
                               on_start=lambda m, p: procs.extend(p), heartbeat_interval=0.2, worker_timeout=2.0)
    assert killed and recovered == reference
    assert result.metrics[-1]["restarts"] == 1
    assert [m["superstep"] for m in result.metrics] == list(range(result.supersteps))
    assert not list((tmp_path / "killed").glob("checkpoints/ss-*"))


def test_with_recovery_off_a_lost_worker_fails_clearly():
    procs = []

    def kill(line):
        if line["superstep"] == 3:
            os.kill(procs[0].pid, signal.SIGKILL)

    with pytest.raises(mariana.MarianaError, match="exited with code -9"):
        run_job("contract_jobs:forever", sets=["max_supersteps=100000"], workers=2, runtime="cluster",
                on_superstep=kill, on_start=lambda m, p: procs.extend(p), max_restarts=0)


@pytest.mark.slow
def test_killing_the_whole_job_then_resume_gives_identical_parameters(tmp_path):
    reference, _ = _train(tmp_path / "reference")
    run = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([sys.executable, "-m", "mariana", "run", "dnn-dp", "--workers", "2", "--run-dir", str(run),
                             *[a for s in SETS for a in ("--set", s)], "--heartbeat-interval", "0.2",
                             "--worker-timeout", "2"], env=env, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    ck = Checkpoints(RunDir(str(run)))
    while time.monotonic() < deadline and not any(ck.inspect(s).valid for s in ck.supersteps() if s >= 40):
        time.sleep(0.05)
    orphans = children(proc.pid)
    proc.kill()  # the master dies; its workers notice the silence and exit by themselves
    proc.wait()
    assert any(ck.inspect(s).valid for s in ck.supersteps()), "no checkpoint was written before the kill"
    assert main(["run", "--resume", str(run), "--heartbeat-interval", "0.2", "--worker-timeout", "2"]) == 0
    params = {name: np.load(run / "params" / f"{name}.npy").tobytes() for name in reference}
    assert params == reference
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["superstep"] for m in lines] == list(range(len(lines)))
    epochs = [m["epoch"] for m in lines if "epoch" in m]
    assert epochs == [1.0, 2.0, 3.0]  # one evaluation per epoch, none repeated or restarted at 1
    wait_for(lambda: not any(alive(pid) for pid in orphans), 20, "the killed job's workers to exit")


def test_params_export_reads_a_checkpoint_while_training_goes_on(tmp_path):
    run = tmp_path / "run"
    assert main(["run", "dnn-dp", "--run-dir", str(run), "--set", "epochs=2", "--set", "checkpoint_every=10",
                 "--max-supersteps", "25"]) == 0
    (run / "params" / "index.json").unlink()  # as if still training
    for snapshot in (run / "params").glob("ss-*"):
        for f in snapshot.iterdir():
            f.unlink()  # and as if the run predates parameter snapshots: only checkpoints exist
    assert main(["params", "export", str(run), "--to", str(tmp_path / "mid.npz")]) == 0
    with np.load(tmp_path / "mid.npz") as npz:
        assert npz.files == ["0.W", "0.b", "1.W", "1.b", "2.W", "2.b"]
    assert main(["params", "export", str(run), "--to", str(tmp_path / "x.npz"), "--checkpoint", "10"]) == 0
    assert main(["params", "export", str(run), "--to", str(tmp_path / "y.npz"), "--checkpoint", "5"]) == 2


@pytest.mark.parametrize("workers", [1, 2])
def test_shards_snapshot_the_model_into_run_params_at_every_checkpoint(tmp_path, runtime, workers, capsys):
    run = tmp_path / "run"
    sets = [x for kv in ["epochs=2", "checkpoint_every=10", "keep_checkpoints=2", "replicas=4", "exchange=linear"]
            for x in ("--set", kv)]
    assert main(["run", "dnn-dp", "--run-dir", str(run), "--workers", str(workers), "--runtime", runtime,
                 "--max-supersteps", "35", *sets]) == 0
    (run / "params" / "index.json").unlink()  # as if still training
    ck = Checkpoints(RunDir(str(run)), keep=2)
    assert ck.supersteps() == ck.params.supersteps() == [30, 20]  # written and pruned together
    snapshot = ck.params.load(30)
    assert sorted(snapshot) == [f"worker-{w}" for w in range(workers)]
    shards = {vid: s for part in snapshot.values() for vid, s in part.items()}
    assert sorted(shards) == ["shard-000", "shard-001", "shard-002", "shard-003"]  # one per replica
    checkpoint = {vid: s for name, part in ck.load(30).items() if name != "master" for vid, s in part["vertices"].items()}
    for vid, s in shards.items():  # the snapshot is the shard's value at that checkpoint, bit for bit
        assert s["value"].tobytes() == checkpoint[vid]["value"].tobytes() and s["lo"] == checkpoint[vid]["lo"]
    capsys.readouterr()
    # a reader gets the model while training goes on (no final parameters yet): from the snapshot
    assert main(["params", "export", str(run), "--to", str(tmp_path / "now.npz")]) == 0
    assert "from the parameter snapshot at superstep 30" in capsys.readouterr().out
    assert main(["params", "export", str(run), "--to", str(tmp_path / "ck.npz"), "--checkpoint", "20"]) == 0
    (run / "params" / "ss-000020" / "worker-0.part").write_bytes(b"damaged")
    assert main(["params", "export", str(run), "--to", str(tmp_path / "fb.npz"), "--checkpoint", "20"]) == 0
    assert "from the checkpoint at superstep 20" in capsys.readouterr().out  # fell back to the checkpoint
    with np.load(tmp_path / "ck.npz") as a, np.load(tmp_path / "fb.npz") as b:
        assert all(a[k].tobytes() == b[k].tobytes() for k in a.files)


@pytest.mark.slow
def test_recovery_with_the_run_directory_on_s3(tmp_path, s3_url):
    """The same kill -9 recovery with checkpoints on a real S3 server (SeaweedFS on loopback)."""
    reference, _ = _train(tmp_path / "reference")
    procs, killed = [], []

    def kill(line):
        if line["superstep"] == 45 and not killed:
            killed.append(procs[0].pid)
            os.kill(procs[0].pid, signal.SIGKILL)

    recovered, result = _train(f"{s3_url}/run", on_superstep=kill, on_start=lambda m, p: procs.extend(p))
    assert killed and recovered == reference and result.metrics[-1]["restarts"] == 1
    ck = Checkpoints(RunDir(f"{s3_url}/run"))
    assert ck.supersteps() and all(ck.inspect(ss).valid for ss in ck.supersteps())


def _master_with_workers(tmp_path, *extra):
    run = tmp_path / "run"
    master = subprocess.Popen(
        [sys.executable, "-m", "mariana", "master", "dnn-dp", "--workers", "2", "--run-dir", str(run),
         "--heartbeat-interval", "0.2", "--worker-timeout", "2", *[a for s in SETS for a in ("--set", s)],
         "--set", "epochs=6", *extra], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    from test_cluster import worker_hint

    endpoint = worker_hint(master)
    threading.Thread(target=master.stderr.read, daemon=True).start()  # keep its log pipe drained
    start = lambda: subprocess.Popen([sys.executable, "-m", "mariana", "worker", "--master", endpoint],  # noqa: E731
                                     stderr=subprocess.DEVNULL)
    return run, master, start


@pytest.mark.slow
def test_a_remote_worker_that_joins_takes_over_a_lost_partition(tmp_path):
    run, master, start = _master_with_workers(tmp_path, "--rejoin-timeout", "30")
    workers = [start(), start()]
    try:
        ck = Checkpoints(RunDir(str(run)))
        wait_for(lambda: any(ck.inspect(s).valid for s in ck.supersteps()), 60, "a first checkpoint")
        workers[0].kill()
        workers.append(start())  # any worker joining in time takes the lost partition
        assert master.wait(timeout=90) == 0
        assert workers[1].wait(timeout=30) == 0 and workers[2].wait(timeout=30) == 0
    finally:
        reap(master, *workers)
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1]["restarts"] == 1 and lines[-1]["test_accuracy"] > 0.9


@pytest.mark.slow
def test_without_a_replacement_the_job_fails_after_the_rejoin_timeout(tmp_path):
    run, master, start = _master_with_workers(tmp_path, "--rejoin-timeout", "2")
    workers = [start(), start()]
    try:
        ck = Checkpoints(RunDir(str(run)))
        wait_for(lambda: any(ck.inspect(s).valid for s in ck.supersteps()), 60, "a first checkpoint")
        workers[0].kill()
        assert master.wait(timeout=60) == 1
        info = json.loads((run / "job.json").read_text())
        assert info["status"] == "failed" and "to take over worker" in info["error"] and "--rejoin-timeout" in info["error"]
        wait_for(lambda: workers[1].poll() is not None, 30, "the surviving worker to exit")
    finally:
        reap(master, *workers)
