"""Launch a cluster job on this machine: a master in this process, N worker processes on loopback.

Workers are forked from this process when that is safe (``forking``: no import time), otherwise
started as ``python -m mariana worker --master ENDPOINT`` with this process's import path; either
way a job given as ``package.module:JOB`` imports the same way in every worker. They are
cleaned up on every exit path: success, error, Ctrl-C (``finally``); if this process is killed,
the workers notice the silent master through their heartbeats and exit by themselves.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import subprocess
import sys
import time
from typing import Any

from .forking import ForkedWorker, fork_is_safe, fork_workers
from .graph import Graph
from .master import Master
from .options import RunOptions
from .runner import resume_point
from .shm import sweep
from .security import Security, add_key, load_keypair, local_keys
from .result import RunResult
from .transport import parse_endpoint
from .worker import TOKEN_VAR

log = logging.getLogger(__name__)

__all__ = ["run_cluster", "LocalCluster", "spawn_workers", "stop_processes", "blas_threads", "thread_vars",
           "worker_argv", "THREAD_VARS"]


#: Thread-pool variables of the BLAS/OpenMP libraries numpy may use.
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")


def cores() -> int:
    """The CPU cores this process may run on (its affinity mask, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def blas_threads(sharing: int) -> int:
    """BLAS/OpenMP threads for each of ``sharing`` worker processes on this machine."""
    return max(1, cores() // max(1, sharing))


def thread_vars(sharing: int) -> dict[str, str]:
    """The thread variables of a local worker: the user's where set, else ``blas_threads(sharing)``."""
    threads = str(blas_threads(sharing))
    return {var: os.environ.get(var, threads) for var in THREAD_VARS}


def worker_argv(endpoint: str, host: str, extra_args: list[str] | None = None) -> list[str]:
    """The ``mariana`` arguments of a local worker; ``-v``/``-q`` follow this process's logging."""
    verbosity = ["-v"] if log.isEnabledFor(logging.INFO) else ["-q"]
    return [*verbosity, "worker", "--master", endpoint, "--host", host, *(extra_args or [])]


def spawn_workers(endpoint: str, n: int, host: str = "127.0.0.1", extra_args: list[str] | None = None,
                  sharing: int | None = None, env: dict[str, str] | None = None) -> list[subprocess.Popen]:
    """Start ``n`` local ``mariana worker`` processes that join the master at ``endpoint``.

    Unless the user set them, BLAS thread pools get ``cores // sharing`` threads each, where
    ``sharing`` (default ``n``) is the number of worker processes of the job on this machine: a
    launcher that starts them one at a time passes the job's total. N processes each spinning up
    one thread per core oversubscribe the machine (measured here: 150 dnn-dp steps on 2 workers
    took 3.87 s of superstep time with 2 OpenBLAS threads each on 2 cores, 0.44 s with 1).
    """
    env = {**os.environ, **thread_vars(n if sharing is None else sharing), **(env or {})}
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    env["PYTHONPATH"] = os.pathsep.join(paths + [env["PYTHONPATH"]] if env.get("PYTHONPATH") else paths)
    cmd = [sys.executable, "-m", "mariana", *worker_argv(endpoint, host, extra_args)]
    return [subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL) for _ in range(n)]


def stop_processes(procs: list[Any], grace: float = 3.0, leaving: float = 0.0) -> None:
    """Terminate, then kill, every process still running (``Popen`` or ``ForkedWorker``); reap them all.

    ``leaving``: seconds to let processes that were told the job is over (BYE) exit by themselves
    first, so that they log their end and remove what they own instead of being cut off."""
    unstarted = [p for p in procs if isinstance(p, ForkedWorker) and p.release()]  # they exit 0 by themselves
    deadline = time.monotonic() + leaving
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for p in procs:
        if p.poll() is None and p not in unstarted:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def run_cluster(job_name: str, config: dict[str, Any], graph: Graph, options: RunOptions) -> RunResult:
    """Run a job by name on the cluster runtime and return its result.

    With ``options.spawn`` (``mariana run``) the master starts ``options.workers`` local worker
    processes (``LocalCluster``) and respawns a lost one; without (``mariana master``) it waits for
    ``mariana worker`` processes from anywhere. ``options.secure``: CURVE on every socket, with keys
    made for this run in a private temporary folder; ``options.security``: the master's own keys.
    ``options.resume``: continue from the newest valid checkpoint of ``options.run_dir``.
    """
    if options.spawn:
        with LocalCluster(job_name, config, options) as cluster:
            cluster.start()
            return cluster.run(graph, options.run_dir)
    resume = resume_point(options.run_dir, options.keep_checkpoints) if options.resume else None
    master = Master(job_name, config, graph, options, security=options.security, resume=resume)
    try:
        master.start()
        if options.on_start is not None:
            options.on_start(master, [])
        return master.run()
    finally:
        master.close()


class LocalCluster:
    """A master in this process and ``options.workers`` worker processes on this machine.

    ``start()`` starts the workers and binds the master; ``run(graph, run_dir)`` runs the job. The
    graph may be built between the two: the workers join and build meanwhile, so a launch does
    not wait for its own build and then for theirs one after the other (``jobs.launch``).
    Workers are forked from this process before the master makes its zmq context when that is
    safe (``forking.fork_is_safe``, ``options.fork``), else spawned as fresh interpreters; a
    replacement for a lost worker is always spawned. ``close()`` (or leaving the ``with`` block)
    stops every worker still running, removes this job's shared-memory segments left in /dev/shm
    and the throwaway keys of ``options.secure``.
    """

    def __init__(self, job_name: str, config: dict[str, Any], options: RunOptions) -> None:
        self.options, self.job_name, self.config = options, job_name, config
        secure = options.secure and options.security is None
        self.keys_dir, self.key_files = local_keys(options.workers) if secure else (None, [])
        self.security = Security.for_master(self.keys_dir) if secure else options.security
        self.master: Master | None = None  # made by start(), after any fork: its zmq context stays here
        self.procs: list[Any] = []  # subprocess.Popen or forking.ForkedWorker
        self.token = {TOKEN_VAR: secrets.token_hex(16)}  # in the workers' environment: only they may join

    def start(self) -> None:
        workers = self.options.workers
        forked = self._fork(workers)
        self.procs += forked
        self.master = master = Master(self.job_name, self.config, None, self.options.replace(run_dir=None),
                                      security=self.security)
        master.token = self.token[TOKEN_VAR]
        endpoint = master.start()
        extra = ["--max-message-mb", str(max(1, master.transport.max_message_bytes >> 20))]
        if self.security is not None:
            extra += [f"--server-key={self.security.public.decode()}"]  # a Z85 key may start with "-"
        host = parse_endpoint(endpoint)[0]
        for i, key_file in enumerate(self.key_files or [None] * workers):
            args = extra + (["--key", key_file] if key_file else [])
            if forked:
                forked[i].start(worker_argv(endpoint, host, args))
            else:
                self.procs += spawn_workers(endpoint, 1, host, args, sharing=workers, env=self.token)

        def respawn() -> subprocess.Popen:
            key = []
            if self.keys_dir is not None:  # a fresh key for the replacement, allowed before it connects
                key_file = str(add_key(self.keys_dir, f"worker-{len(self.procs)}"))
                self.security.allowed.keys.add(load_keypair(key_file)[0])
                key = ["--key", key_file]
            # a fresh interpreter: this process has a zmq context (and IO threads) by now
            proc = spawn_workers(endpoint, 1, host, extra + key, sharing=workers, env=self.token)[0]
            self.procs.append(proc)
            return proc

        master.respawn = respawn
        if self.options.on_start is not None:
            self.options.on_start(master, self.procs)

    def forks(self) -> bool:
        """Whether ``start()`` would fork the workers now (else it spawns fresh interpreters)."""
        return self.options.fork and fork_is_safe() is None

    def _fork(self, workers: int) -> list[ForkedWorker]:
        """``workers`` forked children waiting for their arguments, or [] to spawn them instead."""
        why = "--no-fork" if not self.options.fork else fork_is_safe()
        if why is not None:
            log.debug("local workers start as fresh interpreters: %s", why)
            return []
        log.debug("forking %d local workers", workers)
        return fork_workers(workers, {**thread_vars(workers), **self.token})

    def run(self, graph: Graph, run_dir: Any) -> RunResult:
        """Run ``graph`` on the started workers (``options.resume``: from ``run_dir``'s newest checkpoint)."""
        assert self.master is not None, "start() first"
        o = self.options
        resume = resume_point(run_dir, o.keep_checkpoints) if o.resume else None
        self.master.attach(graph, run_dir, resume)
        return self.master.run(children=self.procs)

    def close(self) -> None:
        grace = max(3.0, 2 * (self.master.heartbeat_interval if self.master else self.options.heartbeat_interval))
        done = self.master is not None and self.master.phase == "done"  # every worker got its BYE
        stop_processes(self.procs, grace=grace, leaving=2.0 if done else 0.0)
        if self.master is not None:
            sweep(self.master.job_id)  # shared memory of a worker killed before its peers mapped it
            self.master.close()
        if self.keys_dir is not None:
            shutil.rmtree(self.keys_dir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
