"""The superstep contract (docs/design.md, "The superstep contract"), one test or more per point, on every runtime."""

from __future__ import annotations

import math

import pytest

import mariana
from mariana.jobs.launch import run_job

pytestmark = pytest.mark.timeout(60)

PLACEMENTS = [("hash", 1), ("hash", 3), ("range", 2), ("range", 4)]


def run(runtime, name, *sets, workers=1, placement=None, **kw):
    return run_job(f"contract_jobs:{name}", sets=sets, workers=workers, runtime=runtime, placement=placement, **kw)


def test_messages_arrive_in_the_next_superstep_with_edge_values(runtime):
    r = run(runtime, "delivery", workers=2)
    assert r.values["a"] == []
    assert r.values["b"] == [[1, "a", 1]]
    assert r.values["c"] == [[2, "b", 11]]
    assert r.supersteps == 3 and "max_supersteps" in r.halt_reason


@pytest.mark.parametrize("placement,workers", PLACEMENTS)
def test_order_is_source_id_then_send_order_on_any_placement(runtime, placement, workers):
    r = run(runtime, "ordering", workers=workers, placement=placement)
    got = r.values["sink"]
    assert got == [[f"s{i:02d}", seq] for i in range(12) for seq in range(3)]


def test_halted_vertices_sleep_until_a_message_wakes_them(runtime):
    r = run(runtime, "halting", workers=2, placement="range")
    assert r.values["alarm"] == [0, 1, 2, 3, 4]
    assert r.values["sleeper"] == [0, 4]  # woken by the message sent at superstep 3
    assert r.values["idle"] == [0]
    assert r.supersteps == 5 and "halted" in r.halt_reason


@pytest.mark.parametrize("placement,workers", PLACEMENTS)
def test_each_combiner_reduces_to_one_message_per_tag(runtime, placement, workers):
    r = run(runtime, "combiners", workers=workers, placement=placement)
    got = {tag: payload for tag, payload in r.values["sink"]}
    assert got["sum"] == sum(range(1, 7))
    assert got["min"] == 4
    assert got["max"] == 36
    assert got["vec"] == [21.0, 21.0, 21.0]
    assert got["custom"] == [f"e{k}" for k in range(1, 7)]  # user-defined
    plain = [p for tag, p in r.values["sink"] if tag == "plain"]
    assert plain == [1, 2, 3, 4, 5, 6]  # no combiner: every message, in source order
    assert [t for t, _ in r.values["sink"]].count("sum") == 1


@pytest.mark.parametrize("placement,workers", PLACEMENTS)
def test_aggregates_are_visible_in_the_next_superstep(runtime, placement, workers):
    r = run(runtime, "aggregators", workers=workers, placement=placement)
    log = dict((s, seen) for s, seen in r.values["c1"])
    assert all(v is None for v in log[0].values())
    assert log[1] == {"sum": 10, "min": 1, "max": 4, "mean": 2.5, "count": 4,
                      "fsum": math.fsum([0.1, 0.2, 0.30000000000000004, 0.4]), "longest": "c4c4c4c4"}
    assert log[2]["sum"] == 50 and log[2]["min"] == 11 and log[2]["max"] == 14 and log[2]["mean"] == 12.5
    assert all(r.values[f"c{k}"] == r.values["c1"] for k in range(2, 5))  # everyone sees the same


def test_master_compute_broadcasts_and_halts(runtime):
    r = run(runtime, "master_job", workers=2)
    assert r.values["l0"] == [[0, "phase-0", None], [1, "phase-1", 3], [2, "phase-2", 3]]
    assert r.supersteps == 3 and r.halt_reason == "master says stop"


@pytest.mark.parametrize("limit", [0, 1, 5])
def test_max_supersteps_stops_a_job_that_never_halts(runtime, limit):
    r = run(runtime, "forever", f"max_supersteps={limit}", workers=2)
    assert r.supersteps == limit
    assert r.values["f0"] == [[s, 4] for s in range(limit)]


def test_run_limit_and_graph_limit_take_the_smaller(runtime):
    r = run(runtime, "forever", "max_supersteps=5", workers=2, max_supersteps=2)
    assert r.supersteps == 2


def test_a_raising_vertex_is_named_with_its_superstep(runtime):
    with pytest.raises(mariana.VertexError) as info:
        run(runtime, "faulty", "how=raise", workers=2)
    assert info.value.vertex_id == "boom" and info.value.superstep == 2
    assert "ZeroDivisionError: deliberate" in str(info.value)
    assert "ZeroDivisionError" in info.value.traceback_text


def test_a_send_to_an_unknown_vertex_is_an_error(runtime):
    with pytest.raises(mariana.VertexError, match="unknown vertex 'nobody'"):
        run(runtime, "faulty", "how=unknown", workers=2)


def test_metrics_line_per_superstep(runtime):
    lines = []
    r = run(runtime, "aggregators", workers=2, on_superstep=lines.append)
    assert [m["superstep"] for m in lines] == list(range(r.supersteps))
    assert lines[0]["sum"] == 10 and lines[0]["computed"] == 4
    assert sum(w["computed"] for w in lines[0]["workers"]) == 4


@pytest.mark.parametrize("placement,workers", [("hash", 2), ("range", 3)])
def test_batches_streamed_in_parts_deliver_as_one_batch(tmp_path, runtime, placement, workers):
    """On the cluster a worker sends a peer's messages in several parts (large arrays as soon as a
    vertex is done, and at ctx.flush()); receivers still deliver in (source id, send order), so
    every vertex sees exactly what it sees on one worker in one process."""
    from mariana.storage import RunDir

    reference = run("local", "streamed", workers=1).values
    rd = RunDir(str(tmp_path / "run"))
    r = run(runtime, "streamed", workers=workers, placement=placement, run_dir=rd)
    assert r.values == reference
    assert all(len(log[s]) == 8 for log in reference.values() for s in range(1, 5))  # 2 sources x 4 messages
    parts = [rec.get("parts_out", {}) for w in range(workers) for rec in rd.read_jsonl(f"trace/worker-{w}.jsonl")]
    if runtime != "local":  # the cluster wire path, in processes or threads
        assert any(n > 1 for p in parts for n in p.values())  # it did stream
    else:
        assert not any(parts)


@pytest.mark.parametrize("placement,workers", [("hash", 2), ("range", 3)])
def test_a_combiner_holds_back_only_a_queue_with_a_message_to_combine(tmp_path, runtime, placement, workers):
    """Tag 'c' has a (float) combiner: a peer's queue holding a 'c' message waits for the end of
    compute and is combined there whole, as on one process, so the sums are bit-identical to the
    local runtime's on the same placement; the messages queued before it still leave in parts."""
    from mariana.storage import RunDir

    sets = ("combined=true", "fanin=4")  # 4 senders a vertex: how they are grouped shows in the float sums
    reference = run("local", "streamed", *sets, workers=workers, placement=placement).values
    rd = RunDir(str(tmp_path / "run"))
    r = run(runtime, "streamed", *sets, workers=workers, placement=placement, run_dir=rd)
    assert r.values == reference
    assert any(sum(m[1] == "c" for m in log[s]) == 1 for log in reference.values() for s in range(1, 5))  # combined
    parts = [rec.get("parts_out", {}) for w in range(workers) for rec in rd.read_jsonl(f"trace/worker-{w}.jsonl")]
    if runtime != "local":
        assert any(n > 1 for p in parts for n in p.values())  # the other messages still streamed
