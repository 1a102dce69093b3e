"""The one exception hierarchy of the project, caught once at the CLI boundary.

- ``UsageError``: the user asked for something invalid (unknown job, bad config key or
  value, malformed input file). The CLI prints one line and exits 2.
- ``VertexError``: a vertex program raised. It names the vertex and the superstep; the CLI
  prints that line plus the original traceback and exits 1.
- ``ProtocolError``: a message on the wire is malformed. It never escapes a process: the
  receiver drops the message and counts it under ``kind``.
- ``StorageError``: the run directory could not be read or written.
"""

from __future__ import annotations


class MarianaError(Exception):
    """Base class of every error the project raises on purpose."""

    exit_code = 1


class UsageError(MarianaError):
    """Invalid user input: one clear line, exit code 2."""

    exit_code = 2


class VertexError(MarianaError):
    """A vertex program raised inside ``compute``."""

    def __init__(self, vertex_id: str, superstep: int, message: str, traceback_text: str = "") -> None:
        super().__init__(f"vertex {vertex_id!r} failed at superstep {superstep}: {message}")
        self.vertex_id = vertex_id
        self.superstep = superstep
        self.detail = message
        self.traceback_text = traceback_text


class ProtocolError(MarianaError):
    """A malformed or unacceptable wire message; ``kind`` names the counter it goes to."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail
        self.identity: bytes | None = None


class StorageError(MarianaError):
    """The run directory (any fsspec URL) could not be read or written."""
