"""``mariana sweep`` end to end on the bundled digits: a tiny real sweep (a failing trial included),
its trials as ordinary run directories, and bad input as one line with exit 2."""

from __future__ import annotations

import json
import urllib.request

import pytest

from mariana.cli import main
from mariana.report.sweep import SweepServer, collect_sweep, sweep_figures
from mariana.storage import RunDir
from mariana.sweep import Sweep


def _sweep(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["sweep", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_tiny_sweep_ranks_trials_and_records_the_failing_one(tmp_path, capsys):
    url = str(tmp_path / "sw")
    code, out, err = _sweep(capsys, "dnn-dp", "--param", "lr=grid(0.05, 0.0005)", "--param", "batch_size=grid(128, 5000)",
                            "--set", "epochs=2", "--set", "model=['dense:32:relu','dense:10']", "--set", "optimizer=momentum",
                            "--scheduler", "asha", "--grace", "1", "--reduction", "2", "--sweep-dir", url, "--json")
    assert code == 0, err
    doc = json.loads(out)
    trials = doc["trials"]
    assert [t["params"] for t in trials[:2]] == [{"lr": 0.05, "batch_size": 128}, {"lr": 0.0005, "batch_size": 128}]
    best, second = trials[0], trials[1]
    assert best["status"] == "completed" and best["reports"] == 2 and best["last"] > 0.6
    assert second["status"] in ("completed", "stopped") and second["last"] < best["last"]
    failed = trials[2:]
    assert [t["status"] for t in failed] == ["failed", "failed"]
    assert all("batch_size 5000 is larger than the training set" in t["error"] for t in failed)
    assert "failed" in err
    # every trial is an ordinary run directory: job.json, metrics, params; the sweep's ranking is recorded
    run = RunDir(f"{url}/trials/{best['index']:04d}", create=False)
    assert run.read_json("job.json")["status"] == "finished"
    assert run.exists("params/manifest.json") or run.list("params")
    results = RunDir(url, create=False).read_json("results.json")
    assert [t["index"] for t in results["ranking"]] == [t["index"] for t in trials]
    # the sweep's report: ranking, parallel coordinates, curves (stopped ones marked), time per trial
    out_html = tmp_path / "sweep.html"
    assert main(["report", url, "--out", str(out_html), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["figures"] == ["fig-curves", "fig-parcoords", "fig-time"]
    assert [t["index"] for t in info["trials"]] == [t["index"] for t in trials]
    page = out_html.read_text()
    assert "Parameters vs test_accuracy" in page and "batch_size 5000 is larger" in page
    snap = collect_sweep(url)
    curves = sweep_figures(snap)["fig-curves"]["data"]
    assert len(curves) == 2  # the failed trials reported nothing
    for trace in curves:
        assert (trace["line"]["dash"] == "dash") == ("stopped" in trace["name"])
    # the live page of a sweep
    server = SweepServer(url)
    base = server.start()
    try:
        assert "Trials, best first" in urllib.request.urlopen(base, timeout=10).read().decode()
        api = json.loads(urllib.request.urlopen(base + "api/sweep", timeout=10).read())
        assert api["best"]["index"] == best["index"]
    finally:
        server.close()
    # a finished sweep resumed: nothing runs again, same ranking
    again = Sweep.open(url).run()
    assert [t.index for t in again] == [t["index"] for t in trials]


@pytest.mark.parametrize("argv, words", [
    (["dnn-dp", "--param", "lrr=uniform(0.1,0.2)"], "unknown config key 'lrr'"),
    (["dnn-dp", "--param", "lr=uniform(0.1)"], "uniform takes two arguments"),
    (["dnn-dp"], "search space is empty"),
    (["dnn-dp", "--param", "lr=uniform(0.1,0.2)", "--metric", "test_acc"], "does not report it"),
    (["dnn-dp", "--param", "lr=uniform(0.1,0.2)", "--scheduler", "asha", "--reduction", "1"], "--reduction must be > 1"),
    (["--resume", "/nonexistent/sweep"], "not a sweep directory"),
    ([], "needs a JOB"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, argv, words):
    code, out, err = _sweep(capsys, *argv, *(["--sweep-dir", str(tmp_path / "sw")] if argv[:1] == ["dnn-dp"] else []))
    assert code == 2
    assert words in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "sw").exists()


def test_sweep_table_in_the_config_file(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text('epochs = 1\nmodel = ["dense:16:relu", "dense:10"]\n[sweep]\ntrials = 2\nseed = 3\nmetric = "test_loss"\n'
                   '[sweep.params]\nlr = "loguniform(1e-2, 1e-1)"\nbatch_size = [128, 256]\n')
    url = str(tmp_path / "sw")
    code, out, err = _sweep(capsys, "dnn-dp", "--config", str(cfg), "--sweep-dir", url, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["metric"] == "test_loss" and doc["mode"] == "min" and len(doc["trials"]) == 2
    losses = [t["last"] for t in doc["trials"]]
    assert losses == sorted(losses)
    bad = tmp_path / "bad.toml"
    bad.write_text('[sweep]\ntrails = 2\n[sweep.params]\nlr = "uniform(0.1, 0.2)"\n')
    code, out, err = _sweep(capsys, "dnn-dp", "--config", str(bad), "--sweep-dir", str(tmp_path / "sw2"))
    assert code == 2 and "unknown [sweep] option 'trails'" in err
