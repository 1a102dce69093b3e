"""Hand-started `mariana worker` processes: their BLAS thread pools, joining a master that is not
there, the address they advertise, and peers they cannot reach. Real processes on loopback."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from mariana.jobs.launch import run_job
from polling import until

pytestmark = pytest.mark.timeout(120)

TESTS = Path(__file__).resolve().parent.parent


def _env(**extra: str) -> dict[str, str]:
    """The environment of a hand-started worker: the tests' job modules importable, no thread
    variables (as in a user's shell), plus ``extra``."""
    from mariana.engine.threads import THREAD_VARS

    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS / "engine"), *sys.path])
    return {**env, **extra}


def _hand_started(workers: int, *args: str, env: dict[str, str] | None = None):
    """An ``on_start`` that starts ``workers`` `mariana worker` processes for the master in this
    process, and the list they are kept in (for the caller to reap)."""
    procs: list[subprocess.Popen] = []

    def on_start(master, _procs) -> None:
        for _ in range(workers):
            procs.append(subprocess.Popen([sys.executable, "-m", "mariana", "worker", "--master", master.endpoint, *args],
                                          env=env or _env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))

    return on_start, procs


def _reap(procs: list[subprocess.Popen], timeout: float = 30) -> list[str]:
    """Wait for every process (killing it after ``timeout`` s); their stderr."""
    errs = []
    for p in procs:
        try:
            _, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
        errs.append(err)
    return errs


def _master(job: str, workers: int, on_start, tmp_path: Path, sets=()):
    return run_job(job, sets=list(sets), workers=workers, runtime="cluster", spawn=False, bind="tcp://127.0.0.1:0",
                   on_start=on_start, run_dir=str(tmp_path / "run"), worker_timeout=30)


def test_hand_started_workers_share_the_hosts_cores_for_blas(tmp_path):
    """Two `mariana worker` on one host, no thread variable set: each pool gets cores // 2 threads,
    as `mariana run --workers 2` gives its workers (not every core each: 8.8x slower, other sums)."""
    pytest.importorskip("threadpoolctl")
    from mariana.engine.threads import blas_threads

    on_start, procs = _hand_started(2)
    try:
        res = _master("contract_jobs:blas", 2, on_start, tmp_path)
    finally:
        errs = _reap(procs)
    assert [p.returncode for p in procs] == [0, 0], errs
    assert len(res.values) == 2
    for vid, libs in res.values.items():
        assert libs, f"{vid}: no BLAS library loaded in the worker"
        assert {n for _, n in libs} == {blas_threads(2)}, (vid, libs)


def test_threads_flag_and_a_users_variable_win(tmp_path):
    """--threads N sizes every pool; a variable the user set is kept (as `mariana run` keeps it)."""
    pytest.importorskip("threadpoolctl")
    on_start, procs = _hand_started(1, "--threads", "1")
    try:
        res = _master("contract_jobs:blas", 1, on_start, tmp_path / "flag")
    finally:
        _reap(procs)
    assert all({n for _, n in libs} == {1} for libs in res.values.values()), res.values
    on_start, procs = _hand_started(2, env=_env(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1"))
    try:
        res = _master("contract_jobs:blas", 2, on_start, tmp_path / "env")
    finally:
        _reap(procs)
    assert all({n for _, n in libs} == {1} for libs in res.values.values()), res.values


@pytest.mark.slow
def test_hand_started_dnn_dp_equals_mariana_run_bit_for_bit(tmp_path):
    """dnn-dp on `mariana master` and two hand-started `mariana worker` ends with `mariana run
    --workers 2`'s parameters, bit for bit (a layer size where OpenBLAS threads its products)."""
    sets = [a for s in ("epochs=1", "batch_size=256", "model=['dense:512:relu','dense:10']") for a in ("--set", s)]
    mariana, env = [sys.executable, "-m", "mariana"], _env()
    ref = subprocess.run([*mariana, "run", "dnn-dp", "--workers", "2", "--run-dir", str(tmp_path / "ref"), *sets],
                         env=env, capture_output=True, text=True, timeout=300)
    assert ref.returncode == 0, ref.stderr
    master_file = tmp_path / "master.json"
    master = subprocess.Popen([*mariana, "master", "dnn-dp", "--workers", "2", "--run-dir", str(tmp_path / "hand"),
                               "--master-file", str(master_file), *sets],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    procs = [master]
    try:
        until("the master file", lambda: master_file.exists() and master_file.read_text().endswith("}")
              or master.poll() is not None)
        procs += [subprocess.Popen([*mariana, "worker", "--master-file", str(master_file)], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    finally:
        errs = _reap(procs, timeout=240)
    assert [p.returncode for p in procs] == [0, 0, 0], errs
    names = sorted(f.name for f in (tmp_path / "ref" / "params").glob("*.npy"))
    assert names
    for name in names:
        a, b = np.load(tmp_path / "ref" / "params" / name), np.load(tmp_path / "hand" / "params" / name)
        assert a.tobytes() == b.tobytes(), name


def _free_port() -> int:
    """A loopback TCP port nothing listens on (bound, then closed: connections to it are refused)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_worker_without_a_master_says_so_in_one_line_within_seconds():
    """Nothing listens at the master's address: one line naming it and how long it tried, exit 2,
    after the first-contact timeout (not --connect-timeout's 60 s)."""
    endpoint = f"tcp://127.0.0.1:{_free_port()}"
    t0 = time.monotonic()
    w = subprocess.run([sys.executable, "-m", "mariana", "worker", "--master", endpoint, "--first-contact-timeout", "1.5"],
                       env=_env(), capture_output=True, text=True, timeout=60)
    took = time.monotonic() - t0
    lines = w.stderr.splitlines()
    assert w.returncode == 2, w.stderr
    assert len(lines) == 1, w.stderr
    assert lines[0].startswith("mariana: error: no master at " + endpoint) and "1.5s" in lines[0], lines[0]
    assert 1.5 <= took < 15, took


def test_a_master_that_answers_late_is_waited_for_past_the_first_contact():
    """A master reached within the first contact (a socket that accepts and never answers) is
    governed by --connect-timeout: the worker waits it out, then says no master answered."""
    import zmq

    ctx = zmq.Context()
    silent = ctx.socket(zmq.ROUTER)  # accepts connections, answers nothing
    try:
        port = silent.bind_to_random_port("tcp://127.0.0.1")
        t0 = time.monotonic()
        w = subprocess.run([sys.executable, "-m", "mariana", "worker", "--master", f"tcp://127.0.0.1:{port}",
                            "--first-contact-timeout", "0.5", "--connect-timeout", "3"],
                           env=_env(), capture_output=True, text=True, timeout=60)
        took = time.monotonic() - t0
    finally:
        silent.close(linger=0)
        ctx.term()
    assert w.returncode == 2, w.stderr
    assert "no master answered" in w.stderr and "no master at" not in w.stderr, w.stderr
    assert took >= 3, took


GRAPH = TESTS / "engine" / "data" / "small.e"


def _route_source(address: str) -> str | None:
    """The kernel's source address for the route to ``address`` (``ip route get``), or None."""
    import shutil

    if shutil.which("ip") is None:
        return None
    out = subprocess.run(["ip", "route", "get", address], capture_output=True, text=True).stdout.split()
    return out[out.index("src") + 1] if "src" in out else None


def test_a_worker_binds_and_advertises_its_address_on_the_route_to_the_master():
    from mariana.cluster.joining import route_address

    assert route_address("tcp://127.0.0.1:7070") == "127.0.0.1"
    assert route_address("tcp://localhost:7070") == "127.0.0.1"
    assert route_address("tcp://[::1]:7070") == "::1"
    source = _route_source("127.0.0.2")  # a master bound on a second loopback address: the route's source
    if source is not None:
        assert route_address("tcp://127.0.0.2:7070") == source


class _Namespace:
    """A network namespace of this test's own: loopback up and one address, 10.77.0.2/24, on a veth
    pair inside it (nothing leaves it); removed on ``close``."""

    def __init__(self) -> None:
        import shutil

        if os.geteuid() != 0 or shutil.which("ip") is None:
            pytest.skip("needs root and iproute2 for a network namespace")
        self.name = f"mwj-{os.getpid()}-{time.monotonic_ns() % 10**6}"
        made = subprocess.run(["ip", "netns", "add", self.name], capture_output=True, text=True)
        if made.returncode != 0:
            pytest.skip(f"cannot make a network namespace: {made.stderr.strip()}")
        try:
            for cmd in (["link", "add", "va", "type", "veth", "peer", "name", "vb"],
                        ["addr", "add", "10.77.0.2/24", "dev", "va"], ["link", "set", "va", "up"],
                        ["link", "set", "vb", "up"], ["link", "set", "lo", "up"]):
                subprocess.run(["ip", "-n", self.name, *cmd], check=True, capture_output=True)
        except subprocess.CalledProcessError as exc:
            self.close()
            pytest.skip(f"cannot set up the namespace's link: {exc.stderr.decode().strip()}")

    def mariana(self, *args: str, **kw) -> subprocess.Popen:
        return subprocess.Popen(["ip", "netns", "exec", self.name, sys.executable, "-m", "mariana", *args],
                                env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)

    def close(self) -> None:
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)


def test_off_loopback_a_worker_binds_its_hosts_address_by_default(tmp_path):
    """In a namespace whose address is 10.77.0.2: a worker for a master at 10.77.0.9 binds
    10.77.0.2 (not 127.0.0.1), so it needs keys or --insecure; and a master there with two
    such workers runs a job, every worker having joined from 10.77.0.2."""
    ns = _Namespace()
    procs: list[subprocess.Popen] = []
    try:
        plain = ns.mariana("worker", "--master", "tcp://10.77.0.9:7070", "--first-contact-timeout", "0.5")
        procs.append(plain)
        _, err = plain.communicate(timeout=60)
        assert plain.returncode == 2 and err.startswith("mariana: error: --host 10.77.0.2 is not loopback"), err
        master_file = tmp_path / "master.json"
        out = tmp_path / "wcc.tsv"
        master = ns.mariana("-v", "master", "wcc", "--bind", "tcp://10.77.0.2:0", "--insecure", "--workers", "2",
                            "--set", f"graph={GRAPH}", "--set", f"output={out}", "--run-dir", str(tmp_path / "run"),
                            "--master-file", str(master_file))
        procs.append(master)
        until("the master file", lambda: master_file.exists() and master_file.read_text().endswith("}")
              or master.poll() is not None)
        procs += [ns.mariana("worker", "--master-file", str(master_file), "--insecure") for _ in range(2)]
        errs = _reap(procs[1:], timeout=90)
        assert [p.returncode for p in procs[1:]] == [0, 0, 0], errs
        assert errs[0].count("joined from tcp://10.77.0.2:") == 2, errs[0]
        assert out.read_text().count("\n") == 59
    finally:
        _reap(procs, timeout=5)
        ns.close()


def test_a_peer_that_cannot_be_reached_fails_the_join_in_one_line_naming_both_ends(tmp_path):
    """A worker that tells its peers an address nothing listens on (bound on 127.0.0.1, advertised
    on 127.0.0.3): its peer cannot connect, and the master fails the job within the connect
    timeout with one line naming both workers' addresses (before, the master waited forever)."""
    master_file = tmp_path / "master.json"
    mariana = [sys.executable, "-m", "mariana"]
    master = subprocess.Popen([*mariana, "master", "wcc", "--workers", "2", "--set", f"graph={GRAPH}",
                               "--run-dir", str(tmp_path / "run"), "--master-file", str(master_file)],
                              env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs = [master]
    try:
        until("the master file", lambda: master_file.exists() and master_file.read_text().endswith("}")
              or master.poll() is not None)
        t0 = time.monotonic()
        worker = [*mariana, "worker", "--master-file", str(master_file), "--connect-timeout", "3"]
        procs.append(subprocess.Popen(worker, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        procs.append(subprocess.Popen([*worker, "--advertise", "127.0.0.3"], env=_env(), stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
        master.wait(timeout=60)
        took = time.monotonic() - t0
    finally:
        errs = _reap(procs, timeout=30)
    assert master.returncode == 1, errs[0]
    last = errs[0].strip().splitlines()[-1]
    assert re.fullmatch(r"mariana: error: worker (\d) \(.*\) cannot run job wcc: worker \1 at tcp://127\.0\.0\.1:\d+ "
                        r"cannot reach worker \d's data socket at tcp://127\.0\.0\.3:\d+ within 3s: .*", last), last
    assert 3 <= took < 30, took
    assert all(p.returncode != 0 for p in procs[1:]) and any(p.returncode == 2 for p in procs[1:]), errs
