"""Trial schedulers (a small registry): when a trial pauses and whether it goes on.

Time is counted in *reports*: the metric's appearances in a trial's ``metrics.jsonl`` (Ray
Tune's ``training_iteration``; one per epoch for the training jobs). A scheduler names the
report counts at which a trial pauses (its *rungs*) and decides, from the metric values
recorded there, whether a paused trial continues, stops, or waits.

Decisions are pure functions of recorded values and trial indices, never of timing: a trial
``i`` is compared with the trials ``j < i`` at the same rung, as if the trials had reported in
index order, and waits while one of them has not settled that rung yet. So a sweep run with
any number of parallel trials, or interrupted and resumed, stops the same trials and ends
with the same ranking as one run straight through. With one trial at a time in index order,
``asha`` makes exactly the decisions of Ray Tune's ``ASHAScheduler``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import numpy as np

from ..errors import UsageError

__all__ = ["CONTINUE", "STOP", "WAIT", "TERMINAL", "TrialView", "Scheduler", "SCHEDULERS", "make_scheduler"]

CONTINUE, STOP, WAIT = "continue", "stop", "wait"
#: Trial statuses after which a trial reports nothing more.
TERMINAL = ("completed", "stopped", "failed")


@dataclass
class TrialView:
    """What a scheduler knows of a trial: its index, status and metric value at each rung reached."""

    index: int
    status: str
    rungs: dict[int, float]

    def settled(self, milestone: int) -> bool:
        """Whether this trial's value at ``milestone`` is known, or known never to come."""
        return milestone in self.rungs or self.status in TERMINAL


class Scheduler(Protocol):
    name: str

    def next_milestone(self, reports: int) -> int | None:
        """The report count at which a trial that has made ``reports`` pauses next (None: never)."""
        ...

    def decide(self, index: int, milestone: int, trials: Sequence[TrialView]) -> str:
        """CONTINUE, STOP or WAIT for trial ``index`` paused at ``milestone``."""
        ...


def _score(value: float, mode: str) -> float:
    """Higher is better; a NaN or infinite metric (a diverged trial) is the worst."""
    if not math.isfinite(value):
        return -1e300
    return value if mode == "max" else -value


class Fifo:
    """Every trial runs its full budget (plain random or grid search)."""

    name = "fifo"

    def __init__(self, grace: int = 1, reduction: float = 3, mode: str = "max") -> None:
        self.mode = mode

    def next_milestone(self, reports: int) -> int | None:
        return None

    def decide(self, index: int, milestone: int, trials: Sequence[TrialView]) -> str:
        return CONTINUE


class _Rungs:
    def __init__(self, grace: int = 1, reduction: float = 3, mode: str = "max") -> None:
        if grace < 1:
            raise UsageError(f"--grace must be >= 1 report, got {grace}")
        if reduction <= 1:
            raise UsageError(f"--reduction must be > 1, got {reduction}")
        if mode not in ("max", "min"):
            raise UsageError(f"--mode must be max or min, got {mode!r}")
        self.grace, self.reduction, self.mode = grace, reduction, mode

    def milestones(self, upto: int) -> list[int]:
        """The rungs ``grace * reduction**k`` up to ``upto`` reports."""
        out: list[int] = []
        k = 0
        while (m := int(round(self.grace * self.reduction ** k))) <= upto:
            if not out or m > out[-1]:
                out.append(m)
            k += 1
        return out

    def next_milestone(self, reports: int) -> int | None:
        k = 0
        while (m := int(round(self.grace * self.reduction ** k))) <= reports:
            k += 1
        return m


class Asha(_Rungs):
    """Asynchronous successive halving (Li et al. 2018, Ray Tune's ``ASHAScheduler``): at each rung
    a trial goes on when its value is within the top ``1/reduction`` of the values recorded there
    by the trials before it, else it stops."""

    name = "asha"

    def decide(self, index: int, milestone: int, trials: Sequence[TrialView]) -> str:
        recorded = []
        for t in trials[:index]:
            if not t.settled(milestone):
                return WAIT
            if milestone in t.rungs:
                recorded.append(_score(t.rungs[milestone], self.mode))
        if not recorded:
            return CONTINUE
        cutoff = float(np.percentile(recorded, (1 - 1 / self.reduction) * 100))
        return STOP if _score(trials[index].rungs[milestone], self.mode) < cutoff else CONTINUE


class Halving(_Rungs):
    """Synchronous successive halving: every trial reaches a rung (or ends) before any goes on;
    the best ``1/reduction`` of those that reached it continue (at least one)."""

    name = "halving"

    def decide(self, index: int, milestone: int, trials: Sequence[TrialView]) -> str:
        if not all(t.settled(milestone) for t in trials):
            return WAIT
        ranked = sorted((t for t in trials if milestone in t.rungs),
                        key=lambda t: (-_score(t.rungs[milestone], self.mode), t.index))
        keep = max(1, int(len(ranked) / self.reduction))
        return CONTINUE if index in {t.index for t in ranked[:keep]} else STOP


SCHEDULERS: dict[str, Callable[..., Scheduler]] = {"fifo": Fifo, "asha": Asha, "halving": Halving}


def make_scheduler(name: str, grace: int = 1, reduction: float = 3, mode: str = "max") -> Scheduler:
    """A scheduler from the registry by name (one ``UsageError`` line for an unknown one)."""
    factory = SCHEDULERS.get(name)
    if factory is None:
        raise UsageError(f"unknown scheduler '{name}'; use one of {', '.join(SCHEDULERS)}")
    return factory(grace, reduction, mode)
