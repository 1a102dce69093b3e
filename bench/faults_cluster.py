"""Faults at cluster scale on the emulated cluster (bench/netcluster.py), checked as Jepsen checks.

A seeded fault schedule (printed as JSON lines) is injected into a job whose master runs on host 0
and whose workers run one per host, with spare workers waiting on spare hosts (a spare's HELLO
goes unanswered until a worker is lost; then it takes the free slot). The faults:

- ``partition_short`` / ``partition_long``: a worker host's link down for a drawn time, shorter
  (ridden through) or longer (a lost worker) than the worker timeout;
- ``isolate_master``: the master's host cut off; the run directory is on this machine's disk,
  which a namespace still reaches, so the master is also paused (SIGSTOP) to stand for a master
  that lost its storage too; a second master is started on another host with
  ``--resume-if-possible`` at once, and the lease (a fencing token) decides between the two: the
  new one takes the run directory over once the old one's lease expired, and the old one, woken
  and healed, must stop without writing;
- ``kill_host``: a worker's host killed whole (its processes, /dev/shm and scratch), revived
  empty after the recovery;
- ``straggler``: a worker host's link throttled to 10 Mbit/s for a drawn time;
- ``kill9`` (a worker or the master) and ``sigstop_short`` / ``sigstop_long`` (a worker).

The runner plays the cluster manager: it keeps the spare pool full on free hosts, restarts a
master killed or cut off, and stops the spares once the job ended (as a job step's end does).

The checker: parameters (dnn-dp, cpu-cluster) or the output (PageRank) bit-identical to an
uninterrupted local run of the same config and worker count; every committed checkpoint valid
(each part's sha256), the parameter files whole, the job finished; no process left on any host;
every fault the job went through named with its host in the run's trace (a ``silence`` event for
a fault ridden through, a ``recovery`` event with the lost host, a new ``master`` event after a
failover, the throttled host among the stragglers of ``mariana trace summary``); a short fault
ridden through with no rollback; the old master of a failover fenced (exited on its own, never
committing).

    python bench/faults_cluster.py schedule --job dnn-dp --seed 3
    python bench/faults_cluster.py run --job pagerank --seed 3 --hosts 8
    python bench/faults_cluster.py soak --hosts 8 --schedules 50 --seed 1

Needs root and ``ip netns`` (netcluster.why_not says what is missing).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import netcluster as nc  # noqa: E402

#: seconds of silence after which the master (and a worker) counts the other side lost
WORKER_TIMEOUT = 3.0
HEARTBEAT = 0.2
#: the run directory's lease, short so that a failover does not wait out the default 120 s
LEASE_TTL_S = 3.0
SPARES = 2
#: a barrier open this long is a hang: the master names who is missing, then recovers
SUPERSTEP_TIMEOUT = 15.0
BASE_RATE = "1gbit"
SLOW_RATE = "10mbit"
#: a run that has not ended by then is a hang
RUN_TIMEOUT = 150.0
KINDS = ("partition_short", "partition_long", "isolate_master", "kill_host", "straggler", "kill9",
         "sigstop_short", "sigstop_long")
#: the kinds after which the job must have rolled back (a lost worker, or a new master)
LOSSES = ("partition_long", "isolate_master", "kill_host", "kill9", "sigstop_long")
#: the kinds the job must ride through without a rollback
RIDDEN = ("partition_short", "sigstop_short", "straggler")


@dataclass
class JobSpec:
    """A job of the fault tier: its worker count and config (``graph``/``out``: a graph job's files)."""

    name: str
    workers: int
    sets: Callable[[Path, Path, int], list[str]]  # (graph, out, length: a multiple of the default run)
    checkpoint_every: int
    graph: bool = False
    #: the soak's (and ``run``'s) length, a multiple of the tests' runs: long enough that a
    #: schedule's 3-6 faults, each with its duration and recovery, are all injected before the
    #: job ends (a PageRank superstep is far cheaper than a training step: more of them)
    soak_length: int = 3


def _dnn(graph: Path, out: Path, length: int) -> list[str]:
    return [f"steps={300 * length}", "batch_size=48", "exchange=linear", "checkpoint_every=10"]


def _cpu(graph: Path, out: Path, length: int) -> list[str]:
    return ['model=["dense:64:relu", "dense:32:relu", "dense:10"]', f"steps={300 * length}", "groups=2",
            "workers_per_group=2", "checkpoint_every=10"]


def _pagerank(graph: Path, out: Path, length: int) -> list[str]:
    return [f"graph={graph}", f"output={out}", f"iterations={400 * length}", "tol=0.0", "checkpoint_every=20"]


JOBS = {"dnn-dp": JobSpec("dnn-dp", 3, _dnn, 10), "cpu-cluster": JobSpec("cpu-cluster", 4, _cpu, 10),
        "pagerank": JobSpec("pagerank", 3, _pagerank, 20, graph=True, soak_length=8)}


@dataclass
class Fault:
    """One fault of a schedule: injected once the job reaches ``at`` (a share of its supersteps)."""

    n: int
    kind: str
    at: float
    duration_s: float = 0.0
    target: str = "worker"  # kill9: "worker" or "master"
    pick: float = 0.0  # which of the active hosts (sorted) is hit: int(pick * count)


def schedule(seed: int, job: str, faults: int | None = None, kinds: tuple[str, ...] = KINDS) -> list[Fault]:
    """The seeded schedule of ``job``: 3-6 faults (``faults``: that many) in order of injection."""
    rng = random.Random(f"{job}/{seed}")
    count = faults if faults is not None else rng.randint(3, 6)
    ats = sorted(rng.uniform(0.1, 0.8) for _ in range(count))
    out = []
    for n, at in enumerate(ats):
        kind = rng.choice(kinds)
        short, long = rng.uniform(0.2, 0.35) * WORKER_TIMEOUT, rng.uniform(1.6, 2.2) * WORKER_TIMEOUT
        duration = {"partition_short": short, "sigstop_short": short, "partition_long": long, "sigstop_long": long,
                    "isolate_master": rng.uniform(2.0, 2.5) * WORKER_TIMEOUT, "straggler": rng.uniform(2.0, 4.0)}
        target = ("master" if rng.random() < 0.25 else "worker") if kind == "kill9" else "worker"
        out.append(Fault(n, kind, round(at, 3), round(duration.get(kind, 0.0), 2), target, round(rng.random(), 3)))
    return out


# -- the run ----------------------------------------------------------------------------------
@dataclass
class Proc:
    role: str
    host: int
    popen: subprocess.Popen
    log: Path
    epoch: int
    stopped: bool = False  # stopped by the runner (a spare at the job's end, or of a failed-over master)
    lost: bool = False  # cut off or paused past the timeout: it must leave by itself once it returns


@dataclass
class Outcome:
    """What one schedule's run did and what the checker found (``failures`` empty: it passed)."""

    job: str
    seed: int
    faults: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    identical: bool = False
    wall_s: float = 0.0
    supersteps: int = 0
    masters: int = 1
    workdir: str = ""


def _mariana(*args: str) -> list[str]:
    return [sys.executable, "-m", "mariana", *args]


def _tail(path: Path, n: int = 2500) -> str:
    return path.read_bytes()[-n:].decode(errors="replace") if path.exists() else "(no log)"


def _jsonl(path: Path) -> list[dict[str, Any]]:
    """The whole lines of a JSON-lines file being appended to (a last line cut short is left out)."""
    try:
        text = path.read_text()
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


class Run:
    """One job through one schedule on a cluster (host 0 starts as the master's host)."""

    def __init__(self, cluster: nc.Cluster, spec: JobSpec, faults: list[Fault], where: Path, graph: Path,
                 total: int, log: Callable[[str], None] = print, length: int = 1) -> None:
        self.c, self.spec, self.faults, self.where = cluster, spec, faults, where
        self.graph, self.total, self.say = graph, total, log
        self.run_dir, self.out = where / "run", where / "out.txt"
        self.sets = spec.sets(graph, self.out, length)
        self.procs: list[Proc] = []
        self.epoch = 0
        self.master: Proc | None = None
        self.master_host = 0
        self.port = 7300
        self.dead: set[int] = set()
        self.cut: set[int] = set()
        self.env = {**os.environ, "MARIANA_LEASE_TTL_S": str(LEASE_TTL_S), "OMP_NUM_THREADS": "1",
                    "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        self.fenced: list[Proc] = []  # old masters of a failover, which must stop by themselves

    # -- processes ----------------------------------------------------------------------------
    def _start_master(self, host: int, resume: bool) -> Proc:
        self.epoch += 1
        h = self.c.hosts[host]
        self.port += 1
        master_file = self.where / f"master-{self.epoch}.json"
        log = self.where / f"master-{self.epoch}-h{host}.log"
        argv = _mariana("master", self.spec.name, "--bind", f"tcp://{h.address}:{self.port}", "--workers",
                        str(self.spec.workers), "--insecure", "--master-file", str(master_file), "--run-dir",
                        str(self.run_dir), "--worker-timeout", str(WORKER_TIMEOUT), "--heartbeat-interval",
                        str(HEARTBEAT), "--max-restarts", "100", "--rejoin-timeout", "30",
                        "--superstep-timeout", str(SUPERSTEP_TIMEOUT),
                        *(["--resume-if-possible"] if resume else []), *[a for s in self.sets for a in ("--set", s)])
        with open(log, "ab") as f:
            p = h.popen(argv, env=self.env, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        proc = Proc("master", host, p, log, self.epoch)
        self.procs.append(proc)
        self.master, self.master_host = proc, host
        return proc

    def _master_file(self) -> Path:
        return self.where / f"master-{self.epoch}.json"

    def _start_worker(self, host: int) -> Proc:
        h = self.c.hosts[host]
        log = self.where / f"worker-e{self.epoch}-h{host}-{len(self.procs)}.log"
        argv = _mariana("worker", "--master-file", str(self._master_file()), "--insecure", "--connect-timeout", "600",
                        "--first-contact-timeout", "60", "--threads", "1")
        with open(log, "ab") as f:
            p = h.popen(argv, env=self.env, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        proc = Proc("worker", host, p, log, self.epoch)
        self.procs.append(proc)
        return proc

    def _live(self, role: str | None = None, epoch: int | None = None) -> list[Proc]:
        return [p for p in self.procs if p.popen.poll() is None and (role is None or p.role == role)
                and (epoch is None or p.epoch == epoch)]

    def _free_hosts(self) -> list[int]:
        busy = {p.host for p in self._live()} | self.dead | self.cut | {self.master_host}
        return [i for i in range(1, len(self.c.hosts)) if i not in busy and self.c.hosts[i].alive] + \
            ([0] if 0 not in busy and self.c.hosts[0].alive else [])

    def _top_up(self) -> None:
        """The cluster manager's part: as many worker processes for the current master as the job
        has workers plus the spares, on free hosts (none while the master file is not written)."""
        if self.master is None or self.master.popen.poll() is not None or not self._master_file().exists():
            return
        want = self.spec.workers + SPARES - len(self._live("worker", self.epoch))
        for host in self._free_hosts()[:max(want, 0)]:
            self._start_worker(host)

    # -- what the run directory says ----------------------------------------------------------
    def events(self) -> list[dict[str, Any]]:
        return [e for e in _jsonl(self.run_dir / "trace" / "master.jsonl") if "event" in e]

    def superstep(self) -> int:
        lines = _jsonl(self.run_dir / "metrics.jsonl")
        return max((int(m.get("superstep", -1)) for m in lines), default=-1)

    def active(self) -> dict[int, int]:
        """{worker index: host index} of the current master's workers, from its trace events."""
        slots: dict[int, int] = {}
        for e in self.events():
            if e["event"] == "master":
                slots = {int(i): int(str(h).lstrip("h")) for i, h in (e.get("workers") or {}).items()}
            elif e["event"] == "recovery":
                slots.update({int(i): int(str(h).lstrip("h")) for i, h in (e.get("replaced_by") or {}).items()})
        return slots

    def job_pids(self) -> set[int]:
        """Every worker pid that ever held a slot (the others were spares)."""
        pids: set[int] = set()
        for e in self.events():
            pids |= {int(p) for p in (e.get("pids") or {}).values()}
            pids |= {int(p) for p in (e.get("replacement_pids") or {}).values()}
        return pids

    def _newest_checkpoint(self) -> int:
        cks = sorted((self.run_dir / "checkpoints").glob("ss-*/manifest.json"))
        return int(cks[-1].parent.name[3:]) if cks else -1

    # -- the loop -----------------------------------------------------------------------------
    def _poll(self, until: Callable[[], bool], timeout: float, what: str) -> bool:
        """Keep the pool full until ``until()`` or the job ended; False past ``timeout``."""
        deadline = time.monotonic() + timeout
        while not until():
            self._top_up()
            if self.master is not None and self.master.popen.poll() is not None:
                return until()
            if time.monotonic() > deadline:
                self.say(f"  timed out after {timeout:.0f}s waiting for {what}")
                return False
            time.sleep(0.05)
        return True

    def _ended(self) -> bool:
        return self.master is not None and self.master.popen.poll() is not None

    def go(self) -> Outcome:
        out = Outcome(self.spec.name, 0, workdir=str(self.where))
        t0 = time.monotonic()
        self.where.mkdir(parents=True, exist_ok=True)
        self._start_master(0, resume=False)
        try:
            if not self._poll(lambda: self.superstep() >= 0, 90, "the first superstep"):
                out.failures.append(f"the job did not start: {_tail(self.master.log)}")  # type: ignore[union-attr]
                return out
            for fault in self.faults:
                record = self._inject(fault)
                out.faults.append(record)
                if record.get("error"):
                    out.failures.append(f"fault {fault.n} ({fault.kind}): {record['error']}")
            self._poll(self._ended, RUN_TIMEOUT, "the job's end")
            out.wall_s = round(time.monotonic() - t0, 2)
            out.masters = self.epoch
            self._finish(out)
        finally:
            self._cleanup()
        return out

    def _wait_for(self, fraction: float) -> bool:
        """Until the job is ``fraction`` through and the current master is in its supersteps (a
        master joining or restoring its workers records no silences: a fault is injected into
        a running job)."""
        at = max(int(fraction * self.total), 1)
        return self._poll(lambda: (self.superstep() >= at and self._running()) or self._ended(), RUN_TIMEOUT,
                          f"superstep {at}")

    def _running(self) -> bool:
        """The current master has begun its supersteps: its ``master`` event (one per master
        started) is in the trace with a superstep record after it."""
        lines = _jsonl(self.run_dir / "trace" / "master.jsonl")
        starts = [i for i, r in enumerate(lines) if r.get("event") == "master"]
        return len(starts) >= self.epoch and any("event" not in r for r in lines[starts[-1] + 1:])

    def _victim(self, fault: Fault) -> int | None:
        hosts = sorted(set(self.active().values()) - self.dead - self.cut - {self.master_host})
        return hosts[int(fault.pick * len(hosts))] if hosts else None

    def _worker_on(self, host: int) -> Proc | None:
        live = [p for p in self._live("worker", self.epoch) if p.host == host]
        return live[0] if live else None

    def _inject(self, fault: Fault) -> dict[str, Any]:
        """Inject one fault once the job is far enough, wait for it to end and the job to pass the
        superstep it was at; the record says when, where and how long recovery took."""
        rec: dict[str, Any] = {**asdict(fault)}
        if fault.kind in ("isolate_master",) or fault.target == "master":
            # a failover resumes from a checkpoint: wait for one (else the new master starts afresh)
            self._poll(lambda: self._newest_checkpoint() >= 0 or self._ended(), 60, "a checkpoint")
        if not self._wait_for(fault.at) or self._ended():
            rec["injected"] = False
            return rec
        events_before = len(self.events())
        s0 = self.superstep()
        t0 = time.monotonic()
        rec.update(injected=True, superstep=s0, wall=round(time.time(), 3))
        kind = fault.kind
        if kind == "isolate_master" or (kind == "kill9" and fault.target == "master"):
            rec["host"] = self.master_host
            self._fail_over(fault, kind)
            rec["new_master_host"] = self.master_host
        else:
            host = self._victim(fault)
            if host is None:
                rec["injected"], rec["error"] = False, "no worker host to hit"
                return rec
            rec["host"] = host
            worker = self._worker_on(host)
            if kind in ("partition_short", "partition_long"):
                self.cut.add(host)
                self.c.partition(host)
                time.sleep(fault.duration_s)
                self.c.heal(host)
                self.cut.discard(host)
            elif kind == "straggler":
                self.c.shape(host, SLOW_RATE)
                time.sleep(fault.duration_s)
                self.c.shape(host, BASE_RATE)
            elif kind == "kill_host":
                self.dead.add(host)
                self.c.kill(host)
            elif worker is None:  # its worker left: the job is ending (BYE), else the runner lost track
                rec["injected"] = False
                if not self._poll(self._ended, 5.0, "the job's end"):
                    rec["error"] = f"no worker process on h{host}"
                return rec
            elif kind == "kill9":
                rec["pid"] = worker.popen.pid
                os.kill(worker.popen.pid, signal.SIGKILL)
            else:  # sigstop_short, sigstop_long
                rec["pid"] = worker.popen.pid
                os.kill(worker.popen.pid, signal.SIGSTOP)
                time.sleep(fault.duration_s)
                os.kill(worker.popen.pid, signal.SIGCONT)
            if worker is not None:
                rec["pid"] = worker.popen.pid
                worker.lost = kind in ("partition_long", "sigstop_long")
        # caught up: a loss's recovery (or a new master) is in the trace, then a superstep past s0
        loss = kind in LOSSES

        def caught_up() -> bool:
            evs = self.events()[events_before:]
            if loss and not any(e["event"] in ("recovery", "master") for e in evs):
                return False
            return self.superstep() > s0

        ok = self._poll(lambda: caught_up() or self._ended(), 60, f"fault {fault.n} ({kind}) to be recovered")
        rec["recover_s"] = round(time.monotonic() - t0, 3)
        rec["caught_up"] = caught_up()
        if not ok:
            rec["error"] = f"not recovered in 60 s: {_tail(self.master.log) if self.master else ''}"
        evs = self.events()[events_before:]
        rec["rolled_back"] = any(e["event"] == "recovery" for e in evs)
        if kind == "kill_host":
            self.c.revive(rec["host"])  # empty: it serves as a spare host again
            self.dead.discard(rec["host"])
        return rec

    def _fail_over(self, fault: Fault, kind: str) -> None:
        """The master lost (killed, or its host cut off and it paused): a second master resumes the
        run directory, from another host when the first one's host is cut off, as a cluster
        manager restarts a job; its workers and spares are started for it."""
        old = self.master
        assert old is not None
        old_host = self.master_host
        if kind == "kill9":
            os.kill(old.popen.pid, signal.SIGKILL)
            old.popen.wait()
            new_host = old_host  # restarted in place: the lease's holder is dead on the same host
        else:
            self.cut.add(old_host)
            self.c.partition(old_host)
            os.kill(old.popen.pid, signal.SIGSTOP)
            self.fenced.append(old)
        cut_at = time.monotonic()
        # the spares of the old master never held a slot: stop them (they would wait for it forever)
        held = self.job_pids()
        for p in self._live("worker", old.epoch):
            if p.popen.pid not in held:
                p.stopped = True
                p.popen.terminate()
                p.popen.wait()
        if kind != "kill9":
            new_host = self._free_hosts()[0]
        self._start_master(new_host, resume=True)
        if kind != "kill9":
            self._poll(lambda: time.monotonic() - cut_at >= fault.duration_s, fault.duration_s + 5, "the partition")
            self.c.heal(old_host)
            self.cut.discard(old_host)
            os.kill(old.popen.pid, signal.SIGCONT)

    def _finish(self, out: Outcome) -> None:
        """The job's end: stop the spares, then let the checker look at everything."""
        m = self.master
        assert m is not None
        code = m.popen.poll()
        if code != 0:
            out.failures.append(f"the last master exited {code}: {_tail(m.log)}")
        held = self.job_pids()
        deadline = time.monotonic() + WORKER_TIMEOUT + 15
        for p in self._live("worker"):
            if p.popen.pid not in held and not p.lost:
                p.stopped = True
                p.popen.terminate()
        while self._live() and time.monotonic() < deadline:
            time.sleep(0.05)
        # a worker replaced while it was cut off or paused is refused when it returns: it must have
        # left by itself (the master silent to it, or told to leave), never stopped by the runner
        for p in self.procs:
            if p.lost and p.popen.poll() is None:
                out.failures.append(f"the worker lost on h{p.host} (pid {p.popen.pid}) did not leave by itself")
        left = [f"{p.role} pid {p.popen.pid} on h{p.host} ({p.log.name})" for p in self._live()]
        stray = [f"pid {pid} on h{h.index}" for h in self.c.hosts if h.alive for pid in h.pids()
                 if h.holder is not None and pid != h.holder.pid and pid not in {p.popen.pid for p in self.procs}]
        if left or stray:
            out.failures.append(f"processes left behind: {left + stray}")
        for old in self.fenced:
            code = old.popen.poll()
            text = _tail(old.log, 6000)
            if code in (None, 0) or "lease" not in text.lower():
                out.failures.append(f"the master cut off (pid {old.popen.pid}) was not fenced: exit {code}: {text}")
        out.supersteps = self.superstep() + 1

    def _cleanup(self) -> None:
        for p in self.procs:
            if p.popen.poll() is None:
                try:
                    os.kill(p.popen.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
                p.popen.kill()
            p.popen.wait()
        for i in sorted(self.cut):
            self.c.heal(i)
        for i in sorted(self.dead):
            self.c.revive(i)
        for i in range(len(self.c.hosts)):
            if self.c.rates[i] != BASE_RATE:
                self.c.shape(i, BASE_RATE)


# -- the checker ------------------------------------------------------------------------------
def params(run: Path) -> dict[str, bytes]:
    """A run's final parameters, unsplit (`mariana params export`), as raw bytes by name."""
    out = run.parent / f"{run.name}-params.npz"
    done = subprocess.run(_mariana("params", "export", str(run), "--to", str(out)), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"params export {run}: {done.stderr[-800:]}")
    with np.load(out) as npz:
        return {k: npz[k].tobytes() for k in npz.files}


def reference(spec: JobSpec, graph: Path, where: Path, length: int = 1) -> dict[str, Any]:
    """The uninterrupted run (the local runtime, the same config and worker count): its parameters
    or output, and its superstep count."""
    where.mkdir(parents=True, exist_ok=True)
    run, out = where / "run", where / "out.txt"
    if run.exists():
        shutil.rmtree(run)
    sets = spec.sets(graph, out, length)
    done = subprocess.run(_mariana("run", spec.name, "--runtime", "local", "--workers", str(spec.workers), "--run-dir",
                                   str(run), *[a for s in sets for a in ("--set", s)]), capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"})
    if done.returncode != 0:
        raise RuntimeError(f"the reference run of {spec.name} failed: {done.stderr[-2000:]}")
    total = len(_jsonl(run / "metrics.jsonl"))
    return {"total": total, "result": out.read_bytes() if spec.graph else params(run)}


def check(run: Run, out: Outcome, ref: dict[str, Any]) -> None:
    """Jepsen's part: the result, the run directory, the trace's account of every fault."""
    spec, rd = run.spec, run.run_dir
    try:
        mine: Any = run.out.read_bytes() if spec.graph else params(rd)
        want: Any = ref["result"]
        out.identical = mine == want
        if not out.identical:
            differ = ["output"] if spec.graph else [k for k in want if mine.get(k) != want[k]]
            out.failures.append(f"not bit-identical to the uninterrupted run: {differ[:5]}")
    except (OSError, RuntimeError) as exc:
        out.failures.append(f"no result to compare: {exc}")
    # no committed checkpoint, parameter file or output is partial
    sys.path.insert(0, str(HERE.parent))
    from mariana.storage import RunDir
    from mariana.storage.checkpoint import Checkpoints

    ck = Checkpoints(RunDir(str(rd), create=False))
    for ss in ck.supersteps():
        if (rd / "checkpoints" / f"ss-{ss:06d}" / "manifest.json").exists():
            info = ck.inspect(ss, True)
            if not info.valid:
                out.failures.append(f"committed checkpoint {ss} is partial: {info.why}")
    for f in sorted((rd / "params").glob("*.npy")) if (rd / "params").is_dir() else []:
        try:
            np.load(f)
        except ValueError as exc:
            out.failures.append(f"parameter file {f.name} is partial: {exc}")
    try:
        status = json.loads((rd / "job.json").read_text()).get("status")
    except (OSError, ValueError) as exc:
        status = f"unreadable ({exc})"
    if status != "finished":
        out.failures.append(f"job.json says {status!r}")
    lines = _jsonl(rd / "metrics.jsonl")
    if [m.get("superstep") for m in lines] != list(range(len(lines))):
        out.failures.append("metrics.jsonl does not hold each superstep once, in order")
    # every fault the job went through, named with its host
    events = run.events()
    summary = trace_summary(rd)
    for rec in out.faults:
        if not rec.get("injected"):
            continue
        host = f"h{rec['host']}"
        kind = rec["kind"]
        if kind in ("partition_short", "sigstop_short"):
            named = any(e["event"] == "silence" and e.get("host") == host for e in events) or \
                any(e["event"] == "recovery" and host in (e.get("lost_hosts") or {}).values() for e in events)
            if rec.get("rolled_back"):
                out.failures.append(f"fault {rec['n']} ({kind} on {host}, {rec['duration_s']}s) was not ridden "
                                    f"through: the job rolled back")
        elif kind == "straggler":
            named = any(host in (r.get("hosts") or {}) for r in summary.get("stragglers", []))
        elif kind == "isolate_master" or (kind == "kill9" and rec.get("target") == "master"):
            hosts = [e.get("host") for e in events if e["event"] == "master"]
            named = host in hosts and any(e["event"] == "master" and e.get("resume") is not None for e in events)
        else:
            named = any(e["event"] == "recovery" and host in (e.get("lost_hosts") or {}).values() for e in events)
        rec["named"] = named
        if not named and rec.get("caught_up"):
            out.failures.append(f"fault {rec['n']} ({kind} on {host}) is not in the run's trace with its host")


def trace_summary(run: Path) -> dict[str, Any]:
    done = subprocess.run(_mariana("trace", "summary", "--json", str(run)), capture_output=True, text=True)
    try:
        return json.loads(done.stdout) if done.returncode == 0 else {}
    except ValueError:
        return {}


def make_graph(path: Path, vertices: int = 4000, edges: int = 24000, seed: int = 50) -> Path:
    """A seeded directed graph, mostly inside blocks (every host reads it from this machine's disk)."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, vertices, edges), rng.integers(0, vertices, edges)
    keep = (src // 500 == dst // 500) | (rng.random(edges) < 0.05)
    path.write_text("".join(f"{a} {b}\n" for a, b in zip(src[keep], dst[keep])))
    return path


def run_one(cluster: nc.Cluster, job: str, seed: int, where: Path, refs: dict[str, dict[str, Any]],
            faults: list[Fault] | None = None, log: Callable[[str], None] = print, length: int = 1) -> Outcome:
    """One schedule (``faults``, else the seeded one) of ``job``, run and checked (``length``: a
    multiple of the default run's steps or iterations)."""
    spec = JOBS[job]
    graph = where.parent / "graph.txt"
    if spec.graph and not graph.exists():
        make_graph(graph)
    key = job if length == 1 else f"{job}x{length}"
    if key not in refs:
        refs[key] = reference(spec, graph, where.parent / f"reference-{key}", length)
    faults = schedule(seed, job) if faults is None else faults
    for f in faults:
        log(json.dumps({"job": job, "seed": seed, **asdict(f)}))
    run = Run(cluster, spec, faults, where, graph, refs[key]["total"], log=log, length=length)
    out = run.go()
    out.seed = seed
    check(run, out, refs[key])
    return out


# -- the soak ---------------------------------------------------------------------------------
def soak_report(outcomes: list[Outcome]) -> dict[str, Any]:
    """Counts: schedules, faults by kind (injected), recovered bit-identical, time to recover per kind."""
    by_kind: dict[str, list[float]] = {}
    for o in outcomes:
        for f in o.faults:
            if f.get("injected"):
                by_kind.setdefault(f["kind"] + (":master" if f.get("target") == "master" else ""), []).append(
                    f.get("recover_s", 0.0))
    return {
        "schedules": len(outcomes), "jobs": {j: sum(o.job == j for o in outcomes) for j in JOBS},
        "bit_identical": sum(o.identical for o in outcomes), "passed": sum(not o.failures for o in outcomes),
        "faults": sum(len(v) for v in by_kind.values()),
        "not_injected": sum(not f.get("injected") for o in outcomes for f in o.faults),
        "by_kind": {k: {"n": len(v), "recover_median_s": round(statistics.median(v), 2), "recover_max_s": round(max(v), 2)}
                    for k, v in sorted(by_kind.items())},
        "failed": [{"job": o.job, "seed": o.seed, "failures": [x[:300] for x in o.failures]} for o in outcomes if o.failures],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true",
                    help="the tiny mode (bench/smoke.py): print one seeded schedule per job, inject nothing")
    sub = ap.add_subparsers(dest="cmd")
    s = sub.add_parser("schedule", help="print a seeded schedule as JSON lines")
    s.add_argument("--job", choices=sorted(JOBS), default="dnn-dp")
    s.add_argument("--seed", type=int, default=0)
    r = sub.add_parser("run", help="one job through one seeded schedule, checked")
    r.add_argument("--job", choices=sorted(JOBS), default="dnn-dp")
    r.add_argument("--seed", type=int, default=0)
    k = sub.add_parser("soak", help="many schedules over dnn-dp, cpu-cluster and PageRank")
    k.add_argument("--schedules", type=int, default=50)
    k.add_argument("--seed", type=int, default=1)
    k.add_argument("--jobs", default=",".join(JOBS))
    k.add_argument("--out", type=Path, default=None, help="write the report (JSON) here too")
    for p in (r, k):
        p.add_argument("--hosts", type=int, default=8)
        p.add_argument("--length", type=int, default=None,
                       help="the job's length, a multiple of the tests' runs (default: the job's soak_length)")
        p.add_argument("--keep", action="store_true", help="keep the run directories (in --workdir)")
        p.add_argument("--workdir", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.cmd is None:
        if not args.smoke:
            ap.error("a command is required: schedule, run or soak")
        for job in sorted(JOBS):
            for f in schedule(0, job):
                print(json.dumps({"job": job, "seed": 0, **asdict(f)}))
        return 0
    if args.cmd == "schedule":
        for f in schedule(args.seed, args.job):
            print(json.dumps({"job": args.job, "seed": args.seed, **asdict(f)}))
        return 0
    reason = nc.why_not()
    if reason:
        print(f"faults_cluster: cannot run: {reason}", file=sys.stderr)
        return 2
    base = args.workdir or Path(tempfile.mkdtemp(prefix="faults-cluster-"))
    base.mkdir(parents=True, exist_ok=True)
    refs: dict[str, dict[str, Any]] = {}
    outcomes: list[Outcome] = []
    t0 = time.monotonic()
    with nc.Cluster(args.hosts, rate=BASE_RATE) as c:
        if args.cmd == "run":
            plan = [(args.job, args.seed)]
        else:
            jobs = args.jobs.split(",")
            plan = [(jobs[i % len(jobs)], args.seed + i) for i in range(args.schedules)]
        for job, seed in plan:
            o = run_one(c, job, seed, base / f"{job}-{seed}", refs, length=args.length or JOBS[job].soak_length)
            outcomes.append(o)
            kinds = ",".join(f["kind"] + ("" if f.get("injected") else "(skipped)") for f in o.faults)
            print(json.dumps({"job": job, "seed": seed, "passed": not o.failures, "identical": o.identical,
                              "wall_s": o.wall_s, "masters": o.masters, "faults": kinds,
                              "recover_s": [f.get("recover_s") for f in o.faults],
                              "failures": [x[:400] for x in o.failures]}), flush=True)
    report = soak_report(outcomes)
    report.update(hosts=args.hosts, seed=args.seed,
                  length={job: args.length or JOBS[job].soak_length for job in {j for j, _ in plan}},
                  wall_s=round(time.monotonic() - t0, 1),
                  date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), load=os.getloadavg()[0])
    print(json.dumps(report, indent=2))
    if getattr(args, "out", None):
        args.out.write_text(json.dumps(report, indent=2))
    return 0 if not report["failed"] else 1


if __name__ == "__main__":
    sys.exit(main())
