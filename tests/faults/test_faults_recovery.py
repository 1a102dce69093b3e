"""Lost workers: a worker paused (SIGSTOP) past the timeout and woken up after the recovery, two
workers killed at once. Both end bit-identical to an uninterrupted run, and a replaced worker
process is killed, never left to come back."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mariana.jobs import get_job, resolve_config
from mariana.jobs.dnn_data_parallel import final_params
from mariana.jobs.launch import run_job
from mariana.storage import RunDir
from test_cluster import alive

pytestmark = [pytest.mark.faults, pytest.mark.timeout(240)]

DNN = get_job("dnn-dp")
SETS = ["epochs=3", "checkpoint_every=8", "batch_size=48"]  # 48: splits over 2 and 3 replicas
FAST = {"heartbeat_interval": 0.2, "worker_timeout": 2.0}  # a loss is noticed within 2 s


def _train(run_dir: Any, workers: int = 2, **kw: Any) -> tuple[dict[str, bytes], Any]:
    config = resolve_config(DNN, None, SETS)
    result = run_job(DNN, config, workers=workers, runtime="cluster", run_dir=RunDir(str(run_dir)), **kw)
    return {k: v.tobytes() for k, v in final_params(result, config)}, result


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, bytes]]:
    """Parameters of uninterrupted runs, by worker count."""
    return {n: _train(tmp_path_factory.mktemp(f"reference{n}"), workers=n)[0] for n in (2, 3)}


def test_a_worker_paused_past_the_timeout_is_replaced_and_killed(tmp_path, reference):
    procs: list[Any] = []
    paused: list[int] = []

    def hook(line: dict[str, Any]) -> None:
        if line["superstep"] == 20 and not paused:
            paused.append(procs[1].pid)
            os.kill(procs[1].pid, signal.SIGSTOP)
        if paused and line.get("restarts") and alive(paused[0]):
            os.kill(paused[0], signal.SIGCONT)  # wakes up after the job went on without it

    params, result = _train(tmp_path / "run", on_superstep=hook, on_start=lambda m, p: procs.extend(p), **FAST)
    assert paused and params == reference[2]
    assert result.metrics[-1]["restarts"] == 1
    assert not alive(paused[0])  # killed by the master when it was replaced
    assert [m["superstep"] for m in result.metrics] == list(range(result.supersteps))


@pytest.mark.parametrize("workers", [2, 3])
def test_losing_all_but_one_or_every_worker_at_once_is_recovered(tmp_path, reference, workers):
    procs: list[Any] = []
    killed: list[int] = []

    def hook(line: dict[str, Any]) -> None:
        if line["superstep"] == 30 and not killed:
            for p in procs[-2:] if workers == 3 else procs:  # two of three, or both of two
                killed.append(p.pid)
                os.kill(p.pid, signal.SIGKILL)

    params, result = _train(tmp_path / "run", workers=workers, on_superstep=hook,
                            on_start=lambda m, p: procs.extend(p), **FAST)
    assert len(killed) == 2 and params == reference[workers]
    # one round when both deaths are seen at once; a second when one is noticed during the first
    assert result.metrics[-1]["restarts"] in (1, 2)
    assert [m["superstep"] for m in result.metrics] == list(range(result.supersteps))


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["killed", "paused"])
def test_a_replacement_that_dies_or_hangs_before_it_joins_is_replaced_again(tmp_path, reference, sig):
    """A cluster manager (or the OOM killer) may kill the worker the master started to replace a
    lost one before it has joined: the master starts another for the same slot, it does not fail.
    One that hangs before it joins (paused here) is killed after ``join_grace`` (10 s here) and
    replaced the same way, not waited for until ``--rejoin-timeout``."""
    procs: list[Any] = []
    killed: list[int] = []
    here = Path(f"/proc/{os.getpid()}/task")

    def kids() -> set[int]:
        return {int(x) for t in here.iterdir() for x in (t / "children").read_text().split()}

    def kill_the_replacement(before: set[int]) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            new = kids() - before
            if new:
                pid = min(new)
                killed.append(pid)
                os.kill(pid, sig)  # it is still starting: far from joining
                return
            time.sleep(0.002)

    def hook(line: dict[str, Any]) -> None:
        if line["superstep"] == 20 and not killed:
            threading.Thread(target=kill_the_replacement, args=(kids(),), daemon=True).start()
            killed.append(procs[1].pid)
            os.kill(procs[1].pid, signal.SIGKILL)

    params, result = _train(tmp_path / "run", on_superstep=hook, on_start=lambda m, p: procs.extend(p), **FAST)
    assert len(killed) == 2 and params == reference[2]
    assert result.metrics[-1]["restarts"] == 2  # the lost worker, then its replacement
    assert not alive(killed[1])  # a paused one was killed by the master
    assert [m["superstep"] for m in result.metrics] == list(range(result.supersteps))


def test_a_worker_lost_as_the_job_finishes_is_recovered(tmp_path, reference):
    """Killed after the last superstep's barrier: the master finds it gone while it collects the
    last checkpoint and the results, rolls back like any loss and finishes again."""
    last = _train(tmp_path / "plain")[1].supersteps - 1
    procs: list[Any] = []
    killed: list[int] = []

    def hook(line: dict[str, Any]) -> None:
        if line["superstep"] == last and not killed:
            killed.append(procs[0].pid)
            os.kill(procs[0].pid, signal.SIGKILL)

    params, result = _train(tmp_path / "run", on_superstep=hook, on_start=lambda m, p: procs.extend(p), **FAST)
    assert killed and params == reference[2]
    assert result.metrics[-1]["restarts"] == 1 and result.supersteps == last + 1
    assert [m["superstep"] for m in result.metrics] == list(range(result.supersteps))


def test_a_second_worker_lost_while_the_first_is_replaced_is_replaced_too(tmp_path, reference):
    """Worker 1 killed and worker 0 paused at once: the master starts replacing worker 1, finds
    worker 0 silent during that rollback, and replaces it too, welcoming each new worker once."""
    procs: list[Any] = []
    hit: list[int] = []

    def hook(line: dict[str, Any]) -> None:
        if line["superstep"] == 20 and not hit:
            hit.extend([procs[0].pid, procs[1].pid])
            os.kill(procs[0].pid, signal.SIGSTOP)
            os.kill(procs[1].pid, signal.SIGKILL)

    params, result = _train(tmp_path / "run", on_superstep=hook, on_start=lambda m, p: procs.extend(p), **FAST)
    assert hit and params == reference[2]
    # one round, a second when the pause is found mid-rollback (more on a loaded machine, where a
    # fresh worker may itself miss the 2 s timeout)
    assert result.metrics[-1]["restarts"] >= 1
    assert not alive(hit[0])  # the paused one was killed when it was replaced
    assert [m["superstep"] for m in result.metrics] == list(range(result.supersteps))
