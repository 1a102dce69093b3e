"""Send buffers (``Context.send_buffer``): a worker-wide shared-memory pool every same-host peer
maps, so arrays sent from it travel as descriptors with no copy (comm/shm.py ``Pool``)."""

from __future__ import annotations

import glob
import json
import os
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mariana.comm import shm as shm_mod
from mariana.comm.shm import Shm
from mariana.jobs.launch import run_job
from mariana.messages import codec
from mariana.storage import RunDir
from mariana.storage.partfile import unpack
from test_shm import _train

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(shm_mod.host_id() is None, reason="no /dev/shm on this machine")]

KB = 1 << 10


def files(job_id: str) -> list[str]:
    return glob.glob(f"/dev/shm/mariana-{job_id[:12]}*")


def traces(run_dir: Path) -> list[dict[str, Any]]:
    return [r for w in (0, 1) for r in map(json.loads, open(run_dir / "trace" / f"worker-{w}.jsonl"))]


def total(records: list[dict[str, Any]], key: str) -> int:
    return sum(sum(r.get(key, {}).values()) for r in records)


def _toy(tmp_path: Path, name: str, runtime: str = "cluster", sets: tuple[str, ...] = (), **kw):
    jobs: list[str] = []
    run_dir = tmp_path / name
    result = run_job("contract_jobs:double_buffered", sets=list(sets), workers=2, runtime=runtime,
                     run_dir=RunDir(str(run_dir)), on_start=lambda m, p: jobs.append(m.job_id), **kw)
    values = {k: np.asarray(v).tobytes() for k, v in sorted(result.values.items())}
    return values, (traces(run_dir) if runtime == "cluster" else []), (jobs[0] if jobs else "")


# -- unit: the pool between two Shm objects in this process -------------------------------------------
def test_a_send_buffer_travels_as_a_descriptor_once_acknowledged_and_its_file_goes():
    a, b = Shm("e" * 32, 0), Shm("e" * 32, 1)
    try:
        assert a.pool is not None
        a.pool.peers = {1}
        buf = a.pool.buffer(100_000)
        assert buf.dtype == np.float32 and buf.flags.writeable and not buf.any()
        buf[:] = np.arange(100_000, dtype=np.float32)
        frames, placed = a.encode(1, {"x": buf[10:]})  # not acknowledged yet: an ordinary (copied) frame
        assert a.zero_copy == 0 and codec.peek(frames[0], "shm_pool") is None
        b.notes_in(0, a.notes(1))  # the pool offer (and the arena's)
        a.notes_in(1, b.notes(0))  # the acks
        assert not glob.glob(f"/dev/shm/{a.pool.pid}*")  # every peer mapped it: unlinked
        frames, placed = a.encode(1, {"x": buf[10:], "small": np.ones(4)})
        assert a.zero_copy == (100_000 - 10) * 4 and placed == 0
        y = codec.decode(b.resolve(0, frames))["x"]
        assert np.array_equal(y, buf[10:]) and not y.flags.writeable
        buf[10] = -1  # the receiver reads the sender's memory itself: no copy anywhere
        assert y[0] == -1
        other = np.arange(100_000, dtype=np.float32)  # not a send buffer: copied through the arena
        frames, placed = a.encode(1, {"x": other})
        assert a.zero_copy == 0 and placed == other.nbytes
    finally:
        a.close()
        b.close()


def test_a_rollback_keeps_the_pool_and_a_surviving_peer_answers_from_its_mappings():
    a, b = Shm("d" * 32, 0), Shm("d" * 32, 1)
    try:
        assert a.pool is not None
        a.pool.peers = {1}
        buf = a.pool.buffer(50_000)
        b.notes_in(0, a.notes(1))
        a.notes_in(1, b.notes(0))
        a.reset(1)
        b.reset(1)
        assert a.pool.buffer is not None and a.pool.acked == {}
        b.notes_in(0, a.notes(1))  # offered again; the file is gone but b still maps it
        a.notes_in(1, b.notes(0))
        assert a.pool.acked == {1: {0}}
        a.encode(1, {"x": buf})
        assert a.zero_copy == buf.nbytes
        c = Shm("d" * 32, 1)  # a new process in its place cannot map the unlinked file: copies
        try:
            a.reset(2)
            c.notes_in(0, a.notes(1))
            a.notes_in(1, c.notes(0))
            assert 1 in a.pool.refused
            frames, _ = a.encode(1, {"x": buf})
            assert a.zero_copy == 0
        finally:
            c.close()
    finally:
        a.close()
        b.close()


def test_a_peer_on_another_host_refuses_the_pool_gets_copies_and_the_files_go():
    a, b, c = Shm("c" * 32, 0), Shm("c" * 32, 1), Shm("c" * 32, 2)
    b.host = "another-host"
    try:
        assert a.pool is not None
        a.pool.peers = {1, 2}
        buf = a.pool.buffer(100_000)
        a.encode(1, {"x": np.ones(1 << 20, np.uint8)})  # b gets an arena offer too, and refuses it
        b.notes_in(0, a.notes(1))
        c.notes_in(0, a.notes(2))
        assert glob.glob(f"/dev/shm/{a.pool.pid}*")  # linked until every peer answered
        a.notes_in(1, b.notes(0))
        a.notes_in(2, c.notes(0))
        assert 1 in a.pool.refused and 1 in a.off and a.pool.acked == {2: {0}}
        assert not glob.glob(f"/dev/shm/{a.pool.pid}*") and not glob.glob(f"/dev/shm/{a.prefix}*")
        frames, _ = a.encode(1, {"x": buf})
        assert a.zero_copy == 0 and np.array_equal(codec.decode(frames)["x"], buf)
        frames, _ = a.encode(2, {"x": buf})
        assert a.zero_copy == buf.nbytes
    finally:
        for s in (a, b, c):
            s.close()


# -- cluster jobs ------------------------------------------------------------------------------------
def test_double_buffered_send_buffers_go_without_copy_and_match_no_shm_and_local(tmp_path):
    on, trace_on, job_on = _toy(tmp_path, "on")
    off, trace_off, job_off = _toy(tmp_path, "off", shm=False)
    local, _, _ = _toy(tmp_path, "local", runtime="local")
    assert on == off == local
    zero = total(trace_on, "shm_zero_copy_bytes")
    shm = total(trace_on, "shm_bytes_out")
    # from superstep 2 on (after the handshake) every cross-worker buffer goes by descriptor
    late = [r for r in trace_on if r["superstep"] >= 2 and r.get("shm_bytes_out")]
    assert late and all(r["shm_bytes_out"] == r["shm_zero_copy_bytes"] for r in late)
    assert zero > 0 and shm - zero <= 2 * (1 << 17) * 4 * 4  # copies only before the acknowledgement
    assert all(r["send_buffer_reuse"] == 0 for r in trace_on)
    assert total(trace_off, "shm_zero_copy_bytes") == 0
    assert not files(job_on) and not files(job_off)


def test_breaking_the_contract_is_counted_in_the_trace(tmp_path):
    _, trace, job = _toy(tmp_path, "one", sets=("buffers=1",))
    assert max(r["send_buffer_reuse"] for r in trace) > 0
    assert not files(job)


@pytest.mark.parametrize("background", [True, False])
def test_captures_and_checkpoints_hold_what_was_sent_not_what_the_buffer_became(tmp_path, background):
    sets = ("last=8", f"checkpoint_background={str(background).lower()}", "checkpoint_every=3")
    _, _, _ = _toy(tmp_path, "cap", sets=sets, capture="v*")
    _, _, _ = _toy(tmp_path, "ref", runtime="local", sets=sets, capture="v*")
    for ss in (3, 4, 5, 6):
        for v in ("v0", "v1", "v2", "v3"):
            rel = f"capture/{v}/ss-{ss:06d}.part"
            got = unpack((tmp_path / "cap" / rel).read_bytes())
            want = unpack((tmp_path / "ref" / rel).read_bytes())
            assert [[s, t, np.asarray(p).tobytes()] for s, t, p in got["inbox"]] == \
                   [[s, t, np.asarray(p).tobytes()] for s, t, p in want["inbox"]]
            assert [[d, t, np.asarray(p).tobytes()] for d, t, p in got["outbox"]] == \
                   [[d, t, np.asarray(p).tobytes()] for d, t, p in want["outbox"]]
    # the checkpoint at superstep 6 holds an inbox of views into the peers' send buffers: resuming
    # from it (the run ended at 8) must redo supersteps 6-8 exactly
    resumed = run_job("contract_jobs:double_buffered", sets=list(sets), workers=2, runtime="cluster",
                      run_dir=RunDir(str(tmp_path / "cap")), resume=True)
    assert resumed.supersteps == 9
    reference = run_job("contract_jobs:double_buffered", sets=["last=8"], workers=2, runtime="local")
    assert {k: np.asarray(v).tobytes() for k, v in resumed.values.items()} == \
           {k: np.asarray(v).tobytes() for k, v in reference.values.items()}


def _dnn(run_dir: Path, sets: list[str], **kw):
    """test_shm's 2-worker dnn-dp run, with this file's full trace records."""
    params, result, _, job = _train(run_dir, sets, **kw)
    return params, result, traces(run_dir), job


@pytest.mark.parametrize("exchange", ["allreduce", "linear"])
def test_dnn_gradients_leave_from_send_buffers_bit_identically(tmp_path, exchange):
    sets = [f"exchange={exchange}", "replicas=2"]
    on, _, trace_on, job_on = _dnn(tmp_path / "on", sets)
    off, _, trace_off, job_off = _dnn(tmp_path / "off", sets, shm=False)
    assert on == off
    assert total(trace_on, "shm_zero_copy_bytes") > 0 and total(trace_off, "shm_zero_copy_bytes") == 0
    assert all(r["send_buffer_reuse"] == 0 for r in trace_on)
    assert not files(job_on) and not files(job_off)


def test_a_worker_killed_with_send_buffers_recovers_bit_identically_and_leaves_no_files(tmp_path):
    sets = ["exchange=allreduce"]
    reference, *_ = _dnn(tmp_path / "reference", sets, shm=False)
    procs: list = []
    killed: list[int] = []

    def kill(line):
        if line["superstep"] == 30 and not killed:
            killed.append(procs[1].pid)
            os.kill(procs[1].pid, signal.SIGKILL)

    recovered, result, trace, job_id = _dnn(tmp_path / "killed", sets, on_superstep=kill,
                                            on_start=lambda m, p: procs.extend(p))
    assert killed and recovered == reference and result.metrics[-1]["restarts"] == 1
    assert any(r.get("shm_zero_copy_bytes") for r in trace if r["superstep"] > 30)  # the new worker's pool
    assert all(r["send_buffer_reuse"] == 0 for r in trace)
    assert not files(job_id)
