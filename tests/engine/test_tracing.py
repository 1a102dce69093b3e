"""Superstep traces from real runs: counts agree with the engine, stragglers, NaN flags, hang
reports, Chrome export, and replay of a captured vertex."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from mariana import trace
from mariana.cluster.master import SuperstepTimeout
from mariana.cli import main
from mariana.errors import MarianaError
from mariana.jobs.launch import run_job
from mariana.storage import RunDir
from test_cluster import alive, env_with_tests

pytestmark = pytest.mark.timeout(120)

GRAPH = Path(__file__).parent / "data" / "small.e"


def traced_run(tmp_path, runtime, *sets, **kw):
    run_dir = RunDir(str(tmp_path / runtime))
    lines = []
    result = run_job("contract_jobs:traced", sets=sets, workers=2, runtime=runtime, run_dir=run_dir,
                     on_superstep=lines.append, **kw)
    return run_dir, result, lines


def test_trace_counts_agree_with_the_engine(tmp_path, runtime):
    run_dir, result, lines = traced_run(tmp_path, runtime)
    data = trace.load_trace(run_dir.url)
    assert sorted(data.workers) == [0, 1] and len(data.master) == result.supersteps
    for line in lines:
        recs = [data.workers[w][line["superstep"]] for w in (0, 1)]
        assert sum(sum(r["messages_out"].values()) for r in recs) == line["delivered"]
        assert sum(sum(r["messages_in"].values()) for r in recs) == line["delivered"]
        assert sum(r["vertices_run"] for r in recs) == line["computed"]
        if runtime != "local":  # bytes travel between processes or threads
            assert sum(sum(r["bytes_out"].values()) for r in recs) == line["bytes"]
            assert sum(sum(r["bytes_in"].values()) for r in recs) == line["bytes"]
            assert all(r["end"] >= r["start"] for r in recs)


def test_a_slow_vertex_is_the_straggler_in_the_summary(tmp_path, runtime):
    run_dir, _, _ = traced_run(tmp_path, runtime)
    data = trace.load_trace(run_dir.url)
    by_step = {m["superstep"]: m["straggler"] for m in data.master}
    assert [by_step[s] for s in (2, 3, 4)] == [1, 1, 1]
    assert all(data.workers[1][s]["slowest"][0][0] == "slow" for s in (2, 3, 4))
    doc = trace.summary(data)
    text = trace.format_summary(doc)
    assert "straggler" in text.lower()
    assert main(["trace", "summary", run_dir.url, "--json"]) == 0


def test_a_memory_spike_shows_in_its_workers_record_and_the_summary_names_its_superstep(tmp_path, runtime):
    """Each record carries its process's resident memory and peak so far: 'z' (worker 1) holds
    64 MiB at superstep 3 only, so worker 1's resident memory rises there by that much and falls
    after, and the summary puts its process's peak at superstep 3. A fresh ``mariana run``: a
    process's peak counts from its start (a forked worker's from its parent's at the fork), and
    this test process's own may be anything. Cluster: a process per worker; LocalRuntime and
    inproc: one process for every worker."""
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "mariana", "run", "contract_jobs:traced", "--set", "hold_mib=64",
                           "--workers", "2", "--runtime", runtime, "--run-dir", str(run_dir)],
                          env=env_with_tests(), capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = trace.load_trace(str(run_dir))
    for k, recs in data.workers.items():  # (a process reads its memory at most every 10 ms)
        read = [r for r in recs if "rss_bytes" in r]
        assert read and all(0 < r["rss_bytes"] <= r["peak_rss_bytes"] for r in read), k
        peaks = [r["peak_rss_bytes"] for r in read]  # a process's peak never falls (but for the
        assert all(b > a - (1 << 20) for a, b in zip(peaks, peaks[1:])), k  # kernel's per-thread counts)
    z = {r["superstep"]: r for r in data.workers[1] if "rss_bytes" in r}
    before, after = z[max(s for s in z if s < 3)], z[min(s for s in z if s > 3)]  # (the 64 MiB took > 10 ms)
    assert z[3]["rss_bytes"] - before["rss_bytes"] >= 60e6
    assert z[3]["rss_bytes"] - after["rss_bytes"] >= 50e6
    assert z[3]["peak_rss_bytes"] - before["peak_rss_bytes"] >= 30e6  # (the peak so far: above resident)
    memory = trace.summary(data)["memory"]
    assert memory[0]["workers"] == ([1] if runtime == "cluster" else [0, 1]) and memory[0]["peak_superstep"] == 3
    if runtime == "cluster":  # worker 0's process held no spike
        assert [m["workers"] for m in memory] == [[1], [0]]
        assert memory[1]["peak_rss_bytes"] < memory[0]["peak_rss_bytes"] - 40e6
    else:
        assert len(memory) == 1
    assert "memory per process" in trace.format_summary(trace.summary(data))


def test_a_nan_is_flagged_with_its_vertex_and_superstep(tmp_path, runtime):
    run_dir, _, _ = traced_run(tmp_path, runtime)
    data = trace.load_trace(run_dir.url)
    flags = [(r["superstep"], f["vertex"], f["key"]) for recs in data.workers.values() for r in recs for f in r["flags"]]
    assert flags == [(3, "bad", "payload.g")]
    assert "bad" in trace.format_summary(trace.summary(data))


def test_a_worker_that_blocks_forever_is_named_by_the_hang_report(tmp_path):
    procs = []
    t0 = time.monotonic()
    with pytest.raises(SuperstepTimeout) as info:
        traced_run(tmp_path, "cluster", "block=true", superstep_timeout=1.5, on_start=lambda m, p: procs.extend(p))
    assert time.monotonic() - t0 < 30
    msg = str(info.value)
    assert "superstep 2 exceeded --superstep-timeout 1.5s" in msg
    assert "not at the barrier: worker 1" in msg and "computing vertex 'stuck'" in msg
    events = [e for e in trace.load_trace(str(tmp_path / "cluster")).events if e["event"] == "hang"]
    missing = {m["worker"]: m for m in events[0]["missing"]}
    # worker 0 sent its DONE without waiting for worker 1's batch (the 2-hop protocol): it is at the
    # barrier, and waits for nothing until the next BEGIN says whose batches to expect
    assert list(missing) == [1] and missing[1]["vertex"] == "stuck" and events[0]["waiting"] == {}
    assert not any(alive(p.pid) for p in procs)


def test_a_worker_waiting_at_begin_for_a_lost_batch_is_named_by_the_next_barriers_hang_report(tmp_path):
    """Worker 1's batch of superstep 2 exceeds the 1 MB message limit, so libzmq drops it: worker 1
    is done with 2 (DONE goes out first), worker 0 waits for it at BEGIN 3 and the barrier of 3
    times out naming worker 0 as waiting for peer 1."""
    procs = []
    with pytest.raises(SuperstepTimeout) as info:
        traced_run(tmp_path, "cluster", "oversize=true", superstep_timeout=1.5, max_message_bytes=1 << 20, shm=False,
                   on_start=lambda m, p: procs.extend(p))
    msg = str(info.value)
    assert "superstep 3 exceeded --superstep-timeout 1.5s" in msg
    assert "worker 0" in msg and "waiting for the batches of peer(s) [1]" in msg
    events = [e for e in trace.load_trace(str(tmp_path / "cluster")).events if e["event"] == "hang"]
    assert [m["worker"] for m in events[0]["missing"]] == [0] and events[0]["missing"][0]["state"] == "waiting"
    assert events[0]["waiting"] == {"0": [1]}
    assert not any(alive(p.pid) for p in procs)


def test_chrome_export_of_a_cluster_run(tmp_path):
    run_dir, _, _ = traced_run(tmp_path, "cluster")
    out = tmp_path / "trace.json"
    assert main(["trace", "export", run_dir.url, "--chrome", str(out)]) == 0
    doc = json.loads(out.read_text())
    phases = {e["ph"] for e in doc["traceEvents"]}
    assert {"X", "M", "C"} <= phases
    assert main(["trace", "show", run_dir.url, "--superstep", "3", "--vertex", "bad"]) == 0


def test_replay_reproduces_the_messages_of_the_original_run(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["run", "pagerank", "--set", f"graph={GRAPH}", "--set", "mode=vertex", "--set", "tol=0",
                 "--set", "iterations=20", "--set", "checkpoint_every=5", "--capture", "n1*",
                 "--workers", "2", "--runtime", "local", "--run-dir", str(run)]) == 0
    capsys.readouterr()
    assert main(["trace", "replay", str(run), "--vertex", "n12", "--superstep", "13", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["checkpoint"] == 10 and [s["superstep"] for s in r["replayed"]] == [10, 11, 12, 13]
    assert all(s["matches"] for s in r["replayed"]) and r["replayed"][-1]["sent"] > 0
    assert main(["trace", "replay", str(run), "--vertex", "n30", "--superstep", "13"]) == 2  # not captured


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.complex64])
def test_nonfinite_finds_nan_and_inf_without_false_alarms_or_warnings(dtype, recwarn):
    from mariana.engine.tracing import SCAN_LIMIT, nonfinite

    big = np.ones(SCAN_LIMIT - 1, dtype)  # scanned whole
    assert nonfinite(big) is None
    big[-1] = np.nan
    assert nonfinite({"w": [big]}) == ("nan", "payload.w[0]")
    small = np.ones(100, dtype)
    small[7] = -np.inf
    assert nonfinite(small, "g") == ("inf", "g")
    huge = np.full(1000, 6e4 if dtype == np.float16 else 1e30, dtype)  # x.x overflows, every x is finite
    assert nonfinite(huge) is None
    assert nonfinite(np.ones((300, 400), dtype)[:, ::2]) is None  # not contiguous
    sampled = np.ones(4 * SCAN_LIMIT, dtype)  # scanned on 4 blocks: a NaN at a block start is seen
    sampled[2 * SCAN_LIMIT] = np.nan
    assert nonfinite(sampled) == ("nan", "payload")
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def _lines(run_dir: RunDir) -> list[int]:
    return [r["superstep"] for r in run_dir.read_jsonl("metrics.jsonl")] if run_dir.exists("metrics.jsonl") else []


def test_metrics_lines_are_written_in_batches_and_all_of_them_at_the_end(tmp_path, runtime):
    """metrics_every_s apart (the first at once); before a checkpoint; every line when the job ends."""
    run_dir = RunDir(str(tmp_path / runtime))
    seen: list[list[int]] = []
    result = run_job("contract_jobs:forever", sets=["max_supersteps=12", "checkpoint_every=6"], workers=2,
                     runtime=runtime, run_dir=run_dir, metrics_every_s=3600.0,
                     on_superstep=lambda record: seen.append(_lines(run_dir)))
    assert result.supersteps == 12
    assert seen[0] == [0]  # the first line at once
    assert seen[4] == [0]  # then nothing for an hour ...
    assert seen[5] == list(range(6))  # ... but every line before the checkpoint of superstep 6
    assert seen[10] == list(range(6))
    assert _lines(run_dir) == list(range(12))  # and all of them at the end


def test_each_metrics_line_at_once_when_asked_and_the_lines_so_far_when_a_job_fails(tmp_path, runtime):
    run_dir = RunDir(str(tmp_path / runtime))
    seen: list[list[int]] = []
    run_job("contract_jobs:forever", sets=["max_supersteps=4"], workers=2, runtime=runtime, run_dir=run_dir,
            metrics_every_s=0.0, on_superstep=lambda record: seen.append(_lines(run_dir)))
    assert seen == [list(range(s + 1)) for s in range(4)]  # what a sweep's scheduler reads live
    failed = RunDir(str(tmp_path / f"{runtime}-faulty"))
    with pytest.raises(MarianaError, match="deliberate"):
        run_job("contract_jobs:faulty", workers=2, runtime=runtime, run_dir=failed, metrics_every_s=3600.0)
    assert _lines(failed) == [0, 1]  # superstep 2 raised: the two lines before it are stored
