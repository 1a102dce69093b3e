"""Sweeps across hosts: segments placed on ``mariana worker --sweep`` hosts instead of local children.

A ``mariana worker`` serves one job and exits, so placement is per segment. The sweep binds a
small queue (a ROUTER; ``HostQueue``) that worker hosts join with a DEALER (``serve_sweep``).
For each segment the driver reserves idle hosts, starts the segment's process on its own
machine as before, and that process runs the job's *master* (``spawn=False``, bound on the
queue's host, CURVE with the sweep's keys as ``mariana master --keys``); once it is bound, the
queue sends its endpoint to the reserved hosts, each of which runs an ordinary cluster worker
against it (the ``mariana worker --master ENDPOINT`` entry, in a process forked from the host's
zygote, or spawned) and reports when that process ends. The stop at
a rung is the master's (master compute), so the pipe protocol between the driver and a segment
is unchanged and decisions stay a function of recorded values.

Liveness: an idle host beats every ``BEAT_S`` and a busy one names its segment in its beats;
the queue answers every beat, so a host also knows the sweep is alive. A host silent for
``host_timeout`` (or one that never took what it was sent) is dropped and its segment is lost:
the driver ends it and runs it again, from its trial's newest checkpoint, on another host.
A host whose worker exits 2 (it refused the job, its key was refused) cannot serve any segment:
it says so and exits 2, and its segment is lost the same way.

Messages are one JSON frame each way (no pickle): ``{"op": "ready"}``, ``{"op": "busy",
"segment": S}``, ``{"op": "done", "segment": S, "code": N}`` from a host; ``{"op": "run",
"segment": S, "master": ENDPOINT, "job": NAME, "token": T}``, ``{"op": "ok"}`` and ``{"op": "end"}``
to it. ``T`` is the segment's job token, made by its master's process: the master admits only
workers that present it (in their environment, never on a command line), so a process on the
segment master's host that was not sent the token cannot join a plaintext loopback segment.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..cluster.entry import WorkerSpec
from ..cluster.worker import EXIT_MASTER_LOST
from ..comm import is_loopback, parse_endpoint
from ..comm.jsonchannel import JsonDealer, JsonRouter
from ..comm.zmqcomm import ConnectWatch, Transport
from ..engine.threads import thread_vars
from ..errors import MarianaError, UsageError

log = logging.getLogger(__name__)

__all__ = ["Remote", "HostQueue", "serve_sweep", "SweepGone", "BEAT_S", "read_sweep_file"]

#: how often a host says it is alive (and the sweep answers)
BEAT_S = 0.5
#: a host that has heard nothing from its sweep this long takes the sweep for gone
SWEEP_SILENCE_S = 30.0
#: the largest queue message (JSON of a few fields)
MAX_MESSAGE = 1 << 16


@dataclass
class Remote:
    """How a sweep places its segments on joined hosts (``mariana sweep --listen``).

    ``listen``: the queue's endpoint (``tcp://HOST:PORT``, port 0 or * for a free one); each
    segment's master binds a free port on the same host. ``keys``: a ``mariana keys init`` DIR,
    CURVE on the queue and on every segment's master (required off loopback unless ``insecure``).
    ``host_timeout``: a host silent this long loses its segment (also each segment master's
    worker timeout). ``master_file``: where the queue's endpoint (and public key) is written.
    """

    listen: str
    keys: str | None = None
    insecure: bool = False
    host_timeout: float = 10.0
    master_file: str | None = None
    security: Any = field(default=None, repr=False)

    def check(self) -> None:
        """Refuse what ``mariana master`` refuses (before anything is written): an unauthenticated
        bind off loopback, a wildcard address the hosts cannot connect back to, bad keys."""
        host, _ = parse_endpoint(self.listen)
        if host in ("0.0.0.0", "*", "::", "[::]"):
            raise UsageError(f"--listen {self.listen}: give the address the worker hosts reach (each segment's master "
                             "binds a port on it and the hosts connect there)")
        if not self.host_timeout > 2 * BEAT_S:
            raise UsageError(f"--worker-timeout must be > {2 * BEAT_S:g}s, got {self.host_timeout:g}")
        if self.keys:
            from ..comm.security import Security

            self.security = Security.for_master(self.keys)
        elif not is_loopback(host):
            if not self.insecure:
                raise UsageError(f"{self.listen} is not loopback: a reachable sweep needs CURVE keys (--keys DIR, from "
                                 "`mariana keys init DIR`), or --insecure on a network you trust")
            log.warning("INSECURE: the sweep at %s accepts any worker host and sends everything in plaintext", self.listen)

    def segment_spec(self) -> dict[str, Any]:
        """What a segment's process needs to run the master of its job (JSON, for a fresh interpreter too)."""
        host, _ = parse_endpoint(self.listen)
        return {"bind": f"tcp://{host}:0", "keys": self.keys, "host_timeout": self.host_timeout}


@dataclass
class Host:
    """A joined worker host as the queue sees it."""

    ident: bytes
    name: str
    seen: float
    order: int
    state: str = "idle"  # idle, reserved (for a segment not bound yet), assigned (sent), busy (took it)
    segment: str | None = None
    since: float = 0.0


class HostQueue:
    """The sweep's side: the hosts that joined, which are idle, and which segment each serves."""

    def __init__(self, remote: Remote, note: Callable[[str], None] | None = None) -> None:
        if remote.security is None:
            remote.check()  # the Python API's callers too: no plaintext queue off loopback unless insecure
        self.remote = remote
        self.note = note or (lambda text: log.info("%s", text))
        self.transport = Transport(MAX_MESSAGE, remote.security)
        self.channel = JsonRouter(self.transport, remote.listen)
        self.endpoint = self.channel.endpoint
        self.hosts: dict[bytes, Host] = {}
        self.lost: dict[str, str] = {}  # segment -> why (taken by the driver with ``take_lost``)
        #: segment -> (why, when it counts as lost): its worker ended badly while its master ran on;
        #: a trial's own error ends the master first (then ``release`` forgets it), a worker that
        #: could not even join (a host refusing the job, a broken install) leaves the master waiting
        self.suspect: dict[str, tuple[str, float]] = {}
        self.joined = 0
        self.malformed = 0
        self.dropped: set[bytes] = set()
        if remote.master_file:
            info: dict[str, Any] = {"endpoint": self.endpoint, "sweep": True}
            if remote.security is not None:
                info["server_key"] = remote.security.public.decode()
            with open(remote.master_file, "w") as f:
                json.dump(info, f)

    def hint(self) -> str:
        """The command a worker host runs to join."""
        if self.remote.security is not None:
            where = self.remote.master_file or "FILE"
            return f"mariana worker --master-file {where} --key {os.path.join(self.remote.keys or 'DIR', 'NAME.key_secret')}"
        return f"mariana worker --sweep {self.endpoint}"

    # -- what the driver asks --------------------------------------------------------------------
    def alive(self) -> list[Host]:
        return sorted(self.hosts.values(), key=lambda h: h.order)

    def idle(self) -> list[Host]:
        return [h for h in self.alive() if h.state == "idle"]

    def reserve(self, segment: str, n: int) -> list[bytes] | None:
        """``n`` idle hosts for ``segment`` (the longest joined first), or None while fewer are idle."""
        free = self.idle()
        if len(free) < n:
            return None
        for h in free[:n]:
            h.state, h.segment, h.since = "reserved", segment, time.monotonic()
        return [h.ident for h in free[:n]]

    def assign(self, segment: str, master: str, job: str, token: str | None = None) -> None:
        """Send the bound master of ``segment`` (and its job token) to the hosts reserved for it."""
        for h in self.alive():
            if h.segment == segment and h.state == "reserved":
                h.state, h.since = "assigned", time.monotonic()
                self._send(h, {"op": "run", "segment": segment, "master": master, "job": job, "token": token})

    def release(self, segment: str) -> None:
        """``segment`` ended before its hosts took it: hosts still only reserved are idle again
        (hosts that were sent it come back by themselves when their worker process ends)."""
        self.suspect.pop(segment, None)
        for h in self.hosts.values():
            if h.segment == segment and h.state == "reserved":
                h.state, h.segment = "idle", None

    def take_lost(self) -> dict[str, str]:
        lost, self.lost = self.lost, {}
        return lost

    def end(self) -> None:
        """The sweep is over: every host exits (0)."""
        for h in list(self.hosts.values()):
            self._send(h, {"op": "end"})

    def close(self) -> None:
        self.channel.close()  # the hosts' "end" leaves before the context goes
        self.transport.close()

    # -- the socket ---------------------------------------------------------------------------
    def wait(self, fds: list[int], timeout_s: float) -> list[int]:
        """Wait for a segment's pipe or a host message (handled here); the pipes that are readable."""
        message, ready = self.channel.wait(fds, timeout_s)
        if message:
            self.receive()
        self.check()
        return ready

    def receive(self) -> None:
        now = time.monotonic()
        for ident, msg in self.channel.receive():
            try:
                if msg is None:
                    raise TypeError("not a JSON object")
                op = msg["op"]
                segment = msg.get("segment")
                if not isinstance(op, str) or not (segment is None or isinstance(segment, str)):
                    raise TypeError(op)
            except (ValueError, KeyError, TypeError):
                self.malformed += 1
                if self.malformed <= 3:
                    log.warning("sweep queue: a malformed message from %r dropped", ident[:40])
                continue
            h = self.hosts.get(ident)
            if h is None:
                if ident in self.dropped:
                    self._send_to(ident, {"op": "end"})  # its segment runs elsewhere: it must not come back
                    continue
                # a new host, or one still serving a segment of this sweep's previous process (--resume):
                # it is busy until it says its worker ended
                self.joined += 1
                name = str(msg.get("name") or ident.decode(errors="replace").rpartition(":")[0])[:200]
                h = self.hosts[ident] = Host(ident, name, now, self.joined)
                if op == "busy":
                    h.state, h.segment = "busy", segment
                self.note(f"host {h.name} joined the sweep ({len(self.hosts)} host(s))")
            h.seen = now
            if op == "busy" and h.state == "assigned" and segment == h.segment:
                h.state = "busy"
            elif op == "done" and segment == h.segment and h.state in ("assigned", "busy"):
                h.state, h.segment = "idle", None
                code = msg.get("code")
                if code != 0 and segment is not None:
                    why = f"the worker on host {h.name} ended with {_exit_text(code)}"
                    self.suspect[segment] = (why, now + self.remote.host_timeout)
            self._send(h, {"op": "ok"})

    def check(self) -> None:
        """Drop hosts silent for ``host_timeout`` and hosts that never took what they were sent;
        their segments are lost."""
        now, limit = time.monotonic(), self.remote.host_timeout
        for segment, (why, when) in list(self.suspect.items()):
            if now > when:
                del self.suspect[segment]
                self.lost[segment] = why
        for h in list(self.hosts.values()):
            why = None
            if now - h.seen > limit:
                why = f"host {h.name} silent for {now - h.seen:.1f}s"
            elif h.state == "assigned" and now - h.since > limit:
                why = f"host {h.name} did not take segment {h.segment} within {limit:g}s"
            if why is None:
                continue
            del self.hosts[h.ident]
            self.dropped.add(h.ident)
            self._send_to(h.ident, {"op": "end"})
            self.note(f"{why}: dropped ({len(self.hosts)} host(s) left)")
            if h.segment is not None:
                self.lost[h.segment] = why

    def _send(self, h: Host, msg: dict[str, Any]) -> None:
        self._send_to(h.ident, msg)

    def _send_to(self, ident: bytes, msg: dict[str, Any]) -> None:
        self.channel.send(ident, msg)  # False when gone: its silence drops it


# -- the worker host's side ----------------------------------------------------------------------
class SweepGone(MarianaError):
    """The sweep never answered, or went silent: exit 3, as a worker whose master is lost."""

    exit_code = EXIT_MASTER_LOST


def read_sweep_file(path: str) -> dict[str, Any]:
    """A master file (``mariana master`` or ``mariana sweep --master-file``), checked."""
    try:
        with open(path) as f:
            info = json.load(f)
        if not isinstance(info, dict) or not isinstance(info.get("endpoint"), str):
            raise ValueError("no endpoint in it")
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read master file {path}: {exc}") from None
    return info


def _exit_text(code: Any) -> str:
    if isinstance(code, int) and code < 0:
        return f"signal {-code}"
    return f"exit code {code}"


def _die_with_parent() -> None:
    from ..cluster.forking import set_pdeathsig

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the host process, which ends it
    set_pdeathsig()


class _Forked:
    """A segment's worker forked by the zygote: the part of ``subprocess.Popen`` the host loop uses."""

    def __init__(self, pid: int, zygote: _Zygote) -> None:
        self.pid, self.zygote = pid, zygote
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.zygote.ended()
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def wait(self, timeout: float | None = None) -> int:
        deadline = time.monotonic() + (timeout if timeout is not None else 1e9)
        while (code := self.poll()) is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("segment worker", timeout or 0)
            time.sleep(0.01)
        return code


class _Zygote:
    """A child forked from the host before it makes its zmq context, that forks each segment's
    worker in turn (``cluster.forking``: every module imported, the job's too after its first
    segment), so a segment's worker starts in well under 0.1 s instead of a fresh interpreter's
    ~0.5-1 s. It dies with the host, and so do the workers it forks."""

    def __init__(self, thread_vars: dict[str, str]) -> None:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        cmd_r, cmd_w = os.pipe()
        rep_r, rep_w = os.pipe()
        from ..cluster.forking import fork_holding_interrupts

        pid = fork_holding_interrupts()
        if pid == 0:  # the zygote: never returns
            code = 0
            try:
                os.close(cmd_w)
                os.close(rep_r)
                _die_with_parent()
                _zygote_loop(cmd_r, rep_w, thread_vars)
            except BaseException:  # noqa: BLE001 - the host sees its pipe close and starts workers itself
                code = 1
            finally:
                os._exit(code)
        os.close(cmd_r)
        os.close(rep_w)
        os.set_blocking(rep_r, False)
        self.pid, self.cmd, self.rep = pid, cmd_w, rep_r
        self.buf = b""
        self.lines: list[dict[str, Any]] = []
        self.dead = False

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.rep, 4096)
            except BlockingIOError:
                return
            if not chunk:
                self.dead = True
                return
            self.buf += chunk
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                self.lines.append(json.loads(line))

    def start(self, spec: WorkerSpec) -> _Forked | None:
        """Fork a worker that runs ``spec``; None if the zygote is gone (the host spawns instead)."""
        try:
            os.write(self.cmd, spec.to_json().encode() + b"\n")
        except OSError:
            self.dead = True
            return None
        deadline = time.monotonic() + 30
        while not self.lines and not self.dead and time.monotonic() < deadline:
            time.sleep(0.002)
            self._read()
        if not self.lines or "pid" not in self.lines[0]:
            self.dead = True
            return None
        return _Forked(int(self.lines.pop(0)["pid"]), self)

    def ended(self) -> int | None:
        """The running worker's exit code once it has ended (-9 if the zygote died meanwhile)."""
        self._read()
        if self.lines and "code" in self.lines[0]:
            return int(self.lines.pop(0)["code"])
        return -signal.SIGKILL if self.dead else None

    def close(self) -> None:
        os.close(self.cmd)  # its end of file: the zygote exits
        os.close(self.rep)
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass


def _zygote_loop(cmd_fd: int, rep_fd: int, thread_vars: dict[str, str]) -> None:
    """Read a ``WorkerSpec`` per line; fork a worker for it; say its pid, then its exit code."""
    from ..cluster.forking import fork_workers
    from ..jobs.launch import build_graph
    from ..jobs.registry import get_job

    with os.fdopen(cmd_fd, "rb") as cmd:
        for line in cmd:
            spec = WorkerSpec.from_json(line)
            if spec.job:
                try:
                    get_job(spec.job)  # its module, imported once here, is there in every later fork
                except MarianaError:
                    pass  # the worker says why
            [worker] = fork_workers(1, thread_vars, build_graph, die_with_parent=True)
            os.write(rep_fd, json.dumps({"pid": worker.pid}).encode() + b"\n")
            worker.start(spec)
            os.write(rep_fd, json.dumps({"code": worker.wait()}).encode() + b"\n")


def serve_sweep(spec: WorkerSpec, sweep: str) -> int:
    """Join the sweep at ``sweep`` and serve segment after segment: each an ordinary ``mariana
    worker`` process (``spec`` with the segment's master) started here, until the sweep ends (0).

    ``spec.master`` is ignored; its keys, host, timeouts and job apply to every segment. A sweep
    that stays silent for ``SWEEP_SILENCE_S`` (or never answers within ``spec.connect_timeout``)
    is gone: exit 3, as a worker whose master is lost."""
    import dataclasses

    from ..cluster.forking import fork_is_safe

    security = spec.security()  # refuses a plaintext data socket off loopback as `mariana worker` does
    threads = thread_vars(1)
    zygote = _Zygote(threads) if fork_is_safe() is None else None  # before this process makes a zmq context
    transport = Transport(MAX_MESSAGE, security)
    name = f"{socket.gethostname()}:{os.getpid()}"
    # reconnecting every 0.25 s at most: a host started before its sweep joins right after the bind
    channel = JsonDealer(transport, sweep, f"{name}:{secrets.token_hex(4)}".encode())
    watch = ConnectWatch(channel.sock, handshakes=True) if security is not None else None
    env = {**os.environ, **threads, **spec.env()}
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    child: subprocess.Popen[bytes] | _Forked | None = None
    segment: str | None = None
    started = time.monotonic()
    heard: float | None = None
    next_beat = 0.0
    served = 0

    send = channel.send
    log.info("joining the sweep at %s as %s", sweep, name)
    try:
        while True:
            now = time.monotonic()
            if child is not None and child.poll() is not None:
                code = child.returncode
                (log.info if code == 0 else log.warning)("segment %s: its worker process ended (%s)", segment,
                                                          _exit_text(code))
                send({"op": "done", "segment": segment, "code": code})
                if code == 2:  # a usage error of this host (refused job or key, bad flags): every segment would fail
                    raise UsageError(f"this host cannot serve the sweep: its worker for segment {segment} exited with "
                                     "code 2 (the reason is above)")
                child, segment, next_beat = None, None, now + BEAT_S
            if now >= next_beat:
                send({"op": "busy", "segment": segment} if segment else {"op": "ready", "name": name})
                next_beat = now + BEAT_S
            for msg in channel.receive(0.05 if child is not None else BEAT_S / 2):  # 50 ms while serving: its end is reported at once
                if heard is None:
                    log.info("joined the sweep at %s", sweep)
                heard = time.monotonic()
                op = msg.get("op")
                if op == "end":
                    log.info("the sweep is over (%d segment(s) served here)", served)
                    return 0
                if op == "run" and child is None and isinstance(msg.get("master"), str):
                    segment, served = str(msg.get("segment")), served + 1
                    mine = dataclasses.replace(spec, master=msg["master"], job=spec.job or msg.get("job"),
                                               token=str(msg["token"]) if msg.get("token") else spec.token)
                    log.info("segment %s: serving the master at %s", segment, mine.master)
                    child = zygote.start(mine) if zygote is not None and not zygote.dead else None
                    if child is None:
                        child = subprocess.Popen([sys.executable, "-m", "mariana", *mine.argv()], env={**env, **mine.env()},
                                                 stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
                    send({"op": "busy", "segment": segment})
                    next_beat = time.monotonic() + BEAT_S
            if watch is not None and (why := watch.failed()):
                raise UsageError(f"cannot join the sweep at {sweep}: {why.replace('master', 'sweep')}")
            now = time.monotonic()
            if heard is None and now - started > spec.connect_timeout:
                raise SweepGone(f"no sweep answered at {sweep} within {spec.connect_timeout:g}s (--connect-timeout)")
            if heard is not None and now - heard > SWEEP_SILENCE_S:
                raise SweepGone(f"the sweep at {sweep} has been silent for {SWEEP_SILENCE_S:g}s: it is gone")
    finally:
        if child is not None and child.poll() is None:
            try:
                child.wait(timeout=5)  # a worker told the job is over exits by itself
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        if zygote is not None:
            zygote.close()
        if watch is not None:
            watch.close()
        transport.close()
