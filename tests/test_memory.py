"""The process's allocator settings: numpy's huge-page advice goes off only where the kernel's THP
defrag policy would compact memory on every fault of an advised array, and never against a
user's explicit ``NUMPY_MADVISE_HUGEPAGE``; and the resident memory every trace record carries."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from numpy._core.multiarray import _set_madvise_hugepage  # type: ignore[attr-defined]

from mariana import memory


@pytest.fixture
def advice():
    """numpy's advice switch, on for the test and restored after it."""
    def now() -> bool:
        value = _set_madvise_hugepage(True)  # the one way to read it: set it, then set it back
        _set_madvise_hugepage(value)
        return value

    before = _set_madvise_hugepage(True)
    yield now
    _set_madvise_hugepage(before)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("policy,off", [("always defer defer+madvise [madvise] never", True),
                                        ("always defer [defer+madvise] madvise never", True),
                                        ("[always] defer defer+madvise madvise never", False),
                                        ("always defer defer+madvise madvise [never]", False)])
def test_the_advice_goes_off_only_under_a_stalling_defrag_policy(tmp_path, monkeypatch, advice, policy, off):
    monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE", raising=False)
    (tmp_path / "defrag").write_text(policy + "\n")
    monkeypatch.setattr(memory, "_THP_DEFRAG", tmp_path / "defrag")
    assert memory.avoid_hugepage_stalls() is off
    assert advice() is not off


@pytest.mark.timeout(10)
def test_an_explicit_numpy_setting_and_a_missing_policy_file_leave_the_advice_alone(tmp_path, monkeypatch, advice):
    (tmp_path / "defrag").write_text("always defer defer+madvise [madvise] never\n")
    monkeypatch.setattr(memory, "_THP_DEFRAG", tmp_path / "defrag")
    monkeypatch.setenv("NUMPY_MADVISE_HUGEPAGE", "1")
    assert memory.avoid_hugepage_stalls() is False
    monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE")
    monkeypatch.setattr(memory, "_THP_DEFRAG", tmp_path / "absent")
    assert memory.avoid_hugepage_stalls() is False
    assert advice() is True


@pytest.mark.timeout(30)
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="Linux's /proc")
def test_resident_memory_is_the_calling_processes_own_before_and_after_a_fork():
    """``resident`` reads this process's counters through a descriptor it keeps: a forked child
    reads its own (64 MiB held there shows there, not in the parent), and a new program's peak
    starts afresh (not at the size of the process that started it, as ``getrusage``'s does)."""
    before = memory.resident()
    assert 0 < before["rss_bytes"] <= before["peak_rss_bytes"]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: hold 64 MiB, report what it reads
        try:  # (its own baseline: a fork maps the parent's file pages again only as they are touched)
            start = memory.resident()["rss_bytes"]
            held = np.ones(1 << 23)
            now = memory.resident()
            os.write(write, json.dumps([now["rss_bytes"] - start, now["peak_rss_bytes"] - now["rss_bytes"],
                                        int(held[-1])]).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        child_grew, child_peak_over, _ = json.loads(f.read())
    os.waitpid(pid, 0)
    after = memory.resident()
    assert child_grew >= 60e6 and child_peak_over >= 0
    assert after["rss_bytes"] - before["rss_bytes"] < 30e6
    fresh = subprocess.run([sys.executable, "-c", "from mariana.memory import resident; print(resident()['peak_rss_bytes'])"],
                           capture_output=True, text=True, check=True, timeout=30)
    assert int(fresh.stdout) < 200e6  # a small program, whatever this test process's size


@pytest.mark.timeout(10)
def test_a_workers_trace_reads_memory_at_most_every_interval():
    """``TraceMemory``: the first record reads, records within the interval carry nothing, and
    the first record after it reads again (the peak is kept by the kernel in between)."""
    reads = memory.TraceMemory(every=3600.0)
    first = reads()
    assert first["peak_rss_bytes"] >= first["rss_bytes"] > 0
    assert reads() == {} and reads() == {}
    reads.at -= 3600.0  # an hour later
    assert set(reads()) == {"rss_bytes", "peak_rss_bytes"}
