"""Retrying transient storage errors, and naming the cause of a storage failure.

An object store restarting, a dropped connection, throttling (``SlowDown``, 503) or a timeout
is transient: the same call succeeds a few seconds later. ``retrying`` repeats such a call with
exponential backoff (0.2 s doubling to 5 s, with jitter) for a window of ``MARIANA_STORAGE_RETRY_S``
seconds (default 120: a storage server's restart, as botocore's and torchelastic's store clients
ride out theirs). Anything else (no space left, permission denied, not found, a bad request) is
raised at once: retrying cannot fix it.

A store that has not answered once in this process (a typo'd endpoint, a server not started,
before the run began) is not waited for: an outage is something that happens to a store that
was there. Before the first call to a remote URL's store its endpoint is probed (a TCP connect
to the endpoint, or to the proxy that reaches it), for up to ``MARIANA_STORAGE_FIRST_CONTACT_S``
seconds (default 3); a refused or unreachable endpoint fails then with one error naming it and
what was tried. A connection that cannot be made on a store's first contact gets that window
too, never the outage window. Once a call to the store has succeeded, the whole window applies.

A thread that registered callbacks with ``keepalive`` (the cluster master: it answers its
workers' heartbeats there) runs its storage calls on a helper thread and the callbacks every
0.2 s while it waits, during a call (an S3 client's own retries take ~9 s to give up on a
refused connection) and between attempts, so a job does not lose its workers while its storage
is away.
"""

from __future__ import annotations

import errno
import logging
import os
import random
import re
import socket
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, TypeVar

log = logging.getLogger(__name__)

__all__ = ["retrying", "is_transient", "cause", "retry_window", "first_contact_window", "keepalive", "store_of",
           "reached", "preflight", "env_seconds", "ENV", "FIRST_CONTACT_ENV"]

ENV = "MARIANA_STORAGE_RETRY_S"
DEFAULT_WINDOW_S = 120.0
FIRST_CONTACT_ENV = "MARIANA_STORAGE_FIRST_CONTACT_S"
DEFAULT_FIRST_CONTACT_S = 3.0

T = TypeVar("T")

#: errno values of a storage server or network that is away for now (EBUSY: s3fs's SlowDown and
#: 503; EREMOTEIO: s3fs's 500 InternalError).
_TRANSIENT_ERRNOS = {errno.ECONNREFUSED, errno.ECONNRESET, errno.ECONNABORTED, errno.ETIMEDOUT, errno.EHOSTUNREACH,
                     errno.ENETUNREACH, errno.ENETDOWN, errno.EPIPE, errno.EBUSY, errno.EAGAIN,
                     getattr(errno, "EREMOTEIO", errno.EBUSY)}
#: Exception class names of the HTTP clients under fsspec (botocore, aiohttp, requests, urllib3),
#: matched by name so that none of them has to be imported here.
_TRANSIENT_NAMES = {"EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError", "ConnectionClosedError",
                    "ProxyConnectionError", "ClientConnectorError", "ServerDisconnectedError", "ClientOSError",
                    "ServerTimeoutError", "ClientPayloadError", "ConnectionError", "ReadTimeout", "ConnectTimeout",
                    "NewConnectionError", "ProtocolError", "IncompleteRead", "ResponseStreamingError"}
#: S3 error codes (and HTTP statuses) that say "try again".
_TRANSIENT_CODES = {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "RequestTimeoutException",
                    "InternalError", "ServiceUnavailable", "RequestLimitExceeded", "TooManyRequests",
                    "500", "502", "503", "504"}

#: errno values and client exception names that say a connection could not be made at all (as
#: opposed to one that broke, or a server that answered "later"): on a store's first contact,
#: nothing was ever there to wait for.
_UNCONNECTED_ERRNOS = {errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ENETDOWN, errno.ETIMEDOUT}
_UNCONNECTED_NAMES = {"EndpointConnectionError", "ConnectTimeoutError", "ProxyConnectionError",
                      "ClientConnectorError", "NewConnectionError", "ConnectTimeout", "gaierror"}
#: protocols whose calls cannot meet a store that is away: nothing to probe or tell apart
_IN_PROCESS = {"file", "local", "memory"}
_URL = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*)://([^\s/]*)[^\s]*")

_hooks = threading.local()
#: stores ("protocol://netloc") a call of this process has succeeded with; a forked worker
#: inherits its parent's (the run it is part of reached them)
_reached: set[str] = set()
_probed: set[str] = set()  # stores whose endpoint took a connection (probed once per process)
_lock = threading.Lock()


def env_seconds(name: str, default: float, least: float = 0.0) -> float:
    """Seconds from environment variable ``name`` (at least ``least``), ``default`` when it is
    unset or blank; a value that is not a number is warned about once per read and ignored."""
    raw = os.environ.get(name, "")
    try:
        return max(least, float(raw)) if raw.strip() else default
    except ValueError:
        log.warning("%s=%r is not a number of seconds; using %g", name, raw, default)
        return default


def retry_window() -> float:
    """Seconds a transient error is retried for (``MARIANA_STORAGE_RETRY_S``; 0 turns retrying off)."""
    return env_seconds(ENV, DEFAULT_WINDOW_S)


def first_contact_window() -> float:
    """Seconds a store that never answered is tried for (``MARIANA_STORAGE_FIRST_CONTACT_S``)."""
    return env_seconds(FIRST_CONTACT_ENV, DEFAULT_FIRST_CONTACT_S)


def _url_in(text: str) -> str | None:
    """The first URL with a remote protocol in ``text`` (a ``what`` names the file it is about)."""
    for m in _URL.finditer(text):
        if m.group(1).lower() not in _IN_PROCESS:
            return m.group(0)
    return None


def store_of(url: str | None) -> str | None:
    """``protocol://netloc`` of a remote URL (the store a call reaches), None for a local one."""
    m = _URL.match(url or "")
    if m is None or m.group(1).lower() in _IN_PROCESS:
        return None
    return f"{m.group(1).lower()}://{m.group(2)}"


def reached(url: str) -> bool:
    """Whether a call of this process has succeeded with ``url``'s store (local: always)."""
    key = store_of(url)
    return key is None or key in _reached


def _endpoint(url: str) -> str | None:
    """The endpoint URL that calls for ``url`` connect to (``http(s)://host[:port]``), where the
    filesystem says: s3fs's resolved endpoint, an HTTP URL's own host. None: unknown."""
    protocol = url.split("://", 1)[0].lower()
    if protocol in ("http", "https"):
        return url
    if protocol not in ("s3", "s3a"):
        return None
    try:
        import fsspec

        fs, _ = fsspec.core.url_to_fs(url)
        return str(fs.s3.meta.endpoint_url)  # the client is made here: no request is sent
    except Exception as exc:  # noqa: BLE001 - no endpoint to probe: the first call says what is wrong
        log.debug("%s: no endpoint to probe (%s)", url, exc)
        return None


def _address(endpoint: str) -> tuple[str, str, int] | None:
    """(what is connected to, host, port): the endpoint, or the proxy its client goes through."""
    import urllib.parse
    import urllib.request  # here: most processes never probe a store

    parsed = urllib.parse.urlsplit(endpoint)
    if not parsed.hostname:
        return None
    scheme = parsed.scheme.lower()
    proxy = urllib.request.getproxies().get(scheme)
    if proxy and not urllib.request.proxy_bypass(parsed.hostname):
        p = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        if p.hostname:
            return f"the proxy {proxy} for {endpoint}", p.hostname, p.port or (443 if p.scheme == "https" else 80)
    return endpoint, parsed.hostname, parsed.port or (443 if scheme == "https" else 80)


def preflight(url: str) -> None:
    """Before the first call to ``url``'s store: connect to its endpoint, for up to
    ``first_contact_window()`` seconds. Raises an ``OSError`` naming the endpoint, the attempts
    and how long they took; does nothing for a store reached before, a local URL, or a store
    whose endpoint is unknown (its first call's failure is then not retried for long either)."""
    key = store_of(url)
    if key is None or key in _reached or key in _probed:
        return
    endpoint = _endpoint(url)
    where = _address(endpoint) if endpoint else None
    if where is None:
        return
    what, host, port = where
    window = first_contact_window()
    start = time.monotonic()
    delay, attempt = 0.2, 0
    while True:
        attempt += 1
        try:
            socket.create_connection((host, port), timeout=max(0.5, min(2.0, window))).close()
            with _lock:
                _probed.add(key)
            return
        except socket.gaierror as exc:  # a name that does not resolve: no later attempt will find it
            last: OSError = exc
            break
        except OSError as exc:
            last = exc
        waited = time.monotonic() - start
        if waited + delay > window:
            break
        _wait(delay)
        delay = min(delay * 2, 1.0)
    waited = time.monotonic() - start
    err = OSError(last.errno, f"cannot connect to {what} (the endpoint of {key}): {last.strerror or last}")
    err.add_note(f"{attempt} attempt(s) over {waited:.1f}s, before anything was read or written: a store that never "
                 f"answered is not waited for; {ENV} is for outages of a store reached before")
    raise err


def _never_connected(exc: BaseException) -> bool:
    """Whether ``exc`` says a connection could not be made at all (refused, unreachable, no route,
    a connect timeout, a name that does not resolve)."""
    for e in _chain(exc):
        if isinstance(e, ConnectionRefusedError) or type(e).__name__ in _UNCONNECTED_NAMES:
            return True
        if isinstance(e, OSError) and e.errno in _UNCONNECTED_ERRNOS:
            return True
    return False


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what caused it, down to the root; it stops at an unrelated error that was being
    handled when this one happened (another MarianaError, a Ctrl-C, a test timeout)."""
    from ..errors import MarianaError

    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        if seen and (isinstance(e, MarianaError) or not isinstance(e, Exception)):
            return
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is a storage error that a later attempt may not meet."""
    for e in _chain(exc):
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM,
                                                  errno.ENOENT):
            return False  # definite answers: retrying cannot change them
        if isinstance(e, (ConnectionError, TimeoutError)):
            return True
        if isinstance(e, OSError) and e.errno in _TRANSIENT_ERRNOS:
            return True
        if type(e).__name__ in _TRANSIENT_NAMES:
            return True
        response = getattr(e, "response", None)
        if isinstance(response, dict):
            err = response.get("Error") or {}
            status = str((response.get("ResponseMetadata") or {}).get("HTTPStatusCode", ""))
            if str(err.get("Code", "")) in _TRANSIENT_CODES or status in _TRANSIENT_CODES:
                return True
    return False


def cause(exc: BaseException) -> str:
    """What went wrong, from the outermost message down to the root cause (connection refused,
    no space left on device, ...), each distinct message once."""
    parts: list[str] = []
    for e in _chain(exc):
        text = str(e).strip() or type(e).__name__
        if isinstance(e, OSError) and e.errno is not None and e.strerror and e.strerror not in text:
            text = f"{text} ({e.strerror})"
        if not any(text in p for p in parts):
            parts.append(text)
    notes = getattr(exc, "__notes__", None) or []
    return ": ".join(parts) + "".join(f" ({n})" for n in notes)


@contextmanager
def keepalive(callback: Callable[[], None]) -> Iterator[None]:
    """Run ``callback`` between the retries of storage calls made by this thread (within the block)."""
    stack = getattr(_hooks, "stack", None)
    if stack is None:
        stack = _hooks.stack = []
    stack.append(callback)
    try:
        yield
    finally:
        stack.remove(callback)


def _wait(seconds: float) -> None:
    """Sleep ``seconds``, running this thread's keepalive callbacks at least every 0.2 s."""
    end = time.monotonic() + seconds
    while True:
        for callback in list(getattr(_hooks, "stack", ())):
            callback()
        left = end - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, 0.2))


def _call(call: Callable[[], T], offload: bool) -> T:
    """``call()``; on a helper thread while this thread's keepalive callbacks run, if it has any.
    (A thread per call, not a pool: a lingering thread would stop later launches from forking.)"""
    hooks = list(getattr(_hooks, "stack", ())) if offload else []
    if not hooks:
        return call()
    out: list[Any] = []

    def run() -> None:
        try:
            out.append((True, call()))
        except BaseException as exc:  # noqa: BLE001 - handed to the calling thread
            out.append((False, exc))
    helper = threading.Thread(target=run, name="mariana-storage", daemon=True)
    helper.start()
    while True:
        helper.join(timeout=0.2)
        if not helper.is_alive():
            break
        for callback in hooks:
            callback()
    ok, value = out[0]
    if not ok:
        raise value
    return value


def retrying(what: str, call: Callable[[], T], window: float | None = None, offload: bool = True,
             url: str | None = None) -> T:
    """``call()``, repeated while it fails with a transient error, for up to ``window`` seconds
    (default ``retry_window()``). The last error is raised as it came, with a note saying how
    long it was retried (read by ``cause``). ``offload=False``: a call that cannot hang (a local
    disk) runs on this thread even where keepalive callbacks are registered (no thread to start).

    ``url`` (default: the first remote URL named in ``what``) names the store: before its first
    call it is probed (``preflight``), and until a call to it has succeeded a connection that
    cannot be made is retried for ``first_contact_window()`` only."""
    window = retry_window() if window is None else window
    key = store_of(url or _url_in(what))
    if key is not None and key not in _reached:
        preflight(url or _url_in(what) or key)
    start = time.monotonic()
    delay, attempt = 0.2, 0
    while True:
        try:
            out = _call(call, offload)
            if key is not None and key not in _reached:
                with _lock:
                    _reached.add(key)
            return out
        except Exception as exc:  # noqa: BLE001 - classified below, re-raised unless transient
            attempt += 1
            waited = time.monotonic() - start
            if not is_transient(exc):
                raise
            first = key is not None and key not in _reached and _never_connected(exc)
            limit = min(window, first_contact_window()) if first else window
            if waited >= limit:
                log.warning("%s: giving up after %d attempt(s) in %.0fs: %s", what, attempt, waited, cause(exc))
                exc.add_note(f"{attempt} attempt(s) over {waited:.1f}s: {key} never answered in this process, so it is "
                             f"not waited for; {ENV} is for outages of a store reached before" if first
                             else f"retried for {waited:.0f}s, {ENV}={window:g}")
                raise
            pause = min(delay, limit - waited) * (0.75 + 0.5 * random.random())
            if attempt == 1:
                log.warning("%s failed (%s); retrying for up to %.0fs", what, cause(exc), limit)
            time.sleep(0) if pause <= 0 else _wait(pause)
            delay = min(delay * 2, 5.0)
