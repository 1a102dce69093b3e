"""The live job page: `mariana run/master ... --ui` and `mariana ui RUN`, over real loopback HTTP."""

from __future__ import annotations

import json
import signal
import socket
from pathlib import Path

import pytest
from report_helpers import free_port, get, get_json, losses, mariana, page_url, reap, run_cli, wait_for

from mariana.errors import UsageError
from mariana.report.hooks import RunHooks
from mariana.report.live import LiveServer, parse_address


def test_serves_a_finished_run_read_only_on_loopback(dnn_run: Path):
    server = LiveServer(str(dnn_run))
    url = server.start()
    try:
        assert url.startswith("http://127.0.0.1:")
        state = get_json(url + "api/state")
        assert state["status"] == "finished" and state["job"] == "dnn-dp"
        assert state["superstep"] == json.loads((dnn_run / "metrics.jsonl").read_text().splitlines()[-1])["superstep"]
        assert [w["worker"] for w in state["workers"]] == [0] and state["workers"][0]["host"]
        xs, ys = losses(dnn_run)
        assert state["counters"]["loss"] == ys[-1]
        doc = get_json(url + "api/run")
        loss = next(t for t in doc["figures"]["fig-loss"]["data"] if t["name"] == "loss")
        assert loss["x"] == xs and loss["y"] == ys
        status, body, ctype = get(url)
        assert status == 200 and ctype.startswith("text/html") and b'data-api="/api/run"' in body
        status, body, ctype = get(url + "static/plotly.min.js")
        assert status == 200 and "javascript" in ctype and len(body) > 1_000_000
        assert get(url + "nothing")[0] == 404
        for method in ("POST", "PUT", "DELETE"):
            status, body, _ = get(url + "api/state", method=method)
            assert status == 405 and b"read-only" in body
    finally:
        server.close()


@pytest.mark.parametrize("text,expected", [("8470", ("127.0.0.1", 8470)), (":0", ("127.0.0.1", 0)),
                                           ("127.0.0.2:9000", ("127.0.0.2", 9000)), ("[::1]:80", ("::1", 80)),
                                           ("localhost:1", ("localhost", 1))])
def test_ui_addresses(text, expected):
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", ["", "host:", "a:b", "1.2.3.4:70000", "http://x:1"])
def test_bad_ui_address_is_one_line_exit_2(text, capsys, tmp_path):
    with pytest.raises(UsageError):
        parse_address(text)
    assert run_cli("run", "wcc", "--run-dir", str(tmp_path / "r"), "--ui", text) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mariana: error: --ui")


def test_a_page_that_cannot_bind_does_not_stop_the_job(tmp_path: Path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = mariana("run", "wcc", "--run-dir", str(tmp_path / "r"), "--ui", f"127.0.0.1:{port}")
        try:
            out, err = proc.communicate(timeout=60)
        finally:
            reap(proc)
    assert proc.returncode == 0, err
    assert "components" in out or out.strip()
    assert f"cannot serve the job page on 127.0.0.1:{port}" in err and "the job runs without it" in err
    assert json.loads((tmp_path / "r" / "job.json").read_text())["status"] == "finished"


def test_a_failing_hook_never_reaches_the_job(tmp_path: Path, caplog):
    hooks = RunHooks(str(tmp_path))
    calls = []

    def broken(line):
        calls.append(line["superstep"])
        raise RuntimeError("boom")

    hooks._callbacks.append(broken)
    for s in range(3):
        hooks({"superstep": s})
    assert calls == [0, 1, 2]
    assert sum("boom" in r.getMessage() for r in caplog.records) == 1  # said once


@pytest.mark.timeout(180)
def test_run_with_ui_shows_the_job_while_it_runs(tmp_path: Path):
    run = tmp_path / "live"
    proc = mariana("run", "dnn-dp", "--workers", "2", "--run-dir", str(run), "--set", "epochs=10000",
                   "--ui", "127.0.0.1:0")
    try:
        url = page_url(proc)
        assert url.startswith("http://127.0.0.1:")
        # the newest superstep comes from the job at once; counters from the run directory, read again each second
        first = wait_for(lambda: (s := get_json(url + "api/state"))["counters"].get("supersteps", 0) >= 20
                         and s, 120, "20 supersteps on the page")
        assert first["superstep"] >= first["counters"]["supersteps"] - 1
        assert first["status"] == "running" and first["phase"] == "running"
        assert [w["worker"] for w in first["workers"]] == [0, 1]
        assert all(w["host"] and w["pid"] for w in first["workers"])
        wait_for(lambda: get_json(url + "api/state")["superstep"] > first["superstep"], 60, "the superstep to advance")
        doc = get_json(url + "api/run")
        loss = next(t for t in doc["figures"]["fig-loss"]["data"] if t["name"] == "loss")
        xs, ys = losses(run)  # the file has at least what the page read
        n = len(loss["y"])
        assert n > 0 and loss["x"] == xs[:n] and loss["y"] == ys[:n]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    finally:
        reap(proc)
    with pytest.raises(OSError):  # the page went with the job
        get(url + "api/state", timeout=5)


@pytest.mark.timeout(180)
def test_master_with_ui_shows_workers_joining(tmp_path: Path):
    port = free_port()
    endpoint = f"tcp://127.0.0.1:{port}"
    master = mariana("-v", "master", "wcc", "--bind", endpoint, "--workers", "2", "--run-dir", str(tmp_path / "m"),
                     "--ui")
    workers = []
    try:
        url = page_url(master)
        state = wait_for(lambda: (s := get_json(url + "api/state"))["phase"] == "joining" and s["status"] == "running"
                         and s, 60, "the job to wait for its workers")
        assert state["workers_expected"] == 2 and state["status"] == "running"
        assert [(w["worker"], w["host"]) for w in state["workers"]] == [(0, None), (1, None)]  # slots, nobody yet
        workers.append(mariana("worker", "--master", endpoint))
        state = wait_for(lambda: (s := get_json(url + "api/state"))["workers"][0]["host"] and s, 60,
                         "a worker on the page")
        assert state["phase"] == "joining" and state["workers"][1]["host"] is None
        assert state["workers"][0]["host"] == socket.gethostname() and state["workers"][0]["pid"] == workers[0].pid
        workers.append(mariana("worker", "--master", endpoint))
        assert master.wait(timeout=90) == 0
        assert all(w.wait(timeout=30) == 0 for w in workers)
    finally:
        reap(master, *workers)


def test_mariana_ui_serves_a_run_until_interrupted(dnn_run: Path):
    proc = mariana("ui", str(dnn_run), "--bind", "127.0.0.1:0")
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        assert get_json(url + "api/state")["status"] == "finished"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130
    finally:
        reap(proc)


def test_mariana_ui_on_a_missing_run_is_exit_2(tmp_path: Path, capsys):
    assert run_cli("ui", str(tmp_path / "nope")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nope" in err[0]
