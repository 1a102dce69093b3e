"""The master's state machine driven with no network: events in, instructions out."""

from __future__ import annotations

import pytest

from mariana import __version__
from mariana.cluster.control import (Arrived, Beat, Exited, Fail, MasterState, Phase, Send, SuperstepTimeout, Tick,
                                     WorkerLost, inbound_trace)
from mariana.errors import VertexError
from mariana.messages import codec, wire

pytestmark = pytest.mark.timeout(30)

JOB = "job-1"


def header(msg: wire.Wire, job: str = JOB) -> dict:
    """What the master's socket would hand over: the record through the real codec."""
    return codec.decode(codec.encode(msg.to_wire(job)))


def hello(i: int, version: str = __version__, want_job: str | None = None) -> Arrived:
    h = header(wire.Hello(version=version, data=f"tcp://127.0.0.1:{7000 + i}", pid=100 + i, host=f"h{i}",
                          want_job=want_job))
    return Arrived(f"w{i}".encode(), h, now=0.0, wall=0.0)


def arrive(i: int, msg: wire.Wire, now: float = 1.0, wall: float = 1.0, job: str = JOB) -> Arrived:
    return Arrived(f"w{i}".encode(), header(msg, job), now, wall)


def joined(n: int = 2, **kw) -> MasterState:
    st = MasterState(n, "pagerank", JOB, **kw)
    for i in range(n):
        assert st.handle(hello(i)) == []
    assert st.all_joined()
    return st


def running(n: int = 2) -> MasterState:
    st = joined(n)
    st.phase = Phase.STARTING
    for i in range(n):
        st.handle(arrive(i, wire.Ready(0)))
    assert st.all_ready()
    st.phase = Phase.RUNNING
    return st


def done(ss: int) -> wire.Done:
    return wire.Done(ss, {}, 1, 1, 0, [], 0.0)


def test_workers_join_in_order_and_extra_ones_wait_as_spares():
    st = joined(2)
    assert [w.index for w in st.present()] == [0, 1] and [w.host for w in st.present()] == ["h0", "h1"]
    assert st.handle(hello(2)) == [] and st.spares == {b"w2"} and len(st.joined) == 2


def test_a_worker_of_another_version_or_job_is_refused_with_the_reason():
    st = MasterState(2, "pagerank", JOB)
    [refuse] = st.handle(hello(0, version="0.0.0"))
    assert isinstance(refuse, Send) and isinstance(refuse.msg, wire.Refuse) and "0.0.0" in refuse.msg.reason
    [refuse] = st.handle(hello(1, want_job="wcc"))
    assert "wcc" in refuse.msg.reason and st.drops.counts["refused"] == 2 and not st.joined


def test_the_barrier_counts_dones_of_the_current_superstep_only():
    st = running(2)
    sends = st.begin(0, {"a": 1}, {}, wall=10.0)
    assert [(s.identity, type(s.msg)) for s in sends] == [(b"w0", wire.Begin), (b"w1", wire.Begin)]
    st.handle(arrive(0, done(5)))  # another superstep's: not counted
    assert not st.dones
    st.handle(arrive(0, done(0), wall=10.25))
    assert not st.barrier_done()
    st.handle(arrive(1, done(0), wall=10.5))
    assert st.barrier_done() and st.arrivals == {0: 0.25, 1: 0.5}


def test_unknown_senders_foreign_jobs_and_stale_generations_are_dropped():
    st = running(2)
    st.begin(0, {}, {}, 0.0)
    st.handle(Arrived(b"stranger", header(done(0)), 1.0, 1.0))
    st.handle(arrive(0, done(0), job="another-job"))
    assert st.drops.counts == {"sender": 1, "job": 1} and not st.dones
    st.lose(1)
    st.handle(arrive(0, wire.Ready(0)))  # READY of the generation before the rollback
    assert st.ready == set() and st.gen == 1 and st.phase is Phase.REJOINING


def test_a_silent_worker_is_lost_after_the_timeout_naming_it():
    st = running(2)
    st.worker_timeout = 5.0
    st.handle(arrive(0, wire.Heartbeat(), now=4.0))
    assert not [i for i in st.handle(Tick(5.0, 5.0)) if isinstance(i, Fail)]
    [fail] = [i for i in st.handle(Tick(6.5, 6.5)) if isinstance(i, Fail)]  # worker 1: READY at 1.0, then silent
    assert isinstance(fail.error, WorkerLost) and fail.error.index == 1
    assert "worker 1 (host h1, pid 101) stopped answering" in str(fail.error)


def test_heartbeats_keep_a_worker_alive_and_are_echoed_with_the_masters_clock():
    st = running(1)
    st.worker_timeout = 5.0
    hb = wire.Heartbeat(t=123.5, state={"phase": "computing", "vertex": "v"})
    [echo] = st.handle(Beat(b"hb:w0", b"w0", header(hb), now=9.0, wall=200.0))
    assert echo.identity == b"hb:w0" and echo.msg.echo == 123.5 and echo.msg.t == 200.0
    assert st.present()[0].state["vertex"] == "v"
    assert not [i for i in st.handle(Tick(13.0, 0.0)) if isinstance(i, Fail)]
    sends = [i for i in st.handle(Tick(13.0, 0.0)) if isinstance(i, Send)]
    assert sends == []  # one heartbeat per interval
    assert [i.identity for i in st.handle(Tick(14.0, 0.0)) if isinstance(i, Send)] == [b"hb:w0"]


def test_an_exited_local_worker_is_lost_unless_the_job_is_done():
    st = running(2)
    [fail] = st.handle(Exited(101, -9))
    assert fail.error.index == 1 and "exited with code -9" in str(fail.error)
    st.bye()
    assert st.handle(Exited(100, 0)) == []


def test_a_vertex_error_from_a_worker_fails_the_job_with_vertex_and_superstep():
    st = running(2)
    st.begin(3, {}, {}, 0.0)
    [fail] = st.handle(arrive(1, wire.Error("compute", "boom", vertex="v7", ss=3, traceback="tb")))
    assert isinstance(fail.error, VertexError) and fail.error.vertex_id == "v7" and fail.error.superstep == 3


def test_checkpoint_parts_of_an_abandoned_checkpoint_are_ignored():
    st = running(2)
    st.start_checkpoint(4)
    st.handle(arrive(0, wire.Checkpointed(4, parts=[])))
    st.handle(arrive(1, wire.Checkpointed(2, parts=[])))  # an older one's
    assert not st.all_parts()
    st.handle(arrive(1, wire.Checkpointed(4, parts=[])))
    ss, parts = st.take_parts()
    assert ss == 4 and [p.src for p in parts] == [0, 1] and st.checkpoint_ss is None


def test_recovery_frees_the_slot_for_a_new_worker_and_starts_a_generation():
    st = running(2)
    st.start_checkpoint(4)
    st.lose(0)
    assert st.checkpoint_ss is None and not st.all_joined()
    st.handle(hello(5))  # a replacement takes the free slot 0
    assert st.all_joined() and st.by_index[0].host == "h5"


def test_a_hang_report_names_who_is_missing_and_what_it_waits_for():
    st = running(2)
    st.begin(7, {}, {}, wall=100.0)
    st.handle(arrive(0, done(7)))
    st.present()[1].state = {"phase": "waiting", "peers": [0], "since": 95.0}
    report, missing, waiting, stuck = st.hang_report(2.0, wall=100.0)
    assert "superstep 7 exceeded --superstep-timeout 2s" in report and "waiting for the batches of peer(s) [0]" in report
    assert missing == [{"worker": 1, "host": "h1", "state": "waiting", "for_s": 5.0}] and waiting == {"1": [0]}
    assert stuck == 1 and issubclass(SuperstepTimeout, WorkerLost)


def test_trace_records_get_what_the_peers_sent_them_from_their_dones():
    dones = {i: wire.Done(5, {}, 1, 1, 0, out, 0.0, trace={"messages_in": {str(i): own}} if own else {"x": 1},
                          stats={"bytes_out": b})
             for i, (out, own, b) in enumerate([([2, 3, 0], 2, [0, 30, 0]), ([1, 0, 4], 0, [10, 0, 40]),
                                                 ([0, 0, 0], 0, [0, 0, 0])])}
    inbound_trace(dones)
    assert dones[0].trace["messages_in"] == {"0": 2, "1": 1} and dones[0].trace["bytes_in"] == {"1": 10}
    assert dones[1].trace["messages_in"] == {"0": 3} and dones[1].trace["bytes_in"] == {"0": 30}
    assert dones[2].trace["messages_in"] == {"1": 4} and dones[2].trace["bytes_in"] == {"1": 40}
    untraced = {0: wire.Done(5, {}, 1, 1, 0, [0, 1], 0.0), 1: wire.Done(5, {}, 1, 1, 0, [1, 0], 0.0)}
    inbound_trace(untraced)
    assert all(d.trace == {} for d in untraced.values())


def test_with_a_job_token_only_workers_that_have_it_join():
    st = MasterState(1, "pagerank", JOB, token="s3cret")
    [refuse] = st.handle(hello(0))
    assert "no valid job token" in refuse.msg.reason and not st.joined
    h = header(wire.Hello(version=__version__, data="tcp://127.0.0.1:7000", pid=100, host="h0", token="s3cret"))
    assert st.handle(Arrived(b"w0", h, 0.0, 0.0)) == [] and st.all_joined()


def test_every_worker_lost_at_once_is_retired_in_one_generation():
    st = running(3)
    st.worker_timeout = 5.0
    st.handle(arrive(1, wire.Heartbeat(), now=9.0))
    assert st.also_lost(now=9.5, exited={102}) == {0, 2}  # 0 silent since 1.0, 2's process ended
    gone = st.lose({0, 2})
    assert [w.index for w in gone] == [0, 2] and st.gen == 1 and [w is None for w in st.by_index] == [True, False, True]


def test_a_lost_worker_heard_from_again_is_told_to_leave_once_naming_why():
    st = running(2)
    st.current = 7
    st.lose(1)
    [abort] = st.handle(arrive(1, wire.Heartbeat(), now=9.0))  # a partition healed: its control socket
    assert isinstance(abort.msg, wire.Abort) and abort.identity == b"w1" and abort.to is None
    assert "worker 1 (host h1, pid 101) was lost at superstep 7 and replaced" in abort.msg.reason
    assert st.handle(arrive(1, done(7), now=9.5)) == [] and st.drops.counts == {"retired": 1, "sender": 1}
    st.lose(0)  # its heartbeat socket, of a foreign job first (dropped), then of this job
    beat = header(wire.Heartbeat(t=1.0))
    assert st.handle(Beat(b"hb-w0", b"w0", header(wire.Heartbeat(t=1.0), "another-job"), 9.0, 9.0)) == []
    [abort] = st.handle(Beat(b"hb-w0", b"w0", beat, 9.0, 9.0))
    assert abort.identity == b"w0" and isinstance(abort.msg, wire.Abort) and not st.joined


def test_a_joined_worker_that_resends_hello_while_others_join_is_not_lost():
    st = MasterState(3, "pagerank", JOB, worker_timeout=3.0)
    assert st.handle(hello(0)) == [] and st.handle(hello(1)) == []  # at 0.0; worker 2 not there yet
    for t in (2.0, 4.0, 6.0):  # their HELLOs again, every 2 s (the worker's longest wait between them)
        for i in (0, 1):
            st.handle(Arrived(f"w{i}".encode(), hello(i).header, now=t, wall=t))
        assert not [i for i in st.handle(Tick(t + 0.5, t + 0.5)) if isinstance(i, Fail)]
    [fail] = [i for i in st.handle(Tick(9.5, 9.5)) if isinstance(i, Fail)]  # silent since 6.0: lost
    assert isinstance(fail.error, WorkerLost)
