"""Launch a cluster job on this machine: a master in this process, N worker processes on loopback.

Workers are started as ``python -m mariana worker --master ENDPOINT`` with this process's import
path, so a job given as ``package.module:JOB`` imports the same way in every worker. They are
cleaned up on every exit path: success, error, Ctrl-C (``finally``); if this process is killed,
the workers notice the silent master through their heartbeats and exit by themselves.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from typing import Any, Callable

from .graph import Graph
from .master import Master
from .security import Security, add_key, load_keypair, local_keys
from .result import RunResult
from .transport import parse_endpoint

log = logging.getLogger(__name__)

__all__ = ["run_cluster", "spawn_workers", "stop_processes", "blas_threads", "THREAD_VARS"]


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


def spawn_workers(endpoint: str, n: int, host: str = "127.0.0.1", extra_args: list[str] | None = None,
                  sharing: int | None = None) -> list[subprocess.Popen]:
    """Start ``n`` local ``mariana worker`` processes that join the master at ``endpoint``.

    Unless the user set them, BLAS thread pools get ``cores // sharing`` threads each, where
    ``sharing`` (default ``n``) is the number of worker processes of the job on this machine: a
    launcher that starts them one at a time passes the job's total. N processes each spinning up
    one thread per core oversubscribe the machine (measured here: 150 dnn-dp steps on 2 workers
    took 3.87 s of superstep time with 2 OpenBLAS threads each on 2 cores, 0.44 s with 1).
    """
    env = dict(os.environ)
    threads = str(blas_threads(n if sharing is None else sharing))
    for var in THREAD_VARS:
        env.setdefault(var, threads)
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    env["PYTHONPATH"] = os.pathsep.join(paths + [env["PYTHONPATH"]] if env.get("PYTHONPATH") else paths)
    verbosity = ["-v"] if log.isEnabledFor(logging.INFO) else ["-q"]
    cmd = [sys.executable, "-m", "mariana", *verbosity, "worker", "--master", endpoint, "--host", host,
           *(extra_args or [])]
    return [subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL) for _ in range(n)]


def stop_processes(procs: list[subprocess.Popen], grace: float = 3.0) -> None:
    """Terminate, then kill, every process still running; reap them all."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def run_cluster(job_name: str, config: dict[str, Any], graph: Graph, *, workers: int,
                on_start: Callable[[Master, list[subprocess.Popen]], None] | None = None, secure: bool = False,
                **master_options: Any) -> RunResult:
    """Run a job by name on ``workers`` local worker processes and return its result.

    ``master_options`` go to ``Master`` (placement, max_supersteps, on_superstep, bind,
    heartbeat_interval, worker_timeout, max_message_bytes, run_dir, checkpoint_every,
    keep_checkpoints, resume, max_restarts, rejoin_timeout). A lost worker is respawned here.
    ``secure``: CURVE on every socket, with keys made for this run in a private temporary folder.
    """
    keys_dir, key_files = local_keys(workers) if secure else (None, [])
    security = Security.for_master(keys_dir) if secure else None
    master = Master(job_name, config, graph, workers=workers, security=security, **master_options)
    procs: list[subprocess.Popen] = []
    try:
        endpoint = master.start()
        extra = ["--max-message-mb", str(max(1, master.transport.max_message_bytes >> 20))]
        if secure:
            extra += [f"--server-key={security.public.decode()}"]  # a Z85 key may start with "-"
        host = parse_endpoint(endpoint)[0]
        for key_file in key_files or [None] * workers:
            procs += spawn_workers(endpoint, 1, host, extra + (["--key", key_file] if key_file else []),
                                   sharing=workers)

        def respawn() -> subprocess.Popen:
            key = []
            if secure:  # a fresh key for the replacement, allowed before it connects
                key_file = str(add_key(keys_dir, f"worker-{len(procs)}"))
                security.allowed.keys.add(load_keypair(key_file)[0])
                key = ["--key", key_file]
            proc = spawn_workers(endpoint, 1, host, extra + key, sharing=workers)[0]
            procs.append(proc)
            return proc

        master.respawn = respawn
        if on_start is not None:
            on_start(master, procs)
        return master.run(children=procs)
    finally:
        stop_processes(procs, grace=max(3.0, 2 * master.heartbeat_interval))
        master.close()
        if keys_dir is not None:
            shutil.rmtree(keys_dir, ignore_errors=True)
