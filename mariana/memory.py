"""The process's allocator settings for jobs that hold large arrays (graph loading and its kernels).

Four settings, each measured on the partitioned graph jobs (bench/README.md, issue 23 and 19):

- ``trim_heap``: give glibc's free heap pages back (loading frees many large temporaries between
  ones it keeps; the holes stay resident, and resident size is what a worker is judged by);
- ``set_mmap_threshold``: which allocations get a mapping of their own, given back when freed;
- ``avoid_hugepage_stalls``: numpy's huge-page advice off where the kernel would compact memory
  synchronously on every fault of an advised array;
- ``one_malloc_arena``: every thread allocates from glibc's main heap, so what a cluster worker's
  zmq IO thread received and the worker has read is freed where the worker's own next arrays go.

Each is a no-op where glibc, numpy's switch or Linux's ``/sys`` file is not there.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

try:
    import resource
except ImportError:  # pragma: no cover - not on Windows
    resource = None  # type: ignore[assignment]

__all__ = ["trim_heap", "set_mmap_threshold", "LOAD_MMAP_THRESHOLD", "RUN_MMAP_THRESHOLD", "PARSE_HEAP_KEEP",
           "avoid_hugepage_stalls", "one_malloc_arena", "resident", "TraceMemory", "TRACE_READ_EVERY_S"]

log = logging.getLogger(__name__)

#: glibc's mmap threshold while a process loads a graph, and after (see ``set_mmap_threshold``)
LOAD_MMAP_THRESHOLD, RUN_MMAP_THRESHOLD = 2 << 20, 4 << 20
#: the free heap top a parsing process keeps (``set_mmap_threshold(keep=)``): every parse block
#: and piece reuses it instead of faulting it in again (scale 19, one worker: the parse's page
#: faults 185K -> ~100K, whole runs x0.91-0.98, peaks no higher)
PARSE_HEAP_KEEP = 32 << 20

#: the kernel's policy for faults in ``madvise(MADV_HUGEPAGE)`` regions
_THP_DEFRAG = Path("/sys/kernel/mm/transparent_hugepage/defrag")
#: this process's memory counters (Linux): ``resident``
_STATUS = "/proc/self/status"
_status: tuple[int, int] | None = None  # (the process, its status file's descriptor)
#: A worker's trace record carries its process's memory when the worker's last read is at least
#: this old (``TraceMemory``): a read costs ~12 us, and the digits dnn-dp job's supersteps ~0.1
#: ms. VmHWM keeps the peak between reads: none is missed, only first seen at a later record.
TRACE_READ_EVERY_S = 0.01


class TraceMemory:
    """``resident()`` for one worker's trace records, at most every ``TRACE_READ_EVERY_S``
    (``{}`` in between)."""

    def __init__(self, every: float = TRACE_READ_EVERY_S) -> None:
        self.every, self.at = every, -float("inf")

    def __call__(self) -> dict[str, int]:
        now = time.monotonic()
        if now - self.at < self.every:
            return {}
        self.at = now
        return resident()


def _libc_trim() -> Callable[[], Any]:
    """glibc's ``malloc_trim(0)``: give the heap's free pages back to the system (a no-op elsewhere)."""
    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim  # (find_library would run ldconfig)
    except (OSError, AttributeError):
        return lambda: 0
    trim.argtypes = [ctypes.c_size_t]
    return lambda: trim(0)


#: Give the heap's free pages back to the system now.
trim_heap = _libc_trim()


def set_mmap_threshold(size: int, keep: int | None = None) -> None:
    """Allocations of ``size`` bytes or more get their own mapping, given back when freed.

    By default glibc raises its threshold to the size of each mapped block that is freed (up to
    32 MB), so after the first large temporaries of loading, the next ones come from the heap and
    the holes they leave stay resident: measured at scale 19, PageRank on 2 workers held ~240 MB
    per process with ~70 MB of live arrays; with the threshold at 256 KB while loading, ~135 MB.
    But every mapping is fresh memory, faulted in page by page when first written: at 256 KB a
    scale-19 load took 1.3-1.8M page faults, half its time in the kernel (PageRank 1 worker 6.5 s,
    2 workers 4.8 s); at 2 MB (a 4 MB piece's parse temporaries reused from the heap) 0.7-1.0M
    faults, 4.6 and 3.5 s, for 8-17 % more peak (PageRank 222 -> 241 MB, 2 workers 160 -> 176 MB
    each; WCC 206 -> 240 MB on 2 workers). Kept after loading, small mappings made grid-16 CDLP
    and PageRank ~4x slower (their per-round temporaries of ~0.5 MB). The build raises it to 4 MB
    with the trim threshold at twice that, as glibc's
    adjustment pairs them (left at its 128 KB default, the heap's top was given back and faulted
    in again every round): the processing supersteps reuse heap memory for their per-round
    arrays and larger temporaries still go back when freed (32 MB kept PageRank's and WCC's
    2-worker peaks ~20 MB higher, no faster). ``keep``: the trim threshold instead (the free top
    of the heap kept, not given back and faulted in again): the parse's (``PARSE_HEAP_KEEP``).
    Setting them turns the adjustment off for this process (a no-op where glibc is not the
    allocator)."""
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
        mallopt(-3, size)  # M_MMAP_THRESHOLD
        mallopt(-1, max(2 * size, 128 << 10) if keep is None else keep)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        pass


def one_malloc_arena() -> None:
    """Every thread of this process allocates from glibc's main heap (``M_ARENA_MAX`` = 1).

    glibc gives each thread that allocates at the same time as another an arena of its own. A
    cluster worker's zmq IO thread receives every batch a peer sends over TCP into its arena;
    when the worker has read a message and lets it go, that memory is free only there: the
    worker's own allocations (its main thread's arena) cannot reuse it, and it stays resident
    until the next ``trim_heap``. Measured at scale 19 on 2 workers (each receiving ~38 MB in
    the loading supersteps), the larger worker's sampled peak over 6 runs each: WCC 210-218 ->
    186-211 MB; PageRank's (VmHWM, 4 interleaved runs each) 122-125 -> 121-129 MiB, no better (its
    peak is the first round, where batches travel in shared memory); the run's time unchanged (the
    IO thread allocates a few hundred buffers a superstep). Call it before the process starts
    threads that allocate (arenas made already stay); a no-op where glibc is not the allocator."""
    try:
        ctypes.CDLL("libc.so.6").mallopt(-8, 1)  # M_ARENA_MAX
    except (OSError, AttributeError):
        pass


def avoid_hugepage_stalls() -> bool:
    """Turn numpy's transparent-huge-page advice off when it would stall; True if it did.

    numpy advises the kernel to back every array of 4 MB or more with huge pages. Where the
    kernel's THP ``defrag`` policy is ``madvise`` or ``defer+madvise`` (a common default), each
    first touch of such an array compacts memory synchronously to find a huge page. Loading and
    the graph kernels allocate fresh arrays of tens of MB all the time (each a new mapping, see
    ``set_mmap_threshold``): measured on R-MAT-18, one worker, fresh processes alternating,
    CDLP's 10 rounds took 1.45-1.48 s with the advice and 1.05-1.07 s without, the whole
    ``mariana run`` 7.9-8.9 s vs 7.2-7.6 s. A user's explicit ``NUMPY_MADVISE_HUGEPAGE`` wins."""
    if "NUMPY_MADVISE_HUGEPAGE" in os.environ:
        return False
    try:
        policy = _THP_DEFRAG.read_text()
    except OSError:
        return False
    if "[madvise]" not in policy and "[defer+madvise]" not in policy:
        return False
    import numpy as np

    core = np._core if hasattr(np, "_core") else np.core  # numpy 2 / numpy 1
    switch = getattr(core, "multiarray", None)
    if not hasattr(switch, "_set_madvise_hugepage"):
        return False
    if switch._set_madvise_hugepage(False):
        log.debug("numpy's huge-page advice off (THP defrag policy %s)", policy.strip())
    return True


def resident() -> dict[str, int]:
    """This process's resident memory in bytes: now (``rss_bytes``, Linux's VmRSS) and its peak
    so far (``peak_rss_bytes``, VmHWM), from ``/proc/self/status``, kept open per process (~12 us
    a read; opened each time, ~30 us). VmHWM starts afresh in a new program and, at a fork, at
    the child's resident size; ``getrusage``'s maxrss (the fallback elsewhere) keeps the peak of
    the process that started the program across ``exec``. The peak is never reset (through
    ``/proc/self/clear_refs`` that would also lower what ``wait4`` reports at exit). Where a
    counter cannot be read it is left out."""
    global _status
    out = {}
    try:
        pid = os.getpid()
        if _status is None or _status[0] != pid:  # (a forked child reads its own file, not its parent's)
            if _status is not None:
                os.close(_status[1])
            _status = None  # (until the open below succeeds)
            _status = (pid, os.open(_STATUS, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)))
        text = os.pread(_status[1], 1 << 14, 0)
        for key, field in (("peak_rss_bytes", b"\nVmHWM:"), ("rss_bytes", b"\nVmRSS:")):  # "VmHWM:\t  1234 kB"
            at = text.find(field)
            if at >= 0:
                out[key] = int(text[at + 7:text.index(b"kB", at)]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    if "peak_rss_bytes" not in out and resource is not None:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        out["peak_rss_bytes"] = peak if sys.platform == "darwin" else peak * 1024  # (bytes on macOS; KiB)
    if "rss_bytes" in out:
        out["peak_rss_bytes"] = max(out.get("peak_rss_bytes", 0), out["rss_bytes"])
    return out
