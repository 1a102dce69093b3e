"""Cluster master: joining, liveness and recovery; the cluster's ``Exchange`` for the driver.

The master binds one ROUTER. Workers join with HELLO; once ``workers`` have joined it sends
each a WELCOME (its index, the job by name plus resolved config, every peer's data endpoint),
waits for READY, and then runs the same ``Driver`` as ``LocalRuntime`` (engine/driver.py): a
superstep is BEGIN to all and DONE from all (the barrier); at the end FINISH, RESULT, BYE.
Every message is a typed record of ``messages/wire.py``.

Liveness: every message from a worker (and its heartbeat socket) refreshes its last-seen time;
a worker silent for ``worker_timeout`` seconds, or a spawned worker process that exits, fails
the job with one error naming the worker, its host and the superstep. Every other worker is
sent ABORT. Nothing else is fatal: malformed messages are dropped and counted.
"""

from __future__ import annotations

import logging
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from .. import __version__
from ..errors import MarianaError, ProtocolError, StorageError, UsageError, VertexError
from ..messages.kinds import Kind
from ..messages import wire
from ..messages.wire import DropCounter
from ..storage import RunDir
from ..storage.checkpoint import CheckpointInfo, Checkpoints
from .checkpointing import commit, report
from .driver import Driver
from .options import RunOptions
from .result import RunResult
from .superstep import Begin, Coordinator, Done
from .tracing import TraceWriter, rewind
from .transport import Transport, Unreachable, drain, poller, send

log = logging.getLogger(__name__)

__all__ = ["Master", "WorkerLost", "SuperstepTimeout"]


class WorkerLost(MarianaError):
    """A worker died or stopped answering; ``index`` says which (None: unknown)."""

    def __init__(self, message: str, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index


class SuperstepTimeout(WorkerLost):
    """A superstep ran past ``--superstep-timeout``; the message is the hang report."""


@dataclass
class WorkerInfo:
    index: int
    identity: bytes
    host: str
    pid: int
    data: str
    key: str | None = None  # its CURVE public key (z85) in a secure job
    last_seen: float = field(default_factory=time.monotonic)
    state: dict[str, Any] = field(default_factory=dict)  # from its heartbeats: phase, vertex, peers

    def describe(self) -> str:
        return f"worker {self.index} (host {self.host}, pid {self.pid})"


class Master:
    """The master of one cluster job. ``start()`` binds, ``run()`` drives the job to its end.

    With a run directory it also takes checkpoints (every ``checkpoint_every`` supersteps or when
    master compute asks), resumes from one (``resume``), and recovers from a lost worker by
    rolling every worker back to the newest checkpoint, at most ``max_restarts`` times: a local
    launch respawns the worker (``respawn``), otherwise any worker joining within
    ``rejoin_timeout`` takes the lost partition.
    """

    def __init__(self, job_name: str, config: dict[str, Any], graph: Any, options: RunOptions, *,
                 security: Any = None, resume: CheckpointInfo | None = None,
                 respawn: Callable[[], Any] | None = None) -> None:
        o = self.options = options
        self.job_name, self.config = job_name, config
        self.workers, self.placement = o.workers, o.placement
        self.bind = o.bind
        self.heartbeat_interval, self.worker_timeout, self.join_timeout = o.heartbeat_interval, o.worker_timeout, o.join_timeout
        self.max_supersteps = o.max_supersteps
        self.on_superstep = o.on_superstep
        self.checkpoint_every = o.checkpoint_every
        self.background = o.checkpoint_background
        self.max_restarts, self.rejoin_timeout, self.respawn = o.max_restarts, o.rejoin_timeout, respawn
        self.restarts = 0
        self.gen = 0
        #: the checkpoint being written: {"ss", "coordinator" (its copy), "parts": {worker: Checkpointed}}
        self._checkpoint: dict[str, Any] | None = None
        self.capture, self.capture_limit = o.capture, o.capture_limit_mb << 20
        self.superstep_timeout = o.superstep_timeout
        self.job_id = uuid.uuid4().hex
        self.security = security
        self.transport = Transport(o.max_message_bytes, security)
        self.drops = DropCounter("master", o.max_malformed)
        self.joined: dict[bytes, WorkerInfo] = {}
        self.by_index: list[WorkerInfo | None] = []
        self.children: list[Any] = []
        self.current = -1
        self.phase = "joining"
        self.endpoint = ""
        self.dropped: dict[str, int] = {}
        self._ready: set[int] = set()
        self._dones: dict[int, wire.Done] = {}
        self._results: dict[int, wire.Result] = {}
        self._arrivals: dict[int, float] = {}
        self._spares: set[bytes] = set()
        self._wall0 = time.time()
        self._next_hb = 0.0
        self.attach(graph, o.run_dir, resume)

    def attach(self, graph: Any, run_dir: RunDir | None, resume: CheckpointInfo | None = None) -> None:
        """The job's graph and run directory (``resume``: the checkpoint to continue from). They may
        come after ``start()``: a local launch starts its workers first and builds the graph while
        they start up."""
        self.graph, self.run_dir, self.resume = graph, run_dir, resume
        o = self.options
        self.checkpoints = Checkpoints(run_dir, o.keep_checkpoints) if run_dir is not None else None
        self.tracer = TraceWriter(run_dir) if run_dir is not None and o.trace else None

    def start(self) -> str:
        """Bind the control socket; returns the endpoint workers connect to."""
        self.sock, self.endpoint = self.transport.router(self.bind)
        self.poll = poller(self.sock)
        return self.endpoint

    def close(self) -> None:
        self.transport.close()

    # -- the job ----------------------------------------------------------------------------
    def run(self, children: Sequence[Any] = ()) -> RunResult:
        """Wait for the workers, run every superstep, collect results. Aborts workers on failure."""
        self.children = list(children)
        started = time.perf_counter()
        try:
            self._wait(lambda: len(self.joined) == self.workers, self.join_timeout,
                       f"{self.workers} workers to join {self.endpoint}")
            coord = Coordinator(self.graph, len(self.graph), self.max_supersteps)
            restore = None
            if self.resume is not None:
                restore = self.resume.superstep  # the caller rewound the run directory (resume_point)
                coord.restore(self.checkpoints.read(restore, "master")["coordinator"])
            for w in self.by_index:
                self._welcome(w, restore)
            self.phase = "starting"
            self._wait(lambda: len(self._ready) == self.workers, None, "workers to build their partitions")
            self.phase = "running"
            log.info("%d workers ready after %.2fs (joining and building); running", self.workers,
                     time.perf_counter() - started)
            # wall_s counts the supersteps, as LocalRuntime's does
            driver = Driver(self, coord, run_dir=self.run_dir, on_superstep=self.on_superstep, tracer=self.tracer,
                            checkpoints=self.checkpoints is not None, checkpoint_every=self.checkpoint_every,
                            background=self.background)
            while True:
                try:
                    driver.run()
                    break
                except WorkerLost as lost:
                    self._recover(lost, coord, driver)
            return driver.finish(self.graph.place(self.workers, None), self.job_name)
        except BaseException as exc:
            self._abort(str(exc) or type(exc).__name__)
            if self.tracer is not None:
                self.tracer.flush()
            raise

    def _welcome(self, w: WorkerInfo, restore: int | None) -> None:
        self._send(w, wire.Welcome(
            index=w.index, workers=self.workers, job_name=self.job_name, config=self.config, placement=self.placement,
            peers=[x.data for x in self.by_index], heartbeat_interval=self.heartbeat_interval,
            worker_timeout=self.worker_timeout, run_dir=self.run_dir.url if self.run_dir is not None else None,
            restore=restore, gen=self.gen, trace=self.tracer is not None, capture=self.capture,
            capture_limit=self.capture_limit, peer_keys=[x.key for x in self.by_index],
            checkpoint_background=self.background, shm=self.options.shm and self.security is None,
            shm_cap_mb=self.options.shm_cap_mb, shm_min_kb=self.options.shm_min_kb))

    # -- the Exchange of the driver -----------------------------------------------------------
    def superstep(self, begin: Begin) -> list[Done]:
        """BEGIN to every worker, then the barrier: a DONE from each (a lost worker raises ``WorkerLost``)."""
        self._wall0 = time.time()
        self.current, self._dones, self._arrivals = begin.superstep, {}, {}
        msg = wire.Begin(begin.superstep, self.gen, begin.aggregates, begin.broadcasts)
        for w in self.by_index:
            self._send(w, msg)
        self._wait(lambda: len(self._dones) == self.workers, None, f"the barrier of superstep {begin.superstep}",
                   self.superstep_timeout)
        return [Done(h.ss, i, h.partials, h.active, h.computed, h.sent, h.out_messages, h.compute_s,
                     [tuple(x) for x in h.slowest], h.trace or {}, self._arrivals[i])
                for i, h in sorted(self._dones.items())]

    def annotate(self, record: dict[str, Any]) -> None:
        stats = [self._dones[i].stats for i in range(self.workers)]
        record["bytes"] = sum(sum(s.get("bytes_out", [])) for s in stats)
        record["dropped"] = self.drops.total + sum(sum(s.get("dropped", {}).values()) for s in stats)
        if self.restarts:
            record["restarts"] = self.restarts

    def start_checkpoint(self, superstep: int, coordinator: dict[str, Any]) -> None:
        """Ask every worker to write its part of the state after this barrier; the master commits
        once every part is in (``settle_checkpoint``)."""
        self._checkpoint = {"ss": superstep, "coordinator": coordinator, "parts": {}}
        for w in self.by_index:
            self._send(w, wire.Checkpoint(superstep))

    def settle_checkpoint(self, record: dict[str, Any] | None, wait: bool = False) -> None:
        """Commit the checkpoint being written once every worker's part is in (``wait``: wait for them)."""
        pending = self._checkpoint
        if pending is None:
            return
        if wait:
            self._wait(lambda: len(pending["parts"]) == self.workers, None,
                       f"the checkpoint parts of superstep {pending['ss']}")
        if len(pending["parts"]) < self.workers:
            return
        self._checkpoint = None
        ss, replies = pending["ss"], [h for _, h in sorted(pending["parts"].items())]
        errors = [f"worker {h.src}: {h.error or 'no part entries in its reply'}" for h in replies
                  if h.error is not None or not isinstance(h.parts, list)]
        error: StorageError | None = StorageError("; ".join(errors)) if errors else None
        if error is None:
            try:
                commit(self.checkpoints, ss, [e for h in replies for e in h.parts], pending["coordinator"])
            except StorageError as exc:
                error = exc
            except (KeyError, TypeError) as exc:  # a malformed entry from a worker
                error = StorageError(f"malformed part entry from a worker: {exc!r}")
        report(ss, error, record, self.tracer)

    def results(self) -> dict[str, Any]:
        """FINISH to every worker, their RESULTs, BYE."""
        self.phase = "finishing"
        for w in self.by_index:
            self._send(w, wire.Finish())
        self._wait(lambda: len(self._results) == self.workers, None, "the workers' results")
        values: dict[str, Any] = {}
        for i in range(self.workers):
            values.update(self._results[i].values)
        self.dropped = {**self.drops.counts}
        for i in range(self.workers):
            for kind, n in (self._results[i].dropped or {}).items():
                self.dropped[kind] = self.dropped.get(kind, 0) + n
        for w in self.by_index:
            self._send(w, wire.Bye())
            log.info("%s left: job finished", w.describe())
        self.phase = "done"
        return values

    # -- recovery ---------------------------------------------------------------------------
    def _recover(self, lost: WorkerLost, coord: Coordinator, driver: Driver) -> None:
        """Replace the lost worker and roll everyone back to the newest valid checkpoint."""
        if self.max_restarts == 0 or lost.index is None:
            raise lost
        if self.checkpoints is not None:
            self.settle_checkpoint(None)  # every part was in before the loss: it is a checkpoint
        info = self.checkpoints.newest_valid() if self.checkpoints is not None else None
        if info is None or self.restarts >= self.max_restarts:
            why = ("no checkpoint to roll back to" if info is None else
                   f"--max-restarts {self.max_restarts} reached" if self.restarts >= self.max_restarts else "")
            if why:
                lost.args = (f"{lost.args[0]} (not recovered: {why})",)
            raise lost
        self.restarts += 1
        ss = info.superstep
        log.warning("%s; rolling the job back to the checkpoint at superstep %d (restart %d of %d)",
                    lost.args[0], ss, self.restarts, self.max_restarts)
        dead = self.by_index[lost.index]
        self.joined.pop(dead.identity, None)
        self.by_index[lost.index] = None
        self.children = [c for c in self.children if c.poll() is None]
        self.gen += 1
        self._checkpoint = None  # a checkpoint still being written belongs to the abandoned run: never committed
        self.phase = "rejoining"
        if self.respawn is not None:
            self.children.append(self.respawn())
        self._wait(lambda: all(self.by_index), self.rejoin_timeout,
                   f"a worker to take over worker {lost.index}'s partition (--rejoin-timeout)")
        self._ready = set()
        coord.restore(self.checkpoints.read(ss, "master")["coordinator"])
        driver.rewind(ss)
        if self.tracer is not None:
            self.tracer.flush()  # written records first, then the rewind drops the replayed ones
        rewind(self.run_dir, ss)
        if self.tracer is not None:
            self.tracer.event("recovery", superstep=self.current, lost=lost.index, rollback_to=ss,
                              restart=self.restarts)
        peers = [w.data for w in self.by_index]
        for w in self.by_index:
            if w.index == lost.index:
                self._welcome(w, ss)
            else:
                self._send(w, wire.Rollback(ss, self.gen, peers, [x.key for x in self.by_index]))
        self.phase = "starting"
        self._wait(lambda: len(self._ready) == self.workers, None, "workers to roll back")
        self.phase = "running"
        log.warning("recovered: worker %d replaced by %s, continuing from superstep %d",
                    lost.index, self.by_index[lost.index].describe(), ss)

    def _abort(self, reason: str) -> None:
        for w in self.by_index:
            if w is None:
                continue
            try:
                self._send(w, wire.Abort(reason))
            except Exception:  # noqa: BLE001 - best effort: the worker may be gone
                pass

    # -- the event loop ---------------------------------------------------------------------
    def _send(self, w: WorkerInfo, msg: wire.Wire) -> None:
        try:
            send(self.sock, msg.to_wire(self.job_id), w.identity)
        except Unreachable:
            code = self._exit_code(w)  # a local worker that died says more than "unreachable"
            how = f"exited with code {code}" if code is not None else "is unreachable"
            raise WorkerLost(f"{w.describe()} {how} at superstep {self.current}", w.index) from None

    def _exit_code(self, w: WorkerInfo) -> int | None:
        """The exit code of ``w`` if it is a process this master started and it has ended (its
        connection can close a moment before it can be reaped, hence the short wait)."""
        for child in self.children:
            if child.pid == w.pid:
                try:
                    return child.wait(timeout=1.0)
                except subprocess.TimeoutExpired:
                    return None
        return None

    def _wait(self, condition: Callable[[], bool], timeout: float | None, what: str,
              hang_after: float | None = None) -> None:
        """Handle messages until ``condition()``; check liveness all along. A barrier that takes
        longer than ``hang_after`` seconds is a hang: report who is missing, then fail or recover."""
        now = time.monotonic()
        deadline = None if timeout is None else now + timeout
        hang_at = None if hang_after is None else now + hang_after
        while not condition():
            if deadline is not None and time.monotonic() > deadline:
                raise MarianaError(f"timed out after {timeout:.0f}s waiting for {what} "
                                   f"({len(self.joined)} of {self.workers} workers present)")
            if hang_at is not None and time.monotonic() > hang_at:
                self._hang(hang_after)
            if self.poll.poll(int(min(self.heartbeat_interval, 0.2) * 1000)):
                self._drain()
            self._liveness()

    def _drain(self) -> None:
        for identity, header, _ in drain(self.sock, True, self.drops):
            self._handle(identity, header)

    def _handle(self, identity: bytes, header: dict[str, Any]) -> None:
        kind = header["kind"]
        if identity.startswith(b"hb:"):
            self._heartbeat(identity, header)
            return
        if kind == Kind.HELLO:
            self._hello(identity, header)
            return
        w = self.joined.get(identity)
        if w is None:
            self.drops.drop("sender", f"message from unknown identity {identity[:40]!r}")
            return
        if header.get("job") != self.job_id:
            self.drops.drop("job", f"message for job {header.get('job')!r} from {w.describe()}")
            return
        w.last_seen = time.monotonic()
        try:
            msg = wire.decode(header)
        except ProtocolError as exc:
            self.drops.drop(exc.kind, f"{exc.detail} from {w.describe()}")
            return
        if isinstance(msg, wire.Ready) and msg.gen == self.gen:
            self._ready.add(w.index)
        elif isinstance(msg, wire.Done) and msg.ss == self.current and self.phase == "running":
            self._dones[w.index] = msg
            self._arrivals[w.index] = time.time() - self._wall0
        elif isinstance(msg, wire.Checkpointed):
            if self._checkpoint is not None and msg.ss == self._checkpoint["ss"]:
                msg.src = w.index
                self._checkpoint["parts"][w.index] = msg
            else:  # a part of a checkpoint abandoned by a rollback
                log.debug("ignoring the checkpoint part of superstep %s from %s", msg.ss, w.describe())
        elif isinstance(msg, wire.Result) and self.phase == "finishing":
            self._results[w.index] = msg
        elif isinstance(msg, wire.Error):
            self._worker_error(w, msg)
        elif not isinstance(msg, wire.Heartbeat):
            self.drops.drop("kind", f"unexpected {kind} from {w.describe()} in phase {self.phase}")

    def _heartbeat(self, identity: bytes, header: dict[str, Any]) -> None:
        """A worker's heartbeat socket: liveness, what it is doing, and our clock for its offset."""
        w = self.joined.get(identity[3:])
        if w is None or header.get("job") != self.job_id:
            self.drops.drop("sender", f"heartbeat from unknown identity {identity[:40]!r}")
            return
        w.last_seen = time.monotonic()
        try:
            hb = wire.Heartbeat.from_wire(header)
        except ProtocolError as exc:
            self.drops.drop(exc.kind, exc.detail)
            return
        if hb.state is not None:
            w.state = hb.state
        if isinstance(hb.t, float):  # echo it with our clock: the worker estimates its offset
            try:
                send(self.sock, wire.Heartbeat(t=time.time(), echo=hb.t).to_wire(self.job_id), identity)
            except Unreachable:
                pass

    def _hello(self, identity: bytes, h: dict[str, Any]) -> None:
        if identity in self.joined:
            return  # a resent HELLO; the WELCOME is on its way
        host = str(h.get("host", "?"))
        # version and job first, on the raw header: a worker of another version may speak another HELLO
        if h.get("version") != __version__:
            reason = f"worker runs mariana {h.get('version')!r} but the master runs {__version__!r}"
        elif h.get("want_job") not in (None, self.job_name):
            reason = f"this master runs job {self.job_name!r}, the worker was started for {h.get('want_job')!r}"
        elif self.phase not in ("joining", "rejoining"):
            # a spare: leave it unanswered; it resends HELLO and takes over if a worker is lost
            if identity not in self._spares:
                self._spares.add(identity)
                log.info("a spare worker from host %s is waiting (the job has its %d workers)", host, self.workers)
            return
        else:
            try:
                hello = wire.Hello.from_wire(h)
            except ProtocolError as exc:
                self.drops.drop("header", f"HELLO: {exc.detail}")
                return
            free = self.by_index.index(None) if None in self.by_index else len(self.by_index)
            w = WorkerInfo(free, identity, host, hello.pid, hello.data, hello.key)
            self.joined[identity] = w
            if free == len(self.by_index):
                self.by_index.append(w)
            else:
                self.by_index[free] = w
            log.info("%s joined from %s (%d of %d)", w.describe(), w.data, len(self.joined), self.workers)
            return
        log.warning("refused a worker from host %s: %s", host, reason)
        self.drops.counts["refused"] = self.drops.counts.get("refused", 0) + 1
        try:
            send(self.sock, wire.Refuse(reason).to_wire(self.job_id), identity)
        except Unreachable:
            pass

    def _worker_error(self, w: WorkerInfo, h: wire.Error) -> None:
        if h.where == "input":
            raise UsageError(h.message)
        if h.where == "compute":
            raise VertexError(str(h.vertex), self.current if h.ss is None else h.ss,
                              f"{h.message} (on {w.describe()})", h.traceback)
        raise MarianaError(f"{w.describe()} cannot run job {self.job_name}: {h.message}")

    def _hang(self, after: float) -> None:
        """Name the workers missing from the barrier and the peers each waiting worker lacks."""
        now = time.time()
        missing, lines = [], []
        for w in self.by_index:
            if w is None or w.index in self._dones:
                continue
            st = w.state
            entry = {"worker": w.index, "host": w.host, "state": st.get("phase", "unknown"),
                     "for_s": round(now - st.get("since", now), 3)}
            if st.get("vertex"):
                entry["vertex"] = st["vertex"]
            missing.append(entry)
            doing = f"computing vertex {st['vertex']!r}" if st.get("vertex") else st.get("phase", "silent")
            if st.get("phase") == "waiting":
                doing = f"waiting for the batches of peer(s) {st.get('peers', [])}"
            lines.append(f"{w.describe()}: {doing} for {entry['for_s']:.1f}s")
        waiting = {str(w.index): w.state.get("peers", []) for w in self.by_index
                   if w is not None and w.state.get("phase") == "waiting"}
        report = (f"superstep {self.current} exceeded --superstep-timeout {after:g}s; not at the barrier: "
                  + "; ".join(lines))
        log.error(report)
        if self.tracer is not None:
            self.tracer.event("hang", superstep=self.current, elapsed_s=round(now - self._wall0, 3),
                              missing=missing, waiting=waiting)
        stuck = next((m["worker"] for m in missing if m["state"] == "computing"), missing[0]["worker"] if missing else None)
        if stuck is not None and self.max_restarts and self.checkpoints is not None:
            for child in self.children:  # a hung local worker is killed so that recovery can replace it
                if child.pid == self.by_index[stuck].pid and child.poll() is None:
                    child.kill()
                    child.wait()
        raise SuperstepTimeout(report, stuck)

    def _liveness(self) -> None:
        now = time.monotonic()
        present = [w for w in self.by_index if w is not None]
        for child in self.children:
            code = child.poll()
            if code is not None and self.phase != "done":
                w = next((w for w in present if w.pid == child.pid), None)
                who = w.describe() if w else f"worker process {child.pid}"
                raise WorkerLost(f"{who} exited with code {code} at superstep {self.current}", w.index if w else None)
        for w in present:
            if now - w.last_seen > self.worker_timeout:
                raise WorkerLost(f"{w.describe()} stopped answering at superstep {self.current} "
                                 f"(no message for {now - w.last_seen:.1f}s, timeout {self.worker_timeout:g}s)", w.index)
        if now >= self._next_hb:
            self._next_hb = now + self.heartbeat_interval
            for w in present:
                try:
                    send(self.sock, wire.Heartbeat(t=time.time()).to_wire(self.job_id), b"hb:" + w.identity)
                except Unreachable:
                    pass  # its heartbeat socket is not connected yet
