"""Partial recovery of every graph job: one of three workers killed (kill -9) and replaced while
the other two roll back. The output is bit-identical to an uninterrupted run of the same worker
count, whether the rollback goes to a checkpoint or, when the loss comes before the first one
(while loading the graph), back to the input.

A rolled-back survivor restores its arrays in place; a cache derived from them (PageRank's shares
of the last step, keyed by the rank array's identity) must not survive it."""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path
from typing import Any

import pytest

from mariana.jobs import get_job, resolve_config
from mariana.jobs.graphjob import collect
from mariana.jobs.launch import run_job
from mariana.storage import RunDir
from mariana.vertices.graph_blocks import LOAD_STEPS

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]

WORKERS = 3
FAST = {"heartbeat_interval": 0.2, "worker_timeout": 2.0}
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
