"""The soak: one long dnn-dp run on 2 workers through 20 seeded random kill -9 / SIGSTOP events on
its workers and 2 kill -9 of its master, each master restarted as a cluster manager would (the
same command line: ``--resume-if-possible``). It ends with parameters bit-identical to an
uninterrupted run."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mariana.cli import main
from mariana.jobs import get_job, resolve_config
from mariana.jobs.dnn_data_parallel import final_params
from mariana.jobs.launch import run_job
from mariana.storage import RunDir
from mariana.storage.checkpoint import Checkpoints
from test_cluster import alive, children

pytestmark = [pytest.mark.faults, pytest.mark.timeout(600)]

SEED = 22
# two supersteps a step, ~700 in all: room for 22 events even where the job runs a few checkpoints
# ahead of the test between two looks (with 6 epochs, 350 supersteps, a quiet machine finished the
# job before the last events in 2 of 6 runs)
SETS = ["epochs=12", "checkpoint_every=10", "batch_size=48", "exchange=linear"]
WORKER_EVENTS, MASTER_EVENTS = 20, 2
FAST = ["--heartbeat-interval", "0.2", "--worker-timeout", "1.5", "--max-restarts", "100"]


def _argv(run: Path) -> list[str]:
    return [sys.executable, "-m", "mariana", "-q", "run", "dnn-dp", "--workers", "2", "--run-dir", str(run),
            "--resume-if-possible", *FAST, *[a for s in SETS for a in ("--set", s)]]


def _newest(run: Path) -> int:
    """The newest committed checkpoint (-1: none yet)."""
    ck = Checkpoints(RunDir(str(run)))
    return next((ss for ss in ck.supersteps() if (run / "checkpoints" / f"ss-{ss:06d}" / "manifest.json").exists()), -1)


def _wait(condition: Any, timeout: float, what: str, master: subprocess.Popen | None, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout

    def tail() -> str:  # (read only to report a failure: polls are every 20 ms)
        return log.read_text()[-4000:] if log is not None and log.exists() else ""

    while not condition():
        if master is not None and master.poll() is not None and not condition():
            raise AssertionError(f"the job ended ({master.returncode}) while waiting for {what}; its log ends:\n{tail()}")
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}; the log ends:\n{tail()}"
        time.sleep(0.02)


def _describe(pids: list[int]) -> str:
    out = []
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().split(") ")[1][:1]
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:100].decode()
            out.append(f"{pid} {stat} {cmd}")
        except OSError:
            out.append(f"{pid} gone")
    return "; ".join(out)


def test_soak_twenty_worker_faults_and_two_master_kills_end_bit_identical(tmp_path):
    config = resolve_config(get_job("dnn-dp"), None, SETS)
    reference = {k: v.tobytes() for k, v in final_params(run_job("dnn-dp", config, workers=2, runtime="cluster"), config)}
    rng = random.Random(SEED)
    events = ["master"] * MASTER_EVENTS + [rng.choice(["kill", "stop"]) for _ in range(WORKER_EVENTS)]
    rng.shuffle(events)
    run = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    log = open(tmp_path / "master.log", "w")
    master = subprocess.Popen(_argv(run), env=env, stdout=log, stderr=subprocess.STDOUT)
    stopped: list[int] = []
    seen: list[int] = []
    try:
        for n, event in enumerate(events):
            last = _newest(run)
            _wait(lambda: _newest(run) > last, 120, f"a checkpoint after {last} (event {n}: {event})", master,
                  tmp_path / "master.log")
            for pid in stopped:  # a paused worker the master replaced is dead; any other goes on
                if alive(pid):
                    os.kill(pid, signal.SIGCONT)
            stopped.clear()
            if event == "master":
                orphans = children(master.pid)
                seen += orphans
                master.kill()
                master.wait()
                # restarted at once, as a cluster manager does: the orphans exit by themselves (a worker
                # that has joined within --worker-timeout, one still joining within --connect-timeout)
                master = subprocess.Popen(_argv(run), env=env, stdout=log, stderr=subprocess.STDOUT)
                continue
            _wait(lambda: len(children(master.pid)) >= 2, 60, "two workers", master, tmp_path / "master.log")
            workers = children(master.pid)
            seen += workers
            victim = rng.choice(workers)
            os.kill(victim, signal.SIGKILL if event == "kill" else signal.SIGSTOP)
            if event == "stop":
                stopped.append(victim)
        assert master.wait(timeout=300) == 0, (tmp_path / "master.log").read_text()[-3000:]
    finally:
        for pid in stopped:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        if master.poll() is None:
            master.kill()
            master.wait()
        log.close()
    params = {name: np.load(run / "params" / f"{name}.npy").tobytes() for name in reference}
    assert params == reference
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["superstep"] for m in lines] == list(range(len(lines)))
    _wait(lambda: not any(alive(p) for p in seen), 90, f"every worker to exit ({_describe(seen)})", None)
    assert json.loads((run / "job.json").read_text())["status"] == "finished"


def test_resume_if_possible_refuses_a_run_directory_of_another_config(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["run", "pagerank", "--set", "iterations=5", "--run-dir", str(run), "--set", "checkpoint_every=2"]) == 0
    assert main(["run", "pagerank", "--set", "iterations=6", "--run-dir", str(run), "--resume-if-possible"]) == 2
    assert "holds another run (its config differ)" in capsys.readouterr().err
    assert main(["run", "pagerank", "--set", "iterations=5", "--run-dir", str(run), "--set", "checkpoint_every=2",
                 "--resume-if-possible"]) == 0
