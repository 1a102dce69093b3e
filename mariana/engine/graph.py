"""Graph: the vertices of a job, their combiners and aggregators, and master compute.

A graph is built the same way in every process: each cluster worker calls the job's build
function and instantiates only the vertices placed on it. Large jobs add vertices lazily
(``add_lazy``) so that a worker never builds another worker's state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ..messages.combiners import Combiner, resolve_combiner
from ..partitioner import resolve_strategy
from .aggregators import Aggregator, resolve_aggregator
from .vertex import Vertex

__all__ = ["Graph", "MasterContext"]

#: Keys of a metrics line; aggregators may not use them.
RESERVED_METRIC_NAMES = frozenset({"superstep", "wall_s", "active", "computed", "messages", "bytes", "workers", "time"})


@dataclass
class MasterContext:
    """What master compute sees before each superstep (and may change)."""

    superstep: int
    aggregates: dict[str, Any]
    broadcasts: dict[str, Any]
    num_vertices: int
    halted: bool = False
    halt_reason: str = ""
    checkpoint_requested: bool = False

    def halt(self, reason: str = "master compute halted the job") -> None:
        """End the job before this superstep runs."""
        self.halted = True
        self.halt_reason = reason

    def checkpoint(self) -> None:
        """Checkpoint the job at the end of this superstep (e.g. at the end of an epoch)."""
        self.checkpoint_requested = True

    def broadcast(self, name: str, value: Any) -> None:
        """Make ``value`` visible to every vertex as ``ctx.broadcast(name)`` from this superstep on."""
        self.broadcasts[name] = value


MasterCompute = Callable[[MasterContext], None]


@dataclass
class Graph:
    """Vertices (eager or lazy), combiners per tag, aggregators, master compute, limits."""

    name: str = "graph"
    max_supersteps: int | None = None
    placement: Any = None  # a Strategy, its name, a mapping or a callable id -> worker
    master_compute: MasterCompute | None = None
    devices: Any = None
    #: no checkpoint is taken before this superstep: the state before it cannot be restored (a
    #: graph still loading holds its input in flight); a worker lost earlier restarts the job
    #: from its input
    first_checkpoint: int = 0
    _vertices: dict[str, Vertex] = field(default_factory=dict, repr=False)
    _lazy: dict[str, Callable[[], Vertex]] = field(default_factory=dict, repr=False)
    _sizes: dict[str, int] = field(default_factory=dict, repr=False)
    combiners: dict[str | None, Combiner] = field(default_factory=dict)
    aggregators: dict[str, Aggregator] = field(default_factory=dict)

    def add_vertex(self, vertex: Vertex) -> Vertex:
        """Add an instantiated vertex."""
        self._check_new(vertex.id)
        self._vertices[vertex.id] = vertex
        return vertex

    def add_vertices(self, vertices: Iterable[Vertex]) -> None:
        for v in vertices:
            self.add_vertex(v)

    def add_lazy(self, vertex_id: str, factory: Callable[..., Vertex], size_hint: int = 1) -> None:
        """Add a vertex built by ``factory()`` only in the process that owns it."""
        self._check_new(vertex_id)
        self._lazy[vertex_id] = factory
        self._sizes[vertex_id] = size_hint

    def add_edge(self, src: str, dst: str, value: Any = None) -> None:
        """Append the out-edge ``src -> dst`` to an eager vertex."""
        self._vertices[src].edges.append((dst, value))

    def add_combiner(self, spec: str | Combiner, tag: str | None = None) -> None:
        """Combine messages with this ``tag`` (None: untagged) sent to the same vertex."""
        self.combiners[tag] = resolve_combiner(spec)

    def add_aggregator(self, name: str, spec: str | Aggregator | Callable[[Any, Any], Any]) -> None:
        """Register aggregator ``name`` (``sum``, ``min``, ``max``, ``mean``, ``count``, ``fsum`` or custom)."""
        if name in RESERVED_METRIC_NAMES:
            raise ValueError(f"aggregator name {name!r} is reserved for metrics; choose another")
        self.aggregators[name] = resolve_aggregator(spec)

    def vertex_ids(self) -> list[str]:
        return sorted([*self._vertices, *self._lazy])

    def __len__(self) -> int:
        return len(self._vertices) + len(self._lazy)

    def __contains__(self, vertex_id: str) -> bool:
        return vertex_id in self._vertices or vertex_id in self._lazy

    def instantiate(self, vertex_id: str) -> Vertex:
        """The vertex object; lazy vertices are built here, once."""
        v = self._vertices.get(vertex_id)
        if v is None:
            v = self._lazy.pop(vertex_id)()
            if v.id != vertex_id:
                raise ValueError(f"lazy factory for {vertex_id!r} built a vertex with id {v.id!r}")
            self._vertices[vertex_id] = v
        return v

    def size_of(self, vertex_id: str) -> int:
        v = self._vertices.get(vertex_id)
        return v.size_hint() if v is not None else self._sizes.get(vertex_id, 1)

    def place(self, num_workers: int, strategy: Any = None):
        """Resolve the placement: explicit ``strategy`` > the graph's own > hash."""
        strat = resolve_strategy(strategy if strategy is not None else self.placement)
        ids = self.vertex_ids()
        return strat.place(ids, num_workers, self.devices, {v: self.size_of(v) for v in ids})

    def _check_new(self, vertex_id: str) -> None:
        if not isinstance(vertex_id, str):
            raise TypeError(f"vertex ids are strings, got {type(vertex_id).__name__}: {vertex_id!r}")
        if vertex_id in self:
            raise ValueError(f"duplicate vertex id {vertex_id!r}")
