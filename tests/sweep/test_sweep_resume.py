"""A sweep killed with ``kill -9`` and resumed ends with the ranking of one run straight through,
and parallel trials make the same decisions as sequential ones (slow tier: three small sweeps)."""

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

pytestmark = pytest.mark.slow

ARGS = ["dnn-dp", "--param", "lr=loguniform(1e-3,1e-1)", "--param", "batch_size=choice(64,128)",
        "--param", "optimizer=choice(sgd,momentum)", "--set", "epochs=3", "--set", "model=['dense:64:relu','dense:10']",
        "--trials", "8", "--seed", "1", "--scheduler", "asha", "--json"]


def _outcome(doc: dict) -> list[tuple]:
    return [(t["index"], t["status"], t["reports"], t["last"]) for t in doc["trials"]]


def _events(sweep: Path) -> list[dict]:
    path = sweep / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip().endswith("}")]


def _interrupt(sweep: Path, how: str) -> None:
    """Start a parallel sweep in its own process group and stop it mid-way: ``kill -9`` of the sweep
    process, or Ctrl-C as a terminal sends it (SIGINT to the whole group)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]),
                                                        os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "mariana", "sweep", *ARGS, "--parallel", "2",
                             "--sweep-dir", str(sweep)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while sum(e["event"] in ("paused", "completed") for e in _events(sweep)) < 4:
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        assert time.monotonic() < deadline, "the sweep made no progress"
        time.sleep(0.05)
    if how == "kill":
        proc.send_signal(signal.SIGKILL)
    else:
        os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == (-signal.SIGKILL if how == "kill" else 130), err.decode()
    statuses = [json.loads((sweep / f"trials/{i:04d}/trial.json").read_text())["status"] for i in range(8)]
    assert any(s not in ("completed", "stopped", "failed") for s in statuses), statuses  # stopped mid-sweep
    assert "failed" not in statuses  # an interrupted trial is continued, not failed


def test_kill_9_or_ctrl_c_then_resume_give_the_same_ranking(tmp_path, capsys):
    assert main(["sweep", *ARGS, "--sweep-dir", str(tmp_path / "straight")]) == 0
    straight = json.loads(capsys.readouterr().out)
    assert {t["status"] for t in straight["trials"]} == {"completed", "stopped"}
    for how in ("kill", "ctrl-c"):
        sweep = tmp_path / how
        _interrupt(sweep, how)
        assert main(["sweep", "--resume", str(sweep), "--json"]) == 0
        resumed = json.loads(capsys.readouterr().out)
        assert _outcome(resumed) == _outcome(straight), how
        assert json.loads((sweep / "sweep.json").read_text())["status"] == "finished"


def test_parallel_trials_decide_as_sequential_ones(tmp_path, capsys):
    assert main(["sweep", *ARGS, "--sweep-dir", str(tmp_path / "one")]) == 0
    one = json.loads(capsys.readouterr().out)
    assert main(["sweep", *ARGS, "--parallel", "3", "--sweep-dir", str(tmp_path / "three")]) == 0
    three = json.loads(capsys.readouterr().out)
    assert _outcome(three) == _outcome(one)


def test_a_sweep_on_s3(s3_url, capsys):
    """Trials on a real S3 server (SeaweedFS on loopback): the sweep directory is any fsspec URL."""
    url = f"{s3_url}/sweep"
    assert main(["sweep", "dnn-dp", "--param", "lr=grid(0.05, 0.001)", "--set", "epochs=3",
                 "--set", "model=['dense:32:relu','dense:10']", "--scheduler", "asha", "--reduction", "2",
                 "--sweep-dir", url, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [t["params"]["lr"] for t in doc["trials"]] == [0.05, 0.001]
    assert [t["status"] for t in doc["trials"]] == ["completed", "stopped"]
    assert main(["report", url, "--out", f"{s3_url}/sweep.html", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["trials"][0]["params"] == {"lr": 0.05}
