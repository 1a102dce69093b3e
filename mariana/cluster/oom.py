"""How a worker process ended, OOM kills included (the master's report of a lost worker).

A worker killed by SIGKILL is most often the kernel OOM killer's victim: ``OomWatch`` keeps the
kernel's OOM-kill counts from when a run starts (the machine's, ``/proc/vmstat``, and this
process's memory cgroup's) and, for a SIGKILL, looks for the kernel log's record of that pid, then
for counts that rose, else adds a hint.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

from ..comm.shmbudget import memory_cgroups

__all__ = ["oom_kills", "OomWatch", "OOM_HINT"]


def _counter(path: Path | str, key: str) -> int | None:
    """The number after ``key`` on its line of a ``key value`` file (/proc/vmstat, memory.events)."""
    try:
        with open(path) as f:
            for line in f:
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
    except (OSError, ValueError):
        pass
    return None


def oom_kills() -> dict[str, int]:
    """The kernel's counts of processes its OOM killer killed: the machine's (``/proc/vmstat``)
    and this process's memory cgroup's (v2 ``memory.events``, v1 ``memory.oom_control``)."""
    out: dict[str, int] = {}
    n = _counter("/proc/vmstat", "oom_kill")
    if n is not None:
        out["/proc/vmstat"] = n
    for at, version in memory_cgroups()[:1]:
        path = at / ("memory.events" if version == 2 else "memory.oom_control")
        n = _counter(path, "oom_kill")
        if n is not None:
            out[str(path)] = n
    return out


#: what a SIGKILL most often means when nothing says who sent it
OOM_HINT = "the kernel's OOM killer does this when memory runs out"
#: the kernel log's record of an OOM kill: "Out of memory: Killed process 123 (python) total-vm:..."
_KILLED = re.compile(r"((?:[\w ]*out of memory: )?Killed process (\d+) \([^)]*\))", re.IGNORECASE)
_KMSG = "/dev/kmsg"
#: how long a SIGKILL's report waits for the kernel's record of it
OOM_WAIT_S = 0.5


def _kernel_log_kill(pid: int, since_us: float) -> str | None:
    """The kernel log's "Killed process PID" record (an OOM kill) written after ``since_us``
    (microseconds of the monotonic clock), where the log is readable (/dev/kmsg: root, or
    ``kernel.dmesg_restrict=0``)."""
    try:
        fd = os.open(_KMSG, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    found = None
    deadline = time.monotonic() + 1.0
    try:
        while time.monotonic() < deadline:
            try:
                rec = os.read(fd, 8192).decode("utf-8", "replace")
            except BlockingIOError:  # the end of the log
                break
            except BrokenPipeError:  # records overwritten while reading: go on with the next
                continue
            except OSError:
                break
            head, _, msg = rec.partition(";")
            fields = head.split(",")
            m = _KILLED.search(msg)
            if m and int(m.group(2)) == pid and len(fields) >= 3 and fields[2].isdigit() and int(fields[2]) >= since_us:
                found = m.group(1).strip()
    finally:
        os.close(fd)
    return found


class OomWatch:
    """Says how a process ended, OOM kills included: made when a run starts, it keeps the kernel's
    OOM-kill counts then, so that a SIGKILL later can be laid at the OOM killer's door."""

    def __init__(self) -> None:
        self.counts = oom_kills()
        self.since_us = time.monotonic() * 1e6 - 5e6  # (the kernel's clock may run a little apart)

    def exit(self, code: int, pid: int | None = None) -> str:
        """``exited with code N``, and for a signal its name; for SIGKILL whether the OOM killer did it:
        the kernel log's record of ``pid``, else the OOM-kill counts that rose since, else a hint."""
        if code >= 0:
            return f"exited with code {code}"
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        if code != -signal.SIGKILL:
            return f"exited with code {code} (killed by {name})"
        deadline = time.monotonic() + OOM_WAIT_S
        while True:  # the kernel writes its record as it kills: a moment before the exit is seen, as a rule
            record = _kernel_log_kill(pid, self.since_us) if pid is not None else None
            if record is not None:
                return (f"exited with code {code} (killed by the kernel's OOM killer: this machine or its memory "
                        f"cgroup ran out of memory; kernel log: {record})")
            rose = {k: (self.counts[k], n) for k, n in oom_kills().items() if k in self.counts and n > self.counts[k]}
            if rose or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        if rose:
            counts = ", ".join(f"{k} oom_kill {a} -> {b}" for k, (a, b) in rose.items())
            return (f"exited with code {code} (killed by SIGKILL, most likely by the kernel's OOM killer: it killed "
                    f"processes during this run, {counts}; this machine or its memory cgroup ran out of memory)")
        return f"exited with code {code} (killed by SIGKILL; {OOM_HINT})"
