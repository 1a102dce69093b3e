"""Shared memory between same-host workers (comm/shm.py): allocation, leases released by GC,
growth and fallback at the cap, descriptors, and 2-worker cluster runs with and without it."""

from __future__ import annotations

import gc
import glob
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from mariana.comm import shm as shm_mod
from mariana.comm import shmfiles
from mariana.comm.shm import HEADER, Shm
from mariana.errors import ProtocolError
from mariana.jobs import get_job, resolve_config
from mariana.jobs.dnn_data_parallel import final_params
from mariana.jobs.launch import run_job
from mariana.messages import codec
from mariana.storage import RunDir

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(shm_mod.host_id() is None, reason="no /dev/shm on this machine")]

KB, MB = 1 << 10, 1 << 20


def _pair(cap_mb: int, first_mb: int):
    """A sender (worker 0) and a receiver (worker 1) in this process, handshake done."""
    a = Shm("f" * 32, 0, cap_bytes=cap_mb * MB, min_bytes=64 * KB, first_bytes=first_mb * MB)
    b = Shm("f" * 32, 1)
    start(a, b)
    yield a, b
    a.close()
    b.close()


@pytest.fixture
def pair():
    yield from _pair(4, 1)


@pytest.fixture
def big_pair():
    """A pair whose arena has room for a few MB (what ``Arena.trim`` gives back)."""
    yield from _pair(64, 16)


def start(a: Shm, b: Shm) -> None:
    """The first big frame makes an arena (it travels by zmq); one exchange makes it usable."""
    assert a.encode(1, {"x": np.ones(64 * KB, np.uint8)})[1] == 0 and not a.usable(1)
    exchange(a, b)


def exchange(a: Shm, b: Shm) -> None:
    """One round of notes: a -> b (offers), b -> a (acks, freed extents)."""
    b.notes_in(0, a.notes(1))
    a.notes_in(1, b.notes(0))


def files(prefix: str) -> list[str]:
    return glob.glob(f"/dev/shm/{prefix}*")


def send(a: Shm, b: Shm, arr: np.ndarray) -> tuple[np.ndarray, int]:
    """``arr`` from a to b through ``Shm.encode`` / ``Shm.resolve`` / ``codec.decode``."""
    frames, placed = a.encode(1, {"x": arr})
    if any(len(memoryview(f)) == 0 for f in frames[1:]):
        frames = b.resolve(0, frames)
    return codec.decode(frames)["x"], placed


def test_segment_is_offered_acknowledged_then_unlinked(pair):
    a, b = pair
    assert a.usable(1) and not files(a.prefix)  # mapped by the receiver, then unlinked at once
    assert b.mapped[0].maps  # the receiver's mapping keeps the memory


def test_nothing_to_say_is_no_notes_at_all(pair):
    """After the handshake neither side has anything to tell: notes() is None (an empty batch is
    then not sent); a fresh pair's first arena is offered (``start``: notes, not None)."""
    a, b = pair
    assert a.notes(1) is None and b.notes(0) is None
    c, d = Shm("e" * 32, 0, first_bytes=1 * MB), Shm("e" * 32, 1)
    try:
        c.encode(1, {"x": np.ones(64 * KB, np.uint8)})
        notes = c.notes(1)
        assert notes is not None and notes.offer is not None and d.notes(0) is None
    finally:
        c.close()
        d.close()


def test_descriptor_round_trip_gives_a_read_only_zero_copy_view(pair):
    a, b = pair
    x = np.arange(100_000, dtype=np.float32).reshape(250, 400)
    y, placed = send(a, b, x)
    assert placed == x.nbytes and y.dtype == x.dtype and y.shape == x.shape
    assert np.array_equal(x, y) and not y.flags.writeable and not y.flags.owndata
    with pytest.raises(ValueError):
        y[0, 0] = 1
    seg, off = next(iter(a.arenas[1].leases))
    assert np.shares_memory(y, np.frombuffer(b.mapped[0].maps[seg], np.uint8))


def test_small_frames_travel_by_zmq_and_make_no_arena(pair):
    a, b = pair
    c = Shm("a" * 32, 0)
    c.encode(1, {"x": np.ones(100, np.float32)})
    assert not c.arenas and not c.notes(1)
    frames, placed = a.encode(1, {"x": np.ones(100, np.float32)})
    assert placed == 0 and len(frames[1]) == 400 and not a.arenas[1].leases


def test_an_extent_is_released_after_the_last_view_is_collected_and_reused(pair):
    a, b = pair
    y, _ = send(a, b, np.full(200_000, 3.0, np.float32))
    (lease,) = a.arenas[1].leases
    view = y[10:20]
    del y
    gc.collect()
    exchange(a, b)
    assert lease in a.arenas[1].leases  # a slice still holds it
    del view
    gc.collect()
    exchange(a, b)
    assert not a.arenas[1].leases
    z, _ = send(a, b, np.full(200_000, 4.0, np.float32))
    assert set(a.arenas[1].leases) == {lease} and z[0] == 4.0  # the same extent, reused


def _shmem_kb() -> int:
    """This process's resident shared memory (both ends of a pair are mapped here)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssShmem:"))


@pytest.mark.skipif(shm_mod._MADV_REMOVE is None, reason="no MADV_REMOVE on this platform")
def test_memory_idle_for_two_supersteps_is_given_back_and_serves_again(big_pair):
    a, b = big_pair
    a.begin(1)
    y, placed = send(a, b, np.full(6 * MB // 4, 5.0, np.float32))  # 6 MB, written by a, read whole by b
    assert placed and np.all(y == 5.0)
    del y
    gc.collect()
    exchange(a, b)  # freed: nothing of the segment is leased
    held = _shmem_kb()
    a.begin(2)  # idle for one superstep: kept
    assert _shmem_kb() == held
    a.begin(3)
    assert held - _shmem_kb() >= 5 * 1024  # (KB) the 6 MB written and read are no longer resident
    (seg,) = a.arenas[1].segs
    allocated = lambda: os.fstat(seg.fd).st_blocks * 512  # noqa: E731 - the file's memory in /dev/shm
    assert allocated() <= HEADER
    a.begin(4)
    arena = a.arenas[1]
    loc = arena.alloc(6 * MB)
    assert loc is not None and allocated() == HEADER + 6 * MB  # allocated again before anything is written
    arena.release(*loc)  # (so a full /dev/shm fails the allocation, not a later write with SIGBUS)
    z, placed = send(a, b, np.full(6 * MB // 4, 6.0, np.float32))
    assert placed and np.all(z == 6.0)


def test_the_writer_does_not_map_what_it_sends(big_pair):
    """An extent is written into the file (``pwrite``), not through the sender's mapping: its
    pages count in the memory of the reader that maps them, once, not in the sender's as well."""
    a, b = big_pair
    a.begin(1)
    before = _shmem_kb()
    y, placed = send(a, b, np.full(6 * MB // 4, 7.0, np.float32))
    assert placed
    assert _shmem_kb() - before < 1024  # (KB) sent, not yet read: in no mapping of this process
    assert np.all(y == 7.0)
    assert _shmem_kb() - before >= 6 * 1024 - 64  # read whole: the reader's mapping holds it


def test_an_extent_written_every_superstep_is_written_through_the_mapping(big_pair):
    """The first write into an extent goes into the file; the same extent written again the next
    superstep (a message sent every superstep) goes through the sender's mapping, a plain copy
    into pages that then stay mapped there."""
    a, b = big_pair
    grew = []
    for ss in (1, 2):
        a.begin(ss)
        before = _shmem_kb()
        y, placed = send(a, b, np.full(4 * MB // 4, float(ss), np.float32))
        assert placed
        grew.append(_shmem_kb() - before)
        assert np.all(y == ss)
        del y
        gc.collect()
        exchange(a, b)
    assert grew[0] < 1024 and grew[1] >= 4 * 1024 - 64  # (KB)


def test_an_extent_in_use_every_superstep_keeps_its_pages(big_pair):
    a, b = big_pair
    for ss in range(1, 8):
        a.begin(ss)
        y, placed = send(a, b, np.full(2 * MB // 4, float(ss), np.float32))
        assert placed and y[0] == ss
        del y
        gc.collect()
        exchange(a, b)
    (seg,) = a.arenas[1].segs
    assert HEADER + 2 * MB <= seg.kept < seg.size  # the idle tail went, not the extent in use


def test_a_retained_view_keeps_its_extent_leased_across_many_sends(pair):
    a, b = pair
    kept, _ = send(a, b, np.full(100_000, 7.0, np.float32))
    (lease,) = a.arenas[1].leases
    for i in range(50):
        y, placed = send(a, b, np.full(100_000, float(i), np.float32))
        assert placed and y[0] == i
        del y
        gc.collect()
        exchange(a, b)
    assert lease in a.arenas[1].leases and len(a.arenas[1].leases) == 1
    assert np.all(kept == 7.0)


def test_the_arena_grows_then_falls_back_to_zmq_at_the_cap(pair):
    a, b = pair
    held = []
    x = np.ones(300 * KB // 4, np.float32)  # 300 KB: three fit the first 1 MB segment
    for _ in range(3):
        y, placed = send(a, b, x)
        assert placed
        held.append(y)
    y, placed = send(a, b, x)
    assert placed == 0 and np.array_equal(y, x)  # no room: zmq, and a 2 MB segment is offered
    assert len(a.arenas[1].segs) == 2 and a.arenas[1].growing
    exchange(a, b)
    for _ in range(6):
        y, placed = send(a, b, x)
        assert placed
        held.append(y)
    y, placed = send(a, b, x)  # 1 + 2 MB used, the cap (4 MB) leaves 1 MB: grows by 1 MB
    exchange(a, b)
    sizes = [s.size for s in a.arenas[1].segs]
    assert sum(sizes) <= 4 * MB and a.budget[0] == 4 * MB - sum(sizes)
    while True:
        y, placed = send(a, b, x)
        if not placed:
            break
        held.append(y)
    assert not a.arenas[1].grow(x.nbytes)  # at the cap: plain zmq frames from now on
    assert np.array_equal(send(a, b, x)[0], x)
    assert all(np.array_equal(h, x) for h in held)


def test_an_array_above_the_chunk_size_goes_whole_or_in_zmq_chunks():
    a = Shm("e" * 32, 0, cap_bytes=16 * MB, first_bytes=16 * MB)
    b = Shm("e" * 32, 1)
    try:
        start(a, b)
        x = np.arange(3 * MB, dtype=np.float32)  # 12 MB, three codec chunks
        y, placed = send(a, b, x)
        assert placed == x.nbytes and np.array_equal(x, y) and not y.flags.owndata
        z, placed = send(a, b, x)  # no room for 12 more MB: chunked zmq frames
        frames, _ = a.encode(1, {"x": x})
        assert placed == 0 and len(frames) == 4 and np.array_equal(z, x)
    finally:
        a.close()
        b.close()


def test_a_peer_on_another_host_refuses_and_gets_zmq_frames():
    a = Shm("d" * 32, 0)
    b = Shm("d" * 32, 1)
    b.host = "another-host"
    try:
        start(a, b)
        assert 1 in a.off and not a.usable(1) and not files(a.prefix)
        assert a.encode(1, {"x": np.ones(1 << 20, np.uint8)})[1] == 0
    finally:
        a.close()
        b.close()


def test_bad_descriptors_are_protocol_errors(pair):
    a, b = pair
    frames, _ = a.encode(1, {"x": np.ones(100_000, np.float32)})
    header = codec.decode([frames[0]] + [b"\0" * 400_000])  # the real header, a stand-in frame
    aid, ((i, seg, off, n),) = header["shm"]
    for bad in ([aid, [[i, seg, off, 1 << 40]]], [aid, [[i, seg, 0, n]]], [aid, [[i, 9, off, n]]],
                ["other", [[i, seg, off, n]]], [aid, [[5, seg, off, n]]], [aid, "x"]):
        forged = codec.encode({k: v for k, v in header.items() if k not in ("v", "x")} | {"shm": bad})
        with pytest.raises(ProtocolError):
            b.resolve(0, [forged[0], b""])
    with pytest.raises(ProtocolError):
        b.resolve(None, frames)
    assert off >= HEADER


def test_notes_are_checked():
    b = Shm("c" * 32, 1)
    for notes in ({"offer": "x"}, {"offer": ["a", "h", [[0, "n"]]]}, {"freed": [1, 2]}, {"freed": ["a", [[1, -2]]]},
                  {"ack": ["a", [[0, "yes"]]]}, {"unknown": []}, ["offer"]):
        with pytest.raises(ProtocolError):
            b.notes_in(0, notes)
    b.notes_in(0, {"offer": ["mariana-c-w0-1-g0-p1", b.host, [[0, "../../etc/passwd", 8192, "t"]]]})
    assert b.notes(0).ack == ["mariana-c-w0-1-g0-p1", [[0, False]]]
    b.close()
    assert not files(b.prefix)


def test_reset_drops_arenas_and_their_files():
    a = Shm("b" * 32, 0)
    big = {"x": np.ones(1 << 20, np.uint8)}
    a.encode(1, big)
    a.notes(1)  # offered, never acknowledged
    assert files(a.prefix)
    a.reset(1)
    assert not files(a.prefix) and not a.arenas
    a.encode(1, big)
    assert files(f"{a.prefix}-g1-")
    a.close()
    assert not files(a.prefix)


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _plant(name: str, age_s: float) -> str:
    """A segment-like file in /dev/shm, last modified ``age_s`` seconds ago."""
    path = f"/dev/shm/{name}"
    with open(path, "wb") as f:
        f.write(b"x" * 4096)
    t = time.time() - age_s
    os.utime(path, (t, t))
    return path


def test_segments_of_processes_that_no_longer_run_are_swept():
    dead, me, old = _dead_pid(), os.getpid(), shmfiles.STALE_AFTER_S + 30
    gone = [_plant(f"mariana-{'e' * 12}-w0-{dead}-1a2b3c4d-pool-0", old),  # a pool segment, its worker gone
            _plant(f"mariana-{'e' * 12}-w1-{dead}-g0-p0-0", old)]  # an arena segment
    kept = [_plant(f"mariana-{'e' * 12}-w0-{me}-1a2b3c4d-pool-1", old),  # its owner runs
            _plant(f"mariana-{'e' * 12}-w2-{dead}-1a2b3c4d-pool-0", 1.0),  # too young to judge
            _plant(f"mariana-{'e' * 12}-notes-{dead}", old)]  # not a segment's name
    try:
        assert shmfiles.sweep_stale() >= 2
        assert [os.path.exists(p) for p in gone + kept] == [False] * len(gone) + [True] * len(kept)
    finally:
        for path in gone + kept:
            if os.path.exists(path):
                os.unlink(path)


# -- a 2-worker cluster ---------------------------------------------------------------------------
DNN = get_job("dnn-dp")


def _train(run_dir: Path, sets: Sequence[str] = (), **kw):
    """dnn-dp on 2 cluster workers: (parameters, result, [(superstep, shm bytes out)] per worker, job id)."""
    config = resolve_config(DNN, None, ["epochs=2", "checkpoint_every=8", *sets])
    jobs: list[str] = []
    start = kw.pop("on_start", None)

    def on_start(master, procs):
        jobs.append(master.job_id)
        if start is not None:
            start(master, procs)

    result = run_job(DNN, config, workers=2, runtime="cluster", run_dir=RunDir(str(run_dir)), shm_min_kb=1,
                     on_start=on_start, **kw)
    shm_out = [(r["superstep"], sum(r.get("shm_bytes_out", {}).values()))  # (superstep, bytes) per worker
               for w in (0, 1) for r in map(json.loads, open(run_dir / "trace" / f"worker-{w}.jsonl"))]
    return {k: v.tobytes() for k, v in final_params(result, config)}, result, shm_out, jobs[0]


def test_two_workers_give_identical_results_with_and_without_shm_and_leave_no_files(tmp_path):
    left = _plant(f"mariana-{'d' * 12}-w0-{_dead_pid()}-1a2b3c4d-pool-0", shmfiles.STALE_AFTER_S + 30)
    try:
        on, _, shm_on, job_on = _train(tmp_path / "on")
        assert not os.path.exists(left)  # a worker of a job before, gone without cleaning up: swept at the start
    finally:
        if os.path.exists(left):
            os.unlink(left)
    off, _, shm_off, job_off = _train(tmp_path / "off", shm=False)
    assert on == off
    assert sum(n for _, n in shm_on) > 0 and sum(n for _, n in shm_off) == 0
    assert not files(f"mariana-{job_on[:12]}") and not files(f"mariana-{job_off[:12]}")


def test_a_worker_killed_with_sigkill_recovers_identically_and_leaves_no_files(tmp_path):
    reference, *_ = _train(tmp_path / "reference", shm=False)
    jobs: list[str] = []
    procs: list = []
    killed: list[int] = []
    during: list[str] = []

    def started(master, ps):
        jobs.append(master.job_id)
        procs.extend(ps)

    def kill(line):
        if line["superstep"] == 30 and not killed:
            during.extend(files(f"mariana-{jobs[0][:12]}"))  # handshake done: nothing left to leak
            killed.append(procs[1].pid)
            os.kill(procs[1].pid, signal.SIGKILL)

    recovered, result, shm_out, job_id = _train(
        tmp_path / "killed", on_superstep=kill, on_start=started)
    assert killed and recovered == reference and result.metrics[-1]["restarts"] == 1
    assert {w for w, (ss, n) in enumerate(shm_out) if ss > 30 and n}  # still used after the recovery
    assert not during and not files(f"mariana-{job_id[:12]}")


def test_secure_jobs_never_use_shared_memory(tmp_path):
    _, _, shm_out, job = _train(tmp_path / "secure", secure=True)
    assert not any(n for _, n in shm_out) and not files(f"mariana-{job[:12]}")
