"""`--from-env slurm|torchrun`: rank, world size and master address from a cluster manager's
variables. The environment is faked; the processes and sockets (loopback) are real."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from mariana.errors import UsageError
from mariana.cli import main
from mariana.cli.envlaunch import DEFAULT_PORT, first_host, from_env

#: Variables of a cluster manager that the machine running the tests might have set.
MANAGER_VARS = ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_JOB_NODELIST", "SLURM_NODELIST",
                "SLURM_JOB_ID", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "JOB_COMPLETION_INDEX")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in MANAGER_VARS}
    env.update(extra)
    return env


def start(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "mariana", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)


def finish(procs: list[subprocess.Popen], timeout: float = 90) -> list[tuple[int, str, str]]:
    """Wait for every process (killing what is left on any failure) and return (rc, out, err) of each."""
    out = []
    try:
        for p in procs:
            o, e = p.communicate(timeout=timeout)
            out.append((p.returncode, o, e))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    return out


@pytest.mark.parametrize("nodelist,host", [
    ("node[003-005,9]", "node003"), ("gpu-a,gpu-b", "gpu-a"), ("n1", "n1"), ("rack[1-2]-n[01-04]", "rack1-n01"),
    ("nid0[0001-0003],login1", "nid00001"), ("c[7]", "c7"), ("a[2,4-6]", "a2"), (" host.example.org ", "host.example.org"),
])
def test_first_host_of_a_slurm_hostlist(nodelist, host):
    assert first_host(nodelist) == host


@pytest.mark.parametrize("nodelist", ["", "node[", "node[]", "[1-2", "a b"])
def test_unreadable_hostlist(nodelist):
    with pytest.raises(UsageError, match="SLURM_JOB_NODELIST"):
        first_host(nodelist)


def test_slurm_variables():
    env = {"SLURM_PROCID": "2", "SLURM_NTASKS": "4", "SLURM_JOB_NODELIST": "node[07-10]", "SLURM_JOB_ID": "123456"}
    e = from_env("slurm", env)
    assert (e.rank, e.world_size, e.master_addr) == (2, 4, "node07")
    assert e.master_port == 15000 + 123456 % 20000  # per job, so two jobs on one first node do not collide
    assert e.master_endpoint == f"tcp://node07:{e.master_port}"
    assert e.master_bind() == f"tcp://0.0.0.0:{e.master_port}"  # a host name cannot be bound to
    e = from_env("slurm", {**env, "MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "7070"})
    assert (e.master_addr, e.master_port) == ("10.1.2.3", 7070)
    e = from_env("slurm", {"SLURM_PROCID": "0", "SLURM_NPROCS": "3", "SLURM_NODELIST": "a,b"})
    assert (e.world_size, e.master_addr, e.master_port) == (3, "a", DEFAULT_PORT)


def test_tasks_on_this_host_size_the_blas_threads():
    """Each task's workers share their host's cores with its other tasks (DESIGN: BLAS threads are
    part of the placement), so the launcher says how many tasks run here; 1 where it does not."""
    base = {"SLURM_PROCID": "0", "SLURM_NTASKS": "7", "SLURM_JOB_NODELIST": "n[1-4]"}
    assert from_env("slurm", base).local_size == 1
    assert from_env("slurm", {**base, "SLURM_TASKS_PER_NODE": "2"}).local_size == 2
    assert from_env("slurm", {**base, "SLURM_TASKS_PER_NODE": "2(x3),1", "SLURM_NODEID": "2"}).local_size == 2
    assert from_env("slurm", {**base, "SLURM_TASKS_PER_NODE": "2(x3),1", "SLURM_NODEID": "3"}).local_size == 1
    assert from_env("slurm", {**base, "SLURM_TASKS_PER_NODE": "2(x3),1", "SLURM_NTASKS_PER_NODE": "4"}).local_size == 4
    assert from_env("slurm", {**base, "SLURM_TASKS_PER_NODE": "two"}).local_size == 1  # unreadable: as for one
    tr = {"RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "127.0.0.1"}
    assert from_env("torchrun", tr).local_size == 1
    assert from_env("torchrun", {**tr, "LOCAL_WORLD_SIZE": "2"}).local_size == 2


def test_torchrun_and_kubernetes_indexed_job_variables():
    env = {"RANK": "1", "WORLD_SIZE": "3", "MASTER_ADDR": "trainer-0.trainer", "MASTER_PORT": "29400"}
    e = from_env("torchrun", env)
    assert (e.rank, e.world_size, e.master_endpoint) == (1, 3, "tcp://trainer-0.trainer:29400")
    k8s = {"JOB_COMPLETION_INDEX": "2", "WORLD_SIZE": "3", "MASTER_ADDR": "trainer-0.trainer"}
    e = from_env("torchrun", k8s)
    assert (e.rank, e.master_port) == (2, DEFAULT_PORT)
    assert from_env("torchrun", {**k8s, "RANK": "0"}).rank == 0  # RANK wins where both are set
    e = from_env("torchrun", {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "localhost", "MASTER_PORT": "1234"})
    assert e.master_bind() == "tcp://127.0.0.1:1234" and e.local_address() == "127.0.0.1"
    e = from_env("torchrun", {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "::1", "MASTER_PORT": "1234"})
    assert e.master_bind() == "tcp://[::1]:1234" and e.master_endpoint == "tcp://[::1]:1234"


@pytest.mark.parametrize("source,env,needle", [
    ("slurm", {}, "SLURM_PROCID is not set"),
    ("slurm", {"SLURM_PROCID": "0"}, "SLURM_NTASKS is not set"),
    ("slurm", {"SLURM_PROCID": "0", "SLURM_NTASKS": "2"}, "SLURM_JOB_NODELIST is not set"),
    ("slurm", {"SLURM_PROCID": "x", "SLURM_NTASKS": "2"}, "SLURM_PROCID='x' is not an integer"),
    ("slurm", {"SLURM_PROCID": "2", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "a"}, "rank 2 is outside the world size 2"),
    ("torchrun", {"WORLD_SIZE": "2", "MASTER_ADDR": "h"}, "RANK is not set"),
    ("torchrun", {"RANK": "0", "MASTER_ADDR": "h"}, "WORLD_SIZE is not set"),
    ("torchrun", {"RANK": "0", "WORLD_SIZE": "2"}, "MASTER_ADDR is not set"),
    ("torchrun", {"RANK": "0", "WORLD_SIZE": "0", "MASTER_ADDR": "h"}, "world size must be >= 1"),
    ("torchrun", {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "99999"}, "not a TCP port"),
    ("torchrun", {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h;rm"}, "not a host name"),
    ("mpi", {}, "choose one of: slurm, torchrun"),
])
def test_missing_or_bad_variables_name_the_variable(source, env, needle):
    with pytest.raises(UsageError, match=needle):
        from_env(source, env)


def test_cli_without_the_variables_is_one_line_exit_2(monkeypatch, capsys):
    for k in MANAGER_VARS:
        monkeypatch.delenv(k, raising=False)
    assert main(["worker", "--from-env", "torchrun"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["mariana: error: --from-env torchrun: RANK is not set (set by torchrun, a Kubernetes PyTorchJob, "
                   "or by hand; or JOB_COMPLETION_INDEX in a Kubernetes Indexed Job)"]
    assert main(["master", "wcc", "--from-env", "slurm"]) == 2
    assert "SLURM_PROCID is not set" in capsys.readouterr().err


def test_workers_disagreeing_with_the_world_size(monkeypatch, capsys):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    assert main(["master", "wcc", "--from-env", "torchrun", "--workers", "3"]) == 2
    assert "--workers 3 disagrees with the world size 2" in capsys.readouterr().err


def test_a_master_off_loopback_still_needs_keys(monkeypatch, capsys, tmp_path):
    """MASTER_ADDR names another host: rank 0 binds every interface, which the usual rule guards."""
    for k, v in {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "192.0.2.1", "MASTER_PORT": "7070"}.items():
        monkeypatch.setenv(k, v)
    assert main(["master", "wcc", "--from-env", "torchrun", "--run-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "tcp://0.0.0.0:7070 is not loopback" in err and "--insecure" in err
    assert not (tmp_path / "r").exists()


def local_result(tmp_path: Path, job: str) -> dict:
    out = tmp_path / f"{job}-local.tsv"
    assert main(["run", job, "--run-dir", str(tmp_path / f"{job}-local"), "--set", f"output={out}"]) == 0
    return dict(line.split("\t") for line in out.read_text().splitlines())


@pytest.mark.timeout(180)
def test_torchrun_one_command_on_every_rank(tmp_path: Path):
    """torchrun / Kubernetes style: ranks 0 and 1 run the same `mariana master` command (rank 0 the
    master and a worker, rank 1 a worker); rank 2 joins with `mariana worker --from-env`."""
    port = free_port()
    base = {"WORLD_SIZE": "3", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    out = tmp_path / "wcc.tsv"
    cmd = ["master", "wcc", "--from-env", "torchrun", "--run-dir", str(tmp_path / "run"), "--set", f"output={out}",
           "--json"]
    procs = [start(cmd, clean_env(**base, RANK="0")), start(cmd, clean_env(**base, RANK="1")),
             start(["worker", "--from-env", "torchrun"], clean_env(**base, JOB_COMPLETION_INDEX="2"))]
    results = finish(procs)
    assert [rc for rc, _, _ in results] == [0, 0, 0], [e[-2000:] for _, _, e in results]
    summary = json.loads(results[0][1].strip().splitlines()[-1])
    assert summary["job"] == "wcc" and summary["components"] == 2
    job = json.loads((tmp_path / "run" / "job.json").read_text())
    assert job["workers"] == 3 and job["runtime"] == "cluster" and job["status"] == "finished"
    pids = {json.loads(line)["pid"] for k in range(3)
            for line in (tmp_path / "run" / "trace" / f"worker-{k}.jsonl").read_text().splitlines()}
    assert len(pids) == 3 and procs[1].pid in pids and procs[2].pid in pids  # rank 0's worker is its own child
    assert dict(line.split("\t") for line in out.read_text().splitlines()) == local_result(tmp_path, "wcc")


@pytest.mark.timeout(180)
def test_slurm_srun_every_task_runs_the_same_command(tmp_path: Path):
    """`srun mariana master pagerank --from-env slurm`: SLURM_PROCID picks the master; the first
    host of SLURM_JOB_NODELIST is where the workers connect (here localhost)."""
    port = free_port()
    base = {"SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "localhost", "MASTER_PORT": str(port), "SLURM_JOB_ID": "77"}
    out = tmp_path / "pr.tsv"
    cmd = ["master", "pagerank", "--from-env", "slurm", "--run-dir", str(tmp_path / "run"), "--set", f"output={out}"]
    procs = [start(cmd, clean_env(**base, SLURM_PROCID=str(rank))) for rank in (1, 0)]  # order does not matter
    results = finish(procs)
    assert [rc for rc, _, _ in results] == [0, 0], [e[-2000:] for _, _, e in results]
    assert f"tcp://127.0.0.1:{port}" in results[1][2]  # the master bound the loopback address of localhost
    assert json.loads((tmp_path / "run" / "job.json").read_text())["workers"] == 2
    assert dict(line.split("\t") for line in out.read_text().splitlines()) == local_result(tmp_path, "pagerank")


@pytest.mark.timeout(180)
def test_torchrun_with_curve_keys(tmp_path: Path):
    """--keys DIR: rank 0's master uses DIR's keypair; the worker of rank K DIR/worker-K.key_secret and DIR/master.key."""
    keys = tmp_path / "keys"
    assert main(["keys", "init", str(keys)]) == 0
    assert all(main(["keys", "add", str(keys), f"worker-{k}"]) == 0 for k in range(2))
    port = free_port()
    base = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    out = tmp_path / "sssp.tsv"
    cmd = ["master", "sssp", "--from-env", "torchrun", "--keys", str(keys), "--secure", "--set", "source=amsterdam",
           "--run-dir", str(tmp_path / "run"), "--set", f"output={out}"]
    results = finish([start(cmd, clean_env(**base, RANK=str(rank))) for rank in (0, 1)])
    assert [rc for rc, _, _ in results] == [0, 0], [e[-2000:] for _, _, e in results]
    assert f"--master-file {keys}/master.json" in results[0][2]  # a secure master says how to join it
    plain = tmp_path / "plain.tsv"
    assert main(["run", "sssp", "--set", "source=amsterdam", "--run-dir", str(tmp_path / "p"),
                 "--set", f"output={plain}"]) == 0
    assert out.read_text() == plain.read_text()
