"""``Message``: one message between vertices (what ``compute`` receives and the wire carries)."""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["Message"]


class Message(NamedTuple):
    """One message: ``src`` sent ``payload`` to ``dst`` under ``tag`` (None by default).

    A message produced by a combiner carries the ``src`` of the first message it combined.
    """

    src: str
    dst: str
    tag: str | None
    payload: Any
