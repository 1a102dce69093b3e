"""Plaintext sockets: a worker's data socket off loopback needs keys or --insecure (as the
master's does), and on a plaintext loopback master of a local launch a HELLO from any other local
process is refused: only the workers it started carry the job's token."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
import zmq

from mariana import __version__
from mariana.cli import main
from mariana.cluster.worker import TOKEN_VAR
from mariana.jobs.launch import run_job
from mariana.messages import wire
from mariana.messages.kinds import Kind
from mariana.vertices.graph_blocks import LOAD_STEPS
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
