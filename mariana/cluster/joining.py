"""Where a worker joins from: the address it binds and advertises by default (its own on the
route to the master), and how long it tries a master's address before saying nothing is there.
The sockets' connection watches are ``comm.ConnectWatch`` and ``comm.unreached``.
"""

from __future__ import annotations

import socket

from ..comm import is_loopback, parse_endpoint
from ..errors import UsageError

__all__ = ["FIRST_CONTACT_S", "route_address", "with_host", "host_key", "host_keys"]

#: How long `mariana worker` waits for the master's address to accept a TCP connection at all.
FIRST_CONTACT_S = 5.0

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


def host_key(endpoint: str) -> str:
    """The host a data endpoint is on, as a key: its address (loopback counts as one host: only
    processes of one machine reach it)."""
    try:
        host, _ = parse_endpoint(endpoint)
    except UsageError:
        return endpoint
    return "loopback" if is_loopback(host) else host


def host_keys(endpoints: list[str]) -> list[str]:
    """``host_key`` of every worker's data endpoint, in worker order."""
    return [host_key(ep) for ep in endpoints]
