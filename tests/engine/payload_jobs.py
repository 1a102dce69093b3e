"""Jobs for the one payload rule (messages/payload.py), reachable as ``payload_jobs:NAME`` so
that LocalRuntime, the cluster runtime and the CLI build the same graph from the same name.

``bad``: vertex ``a`` (worker 0) sends to ``b`` (worker 1 of 2), or aggregates, one value the
wire cannot carry at superstep 1. ``shapes``: ``a`` sends values whose wire form differs from
the Python one (a tuple, numpy scalars, subclasses); ``b`` records what arrived and the types.
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np

from mariana import Graph, Vertex
from mariana.jobs import BuildContext, Job, Key

#: name -> a value the wire cannot carry
BAD: dict[str, Any] = {
    "intkey": {1: 1},
    "set": {1, 2},
    "object": object(),
    "complex": 1j,
    "bigint": 2**64,
    "objarray": np.array([None, 1], dtype=object),
    "nested": {"ok": [1, 2, {"deeper": {3}}]},
}


class BadSender(Vertex):
    def __init__(self, id: str, what: str, via: str) -> None:
        super().__init__(id, None)
        self.what, self.via = what, via

    def compute(self, ctx: Any, messages: list) -> None:
        if self.id == "a" and ctx.superstep == 1:
            value = BAD[self.what]
            if self.via == "aggregate":
                ctx.aggregate("hist", value)
            else:
                ctx.send("b", value)
        if ctx.superstep >= 2:
            ctx.vote_to_halt()


def build_bad(config: dict[str, Any], bctx: BuildContext) -> Graph:
    g = Graph("bad_payload")
    g.add_vertices(BadSender(v, config["what"], config["via"]) for v in "ab")
    g.add_aggregator("hist", lambda x, y: {**x, **y})
    g.placement = lambda vid: 0 if vid == "a" else 1 % max(1, bctx.workers)
    return g


class Label(str):
    """A str subclass (as an enum's member would be)."""


SHAPES: dict[str, Any] = {
    "tuple": (1, "x", (2.5, None)),
    "f32": np.float32(0.1),
    "i64": np.int64(7),
    "in_list": [np.float64(0.5), (1, 2)],
    "ordered": collections.OrderedDict([("k", (3,))]),
    "label": Label("lab"),
    "bytearray": bytearray(b"ab"),
    "plain": [1, 2.0, "s", b"b", None, True, {"d": [np.arange(3)]}],
}


class Shapes(Vertex):
    def compute(self, ctx: Any, messages: list) -> None:
        if self.id == "a" and ctx.superstep == 0:
            for name, value in SHAPES.items():
                ctx.send("b", value, tag=name)
            ctx.aggregate("seen", (1, np.float32(0.25)))
        for m in messages:
            self.value[m.tag] = [_describe(m.payload), m.payload]
        if ctx.superstep == 1 and self.id == "b":
            self.value["aggregated"] = [_describe(ctx.aggregated("seen")), ctx.aggregated("seen")]
        ctx.vote_to_halt()


def _describe(x: Any) -> Any:
    """The types inside ``x``, as plain data (what arrived, beyond ``==``)."""
    if isinstance(x, dict):
        return [type(x).__name__, {k: _describe(v) for k, v in x.items()}]
    if isinstance(x, (list, tuple)):
        return [type(x).__name__, [_describe(v) for v in x]]
    if isinstance(x, np.ndarray):
        return ["ndarray", x.dtype.str]
    return type(x).__name__


def build_shapes(config: dict[str, Any], bctx: BuildContext) -> Graph:
    g = Graph("payload_shapes")
    g.add_vertices(Shapes(v, {}) for v in "ab")
    g.add_aggregator("seen", lambda x, y: y)
    g.placement = lambda vid: 0 if vid == "a" else 1 % max(1, bctx.workers)
    return g


bad = Job(name="bad", description="a payload the wire cannot carry", build=build_bad,
          keys=(Key("what", "intkey", "str", f"one of {', '.join(BAD)}"),
                Key("via", "send", "str", "send or aggregate")))
shapes = Job(name="shapes", description="payloads whose wire form differs from the Python one", keys=(),
             build=build_shapes)
