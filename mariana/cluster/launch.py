"""Launch a cluster job on this machine: a master in this process, N worker processes on loopback.

Workers are forked from this process when that is safe (``forking``: no import time), otherwise
started as ``python -m mariana worker --master ENDPOINT`` with this process's import path; either
way they run the one worker entry with a ``WorkerSpec`` (``entry``), and a job given as
``package.module:JOB`` imports the same way in every worker. They are
cleaned up on every exit path: success, error, Ctrl-C (``finally``); if this process is killed,
the workers notice the silent master through their heartbeats and exit by themselves.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from .entry import WorkerSpec, make_worker
from .forking import ForkedWorker, fork_is_safe, fork_workers
from ..engine.graph import Graph
from .master import Master, Phase
from .worker import GraphBuilder, Worker
from ..engine.options import RunOptions
from ..engine.runner import resume_point
from ..comm.shm import sweep
from ..comm.shmbudget import HOST_WORKERS_VAR
from ..comm.security import Security, add_key, init_keys, load_keypair
from ..engine.result import RunResult
from ..engine.threads import THREAD_VARS, blas_threads, thread_vars
from ..comm.zmqcomm import parse_endpoint

log = logging.getLogger(__name__)

__all__ = ["run_cluster", "LocalCluster", "spawn_workers", "stop_processes", "blas_threads", "thread_vars",
           "local_spec", "THREAD_VARS", "throwaway_keys", "sweep_throwaway_keys", "host_vars"]

#: ``mariana-keys-PID.START@HOST-RANDOM``: the throwaway keys of a ``--secure`` run, named by
#: the process that made them (pid, its start time, this machine), so that the next start can
#: remove those of a process that was killed (``kill -9`` runs no cleanup)
_KEYS = re.compile(r"^mariana-keys-(?:(?P<pid>\d+)\.(?P<start>\d*)@(?P<host>[A-Za-z0-9-]+)-)?[A-Za-z0-9_]+$")
#: a key folder of an earlier version (no writer recorded) untouched this long is no live run's
_OLD_KEYS_S = 86400.0


def throwaway_keys(workers: int) -> tuple[str, list[str]]:
    """A private temporary key folder for a one-machine ``--secure`` run: (folder, worker secret
    files). Those that killed runs left are removed first (``sweep_throwaway_keys``)."""
    from ..storage.lease import start_time
    from ..storage.rundir import host_tag

    sweep_throwaway_keys()
    pid = os.getpid()
    d = tempfile.mkdtemp(prefix=f"mariana-keys-{pid}.{start_time(pid)}@{host_tag()}-")
    os.chmod(d, 0o700)
    init_keys(d)
    return d, [str(add_key(d, f"worker-{i}")) for i in range(workers)]


def sweep_throwaway_keys(root: str | None = None) -> list[str]:
    """Remove the key folders of ``--secure`` runs (in ``root``, the temporary folder by default)
    whose process was killed: made on this machine by a pid that has ended (or been reused), or,
    made by an earlier version that does not record its pid, untouched for a day. Only this
    user's folders; returns those removed."""
    from ..storage.lease import pid_alive
    from ..storage.rundir import host_tag

    root = root or tempfile.gettempdir()
    removed: list[str] = []
    try:
        entries = [e for e in os.scandir(root) if e.name.startswith("mariana-keys-")]
    except OSError:
        return removed
    here, now = host_tag(), time.time()
    for entry in entries:
        m = _KEYS.match(entry.name)
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if m is None or not entry.is_dir(follow_symlinks=False) or st.st_uid != os.getuid():
            continue
        if m.group("pid") is None:
            stale = now - st.st_mtime > _OLD_KEYS_S
        else:
            stale = m.group("host") == here and not pid_alive(int(m.group("pid")), m.group("start"))
        if stale:
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    if removed:
        log.info("removed %d key folder(s) of --secure runs that were killed: %s", len(removed), ", ".join(removed))
    return removed


def local_spec(endpoint: str, host: str = "127.0.0.1", **kw: Any) -> WorkerSpec:
    """The spec of a worker this process starts; its logging follows this process's (``-v``/``-q``)."""
    return WorkerSpec(endpoint, host, verbosity=1 if log.isEnabledFor(logging.INFO) else -1, **kw)


def spawn_workers(spec: WorkerSpec, n: int = 1, sharing: int | None = None) -> list[subprocess.Popen]:
    """Start ``n`` local ``mariana worker`` processes that run ``spec`` (fresh interpreters).

    Unless the user set them, BLAS thread pools get ``cores // sharing`` threads each, where
    ``sharing`` (default ``n``) is the number of worker processes of the job on this machine: a
    launcher that starts them one at a time passes the job's total. N processes each spinning up
    one thread per core oversubscribe the machine (measured here: 150 dnn-dp steps on 2 workers
    took 3.87 s of superstep time with 2 OpenBLAS threads each on 2 cores, 0.44 s with 1).
    The same count divides the host's shared-memory budget among them (``comm/shmbudget.py``).
    """
    env = {**os.environ, **host_vars(n if sharing is None else sharing), **spec.env()}
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    env["PYTHONPATH"] = os.pathsep.join(paths + [env["PYTHONPATH"]] if env.get("PYTHONPATH") else paths)
    cmd = [sys.executable, "-m", "mariana", *spec.argv()]
    return [subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL) for _ in range(n)]


def host_vars(sharing: int) -> dict[str, str]:
    """The environment of each of ``sharing`` local worker processes of one job: BLAS thread pools
    (``thread_vars``) and the count that divides the host's shared-memory budget."""
    return {**thread_vars(sharing), HOST_WORKERS_VAR: str(max(1, sharing))}


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


def run_cluster(job_name: str, config: dict[str, Any], graph: Graph, options: RunOptions,
                build: GraphBuilder | None = None) -> RunResult:
    """Run a job by name on the cluster runtime and return its result.

    With ``options.spawn`` (``mariana run``) the master starts ``options.workers`` local worker
    processes (``LocalCluster``) and respawns a lost one; without (``mariana master``) it waits for
    ``mariana worker`` processes from anywhere. ``options.secure``: CURVE on every socket, with keys
    made for this run in a private temporary folder; ``options.security``: the master's own keys.
    ``options.resume``: continue from the newest valid checkpoint of ``options.run_dir``.
    ``build``: the workers' graph builder (forked local workers run it; spawned ones import it).
    """
    if options.spawn:
        assert build is not None, "a local cluster needs the workers' graph builder"
        with LocalCluster(job_name, config, options, build) as cluster:
            cluster.start()
            return cluster.run(graph, options.run_dir)
    resume = resume_point(options.run_dir, options.keep_checkpoints) if options.resume else None
    master = Master(job_name, config, graph, options, security=options.security, resume=resume, token=options.token)
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

    def __init__(self, job_name: str, config: dict[str, Any], options: RunOptions, build: GraphBuilder) -> None:
        self.options, self.job_name, self.config, self.build = options, job_name, config, build
        secure = options.secure and options.security is None
        self.keys_dir, self.key_files = throwaway_keys(options.workers) if secure else (None, [])
        self.security = Security.for_master(self.keys_dir) if secure else options.security
        self.master: Master | None = None  # made by start(), after any fork: its zmq context stays here
        self.procs: list[Any] = []  # subprocess.Popen or forking.ForkedWorker
        #: ``inproc://``: the workers are threads of this process (no processes, no respawn)
        self.inproc = options.bind.startswith("inproc://")
        self.threads: list[tuple[threading.Thread, Worker]] = []
        #: the job's token: only the workers this launch starts may join its master (``WorkerSpec.token``)
        self.token = secrets.token_hex(16)

    def start(self) -> None:
        workers = self.options.workers
        forked = [] if self.inproc else self._fork(workers)
        self.procs += forked
        self.master = master = Master(self.job_name, self.config, None, self.options.replace(run_dir=None),
                                      security=self.security, token=self.token)
        endpoint = master.start()
        spec = local_spec(endpoint, parse_endpoint(endpoint)[0],
                          max_message_mb=max(1, master.transport.max_message_bytes >> 20),
                          server_key=self.security.public.decode() if self.security is not None else None,
                          token=self.token)
        for i, key_file in enumerate(self.key_files or [None] * workers):
            mine = dataclasses.replace(spec, key=key_file)
            if self.inproc:
                self._thread(mine, i)
            elif forked:
                forked[i].start(mine)
            else:
                self.procs += spawn_workers(mine, sharing=workers)

        def respawn() -> subprocess.Popen:
            key = None
            if self.keys_dir is not None:  # a fresh key for the replacement, allowed before it connects
                key = str(add_key(self.keys_dir, f"worker-{len(self.procs)}"))
                self.security.allowed.keys.add(load_keypair(key)[0])
            # a fresh interpreter: this process has a zmq context (and IO threads) by now
            proc = spawn_workers(dataclasses.replace(spec, key=key), sharing=workers)[0]
            self.procs.append(proc)
            return proc

        master.respawn = None if self.inproc else respawn
        if self.options.on_start is not None:
            self.options.on_start(master, self.procs)

    def forks(self) -> bool:
        """Whether ``start()`` would fork the workers now (else it spawns fresh interpreters)."""
        return not self.inproc and self.options.fork and fork_is_safe() is None

    def _thread(self, spec: WorkerSpec, i: int) -> None:
        """Worker ``i`` as a thread of this process (``inproc://``)."""
        worker = make_worker(spec, self.build)
        thread = threading.Thread(target=worker.run, name=f"mariana-worker-{i}", daemon=True)
        thread.start()
        self.threads.append((thread, worker))

    def _fork(self, workers: int) -> list[ForkedWorker]:
        """``workers`` forked children waiting for their arguments, or [] to spawn them instead."""
        why = "--no-fork" if not self.options.fork else fork_is_safe()
        if why is not None:
            log.debug("local workers start as fresh interpreters: %s", why)
            return []
        log.debug("forking %d local workers", workers)
        return fork_workers(workers, host_vars(workers), self.build)  # (applied to each child's environment)

    def run(self, graph: Graph, run_dir: Any) -> RunResult:
        """Run ``graph`` on the started workers (``options.resume``: from ``run_dir``'s newest checkpoint)."""
        assert self.master is not None, "start() first"
        o = self.options
        resume = resume_point(run_dir, o.keep_checkpoints) if o.resume else None
        self.master.attach(graph, run_dir, resume)
        return self.master.run(children=self.procs)

    def close(self) -> None:
        grace = max(3.0, 2 * (self.master.heartbeat_interval if self.master else self.options.heartbeat_interval))
        done = self.master is not None and self.master.phase is Phase.DONE  # every worker got its BYE
        stop_processes(self.procs, grace=grace, leaving=2.0 if done else 0.0)
        for _, worker in self.threads:
            worker.leave()
        for thread, _ in self.threads:
            thread.join(timeout=grace)
        if self.master is not None:
            sweep(self.master.job_id)  # shared memory of a worker killed before its peers mapped it
            self.master.close()
        if self.keys_dir is not None:
            shutil.rmtree(self.keys_dir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
