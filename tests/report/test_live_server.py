"""The live job page's HTTP server on its own (issue 51 item 10), over real loopback HTTP: what it
answers with non-finite metrics, which Host headers it serves, and that idle connections are closed."""

from __future__ import annotations

import http.client
import json
import math
import socket
import time
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlsplit

import pytest
from report_helpers import get, get_json

from mariana.report.live import LiveServer, allowed_hosts


@pytest.fixture
def served(dnn_run: Path) -> Iterator[LiveServer]:
    server = LiveServer(str(dnn_run), idle_timeout_s=0.5)
    server.start()
    try:
        yield server
    finally:
        server.close()


def port_of(server: LiveServer) -> int:
    port = urlsplit(server.url).port
    assert port is not None
    return port


def strict_json(body: bytes) -> Any:
    """JSON as a browser's JSON.parse reads it: NaN, Infinity and -Infinity are errors."""
    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} in the JSON")
    return json.loads(body, parse_constant=refuse)


def request(server: LiveServer, path: str, host: str | None) -> tuple[int, bytes]:
    """GET ``path`` with the Host header ``host`` (None: no Host header at all)."""
    conn = http.client.HTTPConnection("127.0.0.1", port_of(server), timeout=10)
    try:
        conn.putrequest("GET", path, skip_host=True)
        if host is not None:
            conn.putheader("Host", host)
        conn.endheaders()
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


@pytest.mark.timeout(60)
def test_non_finite_metrics_are_null_and_strings_stay_as_they_are(served: LiveServer):
    served.on_superstep({"superstep": 7, "loss": float("-inf"), "grad": float("inf"), "acc": float("nan"),
                         "note": "NaN seen; Infinity next", "nested": {"x": [1.5, float("-inf"), "-Infinity"]},
                         "workers": [{"worker": 0, "computed": 3, "active": 1}]})
    for path in ("api/state", "api/run"):
        status, body, ctype = get(served.url + path)
        assert status == 200 and ctype == "application/json", (path, status, body[:200])
        strict_json(body)
    last = get_json(served.url + "api/state")["last_metrics"]
    assert last["superstep"] == 7 and last["loss"] is None and last["grad"] is None and last["acc"] is None
    assert last["note"] == "NaN seen; Infinity next"
    assert last["nested"] == {"x": [1.5, None, "-Infinity"]}
    assert math.isfinite(last["at"])


@pytest.mark.timeout(60)
def test_only_loopback_host_headers_are_answered(served: LiveServer):
    port = port_of(served)
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}", f"[::1]:{port}"):
        status, body = request(served, "/api/state", host)
        assert status == 200 and strict_json(body)["status"] == "finished", host
    # a DNS-rebinding page's requests carry its own name; a wrong port is another server's
    for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1:{port + 1}", "127.0.0.1", "", None,
                 f"localhost.evil.example:{port}"):
        for path in ("/api/state", "/api/run", "/"):
            status, body = request(served, path, host)
            assert status == 421, (host, path, status)
            assert len(body) < 200 and b"config" not in body and str(served.run).encode() not in body
    assert get(served.url + "api/state")[0] == 200  # urllib sends Host 127.0.0.1:PORT


def test_allowed_hosts():
    assert allowed_hosts("127.0.0.1", 8470) == {"127.0.0.1:8470", "localhost:8470", "[::1]:8470"}
    assert allowed_hosts("::1", 80) == {"127.0.0.1:80", "localhost:80", "[::1]:80", "127.0.0.1", "localhost", "[::1]"}
    assert "127.0.0.2:9" in allowed_hosts("127.0.0.2", 9)
    assert allowed_hosts("0.0.0.0", 8470) is None  # bound for other hosts: reached by any name (and warned)


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes ``sock`` within ``seconds`` (whatever it sent first is read)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            if sock.recv(65536) == b"":
                return True
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True
    return False


@pytest.mark.timeout(60)
def test_idle_connections_are_closed_and_the_server_goes_on(served: LiveServer):
    port = port_of(served)
    with socket.create_connection(("127.0.0.1", port)) as silent:  # connects and never sends a request
        assert closed_within(silent, 10)
    with socket.create_connection(("127.0.0.1", port)) as kept:  # one keep-alive request, then idle
        kept.sendall(f"GET /api/state HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        assert closed_within(kept, 10)
    with socket.create_connection(("127.0.0.1", port)) as partial:  # half a request line
        partial.sendall(b"GET /api/st")
        assert closed_within(partial, 10)
    assert get_json(served.url + "api/state")["status"] == "finished"


@pytest.mark.timeout(60)
def test_the_newest_line_sets_the_superstep_and_the_workers_table(served: LiveServer):
    read = get_json(served.url + "api/state")["superstep"]  # the run directory's newest
    served.on_superstep({"superstep": read + 5, "loss": 0.5,
                         "workers": [{"worker": 0, "computed": 3, "active": 1}]})
    state = get_json(served.url + "api/state")
    assert state["superstep"] == read + 5
    assert [(w["worker"], w["superstep"], w["computed"], w["active"]) for w in state["workers"]] == [(0, read + 5, 3, 1)]
    assert state["workers"][0]["host"]  # what the run directory says of the worker stays
    doc = get_json(served.url + "api/run")
    assert doc["live"]["superstep"] == read + 5 and doc["live"]["workers"] == state["workers"]


@pytest.mark.timeout(60)
def test_a_page_that_has_the_snapshot_gets_only_the_live_keys(served: LiveServer):
    doc = get_json(served.url + "api/run")
    assert doc["snapshot"]["status"] == "finished" and "fig-loss" in doc["figures"]
    status, body, _ = get(served.url + f"api/run?have={doc['seq']}")
    same = strict_json(body)
    assert status == 200 and same["same"] is True and same["seq"] == doc["seq"] and "snapshot" not in same
    assert same["live"]["superstep"] == doc["live"]["superstep"] and len(body) < 2000
    for other in (doc["seq"] + 1, "x"):  # another refresh, or nonsense: the whole document
        assert "snapshot" in get_json(served.url + f"api/run?have={other}")
