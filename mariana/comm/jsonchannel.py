"""Small control channels of one JSON frame per message (a sweep's host queue, ``sweep.remote``).

``JsonRouter`` binds (its peers are told apart by their identity), ``JsonDealer`` connects; both
send without blocking (a message to a peer that is gone is dropped: the peers' own heartbeats
say who is alive) and hand back every message waiting, decoded, or None for a frame that is not
one JSON object. Nothing executable travels (no pickle). Sockets come from a ``Transport``, so
CURVE security applies as on the cluster's sockets.
"""

from __future__ import annotations

import json
from typing import Any

import zmq

from .zmqcomm import Transport

__all__ = ["JsonRouter", "JsonDealer"]


def _decode(frame: bytes) -> dict[str, Any] | None:
    try:
        msg = json.loads(frame)
    except ValueError:
        return None
    return msg if isinstance(msg, dict) else None


class JsonRouter:
    """A bound ROUTER of JSON messages; ``wait`` also watches plain file descriptors (pipes)."""

    def __init__(self, transport: Transport, bind: str) -> None:
        self.sock, self.endpoint = transport.router(bind, mandatory=True)
        self.poller = zmq.Poller()
        self.poller.register(self.sock, zmq.POLLIN)

    def send(self, identity: bytes, msg: dict[str, Any]) -> bool:
        """False when ``identity`` is not connected (or would block)."""
        try:
            self.sock.send_multipart([identity, json.dumps(msg).encode()], zmq.NOBLOCK)
            return True
        except (zmq.Again, zmq.ZMQError):
            return False

    def receive(self) -> list[tuple[bytes, dict[str, Any] | None]]:
        """Every message waiting now: (sender identity, message or None if malformed)."""
        out: list[tuple[bytes, dict[str, Any] | None]] = []
        while True:
            try:
                frames = self.sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return out
            out.append((frames[0], _decode(frames[-1]) if len(frames) == 2 else None))

    def close(self, linger_s: float = 1.0) -> None:
        """Close the socket, letting what was just sent (a last word to every peer) leave first,
        for at most ``linger_s`` (the transport's own close drops whatever is still queued)."""
        self.sock.close(linger=int(linger_s * 1000))

    def wait(self, fds: list[int], timeout_s: float) -> tuple[bool, list[int]]:
        """Wait until a message or one of ``fds`` is readable (or ``timeout_s``): (a message waits, readable fds)."""
        for fd in fds:
            self.poller.register(fd, zmq.POLLIN)
        try:
            events = dict(self.poller.poll(int(timeout_s * 1000)))
        finally:
            for fd in fds:
                self.poller.unregister(fd)
        return self.sock in events, [fd for fd in fds if fd in events]


class JsonDealer:
    """A DEALER of JSON messages connected to a ``JsonRouter`` (reconnecting quickly: its peer
    may bind after it starts)."""

    def __init__(self, transport: Transport, connect: str, identity: bytes, server_key: bytes | None = None,
                 reconnect_max_ms: int = 250) -> None:
        self.sock = transport.socket(zmq.DEALER, identity=identity)
        self.sock.setsockopt(zmq.RECONNECT_IVL_MAX, reconnect_max_ms)
        if transport.security is not None:
            transport.security.client(self.sock, server_key or transport.security.server_key)
        if "[" in connect:
            self.sock.setsockopt(zmq.IPV6, 1)
        self.sock.connect(connect)

    def send(self, msg: dict[str, Any]) -> None:
        try:
            self.sock.send(json.dumps(msg).encode(), zmq.NOBLOCK)
        except zmq.Again:
            pass

    def receive(self, timeout_s: float) -> list[dict[str, Any]]:
        """The messages that arrive within ``timeout_s`` (all that wait, once one does); malformed ones dropped."""
        out: list[dict[str, Any]] = []
        if not self.sock.poll(int(timeout_s * 1000)):
            return out
        while True:
            try:
                msg = _decode(self.sock.recv(zmq.NOBLOCK))
            except zmq.Again:
                return out
            if msg is not None:
                out.append(msg)
