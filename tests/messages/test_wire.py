"""Typed wire records: every kind round-trips through the codec; malformed headers are refused
with ProtocolError naming the field, never a KeyError or TypeError."""

from __future__ import annotations

import numpy as np
import pytest

from mariana import ProtocolError
from mariana.messages import codec, wire
from mariana.messages.kinds import Kind

pytestmark = pytest.mark.timeout(30)

SAMPLES = [
    wire.Hello(version="0.1.0", data="tcp://127.0.0.1:5", pid=7, host="h", key=None),
    wire.Welcome(index=1, workers=2, job_name="dnn-dp", config={"lr": 0.1}, peers=["a", "b"],
                 heartbeat_interval=0.5, worker_timeout=10.0, restore=4, peer_keys=[None, None]),
    wire.Refuse("nope"), wire.Ready(gen=2, src=1),
    wire.Begin(3, 0, {"loss": 1.5}, {"phase": "train"}),
    wire.Batch(3, 1, [["a", "b", None, np.arange(4.0)]], gen=1),
    wire.Done(3, {"n": 1}, 2, 2, 5, [0, 5], 0.25, src=1, slowest=[["a", 0.1]], trace={"end": 1.0},
              stats={"bytes_out": [0, 40]}),
    wire.Finish(), wire.Result({"a": 1}, src=0, dropped={"header": 2}), wire.Bye(), wire.Abort("lost"),
    wire.Error("compute", "boom", src=1, vertex="v", ss=3, traceback="tb"),
    wire.Heartbeat(t=1.5, echo=1.25, src=0, state={"phase": "idle"}),
    wire.Checkpoint(10), wire.Checkpointed(10, src=1, parts=[{"file": "x"}]),
    wire.Rollback(10, 2, ["a", "b"], [None, None]),
]


def test_one_record_per_kind():
    assert set(wire.RECORDS) == set(Kind)
    assert {type(m) for m in SAMPLES} == set(wire.RECORDS.values())


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: m.KIND.name)
def test_every_record_round_trips_through_the_codec(msg):
    header = codec.decode(codec.encode(msg.to_wire("job-1")))
    assert header["kind"] == msg.KIND and header["job"] == "job-1"
    back = wire.decode(header)
    assert type(back) is type(msg)
    for name, value in vars(msg).items():
        got = getattr(back, name)
        if isinstance(value, list) and value and isinstance(value[0], list) and isinstance(value[0][-1], np.ndarray):
            assert np.array_equal(got[0][-1], value[0][-1])
        else:
            assert got == value, name


def test_optional_fields_take_their_defaults():
    msg = wire.decode({"kind": Kind.BATCH, "job": "j", "ss": 1, "src": 0, "msgs": []})
    assert msg == wire.Batch(1, 0, [], gen=0)


@pytest.mark.parametrize("header,detail", [
    ({"kind": Kind.BEGIN, "ss": 1, "gen": 0, "aggregates": {}}, "without 'broadcasts'"),
    ({"kind": Kind.BEGIN, "ss": "1", "gen": 0, "aggregates": {}, "broadcasts": {}}, "bad 'ss'"),
    ({"kind": Kind.BEGIN, "ss": True, "gen": 0, "aggregates": {}, "broadcasts": {}}, "bad 'ss'"),
    ({"kind": Kind.DONE, "ss": 3, "partials": {}, "active": 1}, "without 'computed'"),
    ({"kind": Kind.HEARTBEAT, "t": "now"}, "bad 't'"),
    ({"kind": Kind.HELLO, "version": "x", "data": 5, "pid": 1}, "bad 'data'"),
])
def test_malformed_headers_are_protocol_errors(header, detail):
    with pytest.raises(ProtocolError, match=detail) as info:
        wire.decode(header)
    assert info.value.kind == "header"


def test_an_unknown_kind_is_a_protocol_error():
    with pytest.raises(ProtocolError) as info:
        wire.decode({"kind": 99})
    assert info.value.kind == "kind"


def test_a_header_is_checked_by_the_types_of_its_fields_even_after_good_ones():
    """from_wire skips the per-field checks for a signature of field types seen to pass: a header
    that differs in one field's type (or lacks a required field) is still refused."""
    good = {"kind": Kind.BEGIN, "job": "j", "ss": 1, "gen": 0, "aggregates": {}, "broadcasts": {}}
    for _ in range(3):  # the second and third take the remembered signature
        assert wire.decode(good) == wire.Begin(1, 0, {}, {})
    assert wire.decode({**good, "sent_to": [[1], []]}).sent_to == [[1], []]
    for field, bad in [("ss", 1.5), ("ss", True), ("gen", None), ("aggregates", []), ("sent_to", "x")]:
        with pytest.raises(ProtocolError, match=f"bad '{field}'"):
            wire.decode({**good, field: bad})
    with pytest.raises(ProtocolError, match="without 'gen'"):
        wire.decode({k: v for k, v in good.items() if k != "gen"})
    assert wire.decode(good).ss == 1  # the refused ones left nothing behind


def test_optional_fields_absent_twice_take_their_defaults_both_times():
    header = {"kind": Kind.DONE, "job": "j", "ss": 3, "partials": {}, "active": 1, "computed": 1, "sent": 0,
              "out_messages": [0], "compute_s": 0.5}
    first, second = wire.decode(header), wire.decode(dict(header))
    assert first == second and first.slowest == [] and first.to is None
