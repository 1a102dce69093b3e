"""The worker's control decisions and inbox driven with no network."""

from __future__ import annotations

import pytest

from mariana import ProtocolError
from mariana.cluster.workerstate import Compute, Inbox, Leave, Report, RollBack, WorkerControl, WriteCheckpoint
from mariana.messages import codec, wire
from mariana.messages.wire import DropCounter

pytestmark = pytest.mark.timeout(30)

JOB = "j" * 32


def control() -> WorkerControl:
    c = WorkerControl(DropCounter("worker 0"))
    c.job_id = JOB
    return c


def through(msg: wire.Wire, job: str = JOB) -> wire.Wire | None:
    """A record as the worker's socket hands it over (the real codec), parsed by a fresh control."""
    return control().parse(codec.decode(codec.encode(msg.to_wire(job))))


def test_begins_run_in_order_and_stale_or_out_of_order_ones_are_dropped():
    c = control()
    ins = c.command(wire.Begin(0, 0, {}, {}))
    assert isinstance(ins, Compute) and c.current == 0
    assert c.command(wire.Begin(0, 0, {}, {})) is None  # again
    assert c.command(wire.Begin(5, 0, {}, {})) is None  # skips ahead
    assert c.command(wire.Begin(1, 3, {}, {})) is None  # another generation
    assert c.drops.counts == {"superstep": 2, "generation": 1} and c.current == 0


def test_a_rollback_starts_the_new_generation_and_restoring_rewinds_the_superstep():
    c = control()
    for s in range(4):
        c.command(wire.Begin(s, 0, {}, {}))
    ins = c.command(wire.Rollback(2, 1, ["tcp://a", "tcp://b"], [None, None]))
    assert isinstance(ins, RollBack) and c.gen == 1
    c.restored(2)
    assert c.command(wire.Begin(2, 0, {}, {})) is None  # the old generation's BEGIN
    assert isinstance(c.command(wire.Begin(2, 1, {}, {})), Compute)


def test_checkpoint_finish_bye_and_abort_become_instructions():
    c = control()
    assert c.command(wire.Checkpoint(7)) == WriteCheckpoint(7)
    assert isinstance(c.command(wire.Finish()), Report)
    assert c.command(wire.Bye()) == Leave(0, "job finished")
    assert c.command(wire.Abort("disk full")) == Leave(1, "master aborted the job: disk full")
    assert c.command(wire.Heartbeat(t=1.0)) is None and not c.drops.counts
    assert c.command(wire.Ready(0)) is None and c.drops.counts == {"kind": 1}


def test_messages_of_another_job_or_malformed_are_dropped_and_counted():
    assert isinstance(through(wire.Bye()), wire.Bye)
    c = control()
    assert c.parse({"kind": wire.Bye.KIND, "job": "other"}) is None
    assert c.parse({"kind": 9999, "job": JOB}) is None
    assert c.parse({"kind": wire.Begin.KIND, "job": JOB, "ss": "x"}) is None
    assert set(c.drops.counts) == {"job", "kind", "header"}


def test_only_a_rollback_or_abort_interrupts_the_wait_for_peers():
    c = control()
    assert c.interrupts(wire.Rollback(0, 1, [], []).to_wire(JOB))
    assert c.interrupts(wire.Abort("x").to_wire(JOB))
    # anything else waits its turn (a BEGIN or CHECKPOINT may come while the last batches are awaited)
    assert not c.interrupts(wire.Abort("x").to_wire("other-job"))
    assert not c.interrupts(wire.Heartbeat().to_wire(JOB))
    assert not c.interrupts(wire.Checkpoint(3).to_wire(JOB))
    assert not c.interrupts(wire.Begin(3, 0, {}, {}).to_wire(JOB))
    assert c.drops.counts == {}


def part(ss: int, src: int, msgs: list, part_no: int = 0, last: bool = True) -> dict:
    return codec.decode(codec.encode(wire.Batch(ss, src, msgs, 0, part=part_no, last=last).to_wire(JOB)))


def test_the_inbox_assembles_parts_per_superstep_and_peer():
    box = Inbox()
    box.add(part(3, 1, [["a", "b", None, 1]], 0, last=False), 1, JOB, 3, 0, size=10)
    assert box.missing(3, [1, 2]) == [1, 2]
    box.add(part(3, 1, [["a", "c", None, 2]], 1, last=True), 1, JOB, 3, 0, size=20)
    box.add(part(4, 2, [["z", "b", None, 9]]), 2, JOB, 3, 0, size=5)  # the next superstep's, early
    box.add(part(3, 2, []), 2, JOB, 3, 0, size=1)
    assert box.missing(3, [1, 2]) == []
    inbound, sizes = box.take(3)
    assert [(m.src, m.dst, m.payload) for m in inbound[1]] == [("a", "b", 1), ("a", "c", 2)] and inbound[2] == []
    assert sizes == {1: 30, 2: 1} and box.missing(4, [1, 2]) == [1] and 3 not in box.complete


def test_the_inbox_refuses_a_duplicate_batch_and_a_part_out_of_order():
    box = Inbox()
    box.add(part(3, 1, []), 1, JOB, 3, 0, size=1)
    with pytest.raises(ProtocolError):
        box.add(part(3, 1, []), 1, JOB, 3, 0, size=1)
    with pytest.raises(ProtocolError):
        box.add(part(3, 2, [], part_no=1, last=True), 2, JOB, 3, 0, size=1)
    box.clear()
    assert box.missing(3, [1]) == [1]
