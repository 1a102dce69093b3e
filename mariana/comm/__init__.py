"""How cluster processes reach each other: transports behind one small registry by URL scheme.

=============  ===============================================================================
``tcp://``     zmq over TCP between processes and hosts; heartbeats and CURVE security
               (``security``) inside it, and for big frames between processes of one machine
               the same-host shared-memory layer (``shm``).
``inproc://``  zmq's in-process transport: master and workers as threads of one process, the
               whole cluster wire path (codec, wire records, routing, heartbeats) with no
               network (tests; ``tests/cluster/test_inproc.py``).
=============  ===============================================================================

A transport is the ``Transport`` class of its scheme: ``router(bind)``, ``dealer(connect,
identity)``, ``heartbeat(connect, identity)``, ``data_bind(host)``, ``close()``, and the
module functions ``send``/``recv``/``drain``/``poller`` over its sockets. Adding one is one
module plus one line in ``SCHEMES`` (docs/design-notes.md, "Extension points"). This package is
the only one that imports zmq, and it imports nothing of mariana but ``messages`` and ``errors``.
"""

from __future__ import annotations

from typing import Any

from ..errors import UsageError
from .zmqcomm import (HEARTBEAT_PREFIX, Again, ConnectWatch, Transport, Unreachable, drain, heartbeat_of, is_loopback,
                      open_contexts, parse_endpoint, poller, recv, release_sent, send, send_frames, unreached)

__all__ = ["SCHEMES", "scheme_of", "transport_for", "Transport", "Again", "Unreachable", "send",
           "send_frames", "recv", "drain", "poller", "parse_endpoint", "is_loopback", "open_contexts",
           "HEARTBEAT_PREFIX", "heartbeat_of", "ConnectWatch", "unreached", "release_sent"]

#: URL scheme -> (the transport class, keyword arguments that select the scheme).
SCHEMES: dict[str, tuple[type[Transport], dict[str, Any]]] = {
    "tcp": (Transport, {}),
    "inproc": (Transport, {"inproc": True}),
}


def scheme_of(url: str) -> str:
    """The scheme of an endpoint URL, if it is registered; else one clear ``UsageError``."""
    scheme = (url or "").partition("://")[0]
    if "://" not in (url or "") or scheme not in SCHEMES:
        raise UsageError(f"bad endpoint {url!r}: the scheme must be one of {', '.join(s + '://' for s in SCHEMES)}")
    return scheme


def transport_for(url: str, max_message_bytes: int = 1 << 30, security: Any = None) -> Transport:
    """A transport that can reach (or bind) ``url``."""
    cls, kw = SCHEMES[scheme_of(url)]
    return cls(max_message_bytes, security, **kw)


