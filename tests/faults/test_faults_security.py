"""Plaintext sockets: a worker's data socket off loopback needs keys or --insecure (as the
master's does), and on a plaintext loopback master of a local launch a HELLO from any other local
process is refused: only the workers it started carry the job's token."""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import pytest
import zmq

from mariana import __version__
from mariana.cli import main
from mariana.cluster.worker import TOKEN_VAR
from mariana.jobs.launch import run_job
from mariana.messages import wire
from mariana.messages.kinds import Kind
from mariana.partitioner.fragment import LOAD_STEPS
from mariana.comm import recv, send

pytestmark = [pytest.mark.faults, pytest.mark.timeout(120)]


def test_a_plaintext_worker_off_loopback_is_refused(capsys):
    assert main(["worker", "--master", "tcp://127.0.0.1:9", "--host", "0.0.0.0", "--connect-timeout", "1"]) == 2
    err = capsys.readouterr().err
    assert "--host 0.0.0.0 is not loopback" in err and "--insecure" in err


def test_an_insecure_worker_off_loopback_warns(caplog):
    assert main(["worker", "--master", "tcp://127.0.0.1:9", "--host", "0.0.0.0", "--insecure",
                 "--connect-timeout", "0.5"]) == 2  # no master answers: exit 2, after the warning
    assert "INSECURE: this worker's data socket" in caplog.text


def test_a_local_process_cannot_take_a_worker_slot(tmp_path):
    assert TOKEN_VAR not in os.environ
    replies: list[Any] = []
    ctx = zmq.Context.instance()
    rogue = ctx.socket(zmq.DEALER)
    rogue.setsockopt(zmq.LINGER, 0)
    rogue.setsockopt(zmq.IDENTITY, b"w-rogue")

    def intrude(master: Any, procs: list[Any]) -> None:
        """Right after the master binds, before its workers join: one well-formed HELLO."""
        rogue.connect(master.endpoint)
        send(rogue, wire.Hello(version=__version__, data="tcp://127.0.0.1:9", pid=os.getpid(), host="rogue").to_wire())

    try:
        result = run_job("pagerank", sets=["iterations=5", "tol=0"], workers=2, runtime="cluster", on_start=intrude)
        deadline = time.monotonic() + 10  # the answer waits in the socket's queue
        while time.monotonic() < deadline and not replies:
            if rogue.poll(100):
                replies.append(recv(rogue, router=False)[1])
    finally:
        rogue.close()
    assert result.supersteps == LOAD_STEPS + 6  # loading, then 5 updates and the last superstep
    assert replies and replies[0]["kind"] == Kind.REFUSE and "job token" in replies[0]["reason"]


def test_a_header_of_sixty_million_empty_lists_is_dropped_on_both_ports():
    """Issue 51: one 60 MB header of 60 million empty lists (4 GB of objects once built), sent by
    any local process to the master's port and to a worker's data port mid-run, is refused
    before it is built and counted; the job goes on to the right result."""
    n = 60_000_000
    bomb = (b"\x83\xa1v\x01\xa4kind" + bytes([int(Kind.BATCH)]) + b"\xa4msgs\xdd" + n.to_bytes(4, "big")
            + b"\x90" * n)
    state: dict[str, Any] = {}

    def bomb_at_3(line: dict[str, Any]) -> None:
        if line["superstep"] != LOAD_STEPS + 2:
            return
        master = state["master"]
        with zmq.Context() as ctx:
            for endpoint in (master.endpoint, master.by_index[1].data):
                s = ctx.socket(zmq.DEALER)
                s.linger = 5000  # deliver it before closing
                s.connect(endpoint)
                s.send(bomb, copy=False)
                s.close()

    sets = ["iterations=12", "tol=0"]
    reference = run_job("pagerank", sets=sets, workers=2, runtime="local")
    t0 = time.monotonic()
    res = run_job("pagerank", sets=sets, workers=2, runtime="cluster", on_superstep=bomb_at_3,
                  on_start=lambda m, p: state.update(master=m))
    assert res.supersteps == reference.supersteps and res.values.keys() == reference.values.keys()
    for key, block in reference.values.items():
        assert res.values[key]["ids"] == block["ids"]
        assert np.array_equal(res.values[key]["values"], block["values"])  # bit-identical (contract 9)
    assert state["master"].dropped.get("structure") == 2, state["master"].dropped  # one on each port
    assert time.monotonic() - t0 < 60
