"""Reading ``RUN/trace/`` (docs/traces.md): loading, the run summary and one superstep in detail.

Everything here reads the run directory through ``mariana.storage.RunDir`` only, so a run on
any fsspec URL can be analysed. The functions return JSON-able dicts; ``format_*`` turn them
into the text the CLI prints, and ``cmd_*`` do both for the CLI (text to print, dict).

A superstep that was run more than once (records written twice, e.g. around a recovery that
did not truncate the trace) counts once: the last record of each (worker, superstep) wins.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

from ..engine.tracing import PHASES
from ..engine.tracing import capture_path as capture_rel
from ..errors import MarianaError, UsageError
from ..storage import RunDir

__all__ = [
    "PHASES", "Trace", "load_trace", "summary", "format_summary", "cmd_summary", "capture_rel",
]

#: The phases of a superstep on a worker, in the order they happen.

_WORKER_FILE = re.compile(r"^worker-(\d+)\.jsonl$")


@dataclass
class Trace:
    """Everything in ``RUN/trace``."""

    workers: dict[int, list[dict]]  # worker -> records sorted by superstep (then start)
    master: list[dict]  # superstep lines, sorted by superstep
    events: list[dict]  # master lines with "event", in file order
    url: str = ""  # the run directory the trace was read from ("" when built in memory)
    #: master.jsonl in file order (superstep lines and events interleaved): events carry no
    #: time, so their place among the superstep lines is what dates them.
    master_lines: list[dict] = field(default_factory=list, repr=False)

    @property
    def where(self) -> str:
        return f"{self.url}/trace" if self.url else "trace"

    def supersteps(self) -> list[int]:
        """Every superstep that has a worker record or a master line, ascending."""
        seen = {int(r["superstep"]) for recs in self.workers.values() for r in recs if "superstep" in r}
        seen.update(int(m["superstep"]) for m in self.master if "superstep" in m)
        return sorted(seen)

    def records(self, superstep: int) -> dict[int, dict]:
        """worker -> its (last) record of ``superstep``."""
        out: dict[int, dict] = {}
        for k in sorted(self.workers):
            for r in self.workers[k]:
                if r.get("superstep") == superstep:
                    out[k] = r  # a later record of the same superstep replaces an earlier one
        return out

    def records_by_superstep(self) -> dict[int, dict[int, dict]]:
        """superstep -> ``records(superstep)`` for every superstep, in one pass (linear, not quadratic)."""
        out: dict[int, dict[int, dict]] = {}
        for k in sorted(self.workers):
            for r in self.workers[k]:
                if isinstance(r.get("superstep"), int):
                    out.setdefault(r["superstep"], {})[k] = r
        return out

    def master_line(self, superstep: int) -> dict | None:
        line = None
        for m in self.master:
            if m.get("superstep") == superstep:
                line = m
        return line


def master_order(trace: Trace) -> list[dict]:
    """master.jsonl in file order; for a Trace built in memory, superstep lines and events merged by
    superstep (a hang or recovery before its superstep's line, a checkpoint after it)."""
    if trace.master_lines:
        return trace.master_lines
    keyed = [((int(m.get("superstep", 0)), 1), m) for m in trace.master]
    for e in trace.events:
        after = e.get("event") == "checkpoint"
        keyed.append(((int(_num(e.get("superstep"))), 2 if after else 0), e))
    return [x for _, x in sorted(keyed, key=lambda kv: kv[0])]


# ---------------------------------------------------------------------------------------------
# loading


def _parse_jsonl(data: bytes, where: str) -> list[dict]:
    text = data.decode("utf-8", errors="replace")
    lines = text.split("\n")
    out: list[dict] = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) - 1:  # no newline after it: a line still being written
                continue
            raise UsageError(f"{where} line {i + 1}: not a JSON record") from None
        if not isinstance(rec, dict):
            raise UsageError(f"{where} line {i + 1}: not a JSON object")
        out.append(rec)
    return out


def load_trace(run: str) -> Trace:
    """Read ``RUN/trace/worker-K.jsonl`` and ``RUN/trace/master.jsonl``."""
    try:
        run_dir = RunDir(run, create=False)
        names = run_dir.list("trace")
        workers: dict[int, list[dict]] = {}
        for name in names:
            m = _WORKER_FILE.match(name)
            if m:
                rel = f"trace/{name}"
                recs = _parse_jsonl(run_dir.read_bytes(rel), f"{run}/{rel}")
                recs = [r for r in recs if isinstance(r.get("superstep"), int)]
                recs.sort(key=lambda r: (r["superstep"], _num(r.get("start"))))
                workers[int(m.group(1))] = recs
        lines: list[dict] = []
        if "master.jsonl" in names:
            lines = _parse_jsonl(run_dir.read_bytes("trace/master.jsonl"), f"{run}/trace/master.jsonl")
    except UsageError:
        raise
    except MarianaError as exc:  # StorageError: unreadable run directory
        raise UsageError(str(exc)) from None
    if not workers and not lines:
        raise UsageError(f"{run}/trace: no trace files (was the run traced?)")
    events = [r for r in lines if "event" in r]
    master = sorted((r for r in lines if "event" not in r and isinstance(r.get("superstep"), int)),
                    key=lambda r: r["superstep"])
    return Trace(workers=dict(sorted(workers.items())), master=master, events=events, url=run, master_lines=lines)


# ---------------------------------------------------------------------------------------------
# helpers


def _num(v: Any, default: float = 0.0) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return default
    return float(v)


def _total(d: Any) -> int:
    return int(sum(_num(v) for v in d.values())) if isinstance(d, dict) else 0


def _median(xs: Iterable[float]) -> float | None:
    xs = list(xs)
    return statistics.median(xs) if xs else None


def _clean(v: Any) -> Any:
    """JSON-safe: numpy scalars to Python, non-finite floats to "nan"/"inf"/"-inf", keys to str."""
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float):
        return v if math.isfinite(v) else str(v)
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if isinstance(v, np.ndarray):
        return _clean(v.tolist())
    return v


def _phases(rec: dict) -> dict[str, float]:
    return {p: _num(rec.get(f"{p}_s")) for p in PHASES}


def _superstep_line(trace: Trace, s: int, recs: dict[int, dict], line: Any = False) -> dict:
    """The master line of superstep ``s`` (``line``, when the caller looked it up), or one derived
    from the worker records."""
    line = trace.master_line(s) if line is False else line
    if line is not None:
        return {**line, "derived": False}
    starts = [_num(r.get("start")) for r in recs.values() if "start" in r]
    start = min(starts) if starts else 0.0
    arrivals = {k: _num(r.get("end")) - start for k, r in recs.items() if "end" in r}
    ends = [_num(r.get("end")) + _num(r.get("barrier_s")) for r in recs.values() if "end" in r]
    end = max(ends) if ends else start
    out: dict[str, Any] = {"superstep": s, "start": start, "end": end, "wall_s": end - start,
                           "arrivals": {str(k): v for k, v in arrivals.items()}, "derived": True}
    if arrivals:
        straggler = max(arrivals, key=lambda k: (arrivals[k], -k))
        out["straggler"] = straggler
        out["lag_s"] = arrivals[straggler] - statistics.median(arrivals.values())
    return out


def _straggler(line: dict) -> int | None:
    s = line.get("straggler")
    try:
        return None if s is None or isinstance(s, bool) else int(s)
    except (TypeError, ValueError):
        return None


def _slowest_vertex(recs: dict[int, dict]) -> dict | None:
    best: dict | None = None
    for k, r in recs.items():
        for entry in r.get("slowest") or []:
            if isinstance(entry, (list, tuple)) and len(entry) >= 2:
                secs = _num(entry[1])
                if best is None or secs > best["seconds"]:
                    best = {"vertex": entry[0], "seconds": secs, "worker": k}
    return best


def _range(sups: list[int]) -> str:
    return f"{sups[0]}..{sups[-1]}" if sups else "empty"


def _check_superstep(trace: Trace, superstep: int) -> list[int]:
    sups = trace.supersteps()
    if superstep not in sups:
        raise UsageError(f"superstep {superstep} not in the trace ({_range(sups)})")
    return sups


# ---------------------------------------------------------------------------------------------
# summary


def summary(trace: Trace, top: int = 5) -> dict:
    """The whole run at a glance (JSON-able); ``top`` bounds the lists (flags, slowest supersteps)."""
    sups = trace.supersteps()
    by_ss = trace.records_by_superstep()
    per_ss: dict[int, dict[int, dict]] = {s: by_ss.get(s, {}) for s in sups}
    masters = {m["superstep"]: m for m in trace.master if "superstep" in m}  # the last line of each wins
    lines = {s: _superstep_line(trace, s, per_ss[s], masters.get(s)) for s in sups}
    reruns = sum(len(recs) for recs in trace.workers.values()) - sum(len(r) for r in per_ss.values())
    workers = sorted(trace.workers)
    msgs = {s: sum(_total(r.get("messages_out")) for r in per_ss[s].values()) for s in sups}
    byts = {s: sum(_total(r.get("bytes_out")) for r in per_ss[s].values()) for s in sups}
    wall, elapsed = _wall(lines)
    slowest_supersteps = _slowest_supersteps(sups, lines, per_ss, top)
    hosts = sorted({str(r.get("host")) for recs in trace.workers.values() for r in recs if r.get("host")})
    return _clean({
        "run": trace.url, "top": top, "workers": len(workers), "hosts": hosts, "supersteps": len(sups),
        "first_superstep": sups[0] if sups else None, "last_superstep": sups[-1] if sups else None,
        "reruns": reruns, "wall_s": wall, "elapsed_s": elapsed, "phases": _phase_shares(per_ss),
        "messages": _volume(msgs), "bytes": _volume(byts), "stragglers": _stragglers(workers, sups, lines, per_ss),
        "slowest_superstep": slowest_supersteps[0] if slowest_supersteps else None,
        "slowest_supersteps": slowest_supersteps, "flags": _flags(sups, per_ss, top),
        "dropped": _dropped(sups, per_ss), "events": _events(trace), "memory": _memory(trace),
    })


def _phase_shares(per_ss: dict[int, dict[int, dict]]) -> dict[str, dict[str, float]]:
    """Seconds in each phase, summed over workers and supersteps, and each phase's share."""
    phase_s = {p: 0.0 for p in PHASES}
    for recs in per_ss.values():
        for r in recs.values():
            for p, v in _phases(r).items():
                phase_s[p] += v
    all_phases = sum(phase_s.values())
    return {p: {"s": v, "share": (v / all_phases) if all_phases > 0 else 0.0} for p, v in phase_s.items()}


def _volume(d: dict[int, int]) -> dict:
    """Total, mean and largest per superstep of a per-superstep count (messages, bytes)."""
    if not d:
        return {"total": 0, "mean_per_superstep": 0.0, "max_per_superstep": 0, "max_superstep": None}
    s_max = max(d, key=lambda s: (d[s], -s))
    return {"total": sum(d.values()), "mean_per_superstep": sum(d.values()) / len(d),
            "max_per_superstep": d[s_max], "max_superstep": s_max}


def _wall(lines: dict[int, dict]) -> tuple[float, float]:
    """(sum of the supersteps' wall times, first start to last end)."""
    wall = sum(_num(line.get("wall_s")) for line in lines.values())
    starts = [_num(line.get("start")) for line in lines.values() if "start" in line]
    ends = [_num(line.get("end")) for line in lines.values() if "end" in line]
    return wall, (max(ends) - min(starts)) if starts and ends else 0.0


def _stragglers(workers: list[int], sups: list[int], lines: dict[int, dict],
                per_ss: dict[int, dict[int, dict]]) -> list[dict]:
    """Per worker: how often it was the straggler, its lag, its compute against the median, and the
    host(s) it ran on when it straggled (``host``: the most frequent; a worker replaced after a loss
    may have straggled on several)."""
    strag: dict[int, dict[str, Any]] = {k: {"worker": k, "count": 0, "supersteps": [], "lags": [], "ratios": [],
                                            "excess": [], "on": {}} for k in workers}
    for s in sups:
        line = lines[s]
        k = _straggler(line)
        if k is None:
            continue
        row = strag.setdefault(k, {"worker": k, "count": 0, "supersteps": [], "lags": [], "ratios": [], "excess": [],
                                   "on": {}})
        row["count"] += 1
        row["supersteps"].append(s)
        if "lag_s" in line:
            row["lags"].append(_num(line.get("lag_s")))
        recs = per_ss[s]
        host = recs.get(k, {}).get("host")
        if host:
            row["on"][str(host)] = row["on"].get(str(host), 0) + 1
        med = _median(_num(r.get("compute_s")) for r in recs.values())
        if k in recs and med is not None:
            mine = _num(recs[k].get("compute_s"))
            row["excess"].append(mine - med)
            if med > 0:
                row["ratios"].append(mine / med)
    stragglers = []
    for row in sorted(strag.values(), key=lambda r: (-r["count"], r["worker"])):
        lags, ratios, excess, on = row.pop("lags"), row.pop("ratios"), row.pop("excess"), row.pop("on")
        if on:  # hosts by how often the worker straggled there, most first
            row["hosts"] = {h: n for h, n in sorted(on.items(), key=lambda kv: (-kv[1], kv[0]))}
            row["host"] = next(iter(row["hosts"]))
        row["lag_mean_s"] = sum(lags) / len(lags) if lags else None
        row["lag_max_s"] = max(lags) if lags else None
        row["compute_vs_median"] = sum(ratios) / len(ratios) if ratios else None
        row["compute_excess_s"] = sum(excess) / len(excess) if excess else None
        stragglers.append(row)
    return stragglers


def _slowest_supersteps(sups: list[int], lines: dict[int, dict], per_ss: dict[int, dict[int, dict]],
                        top: int) -> list[dict]:
    """The ``top`` supersteps with the longest wall time, with their straggler and slowest vertex."""
    by_wall = sorted(sups, key=lambda s: (-_num(lines[s].get("wall_s")), s))
    slowest_supersteps = []
    for s in by_wall[:max(top, 1)]:
        line = lines[s]
        slowest_supersteps.append({"superstep": s, "wall_s": _num(line.get("wall_s")), "straggler": _straggler(line),
                                   "lag_s": line.get("lag_s"), "slowest_vertex": _slowest_vertex(per_ss[s]),
                                   "derived": line.get("derived", False)})
    return slowest_supersteps


def _flags(sups: list[int], per_ss: dict[int, dict[int, dict]], top: int) -> dict:
    """NaN/Inf flags: counts by flag, key and vertex, the first ones."""
    flags_all = []
    for s in sups:
        for k, r in per_ss[s].items():
            for f in r.get("flags") or []:
                if isinstance(f, dict):
                    flags_all.append({"superstep": s, "worker": k, **f})
    by_flag: dict[str, int] = {}
    by_key: dict[str, int] = {}
    vertices: dict[str, int] = {}
    for f in flags_all:
        by_flag[str(f.get("flag"))] = by_flag.get(str(f.get("flag")), 0) + 1
        by_key[str(f.get("key"))] = by_key.get(str(f.get("key")), 0) + 1
        vertices[str(f.get("vertex"))] = vertices.get(str(f.get("vertex")), 0) + 1
    flags = {"total": len(flags_all), "by_flag": by_flag, "by_key": by_key, "vertices": len(vertices),
             "first_superstep": flags_all[0]["superstep"] if flags_all else None, "first": flags_all[:top],
             "top_vertices": [{"vertex": v, "count": n} for v, n in
                              sorted(vertices.items(), key=lambda kv: (-kv[1], kv[0]))[:top]]}
    return flags


def _dropped(sups: list[int], per_ss: dict[int, dict[int, dict]]) -> dict:
    """Dropped messages by kind and worker, and the first superstep of each kind."""
    dropped_by_kind: dict[str, int] = {}
    dropped_by_worker: dict[str, int] = {}
    dropped_first: dict[str, int] = {}
    for s in sups:
        for k, r in per_ss[s].items():
            d = r.get("dropped") or {}
            if not isinstance(d, dict):
                continue
            for kind, n in d.items():
                n = int(_num(n))
                if n <= 0:
                    continue
                dropped_by_kind[kind] = dropped_by_kind.get(kind, 0) + n
                dropped_by_worker[str(k)] = dropped_by_worker.get(str(k), 0) + n
                dropped_first.setdefault(kind, s)
    dropped = {"total": sum(dropped_by_kind.values()), "by_kind": dropped_by_kind, "by_worker": dropped_by_worker,
               "first_superstep": dropped_first}
    return dropped


#: Linux counts resident pages in per-thread caches, folded in every 64 faults: a process's
#: VmHWM reads can differ by a few hundred KB, and even fall. A record within this of the peak shows it.
PEAK_SLACK = 1 << 20


def _memory(trace: Trace) -> list[dict]:
    """Per process (a worker's, or the one every worker of LocalRuntime shares; a worker restarted
    by recovery is a new one), largest peak first: its peak resident memory, the superstep whose
    record first shows it (within ``PEAK_SLACK``: where it was reached, or during the sends just
    before; a record is read when its worker reports), and the resident memory at its last record."""
    procs: dict[tuple[Any, Any], list[tuple[int, dict]]] = {}
    for k, recs in trace.workers.items():
        for r in recs:
            if "peak_rss_bytes" in r:
                procs.setdefault((r.get("host"), r.get("pid")), []).append((k, r))
    out = []
    for (host, pid), held in procs.items():
        held.sort(key=lambda kr: (_num(kr[1].get("start")), kr[0]))
        peak = max(int(_num(r["peak_rss_bytes"])) for _, r in held)
        first = next(r for _, r in held if int(_num(r["peak_rss_bytes"])) >= peak - PEAK_SLACK)
        out.append({"workers": sorted({k for k, _ in held}), "host": host, "pid": pid, "peak_rss_bytes": peak,
                    "peak_superstep": first.get("superstep"), "last_rss_bytes": held[-1][1].get("rss_bytes")})
    return sorted(out, key=lambda m: (-m["peak_rss_bytes"], m["workers"]))


def _events(trace: Trace) -> dict:
    """The master's events: hangs, recoveries, checkpoints (and the failed ones), the silences
    ridden through, the masters that ran the job (one more after each failover), others."""
    hangs = [e for e in trace.events if e.get("event") == "hang"]
    recoveries = [e for e in trace.events if e.get("event") == "recovery"]
    checkpoints = [e for e in trace.events if e.get("event") == "checkpoint"]
    failed = [e for e in checkpoints if not e.get("ok", True)]
    silences = [e for e in trace.events if e.get("event") == "silence"]
    masters = [e for e in trace.events if e.get("event") == "master"]
    other = [e for e in trace.events if e.get("event") not in ("hang", "recovery", "checkpoint", "silence", "master")]
    events = {"hangs": hangs, "recoveries": recoveries, "checkpoints": len(checkpoints),
              "checkpoints_failed": failed, "silences": silences, "masters": masters, "other": other}
    return events


def _f(v: Any, fmt: str = ".3f", none: str = "-") -> str:
    if v is None:
        return none
    if isinstance(v, str):
        return v
    return format(v, fmt)


def _t(v: Any, signed: bool = False) -> str:
    """A duration in seconds, in the unit that keeps it readable (s, ms, us)."""
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    sign = ("+" if v >= 0 else "-") if signed else ("-" if v < 0 else "")
    a = abs(v)
    if a == 0:
        return f"{sign}0 s"
    if a >= 1:
        return f"{sign}{a:.3f} s"
    if a >= 1e-3:
        return f"{sign}{a * 1e3:.2f} ms"
    return f"{sign}{a * 1e6:.1f} us"


def _size(n: Any) -> str:
    n = _num(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def _table(header: list[str], rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    out = []
    for row in [header, *rows]:
        cells = [str(x).ljust(w) if i == 0 else str(x).rjust(w) for i, (x, w) in enumerate(zip(row, widths))]
        out.append((indent + "  ".join(cells)).rstrip())
    return out


def _flag_text(f: dict) -> str:
    where = f.get("where")
    return (f"{f.get('flag')} at superstep {f.get('superstep')} on worker {f.get('worker')}: "
            f"vertex {f.get('vertex')!r} {where + ' ' if where else ''}{f.get('key')}")


def _hang_text(e: dict) -> str:
    missing = []
    for m in e.get("missing") or []:
        if isinstance(m, dict):
            what = f"worker {m.get('worker')}"
            if m.get("host"):
                what += f" ({m.get('host')})"
            if m.get("state"):
                what += f" {m.get('state')}"
            if m.get("vertex") is not None:
                what += f" vertex {m.get('vertex')!r}"
            if m.get("for_s") is not None:
                what += f" for {_t(m.get('for_s'))}"
            missing.append(what)
    tail = f": {'; '.join(missing)}" if missing else ""
    return f"hang at superstep {e.get('superstep')} after {_t(e.get('elapsed_s'))}{tail}"


def _event_text(e: dict) -> str:
    kind = e.get("event")
    if kind == "hang":
        return _hang_text(e)
    if kind == "recovery":
        lost = e.get("lost_hosts") or {}
        by = e.get("replaced_by") or {}
        who = ", ".join(f"worker {i} ({h}{' -> ' + str(by[i]) if i in by else ''})" for i, h in lost.items()) \
            or f"worker {e.get('lost')}"
        took = f" in {_t(e.get('recover_s'))}" if e.get("recover_s") is not None else ""
        return (f"recovery at superstep {e.get('superstep')}: {who} lost, rolled back to "
                f"{e.get('rollback_to')}{took} (restart {e.get('restart')})")
    if kind == "silence":
        return (f"silence at superstep {e.get('superstep')}: worker {e.get('worker')} ({e.get('host')}) "
                f"silent for {_t(e.get('silent_s'))}, ridden through")
    if kind == "master":
        resume = e.get("resume")
        how = f"resumed from the checkpoint at superstep {resume}" if resume is not None else "started"
        return f"master on {e.get('host')} (pid {e.get('pid')}) {how}, {len(e.get('workers') or {})} workers"
    if kind == "checkpoint":
        ok = "ok" if e.get("ok", True) else f"FAILED: {e.get('error', '')}"
        return f"checkpoint at superstep {e.get('superstep')} {ok}"
    rest = {k: v for k, v in e.items() if k != "event"}
    return f"{kind} {json.dumps(rest, default=str)}"


def format_summary(s: dict) -> str:
    """The summary as one readable table."""
    out: list[str] = []
    run = f"{s.get('run')}: " if s.get("run") else ""
    rng = f" ({s['first_superstep']}..{s['last_superstep']})" if s.get("supersteps") else ""
    hosts = f" on {len(s['hosts'])} host{'s' if len(s['hosts']) != 1 else ''}" if s.get("hosts") else ""
    out.append(f"{run}{s['supersteps']} supersteps{rng}, {s['workers']} workers{hosts}, "
               f"wall {_t(s['wall_s'])} (elapsed {_t(s['elapsed_s'])})")
    m, b = s["messages"], s["bytes"]
    out.append(f"messages {m['total']:,} (mean {_f(m['mean_per_superstep'], ',.1f')} / max "
               f"{m['max_per_superstep']:,} per superstep), bytes {_size(b['total'])} (mean "
               f"{_size(b['mean_per_superstep'])} / max {_size(b['max_per_superstep'])} per superstep)")
    if s.get("reruns"):
        out.append(f"{s['reruns']} superseded records of re-run supersteps (the last of each counts)")

    out.append("")
    out.append("time by phase (summed over workers)")
    rows = [[p, _t(v["s"]), f"{100 * v['share']:.1f}%"] for p, v in s["phases"].items()]
    total = sum(v["s"] for v in s["phases"].values() if isinstance(v["s"], (int, float)))
    rows.append(["total", _t(total), "100.0%" if total > 0 else "-"])
    out.extend(_table(["phase", "time", "share"], rows))

    out.append("")
    strag = [r for r in s["stragglers"] if r["count"] > 0]
    top = max(int(s.get("top") or 5), 1)
    if strag:
        out.append("stragglers (last to arrive at the barrier)")
        rows = []
        for r in strag[:top]:
            sups = ",".join(map(str, r["supersteps"][:8])) + (",..." if len(r["supersteps"]) > 8 else "")
            vs = "-" if r["compute_vs_median"] is None else f"{r['compute_vs_median']:.2f}x"
            if r["compute_excess_s"] is not None:
                vs += f" ({_t(r['compute_excess_s'], signed=True)})"
            who = f"worker {r['worker']}" + (f" ({r['host']})" if r.get("host") else "")
            rows.append([who, str(r["count"]), sups, _t(r["lag_mean_s"]), _t(r["lag_max_s"]), vs])
        out.extend(_table(["worker", "times", "supersteps", "lag mean", "lag max", "compute vs median"], rows))
        if len(strag) > top:
            rest = strag[top:]
            out.append(f"  ... {len(rest)} more workers straggled {sum(r['count'] for r in rest)} times")
    else:
        out.append("stragglers: none recorded")

    out.append("")
    ss = s.get("slowest_superstep")
    if ss:
        line = f"slowest superstep {ss['superstep']}: wall {_t(ss['wall_s'])}"
        if ss.get("straggler") is not None:
            line += f", straggler worker {ss['straggler']}"
            if ss.get("lag_s") is not None:
                line += f" (lag {_t(ss['lag_s'])})"
        sv = ss.get("slowest_vertex")
        if sv:
            line += f", slowest vertex {sv['vertex']!r} ({_t(sv['seconds'])} on worker {sv['worker']})"
        out.append(line)

    fl = s["flags"]
    if fl["total"]:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(fl["by_flag"].items()))
        out.append(f"flags: {fl['total']} ({kinds}) on {fl['vertices']} vertices, first at superstep "
                   f"{fl['first_superstep']}")
        for f in fl["first"]:
            out.append(f"  {_flag_text(f)}")
        if fl["total"] > len(fl["first"]):
            out.append(f"  ... {fl['total'] - len(fl['first'])} more")
    else:
        out.append("flags: no NaN/Inf seen")

    mem = s.get("memory") or []
    if mem:
        out.append("memory per process (resident; largest peak first)")
        rows = [[",".join(map(str, m["workers"])), str(m.get("host") or "-"), str(m.get("pid") or "-"),
                 _size(m["peak_rss_bytes"]), str(m.get("peak_superstep")), _size(m.get("last_rss_bytes"))
                 if m.get("last_rss_bytes") is not None else "-"] for m in mem[:top]]
        out.extend(_table(["workers", "host", "pid", "peak", "at superstep", "at the end"], rows))
        if len(mem) > top:
            out.append(f"  ... {len(mem) - top} more processes")
        out.append("")

    d = s["dropped"]
    if d["total"]:
        kinds = ", ".join(f"{k} {n} (first at superstep {d['first_superstep'].get(k)})"
                          for k, n in sorted(d["by_kind"].items()))
        out.append(f"dropped messages: {d['total']}: {kinds}")
    else:
        out.append("dropped messages: none")

    ev = s["events"]
    failed = ev["checkpoints_failed"]
    out.append(f"events: {len(ev['hangs'])} hang{'s' if len(ev['hangs']) != 1 else ''}, "
               f"{len(ev['recoveries'])} recover{'ies' if len(ev['recoveries']) != 1 else 'y'}, "
               f"{ev['checkpoints']} checkpoints ({len(failed)} failed)"
               + (f", {len(ev['silences'])} silences ridden through" if ev.get("silences") else "")
               + (f", {len(ev['masters'])} masters" if len(ev.get("masters") or []) > 1 else ""))
    masters = ev.get("masters") or []
    for e in [*(masters if len(masters) > 1 else []), *ev["hangs"], *ev["recoveries"], *ev.get("silences", []),
              *failed, *ev["other"]]:
        out.append(f"  {_event_text(e)}")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------
# the CLI's entry points: (text to print, JSON-able dict)


def cmd_summary(run: str, as_json: bool = False, top: int = 5) -> tuple[str, dict]:
    """``mariana trace summary RUN [--json]``."""
    d = summary(load_trace(run), top=top)
    totals = run_counters(run)
    if totals:
        d["counters"] = totals
    text = format_summary(d) + (counters_text(totals) if totals else "")
    return (json.dumps(d, indent=2) + "\n" if as_json else text), d


# ---------------------------------------------------------------------------------------------
# counters (Mariana's): aggregates named counter/NAME, summed over the run


def counters(metrics: list[dict]) -> dict[str, Any]:
    """Totals of every ``counter/NAME`` aggregate of ``metrics.jsonl`` lines, and samples per
    second of superstep wall time when there is a ``counter/samples``."""
    totals: dict[str, float] = {}
    for line in metrics:
        for key, value in line.items():
            if key.startswith("counter/") and isinstance(value, (int, float)) and not isinstance(value, bool):
                name = key[len("counter/"):]
                totals[name] = totals.get(name, 0) + value
    out: dict[str, Any] = {k: int(v) for k, v in sorted(totals.items())}
    wall = sum(_num(line.get("wall_s")) for line in metrics)
    if wall > 0 and "samples" in totals:
        out["samples_per_s"] = round(totals["samples"] / wall, 1)
    return out


def run_counters(run: str) -> dict[str, Any]:
    """``counters`` of ``RUN/metrics.jsonl`` (empty when the run has none)."""
    try:
        run_dir = RunDir(run, create=False)
        if not run_dir.exists("metrics.jsonl"):
            return {}
        return counters(run_dir.read_jsonl("metrics.jsonl"))
    except MarianaError:
        return {}


def counters_text(totals: dict[str, Any]) -> str:
    rows = [[name, f"{value:,}" if isinstance(value, int) else str(value)] for name, value in totals.items()]
    return "\n".join(["", "counters:", *_table(["counter", "total"], rows, indent="  ")]) + "\n"
