"""Placement: vertex id -> worker index -> device.

Strategies assign each vertex id to one of ``num_workers`` workers:

- ``hash`` (default): crc32 of the UTF-8 id, stable across processes and Python versions.
- ``range``: ids in sorted order, cut into ``num_workers`` contiguous, equal-sized ranges.
- ``explicit``: a mapping ``{id: worker}`` or a callable ``id -> worker``.
- ``group``: training graphs; a callable ``id -> (group, part)`` puts part ``p`` of group ``g``
  on worker ``g * parts + p`` (replica ``r`` and its parameter shard on worker ``r``).

Devices come from ``devices``: a mapping or callable ``id -> "cpu" | "cuda:N"`` (default cpu).
"""

from __future__ import annotations

import zlib
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

__all__ = [
    "Placement", "Strategy", "HashStrategy", "RangeStrategy", "ExplicitStrategy", "GroupStrategy",
    "resolve_strategy", "STRATEGIES",
]


class Strategy(ABC):
    """Assigns vertex ids to workers. Subclasses implement ``assign``."""

    name = "strategy"

    @abstractmethod
    def assign(self, ids: list[str], num_workers: int) -> list[int]:
        """One worker index per id, for ids in sorted order."""

    def place(self, ids: Iterable[str], num_workers: int, devices: Mapping[str, str] | Callable[[str], str] | None = None,
              sizes: Mapping[str, int] | None = None) -> "Placement":
        """Build a ``Placement`` for ``ids`` (in any order) on ``num_workers`` workers."""
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        ordered = sorted(ids)
        workers = self.assign(ordered, num_workers)
        bad = [(v, w) for v, w in zip(ordered, workers) if not 0 <= w < num_workers]
        if bad:
            v, w = bad[0]
            raise ValueError(f"placement {self.name}: vertex {v!r} assigned to worker {w}, outside 0..{num_workers - 1}")
        return Placement(dict(zip(ordered, workers)), num_workers, self.name, devices, dict(sizes or {}))


class HashStrategy(Strategy):
    name = "hash"

    def assign(self, ids: list[str], num_workers: int) -> list[int]:
        return [zlib.crc32(v.encode()) % num_workers for v in ids]


class RangeStrategy(Strategy):
    name = "range"

    def assign(self, ids: list[str], num_workers: int) -> list[int]:
        n = len(ids)
        return [i * num_workers // n for i in range(n)] if n else []


class ExplicitStrategy(Strategy):
    name = "explicit"

    def __init__(self, mapping: Mapping[str, int] | Callable[[str], int], name: str = "explicit") -> None:
        self.mapping = mapping
        self.name = name

    def assign(self, ids: list[str], num_workers: int) -> list[int]:
        if callable(self.mapping):
            return [int(self.mapping(v)) for v in ids]
        missing = [v for v in ids if v not in self.mapping]
        if missing:
            raise ValueError(f"explicit placement has no worker for vertex {missing[0]!r} ({len(missing)} missing)")
        return [int(self.mapping[v]) for v in ids]


class GroupStrategy(Strategy):
    """Part ``p`` of group ``g`` on worker ``(g * parts + p) % num_workers``.

    ``helpers`` (optional) maps a vertex to a group when it is a helper of that group (an input
    pipeline vertex): with more workers than ``groups * parts`` helpers go to the spare workers
    (group g's to spare worker ``g mod spares``), so their work overlaps the parts' compute;
    otherwise they stay where ``key`` puts them.
    """

    name = "group"

    def __init__(self, key: Callable[[str], tuple[int, int]], parts: int, groups: int = 0,
                 helpers: Callable[[str], int | None] | None = None) -> None:
        self.key = key
        self.parts = parts
        self.groups = groups
        self.helpers = helpers

    def assign(self, ids: list[str], num_workers: int) -> list[int]:
        out = []
        busy = self.groups * self.parts
        spares = num_workers - busy if self.helpers is not None and busy else 0
        for v in ids:
            helper_of = self.helpers(v) if spares > 0 else None
            if helper_of is not None:
                out.append(busy + helper_of % spares)
                continue
            g, p = self.key(v)
            out.append((g * self.parts + p) % num_workers)
        return out


STRATEGIES: dict[str, type[Strategy]] = {"hash": HashStrategy, "range": RangeStrategy}


def resolve_strategy(spec: str | Strategy | Mapping[str, int] | Callable[[str], int] | None) -> Strategy:
    """A strategy by name (``hash``, ``range``), a ``Strategy``, or a mapping/callable (explicit)."""
    if spec is None:
        return HashStrategy()
    if isinstance(spec, Strategy):
        return spec
    if isinstance(spec, str):
        try:
            return STRATEGIES[spec]()
        except KeyError:
            raise ValueError(f"unknown placement {spec!r}; choose one of: {', '.join(STRATEGIES)}") from None
    return ExplicitStrategy(spec)


@dataclass
class Placement:
    """The resolved table: which worker (and device) each vertex lives on."""

    worker: dict[str, int]
    num_workers: int
    strategy: str = "hash"
    devices: Mapping[str, str] | Callable[[str], str] | None = None
    sizes: dict[str, int] = field(default_factory=dict)

    def worker_of(self, vertex_id: str) -> int:
        return self.worker[vertex_id]

    def device_of(self, vertex_id: str) -> str:
        if self.devices is None:
            return "cpu"
        if callable(self.devices):
            return self.devices(vertex_id)
        return self.devices.get(vertex_id, "cpu")

    def vertices_of(self, worker: int) -> list[str]:
        return sorted(v for v, w in self.worker.items() if w == worker)

    def counts(self) -> list[int]:
        c = Counter(self.worker.values())
        return [c.get(w, 0) for w in range(self.num_workers)]

    def summary(self) -> dict[str, Any]:
        """Small JSON-able description for job.json and metrics."""
        held = [0] * self.num_workers
        for v, w in self.worker.items():
            held[w] += self.sizes.get(v, 1)
        return {"strategy": self.strategy, "num_workers": self.num_workers,
                "vertices_per_worker": self.counts(), "items_per_worker": held}

    def explain(self, max_ids: int = 4) -> str:
        """A table: worker, vertex count, held items (block vertices), device(s), first ids."""
        s = self.summary()
        lines = [f"placement: {self.strategy}, {self.num_workers} worker(s), {len(self.worker)} vertices",
                 f"{'worker':>6}  {'vertices':>8}  {'items':>10}  {'devices':<12}  first vertices"]
        for w in range(self.num_workers):
            ids = self.vertices_of(w)
            devices = ",".join(sorted({self.device_of(v) for v in ids})) or "-"
            first = ", ".join(ids[:max_ids]) + (", ..." if len(ids) > max_ids else "")
            lines.append(f"{w:>6}  {s['vertices_per_worker'][w]:>8}  {s['items_per_worker'][w]:>10}  {devices:<12}  {first}")
        return "\n".join(lines)
