"""``mariana trace show``: everything known about one superstep, one worker or one vertex in it
(records, the master's line, peers, captured messages with array statistics)."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from ..errors import MarianaError, UsageError
from ..storage import RunDir
from ..storage.partfile import unpack
from .analyze import (Trace, _check_superstep, _clean, _event_text, _f, _flag_text, _num, _phases, _size,
                      _superstep_line, _t, _table, _total, capture_rel, load_trace)

__all__ = ["show", "format_show", "cmd_show"]




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
            "rss_bytes": r.get("rss_bytes"), "peak_rss_bytes": r.get("peak_rss_bytes"),
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
        if w.get("peak_rss_bytes") is not None:
            now = f"resident {_size(w['rss_bytes'])}, " if w.get("rss_bytes") is not None else ""
            out.append(f"  memory: {now}peak so far {_size(w['peak_rss_bytes'])} (of its process)")
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




def cmd_show(run: str, superstep: int, worker: int | None = None, vertex: str | None = None,
             as_json: bool = False) -> tuple[str, dict]:
    """``mariana trace show RUN --superstep S [--worker K] [--vertex ID] [--json]``."""
    d = show(load_trace(run), superstep, worker=worker, vertex=vertex, run=run)
    return (json.dumps(d, indent=2) + "\n" if as_json else format_show(d)), d
