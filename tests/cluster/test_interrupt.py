"""Ctrl-C on `mariana run`: the command that resumes the run on stderr, exit 130, no process left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from polling import until

pytestmark = pytest.mark.timeout(120)


def _committed(run: Path) -> bool:
    """Whether a checkpoint of ``run`` is committed (its manifest written)."""
    return any((run / "checkpoints").glob("ss-*/manifest.json"))


def _in_session(sid: int) -> list[int]:
    """The processes of session ``sid`` (what a run started in its own session left behind)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[3]) == sid and fields[0] != "Z":  # (after the name: state, ppid, pgrp, session)
                pids.append(int(entry.name))
    return pids


def _interrupt(cmd: list[str], what: str, ready: Callable[[], object], group: bool = False) -> tuple[subprocess.Popen, str]:
    """Start ``cmd`` in a session of its own, SIGINT it (or its whole process group) once
    ``ready()``, and return it ended, with its stderr (killed, group and all, if it outlives that)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        until(what, lambda: ready() or p.poll() is not None, timeout=60)
        assert p.poll() is None, p.communicate()
        if group:
            os.killpg(p.pid, signal.SIGINT)
        else:
            p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    return p, err


@pytest.mark.parametrize("to", ["process", "group"])
def test_ctrl_c_prints_the_resume_command_and_leaves_no_process(tmp_path, to):
    """SIGINT after the first checkpoint, to `mariana run` alone or to its whole process group (as
    a terminal's Ctrl-C): `mariana run --resume RUN` on stderr, exit 130, every worker gone; the
    printed command continues the run."""
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "mariana", "run", "dnn-dp", "--workers", "2", "--set", "epochs=500",
           "--set", "checkpoint_every=5", "--run-dir", str(run)]
    p, err = _interrupt(cmd, "a committed checkpoint", lambda: _committed(run), group=to == "group")
    assert p.returncode == 130, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("mariana: interrupted; resume it from the checkpoint at superstep "), err
    assert last.endswith(f"with: mariana run --resume {run}"), err
    until("every process of the run gone", lambda: not _in_session(p.pid), timeout=10)
    resumed = subprocess.run([sys.executable, "-m", "mariana", "run", "--resume", str(run), "--max-supersteps", "40"],
                             capture_output=True, text=True, timeout=60)
    assert resumed.returncode == 0, resumed.stderr


def test_an_interrupted_run_without_checkpoints_says_it_cannot_be_resumed(tmp_path):
    run = tmp_path / "run"
    metrics = run / "metrics.jsonl"
    p, err = _interrupt([sys.executable, "-m", "mariana", "run", "dnn-dp", "--set", "epochs=500", "--run-dir", str(run)],
                        "the first metrics", lambda: metrics.exists() and metrics.stat().st_size > 0)
    assert p.returncode == 130, err
    assert err.strip().splitlines()[-1] == (f"mariana: interrupted; {run} holds no checkpoint to resume from "
                                            "(--set checkpoint_every=N makes a run resumable)"), err
