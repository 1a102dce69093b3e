"""The master's control plane as a state machine: typed events in, typed instructions out.

``MasterState`` holds everything the master knows about its workers (who joined, from where,
when each was last heard of, who is READY, whose DONE, RESULT and checkpoint part are in) and
the job's ``Phase``. It never touches a socket or a clock of its own: the master's I/O loop
(``master.py``) turns what arrives into events (``Arrived``, ``Beat``, ``Tick``, ``Exited``),
hands them to ``handle`` and carries out what comes back (``Send`` a record to a worker,
``Fail`` the job with an error). Unit tests drive it with no network
(``tests/cluster/test_control.py``), as dask's worker state machine is driven.

Liveness lives here too: a ``Tick`` finds workers silent for ``worker_timeout`` seconds, an
``Exited`` a local worker process that ended; both become ``Fail(WorkerLost)``, which the master
turns into a recovery (or the job's error). Nothing else is fatal: malformed, unexpected or
foreign messages are dropped and counted (``drops``).
"""

from __future__ import annotations

import enum
import hmac
import logging
from dataclasses import dataclass, field
from typing import Any, Union

from .. import __version__
from .joining import host_key
from .oom import OomWatch
from ..errors import MarianaError, ProtocolError, UsageError, VertexError
from ..messages import wire
from ..messages.kinds import Kind
from ..messages.wire import DropCounter

log = logging.getLogger(__name__)

__all__ = ["Phase", "WorkerInfo", "WorkerLost", "SuperstepTimeout", "MasterState",
           "Arrived", "Beat", "Tick", "Exited", "Event", "Send", "Fail", "Instruction", "inbound_trace"]


class Phase(enum.Enum):
    """Where a cluster job is: what the master accepts from workers depends on it."""

    JOINING = "joining"  # waiting for HELLOs until every worker slot is taken
    STARTING = "starting"  # WELCOMEs sent; waiting for every worker's READY (built or rolled back)
    RUNNING = "running"  # supersteps: BEGIN to all, DONE from all
    REJOINING = "rejoining"  # a worker was lost: waiting for a replacement to take its slot
    FINISHING = "finishing"  # FINISH sent; waiting for every RESULT
    DONE = "done"  # every worker was told BYE


#: the phases where every worker sends heartbeats all along, so a silence means a fault (while
#: joining, a worker's HELLO is its only message until every worker is in)
_HEARD = frozenset((Phase.RUNNING, Phase.FINISHING))


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
    last_seen: float = 0.0
    state: dict[str, Any] = field(default_factory=dict)  # from its heartbeats: phase, vertex, peers

    def describe(self) -> str:
        return f"worker {self.index} (host {self.host}, pid {self.pid})"


# -- events: what happened --------------------------------------------------------------------
@dataclass
class Arrived:
    """A control message from ``identity`` (decoded header; its job id not checked yet)."""

    identity: bytes
    header: dict[str, Any]
    now: float  # monotonic
    wall: float  # time.time(), for barrier arrival times


@dataclass
class Beat:
    """A heartbeat from the heartbeat socket ``identity`` of the worker whose control identity is ``of``."""

    identity: bytes
    of: bytes
    header: dict[str, Any]
    now: float
    wall: float


@dataclass
class Tick:
    """Time passed: check liveness, send heartbeats that are due."""

    now: float
    wall: float


@dataclass
class Exited:
    """A worker process this master started has ended with ``code``."""

    pid: int
    code: int


Event = Union[Arrived, Beat, Tick, Exited]


# -- instructions: what to do -----------------------------------------------------------------
@dataclass
class Send:
    """Send ``msg`` to ``identity`` (``to``: the worker, when it is one; a vanished worker is lost)."""

    identity: bytes
    msg: wire.Wire
    to: WorkerInfo | None = None


@dataclass
class Fail:
    """End the barrier with this error (``WorkerLost``: recover if possible)."""

    error: MarianaError


Instruction = Union[Send, Fail]


class MasterState:
    """What the master knows, and how each event changes it."""

    def __init__(self, workers: int, job_name: str, job_id: str, *, heartbeat_interval: float = 0.5,
                 worker_timeout: float = 10.0, heartbeat_prefix: bytes = b"hb:", max_malformed: int = 1000,
                 token: str | None = None) -> None:
        self.workers, self.job_name, self.job_id = workers, job_name, job_id
        #: a local launch's job token: a HELLO without it is refused (only the workers it started join)
        self.token = token
        self.heartbeat_interval, self.worker_timeout = heartbeat_interval, worker_timeout
        self.heartbeat_prefix = heartbeat_prefix
        self.drops = DropCounter("master", max_malformed)
        self.phase = Phase.JOINING
        self.current = -1  # the superstep whose barrier is open (or was last)
        self.gen = 0  # generation: +1 at every rollback; older READYs and BEGINs are stale
        self.joined: dict[bytes, WorkerInfo] = {}
        self.by_index: list[WorkerInfo | None] = []
        self.spares: set[bytes] = set()
        self.ready: set[int] = set()
        self.dones: dict[int, wire.Done] = {}
        self.arrivals: dict[int, float] = {}  # seconds from BEGIN to each DONE
        self.results: dict[int, wire.Result] = {}
        #: the checkpoint being written: superstep and the parts in so far
        self.checkpoint_ss: int | None = None
        self.parts: dict[int, wire.Checkpointed] = {}
        self.begun_wall = 0.0
        self._next_beat = 0.0
        #: a worker heard from again after this many silent seconds (shorter than the timeout: a
        #: partition or a pause ridden through) is recorded in ``silences`` for the run's trace
        self.silent_after = max(2.5 * heartbeat_interval, worker_timeout / 6)
        self.silences: list[dict[str, Any]] = []
        #: control identities of workers lost and replaced: one that is heard from again (a
        #: partition healed, a pause ended) is told ABORT, so it leaves at once and says why
        self.retired: dict[bytes, str] = {}
        #: the kernel's OOM-kill counts from now: a worker killed by SIGKILL is reported as the
        #: OOM killer's victim where the kernel says so
        self.oom = OomWatch()

    # -- queries --------------------------------------------------------------------------
    def present(self) -> list[WorkerInfo]:
        return [w for w in self.by_index if w is not None]

    def all_joined(self) -> bool:
        return len(self.joined) == self.workers and all(self.by_index)

    def all_ready(self) -> bool:
        return len(self.ready) == self.workers

    def barrier_done(self) -> bool:
        return len(self.dones) == self.workers

    def all_results(self) -> bool:
        return len(self.results) == self.workers

    def all_parts(self) -> bool:
        return self.checkpoint_ss is not None and len(self.parts) == self.workers

    def worker_of_pid(self, pid: int) -> WorkerInfo | None:
        return next((w for w in self.present() if w.pid == pid), None)

    def also_lost(self, now: float, exited: set[int]) -> set[int]:
        """Indices of the workers whose process has exited (``exited``: pids) or that are silent by now."""
        return {w.index for w in self.present() if w.pid in exited or now - w.last_seen > self.worker_timeout}

    # -- transitions the master asks for ----------------------------------------------------
    def sent_to(self) -> list[list[int]] | None:
        """Whom each worker sent a batch in the barrier just closed (``Done.to``, in worker
        order): the workers wait only for those (the 2-hop protocol, ``worker.py``). None (wait
        for every peer) unless every DONE of it is in and says."""
        if len(self.dones) != self.workers or any(d.to is None for d in self.dones.values()):
            return None
        return [self.dones[i].to for i in range(self.workers)]  # type: ignore[misc]

    def begin(self, superstep: int, aggregates: dict[str, Any], broadcasts: dict[str, Any], wall: float) -> list[Send]:
        """Open the barrier of ``superstep``: BEGIN to every worker."""
        msg = wire.Begin(superstep, self.gen, aggregates, broadcasts, sent_to=self.sent_to())
        self.begun_wall, self.current, self.dones, self.arrivals = wall, superstep, {}, {}
        return [Send(w.identity, msg, w) for w in self.present()]

    def start_checkpoint(self, superstep: int) -> list[Send]:
        """Every worker writes its part of the state after this barrier."""
        self.checkpoint_ss, self.parts = superstep, {}
        msg = wire.Checkpoint(superstep, sent_to=self.sent_to())
        return [Send(w.identity, msg, w) for w in self.present()]

    def take_parts(self) -> tuple[int, list[wire.Checkpointed]]:
        """The finished checkpoint's superstep and parts in worker order; none is pending after."""
        assert self.checkpoint_ss is not None
        ss, parts = self.checkpoint_ss, [h for _, h in sorted(self.parts.items())]
        self.checkpoint_ss, self.parts = None, {}
        return ss, parts

    def finish(self) -> list[Send]:
        self.phase = Phase.FINISHING
        self.results = {}  # a finish cut short by a lost worker is asked again after the rollback
        msg = wire.Finish(sent_to=self.sent_to())
        return [Send(w.identity, msg, w) for w in self.present()]

    def bye(self) -> list[Send]:
        self.phase = Phase.DONE
        return [Send(w.identity, wire.Bye(), w) for w in self.present()]

    def lose(self, indices: set[int] | int) -> list[WorkerInfo]:
        """Free the slots of the lost workers ``indices`` for replacements: one new generation
        starts and a checkpoint still being written is abandoned (it belongs to the run being
        rolled back). Returns the workers retired (to be told ABORT, and killed if local)."""
        gone = []
        for index in sorted({indices} if isinstance(indices, int) else indices):
            dead = self.by_index[index]
            if dead is None:
                continue
            self.joined.pop(dead.identity, None)
            self.by_index[index] = None
            self.retired[dead.identity] = f"{dead.describe()} was lost at superstep {self.current} and replaced"
            gone.append(dead)
        self.gen += 1
        self.checkpoint_ss, self.parts = None, {}
        self.dones = {}  # of the abandoned run (its sent_to would mean nothing to the restored workers)
        self.ready = set()
        self.phase = Phase.REJOINING
        return gone

    def abort(self, reason: str) -> list[Send]:
        return [Send(w.identity, wire.Abort(reason), w) for w in self.present()]

    # -- events ---------------------------------------------------------------------------
    def handle(self, event: Event) -> list[Instruction]:
        if isinstance(event, Arrived):
            return self._arrived(event)
        if isinstance(event, Beat):
            return self._beat(event)
        if isinstance(event, Tick):
            return self._tick(event)
        return self._exited(event)

    def _arrived(self, ev: Arrived) -> list[Instruction]:
        return self.arrived(ev.identity, ev.header, ev.now, ev.wall)

    def arrived(self, identity: bytes, header: dict[str, Any], now: float, wall: float) -> list[Instruction]:
        """``handle(Arrived(...))`` without building the event: the master's path for every DONE."""
        if header.get("kind") == Kind.HELLO:
            return self._hello(Arrived(identity, header, now, wall))
        w = self.joined.get(identity)
        if w is None:
            if identity in self.retired:
                return self._refuse_retired(identity)
            self.drops.drop("sender", f"message from unknown identity {identity[:40]!r}")
            return []
        if header.get("job") != self.job_id:
            self.drops.drop("job", f"message for job {header.get('job')!r} from {w.describe()}")
            return []
        if now - w.last_seen > self.silent_after and self.phase in _HEARD:
            self._silence(w, now)
        w.last_seen = now
        try:
            msg = wire.decode(header)
        except ProtocolError as exc:
            self.drops.drop(exc.kind, f"{exc.detail} from {w.describe()}")
            return []
        if isinstance(msg, wire.Done):  # (first: N of them every superstep)
            if msg.ss == self.current and self.phase is Phase.RUNNING:
                self.dones[w.index] = msg
                self.arrivals[w.index] = wall - self.begun_wall
            else:
                self.drops.drop("kind", f"unexpected {header.get('kind')} from {w.describe()} in phase {self.phase.value}")
        elif isinstance(msg, wire.Ready) and msg.gen == self.gen:
            self.ready.add(w.index)
        elif isinstance(msg, wire.Checkpointed):
            if self.checkpoint_ss is not None and msg.ss == self.checkpoint_ss:
                msg.src = w.index
                self.parts[w.index] = msg
            else:  # a part of a checkpoint abandoned by a rollback
                log.debug("ignoring the checkpoint part of superstep %s from %s", msg.ss, w.describe())
        elif isinstance(msg, wire.Result) and self.phase is Phase.FINISHING:
            self.results[w.index] = msg
        elif isinstance(msg, wire.Error):
            return [Fail(self._worker_error(w, msg))]
        elif not isinstance(msg, wire.Heartbeat):
            self.drops.drop("kind", f"unexpected {header.get('kind')} from {w.describe()} in phase {self.phase.value}")
        return []

    def _refuse_retired(self, identity: bytes) -> list[Instruction]:
        """A worker that was lost and replaced is back: ABORT it, once (it must not rejoin)."""
        why = self.retired.pop(identity)
        self.drops.counts["retired"] = self.drops.counts.get("retired", 0) + 1
        log.warning("%s, and is back: told to leave", why)
        return [Send(identity, wire.Abort(f"{why}; it must not rejoin"))]

    def _hello(self, ev: Arrived) -> list[Instruction]:
        identity, h = ev.identity, ev.header
        if identity in self.joined:  # a resent HELLO: alive, waiting for the others (no heartbeats before WELCOME)
            self.joined[identity].last_seen = ev.now
            return []
        host = str(h.get("host", "?"))
        # version and job first, on the raw header: a worker of another version may speak another HELLO
        if h.get("version") != __version__:
            reason = f"worker runs mariana {h.get('version')!r} but the master runs {__version__!r}"
        elif self.token is not None and not hmac.compare_digest(str(h.get("token") or ""), self.token):
            reason = "no valid job token: this master admits only the workers it started"
        elif h.get("want_job") not in (None, self.job_name):
            reason = f"this master runs job {self.job_name!r}, the worker was started for {h.get('want_job')!r}"
        elif self.phase not in (Phase.JOINING, Phase.REJOINING) or self.all_joined():
            # a spare: leave it unanswered; it resends HELLO and takes over if a worker is lost
            if identity not in self.spares:
                self.spares.add(identity)
                log.info("a spare worker from host %s is waiting (the job has its %d workers)", host, self.workers)
            return []
        else:
            try:
                hello = wire.Hello.from_wire(h)
            except ProtocolError as exc:
                self.drops.drop("header", f"HELLO: {exc.detail}")
                return []
            free = self.by_index.index(None) if None in self.by_index else len(self.by_index)
            w = WorkerInfo(free, identity, host, hello.pid, hello.data, hello.key, last_seen=ev.now)
            self.joined[identity] = w
            self.spares.discard(identity)
            if free == len(self.by_index):
                self.by_index.append(w)
            else:
                self.by_index[free] = w
            log.info("%s joined from %s (%d of %d)", w.describe(), w.data, len(self.joined), self.workers)
            return []
        log.warning("refused a worker from host %s: %s", host, reason)
        self.drops.counts["refused"] = self.drops.counts.get("refused", 0) + 1
        return [Send(identity, wire.Refuse(reason))]

    def group_by_host(self) -> None:
        """Once every worker has joined, before any WELCOME: number the workers host by host (in
        join order within a host), so that consecutive workers share a host where they can.
        Layouts that follow worker order (``exchange=hier``'s chain) then cross each host
        boundary once; nothing else depends on which process got which number."""
        first: dict[str, int] = {}  # host -> where it first appears in join order
        for w in self.by_index:
            if w is not None:
                first.setdefault(host_key(w.data), len(first))
        order = sorted(self.by_index, key=lambda w: (first[host_key(w.data)], w.index) if w else (len(first), 0))
        for i, w in enumerate(order):
            if w is not None:
                w.index = i
        self.by_index = order

    def _worker_error(self, w: WorkerInfo, h: wire.Error) -> MarianaError:
        if h.where == "input":  # bad input found while loading (a malformed line of a split): the user's
            return UsageError(h.message)
        if h.where == "compute":
            return VertexError(str(h.vertex), self.current if h.ss is None else h.ss,
                               f"{h.message} (on {w.describe()})", h.traceback)
        return MarianaError(f"{w.describe()} cannot run job {self.job_name}: {h.message}")

    def _silence(self, w: WorkerInfo, now: float) -> None:
        """``w`` is heard from again after a silence shorter than the timeout: recorded, with its
        host, for the run's trace (``silences``; the master writes them as ``silence`` events)."""
        gap = now - w.last_seen
        self.silences.append({"worker": w.index, "host": w.host, "pid": w.pid, "silent_s": round(gap, 3),
                              "superstep": self.current, "phase": self.phase.value})
        log.warning("%s was silent for %.1fs (timeout %gs): ridden through", w.describe(), gap, self.worker_timeout)

    def _beat(self, ev: Beat) -> list[Instruction]:
        """A worker's heartbeat socket: liveness, what it is doing, and our clock for its offset."""
        w = self.joined.get(ev.of)
        if w is None and ev.of in self.retired and ev.header.get("job") == self.job_id:
            return self._refuse_retired(ev.of)
        if w is None or ev.header.get("job") != self.job_id:
            self.drops.drop("sender", f"heartbeat from unknown identity {ev.identity[:40]!r}")
            return []
        if ev.now - w.last_seen > self.silent_after and self.phase in _HEARD:
            self._silence(w, ev.now)
        w.last_seen = ev.now
        try:
            hb = wire.Heartbeat.from_wire(ev.header)
        except ProtocolError as exc:
            self.drops.drop(exc.kind, exc.detail)
            return []
        if hb.state is not None:
            w.state = hb.state
        if isinstance(hb.t, float):  # echo it with our clock: the worker estimates its offset
            return [Send(ev.identity, wire.Heartbeat(t=ev.wall, echo=hb.t))]
        return []

    def _tick(self, ev: Tick) -> list[Instruction]:
        for w in self.present():
            if ev.now - w.last_seen > self.worker_timeout:
                return [Fail(WorkerLost(f"{w.describe()} stopped answering at superstep {self.current} "
                                        f"(no message for {ev.now - w.last_seen:.1f}s, timeout {self.worker_timeout:g}s)",
                                        w.index))]
        return list(self.beats(ev.now, ev.wall))

    def beats(self, now: float, wall: float) -> list[Send]:
        """Our heartbeats to every worker, if one is due (they keep this master alive there)."""
        if now < self._next_beat:
            return []
        self._next_beat = now + self.heartbeat_interval
        return [Send(self.heartbeat_prefix + w.identity, wire.Heartbeat(t=wall)) for w in self.present()]

    def _exited(self, ev: Exited) -> list[Instruction]:
        if self.phase is Phase.DONE:
            return []
        w = self.worker_of_pid(ev.pid)
        who = w.describe() if w else f"worker process {ev.pid}"
        how = self.oom.exit(ev.code, ev.pid)
        return [Fail(WorkerLost(f"{who} {how} at superstep {self.current}", w.index if w else None))]

    # -- diagnosis --------------------------------------------------------------------------
    def hang_report(self, after: float, wall: float) -> tuple[str, list[dict[str, Any]], dict[str, list], int | None]:
        """Who is missing from the barrier and what each waiting worker lacks: (report, missing,
        waiting, the worker to blame: one computing, else the first missing)."""
        missing, lines = [], []
        for w in self.present():
            if w.index in self.dones:
                continue
            st = w.state
            entry = {"worker": w.index, "host": w.host, "state": st.get("phase", "unknown"),
                     "for_s": round(wall - st.get("since", wall), 3)}
            if st.get("vertex"):
                entry["vertex"] = st["vertex"]
            missing.append(entry)
            doing = f"computing vertex {st['vertex']!r}" if st.get("vertex") else st.get("phase", "silent")
            if st.get("phase") == "waiting":
                doing = f"waiting for the batches of peer(s) {st.get('peers', [])}"
            lines.append(f"{w.describe()}: {doing} for {entry['for_s']:.1f}s")
        waiting = {str(w.index): w.state.get("peers", []) for w in self.present() if w.state.get("phase") == "waiting"}
        report = (f"superstep {self.current} exceeded --superstep-timeout {after:g}s; not at the barrier: "
                  + "; ".join(lines))
        stuck = next((m["worker"] for m in missing if m["state"] == "computing"), missing[0]["worker"] if missing else None)
        return report, missing, waiting, stuck


def inbound_trace(dones: dict[int, wire.Done]) -> None:
    """Fill each worker's trace record of a superstep with what its peers sent it then
    (``messages_in``, ``bytes_in`` per peer, from their DONEs): a worker's DONE goes out before
    its peers' batches have arrived (the 2-hop protocol, ``worker.py``), so the sender's counts
    stand for the receiver's. The worker put its batch to itself in already. One pass over each
    sender's counts (the non-zero ones do the work), in the order the DONEs came."""
    traced = {i: d.trace for i, d in dones.items() if d.trace}
    if not traced:
        return
    m_in = {i: t.setdefault("messages_in", {}) for i, t in traced.items()}
    b_in = {i: t.setdefault("bytes_in", {}) for i, t in traced.items()}
    for p, peer in dones.items():
        src = str(p)
        for i, n in enumerate(peer.out_messages):
            if n and i != p and i in m_in:
                m_in[i][src] = n
        for i, n in enumerate(peer.stats.get("bytes_out", ())):
            if n and i != p and i in b_in:
                b_in[i][src] = n
