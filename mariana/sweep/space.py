"""The search space of a sweep: one distribution per config key, parsed from ``--param`` items or a
``[sweep.params]`` table, checked against the job's keys, sampled with a seeded generator.

Syntax (``KEY=DIST``; arguments are TOML values, bare words are strings)::

    lr=loguniform(1e-3, 1e-1)        log-uniform float in [low, high]
    momentum=uniform(0.8, 0.99)      uniform float in [low, high]
    hidden=int(32, 256)              uniform integer in [low, high], both ends included
    batch_size=choice(32, 64, 128)   one of the values, equally likely
    optimizer=grid(sgd, momentum)    every value: the grid's points are crossed with each other
    model=choice(["dense:64"], ["dense:128", "dense:64"])

In a TOML file, ``[sweep.params]`` maps keys to the same strings, or to a list (a choice).
The trials are the grid's points (one point when there is no grid) repeated ``trials`` times,
each with the random keys drawn in the order they were declared (Ray Tune's ``num_samples``).
"""

from __future__ import annotations

import itertools
import math
import re
import tomllib
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..errors import UsageError
from ..jobs.registry import Job, resolve_config

__all__ = ["Dist", "Space", "parse_param", "parse_space", "KINDS"]

KINDS = ("uniform", "loguniform", "int", "choice", "grid")
_ITEM = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*([a-z]+)\s*\((.*)\)\s*$", re.S)


@dataclass(frozen=True)
class Dist:
    """One key's distribution: ``kind`` (see ``KINDS``) and its arguments."""

    key: str
    kind: str
    args: tuple[Any, ...]

    def sample(self, rng: np.random.Generator) -> Any:
        """One draw (grid keys are not drawn: ``Space.trials`` crosses them)."""
        if self.kind == "uniform":
            return float(rng.uniform(self.args[0], self.args[1]))
        if self.kind == "loguniform":
            return float(math.exp(rng.uniform(math.log(self.args[0]), math.log(self.args[1]))))
        if self.kind == "int":
            return int(rng.integers(self.args[0], self.args[1], endpoint=True))
        return self.args[int(rng.integers(len(self.args)))]

    def text(self) -> str:
        return f"{self.kind}({', '.join(_show(a) for a in self.args)})"

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "kind": self.kind, "args": list(self.args)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Dist:
        return cls(d["key"], d["kind"], tuple(d["args"]))


def _show(v: Any) -> str:
    return repr(v) if isinstance(v, str) else str(v).replace("'", '"')


def _split_top(text: str) -> list[str]:
    """``text`` split at commas outside brackets and quotes."""
    parts: list[str] = []
    cur: list[str] = []
    depth, quote = 0, ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts]


def _value(raw: str, where: str) -> Any:
    """A TOML value, else a bare word as a string."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        if re.fullmatch(r"[A-Za-z0-9_.:+\-/]+", raw):
            return raw
        raise UsageError(f"{where}: cannot read {raw!r} (a number, a word, a \"string\" or a [list])") from None


def _number(v: Any, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise UsageError(f"{where}: expects numbers, got {v!r}")
    return v


def make_dist(key: str, kind: str, args: Sequence[Any], where: str) -> Dist:
    """A checked ``Dist`` (one ``UsageError`` line naming ``where`` when malformed)."""
    if kind not in KINDS:
        raise UsageError(f"{where}: unknown distribution '{kind}'; use one of {', '.join(KINDS)}")
    args = tuple(args)
    if kind in ("uniform", "loguniform", "int"):
        if len(args) != 2:
            raise UsageError(f"{where}: {kind} takes two arguments (low, high), got {len(args)}")
        lo, hi = (_number(a, where) for a in args)
        if kind == "int" and not all(isinstance(a, int) for a in args):
            raise UsageError(f"{where}: int takes integer bounds, got {lo}, {hi}")
        if lo > hi or (lo == hi and kind != "int"):
            raise UsageError(f"{where}: low {lo} must be below high {hi}")
        if kind == "loguniform" and lo <= 0:
            raise UsageError(f"{where}: loguniform needs positive bounds, got {lo}")
        args = (lo, hi)
    elif not args:
        raise UsageError(f"{where}: {kind} needs at least one value")
    return Dist(key, kind, args)


def parse_param(item: str, where: str = "--param") -> Dist:
    """``KEY=KIND(ARGS)`` -> ``Dist``."""
    m = _ITEM.match(item)
    if not m:
        raise UsageError(f"{where} {item!r}: expected KEY=DIST(ARGS), e.g. lr=loguniform(1e-3,1e-1) "
                         f"(distributions: {', '.join(KINDS)})")
    key, kind, body = m.groups()
    where = f"{where} {key}"
    args = [_value(a, where) for a in _split_top(body)] if body.strip() else []
    return make_dist(key, kind, args, where)


def parse_space(items: Sequence[str], table: dict[str, Any] | None = None, file_name: str = "") -> list[Dist]:
    """The distributions of ``[sweep.params]`` (``table``) then of ``--param`` items (which win)."""
    dists: dict[str, Dist] = {}
    for key, spec in (table or {}).items():
        where = f"{file_name}: [sweep.params] {key}"
        if isinstance(spec, list):
            dists[key] = make_dist(key, "choice", spec, where)
        elif isinstance(spec, str):
            d = parse_param(f"{key}={spec}", f"{file_name}: [sweep.params]")
            dists[key] = d
        else:
            raise UsageError(f"{where}: expected a distribution string such as \"loguniform(1e-3, 1e-1)\" "
                             f"or a list of choices, got {spec!r}")
    for item in items:
        d = parse_param(item)
        dists[d.key] = d
    return list(dists.values())


class Space:
    """The distributions of a sweep over ``job``, checked against its keys and value types."""

    def __init__(self, job: Job, dists: Sequence[Dist]) -> None:
        if not dists:
            raise UsageError("the search space is empty: give --param KEY=DIST(ARGS) or a [sweep.params] table")
        self.job, self.dists = job, list(dists)
        for d in self.dists:
            key = job.key_index.get(d.key)
            if key is None:
                resolve_config(job, {d.key: None}, file_name="--param")  # the unknown-key line with its hint
            assert key is not None
            if d.kind in ("uniform", "loguniform") and key.type != "float":
                raise UsageError(f"--param {d.key}: {d.kind} draws floats but config key '{d.key}' is {key.type}")
            if d.kind == "int" and key.type not in ("int", "float"):
                raise UsageError(f"--param {d.key}: int draws integers but config key '{d.key}' is {key.type}")
            for v in d.args:  # every value a choice or grid can take, and both ends of a range
                key.check(v, f"--param {d.key}: ")

    @property
    def grid(self) -> list[Dist]:
        return [d for d in self.dists if d.kind == "grid"]

    def size(self, trials: int) -> int:
        return trials * math.prod(len(d.args) for d in self.grid)

    def trials(self, trials: int, seed: int) -> list[dict[str, Any]]:
        """The parameters of every trial, in trial order: deterministic in (space, trials, seed)."""
        if trials < 1:
            raise UsageError(f"--trials must be >= 1, got {trials}")
        rng = np.random.default_rng(seed)
        grid = self.grid
        points = list(itertools.product(*(d.args for d in grid)))
        out = []
        for _ in range(trials):
            for point in points:
                fixed = dict(zip((d.key for d in grid), point))
                out.append({d.key: fixed[d.key] if d.kind == "grid" else d.sample(rng) for d in self.dists})
        return out

    def describe(self) -> dict[str, str]:
        return {d.key: d.text() for d in self.dists}
