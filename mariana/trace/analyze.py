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
import posixpath
import re
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

from ..engine.tracing import capture_path as capture_rel
from ..errors import MarianaError, UsageError
from ..storage import RunDir
from ..storage.partfile import unpack

__all__ = [
    "PHASES", "Trace", "load_trace", "summary", "format_summary", "show", "format_show",
    "cmd_summary", "cmd_show", "capture_rel",
]

#: The phases of a superstep on a worker, in the order they happen.
PHASES = ("compute", "combine", "encode", "send", "wait", "barrier")

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


def _list_trace(run_dir: RunDir) -> list[str]:
    try:
        names = run_dir.fs.ls(run_dir.path("trace"), detail=False)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise UsageError(f"{run_dir.url}/trace: cannot list: {exc}") from None
    return sorted(posixpath.basename(str(n).rstrip("/")) for n in names)


def load_trace(run: str) -> Trace:
    """Read ``RUN/trace/worker-K.jsonl`` and ``RUN/trace/master.jsonl``."""
    try:
        run_dir = RunDir(run, create=False)
        names = _list_trace(run_dir)
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
        out = dict(line)
        out["derived"] = False
        return out
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

    # time by phase, summed over workers
    phase_s = {p: 0.0 for p in PHASES}
    for recs in per_ss.values():
        for r in recs.values():
            for p, v in _phases(r).items():
                phase_s[p] += v
    all_phases = sum(phase_s.values())
    phases = {p: {"s": v, "share": (v / all_phases) if all_phases > 0 else 0.0} for p, v in phase_s.items()}

    # messages and bytes
    msgs = {s: sum(_total(r.get("messages_out")) for r in per_ss[s].values()) for s in sups}
    byts = {s: sum(_total(r.get("bytes_out")) for r in per_ss[s].values()) for s in sups}

    def volume(d: dict[int, int]) -> dict:
        if not d:
            return {"total": 0, "mean_per_superstep": 0.0, "max_per_superstep": 0, "max_superstep": None}
        s_max = max(d, key=lambda s: (d[s], -s))
        return {"total": sum(d.values()), "mean_per_superstep": sum(d.values()) / len(d),
                "max_per_superstep": d[s_max], "max_superstep": s_max}

    # wall time
    wall = sum(_num(line.get("wall_s")) for line in lines.values())
    starts = [_num(line.get("start")) for line in lines.values() if "start" in line]
    ends = [_num(line.get("end")) for line in lines.values() if "end" in line]
    elapsed = (max(ends) - min(starts)) if starts and ends else 0.0

    # stragglers
    workers = sorted(trace.workers)
    strag: dict[int, dict[str, Any]] = {k: {"worker": k, "count": 0, "supersteps": [], "lags": [], "ratios": [],
                                            "excess": []} for k in workers}
    for s in sups:
        line = lines[s]
        k = _straggler(line)
        if k is None:
            continue
        row = strag.setdefault(k, {"worker": k, "count": 0, "supersteps": [], "lags": [], "ratios": [], "excess": []})
        row["count"] += 1
        row["supersteps"].append(s)
        if "lag_s" in line:
            row["lags"].append(_num(line.get("lag_s")))
        recs = per_ss[s]
        med = _median(_num(r.get("compute_s")) for r in recs.values())
        if k in recs and med is not None:
            mine = _num(recs[k].get("compute_s"))
            row["excess"].append(mine - med)
            if med > 0:
                row["ratios"].append(mine / med)
    stragglers = []
    for row in sorted(strag.values(), key=lambda r: (-r["count"], r["worker"])):
        lags, ratios, excess = row.pop("lags"), row.pop("ratios"), row.pop("excess")
        row["lag_mean_s"] = sum(lags) / len(lags) if lags else None
        row["lag_max_s"] = max(lags) if lags else None
        row["compute_vs_median"] = sum(ratios) / len(ratios) if ratios else None
        row["compute_excess_s"] = sum(excess) / len(excess) if excess else None
        stragglers.append(row)

    # slowest supersteps
    by_wall = sorted(sups, key=lambda s: (-_num(lines[s].get("wall_s")), s))
    slowest_supersteps = []
    for s in by_wall[:max(top, 1)]:
        line = lines[s]
        slowest_supersteps.append({"superstep": s, "wall_s": _num(line.get("wall_s")), "straggler": _straggler(line),
                                   "lag_s": line.get("lag_s"), "slowest_vertex": _slowest_vertex(per_ss[s]),
                                   "derived": line.get("derived", False)})

    # flags
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

    # dropped messages
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

    # events
    hangs = [e for e in trace.events if e.get("event") == "hang"]
    recoveries = [e for e in trace.events if e.get("event") == "recovery"]
    checkpoints = [e for e in trace.events if e.get("event") == "checkpoint"]
    failed = [e for e in checkpoints if not e.get("ok", True)]
    other = [e for e in trace.events if e.get("event") not in ("hang", "recovery", "checkpoint")]
    events = {"hangs": hangs, "recoveries": recoveries, "checkpoints": len(checkpoints),
              "checkpoints_failed": failed, "other": other}

    hosts = sorted({str(r.get("host")) for recs in trace.workers.values() for r in recs if r.get("host")})
    return _clean({
        "run": trace.url, "top": top, "workers": len(workers), "hosts": hosts, "supersteps": len(sups),
        "first_superstep": sups[0] if sups else None, "last_superstep": sups[-1] if sups else None,
        "reruns": reruns, "wall_s": wall, "elapsed_s": elapsed, "phases": phases,
        "messages": volume(msgs), "bytes": volume(byts), "stragglers": stragglers,
        "slowest_superstep": slowest_supersteps[0] if slowest_supersteps else None,
        "slowest_supersteps": slowest_supersteps, "flags": flags, "dropped": dropped, "events": events,
    })


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
        return (f"recovery at superstep {e.get('superstep')}: worker {e.get('lost')} lost, rolled back to "
                f"{e.get('rollback_to')} (restart {e.get('restart')})")
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
            rows.append([f"worker {r['worker']}", str(r["count"]), sups, _t(r["lag_mean_s"]), _t(r["lag_max_s"]), vs])
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
               f"{ev['checkpoints']} checkpoints ({len(failed)} failed)")
    for e in [*ev["hangs"], *ev["recoveries"], *failed, *ev["other"]]:
        out.append(f"  {_event_text(e)}")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------
# show


def _arrays(value: Any, key: str, out: list[tuple[str, np.ndarray]], depth: int = 0) -> None:
    """(path, array) for every array or number inside a payload."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "biufc":
            out.append((key, value))
    elif isinstance(value, (bool, np.bool_)):
        return
    elif isinstance(value, (int, float, np.number)):
        out.append((key, np.asarray(value)))
    elif depth < 8 and isinstance(value, dict):
        for k, v in value.items():
            _arrays(v, f"{key}.{k}", out, depth + 1)
    elif depth < 8 and isinstance(value, (list, tuple)):
        if value and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value):
            out.append((key, np.asarray(value)))
        else:
            for i, v in enumerate(value):
                _arrays(v, f"{key}[{i}]", out, depth + 1)


def _array_stats(arrays: list[tuple[str, np.ndarray]]) -> dict[str, dict]:
    """path -> shapes, dtypes, count, L2 norms (min/max/mean over finite ones) and non-finite count."""
    acc: dict[str, dict[str, Any]] = {}
    for path, a in arrays:
        row = acc.setdefault(path, {"count": 0, "shapes": [], "dtypes": [], "norms": [], "nonfinite": 0})
        row["count"] += 1
        shape = list(a.shape)
        if shape not in row["shapes"]:
            row["shapes"].append(shape)
        if str(a.dtype) not in row["dtypes"]:
            row["dtypes"].append(str(a.dtype))
        with np.errstate(all="ignore"):
            norm = float(np.linalg.norm(a.astype(np.complex128 if a.dtype.kind == "c" else np.float64).ravel()))
        row["norms"].append(norm)
        if a.dtype.kind in "fc" and not np.isfinite(a).all():
            row["nonfinite"] += 1
    out = {}
    for path, row in acc.items():
        norms = row.pop("norms")
        finite = [n for n in norms if math.isfinite(n)]
        row["l2"] = norms[0] if len(norms) == 1 else None
        row["l2_min"] = min(finite) if finite else None
        row["l2_max"] = max(finite) if finite else None
        row["l2_mean"] = sum(finite) / len(finite) if finite else None
        out[path] = row
    return out


def _group_messages(msgs: Any) -> list[dict]:
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    order: list[tuple[str, str]] = []
    for m in msgs or []:
        if not isinstance(m, (list, tuple)) or len(m) < 3:
            continue
        peer, tag, payload = m[0], m[1], m[2]
        key = (str(tag), str(peer))
        if key not in groups:
            groups[key] = {"tag": tag, "peer": peer, "count": 0, "arrays": []}
            order.append(key)
        g = groups[key]
        g["count"] += 1
        _arrays(payload, "payload", g["arrays"])
    out = []
    for key in sorted(order):
        g = groups[key]
        g["arrays"] = _array_stats(g["arrays"])
        out.append(g)
    return out


def _capture_summary(cap: dict) -> dict:
    inbox, outbox = cap.get("inbox") or [], cap.get("outbox") or []
    extra: dict[str, dict] = {}
    for name in ("aggregates", "broadcasts"):
        found: list[tuple[str, np.ndarray]] = []
        value = cap.get(name) or {}
        if isinstance(value, dict):
            for k, v in value.items():
                _arrays(v, str(k), found)
        extra[name] = {"names": sorted(map(str, value)) if isinstance(value, dict) else [],
                       "arrays": _array_stats(found)}
    return {"superstep": cap.get("superstep"), "vertex": cap.get("vertex"),
            "inbox": {"count": len(inbox), "groups": _group_messages(inbox)},
            "outbox": {"count": len(outbox), "groups": _group_messages(outbox)}, **extra}


def _peers(r: dict) -> list[dict]:
    keys: set[str] = set()
    for f in ("messages_out", "bytes_out", "messages_in", "bytes_in"):
        if isinstance(r.get(f), dict):
            keys.update(map(str, r[f]))
    rows = []
    for p in sorted(keys, key=lambda x: (not x.lstrip("-").isdigit(), int(x) if x.lstrip("-").isdigit() else 0, x)):
        row: dict[str, Any] = {"peer": int(p) if p.lstrip("-").isdigit() else p}
        for f in ("messages_out", "bytes_out", "messages_in", "bytes_in"):
            d = r.get(f) if isinstance(r.get(f), dict) else {}
            row[f] = int(_num({str(k): v for k, v in d.items()}.get(p, 0)))
        rows.append(row)
    return rows


def show(trace: Trace, superstep: int, worker: int | None = None, vertex: str | None = None,
         run: str | None = None) -> dict:
    """Everything known about one superstep (JSON-able); narrowed to ``worker`` and/or ``vertex``."""
    _check_superstep(trace, superstep)
    recs = trace.records(superstep)
    if worker is not None:
        if worker not in trace.workers:
            known = ", ".join(map(str, trace.workers)) or "none"
            raise UsageError(f"worker {worker} not in the trace (workers: {known})")
        if worker not in recs:
            raise UsageError(f"worker {worker} has no record of superstep {superstep}")
        recs = {worker: recs[worker]}
    line = _superstep_line(trace, superstep, trace.records(superstep))
    workers = []
    for k, r in recs.items():
        workers.append({
            "worker": k, "host": r.get("host"), "pid": r.get("pid"), "start": r.get("start"), "end": r.get("end"),
            "clock_offset_s": r.get("clock_offset_s"), "phases": _phases(r),
            "vertices_run": r.get("vertices_run"),
            "messages_out": _total(r.get("messages_out")), "bytes_out": _total(r.get("bytes_out")),
            "messages_in": _total(r.get("messages_in")), "bytes_in": _total(r.get("bytes_in")),
            "peers": _peers(r),
            "slowest": [{"vertex": e[0], "seconds": e[1]} for e in r.get("slowest") or []
                        if isinstance(e, (list, tuple)) and len(e) >= 2],
            "dropped": r.get("dropped") or {}, "flags": r.get("flags") or [],
        })
    events = [e for e in trace.events if e.get("superstep") == superstep]
    out: dict[str, Any] = {"run": run or trace.url, "superstep": superstep, "master": line, "workers": workers,
                           "events": events}
    if vertex is not None:
        out["vertex"] = _show_vertex(trace, superstep, recs, str(vertex), run)
    return _clean(out)


def _show_vertex(trace: Trace, superstep: int, recs: dict[int, dict], vertex: str, run: str | None) -> dict:
    slowest, flags = [], []
    for k, r in recs.items():
        for rank, e in enumerate(r.get("slowest") or []):
            if isinstance(e, (list, tuple)) and len(e) >= 2 and str(e[0]) == vertex:
                slowest.append({"worker": k, "seconds": e[1], "rank": rank + 1})
        for f in r.get("flags") or []:
            if isinstance(f, dict) and str(f.get("vertex")) == vertex:
                flags.append({"worker": k, **f})
    hangs = [m for e in trace.events if e.get("event") == "hang" and e.get("superstep") == superstep
             for m in e.get("missing") or [] if isinstance(m, dict) and str(m.get("vertex")) == vertex]
    rel = capture_rel(vertex, superstep)
    capture = None
    run = run or trace.url or None
    if run:
        try:
            run_dir = RunDir(run, create=False)
            if run_dir.exists(rel):
                capture = _capture_summary(unpack(run_dir.read_bytes(rel), "capture file"))
        except UsageError:
            raise
        except MarianaError as exc:
            raise UsageError(f"{run}/{rel}: cannot read the capture ({exc})") from None
        except Exception as exc:  # a damaged capture: say which file
            raise UsageError(f"{run}/{rel}: cannot read the capture ({type(exc).__name__}: {exc})") from None
    if not slowest and not flags and not hangs and capture is None:
        raise UsageError(f"vertex {vertex!r} not found in superstep {superstep}")
    return {"id": vertex, "slowest": slowest, "flags": flags, "hangs": hangs,
            "capture_path": rel if capture is not None else None, "capture": capture}


def _line_text(line: dict) -> str:
    text = f"superstep {line.get('superstep')}: wall {_t(line.get('wall_s'))}"
    if line.get("straggler") is not None:
        text += f", straggler worker {line['straggler']}"
        if line.get("lag_s") is not None:
            text += f" (lag {_t(line['lag_s'])})"
    if line.get("derived"):
        text += "  [no master line: derived from the worker records]"
    return text


def _stats_text(path: str, st: dict) -> str:
    shapes = " ".join("(" + ",".join(map(str, sh)) + ")" for sh in st["shapes"])
    norm = (f"L2 {_f(st['l2'], '.4g')}" if st["count"] == 1 else
            f"L2 {_f(st['l2_min'], '.4g')}..{_f(st['l2_max'], '.4g')} (mean {_f(st['l2_mean'], '.4g')})")
    bad = f", {st['nonfinite']} with NaN/Inf" if st["nonfinite"] else ""
    return f"{path} {'/'.join(st['dtypes'])} {shapes} {norm}{bad}"


def format_show(d: dict) -> str:
    """``show`` as readable text."""
    out = [_line_text(d["master"])]
    arrivals = d["master"].get("arrivals") or {}
    if arrivals:
        out.append("  arrivals: " + ", ".join(f"worker {k} {_t(v)}" for k, v in arrivals.items()))
    for e in d.get("events") or []:
        out.append(f"  event: {_event_text(e)}")
    for w in d["workers"]:
        out.append("")
        host = f" ({w['host']})" if w.get("host") else ""
        out.append(f"worker {w['worker']}{host}: {w.get('vertices_run')} vertices run, "
                   f"{w['messages_out']:,} messages / {_size(w['bytes_out'])} out, "
                   f"{w['messages_in']:,} messages / {_size(w['bytes_in'])} in")
        out.append("  phases: " + ", ".join(f"{p} {_t(v)}" for p, v in w["phases"].items()))
        if w["peers"]:
            rows = [[str(p["peer"]), f"{p['messages_out']:,}", _size(p["bytes_out"]), f"{p['messages_in']:,}",
                     _size(p["bytes_in"])] for p in w["peers"]]
            out.extend(_table(["peer", "msgs out", "bytes out", "msgs in", "bytes in"], rows, indent="    "))
        if w["slowest"]:
            out.append("  slowest vertices: " + ", ".join(f"{e['vertex']!s} {_t(e['seconds'])}"
                                                          for e in w["slowest"]))
        if w["dropped"]:
            out.append("  dropped: " + ", ".join(f"{k} {n}" for k, n in w["dropped"].items()))
        for f in w["flags"]:
            out.append(f"  flag: {_flag_text({'superstep': d['superstep'], 'worker': w['worker'], **f})}")
    v = d.get("vertex")
    if v:
        out.append("")
        out.append(f"vertex {v['id']!r}")
        for e in v["slowest"]:
            out.append(f"  among the slowest on worker {e['worker']}: {_t(e['seconds'])} (#{e['rank']})")
        for f in v["flags"]:
            out.append(f"  flag: {_flag_text({'superstep': d['superstep'], **f})}")
        for m in v["hangs"]:
            out.append(f"  hung on worker {m.get('worker')}: {m.get('state')} for {_t(m.get('for_s'))}")
        cap = v.get("capture")
        if cap is None:
            out.append("  no capture (run with --capture to record its messages)")
        else:
            out.append(f"  capture {v['capture_path']}: {cap['inbox']['count']} in, {cap['outbox']['count']} out")
            for box, peer in (("inbox", "from"), ("outbox", "to")):
                for g in cap[box]["groups"]:
                    out.append(f"    {box} tag {g['tag']!s} {peer} {g['peer']!s}: {g['count']}")
                    for path, st in g["arrays"].items():
                        out.append(f"      {_stats_text(path, st)}")
            for name in ("aggregates", "broadcasts"):
                if cap[name]["names"]:
                    out.append(f"    {name}: {', '.join(cap[name]['names'])}")
                    for path, st in cap[name]["arrays"].items():
                        out.append(f"      {_stats_text(path, st)}")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------
# the CLI's entry points: (text to print, JSON-able dict)


def cmd_summary(run: str, as_json: bool = False, top: int = 5) -> tuple[str, dict]:
    """``mariana trace summary RUN [--json]``."""
    d = summary(load_trace(run), top=top)
    return (json.dumps(d, indent=2) + "\n" if as_json else format_summary(d)), d


def cmd_show(run: str, superstep: int, worker: int | None = None, vertex: str | None = None,
             as_json: bool = False) -> tuple[str, dict]:
    """``mariana trace show RUN --superstep S [--worker K] [--vertex ID] [--json]``."""
    d = show(load_trace(run), superstep, worker=worker, vertex=vertex, run=run)
    return (json.dumps(d, indent=2) + "\n" if as_json else format_show(d)), d
