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
