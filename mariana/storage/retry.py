"""Retrying transient storage errors, and naming the cause of a storage failure.

An object store restarting, a dropped connection, throttling (``SlowDown``, 503) or a timeout
is transient: the same call succeeds a few seconds later. ``retrying`` repeats such a call with
exponential backoff (0.2 s doubling to 5 s, with jitter) for a window of ``MARIANA_STORAGE_RETRY_S``
seconds (default 120: a storage server's restart, as botocore's and torchelastic's store clients
ride out theirs). Anything else (no space left, permission denied, not found, a bad request) is
raised at once: retrying cannot fix it.

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
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, TypeVar

log = logging.getLogger(__name__)

__all__ = ["retrying", "is_transient", "cause", "retry_window", "keepalive", "ENV"]

ENV = "MARIANA_STORAGE_RETRY_S"
DEFAULT_WINDOW_S = 120.0

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

_hooks = threading.local()


def retry_window() -> float:
    """Seconds a transient error is retried for (``MARIANA_STORAGE_RETRY_S``; 0 turns retrying off)."""
    raw = os.environ.get(ENV, "")
    try:
        return max(0.0, float(raw)) if raw.strip() else DEFAULT_WINDOW_S
    except ValueError:
        log.warning("%s=%r is not a number of seconds; using %g", ENV, raw, DEFAULT_WINDOW_S)
        return DEFAULT_WINDOW_S


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


def retrying(what: str, call: Callable[[], T], window: float | None = None, offload: bool = True) -> T:
    """``call()``, repeated while it fails with a transient error, for up to ``window`` seconds
    (default ``retry_window()``). The last error is raised as it came, with a note saying how
    long it was retried (read by ``cause``). ``offload=False``: a call that cannot hang (a local
    disk) runs on this thread even where keepalive callbacks are registered (no thread to start)."""
    window = retry_window() if window is None else window
    start = time.monotonic()
    delay, attempt = 0.2, 0
    while True:
        try:
            return _call(call, offload)
        except Exception as exc:  # noqa: BLE001 - classified below, re-raised unless transient
            attempt += 1
            waited = time.monotonic() - start
            if not is_transient(exc):
                raise
            if waited >= window:
                log.warning("%s: giving up after %d attempt(s) in %.0fs: %s", what, attempt, waited, cause(exc))
                exc.add_note(f"retried for {waited:.0f}s, {ENV}={window:g}")
                raise
            pause = min(delay, window - waited) * (0.75 + 0.5 * random.random())
            if attempt == 1:
                log.warning("%s failed (%s); retrying for up to %.0fs", what, cause(exc), window)
            time.sleep(0) if pause <= 0 else _wait(pause)
            delay = min(delay * 2, 5.0)
