"""The files of same-host shared memory (``comm/shm.py``): where they live, what they are called,
this host's identity for them, and removing the ones a process left behind.

Segments are files under /dev/shm (mode 0600): an arena's
``mariana-<job12>-w<index>-<pid>-g<gen>-p<peer>-<n>`` and a send-buffer pool's
``mariana-<job12>-w<index>-<pid>-<token8>-pool-<n>``. Each is unlinked as soon as its readers
have mapped it; one left behind (its worker gone through ``os._exit`` or a kill while it was still
linked) is removed by the job's master when it ends (``sweep``) and, should the master have been
killed too, by the next worker that starts on the host (``sweep_stale``).
"""

from __future__ import annotations

import glob
import logging
import os
import re
import socket
import time
from typing import Callable

log = logging.getLogger(__name__)

__all__ = ["SHM_DIR", "SEGMENT_NAME", "POOL_NAME", "STALE_AFTER_S", "host_id", "sweep", "sweep_stale"]

SHM_DIR = "/dev/shm"
SEGMENT_NAME = re.compile(r"^mariana-[0-9a-f]{1,32}-w\d+-\d+-g\d+-p\d+-\d+$")
POOL_NAME = re.compile(r"^mariana-[0-9a-f]{1,32}-w\d+-\d+-[0-9a-f]{8}-pool-\d+$")


def host_id() -> str | None:
    """This host's identity for shared memory (boot id, hostname, uid), or None without /dev/shm."""
    if not os.path.isdir(SHM_DIR) or not hasattr(os, "getuid"):
        return None
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        return None
    return f"{boot}/{socket.gethostname()}/{os.getuid()}"


def sweep(job_id: str) -> int:
    """Remove this job's segments left in /dev/shm (by a killed worker); returns how many."""
    return _unlink_own(f"mariana-{job_id[:12]}-*")


#: a segment's owner: the worker process whose pid its name holds (arena and pool names alike)
_OWNER = re.compile(r"^mariana-[0-9a-f]{1,32}-w\d+-(\d+)-")
#: a file younger than this is left alone whoever owns it (its owner may be starting in another
#: pid namespace that shares this /dev/shm)
STALE_AFTER_S = 30.0


def sweep_stale(now: float | None = None) -> int:
    """Remove segments of this uid whose owner process is gone; returns how many.

    A job's master sweeps its own job's files when it ends (``sweep``), and a worker unlinks what
    its peers have not mapped when it closes; neither runs when the master was killed and a worker
    ended through ``os._exit`` (or was killed too) while a segment was still linked. Every worker
    sweeps such leftovers of any job when it starts, so they do not pile up in /dev/shm (a file of
    a live pid, or one younger than ``STALE_AFTER_S``, stays)."""
    now = time.time() if now is None else now

    def stale(name: str, st: os.stat_result) -> bool:
        owner = _OWNER.match(name)
        return (owner is not None and bool(SEGMENT_NAME.match(name) or POOL_NAME.match(name))
                and now - st.st_mtime >= STALE_AFTER_S and not _alive(int(owner.group(1))))

    n = _unlink_own("mariana-*", stale)
    if n:
        log.info("shm: removed %d segment(s) in %s left by processes that no longer run", n, SHM_DIR)
    return n


def _unlink_own(pattern: str, which: Callable[[str, os.stat_result], bool] = lambda name, st: True) -> int:
    """Unlink the files of this uid in /dev/shm matching ``pattern`` that ``which`` picks; how many."""
    n = 0
    for path in glob.glob(os.path.join(SHM_DIR, pattern)):
        try:
            st = os.stat(path, follow_symlinks=False)
            if st.st_uid == os.getuid() and which(os.path.basename(path), st):
                os.unlink(path)
                n += 1
        except OSError:  # gone meanwhile
            pass
    return n


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process (a pid of this uid was reused)
        return True
    return True
