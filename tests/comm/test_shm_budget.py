"""The bound on same-host shared memory (comm/shmbudget.py): a worker's arenas stay within its
share of the host's budget and the machine's reserve; past it frames travel over the socket, with
one log line, and a cluster run under a small budget gives the unbounded run's results."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mariana.comm import shm as shm_mod
from mariana.comm import shmbudget
from mariana.comm.shm import Shm
from mariana.jobs.launch import run_job
from mariana.storage import RunDir
from test_shm import exchange, send, start

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(shm_mod.host_id() is None, reason="no /dev/shm on this machine")]

KB, MB = 1 << 10, 1 << 20


def _pair(**kw: Any):
    a = Shm("c" * 32, 0, min_bytes=64 * KB, first_bytes=1 * MB, **kw)
    b = Shm("c" * 32, 1)
    start(a, b)
    return a, b


def test_the_host_budget_is_divided_among_the_host_workers_and_capped(monkeypatch):
    assert shmbudget.Budget(1 << 30, host_budget=64 * MB, workers=4).share == 16 * MB
    assert shmbudget.Budget(8 * MB, host_budget=64 * MB, workers=4).share == 8 * MB  # --shm-cap-mb
    monkeypatch.setenv(shmbudget.BUDGET_VAR, "12")
    monkeypatch.setenv(shmbudget.HOST_WORKERS_VAR, "3")
    b = shmbudget.Budget(1 << 30)
    assert (b.host, b.workers, b.share) == (12 * MB, 3, 4 * MB)
    assert "4 MB for this worker" in b.describe() and shmbudget.BUDGET_VAR in b.describe()
    monkeypatch.delenv(shmbudget.BUDGET_VAR)
    free, what = shmbudget.room()
    b = shmbudget.Budget(1 << 40)  # from the machine: a part of its room, shared by 3
    assert 0 < b.host <= shmbudget.FRACTION * free * 1.1 and b.share == b.host // 3 and what in b.describe()
    assert 0 < b.reserve < shmbudget.capacity()


def test_past_its_share_a_worker_sends_over_the_socket_and_says_so_once(caplog):
    a, b = _pair(host_budget=6 * MB, host_workers=2)  # a share of 3 MB
    try:
        caplog.set_level(logging.INFO, logger="mariana.comm.shm")
        held, placed_total = [], 0
        x = np.arange(300 * KB // 4, dtype=np.float32)
        for i in range(40):  # kept: the extents stay leased and the arena wants to grow
            y, placed = send(a, b, x + i)
            assert np.array_equal(y, x + i)
            held.append(y)
            placed_total += placed
            exchange(a, b)
        sizes = sum(s.size for s in a.arenas[1].segs)
        assert sizes <= 3 * MB and a.budget[0] == 3 * MB - sizes and placed_total > 0
        assert a.arenas[1].bound == "share"
        lines = [r.getMessage() for r in caplog.records if "bounded" in r.getMessage()]
        assert len(lines) == 1 and "3 MB for this worker" in lines[0] and "over the socket" in lines[0]
        assert all(np.array_equal(h, x + i) for i, h in enumerate(held))
    finally:
        a.close()
        b.close()


def test_a_growth_that_would_break_the_machines_reserve_is_refused():
    a, b = _pair()
    try:
        assert a.limits is not None
        a.limits.reserve = shmbudget.room()[0] + (1 << 40)  # no room to spare: no segment may be added
        held = []
        x = np.ones(400 * KB // 4, np.float32)
        for _ in range(4):  # the first 1 MB segment fills up; its growth is refused
            y, _ = send(a, b, x)
            assert np.array_equal(y, x)
            held.append(y)
        assert len(a.arenas[1].segs) == 1 and a.arenas[1].bound == "machine"
    finally:
        a.close()
        b.close()


def test_a_worker_with_no_share_left_makes_no_segment_and_still_sends():
    a = Shm("c" * 32, 0, min_bytes=64 * KB, host_budget=0)
    b = Shm("c" * 32, 1)
    try:
        x = np.ones(128 * KB, np.uint8)
        for _ in range(3):
            y, placed = send(a, b, x)
            exchange(a, b)
            assert placed == 0 and np.array_equal(y, x)
        assert not a.arenas[1].segs and a.arenas[1].bound == "share"
    finally:
        a.close()
        b.close()


# -- the memory cgroup's limit -------------------------------------------------------------------
CGROUPS = Path("/sys/fs/cgroup/memory")


def test_a_memory_cgroups_limit_bounds_the_room(tmp_path):
    """A process in a memory cgroup (v1, as here) limited to 256 MB sees at most that much room."""
    if not (CGROUPS / "memory.limit_in_bytes").exists() or os.geteuid() != 0:
        pytest.skip(f"needs root and the cgroup v1 memory controller at {CGROUPS}")
    group = CGROUPS / f"mariana-test-{uuid.uuid4().hex[:12]}"
    try:
        group.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot create a memory cgroup: {exc}")
    try:
        (group / "memory.limit_in_bytes").write_text(str(256 * MB))
        code = "import json; from mariana.comm import shmbudget as b; print(json.dumps([b.room(), b.capacity()]))"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True,
                             preexec_fn=lambda: (group / "cgroup.procs").write_text(str(os.getpid())))
        (room, what), cap = json.loads(out.stdout)
        assert room <= 256 * MB and what == "room under the memory cgroup's limit" and cap == 256 * MB
    finally:
        group.rmdir()  # its one process has exited


# -- a 3-worker cluster run under a small budget --------------------------------------------------
#: four vertices in a ring, each sending its 2 MB array to the next every superstep (tests/engine)
JOB, SETS = "contract_jobs:inplace", ["size=262144", "max_supersteps=20"]
_MAP = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ (\S+) (\d+)\s+/dev/shm/(mariana-[0-9a-f]+-w\d+-\d+-g\d+-p\d+-\d+)")


def arena_bytes(pids: list[int], job: str) -> dict[int, int]:
    """The /dev/shm memory of this job's arena segments mapped by its worker processes now, by
    the worker that made each (segments are unlinked once mapped: their mappings are what is left)."""
    segs: dict[tuple[str, str], tuple[int, int]] = {}
    for pid in pids:
        try:
            lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            m = _MAP.match(line)
            if m and m.group(5).startswith(f"mariana-{job[:12]}-"):
                worker = int(m.group(5).split("-w")[1].split("-")[0])
                segs[(m.group(3), m.group(4))] = (worker, int(m.group(2), 16) - int(m.group(1), 16))
    out: dict[int, int] = {}
    for worker, size in segs.values():
        out[worker] = out.get(worker, 0) + size
    return out


def _run(run_dir: Path) -> tuple[dict[str, bytes], list[dict[int, int]], int]:
    """The ring on 3 workers: (final values, arena bytes per worker at each superstep, bytes
    copied through arenas)."""
    procs: list[Any] = []
    jobs: list[str] = []
    seen: list[dict[int, int]] = []

    def started(master: Any, ps: list[Any]) -> None:
        jobs.append(master.job_id)
        procs.extend(ps)

    result = run_job(JOB, sets=SETS, workers=3, runtime="cluster", run_dir=RunDir(str(run_dir)), on_start=started,
                     on_superstep=lambda line: seen.append(arena_bytes([p.pid for p in procs], jobs[0])))
    sent = sum(sum(r.get("shm_bytes_out", {}).values()) - sum(r.get("shm_zero_copy_bytes", {}).values())
               for w in range(3) for r in map(json.loads, open(run_dir / "trace" / f"worker-{w}.jsonl")))
    return {k: np.asarray(v).tobytes() for k, v in result.values.items()}, seen, sent


@pytest.mark.timeout(240)
def test_three_workers_under_a_small_budget_stay_within_it_and_give_identical_results(tmp_path, monkeypatch):
    free, unbounded, unbounded_sent = _run(tmp_path / "unbounded")
    monkeypatch.setenv(shmbudget.BUDGET_VAR, "9")  # the forked workers inherit it: 3 MB each, one frame's room
    values, bounded, sent = _run(tmp_path / "bounded")
    assert values == free
    assert max(sum(s.values()) for s in unbounded) > 9 * MB  # (so the bound had something to bite)
    assert 0 < max(sum(s.values()) for s in bounded) <= 9 * MB
    assert all(n <= 3 * MB for s in bounded for n in s.values())
    assert 0 < sent < unbounded_sent  # shared memory still used, up to the bound; the rest over the socket
