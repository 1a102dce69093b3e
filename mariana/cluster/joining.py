"""What a worker checks while it joins: that something accepts connections at the master's
address (a dead or mistyped master is reported in seconds, not after ``--connect-timeout``),
that the CURVE handshake with it works, which connections were made (to the master, to the
peers), and the address it binds and advertises by default: its own on the route to the master.
"""

from __future__ import annotations

import socket
import threading
import time

import zmq

from ..comm import parse_endpoint
from ..errors import UsageError

__all__ = ["ConnectWatch", "FIRST_CONTACT_S", "route_address", "with_host", "unreached"]

#: How long `mariana worker` waits for the master's address to accept a TCP connection at all.
FIRST_CONTACT_S = 5.0

_FAILED = zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL


class ConnectWatch:
    """Watches one socket, from before it connects: ``connected`` turns true once a TCP connection
    is made; ``failed()`` says why a CURVE handshake failed (with ``handshakes``). One monitor per
    socket: it replaces ``comm.HandshakeWatch`` where both are wanted."""

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


def route_address(master: str) -> str:
    """This host's address on its route to the master at ``master`` (``tcp://HOST:PORT``): where a
    worker binds and advertises its data socket by default, so that peers on other hosts reach it.
    127.0.0.1 (::1) for a master on this host's loopback names; otherwise the source address the
    kernel picks for the route (a UDP ``connect`` sends nothing). A master that cannot be resolved
    or routed to is ``UsageError``."""
    host, port = parse_endpoint(master)
    if host in ("inproc", "localhost", "127.0.0.1"):
        return "127.0.0.1"
    if host == "::1":
        return "::1"
    try:
        infos = socket.getaddrinfo(host, port or 9, type=socket.SOCK_DGRAM)
    except socket.gaierror as exc:
        raise UsageError(f"cannot resolve the master's host {host!r} of {master}: {exc.strerror}") from None
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        try:
            s.connect(addr)
        except OSError as exc:
            raise UsageError(f"no route to the master at {master}: {exc.strerror or exc} "
                             f"(give this host's address with --host)") from None
        return str(s.getsockname()[0])


def with_host(endpoint: str, host: str) -> str:
    """``endpoint`` (``tcp://ADDR:PORT``) with ``host`` as its address: what a worker behind NAT
    or in a container advertises (``--advertise``)."""
    _, port = parse_endpoint(endpoint)
    return f"tcp://{f'[{host}]' if ':' in host else host}:{port}"


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
