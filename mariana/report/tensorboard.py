"""TensorBoard scalars from a job's metrics lines (``mariana run ... --tensorboard DIR``).

Each numeric key of a metrics line becomes a scalar at step = superstep: the job's own values
(``loss``, ``test_loss``, ``test_accuracy``, ``epoch``, ...) under their names, the engine's
counters under ``engine/`` (``engine/wall_s``, ``engine/messages``, ...), and training throughput
as ``throughput/samples_per_s``. The config goes in as text. Written with tensorboardX (optional
extra ``mariana-bsp[report]``); ``tensorboard --logdir DIR`` shows it. A writer that fails logs
one warning and stops writing: it never stops the job.
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any

from ..errors import UsageError

log = logging.getLogger(__name__)

__all__ = ["TensorBoardWriter", "ENGINE_KEYS"]

#: Counters the engine puts in every metrics line (the rest are the job's own values).
ENGINE_KEYS = ("wall_s", "active", "computed", "messages", "delivered", "bytes", "dropped", "restarts")
_SKIP = {"superstep", "workers", "checkpoint"}


class TensorBoardWriter:
    """An ``on_superstep`` callback writing TensorBoard event files into ``logdir``."""

    def __init__(self, logdir: str, config: dict[str, Any] | None = None, job: str = "") -> None:
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            raise UsageError("--tensorboard needs tensorboardX: pip install 'mariana-bsp[report]'") from None
        try:
            self.writer = SummaryWriter(logdir=logdir, flush_secs=2)
        except Exception as exc:
            raise UsageError(f"--tensorboard {logdir}: cannot write there: {exc}") from None
        self.logdir = logdir
        self.config = config or {}
        self._wall = 0.0
        self._failed = False
        if config:
            self._safe(lambda: self.writer.add_text("config", "```\n" + json.dumps(config, indent=2, default=str)
                                                    + "\n```", 0))
        if job:
            self._safe(lambda: self.writer.add_text("job", job, 0))

    def _safe(self, fn: Any) -> None:
        if self._failed:
            return
        try:
            fn()
        except Exception as exc:
            self._failed = True
            log.warning("--tensorboard %s: stopped writing: %s", self.logdir, exc)

    def __call__(self, line: dict[str, Any]) -> None:
        self._safe(lambda: self._write(line))

    def _write(self, line: dict[str, Any]) -> None:
        step = line.get("superstep")
        if not isinstance(step, int):
            return
        w = line.get("wall_s")
        if isinstance(w, (int, float)) and math.isfinite(w):
            self._wall += w
        for key, value in line.items():
            if key in _SKIP or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            tag = f"engine/{key}" if key in ENGINE_KEYS else key
            self.writer.add_scalar(tag, value, step)  # NaN is written too: TensorBoard shows it
        batch = line.get("samples", self.config.get("batch_size") if "loss" in line else None)
        if isinstance(batch, (int, float)) and not isinstance(batch, bool) and batch > 0 and self._wall > 0:
            self.writer.add_scalar("throughput/samples_per_s", batch / self._wall, step)
            self._wall = 0.0

    def close(self) -> None:
        """Flush and close the event file."""
        try:
            self.writer.close()
        except Exception as exc:
            log.warning("--tensorboard %s: %s", self.logdir, exc)
