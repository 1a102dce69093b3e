"""Partial recovery of every graph job: one of three workers killed (kill -9) and replaced while
the other two roll back. The output is bit-identical to an uninterrupted run of the same worker
count, whether the rollback goes to a checkpoint or, when the loss comes before the first one
(while loading the graph), back to the input.

A rolled-back survivor restores its arrays in place; a cache derived from them (PageRank's shares
of the last step, keyed by the rank array's identity) must not survive it."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mariana.jobs import get_job, resolve_config
from mariana.jobs.graphjob import collect
from mariana.jobs.launch import run_job
from mariana.storage import RunDir
from mariana.partitioner.fragment import LOAD_STEPS

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]

WORKERS = 3
FAST: dict[str, Any] = {"heartbeat_interval": 0.2, "worker_timeout": 2.0}
#: each job with its config: long enough that a kill after the first checkpoint leaves steps to run
JOBS: dict[str, list[str]] = {
    "pagerank": ["tol=0", "iterations=30"],
    "sssp": ["source=p0"],
    "bfs": ["source=p0"],
    "wcc": [],
    "cdlp": ["iterations=12"],
    "lcc": [],
}


def _graph(path: Path) -> str:
    """A seeded random graph (weights, self-loops, parallel edges, dangling vertices) with a long
    path through it, so that the traversals take many supersteps across the three blocks."""
    rnd = random.Random(51)
    lines = []
    names = [f"v{i}" for i in range(300)]
    for _ in range(1200):
        lines.append(f"{rnd.choice(names[:250])} {rnd.choice(names)} {rnd.uniform(0.5, 4.0):.3f}")
    path_ids = [f"p{i}" for i in range(40)]
    for a, b in zip(path_ids, path_ids[1:]):
        lines.append(f"{a} {b} 1.0")
    lines.append(f"{path_ids[-1]} v0 1.0")
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _graph(tmp_path_factory.mktemp("graph") / "g.txt")


def _run(job: str, graph: str, run_dir: Path, sets: list[str], **kw: Any) -> tuple[list[tuple[str, Any]], Any]:
    config = resolve_config(get_job(job), None, [f"graph={graph}", *JOBS[job], *sets])
    result = run_job(job, config, workers=WORKERS, runtime="cluster", run_dir=RunDir(str(run_dir)), **FAST, **kw)
    return collect(result), result


@pytest.fixture(scope="module")
def reference(graph: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[list, int]]:
    """Each job's output and superstep count, uninterrupted."""
    out = {}
    for job in JOBS:
        rows, result = _run(job, graph, tmp_path_factory.mktemp(f"ref-{job}"), [])
        out[job] = (rows, result.supersteps)
    return out


def _killer(procs: list[Any], killed: list[int], at: int):
    def hook(line: dict[str, Any]) -> None:
        if line["superstep"] == at and not killed:
            killed.append(procs[1].pid)
            os.kill(procs[1].pid, signal.SIGKILL)
    return hook


@pytest.mark.parametrize("job", list(JOBS))
def test_a_worker_killed_after_a_checkpoint_is_replaced_bit_identically(tmp_path, graph, reference, job):
    """Two supersteps past a checkpoint: the survivors have run ahead of it, and every array they
    restore in place held a later value than the one it gets back."""
    rows, supersteps = reference[job]
    every = 4
    at = max(every, supersteps // 2 // every * every) + 2
    assert at < supersteps - 1, f"{job} ran {supersteps} supersteps: too few to kill one after a checkpoint"
    procs: list[Any] = []
    killed: list[int] = []
    got, result = _run(job, graph, tmp_path / "run", [f"checkpoint_every={every}"],
                       on_superstep=_killer(procs, killed, at), on_start=lambda m, p: procs.extend(p))
    assert killed and result.metrics[-1]["restarts"] == 1
    assert got == rows
    assert result.supersteps == supersteps
    assert [m["superstep"] for m in result.metrics] == list(range(result.supersteps))


@pytest.mark.parametrize("job", ["pagerank", "wcc", "sssp"])
@pytest.mark.parametrize("at", range(LOAD_STEPS))
def test_a_worker_killed_while_loading_restarts_the_job_from_its_input(tmp_path, graph, reference, job, at):
    """No checkpoint yet (none is taken while the graph loads): the job starts again from the
    input on every worker, the replacement reading the lost worker's splits."""
    rows, supersteps = reference[job]
    procs: list[Any] = []
    killed: list[int] = []
    got, result = _run(job, graph, tmp_path / "run", ["checkpoint_every=1"],
                       on_superstep=_killer(procs, killed, at), on_start=lambda m, p: procs.extend(p))
    assert killed and result.metrics[-1]["restarts"] == 1
    assert got == rows
    assert [m["superstep"] for m in result.metrics] == list(range(result.supersteps))
    ckpts = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir())
    assert ckpts and all(int(name.split("-")[1]) >= LOAD_STEPS for name in ckpts)


def test_a_worker_lost_without_any_checkpoint_restarts_the_job_from_its_input(tmp_path, graph, reference):
    """checkpoint_every=0: nothing to roll back to at all, and still no lost job."""
    rows, _ = reference["pagerank"]
    procs: list[Any] = []
    killed: list[int] = []
    got, result = _run("pagerank", graph, tmp_path / "run", [],
                       on_superstep=_killer(procs, killed, LOAD_STEPS + 4), on_start=lambda m, p: procs.extend(p))
    assert killed and result.metrics[-1]["restarts"] == 1
    assert got == rows


PAUSED_MASTER = """
import sys, time
from pathlib import Path
from mariana.engine.options import RunOptions
from mariana.jobs import get_job, resolve_config
from mariana.jobs.launch import launch
from mariana.storage import RunDir
graph, run, out, flag = sys.argv[1:5]
def hook(line):  # superstep 1 done: tell the test, which pauses this process, then wait for its word
    if line["superstep"] == 1 and flag != "-" and not Path(flag + ".go").exists():
        Path(flag).touch()
        deadline = time.monotonic() + 120
        while not Path(flag + ".go").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
job = get_job("pagerank")
config = resolve_config(job, None, [f"graph={graph}", f"output={out}", *sys.argv[5:]])
launch(job, config, RunOptions.from_config(config, workers=2, runtime="cluster", run_dir=RunDir(run), on_superstep=hook,
                                           heartbeat_interval=0.2, worker_timeout=1.5), finish=True)
"""


def test_a_master_paused_past_the_worker_timeout_before_any_checkpoint_finishes_the_job(tmp_path, graph):
    """Paused while the graph loads: the workers give the silent master up and exit; when it
    wakes, it finds them gone, starts new ones and runs the job again from its input. The output
    is that of an uninterrupted run."""
    from test_cluster import alive, children, env_with_tests, wait_for

    def master(run: str, out: str, flag: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", PAUSED_MASTER, graph, str(tmp_path / run), str(tmp_path / out),
                                 flag, *JOBS["pagerank"]],
                                env=env_with_tests(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    ref = master("ref", "ref.tsv", "-")
    assert ref.wait(timeout=120) == 0, ref.stderr.read() if ref.stderr else ""
    flag = tmp_path / "paused"
    proc = master("run", "out.tsv", str(flag))
    try:
        wait_for(flag.exists, 60, "superstep 1")
        kids = children(proc.pid)
        assert len(kids) == 2
        os.kill(proc.pid, signal.SIGSTOP)
        wait_for(lambda: not any(alive(k) for k in kids), 30, "the workers to give the paused master up")
        os.kill(proc.pid, signal.SIGCONT)
        Path(f"{flag}.go").touch()
        assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.wait()
    assert (tmp_path / "out.tsv").read_bytes() == (tmp_path / "ref.tsv").read_bytes()
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["superstep"] for m in lines] == list(range(len(lines))) and lines[-1]["restarts"] == 1
