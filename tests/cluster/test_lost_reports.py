"""How a lost worker's end is reported (cluster/oom.OomWatch): its exit code, a signal by name,
and for SIGKILL whether the kernel's OOM killer did it (its log, its counts) or else the hint
that it does this when memory runs out. The real OOM kill runs in a memory cgroup of its own
with a small limit, so the machine never runs short."""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from mariana.cluster.master import WorkerLost
from mariana.cluster.oom import OOM_HINT, OomWatch, oom_kills
from mariana.jobs.launch import run_job
from test_cluster import alive

pytestmark = pytest.mark.timeout(120)

FAST = {"heartbeat_interval": 0.2, "worker_timeout": 5.0, "max_restarts": 0}


def test_an_exit_is_told_by_its_code_and_a_signal_by_its_name():
    watch = OomWatch()
    assert watch.exit(0) == "exited with code 0" and watch.exit(3) == "exited with code 3"
    assert watch.exit(-15) == "exited with code -15 (killed by SIGTERM)"
    sigkill = watch.exit(-9, pid=None)  # no pid: no kernel record to look for
    # (the machine's OOM-kill count may rise meanwhile, from another process: "most likely" then)
    assert sigkill.startswith("exited with code -9 (killed by SIGKILL") and "OOM killer" in sigkill
    assert "/proc/vmstat" in oom_kills()


def test_a_worker_killed_by_sigkill_is_reported_with_the_signal_and_the_oom_hint():
    procs: list[Any] = []

    def kill(line: dict[str, Any]) -> None:
        if line["superstep"] == 3 and alive(procs[1].pid):
            os.kill(procs[1].pid, signal.SIGKILL)

    with pytest.raises(WorkerLost) as info:
        run_job("contract_jobs:forever", sets=["max_supersteps=100000"], workers=2, runtime="cluster",
                on_superstep=kill, on_start=lambda m, p: procs.extend(p), **FAST)
    msg = str(info.value)
    assert f"pid {procs[1].pid})" in msg and "exited with code -9 (killed by SIGKILL" in msg
    assert OOM_HINT in msg or "most likely by the kernel's OOM killer" in msg
    assert not any(alive(p.pid) for p in procs)


# -- a real OOM kill -----------------------------------------------------------------------------
CGROUPS = Path("/sys/fs/cgroup/memory")  # cgroup v1, as on this machine
LIMIT = 96 << 20  # the workers' memory beyond what they held when they entered it
HOLD_MIB = 512  # what vertex z allocates and touches at superstep 3: over the limit


def _cgroup() -> Path:
    if os.geteuid() != 0 or not (CGROUPS / "memory.limit_in_bytes").exists():
        pytest.skip(f"needs root and the cgroup v1 memory controller at {CGROUPS}")
    group = CGROUPS / f"mariana-test-{uuid.uuid4().hex[:12]}"
    try:
        group.mkdir()
        (group / "memory.limit_in_bytes").write_text(str(LIMIT))
    except OSError as exc:
        if group.exists():
            group.rmdir()
        pytest.skip(f"cannot make a memory cgroup: {exc}")
    return group


@pytest.mark.faults
def test_a_worker_killed_by_the_oom_killer_is_reported_as_such():
    group = _cgroup()
    procs: list[Any] = []

    def started(master: Any, ps: list[Any]) -> None:
        procs.extend(ps)
        for p in ps:  # both workers: the OOM killer takes the one that holds the memory
            (group / "cgroup.procs").write_text(str(p.pid))

    try:
        with pytest.raises(WorkerLost) as info:
            run_job("contract_jobs:traced", sets=[f"hold_mib={HOLD_MIB}"], workers=2, runtime="cluster",
                    on_start=started, **FAST)
        msg = str(info.value)
        assert "exited with code -9" in msg and "ran out of memory" in msg, msg
        assert "killed by the kernel's OOM killer" in msg or "most likely by the kernel's OOM killer" in msg, msg
        if os.access("/dev/kmsg", os.R_OK):
            assert "Killed process" in msg, msg  # the kernel's own record of it
        assert not any(alive(p.pid) for p in procs)
    finally:
        deadline = time.monotonic() + 30
        while group.exists():  # empty once its processes are reaped
            try:
                group.rmdir()
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
