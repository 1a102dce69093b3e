"""Master failover through a real Slurm on loopback: Debian's slurmctld, slurmd and munge,
configured here for one node (this machine, 2 CPUs), run the guide's sbatch recipe (docs/checkpoints.md) with 2 tasks.
The master's task is killed (kill -9); the batch script asks Slurm to requeue the job, the same
command starts again and the master resumes from the run directory's newest checkpoint by itself
(``--resume-if-possible``, on by default with ``--from-env``). The parameters are bit-identical
to an uninterrupted run. Skips, saying why, where Slurm or munge is not installed or the test is
not root (the daemons run as root here)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

from mariana.jobs import get_job, resolve_config
from mariana.jobs.dnn_data_parallel import final_params
from mariana.jobs.launch import run_job

pytestmark = [pytest.mark.faults, pytest.mark.timeout(420)]

# long enough (~290 steps, ~1 s on a fast 2-core machine) that the master is still training when a
# checkpoint is found and it is killed: 3 epochs ended in 0.25 s, before the test saw its checkpoint
SETS = ["epochs=10", "checkpoint_every=8", "batch_size=48"]
TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo", "srun")


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


class Slurm:
    """munged, slurmctld and slurmd in the foreground, their state and logs under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.procs: list[subprocess.Popen] = []
        self.host = socket.gethostname().split(".")[0]
        (root / "state").mkdir()
        (root / "spool").mkdir()
        key = root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        self.munge_socket = root / "munge.sock"
        self._start(["munged", "-F", "-f", f"--socket={self.munge_socket}", f"--key-file={key}",
                     f"--log-file={root / 'munged.log'}", f"--pid-file={root / 'munged.pid'}",
                     f"--seed-file={root / 'munged.seed'}"], "munged")
        self._until(self.munge_socket.exists, 20, "munged's socket")
        ctld, slurmd = _free_ports(2)
        self.conf = root / "slurm.conf"
        self.conf.write_text("\n".join([
            "ClusterName=mariana", f"SlurmctldHost={self.host}", "SlurmUser=root", "SlurmdUser=root",
            "AuthType=auth/munge", "CredType=cred/munge",
            # cred_expire: a requeued job may start cred_expire + 1 s later (Slurm's default: 121 s)
            f"AuthInfo=socket={self.munge_socket},cred_expire=5",
            f"StateSaveLocation={root / 'state'}", f"SlurmdSpoolDir={root / 'spool'}",
            f"SlurmctldPidFile={root / 'slurmctld.pid'}", f"SlurmdPidFile={root / 'slurmd.pid'}",
            f"SlurmctldPort={ctld}", f"SlurmdPort={slurmd}",
            f"SlurmctldLogFile={root / 'slurmctld.log'}", f"SlurmdLogFile={root / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core", "ReturnToService=2", "JobRequeue=1", "MpiDefault=none",
            "SwitchType=switch/none", "SchedulerType=sched/builtin", "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none", "JobAcctGatherType=jobacct_gather/none",
            f"NodeName={self.host} CPUs=2 State=UNKNOWN",
            f"PartitionName=debug Nodes={self.host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4", ""]))
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))
        self._start(["slurmctld", "-D", "-i", "-f", str(self.conf)], "slurmctld")
        self._start(["slurmd", "-D", "-f", str(self.conf)], "slurmd")
        self._until(lambda: "idle" in self.run("sinfo", "-h", "-o", "%T", check=False), 60, "the node to be idle")

    def _start(self, argv: list[str], name: str) -> None:
        log = open(self.root / f"{name}.out", "w")
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                           env=dict(os.environ, SLURM_CONF=str(self.root / "slurm.conf"))))
        log.close()

    def _until(self, condition: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            dead = [str(p.args[0]) for p in self.procs if p.poll() is not None]  # type: ignore[index]
            if dead or time.monotonic() > deadline:
                logs = "\n".join(f"--- {f.name}\n{f.read_text()[-1500:]}" for f in sorted(self.root.glob("*.out")))
                raise AssertionError(f"waiting for {what}: {'exited: ' + ', '.join(dead) if dead else 'timed out'}\n{logs}")
            time.sleep(0.1)

    def run(self, *argv: str, check: bool = True) -> str:
        done = subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=30)
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(argv)}: {done.stderr}")
        return done.stdout

    def job(self, job_id: str) -> dict[str, str]:
        out = self.run("scontrol", "show", "job", job_id, check=False)
        return dict(kv.split("=", 1) for kv in out.split() if "=" in kv)

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slurm]:
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        pytest.skip(f"Slurm/munge not installed (apt-get install slurmctld slurmd slurm-client munge): no {', '.join(missing)}")
    if os.geteuid() != 0:
        pytest.skip("the test runs slurmd and slurmctld as root")
    s = Slurm(tmp_path_factory.mktemp("slurm"))
    try:
        yield s
    finally:
        s.stop()


def _script(run: Path, log: Path) -> str:
    """The guide's sbatch recipe for 2 tasks on this one node (plaintext on loopback: MASTER_ADDR)."""
    sets = " ".join(f"--set {s}" for s in SETS)
    return f"""#!/bin/bash
#SBATCH --job-name=mariana-dnn
#SBATCH --ntasks=2
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output={log}
export MASTER_ADDR=127.0.0.1
srun --kill-on-bad-exit=1 mariana master dnn-dp --from-env slurm --run-dir {run} {sets} \\
  || {{ [ "${{SLURM_RESTART_COUNT:-0}}" -lt 3 ] && scontrol requeue "$SLURM_JOB_ID"; }}
"""


def _master_pid(job_id: str) -> int | None:
    """The rank-0 ``mariana master`` process of the job (not its srun)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
            env = (entry / "environ").read_bytes().split(b"\0")
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if comm != "srun" and b"master" in cmd and b"--from-env" in cmd and \
                b"SLURM_PROCID=0" in env and f"SLURM_JOB_ID={job_id}".encode() in env:
            return int(entry.name)
    return None


def _newest_checkpoint(run: Path) -> int:
    """The superstep of the newest complete checkpoint in ``run`` (-1: none yet)."""
    steps = [m.parent.name.removeprefix("ss-") for m in run.glob("checkpoints/ss-*/manifest.json")]
    return max((int(s) for s in steps if s.isdigit()), default=-1)


def test_slurm_requeues_a_killed_master_and_the_job_resumes_bit_identical(slurm, tmp_path):
    config = resolve_config(get_job("dnn-dp"), None, SETS)
    reference = {k: v.tobytes() for k, v in final_params(run_job("dnn-dp", config, workers=2, runtime="cluster"), config)}
    run, log = tmp_path / "run", tmp_path / "slurm.log"
    script = tmp_path / "train.sbatch"
    script.write_text(_script(run, log))
    slurm.env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
                     PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    job_id = slurm.run("sbatch", "--parsable", str(script)).strip().split(";")[0]
    deadline = time.monotonic() + 180
    while _newest_checkpoint(run) < 24:  # (older checkpoints are pruned as newer ones land: not one exact step)
        assert time.monotonic() < deadline, f"no checkpoint at or after 24 in time: {slurm.job(job_id)}"
        time.sleep(0.1)
    pid = _master_pid(job_id)
    assert pid is not None, f"no master process of the job (ended already?): {slurm.job(job_id)}"
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 240
    while (state := slurm.job(job_id).get("JobState")) != "COMPLETED":
        assert state not in ("FAILED", "CANCELLED", "TIMEOUT"), f"{state}: {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"still {state}: {log.read_text()[-3000:]}"
        time.sleep(0.5)
    text = log.read_text()
    assert int(slurm.job(job_id)["Restarts"]) >= 1
    assert "holds a checkpoint of this job: resuming from it" in text
    params = {name: np.load(run / "params" / f"{name}.npy").tobytes() for name in reference}
    assert params == reference
