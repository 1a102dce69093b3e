"""ZeroMQ sockets and framing for both schemes of the registry (``comm/__init__.py``).

``tcp://HOST:PORT`` connects processes and hosts; ``inproc://NAME`` connects threads of one
process through zmq's in-process transport, in one process-wide context (``inproc_context``), so
the cluster's whole wire path (codec, wire records, routing) runs with no network at all.

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
import itertools
import logging
import re
import threading
import time
import weakref
from typing import Any, Callable, Iterator, Sequence

import zmq
from zmq.utils.garbage import gc as _garbage

from ..errors import ProtocolError, UsageError
from ..messages import codec

log = logging.getLogger(__name__)

__all__ = ["Transport", "parse_endpoint", "is_loopback", "send", "send_each", "recv", "drain", "readable", "Again",
           "Unreachable", "open_contexts", "HEARTBEAT_PREFIX", "heartbeat_of"]

Again = zmq.Again
# plain ints: zmq's IntFlag members build a new enum object on every ``|`` and ``&`` (and
# ``Socket.get`` one per call), a dozen a superstep on the barrier's path (bench/superstep_latency.py)
_SNDMORE, _NOBLOCK = int(zmq.SNDMORE), int(zmq.NOBLOCK)
_POLLIN = int(zmq.POLLIN)
_SMALL = 1 << 16  # a header frame up to this size is copied to bytes to be decoded
_zmq_poll = zmq.zmq_poll
#: pyzmq's own send, without the Python wrapper of ``zmq.Socket.send`` (its routing_id and group
#: arguments, unused here): half the cost of a small frame's send
_send = zmq.backend.Socket.send
_ENDPOINT = re.compile(r"^tcp://(?P<host>\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(?P<port>\d+|\*)$")
_INPROC = re.compile(r"^inproc://(?P<name>[A-Za-z0-9_.*/-]+)$")

#: A worker's heartbeat socket has its control identity with this prefix: the master tells
#: heartbeats from control messages by the sender, before decoding anything.
HEARTBEAT_PREFIX = b"hb:"


def heartbeat_of(identity: bytes) -> bytes | None:
    """The control identity whose heartbeat socket sent from ``identity``, or None (not a heartbeat)."""
    return identity[len(HEARTBEAT_PREFIX):] if identity.startswith(HEARTBEAT_PREFIX) else None

#: The one context of this process's ``inproc://`` endpoints (inproc needs a shared context): a
#: cache that lives as long as the process; only its sockets are closed.
_INPROC_CONTEXT: zmq.Context | None = None


def inproc_context() -> zmq.Context:
    global _INPROC_CONTEXT
    if _INPROC_CONTEXT is None or _INPROC_CONTEXT.closed:
        _INPROC_CONTEXT = zmq.Context()
    return _INPROC_CONTEXT


#: Every context a Transport made in this process (``open_contexts``: may this process fork?).
_CONTEXTS: weakref.WeakSet[zmq.Context] = weakref.WeakSet()


def open_contexts() -> int:
    """How many zmq contexts of this process are open: Transports' and ``zmq.Context.instance()``."""
    made = [c for c in _CONTEXTS if not c.closed]
    shared = zmq.Context._instance
    return len(made) + (shared is not None and not shared.closed and shared not in made)


_names = itertools.count()


class Unreachable(Exception):
    """A ROUTER_MANDATORY send to an identity that is not connected."""


def parse_endpoint(url: str) -> tuple[str, int | None]:
    """``tcp://HOST:PORT`` -> (host, port); port ``0`` or ``*`` -> None (pick a free one).
    ``inproc://NAME`` -> ("inproc", None): in this process, which counts as loopback."""
    if _INPROC.match(url or ""):
        return "inproc", None
    m = _ENDPOINT.match(url or "")
    if not m:
        raise UsageError(f"bad endpoint {url!r}: expected tcp://HOST:PORT or inproc://NAME")
    port = m["port"]
    return m["host"].strip("[]"), None if port in ("*", "0") else int(port)


def is_loopback(host: str) -> bool:
    if host in ("localhost", "inproc"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Transport:
    """A zmq context plus the sockets one process uses; ``close()`` closes them all."""

    def __init__(self, max_message_bytes: int = 1 << 30, security: Any = None, inproc: bool = False) -> None:
        if inproc and security is not None:
            raise UsageError("CURVE security needs tcp:// endpoints; inproc:// never leaves this process")
        self.inproc = inproc
        self.ctx = inproc_context() if inproc else zmq.Context()
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

    def data_bind(self, host: str) -> str:
        """Where a worker on ``host`` binds its data socket, in this transport's scheme."""
        return "inproc://*" if self.inproc else f"tcp://{f'[{host}]' if ':' in host else host}:0"

    def router(self, bind: str, mandatory: bool = True, handover: bool = False) -> tuple[zmq.Socket, str]:
        """A bound ROUTER; returns it and the actual endpoint (random port when 0 or *, a fresh
        name for ``inproc://*``). ``handover``: a new connection with an identity already
        connected takes it over (``ROUTER_HANDOVER``)."""
        m = _INPROC.match(bind)
        if m:
            s = self.socket(zmq.ROUTER, mandatory=mandatory)
            if handover:
                s.setsockopt(zmq.ROUTER_HANDOVER, 1)
            name = m["name"] if m["name"] != "*" else f"mariana-{next(_names)}"
            try:
                s.bind(f"inproc://{name}")
            except zmq.ZMQError as exc:
                raise UsageError(f"cannot bind inproc://{name}: {exc}") from None
            return s, f"inproc://{name}"
        host, port = parse_endpoint(bind)
        s = self.socket(zmq.ROUTER, mandatory=mandatory)
        if handover:
            s.setsockopt(zmq.ROUTER_HANDOVER, 1)
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

    def dealer(self, connect: str | None, identity: bytes, server_key: bytes | None = None) -> zmq.Socket:
        """A DEALER connected to ``connect`` (None: not yet, see ``connect``); a CURVE client of
        ``server_key`` when secure."""
        s = self.socket(zmq.DEALER, identity=identity)
        if self.security is not None:
            self.security.client(s, server_key or self.security.server_key)
        if connect is not None:
            self.connect(s, connect)
        return s

    @staticmethod
    def connect(s: zmq.Socket, endpoint: str) -> None:
        """Connect ``s`` to ``endpoint`` (an IPv6 address turns IPv6 on first)."""
        if "[" in endpoint:
            s.setsockopt(zmq.IPV6, 1)
        s.connect(endpoint)

    def heartbeat(self, connect: str, identity: bytes, server_key: bytes | None = None) -> zmq.Socket:
        """The heartbeat DEALER of the worker whose control identity is ``identity``. Made and
        closed by the heartbeat thread itself (a zmq socket belongs to one thread), so not kept."""
        s = self.ctx.socket(zmq.DEALER)
        s.linger = 0
        s.setsockopt(zmq.IDENTITY, HEARTBEAT_PREFIX + identity)
        s.setsockopt(zmq.MAXMSGSIZE, 1 << 20)
        if self.security is not None:
            self.security.client(s, server_key or self.security.server_key)
        s.connect(connect)
        return s

    def close(self) -> None:
        for s in self.sockets:
            s.close(linger=0)
        self.sockets.clear()
        if self.security is not None:
            self.security.stop()
        if not self.inproc:  # the shared in-process context outlives every transport
            self.ctx.term()


_FAILED = zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL


class ConnectWatch:
    """Watches one socket, from before it connects: ``connected`` turns true once a TCP connection
    is made; ``failed()`` says why a CURVE handshake failed (with ``handshakes``). One monitor per
    socket."""

    def __init__(self, sock: zmq.Socket, handshakes: bool = False) -> None:
        self.sock = sock
        self.connected = False
        self._why: str | None = None
        self.mon = sock.get_monitor_socket(zmq.EVENT_CONNECTED | (_FAILED if handshakes else 0))

    def update(self) -> None:
        """Take the events that came: a connection made, a handshake failed (kept for ``failed``)."""
        from zmq.utils.monitor import recv_monitor_message

        while self.mon.poll(0):
            event = recv_monitor_message(self.mon)["event"]
            if event == zmq.EVENT_CONNECTED:
                self.connected = True
            elif event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                self._why = "the master refused this worker's key (is its public key in the master's allow-list DIR/allowed/?)"
            else:
                self._why = "the CURVE handshake with the master failed (wrong --server-key, or a master without --keys?)"

    def failed(self) -> str | None:
        """Why a handshake failed since the last call, or None."""
        self.update()
        why, self._why = self._why, None
        return why

    def close(self) -> None:
        """Stop watching (before the socket's context ends: the monitor is a socket of it too)."""
        try:
            self.sock.disable_monitor()
        except zmq.ZMQError:  # the socket is closed already
            pass
        self.mon.close(linger=0)


def unreached(watches: dict[int, ConnectWatch], timeout: float, stop: threading.Event | None = None) -> list[int]:
    """Wait at most ``timeout`` seconds (or until ``stop``) for every watched socket to connect;
    the keys of those that did not, in order. Every watch is closed on return."""
    deadline = time.monotonic() + timeout
    try:
        while True:
            for key, w in list(watches.items()):
                w.update()
                if w.connected:
                    watches.pop(key).close()
            left = deadline - time.monotonic()
            if not watches or left <= 0 or (stop is not None and stop.is_set()):
                return sorted(watches)
            poller = zmq.Poller()
            for w in watches.values():
                poller.register(w.mon, zmq.POLLIN)
            poller.poll(max(1, int(min(left, 0.5) * 1000)))
    finally:
        for w in watches.values():
            w.close()


def send(sock: zmq.Socket, header: dict[str, Any], identity: bytes | None = None, nowait: bool = False) -> int:
    """Encode ``header`` (arrays become zero-copy frames) and send it; returns bytes sent.
    ``nowait``: raise ``Again`` instead of blocking when the message cannot be queued now (a
    DEALER with no connected peer blocks)."""
    return send_frames(sock, codec.encode(header), identity, nowait)


def send_frames(sock: zmq.Socket, frames: list, identity: bytes | None = None, nowait: bool = False,
                copy: bool = False) -> int:
    """Send already encoded frames, by default with ``copy=False`` (pyzmq copies frames below its
    copy threshold anyway); returns bytes sent. (``send_multipart`` frame by frame, without its
    per-call checks and enum flags: this is every message's path.)

    ``copy=True`` where the caller goes on computing: a zero-copy frame stays alive until pyzmq's
    garbage-collector thread hears that libzmq sent it, and that thread takes the GIL once per
    frame, which a thread computing in numpy hands over once per switch interval (5 ms): a
    scale-21 route sent while its worker went on routing was still held, 136 MiB in 348 frames,
    when the next superstep began. A copy is libzmq's own, freed by its IO thread once sent."""
    last, flags = len(frames) - 1, _NOBLOCK if nowait else 0
    try:
        if identity is not None:
            _send(sock, identity, _SNDMORE | flags)
        for i, frame in enumerate(frames):
            _send(sock, frame, (_SNDMORE if i < last else 0) | flags, copy)
    except zmq.ZMQError as exc:
        if exc.errno == zmq.EHOSTUNREACH:
            raise Unreachable(identity) from None
        raise
    return codec.nbytes(frames)


def send_each(sock: zmq.Socket, frames: list, identities: Sequence[bytes], start: int = 0) -> int | None:
    """Send the same encoded ``frames`` to every ROUTER identity of ``identities`` from ``start``
    on (the master's BEGIN to every worker: one encoding, one loop); returns the position of the
    first identity that is not connected (the ones after it are not sent to yet), or None."""
    last = len(frames) - 1
    flags = [_SNDMORE] * last + [0]
    for at in range(start, len(identities)):
        try:
            _send(sock, identities[at], _SNDMORE)
            for frame, flag in zip(frames, flags):
                _send(sock, frame, flag, False)
        except zmq.ZMQError as exc:
            if exc.errno == zmq.EHOSTUNREACH:
                return at
            raise
    return None


def readable(sock: zmq.Socket, timeout_ms: int) -> bool:
    """Whether a message waits on ``sock`` within ``timeout_ms`` (zmq_poll without a Poller's
    per-call registration and result list)."""
    return bool(_zmq_poll([(sock, _POLLIN)], timeout_ms))


def release_sent(quiet: float = 0.001) -> int:
    """Let pyzmq drop the frames libzmq has finished sending; returns how many it dropped.

    A zero-copy send keeps its array alive until pyzmq's garbage-collector thread hears that
    libzmq is done with it, and that thread needs the GIL, which a main thread computing in numpy
    seldom gives up: in 2 of 4 runs a scale-19 WCC worker started its build with 26-36 MiB of the
    route it had sent the superstep before (pyzmq's ``zmq.utils.garbage.gc.refs``), none after
    (its build's peak, the larger worker over 5-6 runs: 195-213 -> 194-203 MiB; what is left of
    that spread is the heap's holes). This yields the GIL until that thread has dropped what it
    can: until nothing more goes for ``quiet`` seconds (frames still in flight stay: a superstep
    that starts while its last parts travel waits ~1 ms for nothing)."""
    refs = getattr(_garbage, "refs", None)
    if not refs:
        return 0
    held = left = len(refs)
    since = time.monotonic()
    while refs:
        time.sleep(0.0002)  # (releases the GIL)
        now = time.monotonic()
        if len(refs) < left:
            left, since = len(refs), now
        elif now - since > quiet:
            break
    return held - len(refs)


#: ``resolve(identity, frames) -> frames``: what an empty buffer frame stands for (comm/shm.py).
Resolver = Callable[[bytes | None, Sequence[Any]], list[Any]]


def recv(sock: zmq.Socket, router: bool, limits: codec.Limits = codec.DEFAULT_LIMITS,
         resolve: Resolver | None = None) -> tuple[bytes | None, dict[str, Any], int]:
    """Receive one message without blocking: (sender identity or None, header, bytes).

    Raises ``Again`` when nothing is waiting and ``ProtocolError`` when it is malformed. With
    ``resolve``, a message with an empty buffer frame (the codec never makes one) has its frames
    resolved first: shared-memory frames of a same-host peer. ``bytes`` counts them too.
    """
    frame = sock.recv(_NOBLOCK, copy=False)  # recv_multipart, minus a getsockopt(RCVMORE) per frame
    frames: list[Any] = [frame]
    while frame.more:
        frame = sock.recv(_NOBLOCK, copy=False)
        frames.append(frame)
    identity = None
    if router:
        identity = frames[0].bytes
        frames = frames[1:]
    if frames and len(frames[0]) <= _SMALL:  # msgpack reads bytes faster than a Frame's buffer
        frames[0] = frames[0].bytes
    try:
        if resolve is not None and any(len(f) == 0 for f in frames[1:]):
            frames = resolve(identity, frames)
        size = sum(map(len, frames))
        header = codec.decode(frames, limits=limits)
    except ProtocolError as exc:
        exc.identity = identity  # who sent it: peers that keep sending garbage get banned
        raise
    kind = header.get("kind")
    if not isinstance(kind, int):
        raise ProtocolError("header", f"no message kind in header ({size} bytes)")
    return identity, header, size


def drain(sock: zmq.Socket, router: bool, drops: Any, resolve: Resolver | None = None,
          many: bool = False) -> Iterator[tuple[bytes | None, dict[str, Any], int]]:
    """Every message waiting on ``sock`` now, decoded: (identity, header, bytes). Malformed ones
    are counted in ``drops`` (a ``DropCounter``) and messages of banned peers dropped there.
    ``many``: a socket that usually holds several (the master's, a DONE from every worker)."""
    check = [(sock, _POLLIN)]
    while True:
        # a zero-timeout poll: cheaper than a recv that raises Again, and than getsockopt(EVENTS),
        # whose result pyzmq turns into an enum on every call; where several messages wait, one
        # Again at the end costs less than a poll before each
        if not many and not _zmq_poll(check, 0):
            return
        try:
            identity, header, size = recv(sock, router, resolve=resolve)
        except Again:
            return
        except ProtocolError as exc:
            drops.malformed(exc.identity, exc.kind, exc.detail)
            continue
        if identity is None or not drops.banned(identity):
            yield identity, header, size


def poller(*sockets: zmq.Socket | int) -> zmq.Poller:
    """A poller for input on ``sockets`` (zmq sockets, or file descriptors such as a pipe's)."""
    p = zmq.Poller()
    for s in sockets:
        p.register(s, zmq.POLLIN)
    return p
