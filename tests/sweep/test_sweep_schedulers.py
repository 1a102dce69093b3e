"""Scheduler decisions driven without running jobs: rungs, cutoffs, waiting, and the same decisions
whatever order trials report in (parallel trials, resumed sweeps)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from mariana.errors import UsageError
from mariana.sweep import make_scheduler
from mariana.sweep.schedulers import CONTINUE, STOP, TERMINAL, WAIT, TrialView


def test_rungs():
    asha = make_scheduler("asha", grace=1, reduction=3)
    assert asha.milestones(30) == [1, 3, 9, 27]
    assert [asha.next_milestone(r) for r in (0, 1, 2, 3, 8, 9)] == [1, 3, 3, 9, 9, 27]
    assert make_scheduler("asha", grace=2, reduction=2).milestones(16) == [2, 4, 8, 16]
    assert make_scheduler("fifo").next_milestone(0) is None
    for bad in (dict(grace=0), dict(reduction=1), dict(mode="up")):
        with pytest.raises(UsageError):
            make_scheduler("asha", **bad)
    with pytest.raises(UsageError, match="unknown scheduler 'hyperband2'"):
        make_scheduler("hyperband2")


def test_asha_cutoff_and_wait():
    asha = make_scheduler("asha", grace=1, reduction=3, mode="max")
    views = [TrialView(0, "continue", {1: 0.5}), TrialView(1, "continue", {1: 0.9}), TrialView(2, "paused", {1: 0.6})]
    # cutoff: the 66.7th percentile of {0.5, 0.9} = 0.7667 -> 0.6 stops
    assert asha.decide(2, 1, views) == STOP
    assert asha.decide(0, 1, views) == CONTINUE  # nobody before it
    views[2].rungs[1] = 0.8
    assert asha.decide(2, 1, views) == CONTINUE
    views[1] = TrialView(1, "running", {})  # trial 1 has not reached rung 1 yet: trial 2 must wait for it
    assert asha.decide(2, 1, views) == WAIT
    views[1] = TrialView(1, "failed", {})  # it never will
    assert asha.decide(2, 1, views) == CONTINUE
    mini = make_scheduler("asha", grace=1, reduction=3, mode="min")
    assert mini.decide(1, 1, [TrialView(0, "stopped", {1: 0.3}), TrialView(1, "paused", {1: 0.5})]) == STOP
    nan = make_scheduler("asha", grace=1, reduction=3)
    assert nan.decide(1, 1, [TrialView(0, "paused", {1: 0.1}), TrialView(1, "paused", {1: float("nan")})]) == STOP


def test_halving_keeps_the_top_third():
    halving = make_scheduler("halving", grace=1, reduction=3)
    values = [0.1, 0.9, 0.5, 0.7, 0.3, 0.8]
    views = [TrialView(i, "paused", {1: v}) for i, v in enumerate(values)]
    assert [halving.decide(i, 1, views) for i in range(6)] == [STOP, CONTINUE, STOP, STOP, STOP, CONTINUE]
    views[0] = TrialView(0, "running", {})
    assert halving.decide(1, 1, views) == WAIT


def _ray_asha(curves: list[list[float]], grace: int, rf: float) -> list[int]:
    """Ray Tune's AsyncHyperBandScheduler (one bracket), trials run one after another: the reports
    each trial made before it stopped or ended."""
    rungs: list[tuple[int, dict[int, float]]] = []
    k = 0
    while grace * rf ** k <= max(map(len, curves)):
        rungs.append((int(grace * rf ** k), {}))
        k += 1
    rungs.reverse()
    made = []
    for tid, curve in enumerate(curves):
        n = len(curve)
        for it in range(1, len(curve) + 1):
            action = CONTINUE
            for milestone, recorded in rungs:
                if it < milestone or tid in recorded:
                    continue
                if recorded:
                    cutoff = np.nanpercentile(list(recorded.values()), (1 - 1 / rf) * 100)
                    if curve[it - 1] < cutoff:
                        action = STOP
                recorded[tid] = curve[it - 1]
                break
            if action == STOP:
                n = it
                break
        made.append(n)
    return made


def _simulate(curves: list[list[float]], scheduler, parallel: int, rng: random.Random) -> list[int]:
    """The sweep driver's loop with segments that end in a random order: lowest-index runnable
    trials start, each runs to its next rung (or its end), paused trials are decided in index order."""
    n = len(curves)
    status = ["pending"] * n
    reports = [0] * n
    rungs: list[dict[int, float]] = [{} for _ in range(n)]
    running: list[int] = []
    while True:
        changed = True
        while changed:
            changed = False
            views = [TrialView(i, status[i], rungs[i]) for i in range(n)]
            for i in range(n):
                if status[i] == "paused":
                    d = scheduler.decide(i, reports[i], views)
                    if d != WAIT:
                        status[i] = "continue" if d == CONTINUE else "stopped"
                        views[i] = TrialView(i, status[i], rungs[i])
                        changed = True
        for i in range(n):
            if len(running) < parallel and status[i] in ("pending", "continue") and i not in running:
                status[i] = "running"
                running.append(i)
        if not running:
            break
        i = running.pop(rng.randrange(len(running)))
        until = scheduler.next_milestone(reports[i])
        end = len(curves[i]) if until is None else min(until, len(curves[i]))
        reports[i] = end
        m = scheduler.next_milestone(0)
        while m is not None and m <= end:
            rungs[i][m] = curves[i][m - 1]
            m = scheduler.next_milestone(m)
        status[i] = "completed" if end == len(curves[i]) else "paused"
    assert all(s in TERMINAL for s in status)
    return reports


@pytest.mark.parametrize("seed", range(5))
def test_asha_matches_ray_and_ignores_timing(seed):
    rng = random.Random(seed)
    gen = np.random.default_rng(seed)
    curves = [list(np.cumsum(gen.uniform(0, 0.2, size=9))) for _ in range(16)]
    expected = _ray_asha(curves, 1, 3)
    assert expected != [9] * 16  # some trials stop early
    scheduler = make_scheduler("asha", grace=1, reduction=3)
    assert _simulate(curves, scheduler, 1, rng) == expected
    for parallel in (2, 4, 16):
        assert _simulate(curves, scheduler, parallel, rng) == expected


def test_halving_ignores_timing():
    gen = np.random.default_rng(3)
    curves = [list(np.cumsum(gen.uniform(0, 0.2, size=9))) for _ in range(9)]
    scheduler = make_scheduler("halving", grace=1, reduction=3)
    first = _simulate(curves, scheduler, 1, random.Random(0))
    assert sorted(first) == [1] * 6 + [3] * 2 + [9]
    assert all(_simulate(curves, scheduler, k, random.Random(k)) == first for k in (2, 3, 9))
