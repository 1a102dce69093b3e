"""``RunOptions``: how a job runs (not what it computes), one record from the caller to the runtimes.

The CLI and ``run_job`` fill it once; ``LocalRuntime``, the cluster launcher and the ``Master``
read it. Config keys that are run options (``checkpoint_every``, ``keep_checkpoints``,
``checkpoint_background``) are taken from a job's resolved config by ``from_config``, and the
job convention "0 means none" for ``checkpoint_every`` is converted here, once.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import UsageError

__all__ = ["RunOptions", "RUNTIMES", "CONFIG_KEYS"]

#: ``inproc``: the cluster runtime with its master and workers as threads of this process, over
#: ``inproc://`` (the whole wire path, no network, no processes: tests and debugging)
RUNTIMES = ("local", "cluster", "inproc")
#: Job config keys that are run options.
CONFIG_KEYS = ("checkpoint_every", "keep_checkpoints", "checkpoint_background")


@dataclass
class RunOptions:
    """Every option of a run. Cluster-only options are ignored by the local runtime."""

    workers: int = 1
    runtime: str | None = None  # local | cluster | inproc; None: local for one worker, cluster for more
    placement: Any = None  # a strategy name, a Strategy, a mapping or callable id -> worker
    max_supersteps: int | None = None
    run_dir: Any = None  # a storage.RunDir (or its URL, for launch): metrics, traces, checkpoints
    on_superstep: Callable[[dict[str, Any]], None] | None = None  # called with every metrics line
    # checkpoints (job config keys)
    checkpoint_every: int | None = None  # every N supersteps; None (or 0): only when master compute asks
    keep_checkpoints: int = 3
    checkpoint_background: bool = True  # written from a copy while supersteps go on
    resume: bool = False  # continue from the newest valid checkpoint of run_dir
    # traces
    trace: bool = True
    #: metrics.jsonl lines are written at most this many seconds apart (0: each at once, as a
    #: sweep needs: its scheduler reads the running trials' lines; engine/driver.py)
    metrics_every_s: float = 0.2
    capture: str | None = None  # vertex glob whose messages are stored for `trace replay`
    capture_limit_mb: int = 64
    # cluster
    bind: str = "tcp://127.0.0.1:0"
    spawn: bool = True  # start the workers on this machine (False: `mariana master`, workers join)
    fork: bool = True  # fork them from this process when safe (no imports); False: fresh interpreters
    heartbeat_interval: float = 0.5
    worker_timeout: float = 10.0
    join_timeout: float = 120.0
    superstep_timeout: float | None = None
    max_restarts: int = 3
    rejoin_timeout: float = 60.0
    max_message_bytes: int = 1 << 30
    max_malformed: int = 1000
    secure: bool = False  # CURVE with throwaway keys (local launch)
    shm: bool = True  # big frames between same-host workers through /dev/shm (never with CURVE)
    shm_cap_mb: int = 1024  # shared memory per worker for its outgoing frames; beyond: zmq frames
    shm_min_kb: int = 64  # smaller frames always travel by zmq
    security: Any = None  # a security.Security for the master (`mariana master --keys`)
    token: str | None = None  # without spawn: admit only workers that present it (a sweep's segment)
    on_start: Callable[[Any, list[Any]], None] | None = None  # (master, worker processes) once bound

    def __post_init__(self) -> None:
        if not self.checkpoint_every:
            self.checkpoint_every = None
        if self.workers < 1:
            raise UsageError(f"workers must be >= 1, got {self.workers}")
        if self.max_supersteps is not None and self.max_supersteps < 0:
            raise UsageError(f"max_supersteps must be >= 0, got {self.max_supersteps}")
        if not self.heartbeat_interval > 0:
            raise UsageError(f"heartbeat interval must be > 0 s, got {self.heartbeat_interval:g}")
        if not self.worker_timeout > self.heartbeat_interval:
            raise UsageError(f"worker timeout {self.worker_timeout:g}s must be longer than the heartbeat interval "
                             f"{self.heartbeat_interval:g}s (a few intervals: one late heartbeat is not a lost worker)")
        if self.runtime is not None and self.runtime not in RUNTIMES:
            raise UsageError(f"unknown runtime {self.runtime!r}; choose one of: {', '.join(RUNTIMES)}")
        if self.runtime == "inproc":  # the cluster runtime, every worker a thread of this process
            self.runtime, self.bind = "cluster", "inproc://*"

    @classmethod
    def from_config(cls, config: dict[str, Any], **options: Any) -> RunOptions:
        """Options from a job's resolved config (its run-option keys) and keyword arguments."""
        unknown = set(options) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise TypeError(f"unknown run option(s): {', '.join(sorted(unknown))}")
        taken = {k: config[k] for k in CONFIG_KEYS if k in config}
        return cls(**{**taken, **options})

    @property
    def runtime_name(self) -> str:
        """The runtime that runs: the one asked for, else local for one worker, cluster for more."""
        return self.runtime or ("cluster" if self.workers > 1 else "local")

    def replace(self, **changes: Any) -> RunOptions:
        return dataclasses.replace(self, **changes)
