"""Shared fixtures: the runtime every contract test runs on, and helpers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

TESTS = Path(__file__).resolve().parent
# contract_jobs.py is importable as a job module ("contract_jobs:NAME") in this process and,
# through PYTHONPATH, in worker processes the cluster runtime starts.
sys.path.insert(0, str(TESTS / "engine"))
# tests import helpers from each other's modules (test_cluster, test_shm): importable in any order
sys.path[1:1] = [str(TESTS / "cluster"), str(TESTS / "comm")]

# Ctrl-C tests send SIGINT to the processes they start, which inherit this process's SIGINT: a
# suite started in the background (`nohup ... &`, a non-interactive shell's `&`) has it ignored,
# the mariana CLI rightly keeps an ignored SIGINT ignored, and those tests would wait out their
# timeouts. The suite takes SIGINT as Python does by default, so every child it starts does too.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

#: The real S3 server fixtures (SeaweedFS on loopback): s3_server, s3_url; the report tests' runs
#: and headless Chromium: dnn_run, cluster_run, browser.
pytest_plugins = ["s3_fixture", "report_fixtures"]

#: inproc: the cluster runtime's master and workers as threads of the test process over inproc://
#: (the wire path: codec, wire records, routing, heartbeats, without processes or network)
RUNTIMES = ["local", "cluster", "inproc"]


@pytest.fixture(params=RUNTIMES)
def runtime(request) -> str:
    """Each test that takes ``runtime`` runs once per runtime."""
    return request.param


#: ``form`` "int64": ``partitioner.csr.INT32_ENTRIES`` lowered to this, so that every non-empty
#: size takes int64 index arrays on the tests' small graphs
INT64_FROM = 1


@pytest.fixture(params=["int32", "int64"])
def form(request, monkeypatch) -> str:
    """The graph kernels (``partitioner.csr``, ``vertices.graph.kernels``, ``cdlp``,
    ``triangles``) with int32 index arrays, as on any graph below 2^31 entries, and with int64
    ones (``INT32_ENTRIES`` lowered to ``INT64_FROM``), as past it: each test that takes ``form``
    runs in both."""
    from mariana.partitioner import csr

    if request.param == "int64":
        monkeypatch.setattr(csr, "INT32_ENTRIES", INT64_FROM)
    return request.param


@pytest.fixture
def in_both_forms(monkeypatch) -> Callable[[Callable[[], Any]], tuple[Any, Any]]:
    """``run(call)``: ``call()`` with int32 index arrays (the limit as shipped), then with int64
    ones (the limit lowered to ``INT64_FROM``); both results, to be compared bit for bit."""
    from mariana.partitioner import csr

    shipped = csr.INT32_ENTRIES

    def run(call: Callable[[], Any]) -> tuple[Any, Any]:
        narrow = call()
        monkeypatch.setattr(csr, "INT32_ENTRIES", INT64_FROM)
        try:
            return narrow, call()
        finally:
            monkeypatch.setattr(csr, "INT32_ENTRIES", shipped)

    return run


@pytest.fixture
def mariana(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess]:
    """``mariana(*args)``: the command as a user runs it, ``python -m mariana ARGS`` in ``tmp_path``
    (stdin closed, output captured as text, at most 100 s); the completed process."""

    def run(*args: str, timeout: float = 100.0) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "mariana", *args], cwd=tmp_path, env=dict(os.environ),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)

    return run
