"""What a worker checks while it joins: that something accepts connections at the master's
address (a dead or mistyped master is reported in seconds, not after ``--connect-timeout``),
that the CURVE handshake with it works, and which connections were made.
"""

from __future__ import annotations

import zmq

__all__ = ["ConnectWatch", "FIRST_CONTACT_S"]

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
