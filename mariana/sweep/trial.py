"""One segment of one trial: run (or resume) an ordinary job in its run directory, asking the sweep
at each report of the metric whether to go on; when told not to, checkpoint there and halt.

A segment runs in a child process of the sweep (forked when that is safe, else a fresh
``python -m mariana.sweep.trial``), so a trial that crashes or exhausts memory fails alone, each
trial sizes its own BLAS thread pool, and a kill of the sweep takes its trials with it.
The stop is master compute's: the job's own master compute is wrapped by ``StopAtReport``,
which asks at each report (one JSON line each way on a pipe; the sweep answers at once, from
the recorded values), and when told to stop requests a checkpoint and halts the job one
superstep later, so ``mariana run --resume TRIAL`` or the next segment continues from there.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import sys
import time
import traceback
from typing import IO, Any, Callable

from ..engine.graph import Graph, MasterContext
from ..errors import MarianaError, UsageError, VertexError
from ..storage import RunDir

log = logging.getLogger(__name__)

__all__ = ["StopAtReport", "run_segment", "metric_reports", "announce", "PAUSE_REASON"]

PAUSE_REASON = "sweep: rung reached"


def metric_reports(lines: list[dict[str, Any]], metric: str) -> list[float]:
    """The metric's values, in superstep order, from metrics lines (NaN/Inf are stored as text)."""
    out = []
    for line in sorted(lines, key=lambda r: r.get("superstep", 0)):
        if metric in line:
            try:
                out.append(float(line[metric]))
            except (TypeError, ValueError):
                out.append(float("nan"))
    return out


class StopAtReport:
    """Master compute that runs the job's own, then, at each report of ``metric``, asks the sweep
    whether the trial goes on (``ask(reports) -> bool``); when not, it requests a checkpoint and
    halts the job one superstep later (reports of earlier segments, in ``metrics.jsonl``, count).

    The report of superstep ``s`` is seen before ``s + 1``; the checkpoint holds the state after
    ``s + 1``, from which the next segment or ``mariana run --resume`` continues exactly.
    """

    def __init__(self, inner: Any, metric: str, run_dir: RunDir, ask: Callable[[int], bool]) -> None:
        self.inner, self.metric, self.run_dir, self.ask = inner, metric, run_dir, ask
        self.start: int | None = None
        self.seen = 0
        self.halt_next = False
        self.paused = False

    def __call__(self, mctx: MasterContext) -> None:
        if self.start is None:  # first call: earlier segments' reports (the run directory is rewound by now)
            self.start = mctx.superstep
            if self.run_dir.exists("metrics.jsonl"):
                self.seen = len(metric_reports(self.run_dir.read_jsonl("metrics.jsonl"), self.metric))
            if self.seen and not self.ask(self.seen):  # paused right at a rung: asked again, decided again
                self._halt(mctx)
                return
        if self.halt_next:
            self._halt(mctx)
            return
        if self.inner is not None:
            self.inner(mctx)
            if mctx.halted:
                return
        if mctx.superstep > self.start and self.metric in mctx.aggregates:
            self.seen += 1
            if not self.ask(self.seen):
                mctx.checkpoint()
                self.halt_next = True

    def _halt(self, mctx: MasterContext) -> None:
        self.paused = True
        mctx.halt(PAUSE_REASON)


def run_segment(spec: dict[str, Any], ask: Callable[[int], bool],
                announce: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run one segment as ``spec`` says (job, config, run, metric, workers), asking ``ask`` at each
    report whether to go on; returns ``{"status": paused|completed|failed|lost, "error",
    "halt_reason", "wall_s"}``. Never raises.

    With ``spec["remote"]`` (a sweep across hosts) this process runs only the job's master, bound
    as ``remote`` says, and tells the sweep its endpoint through ``announce`` so that the hosts
    the sweep reserved join it; a worker lost meanwhile makes the segment ``lost`` (the sweep runs
    it again elsewhere from the newest checkpoint), not failed."""
    from ..cluster.control import WorkerLost
    from ..engine.options import RunOptions
    from ..engine.tracing import rewind
    from ..jobs.launch import launch
    from ..jobs.registry import Job, get_job
    from ..storage.checkpoint import Checkpoints

    t0 = time.perf_counter()
    try:
        job = get_job(spec["job"])
        run_dir = RunDir(spec["run"])
        _take_lease(run_dir)
        config = spec["config"]
        resume = Checkpoints(run_dir, config.get("keep_checkpoints", 3)).newest_valid() is not None
        if not resume:  # a first segment, or one killed before its first checkpoint: start afresh
            rewind(run_dir, 0)
        stopper: list[StopAtReport] = []

        def build(cfg: dict[str, Any], bctx: Any) -> Graph:
            graph = job.build(cfg, bctx)
            if spec["metric"] not in graph.aggregators:
                raise UsageError(f"metric '{spec['metric']}' is not reported by job {job.name}; it reports: "
                                 f"{', '.join(graph.aggregators) or 'nothing'}")
            stopper[:] = [StopAtReport(graph.master_compute, spec["metric"], run_dir, ask)]
            graph.master_compute = stopper[0]
            return graph

        wrapped = Job(job.name, job.description, job.keys, build, job.finish, job.progress_metric, job.export)
        options = RunOptions.from_config(config, workers=spec.get("workers", 1), run_dir=run_dir, resume=resume,
                                         trace=spec.get("trace", True), metrics_every_s=0.0,  # the scheduler reads them live
                                         **_remote_options(spec.get("remote"), announce))
        try:
            result = launch(wrapped, config, options, name=spec["job"], finish=True).result
        finally:
            run_dir.release_lease()
        paused = bool(stopper) and stopper[0].paused
        return {"status": "paused" if paused else "completed", "halt_reason": result.halt_reason,
                "supersteps": result.supersteps, "wall_s": time.perf_counter() - t0}
    except WorkerLost as exc:
        if spec.get("remote"):
            return {"status": "lost", "error": str(exc), "wall_s": time.perf_counter() - t0}
        return {"status": "failed", "error": str(exc), "wall_s": time.perf_counter() - t0}
    except VertexError as exc:
        text = f"{exc}\n{exc.traceback_text}".strip()
        return {"status": "failed", "error": text, "wall_s": time.perf_counter() - t0}
    except MarianaError as exc:
        return {"status": "failed", "error": str(exc), "wall_s": time.perf_counter() - t0}
    except Exception as exc:  # noqa: BLE001 - a trial's crash is recorded, the sweep goes on
        return {"status": "failed", "error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}",
                "wall_s": time.perf_counter() - t0}


def _remote_options(remote: dict[str, Any] | None, announce: Callable[[dict[str, Any]], None] | None) -> dict[str, Any]:
    """Run options of a segment whose workers are on other hosts: this process is the master
    (``mariana master``'s path: no local workers, CURVE with the sweep's keys), it says where it
    listens once bound and the segment's token (a worker without it is refused, keys or not), and
    a lost worker ends the segment at once (the sweep places it again)."""
    if not remote:
        return {}
    security = None
    if remote.get("keys"):
        from ..comm.security import Security

        security = Security.for_master(remote["keys"])

    token = secrets.token_hex(16)  # only the hosts this sweep sends it to may join the segment

    def on_start(master: Any, procs: list[Any]) -> None:
        if announce is not None:
            announce({"master": master.endpoint, "token": token})

    timeout = float(remote.get("host_timeout", 10.0))
    return {"runtime": "cluster", "spawn": False, "bind": remote["bind"], "security": security, "on_start": on_start,
            "worker_timeout": timeout, "heartbeat_interval": min(0.5, timeout / 4), "max_restarts": 0,
            "join_timeout": float(remote.get("join_timeout", 600.0)), "token": token}


def limit_threads(n: int) -> None:
    """This process's BLAS/OpenMP pools to ``n`` threads (a forked child inherits its parent's)."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
        os.environ[var] = str(n)
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(n)
    except ImportError:  # a fresh interpreter read the variables at load: nothing to do
        pass


def channel(out: IO[bytes], inp: IO[bytes]) -> Callable[[int], bool]:
    """``ask(reports)``: one JSON line to the sweep, one line back (``go`` or ``halt``)."""

    def ask(reports: int) -> bool:
        out.write(json.dumps({"report": reports}).encode() + b"\n")
        out.flush()
        reply = inp.readline().strip()
        return reply == b"go"

    return ask


def announce(out: IO[bytes]) -> Callable[[dict[str, Any]], None]:
    """``announce(message)``: one JSON line to the sweep that needs no answer (a master's endpoint)."""

    def say(message: dict[str, Any]) -> None:
        out.write(json.dumps(message).encode() + b"\n")
        out.flush()

    return say


def finish(out: IO[bytes], outcome: dict[str, Any]) -> None:
    """The segment's outcome: the last line to the sweep."""
    out.write(json.dumps({"outcome": outcome}, default=str).encode() + b"\n")
    out.flush()


def main() -> int:
    """``python -m mariana.sweep.trial OUT_FD IN_FD``: the spec as JSON on stdin; reports and the
    outcome as JSON lines on OUT_FD, the sweep's answers on IN_FD."""
    out, inp = os.fdopen(int(sys.argv[1]), "wb", buffering=0), os.fdopen(int(sys.argv[2]), "rb", buffering=0)
    spec = json.loads(sys.stdin.read())
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    limit_threads(spec.get("threads", 1))
    finish(out, run_segment(spec, channel(out, inp), announce(out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())


def _take_lease(run_dir: RunDir, patience_s: float = 120.0) -> None:
    """The trial's run directory for this segment, before its records are read or dropped. A
    holder that still runs here is waited for (``patience_s`` at most): a killed sweep's segment
    that is still ending, whose writes must finish before this one starts."""
    deadline = time.monotonic() + patience_s
    while True:
        try:
            run_dir.take_lease()
            return
        except UsageError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)  # (the holder is another process: nothing here to wait on)
