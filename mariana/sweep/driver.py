"""The sweep driver: a loop over ordinary jobs, one run directory per trial, in segments.

Layout of a sweep directory (any fsspec URL the trial processes can reach)::

    SWEEP/sweep.json            the spec: job, base config, space, seed, metric, scheduler, ...
    SWEEP/trials/0007/          trial 7: an ordinary run directory (job.json, metrics.jsonl,
                                checkpoints/, params/, trace/) plus trial.json (its parameters,
                                status, reports, rung values, time used, error)
    SWEEP/events.jsonl          what happened, in order (segments, decisions)
    SWEEP/results.json          the ranking, once the sweep is over

The state that decides anything is the trials' ``metrics.jsonl`` and ``trial.json``; the
scheduler's decisions are recomputed from them, so ``Sweep.open(url).run()`` after a crash, a
Ctrl-C or a ``kill -9`` continues where the sweep stopped and ends with the same ranking.
"""

from __future__ import annotations

import ctypes
import json
import logging
import math
import os
import secrets
import selectors
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from .. import __version__
from ..errors import MarianaError, UsageError
from ..jobs.registry import BuildContext, get_job, resolve_config
from ..storage import RunDir
from .samplers import SEARCHES, require_optuna, tpe_params
from .schedulers import CONTINUE, STOP, TERMINAL, TrialView, make_scheduler
from .space import Dist, Space
from .trial import limit_threads, metric_reports, run_segment

if TYPE_CHECKING:
    from .remote import HostQueue, Remote

log = logging.getLogger(__name__)

__all__ = ["SweepSpec", "Trial", "Sweep", "ranking", "infer_mode", "is_sweep"]

RUNNABLE = ("pending", "continue")
#: segments of one trial lost with their host (across hosts) before the trial is recorded failed
MAX_LOST = 3


def infer_mode(metric: str) -> str:
    """max for accuracies, min for losses and errors; anything else must be said (``--mode``)."""
    low = metric.lower()
    if "acc" in low or "score" in low or "rank" in low:
        return "max"
    if "loss" in low or "err" in low:
        return "min"
    raise UsageError(f"cannot tell whether metric '{metric}' is better high or low: give --mode max or --mode min")


@dataclass
class SweepSpec:
    """Everything that defines a sweep's outcome (and how many trials run at once)."""

    job: str
    config: dict[str, Any]
    space: list[Dist]
    trials: int = 10
    seed: int = 0
    metric: str = "test_accuracy"
    mode: str = "max"
    scheduler: str = "fifo"
    grace: int = 1
    reduction: float = 3.0
    parallel: int = 1
    workers: int = 1
    search: str = "random"  # random (and grid) draws up front, or tpe (Optuna) from earlier results

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["space"] = [x.to_json() for x in self.space]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SweepSpec:
        fields = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        fields["space"] = [Dist.from_json(x) for x in d["space"]]
        return cls(**fields)


@dataclass
class Trial:
    """One trial: its parameters, full config and progress (``trials/NNNN/trial.json``)."""

    index: int
    params: dict[str, Any]
    config: dict[str, Any]
    status: str = "pending"  # pending, running, paused, continue, completed, stopped, failed
    reports: int = 0
    rungs: dict[int, float] = field(default_factory=dict)
    last: float | None = None
    time_s: float = 0.0
    segments: int = 0
    error: str | None = None
    lost: int = 0  # segments lost with their host (--listen), run again from the newest checkpoint

    @property
    def name(self) -> str:
        return f"trials/{self.index:04d}"

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["rungs"] = {str(k): _num(v) for k, v in self.rungs.items()}
        d["last"] = _num(self.last)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Trial:
        d = dict(d)
        d["rungs"] = {int(k): float(v) for k, v in d.get("rungs", {}).items()}
        d["last"] = None if d.get("last") is None else float(d["last"])
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})

    def view(self) -> TrialView:
        return TrialView(self.index, self.status, self.rungs)


def _num(v: float | None) -> Any:
    """A float for JSON: NaN and infinities as text (strict JSON has none)."""
    return v if v is None or math.isfinite(v) else str(v)


def is_sweep(url: str) -> bool:
    """Whether ``url`` is a sweep directory (it holds ``sweep.json``)."""
    try:
        return RunDir(url, create=False).exists("sweep.json")
    except MarianaError:
        return False


def ranking(trials: list[Trial], mode: str) -> list[Trial]:
    """Trials best first by their last reported value; trials without one (failed) last, by index."""
    def key(t: Trial) -> tuple[int, float, int]:
        if t.last is None or not math.isfinite(t.last):
            return (1, 0.0, t.index)
        return (0, -t.last if mode == "max" else t.last, t.index)

    return sorted(trials, key=key)


class _Child:
    """A running segment: its process, the pipes to and from it, when it began, its outcome."""

    def __init__(self, trial: Trial, pid: int, fd: int, wfd: int, popen: subprocess.Popen[bytes] | None) -> None:
        self.trial, self.pid, self.fd, self.wfd, self.popen = trial, pid, fd, wfd, popen
        self.buf = b""
        self.outcome: dict[str, Any] | None = None
        self.t0 = time.perf_counter()
        self.segment = ""  # its name on the host queue (--listen)
        self.lost: str | None = None  # why its host was lost, when it was


class Sweep:
    """A sweep directory: ``Sweep.create(url, spec)`` makes one, ``Sweep.open(url)`` reads one;
    ``run()`` runs its trials to the end and returns them ranked."""

    def __init__(self, url: str, spec: SweepSpec, trials: list[Trial], root: RunDir) -> None:
        self.url, self.spec, self.trials, self.root = url.rstrip("/"), spec, trials, root
        self.scheduler = make_scheduler(spec.scheduler, spec.grace, spec.reduction, spec.mode)
        self.on_event: Callable[[dict[str, Any]], None] | None = None
        #: progress that is not an event (across hosts: hosts joining, waiting for hosts); default: the log
        self.on_note: Callable[[str], None] | None = None
        self._queue: HostQueue | None = None
        self._run_id = ""

    # -- making and opening -------------------------------------------------------------------
    @classmethod
    def create(cls, url: str, spec: SweepSpec) -> Sweep:
        """Check the spec (keys, space, metric, the first trial's graph), then write the sweep."""
        job = get_job(spec.job)
        space = Space(job, spec.space)
        make_scheduler(spec.scheduler, spec.grace, spec.reduction, spec.mode)
        if spec.parallel < 1:
            raise UsageError(f"--parallel must be >= 1, got {spec.parallel}")
        if spec.search not in SEARCHES:
            raise UsageError(f"unknown search '{spec.search}'; use one of {', '.join(SEARCHES)}")
        if spec.search == "tpe":
            require_optuna()
            if space.grid:
                raise UsageError("grid(...) keys need --search random (TPE draws every key itself)")
            if spec.trials < 1:
                raise UsageError(f"--trials must be >= 1, got {spec.trials}")
            trials = [Trial(i, {}, {}) for i in range(spec.trials)]  # drawn when they start
            graph = _first_graph(job, [Trial(0, {}, spec.config)], spec.workers)
        else:
            params = space.trials(spec.trials, spec.seed)
            trials = [Trial(i, p, resolve_config(job, {**spec.config, **p}, file_name=f"trial {i}"))
                      for i, p in enumerate(params)]
            graph = _first_graph(job, trials, spec.workers)  # also loads the data the trials fork with
        if spec.metric not in graph.aggregators:
            raise UsageError(f"--metric {spec.metric}: job {job.name} does not report it; it reports: "
                             f"{', '.join(graph.aggregators) or 'nothing'}")
        root = RunDir(url)
        if root.exists("sweep.json"):
            raise UsageError(f"{url} already holds a sweep: continue it with `mariana sweep --resume {url}`")
        root.write_json("sweep.json", {**spec.to_json(), "version": __version__, "status": "running",
                                       "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "size": len(trials)})
        sweep = cls(url, spec, trials, root)
        for t in trials:
            sweep._save(t)
        return sweep

    @classmethod
    def open(cls, url: str) -> Sweep:
        """An existing sweep, its trials as recorded (a ``UsageError`` if ``url`` is not one)."""
        try:
            root = RunDir(url, create=False)
            info = root.read_json("sweep.json")
        except MarianaError as exc:
            raise UsageError(f"{url}: not a sweep directory ({exc})") from None
        spec = SweepSpec.from_json(info)
        trials = []
        for i in range(info["size"]):
            name = f"trials/{i:04d}/trial.json"
            if not root.exists(name):
                raise UsageError(f"{url}: {name} is missing; the sweep directory is damaged")
            trials.append(Trial.from_json(root.read_json(name)))
        return cls(url, spec, trials, root)

    # -- running --------------------------------------------------------------------------------
    def run(self, parallel: int | None = None, remote: Remote | None = None) -> list[Trial]:
        """Run every trial to the end (completed, stopped or failed); the trials, best first.

        ``remote``: place each segment on worker hosts that joined the sweep's queue (``mariana
        worker --sweep``) instead of running it in a child process here (``sweep.remote``)."""
        k = parallel or self.spec.parallel
        if k < 1:
            raise UsageError(f"--parallel must be >= 1, got {k}")
        threads = 1 if remote is not None else max(1, _cores() // k)  # across hosts this process only runs masters
        for t in self.trials:  # segments the last sweep process left running: go on from their checkpoints
            if t.status == "running":
                t.status = "continue" if t.reports else "pending"
                self._save(t)
        _preload()
        running: dict[int, _Child] = {}
        sel = selectors.DefaultSelector()
        queue = self._queue = None
        self._run_id = secrets.token_hex(3)
        if remote is not None:
            from .remote import HostQueue

            queue = self._queue = HostQueue(remote, self._note)
            self._note(f"sweep queue at {queue.endpoint}; on each worker host run: {queue.hint()}")
        try:
            while True:
                self._decide()
                if queue is not None:
                    self._drop_lost(queue, running)
                hosts_short = False
                for t in self.trials:
                    if len(running) >= k:
                        break
                    if t.status in RUNNABLE and t.index not in running:
                        if not t.config and not self._draw(t):
                            break  # TPE: the trials it learns from have not all ended
                        if t.status == "failed":
                            continue
                        if queue is not None and queue.reserve(self._segment(t), self.spec.workers) is None:
                            hosts_short = True
                            self._wait_note(queue, t, len(running))
                            break  # the lowest runnable trial waits for hosts, so no later one overtakes it
                        child = self._start(t, threads, remote)
                        running[t.index] = child
                        sel.register(child.fd, selectors.EVENT_READ, child)
                if not running and not hosts_short:
                    break
                if queue is None:
                    ready = [key.data for key, _ in sel.select()]
                else:
                    by_fd = {c.fd: c for c in running.values()}
                    ready = [by_fd[fd] for fd in queue.wait(list(by_fd), 0.2)]
                for child in ready:
                    chunk = os.read(child.fd, 65536)
                    child.buf += chunk
                    while b"\n" in child.buf:
                        line, child.buf = child.buf.split(b"\n", 1)
                        self._message(child, line)
                    if chunk:
                        continue
                    sel.unregister(child.fd)
                    os.close(child.fd)
                    os.close(child.wfd)
                    del running[child.trial.index]
                    self._settle(child)
        except BaseException:
            for child in running.values():  # Ctrl-C or an error of the driver: the trials go with it
                _kill(child)
            raise
        finally:
            sel.close()
            if queue is not None:  # every joined host exits (0): the sweep is over or gone
                queue.end()
                queue.close()
                self._queue = None
        left = [t for t in self.trials if t.status not in TERMINAL]
        if left:
            raise MarianaError(f"sweep stalled with trials {[t.index for t in left]} undecided (a scheduler bug)")
        ranked = ranking(self.trials, self.spec.mode)
        self.root.write_json("results.json", {"metric": self.spec.metric, "mode": self.spec.mode,
                                              "ranking": [t.to_json() for t in ranked]})
        info = self.root.read_json("sweep.json")
        info.update(status="finished", finished=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        self.root.write_json("sweep.json", info)
        return ranked

    def _decide(self) -> None:
        """Apply the scheduler to every paused trial, in index order, until nothing changes."""
        changed = True
        while changed:
            changed = False
            views = [t.view() for t in self.trials]
            for t in self.trials:
                if t.status != "paused":
                    continue
                decision = self.scheduler.decide(t.index, t.reports, views)
                if decision == CONTINUE or decision == STOP:
                    t.status = "continue" if decision == CONTINUE else "stopped"
                    self._save(t)
                    self._event(t, decision, value=_num(t.rungs.get(t.reports)))
                    views[t.index] = t.view()
                    changed = True

    def _draw(self, t: Trial) -> bool:
        """TPE: draw trial ``t``'s parameters once the trials ``j <= t.index - parallel`` have ended."""
        history = self.trials[:max(0, t.index - self.spec.parallel + 1)]
        if any(h.status not in TERMINAL for h in history):
            return False
        t.params = tpe_params(self.spec.space, history, t.index, self.spec.seed, self.spec.mode)
        try:
            t.config = resolve_config(get_job(self.spec.job), {**self.spec.config, **t.params}, file_name=f"trial {t.index}")
        except UsageError as exc:  # a drawn value the job refuses: this trial fails, the sweep goes on
            t.config, t.status, t.error = dict(self.spec.config), "failed", str(exc)
            self._save(t)
            self._event(t, "failed", error=str(exc))
            return True
        self._save(t)
        return True

    def _start(self, t: Trial, threads: int, remote: Remote | None = None) -> _Child:
        spec = {"job": self.spec.job, "config": t.config, "run": f"{self.url}/{t.name}", "metric": self.spec.metric,
                "workers": self.spec.workers, "threads": threads}
        if remote is not None:
            spec["remote"] = remote.segment_spec()
        t.status = "running"
        self._save(t)
        self._event(t, "start")
        child = _spawn(t, spec)
        child.segment = self._segment(t)
        return child

    def _segment(self, t: Trial) -> str:
        """The name of trial ``t``'s next segment on the host queue: unique across sweep processes
        (hosts still serving a segment of a killed one may join a resumed one)."""
        return f"{self._run_id}:{t.index}.{t.segments}"

    def _message(self, child: _Child, line: bytes) -> None:
        """A line from a segment: a report (answered at once: ``go`` or ``halt``) or its outcome."""
        try:
            msg = json.loads(line)
        except ValueError:
            log.warning("trial %d: unreadable line from its process: %r", child.trial.index, line[:200])
            return
        if "outcome" in msg:
            child.outcome = msg["outcome"]
            return
        if "master" in msg:  # across hosts: the segment's master is bound; its reserved hosts join it
            if self._queue is not None:
                self._queue.assign(child.segment, str(msg["master"]), self.spec.job, msg.get("token"))
            return
        t = child.trial
        self._read_metrics(t)
        go = True
        if t.reports in t.rungs:  # at a rung: the scheduler decides now (wait and stop both pause it here)
            decision = self.scheduler.decide(t.index, t.reports, [x.view() for x in self.trials])
            go = decision == CONTINUE
            if go:
                self._event(t, "continue", value=_num(t.rungs[t.reports]))
            self._save(t)
        try:
            os.write(child.wfd, b"go\n" if go else b"halt\n")
        except OSError:  # the segment died meanwhile: its end is handled when its pipe closes
            pass

    def _read_metrics(self, t: Trial) -> None:
        """The trial's reports, newest value and rung values from its ``metrics.jsonl``."""
        run = RunDir(f"{self.url}/{t.name}")
        values = metric_reports(run.read_jsonl("metrics.jsonl"), self.spec.metric) if run.exists("metrics.jsonl") else []
        t.reports = len(values)
        t.last = values[-1] if values else None
        t.rungs = {}
        m = self.scheduler.next_milestone(0)
        while m is not None and m <= len(values):
            t.rungs[m] = values[m - 1]
            m = self.scheduler.next_milestone(m)

    def _settle(self, child: _Child) -> None:
        """A segment ended: the trial's reports, rung values and status from its run directory."""
        t, elapsed = child.trial, time.perf_counter() - child.t0
        if child.popen is None:
            status = os.waitstatus_to_exitcode(os.waitpid(child.pid, 0)[1])
        else:
            status = child.popen.wait()
        outcome = child.outcome or {"status": "failed",
                                    "error": f"trial process ended without a result ({_exit_text(status)})"}
        if self._queue is not None:
            self._queue.release(child.segment)
        if child.lost is not None and outcome["status"] not in ("paused", "completed"):
            outcome = {"status": "lost", "error": child.lost}
        self._read_metrics(t)
        t.time_s = round(t.time_s + elapsed, 6)
        t.segments += 1
        if outcome["status"] == "lost":  # its host died: run it again, elsewhere, from its newest checkpoint
            t.lost += 1
            why = str(outcome.get("error") or "host lost").splitlines()[0]
            if t.lost <= MAX_LOST:
                t.status, t.error = ("continue" if t.reports else "pending"), None
                log.warning("trial %d: segment lost (%s); it runs again from its newest checkpoint", t.index, why)
                self._save(t)
                self._event(t, "lost", error=why)
                return
            outcome = {"status": "failed", "error": f"lost with its host {t.lost} times; the last: {why}"}
        t.status = outcome["status"]
        t.error = outcome.get("error")
        if t.status == "failed":
            log.warning("trial %d failed: %s", t.index, (t.error or "").splitlines()[0] if t.error else "")
        self._save(t)
        self._event(t, t.status, value=_num(t.last), error=t.error and t.error.splitlines()[0])

    def _drop_lost(self, queue: HostQueue, running: dict[int, _Child]) -> None:
        """Segments whose host the queue dropped: end their process (the master), which settles them as lost."""
        lost = queue.take_lost()
        for child in running.values():
            if child.segment in lost and child.outcome is None and child.lost is None:
                child.lost = lost[child.segment]
                try:
                    os.kill(child.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def _wait_note(self, queue: HostQueue, t: Trial, running: int) -> None:
        """Say (once per change) that trial ``t`` waits for idle hosts, and how hosts join."""
        hosts, idle = len(queue.alive()), len(queue.idle())
        if hosts >= self.spec.workers * (running + 1):
            return  # enough hosts joined: one is on its way back from its last segment
        text = (f"waiting for worker hosts: trial {t.index} needs {self.spec.workers} idle, {hosts} joined, {idle} idle, "
                f"{running} segment(s) running; join with: {queue.hint()}")
        if text != getattr(self, "_last_wait", None):
            self._last_wait = text
            self._note(text)

    def _note(self, text: str) -> None:
        if self.on_note is not None:
            self.on_note(text)
        else:
            log.info("%s", text)

    def _save(self, t: Trial) -> None:
        self.root.write_json(f"{t.name}/trial.json", t.to_json())

    def _event(self, t: Trial, event: str, **extra: Any) -> None:
        record = {"time": round(time.time(), 3), "trial": t.index, "event": event, "reports": t.reports,
                  "time_s": t.time_s, **{k: v for k, v in extra.items() if v is not None}}
        self.root.append_jsonl("events.jsonl", [record])
        if self.on_event is not None:
            self.on_event(record)


def _first_graph(job: Any, trials: list[Trial], workers: int) -> Any:
    """The graph of the first trial whose config builds (the metric is checked on it); when none
    builds, the first trial's error (every trial would fail the same way)."""
    first: UsageError | None = None
    for t in trials:
        try:
            return job.build(t.config, BuildContext(workers))
        except UsageError as exc:
            first = first or exc
    assert first is not None
    raise UsageError(f"no trial can run: trial 0: {first}")


def _preload() -> None:
    """Import here what every segment imports (the launch path, the local runtime and its BLAS
    thread helpers), so a forked segment starts with it loaded: ~0.5-1 s a segment otherwise."""
    from ..engine.local import blas_threads_of
    from ..jobs.launch import launch  # noqa: F401

    blas_threads_of(1)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _fork_ok() -> bool:
    """Fork a segment only while this process runs one thread (a lock held elsewhere stays held)."""
    return hasattr(os, "fork") and threading.active_count() == 1 and os.environ.get("MARIANA_NO_FORK", "") in ("", "0")


def _die_with_parent() -> None:
    """Linux: this process gets SIGKILL when the sweep process dies (a ``kill -9`` of the sweep
    must not leave trials writing into directories a resumed sweep reuses)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _quiet_child() -> None:
    """A segment ignores Ctrl-C (the terminal sends it to the whole group): the sweep process
    decides, and kills its segments, so an interrupted trial is continued on ``--resume``, not
    recorded as failed. It dies with the sweep process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _die_with_parent()


#: a fresh segment interpreter (``-m mariana.sweep.trial`` would import the module twice: the package imports it)
_TRIAL_MAIN = "import sys; from mariana.sweep.trial import main; sys.exit(main())"


def _spawn(t: Trial, spec: dict[str, Any]) -> _Child:
    from .trial import announce, channel, finish

    r, w = os.pipe()  # segment -> sweep: reports, then the outcome
    r2, w2 = os.pipe()  # sweep -> segment: the answers
    parent = os.getpid()
    if _fork_ok():
        from ..cluster.forking import fork_holding_interrupts

        pid = fork_holding_interrupts()
        if pid == 0:  # the child: run the segment, leave without the parent's exit handlers
            code = 0
            try:
                os.close(r)
                os.close(w2)
                _quiet_child()
                if os.getppid() != parent:
                    os._exit(1)
                limit_threads(spec["threads"])
                out, inp = os.fdopen(w, "wb", buffering=0), os.fdopen(r2, "rb", buffering=0)
                finish(out, run_segment(spec, channel(out, inp), announce(out)))
            except BaseException:  # noqa: BLE001 - the parent records a segment without an outcome as failed
                code = 1
            finally:
                os._exit(code)
        os.close(w)
        os.close(r2)
        return _Child(t, pid, r, w2, None)
    env = {**os.environ, **{v: str(spec["threads"]) for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                                               "MKL_NUM_THREADS")}}
    popen = subprocess.Popen([sys.executable, "-c", _TRIAL_MAIN, str(w), str(r2)], stdin=subprocess.PIPE,
                             pass_fds=(w, r2), env=env, preexec_fn=_quiet_child)
    os.close(w)
    os.close(r2)
    assert popen.stdin is not None
    popen.stdin.write(json.dumps(spec, default=str).encode())
    popen.stdin.close()
    return _Child(t, popen.pid, r, w2, popen)


def _kill(child: _Child) -> None:
    try:
        os.kill(child.pid, signal.SIGKILL)
        if child.popen is None:
            os.waitpid(child.pid, 0)
        else:
            child.popen.wait()
    except (ProcessLookupError, ChildProcessError):
        pass
    for fd in (child.fd, child.wfd):
        try:
            os.close(fd)
        except OSError:
            pass


def _exit_text(code: int) -> str:
    """``Popen.returncode`` style: negative is the signal that killed the process."""
    return f"killed by signal {-code}" if code < 0 else f"exit code {code}"
