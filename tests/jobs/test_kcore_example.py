"""The guide's k-core example (examples/kcore.py, docs/block-centric.md) against networkx.core_number:
both modes, one worker and two (the cluster runtime), from Python and from the command line.

The graphs are seeded random edge lists with self-loops, repeated edges (both ways too), a
vertex whose only edge is a loop, dense groups (deep cores) joined by sparse edges, and ids
such as 'v17', '10' and '9' (whose string order differs from numeric order).
"""

from __future__ import annotations

import importlib.util
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import networkx as nx
import pytest

import mariana
from mariana.jobs import BuildContext, resolve_config
from mariana.jobs.graphjob import collect
from mariana.jobs.launch import run_job

pytestmark = pytest.mark.timeout(120)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _example() -> Any:
    """examples/kcore.py, by its path (bench/kcore.py has its name too)."""
    spec = importlib.util.spec_from_file_location("kcore_example", EXAMPLES / "kcore.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


kcore = _example()


def random_graph(seed: int, n: int = 160) -> list[tuple[str, str]]:
    rnd = random.Random(seed)
    names = [str(i) for i in range(n // 2)] + [f"v{i}" for i in range(n // 2, n)]
    rnd.shuffle(names)
    edges = []
    for lo in range(0, n, 40):  # groups of 40, each denser than the last: cores of several depths
        group = names[lo:lo + 40]
        for _ in range(40 * (2 + lo // 20)):
            edges.append((rnd.choice(group), rnd.choice(group)))  # loops and repeats among them
    edges += [(rnd.choice(names), rnd.choice(names)) for _ in range(n // 2)]  # between the groups
    edges += [(d, s) for s, d in rnd.sample(edges, 20)]  # an edge again, the other way round
    edges.append(("zz-loop", "zz-loop"))
    return edges


def networkx_cores(edges: list[tuple[str, str]]) -> dict[str, int]:
    G = nx.Graph(edges)
    G.remove_edges_from(nx.selfloop_edges(G))
    return nx.core_number(G)


def write(tmp_path: Path, edges: list[tuple[str, str]]) -> Path:
    path = tmp_path / "edges.txt"
    path.write_text("# a random graph\n" + "".join(f"{s} {d}\n" for s, d in edges))
    return path


@pytest.mark.parametrize("mode", ["vertex", "block"])
@pytest.mark.parametrize("workers,runtime", [(1, "local"), (2, "local"), (2, "cluster")])
@pytest.mark.parametrize("seed", [0, 1])
def test_both_modes_give_networkx_core_numbers(tmp_path, monkeypatch, seed, mode, workers, runtime):
    edges = random_graph(seed)
    want = networkx_cores(edges)
    assert max(want.values()) >= 8 and min(want.values()) == 0  # deep cores and the loop-only vertex
    config = resolve_config(kcore.JOB, {"graph": str(write(tmp_path, edges)), "mode": mode})
    if runtime == "cluster":  # by name, as `mariana run kcore:JOB` does: workers that cannot be forked import it
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(EXAMPLES), os.environ.get("PYTHONPATH", "")]))
        monkeypatch.syspath_prepend(str(EXAMPLES))
        result = run_job("kcore:JOB", config, workers=workers, runtime=runtime)
    else:
        result = mariana.run(kcore.JOB.build(config, BuildContext(workers=workers)), workers=workers, runtime=runtime)
    assert dict(collect(result)) == want
    text, summary = kcore.JOB.finish(result, config, None)
    assert summary == {"vertices": len(want), "max_core": max(want.values())}, text


def test_one_block_takes_one_superstep_after_loading(tmp_path):
    from mariana.partitioner.fragment import LOAD_STEPS

    config = resolve_config(kcore.JOB, {"graph": str(write(tmp_path, random_graph(2))), "mode": "block"})
    result = mariana.run(kcore.JOB.build(config, BuildContext(workers=1)))
    assert result.supersteps == LOAD_STEPS + 1


def test_local_cores_takes_the_other_blocks_cores_as_heard():
    import numpy as np

    # a triangle 0-1-2 inside the block; rows 0 and 1 have one neighbour each in another block
    indptr, nbr = np.array([0, 2, 4, 6]), np.array([1, 2, 0, 2, 0, 1])
    b_row = np.array([0, 1])
    bound = np.array([3, 3, 2])
    assert kcore.local_cores(bound, indptr, nbr, b_row, np.array([9, 9])).tolist() == [2, 2, 2]
    assert kcore.local_cores(bound, indptr, nbr, b_row, np.array([0, 9])).tolist() == [2, 2, 2]
    # row 0 bounded at 1: row 2 keeps one neighbour of core 2 or more (row 1), so both fall to 1
    assert kcore.local_cores(np.array([1, 3, 2]), indptr, nbr, b_row, np.array([9, 9])).tolist() == [1, 1, 1]
    assert kcore.local_cores(np.array([3, 3, 1]), indptr, nbr, b_row, np.array([9, 9])).tolist() == [2, 2, 1]
    empty = np.zeros(0, np.int64)
    assert kcore.local_cores(empty, np.zeros(1, np.int64), empty, empty, empty).tolist() == []


@pytest.mark.parametrize("mode", ["vertex", "block"])
def test_the_command_runs_it_by_name_on_two_worker_processes(tmp_path, mode):
    edges = random_graph(3)
    graph, out = write(tmp_path, edges), tmp_path / "cores.tsv"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(EXAMPLES), *sys.path]))
    p = subprocess.run([sys.executable, "-m", "mariana", "run", "kcore:JOB", "--set", f"graph={graph}",
                        "--set", f"mode={mode}", "--set", f"output={out}", "--workers", "2",
                        "--run-dir", str(tmp_path / "run")],
                       env=env, capture_output=True, text=True, timeout=100)
    assert p.returncode == 0, p.stderr
    want = networkx_cores(edges)
    assert f"kcore: {len(want)} vertices, largest core {max(want.values())}" in p.stdout
    got = dict(line.split("\t") for line in out.read_text().splitlines())
    assert {v: int(c) for v, c in got.items()} == want


@pytest.mark.parametrize("mode", ["vertex", "block"])
def test_a_run_resumed_from_a_checkpoint_midway_gives_the_same_cores(tmp_path, mode):
    """What checkpoints keep (``state_fields``: the estimates heard; the block's fragment) is enough
    to go on from: a resume from a superstep midway ends as the uninterrupted run did."""
    import shutil

    from mariana.jobs.launch import run_job
    from mariana.storage import RunDir
    from mariana.storage.checkpoint import Checkpoints

    edges = random_graph(4)
    sets = [f"graph={write(tmp_path, edges)}", f"mode={mode}", "checkpoint_every=1", "keep_checkpoints=100"]
    run = tmp_path / "run"
    whole = run_job(kcore.JOB, sets=sets, workers=2, runtime="local", run_dir=RunDir(str(run)))
    assert dict(collect(whole)) == networkx_cores(edges)
    steps = Checkpoints(RunDir(str(run)), keep=100).supersteps()  # newest first
    midway = steps[len(steps) // 2]
    assert len(steps) >= 4 and steps[-1] < midway < steps[0]
    for ss in steps:
        if ss > midway:
            shutil.rmtree(run / "checkpoints" / f"ss-{ss:06d}")
    resumed = run_job(kcore.JOB, sets=sets, workers=2, runtime="local", run_dir=RunDir(str(run)), resume=True)
    assert dict(collect(resumed)) == dict(collect(whole)) and resumed.supersteps == whole.supersteps
