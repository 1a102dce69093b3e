"""A batch bigger than the receiver's header budgets travels in parts: a worker that sends its
peer more lists and maps in one superstep than one header may hold (``codec.Limits``) still has
every message delivered, in order, on the cluster runtime as on the local one."""

from __future__ import annotations

import pytest

import mariana
from mariana.messages import codec
from mariana.messages.message import Message
from mariana.messages.payload import containers
from mariana.messages.wire import PART_MESSAGES, part_size

pytestmark = pytest.mark.timeout(180)

SENT = 150_000  # x 32 lists each: 4.8M, over the receiver's 4M budget
PAYLOAD_LISTS = 30


class Sender(mariana.Vertex):
    def compute(self, ctx, messages):
        if ctx.superstep == 0:
            for i in range(SENT):
                ctx.send("receiver", [[] for _ in range(PAYLOAD_LISTS - 1)] + [[i]])
        ctx.vote_to_halt()


class Receiver(mariana.Vertex):
    def compute(self, ctx, messages):
        if messages:
            got = [m.payload[-1][0] for m in messages]
            self.value = [len(got), got == list(range(SENT))]
        ctx.vote_to_halt()


def _graph() -> mariana.Graph:
    g = mariana.Graph(name="big-batch", placement={"sender": 0, "receiver": 1})
    g.add_vertex(Sender("sender", None))
    g.add_vertex(Receiver("receiver", None))
    return g


def test_the_batch_is_over_one_headers_budget():
    one = [Message("sender", "receiver", None, [[] for _ in range(PAYLOAD_LISTS - 1)] + [[0]])] * SENT
    per = 1 + containers(one[0].payload)  # the message's list, the payload's list and its 30 lists
    assert per == PAYLOAD_LISTS + 2 and SENT * per > codec.DEFAULT_LIMITS.max_containers
    n = part_size(one)
    assert n * per <= codec.DEFAULT_LIMITS.max_containers // 2 and n < SENT


@pytest.mark.parametrize("runtime", ["local", "cluster"])
def test_a_batch_over_the_header_budget_arrives_whole_and_in_order(runtime):
    result = mariana.run(_graph(), workers=2, runtime=runtime)
    assert result.values["receiver"] == [SENT, True]


def test_plain_messages_go_in_parts_of_at_most_part_messages():
    assert part_size([Message("a", "b", None, 1.0)] * 10) == PART_MESSAGES
    assert part_size([Message("a", "b", None, {"x": [1, 2], "y": {"z": []}})] * 10) == PART_MESSAGES
    nested = {"x": [[1], [2], [3], [4]], "y": [{"z": []}, {"z": []}]}  # 11 lists and maps
    assert part_size([Message("a", "b", None, nested)] * 10) == codec.DEFAULT_LIMITS.max_containers // 2 // 12
