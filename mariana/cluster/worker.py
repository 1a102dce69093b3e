"""Cluster worker: owns one partition, talks to the master (control) and to peers (data).

Life of a worker: HELLO to the master (resent with backoff until answered, so workers may start
before the master) -> WELCOME (index, job name and config, peers) -> build the job's graph through
the ``build`` callback it was given (the CLI passes ``jobs.launch.build_graph``) and keep only
its own vertices -> READY -> for each BEGIN: deliver the previous superstep's batches, compute,
DONE, the last part of its BATCH to every peer it has messages for -> FINISH: RESULT -> BYE.

The superstep protocol has two hops in sequence (BEGIN -> DONE), not three (BEGIN -> BATCH ->
DONE): a worker no longer waits for its peers' batches before its DONE, since all the DONE
carries (active count, messages sent per peer, aggregate partials) is known once compute ends.
It even sends the DONE before the last part of each batch (parts streamed during compute went
before), so the master closes the barrier while they travel. The peers' batches of superstep
``s`` are received meanwhile and delivered (``_settle``) when the next control message that
depends on them arrives, before acting on it: BEGIN ``s+1`` (before computing), CHECKPOINT of the
barrier of ``s`` (before the state is copied: the part holds every message of ``s``), FINISH
(before the results). They are sure to come: every peer sends them right after its DONE, and
the master sends none of those messages before every DONE is in; a peer that dies in between is
lost to the master's liveness checks like any other, and then a ROLLBACK (or ABORT) ends the
wait and the batches are discarded (the inbox is restored from the checkpoint).

An empty batch is not sent (unless the shared-memory layer has notes for that peer): the DONE
says whom the worker sent one (``to``), and those three messages carry every worker's list
(``sent_to``), so a worker waits only for the peers that sent it something. While it waits, its
heartbeat state is ``waiting`` with the peers still missing: the next barrier's hang report
names them.

A heartbeat thread (its own socket) tells the master this worker is alive even during a long
compute, and ends the process if the master goes silent for ``worker_timeout`` seconds.
Malformed or unexpected messages are dropped and counted per kind, never fatal. Every message
is a typed record of ``messages/wire.py``.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections import deque
from typing import Any, Callable


from .. import __version__
from .joining import host_keys, with_host
from .workerstate import Compute, Inbox, Leave, Report, RollBack, WorkerControl, WriteCheckpoint
from ..errors import MarianaError, ProtocolError, UsageError, VertexError
from ..messages import codec, wire
from ..messages.message import Message
from ..messages.wire import DropCounter
from ..storage import RunDir
from ..storage.checkpoint import Checkpoints
from ..engine.checkpointing import BackgroundWriter, capture, write_worker
from ..comm.shm import Shm, sweep_stale
from ..engine.graph import Graph
from ..memory import TraceMemory, trim_heap
from ..engine.superstep import Begin, Partition, gc_paused
from ..engine.tracing import Capture
from ..comm import (Again, ConnectWatch, drain, is_loopback, parse_endpoint, poller, recv, release_sent, send, send_frames,
                   transport_for, unreached)

log = logging.getLogger(__name__)

__all__ = ["Worker", "GraphBuilder", "EXIT_MASTER_LOST"]

EXIT_MASTER_LOST = 3
#: The job token a local launch gives its workers in their environment (never on a command
#: line, which any local user can read): a plaintext master on loopback admits only them.
TOKEN_VAR = "MARIANA_JOB_TOKEN"


#: ``build(job_name, config, workers, placement) -> Graph``: the job's whole graph, as the
#: master's (the worker keeps only its own partition).
GraphBuilder = Callable[[str, dict[str, Any], int, Any], Graph]


class _Outgoing:
    """What this worker sent in the current superstep: bytes and parts per peer, encode and send time."""

    def __init__(self, workers: int) -> None:
        self.encode_s = self.send_s = 0.0
        self.bytes = [0] * workers
        self.parts = [0] * workers
        self.shm = [0] * workers  # of ``bytes``, what went through shared memory
        self.zero_copy = [0] * workers  # of those, from send buffers (descriptors, no copy)


class _Pending:
    """A superstep whose DONE is sent and whose peers' batches are still to be delivered."""

    def __init__(self, ss: int, own: list[Message]) -> None:
        self.ss = ss
        self.own = own  # the batch this worker sent itself
        self.senders: list[int] | None = None  # the peers that sent a batch (None: not known yet)


class _MasterLost(Exception):
    """The heartbeat thread found the master silent for ``worker_timeout`` seconds."""


class _Interrupt(Exception):
    """A ROLLBACK or ABORT that arrived while this worker waited for its peers' batches."""

    def __init__(self, msg: wire.Wire) -> None:
        super().__init__(msg.KIND.name)
        self.msg = msg


class Worker:
    """One worker process of the cluster runtime."""

    def __init__(self, master: str, build: GraphBuilder, host: str = "127.0.0.1", connect_timeout: float = 60.0,
                 max_message_bytes: int = 1 << 30, security: Any = None, job: str | None = None,
                 token: str | None = None, first_contact: float | None = None, advertise: str | None = None) -> None:
        self.master = master
        self.build = build
        self.host = host
        self.connect_timeout = connect_timeout
        self.security = security
        self.want_job = job
        self.token = token  # a local launch's job token (entry.WorkerSpec.token)
        #: seconds for the master's address to accept a connection at all; None: ``connect_timeout``
        self.first_contact = first_contact
        #: the address peers are told to reach the data socket at (``--advertise``); None: where it is bound
        self.advertise = advertise
        self.data_endpoint = ""  # as advertised in HELLO
        self.transport = transport_for(master, max_message_bytes, security)
        self.identity = f"w-{uuid.uuid4().hex[:12]}".encode()
        self.hostname, self.pid = socket.gethostname(), os.getpid()
        self.drops = DropCounter(f"worker {self.identity.decode()}")
        self.index = -1
        self.control = WorkerControl(self.drops)  # job, generation, superstep: what each message means
        self.inbox = Inbox()  # the peers' batches, assembled per superstep
        self._pending: _Pending | None = None  # DONE sent, the peers' batches not delivered yet
        self._queue: deque[dict[str, Any]] = deque()  # control messages received, not yet acted on
        self._wait_s = 0.0  # waited for the peers' batches since the last DONE (its trace's wait_s)
        self._prev_send_s = 0.0  # sending the last superstep's last parts, after its DONE
        self._memory = TraceMemory()  # its process's resident memory, for its trace records
        self._out = _Outgoing(0)
        self._stop = threading.Event()
        self._hb_thread: threading.Thread | None = None
        self._hb_wake: tuple[int, int] | None = None  # a pipe: a byte in it ends the heartbeat thread's wait
        self.clock_offset = 0.0  # master clock - this clock, from the heartbeat exchange
        self._best_rtt = float("inf")
        self.state: dict[str, Any] = {"phase": "starting"}  # what heartbeats report (hang diagnosis)
        self._writer = BackgroundWriter()  # this worker's checkpoint parts, written while supersteps go on
        self._dropped_before: dict[str, int] = {}
        self.shm: Shm | None = None
        # set when the job is known (WELCOME) and the partition built; declared here, never grown later
        self.partition: Partition | None = None
        self.welcome: wire.Welcome | None = None  # the job as the master described it on joining
        self.peers: dict[int, Any] = {}
        self.peer_endpoints: list[str] = []
        self.peer_keys: list[str | None] = []
        self.peer_ids: dict[bytes, int] = {}
        self.run_url: str | None = None
        self.background = True
        #: set by the heartbeat thread when the master went silent; the loops leave with EXIT_MASTER_LOST
        self.master_lost = False
        #: called (from the heartbeat thread) when the master is lost: a worker process exits even
        #: in the middle of a long compute (``entry.run_worker``); None in-process (tests)
        self.on_master_lost: Callable[[], None] | None = None
        #: called with the WELCOME before the job is built: a worker process sizes its BLAS thread
        #: pools by the workers on its host (``entry.run_worker``); None in-process (tests)
        self.on_welcome: Callable[[wire.Welcome], None] | None = None

    # the control state's, under the names the I/O code uses
    @property
    def job_id(self) -> str:
        return self.control.job_id

    @property
    def gen(self) -> int:
        return self.control.gen

    @property
    def current(self) -> int:
        return self.control.current

    def leave(self) -> None:
        """Make ``run()`` return soon from another thread (an in-process worker whose job ended)."""
        self._stop.set()
        self._wake_heartbeat()

    def _wake_heartbeat(self) -> None:
        wake = self._hb_wake
        if wake is not None:
            try:
                os.write(wake[1], b"x")
            except OSError:  # closed: the thread has ended
                pass

    def first_contact_s(self) -> float:
        """How long this worker waits for the master's address to accept a connection."""
        return self.connect_timeout if self.first_contact is None else min(self.first_contact, self.connect_timeout)

    # -- setup ------------------------------------------------------------------------------
    def run(self) -> int:
        """Run until the job ends; returns the process exit code."""
        t = self.transport
        try:
            self.ctl = t.dealer(None, self.identity)  # connected by _join, once its handshakes are watched
            # a peer's replacement connects with the lost peer's identity (job/index) while the lost
            # one's connection may still be open (its host cut off: no FIN, no RST); without
            # handover the router would keep the dead connection and drop the replacement's batches
            self.data, data_ep = t.router(t.data_bind(self.host), mandatory=False, handover=True)
            if self.advertise and not t.inproc:
                data_ep = with_host(data_ep, self.advertise)
            self.data_endpoint = data_ep
            welcome = self._join(data_ep)
            if welcome is None:
                return 2
            return self._serve(welcome)
        finally:
            self._stop.set()
            self._wake_heartbeat()
            self._writer.close()  # a part being written is finished (never left half-written by us)
            if self._hb_thread is not None:
                self._hb_thread.join(timeout=5)
            if self._hb_wake is not None:
                for fd in self._hb_wake:
                    os.close(fd)
                self._hb_wake = None
            if self.shm is not None:
                self.shm.close()  # unlinks segments no peer acknowledged yet
            t.close()

    def _join(self, data_ep: str) -> wire.Welcome | None:
        hello = wire.Hello(version=__version__, data=data_ep, pid=self.pid, host=self.hostname,
                           want_job=self.want_job, token=self.token,
                           key=self.security.public.decode() if self.security is not None else None).to_wire()
        # the watch first: a handshake can fail as soon as the socket connects (a watch made after
        # it missed that under load, and the worker said no master answered); so can a connection
        # be made before a watch made after it would see it
        secure, first = self.security is not None, self.first_contact
        watch = ConnectWatch(self.ctl, handshakes=secure) if secure or first is not None else None
        self.transport.connect(self.ctl, self.master)
        start = time.monotonic()
        contact = None if first is None else start + min(first, self.connect_timeout)
        try:
            return self._join_loop(hello, start + self.connect_timeout, watch, contact)
        finally:
            if watch is not None:
                watch.close()

    def _join_loop(self, hello: dict[str, Any], deadline: float, watch: ConnectWatch | None,
                   contact: float | None) -> wire.Welcome | None:
        """HELLO until the master answers; None (logged) if it refuses or stays silent until
        ``deadline``. ``contact``: by then something must have accepted a TCP connection at the
        master's address, else ``UsageError`` (no master there: a wrong address, or none started)."""
        wait, refused = 0.1, None
        while time.monotonic() < deadline and not self._stop.is_set():
            # never block in send: a DEALER whose handshakes keep failing has no peer to queue for
            # (a check for POLLOUT first raced with the peer going away: the send then hung)
            try:
                send(self.ctl, hello, nowait=True)
            except Again:
                pass
            if watch is not None and (why := watch.failed()) is not None:
                if why.startswith("the master refused"):  # its allow-list is fixed: retrying cannot help
                    log.error("%s at %s", why, self.master)
                    return None
                refused = why
            if self.ctl.poll(int(wait * 1000)):
                try:
                    _, header, _ = recv(self.ctl, router=False)
                except ProtocolError as exc:
                    self.drops.drop(exc.kind, exc.detail)
                    continue
                except Again:
                    continue
                try:
                    msg = wire.decode(header)
                except ProtocolError as exc:
                    self.drops.drop(exc.kind, exc.detail)
                    continue
                if isinstance(msg, wire.Welcome) and isinstance(header.get("job"), str):
                    self.control.job_id = header["job"]
                    return msg
                if isinstance(msg, wire.Refuse):
                    log.error("the master at %s refused this worker: %s", self.master, msg.reason)
                    return None
            wait = min(wait * 2, 2.0)
            if contact is not None and watch is not None and not watch.connected:
                watch.update()  # a connection made while it waited
                now = time.monotonic()
                if not watch.connected:
                    if now >= contact:
                        raise UsageError(f"no master at {self.master}: nothing there accepted a connection in "
                                         f"{self.first_contact_s():g}s of trying (is the master running, at this "
                                         f"address? --first-contact-timeout S waits longer)")
                    wait = min(wait, max(contact - now, 0.01))
            log.debug("waiting for the master at %s ...", self.master)
        if watch is not None and refused is None:  # a failure reported during the last wait
            refused = watch.failed()
        if refused is not None:
            log.error("gave up joining the master at %s after %.0fs: %s", self.master, self.connect_timeout, refused)
        else:
            log.error("no master answered at %s within %.0fs", self.master, self.connect_timeout)
        return None

    def _build(self, welcome: wire.Welcome) -> Partition:
        n = welcome.workers
        graph = self.build(welcome.job_name, welcome.config, n, welcome.placement)
        return Partition(graph, graph.place(n), self.index)

    def _build_partition(self) -> int | None:
        """Build this worker's partition from the job (its input, for a graph job); an exit code
        if the job cannot be built here (reported to the master)."""
        welcome = self.welcome
        assert welcome is not None
        try:
            self.partition = self._build(welcome)
        except Exception as exc:  # noqa: BLE001 - reported to the master, then we exit
            msg = str(exc) if isinstance(exc, MarianaError) else f"{type(exc).__name__}: {exc}"
            log.error("worker %d cannot run job %s: %s", self.index, welcome.job_name, msg)
            self._send_ctl(wire.Error("setup", msg))
            return 2
        return None

    def _equip(self) -> None:
        """What the partition uses from this worker: send buffers, traces, streaming, capture."""
        welcome, part = self.welcome, self.partition
        assert welcome is not None and part is not None
        if self.shm is not None and self.shm.pool is not None:
            part.send_buffers = self.shm.pool.buffer  # Context.send_buffer: shared memory
        part.trace = welcome.trace
        part.hosts = host_keys(self.peer_endpoints)  # Context.host_of
        part.stream = self._stream  # (a queue with a message to combine waits: Partition.flush)
        if welcome.capture and self.run_url:
            part.capture = Capture(welcome.capture, RunDir(self.run_url), welcome.capture_limit)

    def _serve(self, welcome: wire.Welcome) -> int:
        self.index, n = welcome.index, welcome.workers
        self.drops.who = f"worker {self.index}"
        if self.on_welcome is not None:
            self.on_welcome(welcome)
        # heartbeats start before the build: a job that loads a large graph must not look dead
        self._hb_wake = os.pipe()
        self._hb_thread = threading.Thread(target=self._heartbeat, name="mariana-heartbeat", daemon=True,
                                           args=(welcome.heartbeat_interval, welcome.worker_timeout))
        self._hb_thread.start()
        self.state = {"phase": "building", "since": time.time()}
        self.welcome = welcome
        code = self._build_partition()
        if code is not None:
            return code
        self.peer_keys = welcome.peer_keys
        if self.security is not None:
            self.security.allow([k for k in self.peer_keys if k])  # only the job's workers may send us batches
        self.control.gen = welcome.gen
        if welcome.shm and self.shm is None:  # (once a process) leftovers of workers that ended without cleaning up
            sweep_stale()
        self.shm = Shm(self.job_id, self.index, self.gen, welcome.shm, welcome.shm_cap_mb << 20, welcome.shm_min_kb << 10)
        self.run_url = welcome.run_dir
        self.background = welcome.checkpoint_background
        code = self._reach_peers(self._connect_peers(welcome.peers))
        if code is not None:
            return code
        if self.shm.pool is not None:
            self.shm.pool.peers = set(self.peers)
        self._equip()
        if welcome.restore is not None:
            code = self._restore(welcome.restore)
            if code is not None:
                return code
        self.state = {"phase": "idle", "since": time.time()}
        self._send_ctl(wire.Ready(self.gen))
        log.info("worker %d of %d ready: %d vertices", self.index, n, len(self.partition.order))
        poll = poller(self.ctl, self.data)
        self._wait_poll = poller(self.data, self.ctl)  # while waiting for peers' batches (one, not one per superstep)
        while True:
            if self.master_lost:
                return EXIT_MASTER_LOST
            if self._stop.is_set():
                return 1
            events = dict(poll.poll(0 if self._queue else 5 if self._writer.pending is not None else 200))
            self._checkpointed()
            if self.data in events:
                self._drain_data()
            if self.ctl in events:
                self._queue.extend(self._recv_ctl())
            while self._queue:  # in order of arrival; _settle may queue more while it waits
                header = self._queue.popleft()
                try:
                    code = self._control(header)
                except _Interrupt as intr:  # a ROLLBACK or ABORT arrived while waiting for the peers' batches
                    code = self._command(intr.msg)
                except _MasterLost:
                    return EXIT_MASTER_LOST
                if code is not None:
                    return code

    def _recv_ctl(self) -> list[dict[str, Any]]:
        """Every control message waiting now (malformed ones dropped and counted)."""
        return [header for _, header, _ in drain(self.ctl, False, self.drops)]

    def _connect_peers(self, endpoints: list[str]) -> dict[int, ConnectWatch]:
        """(Re)connect a DEALER to every peer whose data endpoint is new or changed; a watch of
        each new connection over TCP (for ``_reach_peers``)."""
        my_id = f"{self.job_id}/{self.index}".encode()
        watches: dict[int, ConnectWatch] = {}
        for p, ep in enumerate(endpoints):
            if p == self.index or (p < len(self.peer_endpoints) and self.peer_endpoints[p] == ep and p in self.peers):
                continue
            old = self.peers.pop(p, None)
            if old is not None:
                old.close(linger=0)
                self.transport.sockets.remove(old)
            key = self.peer_keys[p].encode() if p < len(self.peer_keys) and self.peer_keys[p] else None
            sock = self.transport.dealer(None, my_id, server_key=key)
            if not self.transport.inproc:  # watched from before it connects: the connection may be quick
                watches[p] = ConnectWatch(sock)
            self.transport.connect(sock, ep)
            self.peers[p] = sock
        self.peer_endpoints = list(endpoints)
        self.peer_ids = {f"{self.job_id}/{p}".encode(): p for p in self.peers}
        return watches

    def _reach_peers(self, watches: dict[int, ConnectWatch]) -> int | None:
        """Wait (at most ``connect_timeout``) until every watched peer's data socket accepted this
        worker's connection; a peer that did not fails the join, reported to the master in one
        line naming both ends (exit code 2). Every peer's socket is bound before its HELLO, so
        only a wrong address or a blocked port keeps a connection from being made."""
        left = unreached(watches, self.connect_timeout, self._stop)
        if not left:
            return None
        first, *others = left
        more = f" (nor {len(others)} other peer(s))" if others else ""
        where = self.peer_endpoints[first]
        why = ("a loopback address reaches only its own host: is that worker on another one? (its --host)"
               if is_loopback(parse_endpoint(where)[0]) else "is that address on a route from this host, and the "
               "port open? (--host binds, --advertise tells peers another address)")
        msg = (f"worker {self.index} at {self.data_endpoint} cannot reach worker {first}'s data socket at "
               f"{where}{more} within {self.connect_timeout:g}s: {why}")
        log.error("%s", msg)
        self._send_ctl(wire.Error("setup", msg))
        return 2
    def _restore(self, superstep: int) -> int | None:
        """Load this worker's part of the checkpoint taken before ``superstep``."""
        try:
            part = Checkpoints(RunDir(self.run_url)).read(superstep, f"worker-{self.index}")
            self.partition.restore(part)
        except MarianaError as exc:
            log.error("worker %d cannot restore the checkpoint at superstep %d: %s", self.index, superstep, exc)
            self._send_ctl(wire.Error("restore", str(exc)))
            return 2
        self._after_restore(superstep)
        return None

    def _after_restore(self, superstep: int) -> None:
        """The partition holds the state before ``superstep``: what was in flight is forgotten."""
        self.control.restored(superstep)
        self.inbox.clear()
        self._pending = None  # the batches of the abandoned run: never delivered
        self._wait_s = self._prev_send_s = 0.0

    # -- control plane ----------------------------------------------------------------------
    def _send_ctl(self, msg: wire.Wire) -> None:
        if hasattr(msg, "src"):
            msg.src = self.index
        send(self.ctl, msg.to_wire(self.job_id))

    def _control(self, header: dict[str, Any]) -> int | None:
        msg = self.control.parse(header)
        return None if msg is None else self._command(msg)

    def _command(self, msg: wire.Wire) -> int | None:
        """Carry out what the control state says about ``msg``; an exit code ends the worker."""
        ins = self.control.command(msg)
        if isinstance(ins, (Compute, WriteCheckpoint, Report)) and self._pending is not None:
            assert isinstance(msg, (wire.Begin, wire.Checkpoint, wire.Finish))
            self._pending.senders = self._senders(msg.sent_to)  # whose batches _settle waits for
        if isinstance(ins, Compute):
            return self._superstep(ins.begin)
        if isinstance(ins, WriteCheckpoint):
            self._checkpoint(ins.superstep)
        elif isinstance(ins, RollBack):
            return self._roll_back(ins.rollback)
        elif isinstance(ins, Report):
            self._settle()  # the last superstep's messages are delivered before the results
            self._checkpointed(wait=True)
            values = {vid: v.result() for vid, v in self.partition.vertices.items()}
            self._drain_data()
            self._send_ctl(wire.Result(values, dropped=self.drops.counts))
        elif isinstance(ins, Leave):
            log.info("worker %d: %s", self.index, ins.why)
            return ins.code
        return None

    def _roll_back(self, msg: wire.Rollback) -> int | None:
        """Reconnect to the (possibly new) peers and load the checkpoint of ``msg.ss``; READY."""
        self.peer_keys = msg.peer_keys or self.peer_keys
        if self.security is not None:
            self.security.allow([k for k in self.peer_keys if k])
        code = self._reach_peers(self._connect_peers(msg.peers))
        if code is not None:
            return code
        if self.partition is not None:
            self.partition.hosts = host_keys(self.peer_endpoints)  # replacements may be elsewhere
        if self.shm is not None:
            self.shm.reset(self.gen)  # peers may be new processes: new arenas, new mappings
            if self.shm.pool is not None:
                self.shm.pool.renew(set(self.peers))  # the send buffers stay; offered again
        self._writer.settle(None, wait=True, quiet=True)  # a part of the abandoned generation: dropped
        if msg.ss == 0:  # no checkpoint yet: the partition is built again from the job's input
            code = self._rebuild()
        else:
            code = self._restore(msg.ss)
        if code is None:
            log.warning("worker %d rolled back to %s", self.index,
                        f"the checkpoint at superstep {msg.ss}" if msg.ss else "its input (superstep 0)")
            self._send_ctl(wire.Ready(self.gen))
        return code

    def _rebuild(self) -> int | None:
        """A fresh partition, as at the job's start (the old one let go first: it may hold a graph)."""
        self.partition = None
        trim_heap()
        code = self._build_partition()
        if code is not None:
            return code
        self._equip()
        self._after_restore(0)
        return None

    def _checkpoint(self, superstep: int) -> None:
        """Copy this worker's state now and write its part in the background; CHECKPOINTED is
        sent when it is written (``_checkpointed``), and the master commits once every part is in."""
        self._settle()  # the part holds every message of the superstep before it (the next inbox)
        self._checkpointed(wait=True)  # one in flight: the previous part first
        try:
            snap, params = capture(self.partition, copy=self.background)
        except MarianaError as exc:
            self._send_ctl(wire.Checkpointed(superstep, error=str(exc)))
            return
        checkpoints = Checkpoints(RunDir(self.run_url))
        self._writer.submit(superstep, lambda: write_worker(checkpoints, superstep, self.index, snap, params), None)
        if not self.background:
            self._checkpointed(wait=True)  # written before the next superstep changes the state

    def _checkpointed(self, wait: bool = False) -> None:
        """Tell the master about the part written in the background, once it is (or fails)."""
        done = self._writer.settle(None, wait=wait, quiet=True)
        if done is None:
            return
        superstep, outcome = done
        if isinstance(outcome, MarianaError):
            self._send_ctl(wire.Checkpointed(superstep, error=str(outcome)))
        else:
            self._send_ctl(wire.Checkpointed(superstep, parts=outcome))

    def _superstep(self, msg: wire.Begin) -> int | None:
        s = msg.ss
        start = time.time()
        self._settle()  # the batches of s-1 first: they are this superstep's inbox
        if release_sent():  # and what it sent them is let go before this superstep allocates
            trim_heap()  # (its large arrays are mappings of their own: they cannot reuse the holes)
        if self.shm is not None:
            self.shm.begin(s)
        self.state = {"phase": "computing", "ss": s, "since": time.time()}
        begin = Begin(s, msg.aggregates, msg.broadcasts)
        self._out = _Outgoing(self.partition.num_workers)
        try:
            batches, done = self.partition.compute(begin)
        except VertexError as exc:
            self._send_ctl(wire.Error("compute", exc.detail, vertex=exc.vertex_id, ss=exc.superstep,
                                      traceback=exc.traceback_text))
            return 1
        except UsageError as exc:  # bad input (a graph's malformed line): the master reports it as is
            self._send_ctl(wire.Error("input", str(exc), ss=s))
            return 2
        # the last parts are encoded (and counted) now and sent right after DONE: the master can
        # close the barrier while they travel (every peer waits for them before it computes
        # again); an empty one is not sent at all (DONE says whom this worker sent a batch, and
        # the master tells every worker whom to wait for in the next BEGIN, CHECKPOINT or FINISH)
        last = [(p, parts) for p in self.peers if (parts := self._encode_parts(p, batches[p], last=True, skip_empty=True))]
        out = self._out
        own = batches[self.index]
        self._pending = _Pending(s, own)  # delivered when the next BEGIN, CHECKPOINT or FINISH comes
        wait_s, self._wait_s = self._wait_s, 0.0
        trace = {}
        if self.partition.trace:
            dropped = {k: n - self._dropped_before.get(k, 0) for k, n in self.drops.counts.items()
                       if n > self._dropped_before.get(k, 0)}
            self._dropped_before = dict(self.drops.counts)
            # messages_in / bytes_in from the peers are filled in by the master from the peers'
            # DONEs (control.inbound_trace): this DONE goes out before their batches arrive
            trace = {**done.trace, "host": self.hostname, "pid": self.pid,
                     "start": start + self.clock_offset, "end": time.time() + self.clock_offset,
                     "encode_s": out.encode_s, "send_s": out.send_s, "wait_s": wait_s,
                     "prev_send_s": self._prev_send_s,
                     "clock_offset_s": self.clock_offset,
                     "bytes_out": {str(p): b for p, b in enumerate(out.bytes) if b},
                     "shm_bytes_out": {str(p): b for p, b in enumerate(out.shm) if b},
                     "shm_zero_copy_bytes": {str(p): b for p, b in enumerate(out.zero_copy) if b},
                     "send_buffer_reuse": self.shm.pool.reused if self.shm is not None and self.shm.pool else 0,
                     "parts_out": {str(p): n for p, n in enumerate(out.parts) if n > 1},
                     "bytes_in": {}, "messages_in": {str(self.index): len(own)} if own else {}, "dropped": dropped,
                     **self._memory()}  # (after encoding: it may raise the peak)
        self.state = {"phase": "barrier", "ss": s, "since": time.time()}
        self._send_ctl(wire.Done(s, done.partials, done.active, done.computed, done.sent, done.out_messages,
                                 done.compute_s, slowest=done.slowest, trace=trace,
                                 stats={"bytes_out": out.bytes, "dropped": dict(self.drops.counts)},
                                 to=[p for p, _ in last]))
        t_send = out.send_s
        for p, parts in last:
            for frames in parts:
                self._send(p, frames)
        self._prev_send_s = out.send_s - t_send  # in the next superstep's trace record
        return None

    def _senders(self, sent_to: list | None) -> list[int]:
        """The peers that sent this worker a batch of the pending superstep, from the master's
        ``sent_to`` (every worker's ``Done.to``); every peer when it does not say."""
        n = self.partition.num_workers if self.partition is not None else 0
        if not (isinstance(sent_to, list) and len(sent_to) == n and all(isinstance(t, list) for t in sent_to)):
            return sorted(self.peers)
        me = self.index
        return [p for p in sorted(self.peers) if me in sent_to[p]]

    def _waiting_state(self) -> None:
        """The heartbeat state while the pending superstep's batches are awaited: ``waiting``
        and the peers missing (a hang report names them), ``barrier`` once every one is in.
        (Whose batches come is known only from the next BEGIN, CHECKPOINT or FINISH: an empty
        batch is not sent; until then a worker is at the ``barrier``.)"""
        pending = self._pending
        if pending is None or pending.senders is None:
            return
        missing = self.inbox.missing(pending.ss, pending.senders)
        if missing:
            if self.state.get("phase") != "waiting":
                self.state = {"phase": "waiting", "ss": pending.ss, "since": time.time(), "peers": missing}
            else:
                self.state["peers"] = missing
        elif self.state.get("phase") == "waiting":
            self.state = {"phase": "barrier", "ss": pending.ss, "since": time.time()}

    def _settle(self) -> None:
        """Deliver the pending superstep: wait for every peer's batch of it, then build the next
        inbox. A ROLLBACK or ABORT ends the wait (``_Interrupt``); any other control message
        that arrives meanwhile is queued and acted on after this one."""
        pending = self._pending
        if pending is None:
            return
        s = pending.ss
        if pending.senders is None:
            pending.senders = sorted(self.peers)
        if pending.senders:  # (none when no peer sent a batch: an empty one is not sent)
            self._await(pending)
        inbound, _ = self.inbox.take(s)
        self._pending = None
        self.partition.deliver([pending.own if w == self.index else inbound.get(w, [])
                                for w in range(self.partition.num_workers)])

    def _await(self, pending: _Pending) -> None:
        """Until every batch of ``pending.senders`` is in: take data, queue control messages."""
        s, clock = pending.ss, time.perf_counter
        t_wait = clock()
        poll = self._wait_poll
        while self.inbox.missing(s, pending.senders):
            if self.master_lost:
                raise _MasterLost()
            if self._stop.is_set():  # told to leave (an in-process worker whose job ended)
                raise _Interrupt(wire.Abort("the worker was told to leave"))
            self._waiting_state()
            events = dict(poll.poll(100))
            if self.data in events:
                self._drain_data()
            if self.ctl in events:
                headers = self._recv_ctl()
                for i, h in enumerate(headers):
                    if not self.control.interrupts(h):
                        self._queue.append(h)
                        continue
                    intr = self.control.parse(h)
                    if intr is not None:  # what was queued before it belongs to the abandoned run
                        self._queue.clear()
                        self._queue.extend(headers[i + 1:])
                        raise _Interrupt(intr)
        self._wait_s += clock() - t_wait
        self._waiting_state()  # no longer waiting

    # -- data plane -------------------------------------------------------------------------
    def _stream(self, peer: int, msgs: list[Message]) -> None:
        """``Partition.stream``: a part of this superstep's batch for ``peer``, sent now, as a
        copy (``send_frames``: the vertex computes on, and zero-copy frames would stay alive)."""
        self._send_part(peer, msgs, last=False, copy=True)

    def _send_part(self, peer: int, msgs: list[Message], last: bool, copy: bool = False) -> None:
        for frames in self._encode_parts(peer, msgs, last):
            self._send(peer, frames, copy)

    def _encode_parts(self, peer: int, msgs: list[Message], last: bool, skip_empty: bool = False) -> list[list]:
        """``_encode_part`` of ``msgs`` in as many parts as keep each part's header within the
        receiver's container budget (``part_size``); [] where ``skip_empty`` skips it."""
        n = wire.part_size(msgs)
        with gc_paused():  # (a list per message, never in a cycle)
            if len(msgs) <= n:
                frames = self._encode_part(peer, msgs, last, skip_empty)
                return [] if frames is None else [frames]
            cuts = range(0, len(msgs), n)
            return [self._encode_part(peer, msgs[i:i + n], last and i == cuts[-1]) or [] for i in cuts]

    def _encode_part(self, peer: int, msgs: list[Message], last: bool, skip_empty: bool = False) -> list | None:
        """The frames of a part of this superstep's batch for ``peer`` (counted as sent); None
        with ``skip_empty`` when there is nothing to send: no messages, no part sent before, no
        shared-memory notes (the peer learns from the master that no batch comes)."""
        out, clock = self._out, time.perf_counter
        t0 = clock()
        shm, placed = self.shm, 0
        notes = shm.notes(peer) if shm is not None else None
        if skip_empty and not msgs and not out.parts[peer] and not notes:
            return None
        batch = wire.Batch(self.current, self.index, [[m.src, m.dst, m.tag, m.payload] for m in msgs], self.gen,
                           part=out.parts[peer], last=last)
        if shm is None:
            frames = codec.encode(batch.to_wire(self.job_id))
        else:
            if notes:
                batch.shm_notes = notes.to_wire()
            frames, placed = shm.encode(peer, batch.to_wire(self.job_id))
            out.zero_copy[peer] += shm.zero_copy
            placed += shm.zero_copy  # shm_bytes_out: copied + zero-copy bytes
            out.shm[peer] += placed
        out.bytes[peer] += codec.nbytes(frames) + placed  # shm bytes counted as sent
        out.parts[peer] += 1
        out.encode_s += clock() - t0
        return frames

    def _send(self, peer: int, frames: list, copy: bool = False) -> None:
        clock = time.perf_counter
        t0 = clock()
        send_frames(self.peers[peer], frames, copy=copy)
        self._out.send_s += clock() - t0

    def _drain_data(self) -> None:
        """Receive every waiting batch or part; keep the valid ones for their superstep, drop the rest."""
        with gc_paused():  # (decoding allocates a list per message, never in a cycle)
            self._drain_batches()

    def _drain_batches(self) -> None:
        for identity, header, size in drain(self.data, True, self.drops, self._resolve):
            peer = self.peer_ids.get(identity)
            if (self.shm is not None and peer is not None and header.get("job") == self.job_id
                    and header.get("src") == peer and header.get("gen", 0) == self.gen):
                try:
                    self.shm.notes_in(peer, header.get("shm_notes"))
                except ProtocolError as exc:
                    self.drops.malformed(identity, exc.kind, exc.detail)
                    continue
            try:
                # the pending superstep's batches and the next one's are valid (a peer is at most one ahead)
                base = self._pending.ss if self._pending is not None else self.current
                self.inbox.add(header, peer, self.job_id, base, self.gen, size)
            except ProtocolError as exc:
                self.drops.malformed(identity, exc.kind, exc.detail)

    def _resolve(self, identity: bytes | None, frames: Any) -> list:
        if self.shm is None:
            raise ProtocolError("shm", "empty frames without shared memory")
        return self.shm.resolve(self.peer_ids.get(identity), frames)

    # -- liveness ---------------------------------------------------------------------------
    def _heartbeat(self, interval: float, timeout: float) -> None:
        """Own socket, own thread: liveness both ways, clock offset, and what this worker is doing."""
        hb = self.transport.heartbeat(self.master, self.identity)
        assert self._hb_wake is not None
        wait = poller(hb, self._hb_wake[0])  # the worker's exit wakes the wait (it polled every 50 ms)
        last = next_send = time.monotonic()
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                if now >= next_send:  # one heartbeat per interval, whatever arrives in between
                    next_send = now + interval
                    state = dict(self.state)
                    if state.get("phase") == "computing" and self.partition is not None:
                        state["vertex"] = self.partition.ctx.vertex_id
                    send(hb, wire.Heartbeat(t=time.time(), src=self.index, state=state).to_wire(self.job_id))
                until = min(next_send, last + timeout)  # (a silent master is noticed on time)
                ready = dict(wait.poll(max(1, int((until - time.monotonic()) * 1000) + 1)))
                if hb in ready:
                    while hb.poll(0):
                        self._clock(hb.recv_multipart())
                    last = time.monotonic()
                if time.monotonic() - last > timeout:
                    log.error("worker %d: the master at %s has been silent for %.1fs; exiting",
                              self.index, self.master, time.monotonic() - last)
                    self.master_lost = True
                    if self.on_master_lost is not None:
                        self.on_master_lost()
                    return
        finally:
            hb.close(linger=0)

    def _clock(self, frames: list) -> None:
        """NTP-style offset from the master's reply to our heartbeat: keep the lowest-delay sample."""
        try:
            h = wire.Heartbeat.from_wire(codec.decode(frames))
        except ProtocolError:
            return
        now = time.time()
        echo, t_master = h.echo, h.t
        if isinstance(echo, float) and isinstance(t_master, float) and 0 <= now - echo < self._best_rtt:
            self._best_rtt = now - echo
            self.clock_offset = t_master - (echo + now) / 2
