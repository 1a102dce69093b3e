"""How much same-host shared memory a worker's arenas may take (``comm/shm.py``).

Shared memory is an optimisation, never a cause of death: the arenas of a job's workers on one
host together stay within a *host budget*, and a frame that finds no room travels over the
socket as small frames do.

- The host budget is ``FRACTION`` of the room the machine has when a worker starts: the least of
  /dev/shm's free space, the kernel's MemAvailable and the room left under the limits of this
  process's memory cgroup and its ancestors (cgroup v2 ``memory.max``, v1
  ``memory.limit_in_bytes``). ``BUDGET_VAR`` (MB) sets it instead.
- Each worker takes an equal *share*: the budget divided by the job's workers on this host
  (``HOST_WORKERS_VAR``, which the launcher that starts them sets; 1 for a worker started by
  hand), and never more than ``--shm-cap-mb``.
- On top of the share, a worker adds a segment only while the machine keeps ``RESERVE`` of its
  capacity (the least of MemTotal, /dev/shm's size and the cgroup limits) available after it
  (``Budget.allows``): workers started by hand, other jobs and the workers' own heaps count
  there too. This reads /proc only when an arena would grow.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from .shmfiles import SHM_DIR

log = logging.getLogger(__name__)

#: cgroup v2's unified mount (v1 controllers are folders below it)
_CGROUP = Path("/sys/fs/cgroup")


def memory_cgroups() -> list[tuple[Path, int]]:
    """This process's memory cgroup and its ancestors, innermost first: (folder, cgroup version)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    found: list[tuple[Path, int]] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        if controllers == "" and (_CGROUP / "cgroup.controllers").exists():
            root, version = _CGROUP, 2
        elif "memory" in controllers.split(","):
            root, version = _CGROUP / "memory", 1
        else:
            continue
        at = root / rel.lstrip("/")
        if not at.is_dir():  # a cgroup namespace: its root is where the mount begins
            at = root
        while True:
            found.append((at, version))
            if at == root:
                break
            at = at.parent
    return found

__all__ = ["BUDGET_VAR", "HOST_WORKERS_VAR", "FRACTION", "RESERVE", "Budget", "room", "capacity", "host_workers",
           "memory_cgroups"]

#: the host budget in MB for all of a job's workers on this host together (overrides ``FRACTION``)
BUDGET_VAR = "MARIANA_SHM_BUDGET_MB"
#: how many of the job's workers run on this host (set by the launcher for the workers it starts)
HOST_WORKERS_VAR = "MARIANA_SHM_HOST_WORKERS"
#: the part of the machine's room at a worker's start that the host's arenas may take together
FRACTION = 0.25
#: the part of the machine's capacity an arena's growth always leaves available
RESERVE = 0.25
#: a refused growth is not asked of the machine again for this long (a frame's path reads no /proc)
RECHECK_S = 1.0

_UNLIMITED = 1 << 62  # a cgroup v1 limit at or above this is "no limit"


def _meminfo() -> dict[str, int]:
    """MemAvailable and MemTotal in bytes ({} where /proc/meminfo cannot be read)."""
    out = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("MemAvailable", "MemTotal"):
                    out[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return out


def _shm_space() -> tuple[int, int] | None:
    """(free, size) of /dev/shm in bytes."""
    try:
        st = os.statvfs(SHM_DIR)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max":
        return _UNLIMITED
    try:
        return int(text)
    except ValueError:
        return None


def _cgroup_room() -> tuple[int, int] | None:
    """(room, limit) under the tightest limit of this process's memory cgroups, None if unlimited."""
    best: tuple[int, int] | None = None
    for at, version in memory_cgroups():
        files = ("memory.max", "memory.current") if version == 2 else ("memory.limit_in_bytes", "memory.usage_in_bytes")
        limit, usage = _read_int(at / files[0]), _read_int(at / files[1])
        if limit is None or usage is None or limit >= _UNLIMITED:
            continue
        room_here = max(0, limit - usage)
        if best is None or room_here < best[0]:
            best = (room_here, limit)
    return best


def room() -> tuple[int, str]:
    """The memory this machine can give now, in bytes, and what limits it."""
    options: list[tuple[int, str]] = []
    shm = _shm_space()
    if shm is not None:
        options.append((shm[0], f"free space of {SHM_DIR}"))
    avail = _meminfo().get("MemAvailable")
    if avail is not None:
        options.append((avail, "MemAvailable"))
    cg = _cgroup_room()
    if cg is not None:
        options.append((cg[0], "room under the memory cgroup's limit"))
    return min(options) if options else (0, "nothing readable")


def capacity() -> int:
    """The machine's memory for this process: the least of MemTotal, /dev/shm's size and the cgroup limits."""
    options = []
    shm = _shm_space()
    if shm is not None:
        options.append(shm[1])
    total = _meminfo().get("MemTotal")
    if total is not None:
        options.append(total)
    cg = _cgroup_room()
    if cg is not None:
        options.append(cg[1])
    return min(options) if options else 0


def host_workers() -> int:
    """The job's workers on this host, as the launcher said (``HOST_WORKERS_VAR``); 1 if it did not."""
    try:
        return max(1, int(os.environ.get(HOST_WORKERS_VAR, "1")))
    except ValueError:
        return 1


class Budget:
    """One worker's bound on its arenas: its share of the host budget, and the machine's reserve."""

    def __init__(self, cap_bytes: int, host_budget: int | None = None, workers: int | None = None) -> None:
        self.workers = host_workers() if workers is None else max(1, workers)
        if host_budget is None and os.environ.get(BUDGET_VAR):
            try:
                host_budget = int(float(os.environ[BUDGET_VAR]) * (1 << 20))
            except ValueError:
                log.warning("shm: %s=%r is not a number of MB: ignored", BUDGET_VAR, os.environ[BUDGET_VAR])
        if host_budget is None:
            free, self.limited_by = room()
            host_budget = int(FRACTION * free)
        else:
            self.limited_by = BUDGET_VAR
        self.host = max(0, host_budget)
        self.share = min(cap_bytes, self.host // self.workers)
        self.reserve = int(RESERVE * capacity())
        self._refused: tuple[float, int] | None = None  # (when, the smallest size refused then)

    def allows(self, size: int) -> bool:
        """Whether the machine keeps its reserve after ``size`` more bytes of shared memory."""
        now = time.monotonic()
        if self._refused is not None and now - self._refused[0] < RECHECK_S and size >= self._refused[1]:
            return False
        free, _ = room()
        if free - size >= self.reserve:
            self._refused = None
            return True
        self._refused = (now, size)
        return False

    def describe(self) -> str:
        """What the share is made of, for the log."""
        mb = 1 << 20
        source = f"set by {BUDGET_VAR}" if self.limited_by == BUDGET_VAR else f"{FRACTION:.0%} of the {self.limited_by}"
        return (f"{self.share / mb:.0f} MB for this worker: a host budget of {self.host / mb:.0f} MB ({source}) "
                f"shared by {self.workers} worker(s) on this host, at most --shm-cap-mb each")
