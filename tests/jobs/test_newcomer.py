"""What a newcomer tripped on (issue 20): interrupted runs, config tables, job modules in the
current directory, where the report goes, and the messages of bad training keys."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mariana.cli import main

TESTS = Path(__file__).resolve().parent.parent


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS / "engine"), *sys.path])
    return env


def _wait(cond, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize(("sig", "workers", "code"), [(signal.SIGTERM, "1", 143), (signal.SIGINT, "2", 130)],
                         ids=["sigterm-local", "ctrl-c-cluster"])
def test_a_stopped_run_records_interrupted(tmp_path, sig, workers, code):
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "mariana", "run", "contract_jobs:forever", "--set",
                             "max_supersteps=100000000", "--workers", workers, "--run-dir", str(run)],
                            env=_env(), stderr=subprocess.PIPE, text=True)
    try:
        _wait(lambda: (run / "metrics.jsonl").exists() and (run / "metrics.jsonl").stat().st_size > 0, 60, "supersteps")
        assert json.loads((run / "job.json").read_text())["status"] == "running"
        proc.send_signal(sig)
        assert proc.wait(timeout=60) == code, proc.stderr.read()
        info = json.loads((run / "job.json").read_text())
        assert info["status"] == "interrupted", info
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_config_file_top_level_keys_apply_beside_a_job_table(tmp_path):
    import tomllib

    from mariana.jobs import get_job, resolve_config

    doc = tomllib.loads('epochs = 2\nlr = 0.5\n[dnn-dp]\nreplicas = 2\nlr = 0.1\n[cnn-hybrid]\ngroups = 2\n')
    config = resolve_config(get_job("dnn-dp"), doc, ["batch_size=32"], "f.toml")
    assert (config["epochs"], config["replicas"], config["lr"], config["batch_size"]) == (2, 2, 0.1, 32)


MYMOD = '''
import mariana
from mariana.jobs import Job, Key


class Once(mariana.Vertex):
    def compute(self, ctx, messages):
        self.value = ctx.superstep
        ctx.vote_to_halt()


def build(config, bctx):
    g = mariana.Graph("once")
    g.add_vertex(Once("only", 0))
    return g


def finish(result, config, run_dir):
    return f"ran {result.supersteps} superstep(s) with greeting {config['greeting']}", {}


JOB = Job("once", "a job from the current directory", (Key("greeting", "hi", "str", "what to say"),), build, finish)
'''


def test_a_job_module_in_the_current_directory_is_found(tmp_path, monkeypatch, capsys):
    (tmp_path / "mymod_newcomer.py").write_text(MYMOD)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    assert main(["run", "mymod_newcomer:JOB", "--set", "greeting=hello", "--run-dir", str(tmp_path / "run")]) == 0
    assert "greeting hello" in capsys.readouterr().out


@pytest.mark.parametrize(("job", "sets", "needle"), [
    ("dnn-dp", ["batch_size=0"], "'batch_size' must be >= 1; got 0"),
    ("cnn-hybrid", ["batch_size=0"], "'batch_size' must be >= 1; got 0"),
    ("cpu-cluster", ["batch_size=-4"], "'batch_size' must be >= 1; got -4"),
    ("dnn-dp", ["replicas=-2"], "'replicas' must be >= 0 (0: one per worker), got -2"),
])
def test_bad_sizes_say_what_is_wrong(tmp_path, capsys, job, sets, needle):
    assert main(["run", job, "--run-dir", str(tmp_path / "run"), *(a for s in sets for a in ("--set", s))]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err, err


def test_load_model_gives_the_accuracy_of_the_run(tmp_path, capsys):
    import numpy as np

    import mariana
    from mariana.jobs import get_job, resolve_config
    from mariana.jobs.trainjob import dataset_of

    run = tmp_path / "run"
    assert main(["run", "dnn-dp", "--set", "epochs=2", "--run-dir", str(run)]) == 0
    capsys.readouterr()
    acc = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()][-1]["test_accuracy"]
    ds = dataset_of(resolve_config(get_job("dnn-dp"), {}))
    model = mariana.load_model(str(run))
    assert (model.predict(ds.x_test).argmax(1) == ds.y_test).mean() == acc
    npz = tmp_path / "p.npz"
    assert main(["params", "export", str(run), "--to", str(npz)]) == 0
    same = mariana.load_model(str(npz), model=["dense:256:relu", "dense:256:relu", "dense:10"], input_shape=(64,))
    assert np.array_equal(same.predict(ds.x_test), model.predict(ds.x_test))
    with pytest.raises(mariana.UsageError, match="pass model="):
        mariana.load_model(str(npz))


CUSTOM = '''
import numpy as np
import mariana
from mariana.jobs import Job, Key


class Counter(mariana.Vertex):
    def compute(self, ctx, messages):
        if self.value is None:
            self.value = {"w": np.zeros(3, np.float32)}
        self.value["w"] += 1
        if ctx.superstep >= 9:
            ctx.vote_to_halt()


def build(config, bctx):
    g = mariana.Graph("counter")
    g.add_vertex(Counter("c0", None))
    return g


JOB = Job("counter", "a custom job without an export hook", (), build)
'''


def test_params_export_of_a_custom_job_without_an_export_hook(tmp_path, monkeypatch, capsys):
    import numpy as np

    (tmp_path / "custom_newcomer.py").write_text(CUSTOM)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    run = tmp_path / "run"
    assert main(["run", "custom_newcomer:JOB", "--set", "checkpoint_every=4", "--run-dir", str(run)]) == 0
    assert main(["params", "export", str(run), "--to", str(tmp_path / "p.npz")]) == 0
    with np.load(tmp_path / "p.npz") as npz:
        assert npz.files == ["c0/value/w"] and np.array_equal(npz["c0/value/w"], np.full(3, 8, np.float32))
