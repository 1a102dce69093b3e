"""The master's per-superstep paths: BEGIN to every worker in one loop (``send_each``), DONEs
drained in one pass, and the inbound trace built from each sender's counts."""

from __future__ import annotations

import time

import pytest
import zmq

from mariana.cluster.control import inbound_trace
from mariana.comm import Transport
from mariana.comm.zmqcomm import drain, send_each
from mariana.messages import codec, wire


def _done(src: int, out: list[int], sent: list[int], trace: bool = True) -> wire.Done:
    return wire.Done(0, {}, 1, 1, sum(out), out, 0.0, src=src, stats={"bytes_out": sent},
                     trace={"messages_in": {}, "bytes_in": {}} if trace else {})


def _reference(dones: dict[int, wire.Done]) -> None:
    """The per-pair walk this module's inbound_trace replaced (its results must not change)."""
    for i, d in dones.items():
        if not d.trace:
            continue
        m_in, b_in = d.trace.setdefault("messages_in", {}), d.trace.setdefault("bytes_in", {})
        for p, peer in dones.items():
            if p == i:
                continue
            if i < len(peer.out_messages) and peer.out_messages[i]:
                m_in[str(p)] = peer.out_messages[i]
            sent = peer.stats.get("bytes_out", [])
            if i < len(sent) and sent[i]:
                b_in[str(p)] = sent[i]


@pytest.mark.timeout(30)
def test_inbound_trace_matches_the_pairwise_walk_key_for_key_and_in_order():
    def make() -> dict[int, wire.Done]:
        # arrival order 2, 0, 1, 3; worker 3 has no trace; worker 1 sent nothing
        return {2: _done(2, [4, 0, 7, 1], [40, 0, 70, 10]), 0: _done(0, [1, 2, 3, 0], [10, 20, 30, 0]),
                1: _done(1, [0, 0, 0, 0], [0, 0, 0, 0]), 3: _done(3, [5, 6, 0, 9], [50, 60, 0, 90], trace=False)}
    got, want = make(), make()
    inbound_trace(got)
    _reference(want)
    for i in got:
        assert list(got[i].trace.items()) == list(want[i].trace.items())
        for k in ("messages_in", "bytes_in"):
            assert list(got[i].trace.get(k, {})) == list(want[i].trace.get(k, {}))
    assert got[0].trace["messages_in"] == {"2": 4, "3": 5}


@pytest.mark.timeout(30)
def test_send_each_reaches_every_worker_and_names_the_one_not_connected():
    t = Transport()
    try:
        router, endpoint = t.router("tcp://127.0.0.1:0")
        dealers = [t.dealer(endpoint, b"w%d" % i) for i in range(3)]
        for d in dealers:  # each says hello so the router knows its identity
            d.send(b"x")
        deadline = time.monotonic() + 10
        seen: set[bytes] = set()
        while len(seen) < 3 and time.monotonic() < deadline:
            if router.poll(100):
                seen.add(router.recv_multipart()[0])
        assert seen == {b"w0", b"w1", b"w2"}
        frames = codec.encode(wire.Begin(4, 0, {}, {}).to_wire("job"))
        # b"gone" is not connected: its position comes back, the ones before it were sent to
        assert send_each(router, frames, [b"w0", b"gone", b"w1", b"w2"]) == 1
        assert send_each(router, frames, [b"w0", b"gone", b"w1", b"w2"], 2) is None
        for i, d in enumerate(dealers):
            want = 1  # w0 from the first call, w1 and w2 from the second
            got = []
            deadline = time.monotonic() + 10
            while len(got) < want and time.monotonic() < deadline:
                if d.poll(100):
                    got.append(codec.decode(d.recv_multipart()))
            assert [h["ss"] for h in got] == [4] * want
        # the master's drain (many=True) takes every waiting message in one pass
        for d in dealers:
            d.send_multipart(codec.encode(wire.Ready(0).to_wire("job")))
        got_ids: list[bytes] = []
        deadline = time.monotonic() + 10
        while len(got_ids) < 3 and time.monotonic() < deadline:
            if router.poll(100):
                got_ids += [ident for ident, _, _ in drain(router, True, wire.DropCounter("t"), many=True)]
        assert sorted(got_ids) == [b"w0", b"w1", b"w2"]
        assert zmq.ROUTER == router.socket_type
    finally:
        t.close()
