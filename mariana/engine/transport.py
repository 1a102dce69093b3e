"""ZeroMQ sockets and framing: the only module that imports zmq.

Every socket is created with ``linger=0`` (closing never blocks on unsent data) and an explicit
``MAXMSGSIZE`` (a peer sending a larger frame is disconnected by libzmq). High-water marks are
0 (unbounded) on purpose: within a superstep every worker sends its batch (in one or more
parts) to every peer before it reads, and a bounded queue would make those blocking sends deadlock each other once batches
outgrow it. Memory is bounded by what one superstep sends, which the job holds anyway. Routers
that send (the master) set ``ROUTER_MANDATORY``, so a message to a vanished worker raises
instead of disappearing.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import weakref
from typing import Any, Callable, Iterator, Sequence

import zmq

from ..errors import ProtocolError, UsageError
from ..messages import codec

log = logging.getLogger(__name__)

__all__ = ["Transport", "parse_endpoint", "is_loopback", "send", "recv", "drain", "Again", "Unreachable", "open_contexts"]

Again = zmq.Again
_ENDPOINT = re.compile(r"^tcp://(?P<host>\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(?P<port>\d+|\*)$")


#: Every context a Transport made in this process (``open_contexts``: may this process fork?).
_CONTEXTS: weakref.WeakSet[zmq.Context] = weakref.WeakSet()


def open_contexts() -> int:
    """How many zmq contexts of this process are open: Transports' and ``zmq.Context.instance()``."""
    made = [c for c in _CONTEXTS if not c.closed]
    shared = zmq.Context._instance
    return len(made) + (shared is not None and not shared.closed and shared not in made)


class Unreachable(Exception):
    """A ROUTER_MANDATORY send to an identity that is not connected."""


def parse_endpoint(url: str) -> tuple[str, int | None]:
    """``tcp://HOST:PORT`` -> (host, port); port ``0`` or ``*`` -> None (pick a free one)."""
    m = _ENDPOINT.match(url or "")
    if not m:
        raise UsageError(f"bad endpoint {url!r}: expected tcp://HOST:PORT")
    port = m["port"]
    return m["host"].strip("[]"), None if port in ("*", "0") else int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Transport:
    """A zmq context plus the sockets one process uses; ``close()`` closes them all."""

    def __init__(self, max_message_bytes: int = 1 << 30, security: Any = None) -> None:
        self.ctx = zmq.Context()
        _CONTEXTS.add(self.ctx)
        self.max_message_bytes = max_message_bytes
        self.sockets: list[zmq.Socket] = []
        self.security = security  # a security.Security: every socket speaks CURVE
        if security is not None:
            security.start(self.ctx)

    def socket(self, kind: int, identity: bytes | None = None, mandatory: bool = False) -> zmq.Socket:
        s = self.ctx.socket(kind)
        s.linger = 0
        s.setsockopt(zmq.SNDHWM, 0)
        s.setsockopt(zmq.RCVHWM, 0)
        s.setsockopt(zmq.MAXMSGSIZE, self.max_message_bytes)
        s.setsockopt(zmq.RECONNECT_IVL, 50)
        s.setsockopt(zmq.RECONNECT_IVL_MAX, 2000)
        if identity is not None:
            s.setsockopt(zmq.IDENTITY, identity)
        if mandatory:
            s.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.sockets.append(s)
        return s

    def router(self, bind: str, mandatory: bool = True) -> tuple[zmq.Socket, str]:
        """A bound ROUTER; returns it and the actual endpoint (random port when 0 or *)."""
        host, port = parse_endpoint(bind)
        s = self.socket(zmq.ROUTER, mandatory=mandatory)
        if self.security is not None:
            self.security.server(s)
        if ":" in host:
            s.setsockopt(zmq.IPV6, 1)
        addr = f"[{host}]" if ":" in host else host
        try:
            if port is None:
                port = s.bind_to_random_port(f"tcp://{addr}")
            else:
                s.bind(f"tcp://{addr}:{port}")
        except zmq.ZMQError as exc:
            raise UsageError(f"cannot bind tcp://{addr}:{port or '*'}: {exc}") from None
        return s, f"tcp://{addr}:{port}"

    def dealer(self, connect: str, identity: bytes, server_key: bytes | None = None) -> zmq.Socket:
        """A DEALER connected to ``connect``; a CURVE client of ``server_key`` when secure."""
        s = self.socket(zmq.DEALER, identity=identity)
        if self.security is not None:
            self.security.client(s, server_key or self.security.server_key)
        if "[" in connect:
            s.setsockopt(zmq.IPV6, 1)
        s.connect(connect)
        return s

    def close(self) -> None:
        for s in self.sockets:
            s.close(linger=0)
        self.sockets.clear()
        if self.security is not None:
            self.security.stop()
        self.ctx.term()


class HandshakeWatch:
    """Watches a CURVE client socket for handshake failures (the server refused our key, or
    speaks another security mechanism), so a worker can say so instead of waiting in silence."""

    _FAILED = zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL

    def __init__(self, sock: zmq.Socket) -> None:
        self.sock = sock
        self.mon = sock.get_monitor_socket(self._FAILED)

    def failed(self) -> str | None:
        """Why a handshake failed since the last call, or None."""
        from zmq.utils.monitor import recv_monitor_message

        why = None
        while self.mon.poll(0):
            event = recv_monitor_message(self.mon)["event"]
            why = ("the master refused this worker's key (is its public key in the master's allow-list DIR/allowed/?)"
                   if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH
                   else "the CURVE handshake with the master failed (wrong --server-key, or a master without --keys?)")
        return why

    def close(self) -> None:
        self.sock.disable_monitor()
        self.mon.close(linger=0)


def send(sock: zmq.Socket, header: dict[str, Any], identity: bytes | None = None) -> int:
    """Encode ``header`` (arrays become zero-copy frames) and send it; returns bytes sent."""
    return send_frames(sock, codec.encode(header), identity)


def send_frames(sock: zmq.Socket, frames: list, identity: bytes | None = None) -> int:
    """Send already encoded frames with ``copy=False``; returns bytes sent."""
    try:
        if identity is not None:
            sock.send_multipart([identity, *frames], copy=False)
        else:
            sock.send_multipart(frames, copy=False)
    except zmq.ZMQError as exc:
        if exc.errno == zmq.EHOSTUNREACH:
            raise Unreachable(identity) from None
        raise
    return codec.nbytes(frames)


#: ``resolve(identity, frames) -> frames``: what an empty buffer frame stands for (engine/shm.py).
Resolver = Callable[[bytes | None, Sequence[Any]], list[Any]]


def recv(sock: zmq.Socket, router: bool, limits: codec.Limits = codec.DEFAULT_LIMITS,
         resolve: Resolver | None = None) -> tuple[bytes | None, dict[str, Any], int]:
    """Receive one message without blocking: (sender identity or None, header, bytes).

    Raises ``Again`` when nothing is waiting and ``ProtocolError`` when it is malformed. With
    ``resolve``, a message with an empty buffer frame (the codec never makes one) has its frames
    resolved first: shared-memory frames of a same-host peer. ``bytes`` counts them too.
    """
    frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
    identity = None
    if router:
        identity = frames[0].bytes
        frames = frames[1:]
    try:
        if resolve is not None and any(len(f) == 0 for f in frames[1:]):
            frames = resolve(identity, frames)
        size = sum(len(f) for f in frames)
        header = codec.decode(frames, limits=limits)
    except ProtocolError as exc:
        exc.identity = identity  # who sent it: peers that keep sending garbage get banned
        raise
    kind = header.get("kind")
    if not isinstance(kind, int):
        raise ProtocolError("header", f"no message kind in header ({size} bytes)")
    return identity, header, size


def drain(sock: zmq.Socket, router: bool, drops: Any,
          resolve: Resolver | None = None) -> Iterator[tuple[bytes | None, dict[str, Any], int]]:
    """Every message waiting on ``sock`` now, decoded: (identity, header, bytes). Malformed ones
    are counted in ``drops`` (a ``DropCounter``) and messages of banned peers dropped there."""
    while True:
        try:
            identity, header, size = recv(sock, router, resolve=resolve)
        except Again:
            return
        except ProtocolError as exc:
            drops.malformed(exc.identity, exc.kind, exc.detail)
            continue
        if identity is None or not drops.banned(identity):
            yield identity, header, size


def poller(*sockets: zmq.Socket) -> zmq.Poller:
    p = zmq.Poller()
    for s in sockets:
        p.register(s, zmq.POLLIN)
    return p
