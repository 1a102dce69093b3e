"""One way to start a cluster worker: a typed ``WorkerSpec`` run by ``run_worker``.

Every worker starts here, however its process came to be: ``mariana worker`` parses its flags
into a spec, a spawned local worker gets the same flags on its command line (``spec.argv()``),
and a forked one reads the spec as one JSON line from its parent (``forking``). Nothing here
reaches up into the command line package: the caller hands over the ``build`` function that
turns a WELCOME's job name and config into a graph (``jobs.launch.build_graph``).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from dataclasses import asdict, dataclass, fields
from typing import Any

from ..memory import one_malloc_arena
from ..engine.threads import all_set, apply_thread_vars, cores, thread_vars
from ..errors import MarianaError, UsageError, VertexError
from .joining import host_keys
from .worker import EXIT_MASTER_LOST, TOKEN_VAR, GraphBuilder, Worker

log = logging.getLogger(__name__)

__all__ = ["WorkerSpec", "TOKEN_VAR", "make_worker", "run_worker", "configure_logging", "LOG_FORMAT", "report_error",
           "size_thread_pools", "same_host"]

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


@dataclass
class WorkerSpec:
    """Everything a worker needs to join a master (the flags of ``mariana worker``)."""

    master: str
    host: str = "127.0.0.1"
    connect_timeout: float = 60.0
    max_message_mb: int = 1024
    #: the master's public key (a .key file or its z85 text); with ``key``: CURVE on every socket
    server_key: str | None = None
    #: this worker's secret key file
    key: str | None = None
    #: refuse a master that runs another job
    job: str | None = None
    #: logging: -1 quiet (warnings), 0 normal (joins and leaves), 1-2 more
    verbosity: int = 0
    #: a data socket off loopback without keys (plaintext, any sender): only when asked for
    insecure: bool = False
    #: the job token of a local launch: a plaintext loopback master admits only workers that
    #: have it. Never on a command line (any local user can read those): a spawned worker gets
    #: it in its environment (``TOKEN_VAR``), a forked one in its spec on a private pipe.
    token: str | None = None
    #: BLAS/OpenMP threads of this worker (``mariana worker --threads``, which sets them); None: its
    #: host's cores shared among the job's workers there, once the WELCOME names them (``size_thread_pools``)
    threads: int | None = None
    #: seconds for the master's address to accept a connection at all (`mariana worker`: 5 s, so
    #: that a wrong or dead master is said at once); None: ``connect_timeout`` (a launcher's workers)
    first_contact: float | None = None
    #: the address peers reach this worker's data socket at, when not where it is bound (NAT, containers)
    advertise: str | None = None

    def argv(self) -> list[str]:
        """The ``mariana`` arguments that start this worker in a fresh interpreter."""
        args = ["-q"] if self.verbosity < 0 else ["-v"] * self.verbosity
        args += ["worker", "--master", self.master, "--host", self.host,
                 "--connect-timeout", str(self.connect_timeout), "--max-message-mb", str(self.max_message_mb)]
        if self.server_key:
            args.append(f"--server-key={self.server_key}")  # a z85 key may start with "-"
        if self.key:
            args += ["--key", self.key]
        if self.job:
            args += ["--job", self.job]
        if self.insecure:
            args.append("--insecure")
        if self.threads:
            args += ["--threads", str(self.threads)]
        if self.advertise:
            args += ["--advertise", self.advertise]
        args += ["--first-contact-timeout", str(self.connect_timeout if self.first_contact is None else self.first_contact)]
        return args

    def env(self) -> dict[str, str]:
        """What a spawned worker needs in its environment besides its command line."""
        return {TOKEN_VAR: self.token} if self.token else {}

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> WorkerSpec:
        data = json.loads(text)
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def security(self) -> Any:
        """The CURVE settings of this worker, or None for plaintext (refused off loopback unless
        ``insecure``: a reachable data socket would accept any sender)."""
        if not (self.server_key or self.key):
            from ..comm import is_loopback

            if not is_loopback(self.host):
                if not self.insecure:
                    raise UsageError(f"--host {self.host} is not loopback (by default a worker binds this host's address "
                                     "on its route to the master): a reachable worker needs CURVE keys (--key and "
                                     "--server-key or --master-file, from `mariana keys add`), or --insecure on a "
                                     "network you trust")
                log.warning("INSECURE: this worker's data socket on %s accepts any sender and data travels in "
                            "plaintext", self.host)
            return None
        if not (self.server_key and self.key):
            raise UsageError("a secure worker needs both the master's public key (--server-key or --master-file) "
                             "and its own secret key (--key)")
        from ..comm.security import Security, load_public

        return Security.for_worker(self.key, load_public(self.server_key))


def configure_logging(verbosity: int, chatty: bool = True) -> None:
    """Logging to stderr as every ``mariana`` process has it (``chatty``: joins and leaves at INFO)."""
    base = logging.INFO if chatty and verbosity >= 0 else logging.WARNING
    logging.basicConfig(level=base - 10 * min(max(verbosity, 0), 2), stream=sys.stderr, format=LOG_FORMAT)


def report_error(exc: BaseException) -> int:
    """One line on stderr (and a vertex's traceback) for an error that ends a process; its exit code.

    This is the boundary of a worker process that did not come through the CLI (a forked child)."""
    if isinstance(exc, VertexError):
        sys.stderr.write(f"mariana: error: {exc}\n{exc.traceback_text or ''}")
        return 1
    if isinstance(exc, MarianaError):
        sys.stderr.write(f"mariana: error: {exc}\n")
        return exc.exit_code
    raise exc


def make_worker(spec: WorkerSpec, build: GraphBuilder) -> Worker:
    """The worker of ``spec``, not yet joined (``run()`` joins and serves; ``leave()`` ends it)."""
    return Worker(spec.master, build, spec.host, spec.connect_timeout, spec.max_message_mb << 20,
                  spec.security(), spec.job, token=spec.token or os.environ.get(TOKEN_VAR) or None,
                  first_contact=spec.first_contact, advertise=spec.advertise)


def run_worker(spec: WorkerSpec, build: GraphBuilder, process: bool = True) -> int:
    """Join the master of ``spec`` and serve the job to its end; returns the exit code.

    ``process``: this worker is the whole process, so a lost master ends the process even in the
    middle of a long compute (after 2 s for the loop to notice by itself); False for a worker
    that runs in a thread of a larger process (the in-process cluster of the tests)."""
    if process:  # before the zmq context's threads: what they receive is freed where we allocate
        one_malloc_arena()
    worker = make_worker(spec, build)
    returned = threading.Event()
    if process:
        def lost() -> None:
            if not returned.wait(2.0):
                os._exit(EXIT_MASTER_LOST)

        worker.on_master_lost = lost
        worker.on_welcome = lambda welcome: size_thread_pools(welcome.peers, welcome.index)
    try:
        return worker.run()
    finally:
        returned.set()


def same_host(peers: list[str], index: int) -> int:
    """How many of the job's workers (``peers``: every worker's data endpoint, in worker order)
    run on the host of worker ``index`` (``joining.host_key``)."""
    keys = host_keys(peers)
    mine = keys[index] if 0 <= index < len(keys) else None
    return max(1, keys.count(mine))


def size_thread_pools(peers: list[str], index: int) -> None:
    """A worker process's BLAS/OpenMP pools as ``mariana run`` sizes its workers': the host's
    cores shared among the job's workers on it (``same_host``), each variable the user set kept.
    Nothing when every variable is set already (a launcher or the user sized the pools)."""
    if all_set():
        return
    sharing = same_host(peers, index)
    values = thread_vars(sharing)
    apply_thread_vars(values)
    log.info("worker %d: %s BLAS/OpenMP threads (%d cores, %d worker(s) of the job on this host)",
             index, values["OPENBLAS_NUM_THREADS"], cores(), sharing)
