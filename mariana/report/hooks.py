"""What ``--ui`` and ``--tensorboard`` add to a run, as one ``on_superstep`` callback.

``RunHooks`` owns the live page and the TensorBoard writer of one run. It is called with every
metrics line (after the progress line); none of its failures reaches the job: a page that cannot
bind is a warning, a writer that fails stops writing, a callback that raises is logged once.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from ..errors import UsageError

log = logging.getLogger(__name__)

__all__ = ["RunHooks"]


class RunHooks:
    """The live page (``ui``: ``HOST:PORT``) and TensorBoard scalars (``tensorboard``: a folder) of a run."""

    def __init__(self, run: str, ui: str | None = None, tensorboard: str | None = None,
                 config: dict[str, Any] | None = None, job: str = "") -> None:
        self.run = run
        self.ui = None
        self.tensorboard = None
        self._callbacks: list[Callable[[dict[str, Any]], None]] = []
        self._broken: set[int] = set()
        if ui is not None:
            from .live import LiveServer

            self.ui = LiveServer(run, ui)  # a malformed address is a UsageError here, before the job starts
        if tensorboard is not None:
            from .tensorboard import TensorBoardWriter

            self.tensorboard = TensorBoardWriter(tensorboard, config, job)
            self._callbacks.append(self.tensorboard)

    @property
    def active(self) -> bool:
        return self.ui is not None or self.tensorboard is not None

    def start(self) -> str | None:
        """Start the page; its URL, or None when there is no page (or it could not bind: a warning)."""
        if self.ui is None:
            return None
        try:
            url = self.ui.start()
        except UsageError as exc:
            log.warning("%s; the job runs without it", exc)
            self.ui = None
            return None
        self._callbacks.insert(0, self.ui.on_superstep)
        return url

    def __call__(self, line: dict[str, Any]) -> None:
        for i, cb in enumerate(self._callbacks):
            try:
                cb(line)
            except Exception as exc:
                if i not in self._broken:
                    self._broken.add(i)
                    log.warning("run hook %r failed (the job goes on): %s", cb, exc)

    def attach(self, master: Any, *_: Any) -> None:
        """A cluster master to show the phase and joining workers of (an ``on_start`` callback)."""
        if self.ui is not None:
            self.ui.attach(master)

    def finish(self, status: str, error: str | None = None) -> None:
        """The job ended (finished, failed, interrupted): say so on the page, flush TensorBoard, stop both."""
        if self.ui is not None:
            self.ui.set_status(status, error)
        self.close()

    def close(self) -> None:
        if self.tensorboard is not None:
            self.tensorboard.close()
            self.tensorboard = None
        if self.ui is not None:
            self.ui.close()
            self.ui = None
