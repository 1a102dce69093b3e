"""mariana.trace.chrome: the Chrome Trace Event Format export of the synthetic trace of test_analyze.py."""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import shutil
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from mariana.errors import UsageError
from mariana.storage import RunDir
from mariana.trace import (PHASES, chrome_trace, cmd_export, export_chrome, load_trace, master_pid,
                           thread_tid)

pytestmark = pytest.mark.timeout(60)

# the synthetic run of test_analyze.py (no package, no conftest: load it by path)
_spec = importlib.util.spec_from_file_location("_trace_synthetic", Path(__file__).with_name("test_analyze.py"))
synthetic = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(synthetic)


@pytest.fixture
def run(tmp_path) -> str:
    url = str(tmp_path / "run")
    synthetic.make_run(url, capture=False)
    return url


@pytest.fixture
def exported(run, tmp_path) -> tuple[dict, int, str]:
    out = str(tmp_path / "out" / "trace.json")
    n = export_chrome(run, out)
    with open(out, encoding="utf-8") as f:
        doc = json.load(f)
    return doc, n, out


def _names(events):
    """(pid, tid) -> thread name, pid -> process name."""
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    procs = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    return threads, procs


def test_export_loads(exported):
    doc, n, _ = exported
    assert set(doc) == {"traceEvents", "displayTimeUnit"} and doc["displayTimeUnit"] == "ms"
    assert isinstance(doc["traceEvents"], list) and len(doc["traceEvents"]) == n > 0


def test_required_fields_and_types(exported):
    events = exported[0]["traceEvents"]
    for e in events:
        assert isinstance(e["name"], str) and e["name"], e
        assert isinstance(e["ph"], str) and e["ph"] in {"X", "M", "C", "s", "f", "i"}, e
        assert isinstance(e["pid"], int) and not isinstance(e["pid"], bool) and e["pid"] >= 0, e
        assert isinstance(e["tid"], int) and not isinstance(e["tid"], bool) and e["tid"] > 0, e
        assert isinstance(e["ts"], (int, float)) and not isinstance(e["ts"], bool) and e["ts"] >= 0, e
        if e["ph"] == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
        if e["ph"] == "i":
            assert e["s"] in ("t", "p", "g"), e
        if e["ph"] == "C":
            assert all(isinstance(v, (int, float)) for v in e["args"].values()), e
    # every tid names one thread of one process, and is no pid (Perfetto keys threads by tid)
    owners = defaultdict(set)
    for e in events:
        owners[e["tid"]].add(e["pid"])
    assert all(len(p) == 1 for p in owners.values())
    assert not set(owners) & {e["pid"] for e in events}


def test_metadata(run, exported):
    events = exported[0]["traceEvents"]
    kinds = [e["ph"] for e in events]
    first_other = next(i for i, k in enumerate(kinds) if k != "M")
    assert set(kinds[:first_other]) == {"M"} and "M" not in kinds[first_other:]  # metadata first
    threads, procs = _names(events)
    mpid = master_pid(load_trace(run))
    assert mpid == 3
    assert procs == {0: "worker 0 (h0)", 1: "worker 1 (h1)", 2: "worker 2 (h2)", 3: "master"}
    sort = {e["pid"]: e["args"]["sort_index"] for e in events if e["name"] == "process_sort_index"}
    assert sorted(sort, key=sort.get)[0] == mpid  # the master on top
    for k in range(3):
        names = {name for (pid, _), name in threads.items() if pid == k}
        assert names == {"superstep", *PHASES, "events"} if k == 1 else names == {"superstep", *PHASES}
    assert {name for (pid, _), name in threads.items() if pid == mpid} == {"superstep", "events"}
    # every event sits on a named thread of a named process
    for e in events:
        assert e["pid"] in procs and (e["pid"], e["tid"]) in threads, e


def test_x_events_monotone_and_not_overlapping(exported):
    events = exported[0]["traceEvents"]
    last: dict[tuple[int, int], tuple[float, float]] = {}
    for e in events:
        if e["ph"] != "X":
            continue
        key = (e["pid"], e["tid"])
        if key in last:
            ts, end = last[key]
            assert e["ts"] >= ts, f"ts goes back on {key}: {e}"
            assert e["ts"] >= end - 1e-3, f"overlapping slices on {key}: {e}"
        last[key] = (e["ts"], e["ts"] + e["dur"])
    # and for every (pid, tid), whatever the phase
    seen: dict[tuple[int, int], float] = {}
    for e in events:
        if e["ph"] == "M":
            continue
        key = (e["pid"], e["tid"])
        assert e["ts"] >= seen.get(key, 0.0)
        seen[key] = e["ts"]
    assert min(e["ts"] for e in events if e["ph"] == "X") == 0


def test_phases_laid_out_sequentially(run, exported):
    events = exported[0]["traceEvents"]
    threads, _ = _names(events)
    w2 = [e for e in events if e["ph"] == "X" and e["pid"] == 2 and e["args"].get("superstep") == 3]
    by_thread = {threads[(e["pid"], e["tid"])]: e for e in w2}
    span = by_thread["superstep"]
    assert span["name"] == "superstep 3" and span["args"]["vertices_run"] == 3
    order = [p for p in PHASES if p in by_thread]
    assert order[:5] == ["compute", "combine", "encode", "send", "barrier"]  # wait is 0 for the straggler
    assert by_thread["compute"]["ts"] == span["ts"]
    assert by_thread["compute"]["dur"] == pytest.approx(6.0e6)
    for a, b in zip(order, order[1:]):
        assert by_thread[b]["ts"] == pytest.approx(by_thread[a]["ts"] + by_thread[a]["dur"], abs=0.01)
    assert by_thread[order[-1]]["ts"] + by_thread[order[-1]]["dur"] <= span["ts"] + span["dur"] + 0.01
    # the master's span of superstep 3 starts no later than the workers'
    mpid = master_pid(load_trace(run))
    m3 = next(e for e in events if e["ph"] == "X" and e["pid"] == mpid and e["name"] == "superstep 3")
    assert m3["ts"] <= span["ts"] and m3["args"]["straggler"] == 2
    # 3 workers x 6 supersteps spans + master spans
    assert sum(1 for e in events if e["ph"] == "X" and e["name"].startswith("superstep")) == 3 * 6 + 6


def test_counters(exported):
    events = exported[0]["traceEvents"]
    counters = [e for e in events if e["ph"] == "C"]
    assert Counter(e["name"] for e in counters) == {"bytes": 18, "messages": 18}
    w2 = sorted((e for e in counters if e["pid"] == 2 and e["name"] == "bytes"), key=lambda e: e["ts"])
    assert w2[3]["args"]["out"] == sum(synthetic.nbytes(3, 2, b) for b in range(3))
    assert w2[3]["args"]["in"] == sum(synthetic.nbytes(3, a, 2) for a in range(3))


def test_flows_pair_up(run):
    trace = load_trace(run)
    doc = chrome_trace(trace, largest_flows=5)
    events = doc["traceEvents"]
    threads, _ = _names(events)
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert len(starts) == len(ends) == 5 and set(starts) == set(ends)
    assert Counter(e["id"] for e in events if e["ph"] in "sf") == {i: 2 for i in starts}
    for i, s in starts.items():
        f = ends[i]
        assert f["bp"] == "e" and f["name"] == s["name"] and f.get("cat") == s.get("cat")
        assert s["args"]["from"] == s["pid"] and f["args"]["to"] == f["pid"] and s["pid"] != f["pid"]
        assert threads[(s["pid"], s["tid"])] in ("send", "superstep")
        assert threads[(f["pid"], f["tid"])] in ("wait", "superstep")
        # each end point lies inside a slice of its thread (Perfetto binds flows to enclosing slices)
        for ev in (s, f):
            assert any(x["ph"] == "X" and (x["pid"], x["tid"]) == (ev["pid"], ev["tid"])
                       and x["ts"] <= ev["ts"] <= x["ts"] + x["dur"] for x in events), ev
    biggest = max(starts.values(), key=lambda e: e["args"]["bytes"])
    assert (biggest["args"]["superstep"], biggest["args"]["from"], biggest["args"]["to"]) == (3, 2, 0)
    assert biggest["args"]["bytes"] == synthetic.nbytes(3, 2, 0)
    # the default takes the 20 largest of the 36 transfers between different workers
    assert sum(1 for e in chrome_trace(trace)["traceEvents"] if e["ph"] == "s") == 20
    assert sum(1 for e in chrome_trace(trace, largest_flows=0)["traceEvents"] if e["ph"] in "sf") == 0


def test_instant_events(exported):
    events = exported[0]["traceEvents"]
    instants = [e for e in events if e["ph"] == "i"]
    flags = [e for e in instants if e.get("cat") == "flag"]
    assert sorted((e["args"]["superstep"], e["args"]["vertex"], e["args"]["flag"]) for e in flags) == \
        [(3, "v7", "nan"), (5, "v4", "inf")]
    assert all(e["pid"] == 1 and e["s"] == "t" for e in flags)
    hang = [e for e in instants if e.get("cat") == "hang"]
    assert len(hang) == 1 and hang[0]["s"] == "g" and hang[0]["args"]["superstep"] == 3
    # placed after the master line before it (superstep 2) plus elapsed_s
    ss2 = next(e for e in events if e["ph"] == "X" and e["pid"] == 3 and e["name"] == "superstep 2")
    assert hang[0]["ts"] == pytest.approx(ss2["ts"] + ss2["dur"] + 4.0e6, abs=1.0)
    failed = [e for e in instants if e.get("cat") == "checkpoint"]
    assert len(failed) == 1 and failed[0]["args"]["error"] == "disk full"  # the ok checkpoint is not shown


def test_export_on_the_real_engine_shape_of_local_runs(tmp_path):
    """LocalRuntime writes empty bytes maps and zero send/wait: no flows, no empty slices, still valid."""
    url = str(tmp_path / "run")
    rd = RunDir(url)
    for k in range(2):
        rd.append_jsonl(f"trace/worker-{k}.jsonl", [
            {"superstep": s, "worker": k, "host": "vm", "pid": 7, "start": 100.0 + s + 0.001 * k,
             "end": 100.5 + s, "compute_s": 0.3, "combine_s": 0.01, "encode_s": 0.0, "send_s": 0.0, "wait_s": 0.0,
             "barrier_s": 0.1, "vertices_run": 1, "messages_out": {"0": 1, "1": 1}, "bytes_out": {},
             "messages_in": {"0": 1, "1": 1}, "bytes_in": {}, "slowest": [["b", 0.2]], "dropped": {}, "flags": [],
             "clock_offset_s": 0.0} for s in range(3)])
    doc = chrome_trace(load_trace(url))
    events = doc["traceEvents"]
    assert not [e for e in events if e["ph"] in "sf"]
    threads, procs = _names(events)
    assert set(procs.values()) == {"worker 0 (vm)", "worker 1 (vm)"}  # no master lines: no master process
    assert {threads[(e["pid"], e["tid"])] for e in events if e["ph"] == "X"} == {"superstep", "compute", "combine",
                                                                                "barrier"}
    json.dumps(doc, allow_nan=False)


def test_thread_tid_matches(run):
    trace = load_trace(run)
    events = chrome_trace(trace)["traceEvents"]
    threads, _ = _names(events)
    for (pid, tid), name in threads.items():
        assert thread_tid(trace, pid, name) == tid


def test_cmd_export(run, tmp_path):
    out = str(tmp_path / "x.json")
    text, d = cmd_export(run, out)
    assert d["events"] > 0 and d["out"] == out and str(d["events"]) in text and out in text
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="no trace files"):
        cmd_export(str(tmp_path / "empty"), str(tmp_path / "y.json"))
    with pytest.raises(UsageError, match="no such run directory"):
        cmd_export(str(tmp_path / "missing"), str(tmp_path / "y.json"))


def test_export_to_memory_url(run):
    from mariana.storage import read_text

    n = export_chrome(run, "memory://trace-tests/chrome/out.json")
    assert len(json.loads(read_text("memory://trace-tests/chrome/out.json"))["traceEvents"]) == n


def _trace_processor_binary() -> str | None:
    """A trace_processor_shell that runs offline: $PERFETTO_TRACE_PROCESSOR, on PATH, or perfetto's cache."""
    candidates = [os.environ.get("PERFETTO_TRACE_PROCESSOR"), shutil.which("trace_processor_shell"),
                  shutil.which("trace_processor"),
                  *sorted(glob.glob(os.path.expanduser("~/.local/share/perfetto/prebuilts/trace_processor_shell*")))]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK) and not c.endswith(".tmp"):
            return c
    return None


def test_loads_in_perfetto_trace_processor(exported):
    """Optional: the file loads in Perfetto's trace processor (needs the `perfetto` package and its binary)."""
    tp_mod = pytest.importorskip("perfetto.trace_processor", reason="the perfetto package is not installed")
    binary = _trace_processor_binary()
    if binary is None:
        pytest.skip("perfetto is installed but no trace_processor_shell binary is available offline "
                    "(it downloads one on first use; set PERFETTO_TRACE_PROCESSOR to a local binary)")
    doc, _, path = exported
    tp = tp_mod.TraceProcessor(trace=path, config=tp_mod.TraceProcessorConfig(bin_path=binary))
    try:
        n_x = sum(1 for e in doc["traceEvents"] if e["ph"] == "X")
        n_i = sum(1 for e in doc["traceEvents"] if e["ph"] == "i")
        def rows(sql):
            return list(tp.query(sql))

        assert rows("select count(*) as n from slice")[0].n == n_x + n_i
        assert rows("select count(*) as n from flow")[0].n == sum(1 for e in doc["traceEvents"] if e["ph"] == "s")
        names = {r.name for r in rows("select name from process") if r.name}
        assert {"worker 0 (h0)", "worker 1 (h1)", "worker 2 (h2)", "master"} <= names
        threads = {r.name for r in rows("select name from thread") if r.name}
        assert {"superstep", *PHASES} <= threads
    finally:
        tp.close()


def test_trace_built_in_memory(run):
    """A Trace made by hand (no file order of master.jsonl) still places its events."""
    from mariana.trace import Trace

    t = load_trace(run)
    doc = chrome_trace(Trace(workers=t.workers, master=t.master, events=t.events))
    cats = Counter(e.get("cat") for e in doc["traceEvents"] if e["ph"] == "i")
    assert cats == {"flag": 2, "hang": 1, "checkpoint": 1}
    hang = next(e for e in doc["traceEvents"] if e.get("cat") == "hang")
    ss2 = next(e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == 3 and e["name"] == "superstep 2")
    assert hang["ts"] == pytest.approx(ss2["ts"] + ss2["dur"] + 4.0e6, abs=1.0)
