"""LocalRuntime specifics: zero-copy payloads, per-worker bookkeeping, the Python API."""

from __future__ import annotations

import numpy as np
import pytest

import mariana
from mariana import Graph, Vertex

pytestmark = pytest.mark.timeout(60)


class Holder(Vertex):
    def compute(self, ctx, messages):
        if ctx.superstep == 0 and self.id == "src":
            ctx.send("dst", {"weights": self.value, "nested": [self.value]})
        for m in messages:
            self.value = m.payload
        ctx.vote_to_halt()


def test_arrays_in_messages_are_passed_without_copying():
    big = np.arange(4_000_000, dtype=np.float32)
    g = Graph()
    g.add_vertices([Holder("src", big), Holder("dst", None)])
    r = mariana.run(g, workers=2, placement={"src": 0, "dst": 1})
    assert r.values["dst"]["weights"] is big
    assert r.values["dst"]["nested"][0] is big


def test_placement_bookkeeping_per_worker():
    g = Graph()
    g.add_vertices(Holder(f"v{i}", 0) for i in range(10))
    r = mariana.run(g, workers=3, placement="range")
    assert r.placement.counts() == [4, 3, 3]
    assert [w["computed"] for w in r.metrics[0]["workers"]] == [4, 3, 3]


def test_explicit_and_callable_placements():
    g = Graph()
    g.add_vertices(Holder(f"v{i}", 0) for i in range(4))
    p = g.place(2, {"v0": 1, "v1": 1, "v2": 0, "v3": 0})
    assert p.vertices_of(1) == ["v0", "v1"]
    p = g.place(2, lambda vid: int(vid[1:]) % 2)
    assert p.vertices_of(0) == ["v0", "v2"]
    with pytest.raises(ValueError, match="outside"):
        g.place(2, lambda vid: 5)


def test_group_placement_puts_replica_and_shard_together():
    from mariana import GroupStrategy

    ids = [f"{kind}{r}" for kind in ("replica", "shard") for r in range(4)]
    strat = GroupStrategy(lambda vid: (int(vid[-1]), 0), parts=1)
    p = strat.place(ids, 4)
    assert all(p.worker_of(f"replica{r}") == p.worker_of(f"shard{r}") == r for r in range(4))
    table = p.explain()
    assert "worker" in table and "replica0" in table


def test_hash_placement_is_stable_across_processes():
    from mariana import HashStrategy

    # crc32, not Python's salted hash(): these values never change
    assert HashStrategy().assign(["a", "b", "vertex-17"], 4) == [3, 1, 3]


def test_empty_graph_runs_zero_supersteps():
    r = mariana.run(Graph(), workers=2)
    assert r.values == {} and r.supersteps <= 1


def test_duplicate_vertex_and_reserved_aggregator_names_are_rejected():
    g = Graph()
    g.add_vertex(Holder("x"))
    with pytest.raises(ValueError, match="duplicate"):
        g.add_vertex(Holder("x"))
    with pytest.raises(ValueError, match="reserved"):
        g.add_aggregator("superstep", "sum")
