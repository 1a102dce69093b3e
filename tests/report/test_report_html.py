"""`mariana report RUN --out FILE.html`: one self-contained file holding the run's numbers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from report_helpers import losses, metrics, run_cli

from mariana.report import report_html


def embedded(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="run-data">(.*?)</script>', page, re.S)
    assert m, "the report embeds its data"
    return json.loads(m.group(1))


def test_report_is_one_self_contained_file_with_the_runs_curves(dnn_run: Path, tmp_path: Path, capsys):
    out = tmp_path / "report.html"
    assert run_cli("report", str(dnn_run), "--out", str(out), "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    page = out.read_text()
    assert doc["out"] == str(out) and doc["bytes"] == len(page.encode())
    # nothing to fetch: no external script, stylesheet, image or font
    assert not re.search(r'<(script|link|img|iframe)[^>]+(src|href)=', page)
    assert "Plotly" in page and "newPlot" in page  # plotly.js itself is inline
    data = embedded(page)
    figs = data["figures"]
    assert sorted(figs) == doc["figures"]
    assert {"fig-loss", "fig-accuracy", "fig-samples", "fig-wall", "fig-timeline"} <= set(figs)
    xs, ys = losses(dnn_run)
    loss = next(t for t in figs["fig-loss"]["data"] if t["name"] == "loss")
    assert loss["x"] == xs and loss["y"] == ys
    acc = figs["fig-accuracy"]["data"][0]
    assert acc["y"] == [m["test_accuracy"] for m in metrics(dnn_run) if "test_accuracy" in m]
    phases = [t["name"] for t in figs["fig-timeline"]["data"]]
    assert phases == ["compute", "exchange", "wait", "barrier"]
    # the checkpoints the run directory holds are marked on the loss curve (not the deleted ones)
    marks = [s["x0"] for s in figs["fig-loss"]["layout"]["shapes"] if s["name"].startswith("checkpoint")]
    kept = sorted(c["superstep"] for c in data["snapshot"]["checkpoints"])
    assert marks == kept and marks
    taken = set(data["snapshot"]["checkpoint_marks"]) | set(kept)
    assert data["snapshot"]["counters"]["checkpoints_taken"] == len(taken)
    assert data["snapshot"]["job"]["config"]["epochs"] == 2


def test_report_text_output_and_default_name(dnn_run: Path, tmp_path: Path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run_cli("report", str(dnn_run)) == 0
    out = capsys.readouterr().out
    assert (dnn_run / "report.html").exists() and not (tmp_path / "report.html").exists()  # beside the run
    assert out.startswith(f"wrote {dnn_run}/report.html: finished run, ") and "opens without a network" in out


def test_a_graph_job_gets_its_own_curves_and_no_loss(tmp_path: Path):
    run = tmp_path / "pr"
    assert run_cli("run", "pagerank", "--workers", "2", "--runtime", "local", "--run-dir", str(run)) == 0
    page, snap, figs = report_html(str(run))
    assert "fig-loss" not in figs and "fig-samples" not in figs
    assert figs["fig-progress"]["data"][0]["y"] == [m["active"] for m in metrics(run)]
    # each worker's resident memory and peak per superstep, as its trace records say
    records = [r for r in map(json.loads, (run / "trace" / "worker-1.jsonl").read_text().splitlines())
               if "rss_bytes" in r]  # (a process reads its memory at most every 10 ms)
    assert records
    lines = {t["name"]: t for t in figs["fig-memory"]["data"]}
    assert lines["worker 1 resident"]["x"] == [r["superstep"] for r in records]
    assert lines["worker 1 resident"]["y"] == [r["rss_bytes"] / 1e6 for r in records]
    assert lines["worker 1 peak so far"]["y"] == [r["peak_rss_bytes"] / 1e6 for r in records]
    for w in snap["workers"]:
        own = [json.loads(line) for line in (run / "trace" / f"worker-{w['worker']}.jsonl").read_text().splitlines()]
        assert w["peak_mb"] == round(max(r["peak_rss_bytes"] for r in own if "peak_rss_bytes" in r) / 1e6, 1)
    assert {r["worker"] for r in snap["timeline"]["rows"]} == {0, 1}


def test_markup_in_a_config_value_stays_text(dnn_run: Path, tmp_path: Path):
    """A config string with </script> cannot end the embedded data early or inject markup."""
    import shutil

    run = tmp_path / "evil"
    shutil.copytree(dnn_run, run)
    job = json.loads((run / "job.json").read_text())
    job["config"]["data"] = "</script><script>alert(1)</script>"
    (run / "job.json").write_text(json.dumps(job))
    page, _, _ = report_html(str(run))
    assert "</script><script>alert(1)" not in page
    assert embedded(page)["snapshot"]["job"]["config"]["data"] == "</script><script>alert(1)</script>"


@pytest.mark.slow
def test_report_of_a_run_on_s3(s3_url: str, tmp_path: Path, capsys):
    run = f"{s3_url}/runs/dnn"
    assert run_cli("run", "dnn-dp", "--run-dir", run, "--set", "epochs=1", "--set", "checkpoint_every=10") == 0
    out = tmp_path / "s3.html"
    assert run_cli("report", run, "--out", str(out), "--json") == 0
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert doc["status"] == "finished" and doc["supersteps"] > 20  # allreduce: one superstep per step
    snap = embedded(out.read_text())["snapshot"]
    assert snap["run"] == run and snap["series"]["loss"]["y"] and snap["checkpoints"]
    assert len(snap["timeline"]["rows"]) == doc["supersteps"]


def test_a_run_without_traces_still_gets_its_curves(tmp_path: Path):
    run = tmp_path / "untraced"
    assert run_cli("run", "dnn-dp", "--run-dir", str(run), "--set", "epochs=1", "--no-trace") == 0
    _, snap, figs = report_html(str(run))
    assert "fig-timeline" not in figs and "fig-stragglers" not in figs
    assert snap["trace"] is None and snap["timeline"]["rows"] == []
    assert next(t for t in figs["fig-loss"]["data"] if t["name"] == "loss")["y"] == losses(run)[1]
