"""Sweeps across hosts: ``mariana sweep --listen`` places each segment on a host that joined with
``mariana worker --sweep`` (real processes on 127.0.0.1). The ranking and every trial's metrics
equal the local sweep's; a host killed with ``kill -9`` mid-segment loses only that segment,
which runs again from its trial's newest checkpoint on the other host; bad flags are one line,
exit 2."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mariana.cli import main

ROOT = Path(__file__).resolve().parents[2]
TINY = ["dnn-dp", "--param", "lr=grid(0.05, 0.0005)", "--param", "batch_size=grid(128, 256)", "--set", "epochs=2",
        "--set", "model=['dense:32:relu','dense:10']", "--set", "optimizer=momentum", "--scheduler", "asha",
        "--grace", "1", "--reduction", "2", "--json"]


def _env() -> dict[str, str]:
    return {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _hosts(n: int, endpoint: str, tmp: Path, *extra: str) -> list[subprocess.Popen]:
    """``n`` worker hosts joining the sweep at ``endpoint`` (they wait for it to bind); stderr to files."""
    return [subprocess.Popen([sys.executable, "-m", "mariana", "worker", "--sweep", endpoint, "--connect-timeout", "60",
                              *extra], env=_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=open(tmp / f"host-{i}.log", "wb"), start_new_session=True) for i in range(n)]


def _reap(hosts: list[subprocess.Popen], timeout: float = 30) -> list[int | None]:
    """The hosts' exit codes once the sweep has ended them (killed if one is still there)."""
    deadline = time.monotonic() + timeout
    codes: list[int | None] = []
    for p in hosts:
        try:
            codes.append(p.wait(timeout=max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            codes.append(None)
    return codes


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux /proc)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (not gone, not a zombie waiting for its reaper)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _outcome(doc: dict) -> list[tuple]:
    return [(t["index"], t["status"], t["reports"], t["last"]) for t in doc["trials"]]


def _curves(sweep: Path, n: int) -> list[list[float]]:
    """Every trial's metric values as its metrics.jsonl has them (what a report draws)."""
    out = []
    for i in range(n):
        lines = [json.loads(x) for x in (sweep / f"trials/{i:04d}/metrics.jsonl").read_text().splitlines() if x]
        out.append([x["test_accuracy"] for x in lines if "test_accuracy" in x])
    return out


def test_two_hosts_give_the_local_ranking_and_metrics(tmp_path, capsys):
    assert main(["sweep", *TINY, "--sweep-dir", str(tmp_path / "local")]) == 0
    local = json.loads(capsys.readouterr().out)
    endpoint = f"tcp://127.0.0.1:{_free_port()}"
    hosts = _hosts(2, endpoint, tmp_path)
    try:
        code = main(["sweep", *TINY, "--parallel", "2", "--listen", endpoint, "--sweep-dir", str(tmp_path / "hosts")])
        out, err = capsys.readouterr()
        assert code == 0, err
    finally:
        codes = _reap(hosts)
    remote = json.loads(out)
    assert _outcome(remote) == _outcome(local)
    assert {t["status"] for t in remote["trials"]} == {"completed", "stopped"}
    assert _curves(tmp_path / "hosts", 4) == _curves(tmp_path / "local", 4)
    assert codes == [0, 0], [(tmp_path / f"host-{i}.log").read_text()[-2000:] for i in range(2)]
    logs = [(tmp_path / f"host-{i}.log").read_text() for i in range(2)]
    assert all("serving the master" in text for text in logs)  # both hosts took segments
    assert "joined the sweep (2 host(s))" in err
    job = json.loads((tmp_path / "hosts/trials/0000/job.json").read_text())
    assert job["runtime"] == "cluster" and job["status"] == "finished"


def test_bad_flags_are_one_line(tmp_path, capsys):
    def run(*argv: str) -> str:
        assert main(["sweep", *TINY, "--sweep-dir", str(tmp_path / "x"), *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        return err

    assert "is not loopback: a reachable sweep needs CURVE keys" in run("--listen", "tcp://10.11.12.13:7070")
    assert "give the address the worker hosts reach" in run("--listen", "tcp://0.0.0.0:7070")
    assert "--keys goes with --listen" in run("--keys", str(tmp_path))
    assert not (tmp_path / "x").exists()  # refused before anything is written
    assert main(["worker", "--sweep", "tcp://127.0.0.1:1", "--master", "tcp://127.0.0.1:2"]) == 2
    assert "not both" in capsys.readouterr().err


@pytest.mark.slow
def test_a_host_killed_mid_segment_loses_only_that_segment(tmp_path, capsys):
    """Host 0 is killed (-9, with the worker process it runs) while it trains a trial; the sweep
    drops it, runs that segment again on host 1 from the trial's newest checkpoint, and ends with
    the local ranking."""
    args = ["dnn-dp", "--param", "lr=grid(0.05, 0.01, 0.0005)", "--set", "epochs=4", "--set", "batch_size=32",
            "--set", "model=['dense:256:relu','dense:10']", "--set", "optimizer=momentum", "--scheduler", "asha",
            "--grace", "2", "--reduction", "2", "--json"]
    assert main(["sweep", *args, "--sweep-dir", str(tmp_path / "local")]) == 0
    local = json.loads(capsys.readouterr().out)
    endpoint = f"tcp://127.0.0.1:{_free_port()}"
    sweep = tmp_path / "hosts"
    proc = subprocess.Popen([sys.executable, "-m", "mariana", "sweep", *args, "--parallel", "2", "--listen", endpoint,
                             "--worker-timeout", "2", "--sweep-dir", str(sweep)], env=_env(), stdout=subprocess.PIPE,
                            stderr=open(tmp_path / "sweep.log", "wb"), start_new_session=True)
    hosts = _hosts(2, endpoint, tmp_path)
    try:
        victim = tmp_path / "host-0.log"
        deadline = time.monotonic() + 60
        while "ready:" not in victim.read_text():  # its worker process built the trial's graph: it trains now
            assert proc.poll() is None and hosts[0].poll() is None, (tmp_path / "sweep.log").read_text()
            assert time.monotonic() < deadline, "host 0 never got a segment"
            time.sleep(0.02)
        below = _descendants(hosts[0].pid)
        assert below, "host 0 runs its segment's worker in a child process"
        os.kill(hosts[0].pid, signal.SIGKILL)  # the host process only: what it started dies with it
        deadline = time.monotonic() + 10
        while any(_running(pid) for pid in below):
            assert time.monotonic() < deadline, f"left running after its host was killed: {below}"
            time.sleep(0.02)
        out, _ = proc.communicate(timeout=120)
        err = (tmp_path / "sweep.log").read_text()
        assert proc.returncode == 0, err
    finally:
        for p in (proc, hosts[0]):
            if p.poll() is None:
                p.kill()
                p.wait()
        codes = _reap(hosts[1:])
    remote = json.loads(out)
    assert _outcome(remote) == _outcome(local)
    assert _curves(sweep, 3) == _curves(tmp_path / "local", 3)
    events = [json.loads(x) for x in (sweep / "events.jsonl").read_text().splitlines()]
    lost = [e for e in events if e["event"] == "lost"]
    assert len(lost) == 1, lost
    assert sum(t["lost"] for t in remote["trials"]) == 1
    assert codes == [0]
    # Two watchers notice the death: the segment's master (its worker stopped answering for
    # --worker-timeout, or, once the dead worker's connection is gone, a send to it finds it
    # unreachable) and the sweep's queue (the host stopped beating for that long). Whichever is
    # first loses the segment; the queue's drop is printed only if the sweep was still running
    # when its host's silence passed the timeout (a rerun that ends at once at a rung can finish first).
    assert "segment lost" in err, err
    noticed_by_master = any(s in lost[0]["error"] for s in ("stopped answering", "is unreachable"))
    assert "dropped (1 host(s) left)" in err or noticed_by_master, (lost[0]["error"], err)


@pytest.mark.slow
def test_a_secure_sweep_admits_only_allow_listed_hosts(tmp_path, capsys):
    """``--keys DIR``: CURVE on the queue and on every segment's master, as ``mariana master --keys``;
    hosts join through DIR/master.json with their own keys, a key not on the allow-list exits 2."""
    keys = tmp_path / "keys"
    for argv in (["init", str(keys)], ["add", str(keys), "h0"], ["add", str(keys), "h1"], ["add", str(keys), "stranger"]):
        assert main(["keys", *argv]) == 0
    (keys / "allowed/stranger.key").unlink()
    capsys.readouterr()
    assert main(["sweep", *TINY, "--sweep-dir", str(tmp_path / "local")]) == 0
    local = json.loads(capsys.readouterr().out)
    sweep = tmp_path / "secure"
    proc = subprocess.Popen([sys.executable, "-m", "mariana", "sweep", *TINY, "--parallel", "2", "--listen",
                             "tcp://127.0.0.1:0", "--keys", str(keys), "--sweep-dir", str(sweep)], env=_env(),
                            stdout=subprocess.PIPE, stderr=open(tmp_path / "sweep.log", "wb"), start_new_session=True)
    hosts: list[subprocess.Popen] = []
    try:
        deadline = time.monotonic() + 60
        while not (keys / "master.json").exists() or not (keys / "master.json").read_text().endswith("}"):
            assert proc.poll() is None, (tmp_path / "sweep.log").read_text()
            assert time.monotonic() < deadline, "the sweep never wrote its master file"
            time.sleep(0.02)
        info = json.loads((keys / "master.json").read_text())
        assert info["sweep"] is True and len(info["server_key"]) == 40
        stranger = subprocess.run([sys.executable, "-m", "mariana", "worker", "--master-file", str(keys / "master.json"),
                                   "--key", str(keys / "stranger.key_secret")], env=_env(), capture_output=True,
                                  timeout=60)
        assert stranger.returncode == 2 and b"refused this worker's key" in stranger.stderr, stranger.stderr
        hosts = [subprocess.Popen([sys.executable, "-m", "mariana", "worker", "--master-file", str(keys / "master.json"),
                                   "--key", str(keys / f"h{i}.key_secret")], env=_env(), stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=open(tmp_path / f"host-{i}.log", "wb"),
                                  start_new_session=True) for i in range(2)]
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, (tmp_path / "sweep.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        codes = _reap(hosts)
    assert _outcome(json.loads(out)) == _outcome(local)
    assert codes == [0, 0]


@pytest.mark.slow
def test_a_host_that_cannot_serve_exits_2_and_its_segment_moves(tmp_path):
    """A host whose workers the segment masters refuse (``--job wcc`` for a dnn-dp sweep) says so
    and exits 2; its segment is lost, not failed, and runs on the host that joins after it."""
    endpoint = f"tcp://127.0.0.1:{_free_port()}"
    bad = _hosts(1, endpoint, tmp_path, "--job", "wcc")
    proc = subprocess.Popen([sys.executable, "-m", "mariana", "sweep", "dnn-dp", "--param", "lr=grid(0.05, 0.01)",
                             "--set", "epochs=1", "--set", "model=['dense:32:relu','dense:10']", "--listen", endpoint,
                             "--worker-timeout", "1.5", "--sweep-dir", str(tmp_path / "sw"), "--json"], env=_env(),
                            stdout=subprocess.PIPE, stderr=open(tmp_path / "sweep.log", "wb"), start_new_session=True)
    good: list[subprocess.Popen] = []
    try:
        assert bad[0].wait(timeout=60) == 2  # it took trial 0's first segment and could not serve it
        assert "this host cannot serve the sweep" in (tmp_path / "host-0.log").read_text()
        good = [subprocess.Popen([sys.executable, "-m", "mariana", "worker", "--sweep", endpoint], env=_env(),
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 start_new_session=True)]
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, (tmp_path / "sweep.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        codes = _reap(bad + good)
    doc = json.loads(out)
    assert [(t["index"], t["status"]) for t in doc["trials"]] == [(0, "completed"), (1, "completed")]
    assert [t["lost"] for t in sorted(doc["trials"], key=lambda t: t["index"])] == [1, 0]
    assert codes == [2, 0]
    assert "waiting for worker hosts" in (tmp_path / "sweep.log").read_text()


@pytest.mark.slow
def test_a_sweep_killed_and_resumed_keeps_its_hosts_and_ranking(tmp_path, capsys):
    """``kill -9`` of the sweep while its hosts serve segments; ``--resume`` with the same hosts (one
    of them still busy with a segment of the killed process) ends with the local ranking."""
    args = ["dnn-dp", "--param", "lr=loguniform(1e-3,1e-1)", "--param", "batch_size=choice(64,128)", "--param",
            "optimizer=choice(sgd,momentum)", "--set", "epochs=3", "--set", "model=['dense:64:relu','dense:10']",
            "--trials", "8", "--seed", "1", "--scheduler", "asha", "--json"]
    assert main(["sweep", *args, "--sweep-dir", str(tmp_path / "local")]) == 0
    local = json.loads(capsys.readouterr().out)
    endpoint = f"tcp://127.0.0.1:{_free_port()}"
    sweep = tmp_path / "hosts"
    hosts = _hosts(2, endpoint, tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "mariana", "sweep", *args, "--parallel", "2", "--listen", endpoint,
                             "--sweep-dir", str(sweep)], env=_env(), stdout=subprocess.DEVNULL,
                            stderr=open(tmp_path / "sweep.log", "wb"), start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        events = sweep / "events.jsonl"
        while not events.exists() or events.read_text().count('"event": "start"') < 4:  # segments on both hosts
            assert proc.poll() is None, (tmp_path / "sweep.log").read_text()
            assert time.monotonic() < deadline, "the sweep made no progress"
            time.sleep(0.02)
        segments = _descendants(proc.pid)  # forked from the sweep: they hold its bound socket until they exit
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        while any(_running(pid) for pid in segments):  # they die with it (PR_SET_PDEATHSIG), a moment later
            assert time.monotonic() < deadline + 30, f"segments outlived the killed sweep: {segments}"
            time.sleep(0.02)
        statuses = [json.loads((sweep / f"trials/{i:04d}/trial.json").read_text())["status"] for i in range(8)]
        assert "pending" in statuses, statuses  # killed mid-sweep
        assert all(p.poll() is None for p in hosts)  # the hosts wait for the sweep to come back
        code = main(["sweep", "--resume", str(sweep), "--listen", endpoint, "--json"])
        out, err = capsys.readouterr()
        assert code == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        codes = _reap(hosts)
    assert _outcome(json.loads(out)) == _outcome(local)
    assert codes == [0, 0]


@pytest.mark.slow
def test_trials_of_two_workers_on_two_hosts_each(tmp_path, capsys):
    """``--workers 2``: each segment's master takes two idle hosts (three joined: the second trial
    waits for two to be idle); the ranking and metrics equal the local sweep's with 2 workers."""
    args = ["dnn-dp", "--param", "lr=grid(0.05, 0.0005)", "--set", "epochs=2", "--set", "model=['dense:32:relu','dense:10']",
            "--set", "optimizer=momentum", "--scheduler", "asha", "--grace", "1", "--reduction", "2", "--workers", "2",
            "--json"]
    assert main(["sweep", *args, "--sweep-dir", str(tmp_path / "local")]) == 0
    local = json.loads(capsys.readouterr().out)
    endpoint = f"tcp://127.0.0.1:{_free_port()}"
    hosts = _hosts(3, endpoint, tmp_path)
    try:
        code = main(["sweep", *args, "--parallel", "2", "--listen", endpoint, "--sweep-dir", str(tmp_path / "hosts")])
        out, err = capsys.readouterr()
        assert code == 0, err
    finally:
        codes = _reap(hosts)
    assert _outcome(json.loads(out)) == _outcome(local)
    assert _curves(tmp_path / "hosts", 2) == _curves(tmp_path / "local", 2)
    assert json.loads((tmp_path / "hosts/trials/0000/job.json").read_text())["workers"] == 2
    assert codes == [0, 0, 0]


@pytest.mark.timeout(120)
def test_a_segment_master_admits_only_workers_with_its_token(tmp_path):
    """A segment's master (``run_segment`` with a remote spec, plaintext on loopback) announces a
    fresh token with its endpoint; a worker without it is refused (exit 2, one line), one given it
    in its environment serves the segment to the end."""
    import threading

    from mariana.jobs.registry import get_job, resolve_config
    from mariana.sweep.trial import run_segment

    config = resolve_config(get_job("dnn-dp"), None, ["epochs=1", "model=['dense:16:relu','dense:10']"])
    spec = {"job": "dnn-dp", "run": str(tmp_path / "trial"), "metric": "test_accuracy", "workers": 1, "config": config,
            "remote": {"bind": "tcp://127.0.0.1:0", "host_timeout": 10.0, "join_timeout": 60.0}}
    said: list[dict] = []
    out: dict = {}
    seg = threading.Thread(target=lambda: out.update(run_segment(spec, lambda n: True, said.append)), daemon=True)
    seg.start()
    deadline = time.monotonic() + 60
    while not said and time.monotonic() < deadline:
        seg.join(0.05)
    assert said and len(said[0]["token"]) == 32, (said, out)
    worker = [sys.executable, "-m", "mariana", "worker", "--master", said[0]["master"], "--connect-timeout", "30"]
    stranger = subprocess.run(worker, env=_env(), capture_output=True, timeout=60)
    assert stranger.returncode == 2 and b"job token" in stranger.stderr, stranger.stderr
    admitted = subprocess.run(worker, env={**_env(), "MARIANA_JOB_TOKEN": said[0]["token"]}, capture_output=True,
                              timeout=90)
    seg.join(60)
    assert admitted.returncode == 0, admitted.stderr
    assert out["status"] == "completed", out
