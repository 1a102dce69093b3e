"""Rank, world size and master address from a cluster manager's environment (``--from-env``).

- ``slurm``: ``SLURM_PROCID`` (rank), ``SLURM_NTASKS`` (world size), the first host of
  ``SLURM_JOB_NODELIST`` (the master's host; ``MASTER_ADDR`` overrides it) and ``MASTER_PORT``,
  else a port derived from ``SLURM_JOB_ID`` (15000 + id mod 20000, so that two jobs sharing a
  first node do not collide), else 29500.
- ``torchrun``: ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` as torchrun and the
  Kubernetes PyTorchJob set them; in a Kubernetes Indexed Job ``JOB_COMPLETION_INDEX`` is the rank
  when ``RANK`` is not set.

The rank decides who runs the master (rank 0, see ``mariana master --from-env``); the master
still gives worker indices in the order workers join. This module only reads the environment and
resolves addresses; it starts nothing.
"""

from __future__ import annotations

import logging
import os
import re
import socket
from dataclasses import dataclass
from typing import Mapping

from ..errors import UsageError
from ..comm import is_loopback

log = logging.getLogger(__name__)

__all__ = ["LaunchEnv", "from_env", "first_host", "SOURCES", "DEFAULT_PORT"]

SOURCES = ("slurm", "torchrun")
#: torchrun's default MASTER_PORT.
DEFAULT_PORT = 29500


@dataclass(frozen=True)
class LaunchEnv:
    """Where this process stands in a job started by a cluster manager."""

    source: str
    rank: int
    world_size: int
    master_addr: str
    master_port: int
    local_size: int = 1  # tasks of the job on this host: they share its cores (BLAS threads)

    @property
    def master_endpoint(self) -> str:
        """``tcp://MASTER_ADDR:MASTER_PORT``: where every worker connects."""
        host = f"[{self.master_addr}]" if ":" in self.master_addr else self.master_addr
        return f"tcp://{host}:{self.master_port}"

    @property
    def loopback(self) -> bool:
        return is_loopback(self.master_addr)

    def master_bind(self) -> str:
        """The master's bind endpoint: the loopback address itself when the master address is
        loopback, else every interface (``0.0.0.0``, ``::`` for IPv6) at ``MASTER_PORT``: a host
        name in ``MASTER_ADDR`` names this host for the others but cannot be bound to."""
        if self.loopback:
            addr = "127.0.0.1" if self.master_addr == "localhost" else self.master_addr
            return f"tcp://{f'[{addr}]' if ':' in addr else addr}:{self.master_port}"
        return f"tcp://[::]:{self.master_port}" if ":" in self.master_addr else f"tcp://0.0.0.0:{self.master_port}"

    def local_address(self) -> str:
        """This host's address as the master sees it: the source address of the route to the
        master (a UDP ``connect`` sends nothing). Workers bind their data socket there, so that
        peers on other hosts can reach it."""
        if self.loopback:
            return "127.0.0.1" if self.master_addr == "localhost" or "." in self.master_addr else "::1"
        try:
            infos = socket.getaddrinfo(self.master_addr, self.master_port, type=socket.SOCK_DGRAM)
        except socket.gaierror as exc:
            raise UsageError(f"--from-env {self.source}: cannot resolve the master's host {self.master_addr!r}: "
                             f"{exc.strerror}") from None
        family, _, _, _, addr = infos[0]
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            try:
                s.connect(addr)
                return s.getsockname()[0]
            except OSError as exc:
                raise UsageError(f"--from-env {self.source}: no route to the master at {self.master_addr}: "
                                 f"{exc.strerror or exc}") from None

    def describe(self) -> str:
        return (f"rank {self.rank} of {self.world_size} ({self.source}), master at "
                f"{self.master_addr}:{self.master_port}")


_BRACKET = re.compile(r"\[([^\]]*)\]")


def first_host(nodelist: str) -> str:
    """The first host of a Slurm hostlist: ``node[003-005,9]`` -> ``node003``, ``a,b`` -> ``a``,
    ``rack[1-2]-n[01-04]`` -> ``rack1-n01`` (zero padding kept)."""
    text = nodelist.strip()
    depth, end = 0, len(text)
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            end = i
            break
    item = text[:end].strip()

    def first(m: re.Match) -> str:
        ranges = m.group(1).split(",")[0].strip()
        lo = ranges.split("-")[0].strip()
        if not lo:
            raise ValueError
        return lo

    try:
        host = _BRACKET.sub(first, item)
    except ValueError:
        host = ""
    if not host or "[" in host or "]" in host or not re.fullmatch(r"[A-Za-z0-9_.:-]+", host):
        raise UsageError(f"--from-env slurm: cannot read the first host of SLURM_JOB_NODELIST={nodelist!r}")
    return host


def _local_size(source: str, env: Mapping[str, str]) -> int:
    """Tasks of the job on this host (1 where the manager does not say): Slurm's
    ``SLURM_NTASKS_PER_NODE``, else this node's entry of ``SLURM_TASKS_PER_NODE`` (``2(x3),1``:
    2 on each of the first three nodes, then 1; ``SLURM_NODEID`` picks one); torchrun's ``LOCAL_WORLD_SIZE``."""
    try:
        if source == "torchrun":
            return max(1, int(env.get("LOCAL_WORLD_SIZE", "1")))
        if env.get("SLURM_NTASKS_PER_NODE", "").strip():
            return max(1, int(env["SLURM_NTASKS_PER_NODE"]))
        counts: list[int] = []
        for part in env.get("SLURM_TASKS_PER_NODE", "").split(","):
            if part.strip():
                m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
                if m is None:
                    raise ValueError(part)
                counts += [int(m.group(1))] * int(m.group(2) or 1)
        node = int(env.get("SLURM_NODEID", "0") or 0)
        return max(1, counts[node]) if 0 <= node < len(counts) else 1
    except ValueError:
        log.warning("--from-env %s: cannot read the tasks on this host; BLAS threads as for one", source)
        return 1


def _int(env: Mapping[str, str], name: str, source: str, hint: str) -> int:
    raw = env.get(name)
    if raw is None or not raw.strip():
        raise UsageError(f"--from-env {source}: {name} is not set ({hint})")
    try:
        return int(raw.strip())
    except ValueError:
        raise UsageError(f"--from-env {source}: {name}={raw!r} is not an integer") from None


def from_env(source: str, env: Mapping[str, str] | None = None) -> LaunchEnv:
    """Read ``source`` (``slurm`` or ``torchrun``) from ``env`` (default ``os.environ``)."""
    env = os.environ if env is None else env
    if source == "slurm":
        hint = "run it as a task of srun or sbatch"
        rank = _int(env, "SLURM_PROCID", source, hint)
        size = _int(env, "SLURM_NTASKS", source, hint) if env.get("SLURM_NTASKS") or not env.get("SLURM_NPROCS") \
            else _int(env, "SLURM_NPROCS", source, hint)
        addr = env.get("MASTER_ADDR", "").strip()
        if not addr:
            nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
            if not nodelist:
                raise UsageError(f"--from-env slurm: SLURM_JOB_NODELIST is not set ({hint})")
            addr = first_host(nodelist)
        if env.get("MASTER_PORT"):
            port = _int(env, "MASTER_PORT", source, "")
        elif env.get("SLURM_JOB_ID", "").strip().isdigit():
            port = 15000 + int(env["SLURM_JOB_ID"]) % 20000
        else:
            port = DEFAULT_PORT
    elif source == "torchrun":
        hint = "set by torchrun, a Kubernetes PyTorchJob, or by hand"
        if env.get("RANK", "").strip() == "" and env.get("JOB_COMPLETION_INDEX", "").strip() != "":
            rank = _int(env, "JOB_COMPLETION_INDEX", source, hint)  # a Kubernetes Indexed Job
        else:
            rank = _int(env, "RANK", source, hint + "; or JOB_COMPLETION_INDEX in a Kubernetes Indexed Job")
        size = _int(env, "WORLD_SIZE", source, hint)
        addr = env.get("MASTER_ADDR", "").strip()
        if not addr:
            raise UsageError(f"--from-env torchrun: MASTER_ADDR is not set ({hint})")
        port = _int(env, "MASTER_PORT", source, hint) if env.get("MASTER_PORT") else DEFAULT_PORT
    else:
        raise UsageError(f"--from-env {source!r}: choose one of: {', '.join(SOURCES)}")
    addr = addr.strip("[]")
    if size < 1:
        raise UsageError(f"--from-env {source}: the world size must be >= 1, got {size}")
    if not 0 <= rank < size:
        raise UsageError(f"--from-env {source}: rank {rank} is outside the world size {size} (0..{size - 1})")
    if not 0 < port < 65536:
        raise UsageError(f"--from-env {source}: MASTER_PORT={port} is not a TCP port")
    if not re.fullmatch(r"[A-Za-z0-9_.:-]+", addr):
        raise UsageError(f"--from-env {source}: the master's host {addr!r} is not a host name or address")
    launch = LaunchEnv(source, rank, size, addr, port, _local_size(source, env))
    log.info("--from-env %s: %s", source, launch.describe())
    return launch
