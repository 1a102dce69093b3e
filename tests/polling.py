"""Polling with a deadline, the tests' one way to wait for something (never a bare sleep)."""

from __future__ import annotations

import time
from typing import Any, Callable


def until(what: str, ok: Callable[[], Any], timeout: float = 30.0, every: float = 0.02) -> Any:
    """``ok()``'s first truthy value, polled every ``every`` seconds; fails naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        got = ok()
        if got:
            return got
        assert time.monotonic() < deadline, f"no {what} within {timeout}s"
        time.sleep(every)
