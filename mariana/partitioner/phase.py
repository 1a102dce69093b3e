"""What a loading phase needs of the engine: the superstep's context, as a protocol.

The loader (``graphload``, ``graphbuild``) runs inside a block vertex's first supersteps and
sees the engine only through this: it aggregates, reads the last barrier's aggregates, sends
to other blocks and flushes. ``engine.Context`` satisfies it; the partitioner does not import
the engine (the engine imports the partitioner).
"""

from __future__ import annotations

from typing import Any, Protocol

from ..messages.message import Message

__all__ = ["Context", "Message"]


class Context(Protocol):
    """The part of ``engine.Context`` a loading phase uses."""

    superstep: int

    @property
    def vertex_id(self) -> str: ...

    def send(self, dst: str, payload: Any, tag: str | None = None) -> None: ...

    def flush(self) -> None: ...

    def aggregate(self, name: str, value: Any) -> None: ...

    def aggregated(self, name: str, default: Any = None) -> Any: ...
