"""The worker's data-plane checks as a pure function: every reason a batch is dropped."""

from __future__ import annotations

import pytest

from mariana import ProtocolError
from mariana.messages.wire import DropCounter, check_batch
from mariana.messages.kinds import Kind

pytestmark = pytest.mark.timeout(30)

JOB = "j" * 32


def batch(**kw):
    h = {"kind": Kind.BATCH, "job": JOB, "ss": 5, "src": 1, "msgs": [["a", "b", None, 1.5], ["a", "c", "t", [1]]]}
    h.update(kw)
    return h


def test_a_valid_batch_for_this_or_the_next_superstep_is_accepted():
    for ss in (5, 6):
        msgs = check_batch(batch(ss=ss), 1, JOB, 5, {})
        assert [(m.src, m.dst, m.tag, m.payload) for m in msgs] == [("a", "b", None, 1.5), ("a", "c", "t", [1])]


@pytest.mark.parametrize("header,peer,inbound,kind", [
    (batch(), None, {}, "sender"),                        # unknown socket identity
    (batch(src=2), 1, {}, "sender"),                      # claims to be another peer
    (batch(kind=Kind.DONE), 1, {}, "kind"),
    (batch(job="other"), 1, {}, "job"),                   # unknown job id
    (batch(ss=4), 1, {}, "superstep"),                    # from the past
    (batch(ss=7), 1, {}, "superstep"),                    # from the future
    (batch(ss=True), 1, {}, "superstep"),
    (batch(), 1, {5: {1: []}}, "duplicate"),
    (batch(msgs="nope"), 1, {}, "batch"),
    (batch(msgs=[["a", "b", None]]), 1, {}, "batch"),
    (batch(msgs=[[1, "b", None, 0]]), 1, {}, "batch"),
])
def test_each_malformed_batch_is_refused_with_its_kind(header, peer, inbound, kind):
    with pytest.raises(ProtocolError) as info:
        check_batch(header, peer, JOB, 5, inbound)
    assert info.value.kind == kind


def test_drop_counter_logs_once_per_kind(caplog):
    d = DropCounter("worker 3")
    for _ in range(5):
        d.drop("header", "garbage")
    d.drop("job", "other job")
    assert d.counts == {"header": 5, "job": 1} and d.total == 6
    assert caplog.text.count("dropped a malformed message") == 2


def test_a_batch_in_parts_is_accepted_part_by_part_in_order():
    assert len(check_batch(batch(part=0, last=False), 1, JOB, 5, {}, parts={})) == 2
    assert len(check_batch(batch(part=1, last=False), 1, JOB, 5, {}, parts={5: {1: 1}})) == 2
    assert len(check_batch(batch(part=2, last=True), 1, JOB, 5, {}, parts={5: {1: 2}})) == 2


@pytest.mark.parametrize("header,parts", [
    (batch(part=1, last=False), {}),              # a part skipped
    (batch(part=0, last=True), {5: {1: 1}}),      # a part repeated
    (batch(part="0"), {}),
    (batch(part=True), {}),
    (batch(last=1), {}),
])
def test_parts_out_of_order_or_malformed_are_refused(header, parts):
    with pytest.raises(ProtocolError) as info:
        check_batch(header, 1, JOB, 5, {}, parts=parts)
    assert info.value.kind == "batch"
