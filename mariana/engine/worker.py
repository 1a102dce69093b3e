"""Cluster worker: owns one partition, talks to the master (control) and to peers (data).

Life of a worker: HELLO to the master (resent with backoff until answered, so workers may start
before the master) -> WELCOME (index, job name and config, peers) -> import the job by name and
build only its own vertices -> READY -> for each BEGIN: compute, send one BATCH to every peer,
wait for one BATCH from every peer, deliver, DONE -> FINISH: RESULT -> BYE.

A heartbeat thread (its own socket) tells the master this worker is alive even during a long
compute, and ends the process if the master goes silent for ``worker_timeout`` seconds.
Malformed or unexpected messages are dropped and counted per kind, never fatal.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from typing import Any

import zmq

from .. import __version__
from ..errors import MarianaError, ProtocolError, VertexError
from ..messages.kinds import Kind
from ..storage import RunDir
from ..storage.checkpoint import Checkpoints
from .checkpointing import BackgroundWriter, capture, write_worker
from .superstep import Begin, Partition
from ..messages import codec
from .tracing import Capture
from .transport import Again, Transport, drain, poller, recv, send, send_frames
from .vertex import Message

log = logging.getLogger(__name__)

__all__ = ["Worker", "DropCounter", "check_batch", "EXIT_MASTER_LOST"]

EXIT_MASTER_LOST = 3


class _Interrupt(Exception):
    """A ROLLBACK or ABORT that arrived while this worker waited for its peers' batches."""

    def __init__(self, header: dict[str, Any]) -> None:
        super().__init__(header.get("kind"))
        self.header = header


class DropCounter:
    """Counts dropped messages per kind (logging the first of each kind) and bans a peer that
    sends more than ``max_malformed`` malformed messages: it is ignored from then on."""

    def __init__(self, who: str, max_malformed: int = 1000) -> None:
        self.who = who
        self.counts: dict[str, int] = {}
        self.max_malformed = max_malformed
        self._malformed: dict[bytes, int] = {}

    def drop(self, kind: str, detail: str) -> None:
        n = self.counts.get(kind, 0)
        self.counts[kind] = n + 1
        if n == 0:
            log.warning("%s: dropped a malformed message (%s: %s); further drops of this kind are only counted",
                        self.who, kind, detail)

    def malformed(self, identity: bytes | None, kind: str, detail: str) -> None:
        """Count a malformed message from ``identity`` towards its ban."""
        self.drop(kind, f"{detail} (from {(identity or b'?')[:40]!r})")
        if identity is None:
            return
        n = self._malformed[identity] = self._malformed.get(identity, 0) + 1
        if n == self.max_malformed:
            log.error("%s: peer %r sent %d malformed messages: ignoring it from now on", self.who, identity[:40], n)

    def banned(self, identity: bytes) -> bool:
        """Whether ``identity`` is banned (its message is then dropped and counted as such)."""
        if self._malformed.get(identity, 0) < self.max_malformed:
            return False
        self.drop("banned", f"message from banned peer {identity[:40]!r}")
        return True

    @property
    def total(self) -> int:
        return sum(self.counts.values())


class Worker:
    """One worker process of the cluster runtime."""

    def __init__(self, master: str, host: str = "127.0.0.1", connect_timeout: float = 60.0,
                 max_message_bytes: int = 1 << 30, security: Any = None, job: str | None = None) -> None:
        self.master = master
        self.host = host
        self.connect_timeout = connect_timeout
        self.security = security
        self.want_job = job
        self.transport = Transport(max_message_bytes, security)
        self.identity = f"w-{uuid.uuid4().hex[:12]}".encode()
        self.drops = DropCounter(f"worker {self.identity.decode()}")
        self.index = -1
        self.current = -1
        self._inbound: dict[int, dict[int, list[Message]]] = {}
        self._inbound_bytes: dict[int, dict[int, int]] = {}
        self._stop = threading.Event()
        self._hb_thread: threading.Thread | None = None
        self.clock_offset = 0.0  # master clock - this clock, from the heartbeat exchange
        self._best_rtt = float("inf")
        self.state: dict[str, Any] = {"phase": "starting"}  # what heartbeats report (hang diagnosis)
        self._writer = BackgroundWriter()  # this worker's checkpoint parts, written while supersteps go on
        self._dropped_before: dict[str, int] = {}

    # -- setup ------------------------------------------------------------------------------
    def run(self) -> int:
        """Run until the job ends; returns the process exit code."""
        t = self.transport
        try:
            self.ctl = t.dealer(self.master, self.identity)
            self.data, data_ep = t.router(f"tcp://{self.host}:0", mandatory=False)
            welcome = self._join(data_ep)
            if welcome is None:
                return 2
            return self._serve(welcome)
        finally:
            self._stop.set()
            self._writer.close()  # a part being written is finished (never left half-written by us)
            if self._hb_thread is not None:
                self._hb_thread.join(timeout=5)
            t.close()

    def _join(self, data_ep: str) -> dict[str, Any] | None:
        hello = {"kind": Kind.HELLO, "version": __version__, "host": socket.gethostname(), "pid": os.getpid(),
                 "data": data_ep, "want_job": self.want_job,
                 "key": self.security.public.decode() if self.security is not None else None}
        deadline = time.monotonic() + self.connect_timeout
        wait = 0.1
        while time.monotonic() < deadline:
            send(self.ctl, hello)
            if self.ctl.poll(int(wait * 1000)):
                try:
                    _, header, _ = recv(self.ctl, router=False)
                except ProtocolError as exc:
                    self.drops.drop(exc.kind, exc.detail)
                    continue
                except Again:
                    continue
                if header["kind"] == Kind.WELCOME:
                    return header
                if header["kind"] == Kind.REFUSE:
                    log.error("the master at %s refused this worker: %s", self.master, header.get("reason"))
                    return None
            wait = min(wait * 2, 2.0)
            log.info("waiting for the master at %s ...", self.master)
        log.error("no master answered at %s within %.0fs", self.master, self.connect_timeout)
        return None

    def _build(self, welcome: dict[str, Any]) -> Partition:
        from ..jobs.registry import BuildContext, get_job, resolve_config

        job = get_job(welcome["job_name"])
        config = resolve_config(job, welcome["config"])
        n = welcome["workers"]
        graph = job.build(config, BuildContext(n, welcome["placement"]))
        return Partition(graph, graph.place(n), self.index)

    def _serve(self, welcome: dict[str, Any]) -> int:
        self.index, self.job_id, n = welcome["index"], welcome["job"], welcome["workers"]
        self.drops.who = f"worker {self.index}"
        # heartbeats start before the build: a job that loads a large graph must not look dead
        self._hb_thread = threading.Thread(target=self._heartbeat, name="mariana-heartbeat", daemon=True,
                                           args=(welcome["heartbeat_interval"], welcome["worker_timeout"]))
        self._hb_thread.start()
        self.state = {"phase": "building", "since": time.time()}
        try:
            self.partition = self._build(welcome)
        except Exception as exc:  # noqa: BLE001 - reported to the master, then we exit
            msg = str(exc) if isinstance(exc, MarianaError) else f"{type(exc).__name__}: {exc}"
            log.error("worker %d cannot run job %s: %s", self.index, welcome["job_name"], msg)
            self._send_ctl({"kind": Kind.ERROR, "where": "setup", "message": msg})
            return 2
        self.peers: dict[int, Any] = {}
        self.peer_endpoints: list[str] = []
        self.peer_keys: list[str | None] = welcome.get("peer_keys") or []
        if self.security is not None:
            self.security.allow([k for k in self.peer_keys if k])  # only the job's workers may send us batches
        self.gen = welcome.get("gen", 0)
        self.run_url = welcome.get("run_dir")
        self.background = bool((welcome.get("config") or {}).get("checkpoint_background", True))
        self._connect_peers(welcome["peers"])
        self.partition.trace = welcome.get("trace", True)
        if welcome.get("capture") and self.run_url:
            self.partition.capture = Capture(welcome["capture"], RunDir(self.run_url), welcome.get("capture_limit", 64 << 20))
        if welcome.get("restore") is not None:
            code = self._restore(welcome["restore"])
            if code is not None:
                return code
        self.state = {"phase": "idle", "since": time.time()}
        self._send_ctl({"kind": Kind.READY, "gen": self.gen})
        log.info("worker %d of %d ready: %d vertices", self.index, n, len(self.partition.order))
        poll = poller(self.ctl, self.data)
        while True:
            events = dict(poll.poll(5 if self._writer.pending is not None else 200))
            self._checkpointed()
            if self.data in events:
                self._drain_data()
            if self.ctl not in events:
                continue
            for header in self._recv_ctl():
                try:
                    code = self._control(header)
                except _Interrupt as intr:  # a ROLLBACK or ABORT arrived in the middle of a superstep
                    code = self._control(intr.header)
                if code is not None:
                    return code

    def _recv_ctl(self) -> list[dict[str, Any]]:
        """Every control message waiting now (malformed ones dropped and counted)."""
        return [header for _, header, _ in drain(self.ctl, False, self.drops)]

    def _connect_peers(self, endpoints: list[str]) -> None:
        """(Re)connect a DEALER to every peer whose data endpoint is new or changed."""
        my_id = f"{self.job_id}/{self.index}".encode()
        for p, ep in enumerate(endpoints):
            if p == self.index or (p < len(self.peer_endpoints) and self.peer_endpoints[p] == ep and p in self.peers):
                continue
            old = self.peers.pop(p, None)
            if old is not None:
                old.close(linger=0)
                self.transport.sockets.remove(old)
            key = self.peer_keys[p].encode() if p < len(self.peer_keys) and self.peer_keys[p] else None
            self.peers[p] = self.transport.dealer(ep, my_id, server_key=key)
        self.peer_endpoints = list(endpoints)
        self.peer_ids = {f"{self.job_id}/{p}".encode(): p for p in self.peers}

    def _restore(self, superstep: int) -> int | None:
        """Load this worker's part of the checkpoint taken before ``superstep``."""
        try:
            part = Checkpoints(RunDir(self.run_url)).read(superstep, f"worker-{self.index}")
            self.partition.restore(part)
        except MarianaError as exc:
            log.error("worker %d cannot restore the checkpoint at superstep %d: %s", self.index, superstep, exc)
            self._send_ctl({"kind": Kind.ERROR, "where": "restore", "message": str(exc)})
            return 2
        self.current = superstep - 1
        self._inbound.clear()
        self._inbound_bytes.clear()
        return None

    # -- control plane ----------------------------------------------------------------------
    def _send_ctl(self, header: dict[str, Any]) -> None:
        header.setdefault("job", getattr(self, "job_id", ""))
        header.setdefault("src", self.index)
        send(self.ctl, header)

    def _control(self, header: dict[str, Any]) -> int | None:
        kind = header["kind"]
        if header.get("job") != self.job_id:
            self.drops.drop("job", f"control message for job {header.get('job')!r}")
            return None
        if kind == Kind.BEGIN:
            if header.get("gen") != self.gen:
                self.drops.drop("generation", f"BEGIN of generation {header.get('gen')} while at {self.gen}")
                return None
            return self._superstep(header)
        if kind == Kind.CHECKPOINT:
            self._checkpoint(header["ss"])
            return None
        if kind == Kind.ROLLBACK:
            self.gen = header["gen"]
            self.peer_keys = header.get("peer_keys") or self.peer_keys
            if self.security is not None:
                self.security.allow([k for k in self.peer_keys if k])
            self._connect_peers(header["peers"])
            self._writer.settle(None, wait=True, quiet=True)  # a part of the abandoned generation: dropped
            code = self._restore(header["ss"])
            if code is None:
                log.warning("worker %d rolled back to the checkpoint at superstep %d", self.index, header["ss"])
                self._send_ctl({"kind": Kind.READY, "gen": self.gen})
            return code
        if kind == Kind.FINISH:
            self._checkpointed(wait=True)
            values = {vid: v.result() for vid, v in self.partition.vertices.items()}
            self._drain_data()
            self._send_ctl({"kind": Kind.RESULT, "values": values, "dropped": self.drops.counts})
            return None
        if kind == Kind.BYE:
            log.info("worker %d: job finished", self.index)
            return 0
        if kind == Kind.ABORT:
            log.info("worker %d: master aborted the job: %s", self.index, header.get("reason", ""))
            return 1
        if kind != Kind.HEARTBEAT:
            self.drops.drop("kind", f"unexpected control message kind {kind}")
        return None

    def _checkpoint(self, superstep: int) -> None:
        """Copy this worker's state now and write its part in the background; CHECKPOINTED is
        sent when it is written (``_checkpointed``), and the master commits once every part is in."""
        self._checkpointed(wait=True)  # one in flight: the previous part first
        try:
            snap, params = capture(self.partition, copy=self.background)
        except MarianaError as exc:
            self._send_ctl({"kind": Kind.CHECKPOINTED, "ss": superstep, "error": str(exc)})
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
        reply: dict[str, Any] = {"kind": Kind.CHECKPOINTED, "ss": superstep}
        if isinstance(outcome, MarianaError):
            reply["error"] = str(outcome)
        else:
            reply["parts"] = outcome
        self._send_ctl(reply)

    def _superstep(self, header: dict[str, Any]) -> int | None:
        s = header["ss"]
        if s != self.current + 1:
            self.drops.drop("superstep", f"BEGIN {s} while at {self.current}")
            return None
        self.current = s
        start = time.time()
        self.state = {"phase": "computing", "ss": s, "since": start}
        begin = Begin(s, header["aggregates"], header["broadcasts"])
        try:
            batches, done = self.partition.compute(begin)
        except VertexError as exc:
            self._send_ctl({"kind": Kind.ERROR, "where": "compute", "vertex": exc.vertex_id, "ss": exc.superstep,
                            "message": exc.detail, "traceback": exc.traceback_text})
            return 1
        encode_s = send_s = 0.0
        bytes_out = [0] * self.partition.num_workers
        clock = time.perf_counter
        for p, sock in self.peers.items():
            t0 = clock()
            frames = codec.encode({"kind": Kind.BATCH, "job": self.job_id, "gen": self.gen, "ss": s, "src": self.index,
                                   "msgs": [[m.src, m.dst, m.tag, m.payload] for m in batches[p]]})
            t1 = clock()
            bytes_out[p] = send_frames(sock, frames)
            encode_s += t1 - t0
            send_s += clock() - t1
        t_wait = clock()
        self.state = {"phase": "waiting", "ss": s, "since": time.time()}
        poll = poller(self.data, self.ctl)
        while len(self._inbound.get(s, ())) < len(self.peers):
            self.state["peers"] = sorted(set(self.peers) - set(self._inbound.get(s, ())))
            events = dict(poll.poll(100))
            if self.data in events:
                self._drain_data()
            if self.ctl in events:
                for h in self._recv_ctl():
                    if h.get("kind") in (Kind.ROLLBACK, Kind.ABORT) and h.get("job") == self.job_id:
                        raise _Interrupt(h)
                    if h.get("kind") != Kind.HEARTBEAT:
                        self.drops.drop("kind", f"control message {h.get('kind')} during superstep {s}")
        wait_s = clock() - t_wait
        inbound = self._inbound.pop(s, {})
        bytes_in = self._inbound_bytes.pop(s, {})
        self.partition.deliver([batches[w] if w == self.index else inbound[w] for w in range(len(batches))])
        self.state = {"phase": "barrier", "ss": s, "since": time.time()}
        trace = {}
        if self.partition.trace:
            dropped = {k: n - self._dropped_before.get(k, 0) for k, n in self.drops.counts.items()
                       if n > self._dropped_before.get(k, 0)}
            self._dropped_before = dict(self.drops.counts)
            trace = {**done.trace, "host": socket.gethostname(), "pid": os.getpid(),
                     "start": start + self.clock_offset, "end": time.time() + self.clock_offset,
                     "encode_s": encode_s, "send_s": send_s, "wait_s": wait_s, "clock_offset_s": self.clock_offset,
                     "bytes_out": {str(p): b for p, b in enumerate(bytes_out) if b},
                     "bytes_in": {str(p): b for p, b in bytes_in.items()},
                     "messages_in": {str(p): len(m) for p, m in inbound.items() if m}, "dropped": dropped}
            if batches[self.index]:
                trace["messages_in"][str(self.index)] = len(batches[self.index])
        self._send_ctl({"kind": Kind.DONE, "ss": s, "partials": done.partials, "active": done.active,
                        "computed": done.computed, "sent": done.sent, "out_messages": done.out_messages,
                        "compute_s": done.compute_s, "slowest": done.slowest, "trace": trace,
                        "stats": {"bytes_out": bytes_out, "dropped": dict(self.drops.counts)}})
        return None

    # -- data plane -------------------------------------------------------------------------
    def _drain_data(self) -> None:
        """Receive every waiting batch; keep the valid ones for their superstep, drop the rest."""
        for identity, header, size in drain(self.data, True, self.drops):
            try:
                msgs = check_batch(header, self.peer_ids.get(identity), self.job_id, self.current, self._inbound,
                                   self.gen)
            except ProtocolError as exc:
                self.drops.malformed(identity, exc.kind, exc.detail)
                continue
            self._inbound.setdefault(header["ss"], {})[header["src"]] = msgs
            self._inbound_bytes.setdefault(header["ss"], {})[header["src"]] = size

    # -- liveness ---------------------------------------------------------------------------
    def _heartbeat(self, interval: float, timeout: float) -> None:
        """Own socket, own thread: liveness both ways, clock offset, and what this worker is doing."""
        hb = self.transport.ctx.socket(zmq.DEALER)
        hb.linger = 0
        hb.setsockopt(zmq.IDENTITY, b"hb:" + self.identity)
        hb.setsockopt(zmq.MAXMSGSIZE, 1 << 20)
        if self.security is not None:
            self.security.client(hb, self.security.server_key)
        hb.connect(self.master)
        last = next_send = time.monotonic()
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                if now >= next_send:  # one heartbeat per interval, whatever arrives in between
                    next_send = now + interval
                    state = dict(self.state)
                    if state.get("phase") == "computing" and hasattr(self, "partition"):
                        state["vertex"] = self.partition.ctx.vertex_id
                    send(hb, {"kind": Kind.HEARTBEAT, "job": self.job_id, "src": self.index, "t": time.time(),
                              "state": state})
                if hb.poll(max(1, int((next_send - time.monotonic()) * 1000))):
                    while hb.poll(0):
                        self._clock(hb.recv_multipart())
                    last = time.monotonic()
                if time.monotonic() - last > timeout:
                    log.error("worker %d: the master at %s has been silent for %.1fs; exiting",
                              self.index, self.master, time.monotonic() - last)
                    os._exit(EXIT_MASTER_LOST)
        finally:
            hb.close(linger=0)

    def _clock(self, frames: list) -> None:
        """NTP-style offset from the master's reply to our heartbeat: keep the lowest-delay sample."""
        try:
            h = codec.decode(frames)
        except ProtocolError:
            return
        now = time.time()
        echo, t_master = h.get("echo"), h.get("t")
        if isinstance(echo, float) and isinstance(t_master, float) and 0 <= now - echo < self._best_rtt:
            self._best_rtt = now - echo
            self.clock_offset = t_master - (echo + now) / 2


def check_batch(header: dict[str, Any], peer: int | None, job_id: str, current: int,
                inbound: dict[int, dict[int, Any]], gen: int = 0) -> list[Message]:
    """The messages of a valid data-plane batch; ``ProtocolError(kind, detail)`` otherwise.

    ``peer`` is the index the sending socket's identity maps to (None: unknown identity);
    ``current`` the last superstep this worker began; batches for it and the next are valid.
    """
    if peer is None:
        raise ProtocolError("sender", "batch from an unknown identity")
    if header.get("kind") != Kind.BATCH:
        raise ProtocolError("kind", f"kind {header.get('kind')!r} on the data plane")
    if header.get("job") != job_id:
        raise ProtocolError("job", f"batch for job {header.get('job')!r}")
    if header.get("src") != peer:
        raise ProtocolError("sender", f"batch claims src {header.get('src')!r} from peer {peer}")
    if header.get("gen", 0) != gen:  # sent before a rollback
        raise ProtocolError("generation", f"batch of generation {header.get('gen')!r} while at {gen}")
    ss = header.get("ss")
    if not isinstance(ss, int) or isinstance(ss, bool) or ss not in (current, current + 1):
        raise ProtocolError("superstep", f"batch for superstep {ss!r} while at {current}")
    if peer in inbound.get(ss, {}):
        raise ProtocolError("duplicate", f"second batch from peer {peer} for superstep {ss}")
    msgs = _messages(header.get("msgs"))
    if msgs is None:
        raise ProtocolError("batch", f"malformed message list from peer {peer}")
    return msgs


def _messages(raw: Any) -> list[Message] | None:
    """Wire ``[[src, dst, tag, payload], ...]`` -> ``Message`` tuples, or None if malformed."""
    if not isinstance(raw, list):
        return None
    out = []
    for m in raw:
        if not (isinstance(m, list) and len(m) == 4 and isinstance(m[0], str) and isinstance(m[1], str)
                and (m[2] is None or isinstance(m[2], str))):
            return None
        out.append(Message(m[0], m[1], m[2], m[3]))
    return out
