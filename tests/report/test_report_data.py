"""The snapshot of a run (mariana.report.data.collect) against the run's own files."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from report_helpers import losses, metrics, run_cli

from mariana.errors import UsageError
from mariana.report import collect
from mariana.report.data import samples_per_second, series_from_metrics
from mariana.storage import RunDir
from mariana.storage.checkpoint import Checkpoints


def test_snapshot_of_a_finished_run_holds_the_runs_numbers(dnn_run: Path):
    snap = collect(str(dnn_run))
    json.dumps(snap, allow_nan=False)  # what a browser's JSON.parse accepts
    xs, ys = losses(dnn_run)
    assert snap["series"]["loss"] == {"x": xs, "y": ys}
    lines = metrics(dnn_run)
    acc = [(m["superstep"], m["test_accuracy"]) for m in lines if "test_accuracy" in m]
    assert len(acc) == 2  # one evaluation per epoch
    assert list(zip(snap["series"]["test_accuracy"]["x"], snap["series"]["test_accuracy"]["y"])) == acc
    assert snap["status"] == "finished" and snap["job"]["job"] == "dnn-dp"
    assert snap["superstep"] == lines[-1]["superstep"]
    assert snap["counters"]["supersteps"] == len(lines)
    assert snap["counters"]["loss"] == ys[-1] and snap["counters"]["test_accuracy"] == acc[-1][1]
    # checkpoints: what the run directory holds, and the supersteps they were taken at
    assert [c["superstep"] for c in snap["checkpoints"]] == Checkpoints(RunDir(str(dnn_run), create=False)).supersteps()
    assert all(c["valid"] and c["size"] > 0 for c in snap["checkpoints"])
    assert snap["checkpoint_marks"] == sorted({m["checkpoint"] for m in lines if "checkpoint" in m})
    assert snap["checkpoint_marks"] and all(s % 20 == 0 for s in snap["checkpoint_marks"])
    # one timeline row per worker per superstep, phases from the trace
    rows = snap["timeline"]["rows"]
    assert len(rows) == len(lines) and {r["worker"] for r in rows} == {0}
    trace0 = [json.loads(x) for x in (dnn_run / "trace" / "worker-0.jsonl").read_text().splitlines()]
    assert [r["compute"] for r in rows] == [t["compute_s"] for t in trace0]
    assert 0.0 <= rows[0]["start"] < 1.0 and all(b["start"] >= a["start"] for a, b in zip(rows, rows[1:]))
    assert [w["host"] for w in snap["workers"]] == [trace0[-1]["host"]]
    assert snap["restarts"] == [] and snap["flags"] == [] and snap["counters"]["nan_flags"] == 0


def test_samples_per_second_is_the_batch_over_the_time_of_its_step(dnn_run: Path):
    snap = collect(str(dnn_run))
    lines = metrics(dnn_run)
    batch = json.loads((dnn_run / "job.json").read_text())["config"]["batch_size"]
    # by hand: each loss line closes a step; its time is the wall time since the previous one
    expected, wall = [], 0.0
    for m in lines:
        wall += m["wall_s"]
        if "loss" in m:
            expected.append(batch / wall)
            wall = 0.0
    assert snap["samples_per_s"]["x"] == losses(dnn_run)[0]
    assert snap["samples_per_s"]["y"] == pytest.approx(expected, rel=1e-12)


def test_samples_and_series_on_given_lines():
    lines = [{"superstep": 0, "wall_s": 0.5}, {"superstep": 1, "wall_s": 0.5, "loss": 2.0},
             {"superstep": 2, "wall_s": 0.25, "loss": float("nan")}, {"superstep": 3, "wall_s": 1.0, "samples": 10}]
    assert samples_per_second(lines, 64) == {"x": [1, 2, 3], "y": [64.0, 256.0, 10.0]}
    assert samples_per_second(lines[:3], None) == {"x": [], "y": []}  # no batch size, no samples: nothing
    series, nans = series_from_metrics(lines)
    assert series["loss"] == {"x": [1, 2], "y": [2.0, None]}
    assert nans == [{"superstep": 2, "key": "loss", "value": "nan"}]


def test_a_cluster_run_has_two_workers_and_its_stragglers(cluster_run: Path):
    snap = collect(str(cluster_run))
    assert [w["worker"] for w in snap["workers"]] == [0, 1]
    assert all(w["host"] and w["pid"] for w in snap["workers"])
    assert snap["workers"][0]["pid"] != snap["workers"][1]["pid"]
    lines = metrics(cluster_run)
    rows = snap["timeline"]["rows"]
    assert len(rows) == 2 * len(lines)
    master = [json.loads(x) for x in (cluster_run / "trace" / "master.jsonl").read_text().splitlines()]
    lagged = [m for m in master if "lag_s" in m]
    assert [(x["superstep"], x["straggler"]) for x in snap["lags"]] == [(m["superstep"], m["straggler"]) for m in lagged]
    assert sum(s["count"] for s in snap["stragglers"]) == len(lagged)
    assert snap["counters"]["bytes"] == sum(m.get("bytes", 0) for m in lines) > 0


def test_a_run_still_going_is_read_up_to_its_last_whole_line(dnn_run: Path, tmp_path: Path):
    """A copy of the run as it was mid-way: job.json says running, metrics.jsonl ends in half a line."""
    run = tmp_path / "going"
    shutil.copytree(dnn_run, run)
    job = json.loads((run / "job.json").read_text())
    job["status"] = "running"
    (run / "job.json").write_text(json.dumps(job))
    text = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    (run / "metrics.jsonl").write_text("".join(text[:30]) + text[30][:17])
    snap = collect(str(run))
    assert snap["status"] == "running" and snap["superstep"] == 29 and snap["counters"]["supersteps"] == 30
    assert snap["series"]["loss"]["x"][-1] <= 29


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the divergence itself
def test_a_diverging_run_shows_its_nan_flags(tmp_path: Path):
    run = tmp_path / "nan"
    assert run_cli("run", "dnn-dp", "--run-dir", str(run), "--set", "lr=1e6", "--set", "epochs=1",
                   "--max-supersteps", "12") == 0
    snap = collect(str(run))
    traced = [f for line in (run / "trace" / "worker-0.jsonl").read_text().splitlines()
              for f in json.loads(line)["flags"]]
    assert traced, "lr=1e6 should make the model diverge to NaN/Inf"
    assert snap["flags_total"] == len(traced) and snap["counters"]["nan_flags"] >= len(traced)
    assert {f["flag"] for f in snap["flags"]} <= {"nan", "inf"}
    assert all(isinstance(f["superstep"], int) and f["vertex"] for f in snap["flags"])
    json.dumps(snap, allow_nan=False)
    assert all(y is None or math.isfinite(y) for s in snap["series"].values() for y in s["y"])


def test_not_a_run_directory_is_one_clear_error(tmp_path: Path, capsys):
    with pytest.raises(UsageError, match="no such run directory"):
        collect(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="not a run directory"):
        collect(str(tmp_path / "empty"))
    assert run_cli("report", str(tmp_path / "missing"), "--out", str(tmp_path / "r.html")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mariana: error:") and "missing" in err[0]
    assert not (tmp_path / "r.html").exists()


def test_a_corrupt_metrics_line_in_the_middle_is_named(dnn_run: Path, tmp_path: Path):
    run = tmp_path / "bad"
    shutil.copytree(dnn_run, run)
    lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    lines[3] = "{not json\n"
    (run / "metrics.jsonl").write_text("".join(lines))
    with pytest.raises(UsageError, match=r"metrics.jsonl line 4: not a JSON record"):
        collect(str(run))


@pytest.mark.timeout(180)
def test_a_recovered_worker_loss_is_a_restart_on_the_report(tmp_path: Path):
    """kill -9 of a worker mid-run: the cluster rolls back to a checkpoint; the report says so."""
    import os
    import signal

    from mariana.jobs.launch import run_job
    from mariana.report.figures import figures

    procs: list = []
    killed: list = []

    def kill(line):
        if line["superstep"] == 30 and not killed:
            killed.append(procs[1].pid)
            os.kill(procs[1].pid, signal.SIGKILL)

    run = tmp_path / "killed"
    result = run_job("dnn-dp", None, ["epochs=2", "checkpoint_every=8"], workers=2, runtime="cluster",
                     run_dir=RunDir(str(run)), on_superstep=kill, on_start=lambda m, p: procs.extend(p))
    assert killed and result.metrics[-1]["restarts"] == 1
    snap = collect(str(run))
    assert snap["counters"]["restarts"] == 1
    (restart,) = snap["restarts"]
    assert restart["lost"] in (0, 1) and restart["restart"] == 1  # worker indices follow the join order
    assert 0 < restart["rollback_to"] <= 30 and restart["rollback_to"] % 8 == 0
    marks = [(s["x0"], a["text"]) for s, a in zip(figures(snap)["fig-loss"]["layout"]["shapes"],
                                                    figures(snap)["fig-loss"]["layout"]["annotations"])]
    assert (restart["superstep"], "restart 1") in marks
