"""Same-host shared memory for big buffer frames between cluster workers.

Each worker owns one *arena* per peer: shared-memory segments (files under /dev/shm, mode 0600,
named ``mariana-<job12>-w<index>-<pid>-g<gen>-p<peer>-<n>``) cut into extents by a first-fit
free list. A buffer frame of at least ``min_bytes`` for that peer is copied into an extent and
sent as an empty frame; the BATCH record's ``shm`` field says where it is (``[aid, [[frame, seg,
offset, length], ...]]``), so the codec's frame indices keep their meaning. The receiver maps the
sender's segments read-only (once each) and decodes arrays as read-only views into them.

Everything else rides on the BATCH parts the workers send each other every superstep, as this
layer's own record ``ShmNotes`` in the BATCH's ``shm_notes`` field (plain msgpack lists, checked
once, in ``ShmNotes.from_wire``):

- ``offer`` ``[aid, host, [[seg, name, size, token], ...]]``: new segments of the sender's
  arena. The receiver maps one only if ``host`` is its own host identity (boot id, hostname,
  uid), the file is a regular file of its uid of that size, and it starts with ``token``.
- ``ack`` ``[aid, [[seg, ok], ...]]``: the receiver mapped (or could not map) them. The
  sender unlinks an acknowledged segment at once (only mappings keep it alive, so a kill -9 leaves
  no file behind) and uses it only from then on; a refusal turns shm off for that peer.
- ``freed`` ``[aid, [[seg, offset], ...]]``: extents whose last view the receiver dropped
  (``weakref.finalize`` on the per-frame owner array every decoded view keeps alive). The sender
  reuses an extent only after it is reported free, so a vertex may keep a payload for as long as
  it likes: its extent just stays leased.

When an arena is full it grows by a new segment (offered, usable once acknowledged) up to the
worker's share of the host's budget (``comm/shmbudget.py``: the arenas of all of a job's workers
on one host together stay within a part of the machine's memory, and each is at most
``cap_bytes``), and only while the machine keeps a reserve of memory available; until then, and
beyond, frames travel as ordinary zmq frames (logged once per worker when the bound bites).
A rollback (new generation) drops every arena and mapping of the old one: the peers may be new
processes, and batches of the old generation are dropped anyway (their extents are released when
they are collected, and reports about old arenas are ignored by ``aid``).

Where the files live, their names, and the sweeping of files a process left behind:
``comm/shmfiles.py``.

*Send buffers* (``Pool``, ``Context.send_buffer``) avoid even the sender's copy: arrays a vertex
asked the engine for live in pool segments every same-host peer maps (``pool_offer`` /
``pool_ack``, the same checks), so a frame inside one travels as a ``shm_pool`` descriptor
``[pool id, [[frame, seg, offset, length], ...]]`` with no copy and no lease: the vertex owns the
memory and must not rewrite what it sent before two supersteps later (see ``Pool``).
"""

from __future__ import annotations

import bisect
import logging
import mmap
import os
import secrets
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..errors import ProtocolError
from ..messages import codec
from .shmbudget import Budget
from .shmfiles import POOL_NAME, SEGMENT_NAME, SHM_DIR, host_id, sweep, sweep_stale

log = logging.getLogger(__name__)

__all__ = ["Shm", "Arena", "Pool", "host_id", "sweep", "sweep_stale", "SHM_DIR"]

HEADER = 4096  # the token lives here; extents start after it
ALIGN = 4096
FIRST_SEGMENT = 16 << 20  # at least; the first is twice the big frames of the message that asks for it
WHOLE = 1 << 62  # a chunk size that keeps every array in one frame
POOL_SEGMENT = 16 << 20  # at least; a bigger send buffer gets a segment of its own
#: memory of an arena segment unused for this many supersteps is given back (``Arena.trim``),
#: when there is at least ``TRIM_MIN_BYTES`` of it (less would come and go with every message)
IDLE_SUPERSTEPS = 2
TRIM_MIN_BYTES = 4 << 20
_MADV_REMOVE = getattr(mmap, "MADV_REMOVE", None)  # Linux: frees a shared mapping's pages in its file


def _nbytes(frame: Any) -> int:
    return memoryview(frame).nbytes


def _round(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


class _Segment:
    """One shared-memory file of an arena, mapped read-write, with its free extents."""

    def __init__(self, name: str, size: int) -> None:
        self.name, self.size = name, size
        self.path = os.path.join(SHM_DIR, name)
        self.token = secrets.token_hex(16)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.posix_fallocate(fd, 0, size)  # ENOSPC now, not SIGBUS at a later memcpy into a full tmpfs
            self.mm = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            os.unlink(self.path)
            raise
        self.fd = fd  # kept: a trimmed tail is allocated again before it is written (``restore``)
        self.mm[: len(self.token)] = self.token.encode()
        self.linked = True
        self.free: list[list[int]] = [[HEADER, size - HEADER]]  # sorted [offset, length]
        self.ends: dict[int, int] = {}  # {superstep: the highest end of an extent handed out in it}
        self.kept = size  # the memory from here to the end was given back (``trim``)

    def trim(self, superstep: int, leased_end: int) -> None:
        """Give back the memory above every extent leased now or handed out in the last
        ``IDLE_SUPERSTEPS`` supersteps (first fit keeps the extents in use low): its pages leave
        the file, so the sender's and every reader's mapping of them. A no-op without
        ``MADV_REMOVE``."""
        for t in [t for t in self.ends if t <= superstep - IDLE_SUPERSTEPS]:
            del self.ends[t]
        cut = _round(max(HEADER, leased_end, *self.ends.values()))
        if _MADV_REMOVE is not None and self.kept - cut >= TRIM_MIN_BYTES:
            self.mm.madvise(_MADV_REMOVE, cut, self.kept - cut)
            self.kept = cut

    def restore(self, end: int) -> bool:
        """Memory for an extent ending at ``end`` allocated again where it was given back (False:
        no room in /dev/shm now)."""
        if end > self.kept:
            try:
                os.posix_fallocate(self.fd, self.kept, end - self.kept)
            except OSError:
                return False
            self.kept = end
        return True

    def write(self, off: int, data: memoryview, mapped: bool) -> None:
        """Copy ``data`` into the extent at ``off``: through this process's mapping (``mapped``), or
        by ``pwrite`` into the file, so that its pages are the file's alone, resident once, in
        the memory of the reader that maps them and not the writer's too."""
        if mapped:
            self.mm[off:off + data.nbytes] = data
            return
        done, n = 0, data.nbytes
        while done < n:
            done += os.pwrite(self.fd, data[done:], off + done)

    def alloc(self, n: int) -> int | None:
        for i, ext in enumerate(self.free):
            if ext[1] >= n:
                off = ext[0]
                if ext[1] == n:
                    del self.free[i]
                else:
                    ext[0] += n
                    ext[1] -= n
                return off
        return None

    def release(self, off: int, n: int) -> None:
        i = bisect.bisect_left(self.free, [off, 0])
        self.free.insert(i, [off, n])
        if i + 1 < len(self.free) and off + n == self.free[i + 1][0]:  # merge with the next
            self.free[i][1] += self.free.pop(i + 1)[1]
        if i > 0 and self.free[i - 1][0] + self.free[i - 1][1] == off:  # and with the previous
            self.free[i - 1][1] += self.free.pop(i)[1]

    def unlink(self) -> None:
        if self.linked:
            self.linked = False
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

    def close(self) -> None:
        self.unlink()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        try:
            self.mm.close()
        except BufferError:  # a view is still exported: the mapping goes when it does
            pass


class Arena:
    """A sender's segments for one peer: allocation, leases, growth up to a shared budget.

    Each superstep a segment gives back the memory above the extents leased now or handed out in
    the last ``IDLE_SUPERSTEPS`` supersteps (``trim``): a job that sent one large message (a
    graph's route structure, say) does not keep its pages, resident in both workers, for the rest
    of the run, while the extents a job reuses every superstep keep theirs."""

    def __init__(self, aid: str, budget: list[int], first: int = FIRST_SEGMENT, limits: Budget | None = None) -> None:
        self.aid, self.budget, self.first = aid, budget, first  # budget: [bytes left], shared
        self.limits = limits  # the machine's reserve, asked before a segment is added
        self.bound: str | None = None  # why the last growth was refused: "share" or "machine"
        self.segs: list[_Segment] = []
        self.usable: set[int] = set()
        self.leases: dict[tuple[int, int], int] = {}
        self.offers: list[list[Any]] = []  # not yet sent
        self.superstep = 0
        self.written: dict[tuple[int, int], int] = {}  # {(segment, offset): the superstep it was last written in}

    @property
    def growing(self) -> bool:
        return len(self.usable) < len(self.segs)

    def grow(self, need: int = 0, want: int = 0) -> bool:
        """Add a segment (double the last, or ``want``, room for ``need`` at least) if the budget
        and the machine's reserve allow; offer it. Refused: False, and ``bound`` says why."""
        least = _round(need) + HEADER
        size = max(self.first, 2 * self.segs[-1].size if self.segs else 0, _round(want), least)
        size = min(size, self.budget[0])
        if size < least or size <= HEADER:
            self.bound = "share"
            return False
        if self.limits is not None and not self.limits.allows(size):
            if least >= size or not self.limits.allows(least):
                self.bound = "machine"
                return False
            size = least
        self.bound = None
        seg = _Segment(f"{self.aid}-{len(self.segs)}", size)
        self.budget[0] -= size
        self.segs.append(seg)
        self.offers.append([len(self.segs) - 1, seg.name, size, seg.token])
        return True

    def alloc(self, n: int) -> tuple[int, int] | None:
        n = _round(n)
        for s in sorted(self.usable):
            seg = self.segs[s]
            off = seg.alloc(n)
            if off is not None:
                if not seg.restore(off + n):  # given back, and /dev/shm has no room for it now
                    seg.release(off, n)
                    continue
                seg.ends[self.superstep] = max(seg.ends.get(self.superstep, 0), off + n)
                self.leases[(s, off)] = n
                return s, off
        return None

    def write(self, seg: int, off: int, data: memoryview) -> None:
        """Copy a frame into its extent. Where this superstep or the one before wrote there too
        (a message a job sends every superstep), through this process's mapping, whose pages are
        resident then (16 MB: ~1.4 ms against ~3.5 by ``pwrite``); anywhere else by ``pwrite``
        (~3 ms, where a first write through the mapping faults every page in: ~7 ms), so that a
        message sent once is resident in its reader's memory and not the sender's as well.
        (Written through the mapping, the 11 MB route structure of a scale-19 PageRank worker
        stayed in both workers' RSS through the first round: 22-24 MiB of RssShmem; each
        worker's peak VmHWM was 121-129 MiB, with ``pwrite`` 115-118.)"""
        last = self.written.get((seg, off))
        self.written[(seg, off)] = self.superstep
        self.segs[seg].write(off, data, mapped=last is not None and last >= self.superstep - 1)

    def trim(self, superstep: int) -> None:
        """Superstep ``superstep`` begins: each segment gives back the memory above what was in use lately."""
        self.superstep = superstep
        self.written = {at: t for at, t in self.written.items() if t >= superstep - 1}
        leased_end: dict[int, int] = {}
        for (s, off), n in self.leases.items():
            leased_end[s] = max(leased_end.get(s, 0), off + n)
        for s in self.usable:
            self.segs[s].trim(superstep, leased_end.get(s, 0))

    def release(self, seg: int, off: int) -> bool:
        n = self.leases.pop((seg, off), None)
        if n is None:
            return False
        self.segs[seg].release(off, n)
        return True

    def acked(self, seg: int, ok: bool) -> None:
        self.segs[seg].unlink()
        if ok:
            self.usable.add(seg)
            self.segs[seg].ends[self.superstep] = self.segs[seg].size  # kept whole until it has been idle

    def close(self) -> None:
        for seg in self.segs:
            seg.close()
            self.budget[0] += seg.size
        self.segs, self.usable, self.leases = [], set(), {}


class Pool:
    """A worker's *send buffers*: shared-memory segments every same-host peer maps (zero copy).

    ``Context.send_buffer`` carves a zeroed 1-D array out of a segment; a message whose array
    frame lies inside a region a peer has acknowledged travels to that peer as a descriptor
    (``shm_pool [pool id, [[frame, segment, offset, length], ...]]``), no copy, no lease: the
    owning vertex keeps the memory and must not write what it sent before two supersteps later.
    Segments are offered to every peer (``shm_pool_offer``, acknowledged by ``shm_pool_ack``) and
    unlinked once every current peer acknowledged them; the pool outlives rollbacks (the vertices
    keep their buffers), and a peer that is a new process after a rollback is offered it again
    (it can map it only while the file is still linked: else it gets copies, as before the ack;
    a peer that kept its mappings answers from them).
    """

    def __init__(self, prefix: str, first: int = POOL_SEGMENT) -> None:
        self.pid = f"{prefix}-{secrets.token_hex(4)}-pool"
        self.first = first
        self.segs: list[_Segment] = []
        self.bases: list[int] = []  # the address of each segment's mapping
        self.views: list[np.ndarray] = []
        self.acked: dict[int, set[int]] = {}  # {peer: segments it mapped}
        self.offered: dict[int, int] = {}  # {peer: segments offered so far}
        self.refused: set[int] = set()
        self.peers: set[int] = set()
        self.regions: list[tuple[int, int, int]] = []  # (address, length, segment), carved buffers
        self.last_sent: dict[int, int] = {}  # {region address: superstep it was last sent in}
        self.reused = 0  # sends that broke the two-superstep contract (a region sent in consecutive supersteps)

    def buffer(self, size: int, dtype: Any = np.float32) -> np.ndarray:
        """A zeroed 1-D array of ``size`` elements in a pool segment (see ``Context.send_buffer``)."""
        dt = np.dtype(dtype)
        n = _round(max(1, size * dt.itemsize))
        off = None
        for s, seg in enumerate(self.segs):
            off = seg.alloc(n)
            if off is not None:
                break
        if off is None:
            size_b = max(self.first, _round(n) + HEADER)
            try:
                seg = _Segment(f"{self.pid}-{len(self.segs)}", size_b)
            except OSError as exc:  # /dev/shm full (a small container tmpfs, say): plain memory, copied when sent
                log.warning("shm: no room for a %d-byte send buffer (%s): plain memory", n, exc)
                return np.zeros(size, dtype=dt)
            self.segs.append(seg)
            view = np.frombuffer(seg.mm, np.uint8)
            self.views.append(view)
            self.bases.append(int(view.ctypes.data))
            s = len(self.segs) - 1
            off = seg.alloc(n)
            assert off is not None
            if not self.peers:
                seg.unlink()
        arr = self.views[s][off : off + size * dt.itemsize].view(dt)
        arr[...] = 0
        self.regions.append((self.bases[s] + off, n, s))
        self.regions.sort()
        return arr

    def find(self, addr: int, n: int) -> tuple[int, int, int] | None:
        """(segment, offset, region address) of a frame at ``addr`` of ``n`` bytes inside a region."""
        i = bisect.bisect_right(self.regions, (addr, 1 << 62, 0)) - 1
        if i < 0:
            return None
        start, length, s = self.regions[i]
        if addr + n > start + length:
            return None
        return s, addr - self.bases[s], start

    def offers(self, peer: int) -> list[list[Any]]:
        """Segments not yet offered to ``peer`` (still linked: a new process can map them)."""
        k = self.offered.get(peer, 0)
        if k == len(self.segs) or peer in self.refused:
            return []
        out = [[s, seg.name, seg.size, seg.token] for s, seg in enumerate(self.segs[k:], k)]
        self.offered[peer] = len(self.segs)
        return out

    def ack(self, peer: int, seg: int, ok: bool) -> None:
        if ok:
            self.acked.setdefault(peer, set()).add(seg)
        else:
            self.refused.add(peer)
        if all(seg in self.acked.get(p, ()) or p in self.refused for p in self.peers):
            self.segs[seg].unlink()

    def renew(self, peers: set[int]) -> None:
        """A rollback: peers may be new processes; offer every segment again (acks start over)."""
        self.peers = set(peers)
        self.acked, self.offered, self.refused = {}, {}, set()
        self.last_sent = {}

    def close(self) -> None:
        self.views = []
        for seg in self.segs:
            seg.close()


def _ints(x: Any, n: int) -> bool:
    return isinstance(x, list) and len(x) == n and all(type(v) is int and v >= 0 for v in x)


def _segments(x: Any) -> bool:
    """``[[seg, name, size, token], ...]``: offered segments."""
    return isinstance(x, list) and all(
        isinstance(i, list) and len(i) == 4 and type(i[0]) is int and isinstance(i[1], str) and type(i[2]) is int
        and isinstance(i[3], str) for i in x)


def _acks(x: Any) -> bool:
    """``[[seg, mapped?], ...]``."""
    return isinstance(x, list) and all(isinstance(i, list) and len(i) == 2 and type(i[0]) is int
                                       and isinstance(i[1], bool) for i in x)


@dataclass
class ShmNotes:
    """This layer's own record: what one worker tells a same-host peer about their arenas and
    send-buffer pools, riding on a BATCH part (its ``shm_notes`` field). ``from_wire`` checks the
    whole shape once; what depends on state (segment numbers in range, the arena id) is checked
    where the note is applied (``Shm.notes_in``)."""

    offer: list | None = None  # [arena id, host id, [[segment, name, size, token], ...]]
    ack: list | None = None  # [peer's arena id, [[segment, mapped?], ...]]
    freed: list | None = None  # [peer's arena id, [[segment, offset], ...]]
    pool_offer: list | None = None  # [pool id, host id, [[segment, name, size, token], ...]]
    pool_ack: list | None = None  # [peer's pool id, [[segment, mapped?], ...]]

    #: field -> (length, check of the last element)
    _SHAPES = {"offer": (3, _segments), "ack": (2, _acks), "freed": (2, lambda x: isinstance(x, list) and all(
        _ints(i, 2) for i in x)), "pool_offer": (3, _segments), "pool_ack": (2, _acks)}

    def __bool__(self) -> bool:
        return any(getattr(self, name) is not None for name in self._SHAPES)

    def to_wire(self) -> dict[str, list]:
        return {name: getattr(self, name) for name in self._SHAPES if getattr(self, name) is not None}

    @classmethod
    def from_wire(cls, raw: Any) -> ShmNotes:
        """The notes of a BATCH's ``shm_notes`` (None: none); ``ProtocolError("shm")`` if malformed."""
        if raw is None:
            return cls()
        if not isinstance(raw, dict) or set(raw) - set(cls._SHAPES):
            raise ProtocolError("shm", "malformed shm_notes")
        for name, value in raw.items():
            length, check = cls._SHAPES[name]
            if not (isinstance(value, list) and len(value) == length and isinstance(value[0], str) and check(value[-1])):
                raise ProtocolError("shm", f"malformed shm note {name!r}")
        return cls(**raw)


class _Mapped:
    """The receiver's view of one peer's arena: its id and segments mapped read-only."""

    def __init__(self, aid: str) -> None:
        self.aid = aid
        self.maps: dict[int, mmap.mmap] = {}


class Shm:
    """One worker's shared-memory links: arenas it sends from, peers' arenas it reads from."""

    def __init__(self, job_id: str, index: int, gen: int = 0, enabled: bool = True,
                 cap_bytes: int = 1 << 30, min_bytes: int = 64 << 10, first_bytes: int = FIRST_SEGMENT,
                 host_budget: int | None = None, host_workers: int | None = None) -> None:
        """``cap_bytes``: at most this much for this worker's arenas; ``host_budget`` (bytes) and
        ``host_workers``: the budget of the job's workers on this host and how many they are
        (by default from the machine and the launcher, ``comm/shmbudget.py``)."""
        self.host = host_id() if enabled else None
        self.enabled = self.host is not None
        self.prefix = f"mariana-{job_id[:12]}-w{index}-{os.getpid()}"
        self.cap_bytes, self.min_bytes, self.first_bytes = cap_bytes, min_bytes, first_bytes
        self.limits = Budget(cap_bytes, host_budget, host_workers) if self.enabled else None
        self.budget = [self.limits.share if self.limits is not None else cap_bytes]  # [bytes left], every arena's
        self._bound_logged = False
        self._lock = threading.Lock()  # finalizers may run on any thread
        self.gen = gen
        self.superstep = 0  # set by ``begin``: the send-buffer contract check needs it
        self.pool = Pool(self.prefix) if self.enabled else None
        self.pool_maps: dict[int, tuple[str, dict[int, mmap.mmap]]] = {}  # {peer: (its pool id, mappings)}
        self.pool_acks: dict[int, list[list[Any]]] = {}
        self._pool_table: list | None = None
        self.zero_copy = 0
        self._reset()

    def _reset(self) -> None:
        self.arenas: dict[int, Arena] = {}
        self.off: set[int] = set()  # peers that refused (or failed): plain zmq frames only
        self.mapped: dict[int, _Mapped] = {}
        self.acks: dict[int, list[list[Any]]] = {}
        with self._lock:
            self.freed: dict[int, list[tuple[str, int, int]]] = {}

    def reset(self, gen: int) -> None:
        """A rollback to generation ``gen``: every arena and mapping of the old one goes."""
        self._close_arenas()
        self.gen = gen
        self._reset()
        if self.pool is not None:
            self.pool.renew(self.pool.peers)

    def begin(self, superstep: int) -> None:
        """Superstep ``superstep`` begins on this worker (its arenas give back memory left idle)."""
        self.superstep = superstep
        for arena in self.arenas.values():
            arena.trim(superstep)

    def _close_arenas(self) -> None:
        for arena in self.arenas.values():
            arena.close()
        self.arenas = {}

    def close(self) -> None:
        self._close_arenas()
        if self.pool is not None:
            self.pool.close()

    # -- sending ------------------------------------------------------------------------------
    def encode(self, peer: int, header: dict[str, Any]) -> tuple[list, int]:
        """``codec.encode(header)`` for ``peer``, big frames through its arena when it has one.

        Arrays then travel whole (one frame each): every frame above the codec's chunk size must
        find room, or the message is encoded in chunks for zmq as usual. Returns the frames and
        the bytes that went through shared memory.
        """
        pool = self.pool
        self.zero_copy = 0
        if not self.usable(peer) and not (pool is not None and pool.acked.get(peer)):
            frames = codec.encode(header)
            arena = self.arenas.get(peer)
            if self.enabled and (arena is None or not arena.segs) and peer not in self.off:
                big = [n for n in map(_nbytes, frames[1:]) if n >= self.min_bytes]
                if big:  # the first big frames for this peer: an arena, offered with the next part
                    self._arena(peer, max(big), 2 * sum(big))
            return frames, 0
        frames, table, placed = self.place(peer, codec.encode(header, chunk_bytes=WHOLE))
        if table is None and self._pool_table is None:
            if all(_nbytes(f) <= codec.DEFAULT_CHUNK_BYTES for f in frames[1:]):
                return frames, 0
            return codec.encode(header), 0
        # the same arrays in the same order: the same frame indices, one or two more keys
        extra: dict[str, Any] = {}
        if table is not None:
            extra["shm"] = table
        if self._pool_table is not None:
            extra["shm_pool"] = self._pool_table
        frames[0] = codec.encode({**header, **extra}, chunk_bytes=WHOLE)[0]
        return frames, placed

    def usable(self, peer: int) -> bool:
        arena = self.arenas.get(peer)
        return arena is not None and bool(arena.usable)

    def place(self, peer: int, frames: list) -> tuple[list, list | None, int]:
        """Copy the big buffer frames of a message for ``peer`` into its arena.

        Returns (frames with the copied ones emptied, the ``shm`` field, bytes copied). When a
        frame larger than the codec's chunk size finds no room, nothing is placed (None): the
        caller re-encodes the message in chunks for zmq.
        """
        arena = self.arenas.get(peer)
        self._pool_table = None
        self.zero_copy = 0  # bytes of the last placed message sent as pool descriptors
        pool = self.pool
        acked = pool.acked.get(peer) if pool is not None else None
        if (arena is None or not arena.usable) and not acked:
            return frames, None, 0
        out, total = list(frames), 0
        descs: list[list[int]] = []
        pooled: list[list[int]] = []
        for i in range(1, len(frames)):
            mv = memoryview(frames[i]).cast("B")
            n = mv.nbytes
            if n < self.min_bytes:
                continue
            if acked and pool is not None:
                addr = int(np.frombuffer(mv, np.uint8).ctypes.data)
                hit = pool.find(addr, n)
                if hit is not None and hit[0] in acked:  # a send buffer this peer maps: a descriptor, no copy
                    self._sent_from_pool(pool, addr, n)
                    out[i] = b""
                    pooled.append([i, hit[0], hit[1], n])
                    continue
            if arena is None or not arena.usable:
                if n > codec.DEFAULT_CHUNK_BYTES:
                    return frames, None, 0  # (no arena: nothing was placed in one)
                continue
            loc = arena.alloc(n)
            if loc is None:
                if not arena.growing:
                    try:
                        if not arena.grow(n):
                            self._bound_bites(arena)
                    except OSError as exc:
                        log.debug("shm: cannot grow the arena for peer %d: %s", peer, exc)
                if n > codec.DEFAULT_CHUNK_BYTES:
                    for _, s, off, _ in descs:
                        arena.release(s, off)
                    return frames, None, 0
                continue
            s, off = loc
            arena.write(s, off, mv)
            out[i] = b""
            descs.append([i, s, off, n])
            total += n
        if pooled and pool is not None:
            self._pool_table = [pool.pid, pooled]
            self.zero_copy = sum(d[3] for d in pooled)
        return out, ([arena.aid, descs] if descs and arena is not None else None), total

    def _sent_from_pool(self, pool: Pool, addr: int, n: int) -> None:
        """The contract check: the same bytes sent in two consecutive supersteps were (almost
        certainly) rewritten while a peer may still read them."""
        last = pool.last_sent.get(addr)
        if last is not None and last == self.superstep - 1:
            if not pool.reused:
                log.error("a send buffer (%d bytes) was sent in supersteps %d and %d: a vertex must not "
                          "rewrite what it sent before two supersteps later (Context.send_buffer)",
                          n, last, self.superstep)
            pool.reused += 1
        pool.last_sent[addr] = self.superstep

    def notes(self, peer: int) -> ShmNotes | None:
        """The notes for the next BATCH part to ``peer``: offers, acks, freed extents; None when
        there is nothing to say (the common case, asked for every part: an empty batch is then
        not sent at all, so the check builds nothing)."""
        offer = ack = pool_offer = pool_ack = freed_note = None
        arena = self.arenas.get(peer)
        if arena is not None and arena.offers:
            offer = [arena.aid, self.host, arena.offers]
            arena.offers = []
        acks = self.acks.pop(peer, None)
        mapped = self.mapped.get(peer)
        if acks and mapped is not None:
            ack = [mapped.aid, acks]
        pool = self.pool
        if pool is not None:  # (a peer that refused our arena refuses this too, and the segments go)
            offers = pool.offers(peer)
            if offers:
                pool_offer = [pool.pid, self.host, offers]
        packs = self.pool_acks.pop(peer, None)
        if packs and peer in self.pool_maps:
            pool_ack = [self.pool_maps[peer][0], packs]
        if self.freed:  # (appended by the thread that releases extents: popped under the lock)
            with self._lock:
                freed = self.freed.pop(peer, None)
            if freed and mapped is not None:
                regions = [[s, off] for aid, s, off in freed if aid == mapped.aid]
                if regions:
                    freed_note = [mapped.aid, regions]
        if offer is None and ack is None and pool_offer is None and pool_ack is None and freed_note is None:
            return None
        return ShmNotes(offer=offer, ack=ack, freed=freed_note, pool_offer=pool_offer, pool_ack=pool_ack)

    def _arena(self, peer: int, need: int, want: int) -> None:
        """An arena for ``peer`` with a first segment; one the bound left without any tries again
        at the next big frame (the budget may have room by then)."""
        arena = self.arenas.get(peer)
        if arena is None:
            arena = self.arenas[peer] = Arena(f"{self.prefix}-g{self.gen}-p{peer}", self.budget, self.first_bytes,
                                              self.limits)
            arena.superstep = self.superstep
        try:
            if not arena.grow(need, want):
                self._bound_bites(arena)
        except OSError as exc:
            log.debug("shm: cannot create a segment for peer %d, using zmq: %s", peer, exc)
            self._off(peer)

    def _bound_bites(self, arena: Arena) -> None:
        """Log once per worker that the bound on shared memory keeps frames on the socket."""
        if arena.bound is None or self._bound_logged:
            return
        self._bound_logged = True
        limits = self.limits
        why = (f"its share is used up ({limits.describe()})" if arena.bound == "share" or limits is None else
               f"the machine would keep less than {limits.reserve >> 20} MB available")
        log.info("shm: worker arenas bounded: %s; frames that find no room travel over the socket", why)

    def _off(self, peer: int) -> None:
        self.off.add(peer)
        arena = self.arenas.pop(peer, None)
        if arena is not None:
            arena.close()

    # -- receiving ----------------------------------------------------------------------------
    def notes_in(self, peer: int, raw: Any) -> None:
        """Apply the notes of a valid part from ``peer`` (a BATCH's ``shm_notes``, or a ``ShmNotes``);
        ``ProtocolError`` if malformed."""
        notes = raw if isinstance(raw, ShmNotes) else ShmNotes.from_wire(raw)
        if notes.offer is not None:
            self._map(peer, *notes.offer)
        if notes.pool_offer is not None:
            self._map_pool(peer, *notes.pool_offer)
        pool = self.pool
        if notes.pool_ack is not None and pool is not None and notes.pool_ack[0] == pool.pid:
            for seg, ok in notes.pool_ack[1]:
                if not 0 <= seg < len(pool.segs):
                    raise ProtocolError("shm", "shm note 'pool_ack' names no segment of the pool")
                pool.ack(peer, seg, ok)
        arena = self.arenas.get(peer)
        if notes.ack is not None and arena is not None and notes.ack[0] == arena.aid:
            for item in notes.ack[1]:
                if not 0 <= item[0] < len(arena.segs):
                    raise ProtocolError("shm", "shm note 'ack' names no segment of the arena")
                arena.acked(item[0], item[1])
                if not item[1]:
                    log.debug("shm: peer %d cannot map our segments; it gets zmq frames", peer)
                    self._off(peer)
                    break
        freed = notes.freed
        if freed is not None and arena is not None and freed[0] == arena.aid:
            for item in freed[1]:
                if item[0] < len(arena.segs):
                    arena.release(item[0], item[1])

    def _map(self, peer: int, aid: str, host: Any, segs: list) -> None:
        mapped = self.mapped.get(peer)
        if mapped is None or mapped.aid != aid:
            mapped = self.mapped[peer] = _Mapped(aid)
        acks = self.acks.setdefault(peer, [])
        for item in segs:
            if not (isinstance(item, list) and len(item) == 4 and type(item[0]) is int and isinstance(item[1], str)
                    and type(item[2]) is int and isinstance(item[3], str)):
                raise ProtocolError("shm", "malformed shm_offer segment")
            seg, name, size, token = item
            ok = False
            if self.enabled and host == self.host and SEGMENT_NAME.match(name) and name.startswith(aid + "-"):
                try:
                    mapped.maps[seg] = self._open(name, size, token)
                    ok = True
                except (OSError, ValueError) as exc:
                    log.debug("shm: cannot map %s from peer %d, using zmq: %s", name, peer, exc)
            acks.append([seg, ok])

    def _map_pool(self, peer: int, pid: str, host: Any, segs: list) -> None:
        """Map a peer's send-buffer pool segments (kept across rollbacks: the same pool id is the
        same process, whose mappings stay valid)."""
        known = self.pool_maps.get(peer)
        if known is None or known[0] != pid:  # a new pool (a new process): acks of the old one are void
            known = self.pool_maps[peer] = (pid, {})
            self.pool_acks.pop(peer, None)
        acks = self.pool_acks.setdefault(peer, [])
        for item in segs:
            if not (isinstance(item, list) and len(item) == 4 and type(item[0]) is int and isinstance(item[1], str)
                    and type(item[2]) is int and isinstance(item[3], str)):
                raise ProtocolError("shm", "malformed shm_pool_offer segment")
            seg, name, size, token = item
            ok = seg in known[1] and len(known[1][seg]) == size
            if not ok and self.enabled and host == self.host and POOL_NAME.match(name) and name.startswith(pid + "-"):
                try:
                    known[1][seg] = self._open(name, size, token)
                    ok = True
                except (OSError, ValueError) as exc:
                    log.debug("shm: cannot map pool segment %s from peer %d, copying: %s", name, peer, exc)
            acks.append([seg, ok])

    def _open(self, name: str, size: int, token: str) -> mmap.mmap:
        fd = os.open(os.path.join(SHM_DIR, name), os.O_RDONLY | os.O_NOFOLLOW)
        try:
            st = os.fstat(fd)
            if not (st.st_uid == os.getuid() and st.st_size == size and size > HEADER
                    and (st.st_mode & 0o170000) == 0o100000):
                raise ValueError("not a segment of this user of the offered size")
            mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        if mm[: len(token)] != token.encode():
            mm.close()
            raise ValueError("token mismatch")
        return mm

    def resolve(self, peer: int | None, frames: Sequence) -> list:
        """The frames of a received message with its shm frames as read-only views (zero copy).

        Each view is an owner array; when the last array built on it is collected, its extent is
        queued as freed for ``peer``. ``ProtocolError`` when a descriptor is bad.
        """
        table = codec.peek(frames[0], "shm")
        ptable = codec.peek(frames[0], "shm_pool")
        out = list(frames)
        if ptable is not None:
            self._resolve_pool(peer, ptable, out)
        if table is None:
            return out
        mapped = self.mapped.get(peer) if peer is not None else None
        if not (isinstance(table, list) and len(table) == 2 and isinstance(table[1], list)):
            raise ProtocolError("shm", "malformed shm table")
        if mapped is None or table[0] != mapped.aid:
            raise ProtocolError("shm", f"shm frames of arena {table[0]!r:.80} not mapped from peer {peer}")
        for d in table[1]:
            if not _ints(d, 4):
                raise ProtocolError("shm", "malformed shm descriptor")
            i, seg, off, n = d
            mm = mapped.maps.get(seg)
            if not (1 <= i < len(out)) or mm is None or off < HEADER or off + n > len(mm) or len(out[i]) != 0:
                raise ProtocolError("shm", f"bad shm descriptor {d}")
            owner = np.frombuffer(mm, np.uint8, count=n, offset=off)
            weakref.finalize(owner, self._freed, peer, mapped.aid, seg, off)
            out[i] = owner
        return out

    def _resolve_pool(self, peer: int | None, table: Any, out: list) -> None:
        """Read-only views of a peer's send buffers (no lease: the sender owns their lifetime)."""
        if not (isinstance(table, list) and len(table) == 2 and isinstance(table[1], list)):
            raise ProtocolError("shm", "malformed shm_pool table")
        known = self.pool_maps.get(peer) if peer is not None else None
        if known is None or table[0] != known[0]:
            raise ProtocolError("shm", f"send buffers of pool {table[0]!r:.80} not mapped from peer {peer}")
        for d in table[1]:
            if not _ints(d, 4):
                raise ProtocolError("shm", "malformed shm_pool descriptor")
            i, seg, off, n = d
            mm = known[1].get(seg)
            if not (1 <= i < len(out)) or mm is None or off < HEADER or off + n > len(mm) or len(out[i]) != 0:
                raise ProtocolError("shm", f"bad shm_pool descriptor {d}")
            out[i] = np.frombuffer(mm, np.uint8, count=n, offset=off)

    def _freed(self, peer: int, aid: str, seg: int, off: int) -> None:
        with self._lock:
            self.freed.setdefault(peer, []).append((aid, seg, off))
