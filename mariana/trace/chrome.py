"""``RUN/trace`` as one Chrome Trace Event Format file (opens in Perfetto and chrome://tracing).

Layout:

- one process per worker (``pid`` = worker index, named ``worker K (host)``) and one for the
  master (``pid`` = the largest worker index + 1, named ``master``, sorted first). Perfetto reads
  ``pid``/``tid`` as unsigned 32-bit ints, so no negative pid;
- one thread per phase in every process, named by ``thread_name``: ``superstep`` spans the whole
  superstep; compute, combine, encode, send, wait, barrier are laid out one after the other from
  the superstep's ``start`` (the records give each phase's duration, not its start); ``events``
  holds instant events (flags on a worker; hangs, recoveries, failed checkpoints on the master).
  ``tid`` is an int unique across the file (``thread_tid``: 1000 + 10 * pid + the thread's index
  in ``THREADS`` while there are under 1000 workers), because Perfetto names threads by ``tid``
  alone and attaches a thread to the first process it sees it in;
- counters ``bytes`` and ``messages`` (out/in) per worker per superstep;
- flow arrows for the largest per-peer byte transfers, from the sender's send phase to the
  receiver's wait phase of the same superstep.

``ts``/``dur`` are microseconds from the earliest ``start`` in the trace. Slices on one thread
never overlap (a slice is cut where the next one on its thread begins), so nesting is clean.
Events carry no time in the record format: an event is placed at the end of the master line
that precedes it in ``master.jsonl`` (plus ``elapsed_s`` for a hang), which is approximate.
"""

from __future__ import annotations

import json
from typing import Any

from ..storage import write_text
from .analyze import PHASES, Trace, _clean, _num, load_trace, master_order

__all__ = ["chrome_trace", "export_chrome", "cmd_export", "master_pid", "thread_tid", "THREADS"]

#: The threads of every process, in display order.
THREADS = ("superstep", *PHASES, "events")
_INDEX = {name: i for i, name in enumerate(THREADS)}


def master_pid(trace: Trace) -> int:
    """The master's pid in the Chrome trace: one past the largest worker index."""
    return max(trace.workers, default=-1) + 1


def thread_tid(trace: Trace, pid: int, thread: str) -> int:
    """The (file-wide unique) tid of ``thread`` in process ``pid``; always larger than every pid."""
    offset = 10 ** max(3, len(str(master_pid(trace))))
    return offset + 10 * pid + _INDEX[thread]


def _us(seconds: float) -> float:
    return round(max(seconds, 0.0) * 1e6, 3)


def chrome_trace(trace: Trace, largest_flows: int = 20) -> dict:
    """The trace as ``{"traceEvents": [...], "displayTimeUnit": "ms"}``: the workers' supersteps and
    phases, the master's supersteps and events, the largest transfers as flows, then metadata."""
    t = _Timeline(trace)
    t.workers()
    t.master()
    t.flows(largest_flows)
    t.no_overlap()
    rank = {"X": 0, "C": 1, "s": 2, "f": 3, "i": 4}
    t.timed.sort(key=lambda e: (e["pid"], e["tid"], e["ts"], rank.get(e["ph"], 5)))
    return {"traceEvents": _clean(t.metadata() + t.timed), "displayTimeUnit": "ms"}


class _Timeline:
    """The events of a Chrome trace, built in named steps (``chrome_trace``)."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        starts = [_num(r.get("start")) for recs in trace.workers.values() for r in recs if "start" in r]
        starts += [_num(m.get("start")) for m in trace.master if "start" in m]
        self.t0 = min(starts) if starts else 0.0
        self.mpid = master_pid(trace)
        self.offset = 10 ** max(3, len(str(self.mpid)))
        self.timed: list[dict[str, Any]] = []  # everything but metadata
        # (superstep, worker) -> {phase: (tid, ts, dur)} of the worker's last record, for flows
        self.spans: dict[tuple[int, int], dict[str, tuple[int, float, float]]] = {}
        self.used: dict[int, set[str]] = {}  # pid -> threads that carry events

    def ts(self, t: float) -> float:
        return _us(t - self.t0)

    def tid(self, pid: int, thread: str) -> int:
        return self.offset + 10 * pid + _INDEX[thread]

    def workers(self) -> None:
        """Per worker: a span per superstep, one per phase inside it, counters, NaN/Inf flags."""
        for k, recs in self.trace.workers.items():
            threads = self.used.setdefault(k, {"superstep"})
            for r in sorted(recs, key=lambda r: (_num(r.get("start")), r.get("superstep", 0))):
                if _num(r.get("start"), -1.0) < 0:  # no time: nothing to place on the timeline
                    continue
                s = int(r.get("superstep", 0))
                start = _num(r.get("start"))
                durs = [(p, max(_num(r.get(f"{p}_s")), 0.0)) for p in PHASES]
                laid = sum(d for _, d in durs)
                end = max(_num(r.get("end"), start) + _num(r.get("barrier_s")), start + laid)
                out_b, in_b = _sum(r.get("bytes_out")), _sum(r.get("bytes_in"))
                out_m, in_m = _sum(r.get("messages_out")), _sum(r.get("messages_in"))
                args = {"superstep": s, "vertices_run": r.get("vertices_run"), "messages_out": out_m,
                        "messages_in": in_m, "bytes_out": out_b, "bytes_in": in_b,
                        "slowest": r.get("slowest") or [], "dropped": r.get("dropped") or {},
                        "flags": len(r.get("flags") or []), "clock_offset_s": r.get("clock_offset_s")}
                self.timed.append({"name": f"superstep {s}", "cat": "superstep", "ph": "X", "pid": k,
                              "tid": self.tid(k, "superstep"), "ts": self.ts(start), "dur": _us(end - start), "args": args})
                phase_spans = {"superstep": (self.tid(k, "superstep"), self.ts(start), _us(end - start))}
                cursor = start - self.t0  # relative from here on: epoch seconds carry only ~0.2 us of precision
                for p, d in durs:
                    if d > 0:
                        threads.add(p)
                        self.timed.append({"name": p, "cat": "phase", "ph": "X", "pid": k, "tid": self.tid(k, p), "ts": _us(cursor),
                                      "dur": _us(d), "args": {"superstep": s, "seconds": d}})
                        phase_spans[p] = (self.tid(k, p), _us(cursor), _us(d))
                    else:  # no slice for an empty phase: a flow binds to the superstep span instead
                        phase_spans[p] = (self.tid(k, "superstep"), _us(cursor), 0.0)
                    cursor += d
                self.spans[(s, k)] = phase_spans
                for name, o, i in (("bytes", out_b, in_b), ("messages", out_m, in_m)):
                    self.timed.append({"name": name, "cat": "counter", "ph": "C", "pid": k, "tid": self.tid(k, "superstep"),
                                  "ts": self.ts(start), "args": {"out": o, "in": i}})
                if r.get("peak_rss_bytes") is not None:  # read when the worker reported: at its end
                    mem = {"resident_mb": _num(r.get("rss_bytes")) / 1e6, "peak_mb": _num(r.get("peak_rss_bytes")) / 1e6}
                    self.timed.append({"name": "memory", "cat": "counter", "ph": "C", "pid": k, "tid": self.tid(k, "superstep"),
                                       "ts": self.ts(_num(r.get("end"), start)), "args": mem})
                for f in r.get("flags") or []:
                    if isinstance(f, dict):
                        threads.add("events")
                        self.timed.append({"name": f"{f.get('flag')} in {f.get('vertex')} {f.get('key')}", "cat": "flag",
                                      "ph": "i", "s": "t", "pid": k, "tid": self.tid(k, "events"), "ts": self.ts(start),
                                      "args": {"superstep": s, **f}})

    def master(self) -> None:
        """The master: superstep spans and events (hangs, recoveries, failed checkpoints)."""
        master_threads: set[str] = set()
        for m in self.trace.master:
            if _num(m.get("start"), -1.0) < 0:
                continue
            s = int(m.get("superstep", 0))
            end = _num(m.get("end"), _num(m.get("start")) + _num(m.get("wall_s")))
            args = {k: v for k, v in m.items() if k not in ("start", "end")}
            master_threads.add("superstep")
            self.timed.append({"name": f"superstep {s}", "cat": "superstep", "ph": "X", "pid": self.mpid,
                          "tid": self.tid(self.mpid, "superstep"), "ts": self.ts(_num(m["start"])), "dur": _us(end - _num(m["start"])),
                          "args": args})
        last_end = self.t0
        for line in master_order(self.trace):
            if "event" not in line:
                if "end" in line:
                    last_end = max(last_end, _num(line.get("end")))
                continue
            kind = line.get("event")
            if kind == "checkpoint" and line.get("ok", True):
                continue
            at = last_end + (_num(line.get("elapsed_s")) if kind == "hang" else 0.0)
            name = {"hang": "hang", "recovery": "recovery", "checkpoint": "checkpoint failed"}.get(str(kind), str(kind))
            name = f"{name} (superstep {line.get('superstep')})"
            master_threads.add("events")
            self.timed.append({"name": name, "cat": str(kind), "ph": "i", "s": "p" if kind == "checkpoint" else "g",
                          "pid": self.mpid, "tid": self.tid(self.mpid, "events"), "ts": self.ts(at), "args": line})

        if master_threads:
            self.used[self.mpid] = master_threads

    def flows(self, largest_flows: int) -> None:
        """Flows for the largest per-peer byte transfers: send phase of A -> wait phase of B."""
        transfers = []
        for k, recs in self.trace.workers.items():
            last: dict[int, dict] = {}
            for r in recs:
                last[int(r.get("superstep", 0))] = r
            for s, r in last.items():
                bo = r.get("bytes_out")
                if not isinstance(bo, dict):
                    continue
                for peer, n in bo.items():
                    try:
                        b = int(peer)
                    except (TypeError, ValueError):
                        continue
                    if b != k and _num(n) > 0 and (s, b) in self.spans:
                        transfers.append((_num(n), s, k, b))
        transfers.sort(key=lambda t: (-t[0], t[1], t[2], t[3]))
        for i, (n, s, a, b) in enumerate(transfers[:max(largest_flows, 0)]):
            stid, sts, sdur = self.spans[(s, a)]["send"]
            ftid, fts, fdur = self.spans[(s, b)]["wait"]
            args = {"superstep": s, "from": a, "to": b, "bytes": int(n)}
            name = f"{int(n)} bytes {a}->{b}"
            self.timed.append({"name": name, "cat": "transfer", "ph": "s", "id": i + 1, "pid": a, "tid": stid,
                          "ts": round(sts + sdur / 2, 3), "args": args})
            self.timed.append({"name": name, "cat": "transfer", "ph": "f", "bp": "e", "id": i + 1, "pid": b, "tid": ftid,
                          "ts": round(fts + fdur / 2, 3), "args": args})

    def no_overlap(self) -> None:
        """No two slices of one thread overlap: cut a slice where the next one on its thread begins."""
        xs = sorted((e for e in self.timed if e["ph"] == "X"), key=lambda e: (e["pid"], e["tid"], e["ts"]))
        for a, b in zip(xs, xs[1:]):
            if (a["pid"], a["tid"]) == (b["pid"], b["tid"]) and a["ts"] + a["dur"] > b["ts"]:
                a["dur"] = round(max(b["ts"] - a["ts"], 0.0), 3)

    def metadata(self) -> list[dict[str, Any]]:
        """Process and thread names and sort order of every pid and thread used."""
        meta: list[dict[str, Any]] = []
        hosts = {k: next((r.get("host") for r in recs if r.get("host")), None) for k, recs in self.trace.workers.items()}
        for pid in sorted(self.used, key=lambda p: (p != self.mpid, p)):
            pname = "master" if pid == self.mpid else f"worker {pid}" + (f" ({hosts[pid]})" if hosts.get(pid) else "")
            main = self.tid(pid, "superstep")
            meta.append({"name": "process_name", "ph": "M", "pid": pid, "tid": main, "ts": 0, "args": {"name": pname}})
            meta.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": main, "ts": 0,
                         "args": {"sort_index": -1 if pid == self.mpid else pid}})
            for thread in sorted(self.used[pid], key=_INDEX.__getitem__):
                meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": self.tid(pid, thread), "ts": 0,
                             "args": {"name": thread}})
                meta.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": self.tid(pid, thread), "ts": 0,
                             "args": {"sort_index": _INDEX[thread]}})
        return meta

def _sum(d: Any) -> int:
    return int(sum(_num(v) for v in d.values())) if isinstance(d, dict) else 0


def export_chrome(run: str, out: str) -> int:
    """Write ``RUN/trace`` as a Chrome trace JSON at ``out`` (a path or fsspec URL); the event count."""
    doc = chrome_trace(load_trace(run))
    write_text(out, json.dumps(doc, separators=(",", ":"), allow_nan=False) + "\n")
    return len(doc["traceEvents"])


def cmd_export(run: str, chrome: str, as_json: bool = False) -> tuple[str, dict]:
    """``mariana trace export RUN --chrome OUT.json``."""
    n = export_chrome(run, chrome)
    d = {"run": run, "out": chrome, "events": n}
    if as_json:
        return json.dumps(d) + "\n", d
    text = f"wrote {n} trace events to {chrome} (open it in https://ui.perfetto.dev or chrome://tracing)\n"
    return text, d
