"""What a vertex program sees: ``Vertex``, ``Context`` and ``Message``.

A vertex has an id (str), a ``value``, optional out-edges ``[(dst, edge_value), ...]`` and a
``compute(ctx, messages)`` method. The engine calls ``compute`` exactly once per superstep for
every vertex that is active or has messages; ``messages`` are those sent to it in the previous
superstep, ordered by (source vertex id, send order within that source). Payload arrays are
passed without copying, so treat received arrays as read-only (copy before modifying).
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from ..messages.message import Message

__all__ = ["Vertex", "Context", "Message", "array_module"]


class Vertex:
    """Base class of vertex programs. Subclass it and override ``compute``.

    ``result()`` is what the job collects at the end (default: ``value``).
    ``size_hint()`` says how many graph items a block vertex holds (placement tables).

    ``state_fields`` names the attributes a checkpoint captures (plain data: numbers, strings,
    arrays, RNGs, lists and dicts of those; ``("value",)`` here): a subclass with more state
    declares them, e.g. ``state_fields = (*Vertex.state_fields, "seen", "rng")``; everything else
    is rebuilt by the job. Optional hooks: ``state_dict()``/``load_state_dict()`` replace that
    capture (engine/state.py); ``params_snapshot()`` returns the model parameters this vertex
    holds (plain data with arrays), written to ``RUN/params/ss-NNNNNN/`` at every checkpoint
    so the model can be read while training goes on.
    """

    __slots__ = ("id", "value", "edges")
    #: the attributes a checkpoint captures (engine/state.py)
    state_fields: tuple[str, ...] = ("value",)

    def __init__(self, id: str, value: Any = None, edges: Iterable[tuple[str, Any]] | None = None) -> None:
        self.id = id
        self.value = value
        self.edges: list[tuple[str, Any]] = list(edges) if edges is not None else []

    def compute(self, ctx: "Context", messages: list[Message]) -> None:
        """Run one superstep of this vertex. The default halts at once."""
        ctx.vote_to_halt()

    def result(self) -> Any:
        return self.value

    def size_hint(self) -> int:
        return 1

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.id!r})"


def array_module(device: str) -> Any:
    """numpy for ``cpu``; cupy for ``cuda:N`` (imported only when a vertex sits on a GPU)."""
    if device == "cpu":
        return np
    if device.startswith("cuda"):
        import cupy  # optional dependency: pip install 'mariana-bsp[gpu]'

        return cupy
    raise ValueError(f"unknown device {device!r} (expected 'cpu' or 'cuda:N')")


class Context:
    """The engine as seen from inside ``compute``. One instance per partition, re-bound per vertex.

    Sends, halts and aggregates are recorded on the owning ``Partition``; nothing is delivered
    before the next superstep.
    """

    __slots__ = (
        "_partition", "_vertex_id", "_device", "superstep", "num_vertices",
        "worker", "num_workers", "_aggregated", "broadcasts",
    )

    def __init__(self, partition: Any, num_vertices: int, worker: int, num_workers: int) -> None:
        self._partition = partition
        self._vertex_id = ""
        self._device = "cpu"
        self.superstep = 0
        self.num_vertices = num_vertices
        self.worker = worker
        self.num_workers = num_workers
        self._aggregated: dict[str, Any] = {}
        self.broadcasts: dict[str, Any] = {}

    def begin(self, superstep: int, aggregates: dict[str, Any], broadcasts: dict[str, Any]) -> None:
        """Enter ``superstep``: the aggregates reduced at the last barrier, master compute's broadcasts."""
        self.superstep, self._aggregated, self.broadcasts = superstep, aggregates, broadcasts

    def bind(self, vertex_id: str, device: str) -> None:
        """The vertex whose ``compute`` runs next (a replay binds one vertex; the partition's loop sets these itself)."""
        self._vertex_id, self._device = vertex_id, device

    @property
    def vertex_id(self) -> str:
        return self._vertex_id

    @property
    def device(self) -> str:
        return self._device

    @property
    def xp(self) -> Any:
        """numpy or cupy, matching this vertex's device."""
        return array_module(self._device)

    def send(self, dst: str, payload: Any, tag: str | None = None) -> None:
        """Send ``payload`` to vertex ``dst``; it arrives in the next superstep."""
        self._partition.send(self._vertex_id, dst, tag, payload)

    def send_buffer(self, size: int, dtype: Any = np.float32) -> np.ndarray:
        """A writable, zeroed 1-D array of ``size`` elements that this vertex keeps, for sending.

        On the cluster runtime with shared memory it lives in memory every same-host peer has
        mapped, so an array view of it in a message reaches those peers as a descriptor, with no
        copy (elsewhere: a plain ``np.zeros``, and messages behave as usual). Call it once per
        buffer (e.g. lazily in the first ``compute``) and keep the array; it survives rollbacks
        (reload state into it in place).

        The contract: receivers read a send buffer in the superstep after the send, straight from
        the sender's memory. So a vertex must not write memory it sent from a send buffer before
        two supersteps after the send (sent in t, receivers read in t+1, writable again in t+2):
        alternate two buffers if it sends every superstep. Receivers must not keep such a payload
        beyond the superstep they received it in (copy it to keep it). Checkpoints and message
        captures copy or write payloads before the sender may reuse them. Sending the same bytes
        in two consecutive supersteps is logged once as an error and counted in the trace
        (``send_buffer_reuse``).
        """
        return self._partition.send_buffer(int(size), dtype)

    def flush(self) -> None:
        """Let the messages sent so far leave now, while this vertex goes on computing (e.g. a
        gradient bucket as soon as backward produced it). Delivery order is unchanged: (source id,
        send order), in the next superstep. On the cluster runtime they are sent to their workers
        at once (graphs without combiners); elsewhere this does nothing."""
        self._partition.flush()

    def host_of(self, vertex_id: str) -> str:
        """The host vertex ``vertex_id`` runs on, as a key equal for every vertex of one host
        (on the cluster runtime: its worker's advertised address; elsewhere one key for all).
        For layouts that send less across hosts; results must never depend on it."""
        hosts = self._partition.hosts
        return "" if hosts is None else hosts[self._partition.owner[vertex_id]]

    def send_to_neighbors(self, payload: Any, tag: str | None = None, edges: Iterable[tuple[str, Any]] | None = None) -> None:
        """Send the same payload along every out-edge (or along ``edges``)."""
        send = self._partition.send
        src = self._vertex_id
        for dst, _ in edges if edges is not None else self._partition.vertices[src].edges:
            send(src, dst, tag, payload)

    def vote_to_halt(self) -> None:
        """Become inactive until a message arrives."""
        self._partition.halt(self._vertex_id)

    def aggregate(self, name: str, value: Any) -> None:
        """Contribute ``value`` to aggregator ``name``; the reduced value is visible next superstep."""
        self._partition.aggregate(self._vertex_id, name, value)

    def aggregated(self, name: str, default: Any = None) -> Any:
        """The value of aggregator ``name`` reduced at the end of the previous superstep."""
        return self._aggregated.get(name, default)

    def broadcast(self, name: str, default: Any = None) -> Any:
        """A value master compute broadcast (persists until master compute changes it)."""
        return self.broadcasts.get(name, default)
