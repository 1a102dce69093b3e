"""mariana.trace: loading RUN/trace, the summary and ``show`` on synthetic traces (docs/traces.md).

``make_run`` writes 3 workers x 6 supersteps: worker 2 computes 5x longer on supersteps 2-4 and
is the straggler there (superstep 3 is the slowest: its base compute is 1.2 s), a NaN flag on
vertex v7 (key payload.g) at superstep 3, drops, a hang, and checkpoint events.
test_chrome.py imports ``make_run`` from this file.
"""

from __future__ import annotations

import json
import statistics

import numpy as np
import pytest

from mariana.errors import UsageError
from mariana.storage import RunDir
from mariana.storage.checkpoint import pack
from mariana.trace import (Trace, cmd_show, cmd_summary, format_show, format_summary, load_trace, show,
                           summary)

pytestmark = pytest.mark.timeout(60)

T0 = 1_700_000_000.0
WORKERS = 3
SUPERSTEPS = 6
SLOW = {2, 3, 4}  # worker 2 computes 5x longer here
DESIGNATED = {0: 0, 1: 1, 5: 0}  # the straggler of the other supersteps
EVENTS_AFTER = {  # master events written after superstep S's line (-1: before superstep 0)
    1: [{"event": "checkpoint", "superstep": 1, "ok": True, "error": ""}],
    2: [{"event": "hang", "superstep": 3, "elapsed_s": 4.0, "waiting": {"0": [2], "1": [2]},
         "missing": [{"worker": 2, "host": "h2", "state": "computing", "vertex": "v8", "for_s": 3.9}]}],
    3: [{"event": "checkpoint", "superstep": 3, "ok": False, "error": "disk full"}],
}


def messages(s: int, a: int, b: int) -> int:
    return 10 + a + 2 * b + s


def nbytes(s: int, a: int, b: int) -> int:
    if a == b:
        return 0  # local delivery does not go through ZeroMQ
    return messages(s, a, b) * 64 + (100_000 if (s, a, b) == (3, 2, 0) else 0)


def compute_s(s: int, k: int) -> float:
    base = 1.2 if s == 3 else 1.0
    c = base * (5 if (k == 2 and s in SLOW) else 1)
    return c + (0.02 if DESIGNATED.get(s) == k else 0.0)


def build_records() -> tuple[dict[int, list[dict]], list[dict]]:
    """(worker -> records, master lines in file order) following docs/traces.md."""
    workers: dict[int, list[dict]] = {k: [] for k in range(WORKERS)}
    master: list[dict] = []
    ms = T0
    for s in range(SUPERSTEPS):
        starts = {k: ms + 0.001 * k for k in range(WORKERS)}
        comp = {k: compute_s(s, k) for k in range(WORKERS)}
        pre = {k: starts[k] + comp[k] + 0.2 for k in range(WORKERS)}  # + combine, encode, send
        last = max(pre.values())
        straggler = max(pre, key=pre.get)
        wait = {k: 0.0 if k == straggler else 0.9 * (last - pre[k]) for k in range(WORKERS)}
        end = {k: pre[k] + wait[k] for k in range(WORKERS)}
        mend = max(end.values()) + 0.01
        for k in range(WORKERS):
            flags = []
            if s == 3 and k == 1:
                flags.append({"flag": "nan", "vertex": "v7", "where": "message", "key": "payload.g"})
            if s == 5 and k == 1:
                flags.append({"flag": "inf", "vertex": "v4", "where": "state", "key": "value"})
            dropped = {}
            if s == 1 and k == 0:
                dropped = {"bad_tag": 2}
            if s == 4 and k == 1:
                dropped = {"truncated": 1}
            c = comp[k]
            workers[k].append({
                "superstep": s, "worker": k, "host": f"h{k}", "pid": 1000 + k,
                "start": starts[k], "end": end[k],
                "compute_s": c, "combine_s": 0.1, "encode_s": 0.05, "send_s": 0.05, "wait_s": wait[k],
                "barrier_s": mend - end[k], "vertices_run": 3,
                "messages_out": {str(b): messages(s, k, b) for b in range(WORKERS)},
                "bytes_out": {str(b): nbytes(s, k, b) for b in range(WORKERS)},
                "messages_in": {str(a): messages(s, a, k) for a in range(WORKERS)},
                "bytes_in": {str(a): nbytes(s, a, k) for a in range(WORKERS)},
                "slowest": [[f"v{k + 6}", 0.5 * c], [f"v{k + 3}", 0.3 * c], [f"v{k}", 0.1 * c]],
                "dropped": dropped, "flags": flags, "clock_offset_s": 0.0 if k == 0 else 0.002,
            })
        arrivals = {k: end[k] - ms for k in range(WORKERS)}
        strag = max(arrivals, key=lambda k: (arrivals[k], -k))
        master.append({"superstep": s, "start": ms, "end": mend, "wall_s": mend - ms,
                       "arrivals": {str(k): round(v, 6) for k, v in arrivals.items()}, "straggler": strag,
                       "lag_s": round(arrivals[strag] - statistics.median(arrivals.values()), 6),
                       "aggregates": {"loss": 1.0 / (s + 1)}})
        master.extend(EVENTS_AFTER.get(s, []))
        ms = mend + 0.05
    return workers, master


def make_run(url: str, capture: bool = True) -> RunDir:
    """Write the synthetic trace (and a capture of v7 at superstep 3) into the run directory ``url``."""
    rd = RunDir(url)
    workers, master = build_records()
    for k, recs in workers.items():  # flushed in chunks, as the writer does
        rd.append_jsonl(f"trace/worker-{k}.jsonl", recs[:4])
        rd.append_jsonl(f"trace/worker-{k}.jsonl", recs[4:])
    rd.append_jsonl("trace/master.jsonl", master)
    if capture:
        rd.write_bytes("capture/v7/ss-000003.part", pack(CAPTURE))
    return rd


CAPTURE = {
    "superstep": 3, "vertex": "v7",
    "inbox": [["v1", "grad", {"g": np.array([np.nan, 1.0], dtype=np.float32)}],
              ["v4", "grad", {"g": np.array([3.0, 4.0], dtype=np.float32)}],
              ["v4", "grad", {"g": np.array([0.0, 1.0], dtype=np.float32)}],
              ["v1", "ctl", 0.5]],
    "outbox": [["v8", "act", {"x": np.ones((2, 3), dtype=np.float64)}]],
    "aggregates": {"loss": 0.25}, "broadcasts": {"w": np.full(4, 0.5)},
}


@pytest.fixture
def run(tmp_path) -> str:
    url = str(tmp_path / "run")
    make_run(url)
    return url


# ---------------------------------------------------------------------------------------------


def test_load_trace(run):
    t = load_trace(run)
    assert isinstance(t, Trace)
    assert sorted(t.workers) == [0, 1, 2]
    for k, recs in t.workers.items():
        assert [r["superstep"] for r in recs] == list(range(SUPERSTEPS))
        assert all(r["worker"] == k for r in recs)
    assert [m["superstep"] for m in t.master] == list(range(SUPERSTEPS))
    assert [e["event"] for e in t.events] == ["checkpoint", "hang", "checkpoint"]
    assert t.supersteps() == list(range(SUPERSTEPS))


def test_load_trace_errors(tmp_path):
    RunDir(str(tmp_path / "untraced"))
    with pytest.raises(UsageError, match=r"trace: no trace files \(was the run traced\?\)"):
        load_trace(str(tmp_path / "untraced"))
    rd = RunDir(str(tmp_path / "bad"))
    rd.write_bytes("trace/worker-0.jsonl", b'{"superstep": 0}\nnot json\n{"superstep": 1}\n')
    with pytest.raises(UsageError, match=r"worker-0.jsonl line 2: not a JSON record"):
        load_trace(str(tmp_path / "bad"))


def test_load_trace_ignores_a_line_being_written(tmp_path):
    url = str(tmp_path / "run")
    rd = make_run(url, capture=False)
    with rd.fs.open(rd.path("trace/worker-0.jsonl"), "ab") as f:
        f.write(b'{"superstep": 6, "worker": 0, "sta')  # no newline: a flush in progress
    t = load_trace(url)
    assert [r["superstep"] for r in t.workers[0]] == list(range(SUPERSTEPS))


def test_summary_stragglers(run):
    s = summary(load_trace(run))
    assert s["supersteps"] == SUPERSTEPS and s["workers"] == WORKERS
    top = s["stragglers"][0]
    assert top["worker"] == 2 and top["count"] == 3 and top["supersteps"] == [2, 3, 4]
    assert top["compute_vs_median"] == pytest.approx(5.0)
    assert top["compute_excess_s"] == pytest.approx((4.0 + 4.8 + 4.0) / 3)
    lags = [m["lag_s"] for m in build_records()[1] if m.get("straggler") == 2]
    assert len(lags) == 3 and min(lags) > 0.3
    assert top["lag_mean_s"] == pytest.approx(sum(lags) / 3) and top["lag_max_s"] == pytest.approx(max(lags))
    others = {r["worker"]: r for r in s["stragglers"][1:]}
    assert others[0]["count"] == 2 and others[0]["supersteps"] == [0, 5]
    assert others[1]["count"] == 1 and others[1]["supersteps"] == [1]
    assert sum(r["count"] for r in s["stragglers"]) == SUPERSTEPS


def test_summary_slowest_superstep(run):
    s = summary(load_trace(run))
    ss = s["slowest_superstep"]
    assert ss["superstep"] == 3 and ss["straggler"] == 2
    assert ss["slowest_vertex"] == {"vertex": "v8", "seconds": pytest.approx(3.0), "worker": 2}
    assert ss["wall_s"] > 6.0
    assert [x["superstep"] for x in s["slowest_supersteps"][:3]] == [3, 2, 4] or \
        [x["superstep"] for x in s["slowest_supersteps"][:3]] == [3, 4, 2]


def test_summary_phases_and_volume(run):
    s = summary(load_trace(run))
    expected_compute = sum(compute_s(ss, k) for ss in range(SUPERSTEPS) for k in range(WORKERS))
    assert s["phases"]["compute"]["s"] == pytest.approx(expected_compute)
    assert s["phases"]["combine"]["s"] == pytest.approx(0.1 * SUPERSTEPS * WORKERS)
    assert list(s["phases"]) == ["compute", "combine", "encode", "send", "wait", "barrier"]
    assert sum(p["share"] for p in s["phases"].values()) == pytest.approx(1.0)
    assert s["phases"]["compute"]["share"] > 0.5
    per_ss = [sum(messages(ss, a, b) for a in range(WORKERS) for b in range(WORKERS)) for ss in range(SUPERSTEPS)]
    assert s["messages"]["total"] == sum(per_ss)
    assert s["messages"]["max_per_superstep"] == max(per_ss) and s["messages"]["max_superstep"] == 5
    assert s["messages"]["mean_per_superstep"] == pytest.approx(sum(per_ss) / SUPERSTEPS)
    total_bytes = sum(nbytes(ss, a, b) for ss in range(SUPERSTEPS) for a in range(WORKERS) for b in range(WORKERS))
    assert s["bytes"]["total"] == total_bytes and s["bytes"]["max_superstep"] == 3
    walls = [m["wall_s"] for m in build_records()[1] if "wall_s" in m]
    assert s["wall_s"] == pytest.approx(sum(walls))


def test_summary_flags_drops_events(run):
    s = summary(load_trace(run))
    f = s["flags"]
    assert f["total"] == 2 and f["by_flag"] == {"nan": 1, "inf": 1} and f["first_superstep"] == 3
    first = f["first"][0]
    assert (first["flag"], first["vertex"], first["key"], first["superstep"], first["worker"], first["where"]) == \
        ("nan", "v7", "payload.g", 3, 1, "message")
    assert f["by_key"] == {"payload.g": 1, "value": 1}
    d = s["dropped"]
    assert d["total"] == 3 and d["by_kind"] == {"bad_tag": 2, "truncated": 1}
    assert d["first_superstep"] == {"bad_tag": 1, "truncated": 4}
    ev = s["events"]
    assert len(ev["hangs"]) == 1 and ev["hangs"][0]["missing"][0]["vertex"] == "v8"
    assert ev["recoveries"] == [] and ev["checkpoints"] == 2
    assert [e["error"] for e in ev["checkpoints_failed"]] == ["disk full"]
    json.dumps(s, allow_nan=False)  # JSON-able, strictly


def test_format_summary(run):
    text = format_summary(summary(load_trace(run)))
    assert text.strip()
    lines = text.splitlines()
    assert "6 supersteps" in lines[0] and "3 workers" in lines[0]
    strag = next(line for line in lines if line.strip().startswith("worker 2"))
    assert "3" in strag.split() and "2,3,4" in strag and "5.00x" in strag
    assert "slowest superstep 3" in text and "'v8'" in text
    assert "nan at superstep 3" in text and "'v7'" in text and "payload.g" in text
    assert "bad_tag 2" in text and "truncated 1" in text
    assert "hang at superstep 3" in text and "disk full" in text
    for phase in ("compute", "combine", "encode", "send", "wait", "barrier"):
        assert any(line.strip().startswith(phase) for line in lines)


def test_cmd_summary(run):
    text, d = cmd_summary(run, as_json=False)
    assert "straggler" in text and d["stragglers"][0]["worker"] == 2
    text, d2 = cmd_summary(run, as_json=True)
    assert json.loads(text) == d2 == d


def test_summary_last_record_of_a_rerun_wins(tmp_path):
    url = str(tmp_path / "run")
    rd = make_run(url, capture=False)
    rec = dict(build_records()[0][0][5], compute_s=2.5)
    rd.append_jsonl("trace/worker-0.jsonl", [rec])
    t = load_trace(url)
    assert len(t.workers[0]) == SUPERSTEPS + 1
    s = summary(t)
    assert s["reruns"] == 1
    expected = sum(compute_s(ss, k) for ss in range(SUPERSTEPS) for k in range(WORKERS)) - compute_s(5, 0) + 2.5
    assert s["phases"]["compute"]["s"] == pytest.approx(expected)


def test_summary_without_master_lines(tmp_path):
    """Straggler and wall time fall back to the worker records when master.jsonl is missing."""
    url = str(tmp_path / "run")
    rd = RunDir(url)
    for k, recs in build_records()[0].items():
        rd.append_jsonl(f"trace/worker-{k}.jsonl", recs)
    s = summary(load_trace(url))
    assert s["stragglers"][0]["worker"] == 2 and s["stragglers"][0]["supersteps"] == [2, 3, 4]
    assert s["slowest_superstep"]["superstep"] == 3 and s["slowest_superstep"]["derived"] is True
    assert s["events"]["hangs"] == []


def test_summary_memory_per_process(tmp_path):
    """Per process, largest peak first: its peak, the superstep whose record first shows it (within
    the kernel's counting slack: a later read a little higher or lower is the same peak), and its
    last resident size; a worker restarted by recovery is a new process; records without the
    fields (traces of older versions) give no memory section."""
    url = str(tmp_path / "run")
    rd = make_run(url, capture=False)
    t = load_trace(url)
    assert summary(t)["memory"] == [] and "memory per process" not in format_summary(summary(t))
    mb = 1_000_000
    w0 = [(10, 40, 40), (10, 90, 90), (10, 60, 90.3), (10, 60, 89.9), (10, 61, 90.2), (10, 62, 90)]
    w1 = [(11, 30, 30), (11, 50, 50), (11, 50, 50), (12, 35, 35), (12, 120, 120), (12, 70, 120)]  # restarted at 3
    for k, marks in ((0, w0), (1, w1)):
        recs = [dict(r, pid=pid, rss_bytes=int(rss * mb), peak_rss_bytes=int(peak * mb))
                for r, (pid, rss, peak) in zip(build_records()[0][k], marks)]
        rd.append_jsonl(f"trace/worker-{k}.jsonl", recs)  # the later records of each superstep win
    m = summary(load_trace(url))["memory"]
    assert [(x["workers"], x["pid"], x["peak_rss_bytes"] // mb, x["peak_superstep"], x["last_rss_bytes"] // mb)
            for x in m] == [([1], 12, 120, 4, 70), ([0], 10, 90, 1, 62), ([1], 11, 50, 1, 50)]
    text = format_summary(summary(load_trace(url)))
    assert "memory per process" in text and "120.0 MB" in text


def test_memory_url():
    """Any fsspec URL works: the run directory lives in fsspec's memory filesystem here."""
    url = "memory://trace-tests/run-a"
    make_run(url)
    s = summary(load_trace(url))
    assert s["stragglers"][0]["worker"] == 2
    d = show(load_trace(url), 3, vertex="v7", run=url)
    assert d["vertex"]["capture"]["inbox"]["count"] == 4


# ---------------------------------------------------------------------------------------------
# show


def test_show_superstep(run):
    d = show(load_trace(run), 3)
    assert d["superstep"] == 3
    assert d["master"]["straggler"] == 2 and d["master"]["wall_s"] > 6.0
    assert set(d["master"]["arrivals"]) == {"0", "1", "2"}
    assert [w["worker"] for w in d["workers"]] == [0, 1, 2]
    assert [e["event"] for e in d["events"]] == ["hang", "checkpoint"]
    w1 = d["workers"][1]
    assert w1["flags"] == [{"flag": "nan", "vertex": "v7", "where": "message", "key": "payload.g"}]
    json.dumps(d, allow_nan=False)


def test_show_worker(run):
    d = show(load_trace(run), 3, worker=2)
    assert len(d["workers"]) == 1
    w = d["workers"][0]
    assert w["worker"] == 2 and w["host"] == "h2" and w["vertices_run"] == 3
    assert w["phases"]["compute"] == pytest.approx(6.0) and w["phases"]["combine"] == pytest.approx(0.1)
    assert w["slowest"][0] == {"vertex": "v8", "seconds": pytest.approx(3.0)}
    peers = {p["peer"]: p for p in w["peers"]}
    assert sorted(peers) == [0, 1, 2]
    assert peers[0]["bytes_out"] == nbytes(3, 2, 0) and peers[0]["messages_out"] == messages(3, 2, 0)
    assert peers[1]["bytes_in"] == nbytes(3, 1, 2) and peers[1]["messages_in"] == messages(3, 1, 2)
    assert w["bytes_out"] == sum(nbytes(3, 2, b) for b in range(WORKERS))
    assert d["master"]["straggler"] == 2  # the master line is always there


def test_show_vertex_with_capture(run):
    d = show(load_trace(run), 3, vertex="v7", run=run)
    v = d["vertex"]
    assert v["id"] == "v7"
    assert v["slowest"] == [{"worker": 1, "seconds": pytest.approx(0.6), "rank": 1}]
    assert v["flags"] == [{"worker": 1, "flag": "nan", "vertex": "v7", "where": "message", "key": "payload.g"}]
    assert v["capture_path"] == "capture/v7/ss-000003.part"
    cap = v["capture"]
    assert cap["superstep"] == 3 and cap["inbox"]["count"] == 4 and cap["outbox"]["count"] == 1
    groups = {(g["tag"], g["peer"]): g for g in cap["inbox"]["groups"]}
    assert sorted(groups) == [("ctl", "v1"), ("grad", "v1"), ("grad", "v4")]
    assert groups[("grad", "v4")]["count"] == 2
    g4 = groups[("grad", "v4")]["arrays"]["payload.g"]
    assert g4["shapes"] == [[2]] and g4["dtypes"] == ["float32"] and g4["count"] == 2
    assert g4["l2_min"] == pytest.approx(1.0) and g4["l2_max"] == pytest.approx(5.0) and g4["nonfinite"] == 0
    g1 = groups[("grad", "v1")]["arrays"]["payload.g"]
    assert g1["nonfinite"] == 1 and g1["l2"] == "nan"  # JSON-safe non-finite norm
    ctl = groups[("ctl", "v1")]["arrays"]["payload"]
    assert ctl["shapes"] == [[]] and ctl["l2"] == pytest.approx(0.5)
    out = cap["outbox"]["groups"]
    assert len(out) == 1 and out[0]["tag"] == "act" and out[0]["peer"] == "v8"
    x = out[0]["arrays"]["payload.x"]
    assert x["shapes"] == [[2, 3]] and x["dtypes"] == ["float64"] and x["l2"] == pytest.approx(np.sqrt(6))
    assert cap["aggregates"]["names"] == ["loss"]
    assert cap["broadcasts"]["arrays"]["w"]["l2"] == pytest.approx(1.0)
    json.dumps(d, allow_nan=False)

    text = format_show(d)
    assert "vertex 'v7'" in text and "nan at superstep 3" in text and "payload.g" in text
    assert "inbox tag grad from v4: 2" in text and "outbox tag act to v8: 1" in text
    assert "straggler worker 2" in text


def test_show_vertex_without_capture(run):
    d = show(load_trace(run), 3, vertex="v8", run=run)
    v = d["vertex"]
    assert v["capture"] is None and v["slowest"][0]["worker"] == 2
    assert v["hangs"] == [{"worker": 2, "host": "h2", "state": "computing", "vertex": "v8", "for_s": 3.9}]
    assert "no capture" in format_show(d)
    d = show(load_trace(run), 3, worker=2, vertex="v8")  # without run: the trace's own url
    assert d["vertex"]["slowest"][0]["seconds"] == pytest.approx(3.0)


def test_show_errors(run):
    t = load_trace(run)
    with pytest.raises(UsageError, match=r"^superstep 99 not in the trace \(0\.\.5\)$"):
        show(t, 99)
    with pytest.raises(UsageError, match=r"^worker 7 not in the trace"):
        show(t, 3, worker=7)
    with pytest.raises(UsageError, match=r"^vertex 'x' not found in superstep 3$"):
        show(t, 3, vertex="x", run=run)
    with pytest.raises(UsageError, match=r"^vertex 'v5' not found in superstep 3$"):
        show(t, 3, worker=0, vertex="v5")  # v5 is among worker 2's slowest, not worker 0's
    # a capture file that is not a capture: one clear line naming the file
    RunDir(run).write_bytes("capture/v0/ss-000002.part", b"garbage")
    with pytest.raises(UsageError, match=r"capture/v0/ss-000002.part: cannot read the capture"):
        show(t, 2, vertex="v0", run=run)


def test_format_show_and_cmd_show(run):
    text, d = cmd_show(run, 2, worker=None, vertex=None, as_json=False)
    assert text.strip() and "superstep 2" in text and "straggler worker 2" in text
    assert "worker 0 (h0)" in text and "phases: compute" in text and "bad_tag" not in text
    text1, _ = cmd_show(run, 1)
    assert "dropped: bad_tag 2" in text1
    text, d2 = cmd_show(run, 2, worker=2, as_json=True)
    assert json.loads(text) == d2 and len(d2["workers"]) == 1


def test_format_summary_top(run):
    text = format_summary(summary(load_trace(run), top=1))
    assert "worker 2" in text and "... 2 more workers straggled 3 times" in text
    assert "... 1 more" in text  # flags past the first one


def test_capture_path_of_a_vertex_id_with_a_slash(run):
    from mariana.trace import capture_rel

    assert capture_rel("layer/3", 4) == "capture/layer%2F3/ss-000004.part"  # as the engine writes it
    RunDir(run).write_bytes(capture_rel("layer/3", 4), pack({"superstep": 4, "vertex": "layer/3", "inbox": [],
                                                                "outbox": [["v0", 1, [1.0, 2.0]]],
                                                                "aggregates": {}, "broadcasts": {}}))
    cap = show(load_trace(run), 4, vertex="layer/3", run=run)["vertex"]["capture"]
    assert cap["inbox"] == {"count": 0, "groups": []}
    g = cap["outbox"]["groups"][0]
    assert (g["tag"], g["peer"], g["count"]) == (1, "v0", 1)
    assert g["arrays"]["payload"]["shapes"] == [[2]] and g["arrays"]["payload"]["l2"] == pytest.approx(5 ** 0.5)
