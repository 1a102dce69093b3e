"""One payload rule on every runtime (messages/payload.py, docs/vertex-api.md): what the wire
cannot carry fails at the sender's ``ctx.send``/``ctx.aggregate`` with one line naming the
vertex, the superstep and the type, the same on LocalRuntime and the cluster (exit 1 from the
CLI), never a hang; what it can carry arrives in the same form on both."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mariana.errors import VertexError
from mariana.jobs.launch import run_job
from mariana.messages.payload import MAX_DEPTH, PayloadError, wire_value

pytestmark = pytest.mark.timeout(120)

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))  # payload_jobs: also for the cluster's forked workers

CASES = {  # (what, via) -> the error's detail, after "vertex 'a' failed at superstep 1: PayloadError: "
    ("intkey", "send"): "ctx.send to 'b': dict key 1 of type int: the wire carries str keys only",
    ("set", "send"): "ctx.send to 'b': set is not a payload the wire carries",
    ("object", "send"): "ctx.send to 'b': object is not a payload the wire carries",
    ("complex", "send"): "ctx.send to 'b': complex is not a payload the wire carries",
    ("bigint", "send"): "ctx.send to 'b': int 18446744073709551616 is outside the wire's range",
    ("objarray", "send"): "ctx.send to 'b': array of dtype '|O' (object)",
    ("nested", "send"): "ctx.send to 'b': set is not a payload",
    ("intkey", "aggregate"): "ctx.aggregate('hist'): dict key 1 of type int: the wire carries str keys only",
    ("set", "aggregate"): "ctx.aggregate('hist'): set is not a payload the wire carries",
}


def _failure(runtime: str, what: str, via: str) -> str:
    with pytest.raises(VertexError) as info:
        run_job("payload_jobs:bad", sets=[f"what={what}", f"via={via}"], workers=2, runtime=runtime)
    err = info.value
    assert (err.vertex_id, err.superstep) == ("a", 1)
    return str(err)


@pytest.mark.parametrize("what, via", list(CASES))
def test_a_payload_the_wire_cannot_carry_fails_at_the_call_on_both_runtimes(what: str, via: str) -> None:
    local = _failure("local", what, via)
    cluster = _failure("cluster", what, via)
    head = "vertex 'a' failed at superstep 1: PayloadError: "
    assert local.startswith(head + CASES[what, via]), local
    assert cluster.startswith(local), (cluster, local)  # the cluster adds "(on worker ...)"
    if what == "nested":
        assert local.endswith("at ['ok'][2]['deeper']")


def test_the_cli_exits_1_with_that_line() -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), *sys.path]))
    proc = subprocess.run([sys.executable, "-m", "mariana", "run", "payload_jobs:bad", "--set", "what=intkey",
                           "--set", "via=aggregate", "--workers", "2", "--runtime", "cluster"],
                          env=env, capture_output=True, text=True, timeout=90)
    assert proc.returncode == 1, proc.stderr[-2000:]
    first = proc.stderr.strip().splitlines()[0] if "mariana: error" in proc.stderr else proc.stderr
    line = next(x for x in proc.stderr.splitlines() if x.startswith("mariana: error:"))
    assert "vertex 'a' failed at superstep 1: PayloadError: ctx.aggregate('hist'): dict key 1 of type int" in line
    assert "dropped a malformed message" not in proc.stderr, first


def test_payloads_arrive_in_the_same_form_on_both_runtimes() -> None:
    """Tuples arrive as lists, numpy scalars as Python scalars, subclasses as their base type:
    from another worker (the wire) and from the same one (no wire) alike."""
    results = {(rt, w): run_job("payload_jobs:shapes", workers=w, runtime=rt).values["b"]
               for rt, w in [("local", 1), ("local", 2), ("cluster", 2)]}
    got = results["local", 1]
    assert got["tuple"] == [["list", ["int", "str", ["list", ["float", "NoneType"]]]], [1, "x", [2.5, None]]]
    assert got["f32"] == ["float", float(np.float32(0.1))]
    assert got["i64"] == ["int", 7]
    assert got["in_list"][0] == ["list", ["float", ["list", ["int", "int"]]]]
    assert got["ordered"] == [["dict", {"k": ["list", ["int"]]}], {"k": [3]}]
    assert got["label"] == ["str", "lab"] and got["bytearray"] == ["bytes", b"ab"]
    assert got["aggregated"] == [["list", ["int", "float"]], [1, 0.25]]
    for key, other in results.items():
        assert other.keys() == got.keys(), key
        for name in got:
            assert other[name][0] == got[name][0], (key, name)
            if name != "plain":
                assert other[name][1] == got[name][1], (key, name)
        np.testing.assert_array_equal(other["plain"][1][6]["d"][0], np.arange(3))


# -- the rule itself ------------------------------------------------------------------------------
def test_a_payload_in_wire_form_is_returned_as_it_is() -> None:
    for x in [1.5, None, b"x", "s", 2**63, -(2**63), [1, 2, 3], [0.5, None], {"a": [1, "b"]}, np.arange(4),
              {"w": np.ones((2, 2), ">f8")}]:
        assert wire_value(x) is x


def test_what_changes_on_the_wire_is_converted() -> None:
    assert wire_value((1, (2,))) == [1, [2]] and type(wire_value((1,))) is list
    assert type(wire_value(np.float32(1.5))) is float and type(wire_value(np.bool_(True))) is bool
    out = wire_value([1, np.int32(2), (3,)])
    assert out == [1, 2, [3]] and type(out[1]) is int


@pytest.mark.parametrize("bad, message", [
    ({1: 1}, "dict key 1 of type int"), ({(1, 2): 1}, "dict key (1, 2) of type tuple"), ({1, 2}, "set is not"),
    (frozenset(), "frozenset is not"), (1j, "complex is not"), (-(2**63) - 1, "outside the wire's range"),
    ("\ud800", "not valid UTF-8"), (np.array(["a"]), "array of dtype '<U1'"),
    (np.datetime64("2020-01-01"), "numpy.datetime64"), (np.complex128(1j), "numpy.complex128 has no wire form"),
    ([[1, {2}]], "set is not"),
])
def test_what_the_wire_cannot_carry_is_refused(bad: object, message: str) -> None:
    with pytest.raises(PayloadError, match=message.replace("(", r"\(").replace(")", r"\)")):
        wire_value(bad)


def test_nesting_beyond_max_depth_is_refused() -> None:
    ok: list = []
    for _ in range(MAX_DEPTH - 1):
        ok = [ok]
    wire_value(ok)
    with pytest.raises(PayloadError, match="nests deeper"):
        wire_value([ok])
