"""Hand-started `mariana worker` processes: their BLAS thread pools, joining a master that is not
there, the address they advertise, and peers they cannot reach. Real processes on loopback."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from mariana.jobs.launch import run_job
from polling import until

pytestmark = pytest.mark.timeout(120)

TESTS = Path(__file__).resolve().parent.parent


def _env(**extra: str) -> dict[str, str]:
    """The environment of a hand-started worker: the tests' job modules importable, no thread
    variables (as in a user's shell), plus ``extra``."""
    from mariana.engine.threads import THREAD_VARS

    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS / "engine"), *sys.path])
    return {**env, **extra}


def _hand_started(workers: int, *args: str, env: dict[str, str] | None = None):
    """An ``on_start`` that starts ``workers`` `mariana worker` processes for the master in this
    process, and the list they are kept in (for the caller to reap)."""
    procs: list[subprocess.Popen] = []

    def on_start(master, _procs) -> None:
        for _ in range(workers):
            procs.append(subprocess.Popen([sys.executable, "-m", "mariana", "worker", "--master", master.endpoint, *args],
                                          env=env or _env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))

    return on_start, procs


def _reap(procs: list[subprocess.Popen], timeout: float = 30) -> list[str]:
    """Wait for every process (killing it after ``timeout`` s); their stderr."""
    errs = []
    for p in procs:
        try:
            _, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
        errs.append(err)
    return errs


def _master(job: str, workers: int, on_start, tmp_path: Path, sets=()):
    return run_job(job, sets=list(sets), workers=workers, runtime="cluster", spawn=False, bind="tcp://127.0.0.1:0",
                   on_start=on_start, run_dir=str(tmp_path / "run"), worker_timeout=30)


def test_hand_started_workers_share_the_hosts_cores_for_blas(tmp_path):
    """Two `mariana worker` on one host, no thread variable set: each pool gets cores // 2 threads,
    as `mariana run --workers 2` gives its workers (not every core each: 8.8x slower, other sums)."""
    pytest.importorskip("threadpoolctl")
    from mariana.engine.threads import blas_threads

    on_start, procs = _hand_started(2)
    try:
        res = _master("contract_jobs:blas", 2, on_start, tmp_path)
    finally:
        errs = _reap(procs)
    assert [p.returncode for p in procs] == [0, 0], errs
    assert len(res.values) == 2
    for vid, libs in res.values.items():
        assert libs, f"{vid}: no BLAS library loaded in the worker"
        assert {n for _, n in libs} == {blas_threads(2)}, (vid, libs)


def test_threads_flag_and_a_users_variable_win(tmp_path):
    """--threads N sizes every pool; a variable the user set is kept (as `mariana run` keeps it)."""
    pytest.importorskip("threadpoolctl")
    on_start, procs = _hand_started(1, "--threads", "1")
    try:
        res = _master("contract_jobs:blas", 1, on_start, tmp_path / "flag")
    finally:
        _reap(procs)
    assert all({n for _, n in libs} == {1} for libs in res.values.values()), res.values
    on_start, procs = _hand_started(2, env=_env(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1"))
    try:
        res = _master("contract_jobs:blas", 2, on_start, tmp_path / "env")
    finally:
        _reap(procs)
    assert all({n for _, n in libs} == {1} for libs in res.values.values()), res.values


@pytest.mark.slow
def test_hand_started_dnn_dp_equals_mariana_run_bit_for_bit(tmp_path):
    """dnn-dp on `mariana master` and two hand-started `mariana worker` ends with `mariana run
    --workers 2`'s parameters, bit for bit (a layer size where OpenBLAS threads its products)."""
    sets = [a for s in ("epochs=1", "batch_size=256", "model=['dense:512:relu','dense:10']") for a in ("--set", s)]
    mariana, env = [sys.executable, "-m", "mariana"], _env()
    ref = subprocess.run([*mariana, "run", "dnn-dp", "--workers", "2", "--run-dir", str(tmp_path / "ref"), *sets],
                         env=env, capture_output=True, text=True, timeout=300)
    assert ref.returncode == 0, ref.stderr
    master_file = tmp_path / "master.json"
    master = subprocess.Popen([*mariana, "master", "dnn-dp", "--workers", "2", "--run-dir", str(tmp_path / "hand"),
                               "--master-file", str(master_file), *sets],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    procs = [master]
    try:
        until("the master file", lambda: master_file.exists() and master_file.read_text().endswith("}")
              or master.poll() is not None)
        procs += [subprocess.Popen([*mariana, "worker", "--master-file", str(master_file)], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    finally:
        errs = _reap(procs, timeout=240)
    assert [p.returncode for p in procs] == [0, 0, 0], errs
    names = sorted(f.name for f in (tmp_path / "ref" / "params").glob("*.npy"))
    assert names
    for name in names:
        a, b = np.load(tmp_path / "ref" / "params" / name), np.load(tmp_path / "hand" / "params" / name)
        assert a.tobytes() == b.tobytes(), name


def _free_port() -> int:
    """A loopback TCP port nothing listens on (bound, then closed: connections to it are refused)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_worker_without_a_master_says_so_in_one_line_within_seconds():
    """Nothing listens at the master's address: one line naming it and how long it tried, exit 2,
    after the first-contact timeout (not --connect-timeout's 60 s)."""
    endpoint = f"tcp://127.0.0.1:{_free_port()}"
    t0 = time.monotonic()
    w = subprocess.run([sys.executable, "-m", "mariana", "worker", "--master", endpoint, "--first-contact-timeout", "1.5"],
                       env=_env(), capture_output=True, text=True, timeout=60)
    took = time.monotonic() - t0
    lines = w.stderr.splitlines()
    assert w.returncode == 2, w.stderr
    assert len(lines) == 1, w.stderr
    assert lines[0].startswith("mariana: error: no master at " + endpoint) and "1.5s" in lines[0], lines[0]
    assert 1.5 <= took < 15, took


def test_a_master_that_answers_late_is_waited_for_past_the_first_contact():
    """A master reached within the first contact (a socket that accepts and never answers) is
    governed by --connect-timeout: the worker waits it out, then says no master answered."""
    import zmq

    ctx = zmq.Context()
    silent = ctx.socket(zmq.ROUTER)  # accepts connections, answers nothing
    try:
        port = silent.bind_to_random_port("tcp://127.0.0.1")
        t0 = time.monotonic()
        w = subprocess.run([sys.executable, "-m", "mariana", "worker", "--master", f"tcp://127.0.0.1:{port}",
                            "--first-contact-timeout", "0.5", "--connect-timeout", "3"],
                           env=_env(), capture_output=True, text=True, timeout=60)
        took = time.monotonic() - t0
    finally:
        silent.close(linger=0)
        ctx.term()
    assert w.returncode == 2, w.stderr
    assert "no master answered" in w.stderr and "no master at" not in w.stderr, w.stderr
    assert took >= 3, took
