"""The report and the page as a newcomer read them (issue 20, item 9): titles clear of the toolbar,
the timeline of a resumed run, counts that swing every superstep, other metrics each on their own
scale without internal aggregators, and the last metrics of a finished run on `mariana ui`."""

from __future__ import annotations

import json
import time
from pathlib import Path

from report_helpers import get_json, metrics, run_cli

from mariana.report.data import collect
from mariana.report.figures import figures
from mariana.report.live import LiveServer


def test_titles_sit_left_of_the_toolbar(dnn_run: Path):
    figs = figures(collect(str(dnn_run)))
    assert figs and all(f["layout"]["title"]["xanchor"] == "left" for f in figs.values())


def test_the_timeline_of_a_resumed_run_shows_its_last_session(tmp_path: Path, monkeypatch):
    import mariana.report.data

    monkeypatch.setattr(mariana.report.data, "SESSION_GAP_S", 0.5)  # the test's pause is 1 s, on a loaded machine
    monkeypatch.setattr(mariana.report.data, "SESSION_GAP_SUPERSTEPS", 0)
    run = tmp_path / "run"
    assert run_cli("run", "dnn-dp", "--set", "epochs=1", "--set", "checkpoint_every=10", "--max-supersteps", "25",
                   "--run-dir", str(run)) == 0
    time.sleep(1.0)  # the pause between the sessions of a resumed run (the workload of this test)
    assert run_cli("run", "--resume", str(run)) == 0
    snap = collect(str(run))
    rows = snap["timeline"]["rows"]
    assert snap["timeline"]["resumed_at"] == 20 and min(r["superstep"] for r in rows) == 20
    assert min(r["start"] for r in rows) < 0.01 and max(r["start"] for r in rows) < 1.0  # the pause is not shown
    assert "since the resume at superstep 20" in figures(snap)["fig-timeline"]["layout"]["title"]["text"]


def test_counts_that_swing_every_step_are_points_and_other_metrics_have_their_own_scales(tmp_path: Path):
    run = tmp_path / "run"
    assert run_cli("run", "cpu-cluster", "--set", "epochs=1", "--runtime", "local", "--workers", "2",
                   "--run-dir", str(run)) == 0
    figs = figures(collect(str(run)))
    modes = {t["name"]: t["mode"] for t in figs["fig-progress"]["data"]}
    assert modes["messages"] == "markers"
    other = figs["fig-other"]
    names = [t["name"] for t in other["data"]]
    assert "counter/samples" in names and "epoch" in names and not any(n.lstrip("_") == "want" for n in names)
    axes = [t.get("yaxis", "y") for t in other["data"]]
    assert len(set(axes)) == len(names)  # one scale per metric
    for i, name in enumerate(names):
        assert other["layout"]["yaxis" if i == 0 else f"yaxis{i + 1}"]["title"]["text"] == name


def test_mariana_ui_on_a_finished_run_has_its_last_metrics(dnn_run: Path):
    server = LiveServer(str(dnn_run))
    url = server.start()
    try:
        state = get_json(url + "api/state")
        last = metrics(dnn_run)[-1]
        assert state["last_metrics"]["superstep"] == last["superstep"]
        assert state["last_metrics"]["test_accuracy"] == last["test_accuracy"]
    finally:
        server.close()
    assert json.dumps(state)
