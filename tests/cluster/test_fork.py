"""Local workers forked from the launching process: they are forked children, give the results of
spawned workers bit for bit, log as spawned ones do, and leave no process behind on any path."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import mariana
from mariana.cluster import launch as cluster
from mariana.jobs.launch import build_graph
from mariana.cluster.forking import ForkedWorker, fork_is_safe, fork_workers
from mariana.jobs import get_job, resolve_config
from mariana.jobs.dnn_data_parallel import final_params
from mariana.jobs.launch import run_job
from test_cluster import alive, children, env_with_tests, wait_for

pytestmark = pytest.mark.timeout(120)

DNN_SETS = ["steps=4", "replicas=2", "batch_size=128", "exchange=allreduce"]  # the default 64-256-256-10 model


#: set in a test process started by ``_in_a_fresh_process``
_FRESH = "MARIANA_TEST_FRESH_PROCESS"


def _in_a_fresh_process(test: str, why: str) -> None:
    """Run ``test`` of this module again in a new pytest process: this one cannot fork (``why``)."""
    env = {**env_with_tests(), _FRESH: "1"}
    env.pop("MARIANA_NO_FORK", None)
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"{__file__}::{test}"],
                         env=env, capture_output=True, text=True, timeout=110)
    assert out.returncode == 0, f"(run in a fresh process: this one cannot fork: {why})\n{out.stdout}{out.stderr}"


def _may_fork_here(request) -> bool:
    """Whether this process may fork; where it may not (an earlier test left a thread: fsspec's IO
    loop after the S3 tests, and the cluster would spawn its workers instead), the test runs again
    in a fresh pytest process, and False says it is done."""
    why = fork_is_safe()
    if why is None:
        return True
    assert os.environ.get(_FRESH) is None, f"this test process cannot fork: {why}"
    _in_a_fresh_process(request.node.name, why)
    return False


def _cmdline(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes()


def _train(**kw) -> tuple[dict[str, bytes], list]:
    procs: list = []
    config = resolve_config(get_job("dnn-dp"), None, DNN_SETS)
    result = run_job("dnn-dp", config, workers=2, runtime="cluster", on_start=lambda m, p: procs.extend(p), **kw)
    return {k: v.tobytes() for k, v in final_params(result, config)}, procs


@pytest.mark.parametrize("fork", [True, False])
def test_mariana_run_forks_its_workers_unless_told_not_to(tmp_path, fork):
    """Forked workers are children with the run process's own command line; --no-fork: `mariana worker`."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "mariana", "run", "contract_jobs:forever", "--set", "max_supersteps=1000000",
         "--workers", "2", "--run-dir", str(tmp_path), *([] if fork else ["--no-fork"])],
        env={k: v for k, v in env_with_tests().items() if k != "MARIANA_NO_FORK"}, stderr=subprocess.PIPE, text=True)
    try:
        kids = wait_for(lambda: len(children(proc.pid)) == 2 and children(proc.pid), 30, "two workers")
        wait_for(lambda: (tmp_path / "metrics.jsonl").exists(), 30, "the job to start")
        lines = [_cmdline(k) for k in kids]
        if fork:
            assert lines == [_cmdline(proc.pid)] * 2
        else:
            assert all(b"\0worker\0--master\0" in c for c in lines)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130
        wait_for(lambda: not any(alive(k) for k in kids), 10, "the workers to be gone")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_forked_and_spawned_workers_train_bit_identical_parameters(monkeypatch, request):
    if not _may_fork_here(request):
        return
    forked, fprocs = _train()
    assert [type(p) for p in fprocs] == [ForkedWorker, ForkedWorker]
    spawned, sprocs = _train(fork=False)
    assert [type(p) for p in sprocs] == [subprocess.Popen, subprocess.Popen]
    monkeypatch.setenv("MARIANA_NO_FORK", "1")
    by_env, eprocs = _train()
    assert [type(p) for p in eprocs] == [subprocess.Popen, subprocess.Popen]
    assert forked == spawned == by_env
    assert not any(alive(p.pid) for p in fprocs + sprocs + eprocs)


def test_worker_log_lines_reach_stderr_as_from_spawned_workers(tmp_path):
    """-v: each worker logs its joining and its end on the run's stderr, forked or spawned."""
    errs = []
    for extra in ([], ["--no-fork"]):
        p = subprocess.run([sys.executable, "-m", "mariana", "-v", "run", "contract_jobs:delivery", "--workers", "2",
                            "--run-dir", str(tmp_path / str(len(errs))), *extra], env=env_with_tests(),
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        errs.append(p.stderr)
    for err in errs:
        for k in (0, 1):
            assert f"mariana.cluster.worker: worker {k} of 2 ready" in err
            assert f"mariana.cluster.worker: worker {k}: job finished" in err


@pytest.mark.parametrize("fork", [True, False])
def test_a_job_that_fails_to_build_leaves_no_worker(tmp_path, fork, request):
    """Forking: the graph is built before the fork (the children inherit the data set), so a
    failed build forks nothing; spawning: the workers started first are stopped."""
    if fork and not _may_fork_here(request):
        return
    before = set(children(os.getpid()))
    procs: list = []
    with pytest.raises(mariana.MarianaError):
        run_job("dnn-dp", sets=[f"data={tmp_path / 'missing.npz'}"], workers=2, runtime="cluster", fork=fork,
                on_start=lambda m, p: procs.extend(p))
    assert [type(p) for p in procs] == ([] if fork else [subprocess.Popen, subprocess.Popen])
    assert all(p.returncode is not None and not alive(p.pid) for p in procs)
    assert set(children(os.getpid())) <= before


def test_workers_forked_before_a_failed_bind_exit_0_quietly(monkeypatch, capfd, request):
    if not _may_fork_here(request):
        return
    forked: list[ForkedWorker] = []

    def fork_and_keep(n: int, thread_vars: dict[str, str], build) -> list[ForkedWorker]:
        forked.extend(fork_workers(n, thread_vars, build))
        return forked

    monkeypatch.setattr(cluster, "fork_workers", fork_and_keep)
    with pytest.raises(mariana.MarianaError):
        run_job("contract_jobs:delivery", workers=2, runtime="cluster", bind="tcp://192.0.2.1:0")  # not this host's
    assert len(forked) == 2 and [p.returncode for p in forked] == [0, 0]
    assert "Traceback" not in capfd.readouterr().err


def test_a_forked_worker_handle_acts_like_popen():
    [child] = fork_workers(1, {}, build_graph)
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(timeout=0.05)  # it waits for its arguments
    assert child.poll() is None
    child.terminate()
    assert child.wait(timeout=10) == -signal.SIGTERM == child.returncode
    child.kill()  # gone already: nothing happens
    assert child.release() is True and child.release() is False


def test_waiting_for_a_forked_worker_returns_its_exit_and_keeps_no_descriptor():
    fds = set(os.listdir("/proc/self/fd"))
    [child] = fork_workers(1, {}, build_graph)
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(timeout=0.05)
    assert child.release() is True  # no arguments: it exits 0 by itself, and the wait wakes for it
    assert child.wait(timeout=30) == 0 == child.returncode
    assert set(os.listdir("/proc/self/fd")) == fds


_INTERRUPTED_FORK = """
import os, signal, sys
os.register_at_fork(after_in_parent=lambda: os.kill(os.getpid(), signal.SIGINT))  # Ctrl-C mid-fork
{fork}
try:
    pid = fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    for _ in range(1000):  # (the handler runs at the next check; a plain fork has lost it already)
        pass
except KeyboardInterrupt:
    sys.exit(3)
sys.exit(0)
"""


@pytest.mark.parametrize("fork,code", [("fork = os.fork", 0),
                                       ("from mariana.cluster.forking import fork_holding_interrupts as fork", 3)])
def test_a_ctrl_c_during_a_fork_is_raised_after_it_not_lost(fork, code):
    """A SIGINT that arrives while ``os.fork`` runs its handlers is raised inside them and reported
    as ignored (the baseline: exit 0, the interrupt lost); held until the fork returns, it is raised."""
    proc = subprocess.run([sys.executable, "-c", _INTERRUPTED_FORK.format(fork=fork)], env=env_with_tests(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == code, proc.stderr
