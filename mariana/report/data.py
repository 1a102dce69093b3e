"""What a report or the live page shows about one run, read from its run directory.

``collect(run)`` reads ``job.json``, ``metrics.jsonl``, ``trace/`` (through
``mariana.trace.analyze``) and ``checkpoints/`` through ``mariana.storage.RunDir`` (so any fsspec
URL works, S3 included) and returns one JSON-safe dict, the *snapshot*. It works on a run that
is still going: a half-written last line is skipped, missing files are simply absent.

Snapshot keys: ``run``, ``job`` (job.json), ``status``, ``superstep`` (the newest), ``series``
(``{name: {"x": [supersteps], "y": [values]}}`` for every numeric metric, NaN/Inf as null),
``samples_per_s``, ``workers``, ``counters``, ``timeline``, ``stragglers``, ``memory``, ``checkpoints``,
``restarts``, ``hangs``, ``flags`` and ``nan_metrics``.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

from ..errors import MarianaError, UsageError
from ..storage import RunDir
from ..storage.checkpoint import Checkpoints
from ..trace.analyze import PHASES, Trace, _parse_jsonl, load_trace, summary

log = logging.getLogger(__name__)

__all__ = ["collect", "json_safe", "series_from_metrics", "samples_per_second", "TIMELINE_SUPERSTEPS", "CURVES"]

#: The timeline shows the newest this many supersteps: over more, a superstep is narrower than a pixel.
TIMELINE_SUPERSTEPS = 200
#: The training curves shown first when a run has them (the rest of the numeric metrics follow).
CURVES = ("loss", "test_loss", "test_accuracy")
#: Metric keys that are bookkeeping, not curves.
_NOT_SERIES = {"superstep", "workers", "checkpoint", "restarts"}
#: Phase groups of the timeline: what a worker did in a superstep, in order.
EXCHANGE = ("combine", "encode", "send")


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def series_from_metrics(lines: list[dict[str, Any]]) -> tuple[dict[str, dict[str, list]], list[dict[str, Any]]]:
    """Every numeric top-level metric as ``{name: {"x": supersteps, "y": values}}`` (NaN/Inf as
    None, so that JSON can hold it and a plot shows a gap), and where NaN/Inf appeared."""
    series: dict[str, dict[str, list]] = {}
    nans: list[dict[str, Any]] = []
    for line in lines:
        ss = line.get("superstep")
        if not isinstance(ss, int):
            continue
        for key, value in line.items():
            if key in _NOT_SERIES or not _number(value):
                continue
            s = series.setdefault(key, {"x": [], "y": []})
            s["x"].append(ss)
            if math.isfinite(value):
                s["y"].append(value)
            else:
                s["y"].append(None)
                nans.append({"superstep": ss, "key": key, "value": str(value)})
    return series, nans


def samples_per_second(lines: list[dict[str, Any]], batch_size: Any, key: str = "loss") -> dict[str, list]:
    """Training throughput: ``batch_size`` samples per line that reports ``key`` (one optimizer
    step), over the wall time of the supersteps since the previous such line. A line with a
    ``samples`` count uses that count instead. Empty when the job reports neither."""
    out: dict[str, list] = {"x": [], "y": []}
    if not (_finite(batch_size) and batch_size > 0) and not any("samples" in ln for ln in lines):
        return out
    wall = 0.0
    for line in lines:
        if not isinstance(line.get("superstep"), int):
            continue
        w = line.get("wall_s")
        wall += w if _finite(w) else 0.0
        n = line.get("samples")
        if not _finite(n):
            n = batch_size if key in line else None
        if n is None or not _finite(n):
            continue
        if wall > 0:
            out["x"].append(line["superstep"])
            out["y"].append(n / wall)
        wall = 0.0
    return out


def _read_metrics(run_dir: RunDir) -> list[dict[str, Any]]:
    if not run_dir.exists("metrics.jsonl"):
        return []
    lines = _parse_jsonl(run_dir.read_bytes("metrics.jsonl"), f"{run_dir.url}/metrics.jsonl")
    # a resumed run rewinds metrics.jsonl; if a superstep still appears twice, the last line wins
    by_ss: dict[int, dict[str, Any]] = {}
    for line in lines:
        if isinstance(line.get("superstep"), int):
            by_ss[line["superstep"]] = line
    return [by_ss[s] for s in sorted(by_ss)]


def _load_trace(url: str) -> Trace | None:
    try:
        return load_trace(url)
    except UsageError as exc:  # no trace (--no-trace, or not written yet): the report goes without
        log.debug("no trace: %s", exc)
        return None


def _timeline(trace: Trace, t0: float) -> dict[str, Any]:
    """Per worker, per superstep: start (seconds since ``t0``) and the time in compute,
    exchange (combine + encode + send), wait (for peers' batches) and barrier."""
    recs = [r for rs in trace.workers.values() for r in rs if _finite(r.get("start"))]
    recs.sort(key=lambda r: (r["start"], r.get("worker", 0)))
    session = _session_start(recs)
    recs = [r for r in recs if r["start"] >= session]
    t0 = session if session > 0 else t0
    newest = sorted({int(r["superstep"]) for r in recs})[-TIMELINE_SUPERSTEPS:]
    first = newest[0] if newest else 0
    kept = [r for r in recs if int(r["superstep"]) >= first]
    truncated = len(recs) - len(kept)
    recs = kept
    rows = []
    for r in recs:
        ph = {p: float(r[f"{p}_s"]) if _finite(r.get(f"{p}_s")) else 0.0 for p in PHASES}
        rows.append({"worker": int(r.get("worker", 0)), "superstep": int(r["superstep"]),
                     "start": float(r["start"]) - t0, "compute": ph["compute"],
                     "exchange": sum(ph[p] for p in EXCHANGE), "wait": ph["wait"], "barrier": ph["barrier"]})
    return {"rows": rows, "truncated": truncated, "resumed_at": int(recs[0]["superstep"]) if session > 0 and recs else None}


#: A pause between supersteps longer than this many seconds (and than SESSION_GAP_SUPERSTEPS median
#: supersteps) starts a new session: the run was resumed from a checkpoint (``mariana run --resume``).
SESSION_GAP_S = 2.0
SESSION_GAP_SUPERSTEPS = 20


def _session_start(recs: list[dict[str, Any]]) -> float:
    """The start time of the newest session of a run (0.0 for a run of one session): on a resumed
    run a timeline over both sessions would be mostly the pause between them."""
    ends = [float(r["end"]) for r in recs if _finite(r.get("end"))]
    if len(ends) != len(recs) or len(recs) < 2:
        return 0.0
    walls = sorted(e - float(r["start"]) for r, e in zip(recs, ends))
    gap_limit = max(SESSION_GAP_S, SESSION_GAP_SUPERSTEPS * walls[len(walls) // 2])
    latest_end, start = ends[0], 0.0
    for r, end in zip(recs[1:], ends[1:]):
        if float(r["start"]) - latest_end > gap_limit:
            start = float(r["start"])
        latest_end = max(latest_end, end)
    return start


def _workers(trace: Trace | None, lines: list[dict[str, Any]], job: dict[str, Any],
             memory: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each worker with its host and pid (from its newest trace record), its last superstep and
    its process's peak memory (``memory``: the trace summary's, per process)."""
    peaks = {(m["host"], m["pid"]): m["peak_rss_bytes"] for m in memory}
    out: dict[int, dict[str, Any]] = {}
    if trace is not None:
        for k, recs in trace.workers.items():
            if recs:
                last = recs[-1]
                out[k] = {"worker": k, "host": last.get("host"), "pid": last.get("pid"),
                          "superstep": last.get("superstep"), "compute_s": last.get("compute_s")}
                peak = peaks.get((last.get("host"), last.get("pid")))  # (the newest process's, after a restart)
                if peak is not None:
                    out[k]["peak_mb"] = round(peak / 1e6, 1)
    if lines:
        for w in lines[-1].get("workers") or []:
            if isinstance(w, dict) and isinstance(w.get("worker"), int):
                row = out.setdefault(w["worker"], {"worker": w["worker"], "host": None, "pid": None})
                row["superstep"] = lines[-1]["superstep"]
                row["computed"] = w.get("computed")
                row["active"] = w.get("active")
    if not out and isinstance(job.get("workers"), int):
        out = {k: {"worker": k, "host": None, "pid": None} for k in range(job["workers"])}
    return [out[k] for k in sorted(out)]


def _memory(trace: Trace | None) -> list[dict[str, Any]]:
    """Per worker, its process's resident memory and peak so far (MB) at each superstep it
    reported (the last record of a superstep that ran twice)."""
    out = []
    for k, recs in sorted((trace.workers if trace is not None else {}).items()):
        last = {r["superstep"]: r for r in recs if isinstance(r.get("superstep"), int)
                and _finite(r.get("rss_bytes")) and _finite(r.get("peak_rss_bytes"))}
        if last:
            xs = sorted(last)
            out.append({"worker": k, "x": xs, "rss_mb": [last[s]["rss_bytes"] / 1e6 for s in xs],
                        "peak_mb": [last[s]["peak_rss_bytes"] / 1e6 for s in xs]})
    return out


def _checkpoints(run_dir: RunDir) -> list[dict[str, Any]]:
    try:
        ck = Checkpoints(run_dir)
        infos = [ck.inspect(ss, verify=False) for ss in ck.supersteps()]
    except MarianaError as exc:
        log.debug("checkpoints: %s", exc)
        return []
    return [{"superstep": i.superstep, "time": i.time, "size": i.size, "valid": i.valid, "why": i.why} for i in infos]


def collect(run: str) -> dict[str, Any]:
    """The snapshot of run directory ``run`` (any fsspec URL); a ``UsageError`` if it is not one."""
    try:
        run_dir = RunDir(run, create=False)
        job = run_dir.read_json("job.json") if run_dir.exists("job.json") else {}
        lines = _read_metrics(run_dir)
    except UsageError:
        raise
    except MarianaError as exc:
        raise UsageError(str(exc)) from None
    if not job and not lines:
        raise UsageError(f"{run}: not a run directory (no job.json, no metrics.jsonl)")
    trace = _load_trace(run)
    series, nan_metrics = series_from_metrics(lines)
    config = job.get("config") or {}
    samples = samples_per_second(lines, config.get("batch_size"))

    tsum = summary(trace) if trace is not None else None
    starts = [r["start"] for rs in (trace.workers.values() if trace else []) for r in rs if _finite(r.get("start"))]
    starts += [m["start"] for m in (trace.master if trace else []) if _finite(m.get("start"))]
    t0 = min(starts) if starts else 0.0
    timeline = _timeline(trace, t0) if trace is not None else {"rows": [], "truncated": 0}
    lags = []
    for m in trace.master if trace is not None else []:
        if _finite(m.get("lag_s")):
            lags.append({"superstep": m["superstep"], "straggler": m.get("straggler"), "lag_s": m["lag_s"]})
    events = trace.events if trace is not None else []
    restarts = [e for e in events if e.get("event") == "recovery"]
    hangs = [e for e in events if e.get("event") == "hang"]
    flags = []
    if trace is not None:
        for k, recs in trace.workers.items():
            for r in recs:
                for f in r.get("flags") or []:
                    if isinstance(f, dict):
                        flags.append({"superstep": r.get("superstep"), "worker": k, **f})
    flags.sort(key=lambda f: (f.get("superstep") or 0, f.get("worker") or 0))
    checkpoints = _checkpoints(run_dir)
    ck_events = [e for e in events if e.get("event") == "checkpoint"]

    marks = sorted({ln["checkpoint"] for ln in lines if isinstance(ln.get("checkpoint"), int)})
    last = lines[-1] if lines else {}
    counters = {
        "supersteps": len(lines),
        "wall_s": sum(ln["wall_s"] for ln in lines if _finite(ln.get("wall_s"))),
        "messages": sum(ln["messages"] for ln in lines if _finite(ln.get("messages"))),
        "bytes": sum(ln["bytes"] for ln in lines if _finite(ln.get("bytes"))),
        "dropped": max([ln["dropped"] for ln in lines if _finite(ln.get("dropped"))]
                       + [(tsum or {}).get("dropped", {}).get("total", 0)]),
        "active": last.get("active"),
        "restarts": max(len(restarts), max([ln["restarts"] for ln in lines if _finite(ln.get("restarts"))] or [0])),
        "checkpoints": len(checkpoints),  # kept: the ones in checkpoints/, the plots' markers
        # committed ones: those the metrics lines name (the last one, committed after the last line,
        # is only in checkpoints/), the deleted ones included
        "checkpoints_taken": len(set(marks) | {c["superstep"] for c in checkpoints if c["valid"]}),
        "checkpoints_failed": sum(1 for e in ck_events if not e.get("ok", True)),
        "nan_flags": len(flags) + len(nan_metrics),
        "hangs": len(hangs),
    }
    for key in CURVES:
        s = series.get(key)
        if s and s["y"]:
            counters[key] = s["y"][-1]
    if samples["y"]:
        counters["samples_per_s"] = samples["y"][-1]
    return json_safe({
        "run": run, "job": job, "status": job.get("status", "unknown"), "collected": time.time(),
        "superstep": last.get("superstep"), "series": series, "samples_per_s": samples,
        "last_metrics": {k: v for k, v in last.items() if k != "workers"},
        "workers": _workers(trace, lines, job, (tsum or {}).get("memory", [])), "counters": counters, "timeline": timeline,
        # one worker is always last: stragglers exist only among two or more
        "stragglers": (tsum or {}).get("stragglers", []) if len(trace.workers if trace else {}) > 1 else [],
        "lags": lags if len(trace.workers if trace else {}) > 1 else [],
        "memory": _memory(trace),
        "checkpoints": checkpoints, "checkpoint_marks": marks,
        "restarts": restarts, "hangs": hangs, "flags": flags[:200], "flags_total": len(flags),
        "nan_metrics": nan_metrics[:200],
        "trace": {"supersteps": (tsum or {}).get("supersteps", 0), "phases": (tsum or {}).get("phases", {}),
                  "hosts": (tsum or {}).get("hosts", [])} if tsum else None,
    })


def json_safe(v: Any) -> Any:
    """JSON-safe without NaN (browsers' JSON.parse refuses it): non-finite floats become None,
    anything not JSON a string; strings are left alone (a metric named "NaN rate" stays so)."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {str(k): json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_safe(x) for x in v]
    if isinstance(v, (str, int, bool)) or v is None:
        return v
    return str(v)
