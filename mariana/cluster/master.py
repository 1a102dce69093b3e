"""Cluster master: the I/O shell around ``control.MasterState``, and the cluster's ``Backend``.

The master binds one ROUTER. Workers join with HELLO; once ``workers`` have joined it sends
each a WELCOME (its index, the job by name plus resolved config, every peer's data endpoint),
waits for READY, and then runs the same ``Driver`` as ``LocalRuntime`` (engine/driver.py): a
superstep is BEGIN to all and DONE from all (the barrier; the workers exchange their batches
meanwhile and deliver them when the next message comes, see ``worker.py``); at the end FINISH,
RESULT, BYE.
Every message is a typed record of ``messages/wire.py``.

What the master knows and how each message, heartbeat, tick or exited process changes it is
``control.MasterState`` (a state machine tested without a network); this module owns the
socket, turns what arrives into its events, carries out its instructions, and orchestrates
what spans many events: the barrier, checkpoints (committed through storage) and recovery.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import time
import uuid
from typing import Any, Callable, Sequence

from ..comm import HEARTBEAT_PREFIX, Unreachable, drain, poller, send, transport_for
from ..comm.zmqcomm import readable, send_each
from ..engine.checkpointing import commit, report
from ..engine.driver import Driver
from ..engine.options import RunOptions
from ..engine.result import RunResult
from ..engine.state import detached
from ..engine.superstep import Begin, Coordinator, Done
from ..engine.tracing import TraceWriter, rewind
from ..errors import MarianaError, StorageError
from ..messages import codec, wire
from ..storage import RunDir
from ..storage.checkpoint import CheckpointInfo, Checkpoints
from ..storage.lease import LeaseLost
from ..storage.retry import keepalive
from .control import (Beat, Exited, Fail, Instruction, MasterState, Phase, Send, SuperstepTimeout, Tick,
                      WorkerInfo, WorkerLost, inbound_trace)

log = logging.getLogger(__name__)

__all__ = ["Master", "Phase", "WorkerLost", "SuperstepTimeout"]


def join_grace(options: RunOptions) -> float:
    """How long a replacement this master started may take to join: a fresh interpreter joins in
    well under a second, several on a loaded machine; twice ``worker_timeout`` (at least 10 s), and
    at most half of ``--rejoin-timeout`` so that a second one still fits in it."""
    return min(max(10.0, 2 * options.worker_timeout), options.rejoin_timeout / 2)


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
                 respawn: Callable[[], Any] | None = None, token: str | None = None) -> None:
        o = self.options = options
        self.job_name, self.config = job_name, config
        self.workers, self.placement = o.workers, o.placement
        self.heartbeat_interval = o.heartbeat_interval
        self.respawn = respawn
        self.restarts = 0
        self.job_id = uuid.uuid4().hex
        self.security = security
        self.transport = transport_for(o.bind, o.max_message_bytes, security)
        self.state = MasterState(o.workers, job_name, self.job_id, heartbeat_interval=o.heartbeat_interval,
                                 worker_timeout=o.worker_timeout, heartbeat_prefix=HEARTBEAT_PREFIX,
                                 max_malformed=o.max_malformed, token=token)
        self.drops = self.state.drops
        #: the coordinator's copy taken with the checkpoint being written (committed with its parts)
        self._coordinator: dict[str, Any] | None = None
        self.children: list[Any] = []
        self.endpoint = ""
        self.dropped: dict[str, int] = {}
        self._liveness_due = 0.0  # when the loop next checks liveness once its condition holds
        #: replacements this master started and when, until they join (``_kill_stuck``)
        self._started: dict[int, float] = {}
        self.attach(graph, o.run_dir, resume)

    # what the state machine knows, under the names callers and tests use
    @property
    def phase(self) -> Phase:
        return self.state.phase

    @property
    def current(self) -> int:
        return self.state.current

    @property
    def gen(self) -> int:
        return self.state.gen

    @property
    def joined(self) -> dict[bytes, WorkerInfo]:
        return self.state.joined

    @property
    def by_index(self) -> list[WorkerInfo | None]:
        return self.state.by_index

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
        self.sock, self.endpoint = self.transport.router(self.options.bind)
        self.poll = poller(self.sock)
        return self.endpoint

    def close(self) -> None:
        self.transport.close()

    def status(self) -> dict[str, Any]:
        """What the live page shows: phase, superstep, the workers that joined (index, host, pid)."""
        out: dict[str, Any] = {"phase": self.phase.value, "workers_expected": self.workers}
        if self.current >= 0:
            out["superstep"] = self.current
        joined = list(self.joined.values())  # one C call: safe from the page's thread
        workers = [{"worker": w.index, "host": w.host, "pid": w.pid} for w in joined]
        if workers:
            out["workers"] = sorted(workers, key=lambda w: w["worker"])
        return out

    # -- the job ----------------------------------------------------------------------------
    def run(self, children: Sequence[Any] = ()) -> RunResult:
        """Wait for the workers, run every superstep, collect results. Aborts workers on failure."""
        self.children = list(children)
        started = time.perf_counter()
        o = self.options
        try:
            self._wait(self.state.all_joined, o.join_timeout, f"{self.workers} workers to join {self.endpoint}")
            self.state.group_by_host()
            coord = Coordinator(self.graph, len(self.graph), o.max_supersteps)
            self._start_state = detached(coord.snapshot())  # a restart from the input goes back to it
            restore = None
            if self.resume is not None:
                restore = self.resume.superstep  # the caller rewound the run directory (resume_point)
                coord.restore(self.checkpoints.read(restore, "master")["coordinator"])
            if self.tracer is not None:  # who runs the job from where: a failover names both masters' hosts
                self.tracer.event("master", host=socket.gethostname(), pid=os.getpid(), endpoint=self.endpoint,
                                  resume=restore, wall=round(time.time(), 3),
                                  workers={str(w.index): w.host for w in self.state.present()},
                                  pids={str(w.index): w.pid for w in self.state.present()})
            self.state.phase = Phase.STARTING
            for w in self.state.present():
                self._welcome(w, restore)
            self._wait(self.state.all_ready, None, "workers to build their partitions")
            self.state.phase = Phase.RUNNING
            log.info("%d workers ready after %.2fs (joining and building); running", self.workers,
                     time.perf_counter() - started)
            # wall_s counts the supersteps, as LocalRuntime's does
            driver = Driver(self, coord, run_dir=self.run_dir, on_superstep=o.on_superstep, tracer=self.tracer,
                            checkpoints=self.checkpoints is not None, checkpoint_every=o.checkpoint_every,
                            background=o.checkpoint_background, metrics_every_s=o.metrics_every_s)
            with keepalive(self._keepalive):  # a storage outage being retried does not lose the workers
                while True:  # a worker lost while the last checkpoint or the results are collected too
                    try:
                        driver.run()
                        return driver.finish(self.graph.place(self.workers, None), self.job_name)
                    except WorkerLost as lost:
                        self._recover(lost, coord, driver)
        except BaseException as exc:
            self._abort(str(exc) or type(exc).__name__)
            if self.tracer is not None:
                self.tracer.flush()
            raise

    def _welcome(self, w: WorkerInfo, restore: int | None) -> None:
        o = self.options
        self._do([Send(w.identity, wire.Welcome(
            index=w.index, workers=self.workers, job_name=self.job_name, config=self.config, placement=self.placement,
            peers=[x.data for x in self.by_index], heartbeat_interval=o.heartbeat_interval,
            worker_timeout=o.worker_timeout, run_dir=self.run_dir.url if self.run_dir is not None else None,
            restore=restore, gen=self.gen, trace=self.tracer is not None, capture=o.capture,
            capture_limit=o.capture_limit_mb << 20, peer_keys=[x.key for x in self.by_index],
            checkpoint_background=o.checkpoint_background,
            shm=o.shm and self.security is None and not self.transport.inproc,
            shm_cap_mb=o.shm_cap_mb, shm_min_kb=o.shm_min_kb), w)])

    # -- the Backend of the driver -----------------------------------------------------------
    def superstep(self, begin: Begin) -> list[Done]:
        """BEGIN to every worker, then the barrier: a DONE from each (a lost worker raises ``WorkerLost``)."""
        self._do(self.state.begin(begin.superstep, begin.aggregates, begin.broadcasts, time.time()))
        self._wait(self.state.barrier_done, None, f"the barrier of superstep {begin.superstep}",
                   self.options.superstep_timeout)
        st = self.state
        inbound_trace(st.dones)  # the records' messages_in / bytes_in (no-op without traces)
        dones, arrivals = st.dones, st.arrivals
        # (``slowest`` as it came, [vertex, seconds] pairs: no reader of a Done needs tuples)
        return [Done(h.ss, i, h.partials, h.active, h.computed, h.sent, h.out_messages, h.compute_s,
                     h.slowest, h.trace or {}, arrivals[i])
                for i, h in ((i, dones[i]) for i in range(self.workers))]

    def annotate(self, record: dict[str, Any]) -> None:
        sent = dropped = 0
        for h in self.state.dones.values():
            stats = h.stats
            sent += sum(stats.get("bytes_out", ()))
            if stats.get("dropped"):
                dropped += sum(stats["dropped"].values())
        record["bytes"] = sent
        record["dropped"] = self.drops.total + dropped
        if self.restarts:
            record["restarts"] = self.restarts

    def start_checkpoint(self, superstep: int, coordinator: dict[str, Any]) -> None:
        """Ask every worker to write its part of the state after this barrier; the master commits
        once every part is in (``settle_checkpoint``)."""
        self._coordinator = coordinator
        self._do(self.state.start_checkpoint(superstep))

    def settle_checkpoint(self, record: dict[str, Any] | None, wait: bool = False) -> None:
        """Commit the checkpoint being written once every worker's part is in (``wait``: wait for them)."""
        st = self.state
        if st.checkpoint_ss is None:
            return
        if wait:
            self._wait(st.all_parts, None, f"the checkpoint parts of superstep {st.checkpoint_ss}")
        if not st.all_parts():
            return
        ss, replies = st.take_parts()
        errors = [f"worker {h.src}: {h.error or 'no part entries in its reply'}" for h in replies
                  if h.error is not None or not isinstance(h.parts, list)]
        error: StorageError | None = StorageError("; ".join(errors)) if errors else None
        if error is None:
            try:
                commit(self.checkpoints, ss, [e for h in replies for e in h.parts], self._coordinator)
            except StorageError as exc:
                error = exc
            except (KeyError, TypeError) as exc:  # a malformed entry from a worker
                error = StorageError(f"malformed part entry from a worker: {exc!r}")
        if isinstance(error, LeaseLost):
            raise error  # another master took the run directory over: this one must stop, not go on
        if error is not None:
            self.checkpoints.discard(ss)  # the parts that were written would only take the next one's space
        report(ss, error, record, self.tracer)

    def results(self) -> dict[str, Any]:
        """FINISH to every worker, their RESULTs, BYE."""
        st = self.state
        self._do(st.finish())
        self._wait(st.all_results, None, "the workers' results")
        values: dict[str, Any] = {}
        for i in range(self.workers):
            values.update(st.results[i].values)
        self.dropped = {**self.drops.counts}
        for i in range(self.workers):
            for kind, n in (st.results[i].dropped or {}).items():
                self.dropped[kind] = self.dropped.get(kind, 0) + n
        self._do(st.bye())
        for w in st.present():
            log.info("%s left: job finished", w.describe())
        return values

    # -- recovery ---------------------------------------------------------------------------
    def _recover(self, lost: WorkerLost, coord: Coordinator, driver: Driver) -> None:
        """Replace every lost worker and roll everyone back to the newest valid checkpoint, or
        before the first one to superstep 0 (every worker builds its partition from the input again).

        Every worker found lost (``lost`` and any other that has exited or gone silent) is
        retired: told to stop and, if this master started it, killed, so a paused one that wakes
        up later cannot come back. A worker lost while the others roll back is replaced too
        (each round counts as a restart)."""
        o = self.options
        if o.max_restarts == 0 or lost.index is None:
            raise lost
        if self.run_dir is not None:
            # a master that was cut off (or paused) past its lease may have been replaced by another
            # one on this run directory: it stops here (LeaseLost) instead of waiting for workers
            self.run_dir.fence()
        if self.checkpoints is not None:
            self.settle_checkpoint(None)  # every part was in before the loss: it is a checkpoint
        if self.restarts >= o.max_restarts:
            lost.args = (f"{lost.args[0]} (not recovered: --max-restarts {o.max_restarts} reached)",)
            raise lost
        info = self.checkpoints.newest_valid() if self.checkpoints is not None else None
        # no checkpoint yet: the job starts again from its input (superstep 0), as Pregel's does
        ss = info.superstep if info is not None else 0
        gone = {lost.index} | self._also_lost()
        began = time.monotonic()
        #: the hosts of the workers lost (by index), for the trace: a fault is named with its host
        lost_hosts = self._hosts(gone)
        # the workers that hold their partitions and roll back; every other one that joins is welcomed
        survivors = {w.identity for w in self.state.present() if w.index not in gone}
        replaced = set(gone)
        while True:
            self.restarts += 1
            log.warning("%s%s; %s (restart %d of %d)", lost.args[0],
                        f" (lost: workers {sorted(gone)})" if len(gone) > 1 else "",
                        f"rolling the job back to the checkpoint at superstep {ss}" if ss else
                        "no checkpoint yet: restarting the job from its input", self.restarts, o.max_restarts)
            try:
                self._rollback(gone, ss, coord, driver, survivors)
                break
            except WorkerLost as more:
                if self.restarts >= o.max_restarts or (more.index is None and self.respawn is None):
                    raise
                # another worker lost, or (index None) a replacement of ours that died before it
                # joined: the next round starts a worker for every slot still free
                lost, gone = more, ({more.index} if more.index is not None else set()) | self._also_lost()
                survivors -= {w.identity for w in self.state.present() if w.index in gone}
                lost_hosts.update(self._hosts(gone))
                replaced |= gone
        if self.tracer is not None:
            self.tracer.event("recovery", superstep=self.current, lost=lost.index, lost_workers=sorted(replaced),
                              rollback_to=ss, restart=self.restarts, reason=lost.args[0],
                              lost_hosts={str(i): h for i, h in sorted(lost_hosts.items())},
                              replaced_by={str(i): w.host for i in sorted(replaced) if (w := self.by_index[i])},
                              replacement_pids={str(i): w.pid for i in sorted(replaced) if (w := self.by_index[i])},
                              recover_s=round(time.monotonic() - began, 3), wall=round(time.time(), 3))
        log.warning("recovered: %s, continuing from superstep %d", "; ".join(
            f"worker {i} replaced by {self.by_index[i].describe()}" for i in sorted(replaced)), ss)

    def _hosts(self, indices: set[int]) -> dict[int, str]:
        """The host of each worker of ``indices`` still in its slot."""
        return {i: w.host for i in indices if (w := self.by_index[i]) is not None}

    def _silences(self) -> None:
        """Write the silences ridden through (``MasterState.silences``) as ``silence`` trace events."""
        silences, self.state.silences = self.state.silences, []
        if self.tracer is not None:
            for s in silences:
                self.tracer.event("silence", **s)

    def _also_lost(self) -> set[int]:
        """Indices of the workers that have exited (local processes) or gone silent by now."""
        return self.state.also_lost(time.monotonic(), {c.pid for c in self.children if c.poll() is not None})

    def _retire(self, workers: list[WorkerInfo]) -> None:
        """Workers dropped from the job for good: ABORT to each (a paused worker reads it when it
        wakes) and, if it is a process this master started, kill it and reap it."""
        for w in workers:
            try:
                send(self.sock, wire.Abort("replaced after it was lost").to_wire(self.job_id), w.identity)
            except Unreachable:
                pass
            for child in [c for c in self.children if c.pid == w.pid]:
                if child.poll() is None:
                    child.kill()
                try:
                    child.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    log.warning("worker process %d did not die on SIGKILL", child.pid)
                self.children.remove(child)

    def _rollback(self, gone: set[int], ss: int, coord: Coordinator, driver: Driver, survivors: set[bytes]) -> None:
        """Retire the workers ``gone``, have new ones take the free slots, and roll every worker
        back to the checkpoint at ``ss`` (0: to the input): ``survivors`` (identities of workers that
        hold a partition) roll back, the others are welcomed with it and join ``survivors`` (raises
        ``WorkerLost`` if another worker is lost meanwhile)."""
        o = self.options
        self._retire(self.state.lose(gone))
        self.children = [c for c in self.children if c.poll() is None]
        if self.respawn is not None:  # a worker for every free slot that no started one is about to take
            joined = {w.pid for w in self.state.present()}
            joining = [c for c in self.children if c.pid not in joined]
            free = sum(1 for w in self.state.by_index if w is None)
            log.info("rollback: %d free slot(s), %d started worker(s) not joined yet (%s): starting %d",
                     free, len(joining), ", ".join(str(c.pid) for c in joining) or "none", max(0, free - len(joining)))
            for _ in range(free - len(joining)):
                self.children.append(self.respawn())
                self._started[self.children[-1].pid] = time.monotonic()
        self._wait(self.state.all_joined, o.rejoin_timeout,
                   f"workers to take over worker {', '.join(map(str, sorted(gone)))}'s partition (--rejoin-timeout)")
        coord.restore(self.checkpoints.read(ss, "master")["coordinator"] if ss else self._start_state)
        driver.rewind(ss)
        if self.tracer is not None:
            self.tracer.flush()  # written records first, then the rewind drops the replayed ones
        if self.run_dir is not None:
            rewind(self.run_dir, ss)
        self.state.phase = Phase.STARTING
        peers = [w.data for w in self.by_index]
        for w in self.state.present():
            if w.identity not in survivors:
                self._welcome(w, ss or None)
                survivors.add(w.identity)  # welcomed: if this rollback is cut short, it rolls back with the rest
            else:
                self._do([Send(w.identity, wire.Rollback(ss, self.gen, peers, [x.key for x in self.by_index]), w)])
        self._wait(self.state.all_ready, None, "workers to roll back")
        self.state.phase = Phase.RUNNING

    def _abort(self, reason: str) -> None:
        for ins in self.state.abort(reason):
            try:
                send(self.sock, ins.msg.to_wire(self.job_id), ins.identity)
            except Exception:  # noqa: BLE001 - best effort: the worker may be gone
                pass

    # -- the I/O loop -------------------------------------------------------------------------
    def _do(self, instructions: Sequence[Instruction]) -> None:
        """Carry out the state machine's instructions: sends, or the error that ends the wait. A
        message sent to many workers (BEGIN) is encoded once and sent in one loop (``send_each``)."""
        at, n = 0, len(instructions)
        while at < n:
            ins = instructions[at]
            if isinstance(ins, Fail):
                raise ins.error
            msg, end = ins.msg, at + 1  # the run of instructions that send this same record
            while end < n and getattr(instructions[end], "msg", None) is msg:
                end += 1
            run: list[Send] = instructions[at:end]  # type: ignore[assignment]
            frames = codec.encode(msg.to_wire(self.job_id))
            identities = [x.identity for x in run]
            pos: int | None = 0
            while (pos := send_each(self.sock, frames, identities, pos)) is not None:
                self._unreachable(run[pos])
                pos += 1
            at = end

    def _unreachable(self, ins: Send) -> None:
        """A send to a worker that is not connected: it is lost (a refused worker or a heartbeat
        socket not connected yet is nothing to act on)."""
        w = ins.to
        if w is None:
            return
        code = self._exit_code(w)  # a local worker that died says more than "unreachable"
        how = self.state.oom.exit(code, w.pid) if code is not None else "is unreachable"
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
        st = self.state
        wait_ms = int(min(self.heartbeat_interval, 0.2) * 1000)
        while not condition():
            if deadline is not None and now > deadline:
                raise MarianaError(f"timed out after {timeout:.0f}s waiting for {what} "
                                   f"({len(st.joined)} of {self.workers} workers present)")
            if hang_at is not None and now > hang_at:
                self._hang(hang_after)
            if readable(self.sock, wait_ms):
                self._receive()
            now = time.monotonic()
            # liveness at most every 50 ms (the poll wakes at least every 200): not on each
            # DONE's path, which is the whole of an empty superstep (bench/superstep_latency.py)
            if now >= self._liveness_due:
                self._liveness_due = now + 0.05
                self._kill_stuck(now)
                for child in self.children:
                    code = child.poll()
                    if code is not None:
                        self._do(st.handle(Exited(child.pid, code)))
                self._do(st.handle(Tick(now, time.time())))
                if st.silences:
                    self._silences()

    def _kill_stuck(self, now: float) -> None:
        """Kill a replacement that has not joined ``join_grace`` seconds after it was started (a
        process hung or paused before it could say HELLO): its exit is then a loss like any other,
        and the next recovery round starts another in its slot instead of waiting out
        ``--rejoin-timeout`` for it."""
        if not self._started:
            return
        joined = {w.pid for w in self.state.present()}
        grace = join_grace(self.options)
        for child in self.children:
            since = self._started.get(child.pid)
            if since is None:
                continue
            if child.pid in joined or child.poll() is not None:
                del self._started[child.pid]
            elif now - since > grace:
                log.warning("worker process %d started %.1fs ago has not joined: killing it, a new one takes "
                            "its place", child.pid, now - since)
                del self._started[child.pid]
                child.kill()

    def _keepalive(self) -> None:
        """While a storage call of this thread waits to retry: take the workers' messages (their
        heartbeats keep them alive here) and send ours (ours keep this master alive there)."""
        if self.poll.poll(0):
            self._receive()
        self._do(self.state.beats(time.monotonic(), time.time()))

    def _receive(self) -> None:
        """Every message waiting now, as events to the state machine; its instructions carried out."""
        st, hb, monotonic, clock = self.state, HEARTBEAT_PREFIX, time.monotonic, time.time
        for identity, header, _ in drain(self.sock, True, self.drops, many=True):
            if identity.startswith(hb):
                todo = st.handle(Beat(identity, identity[len(hb):], header, monotonic(), clock()))
            else:
                todo = st.arrived(identity, header, monotonic(), clock())
            if todo:
                self._do(todo)

    def _hang(self, after: float) -> None:
        """Name the workers missing from the barrier and the peers each waiting worker lacks."""
        now = time.time()
        report_text, missing, waiting, stuck = self.state.hang_report(after, now)
        log.error(report_text)
        if self.tracer is not None:
            self.tracer.event("hang", superstep=self.current, elapsed_s=round(now - self.state.begun_wall, 3),
                              missing=missing, waiting=waiting)
        if stuck is not None and self.options.max_restarts and self.checkpoints is not None:
            for child in self.children:  # a hung local worker is killed so that recovery can replace it
                if child.pid == self.by_index[stuck].pid and child.poll() is None:
                    child.kill()
                    child.wait()
        raise SuperstepTimeout(report_text, stuck)
