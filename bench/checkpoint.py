#!/usr/bin/env python
"""Checkpoint write/read throughput vs raw numpy files, and checkpoint overhead on ``dnn-dp``.

    python bench/checkpoint.py            # 200 MB state, 3 repeats, dnn-dp (~1-2 min)
    python bench/checkpoint.py --quick    # 40 MB state, shorter dnn-dp runs (smoke, ~20 s)
    python bench/checkpoint.py --json     # one JSON object on stdout

Every figure comes from one run (one process):

1. A 200 MB state shaped like ``Partition.snapshot()`` (``{"worker", "vertices": {shard-i:
   {"value": float32, "lo", "hi", "updates", "state": {"v": float32}}}, "halted", "inbox"}``,
   twelve tensors of six sizes) written with ``Checkpoints(RunDir("file://TMP")).write_part`` (plus
   the small master part) + ``commit``, read back with ``inspect`` (sha256 verify) + ``read``;
   versus ``numpy.save`` of the same arrays into one file each + ``flush`` + ``os.fsync`` (write)
   and ``numpy.load`` (read). MB/s = array bytes / seconds for both, so engine/raw is the
   inverse time ratio (target >= 0.8, write and read). ``--repeat`` rounds, engine and raw
   alternating first; best and median reported. ``os.sync()`` before every timed write (no
   dirty pages of the previous round in the way). Reads are timed twice per round: *cold*
   after ``sync; echo 3 > /proc/sys/vm/drop_caches`` (needs root; whether it worked is checked
   with mincore() on the files and reported) and *warm* right after (page cache).
2. Where the time goes, on the same state: each step of ``pack`` (the msgpack walk, ``np.savez``
   into ``BytesIO`` and the zip CRC32 inside it, ``getvalue``), sha256, write()/fsync/replace,
   commit; on the read side the file reads (``inspect`` and ``read`` each read the whole part),
   sha256, ``np.load`` from ``BytesIO`` (zip CRC32 + 256 KiB chunk copies) and msgpack. Also
   two prototypes measured here (bench code, not package code) that show what a fix would buy:
   W1 = ``np.savez`` streamed straight into the temp file through a sha256-while-writing
   wrapper (same ``.npz`` format, readable by ``unpack``), R1 = one read + sha256 + ``unpack``,
   R2 = one read + sha256 + zero-copy ``np.frombuffer`` views of the stored zip members (the
   manifest's sha256 already covers every byte, so the zip CRC32 check is redundant).
3. ``dnn-dp`` on LocalRuntime (1 worker, ``data=digits``): default model ``epochs=5`` and a
   1024-1024 model (``steps=50``; ~22 MB checkpoint), each with ``checkpoint_every=0`` and
   ``10`` (median of ``--repeat``, interleaved), every run in a fresh ``file://`` run dir.
   Reported: engine wall (``RunResult.wall_s``) and ``run_job`` wall, the ratio, checkpoints
   written, checkpoint size, time per checkpoint (from the ``on_superstep`` stamps: the interval
   minus the superstep's own ``wall_s``, summed, minus the same sum of the run without
   checkpoints), the arrays inside one checkpoint (and how many bytes are stored twice), and a
   cProfile of one extra checkpointing run of the big model (snapshot / pack / sha256 /
   write+fsync / commit+prune).

OMP/OPENBLAS/MKL threads are forced to 1 before numpy is imported; OPENBLAS_CORETYPE and
OPENBLAS_L2_SIZE are printed (the checkpoint path does not go through BLAS). A first-touch probe
(MB/s of filling a fresh 200 MB allocation) is printed too: on VMs whose host reclaims free
guest memory, fresh pages cost page faults that every extra in-memory copy pays.
Progress goes to stderr, results to stdout.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"
BLAS_ENV = {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}

import argparse  # noqa: E402
import cProfile  # noqa: E402
import ctypes  # noqa: E402
import hashlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import pstats  # noqa: E402
import resource  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import struct  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
import zipfile  # noqa: E402
import zlib  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402
from typing import Any, Callable  # noqa: E402

import msgpack  # noqa: E402
import numpy as np  # noqa: E402

from mariana.jobs.launch import run_job  # noqa: E402
from mariana.storage.checkpoint import Checkpoints, pack, unpack  # noqa: E402
from mariana.storage.rundir import RunDir  # noqa: E402

TARGET = 0.8
MB = 1e6
BIG_MODEL = ["dense:1024:relu", "dense:1024:relu", "dense:10"]
_T0 = time.perf_counter()


def progress(msg: str) -> None:
    print(f"[{time.perf_counter() - _T0:6.1f}s] {msg}", file=sys.stderr, flush=True)


def minflt() -> int:
    """Minor page faults of this process so far (fresh anonymous or page-cache pages mapped in)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


# ---------------------------------------------------------------------------------------------
# Environment: page cache control and residency
# ---------------------------------------------------------------------------------------------
def drop_caches() -> bool:
    """sync + drop the whole page cache (root only, system-wide); False when the kernel refused."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def fadvise_out(paths: list[str]) -> bool:
    """Evict just these (fsynced, hence clean) files: POSIX_FADV_DONTNEED, no root needed."""
    try:
        for p in paths:
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        return True
    except (OSError, AttributeError):
        return False


EVICT = {"method": "fadvise"}


def evict(paths: list[str]) -> bool | None:
    """Make the next read of ``paths`` come from the disk (method per --evict); None: not tried."""
    if EVICT["method"] == "fadvise":
        return fadvise_out(paths)
    if EVICT["method"] == "drop_caches":
        return drop_caches()
    return None


def files_in(folder: str) -> list[str]:
    return [os.path.join(folder, n) for n in sorted(os.listdir(folder))]


_libc = None


def resident_fraction(path: str) -> float | None:
    """Share of the file's pages in the page cache (mmap + mincore), None if unavailable."""
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None, use_errno=True)
            _libc.mmap.restype = ctypes.c_void_p
            _libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                   ctypes.c_long]
            _libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
            _libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
        size = os.path.getsize(path)
        if size == 0:
            return 1.0
        page = os.sysconf("SC_PAGE_SIZE")
        fd = os.open(path, os.O_RDONLY)
        try:
            addr = _libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
            if addr in (None, ctypes.c_void_p(-1).value):
                return None
            try:
                pages = (size + page - 1) // page
                vec = (ctypes.c_ubyte * pages)()
                if _libc.mincore(addr, size, vec) != 0:
                    return None
                return sum(b & 1 for b in vec) / pages
            finally:
                _libc.munmap(addr, size)
        finally:
            os.close(fd)
    except (OSError, AttributeError):
        return None


def first_touch_mb_s(n_bytes: int = 200_000_000) -> float:
    t = time.perf_counter()
    a = np.empty(n_bytes, np.uint8)
    a.fill(1)
    dt = time.perf_counter() - t
    del a
    return n_bytes / MB / dt


def fs_of(path: str) -> str:
    """Device and filesystem type of the mount holding ``path`` (from /proc/mounts)."""
    best, desc = "", "unknown"
    try:
        with open("/proc/mounts") as f:
            for line in f:
                dev, mnt, fstype = line.split()[:3]
                if path.startswith(mnt) and len(mnt) > len(best):
                    best, desc = mnt, f"{dev} on {mnt} ({fstype})"
    except OSError:
        pass
    return desc


# ---------------------------------------------------------------------------------------------
# Figure 1: the state, engine write/read, raw write/read
# ---------------------------------------------------------------------------------------------
SHARES = (0.40, 0.25, 0.15, 0.10, 0.06, 0.04)


def make_state(total_bytes: int, seed: int = 0) -> dict[str, Any]:
    """A partition snapshot of parameter shards: value + momentum per shard, 6 sizes, float32."""
    rng = np.random.default_rng(seed)
    per_shard = total_bytes // 2 // 4  # float32 elements over value+v
    lo, vertices = 0, {}
    for i, share in enumerate(SHARES):
        n = int(per_shard * share)
        value = rng.standard_normal(n, dtype=np.float32)
        vertices[f"shard-{i:03d}"] = {"value": value, "lo": lo, "hi": lo + n, "updates": 123,
                                      "state": {"v": (value * np.float32(0.01))}}
        lo += n
    return {"worker": 0, "vertices": vertices, "halted": [], "inbox": []}


def arrays_of(obj: Any, path: str = "") -> list[tuple[str, np.ndarray]]:
    """Every array inside plain data, with its path, in pack()'s walk order."""
    if isinstance(obj, np.ndarray):
        return [(path, obj)]
    if isinstance(obj, dict):
        return [x for k, v in obj.items() for x in arrays_of(v, f"{path}/{k}")]
    if isinstance(obj, (list, tuple)):
        return [x for i, v in enumerate(obj) for x in arrays_of(v, f"{path}[{i}]")]
    return []


MASTER = {"coordinator": {"superstep": 0, "aggregates": {"loss": 0.5}, "broadcasts": {}, "active": 6,
                          "in_flight": 0}}


def engine_write(ck: Checkpoints, ss: int, state: dict[str, Any]) -> float:
    os.sync()
    t = time.perf_counter()
    parts = [ck.write_part(ss, "worker-0", state), ck.write_part(ss, "master", MASTER)]
    ck.commit(ss, parts, workers=1)
    return time.perf_counter() - t


def engine_read(ck: Checkpoints, ss: int) -> tuple[float, Any]:
    t = time.perf_counter()
    info = ck.inspect(ss)
    if not info.valid:
        raise RuntimeError(f"checkpoint {ss} not valid: {info.why}")
    state = ck.read(ss, "worker-0")
    ck.read(ss, "master")
    return time.perf_counter() - t, state


def raw_write(folder: str, arrays: list[np.ndarray]) -> float:
    os.makedirs(folder, exist_ok=True)
    os.sync()
    t = time.perf_counter()
    for i, a in enumerate(arrays):
        with open(os.path.join(folder, f"{i}.npy"), "wb") as f:
            np.save(f, a)
            f.flush()
            os.fsync(f.fileno())
    return time.perf_counter() - t


def raw_read(folder: str, n: int) -> tuple[float, list[np.ndarray]]:
    t = time.perf_counter()
    out = [np.load(os.path.join(folder, f"{i}.npy")) for i in range(n)]
    return time.perf_counter() - t, out


def throughput(root: str, state: dict[str, Any], repeat: int) -> dict[str, Any]:
    named = arrays_of(state)
    arrays = [a for _, a in named]
    payload = sum(a.nbytes for a in arrays)
    url = "file://" + os.path.join(root, "engine")
    ck = Checkpoints(RunDir(url))
    rows: list[dict[str, Any]] = []
    ev = {"method": EVICT["method"], "accepted": None, "resident_after_evict": []}
    back: Any = None
    raw_back: Any = None
    for r in range(repeat + 1):  # round 0 warms up (first-touch of buffers, imports); not counted
        ss = r + 1
        raw_dir = os.path.join(root, f"raw-{ss}")
        row: dict[str, Any] = {"round": r}
        order = ("engine", "raw") if r % 2 == 0 else ("raw", "engine")
        for who in order:
            f0 = minflt()
            if who == "engine":
                row["engine_write_s"] = engine_write(ck, ss, state)
            else:
                row["raw_write_s"] = raw_write(raw_dir, arrays)
            row[f"{who}_write_faults"] = minflt() - f0
        ck_dir = os.path.join(ck.run_dir.root, ck.folder(ss))
        part_path = os.path.join(ck_dir, "worker-0.npz")
        row["engine_file_bytes"] = os.path.getsize(part_path)
        for who in order:
            files = files_in(ck_dir) if who == "engine" else files_in(raw_dir)
            ok = evict(files)
            if ok is not None:
                ev["accepted"] = ok if ev["accepted"] is None else (ev["accepted"] and ok)
            res = resident_fraction(part_path if who == "engine" else files[0])
            if res is not None:
                ev["resident_after_evict"].append(round(res, 4))
            f0 = minflt()  # every timed read starts with its previous result freed
            if who == "engine":
                back = None
                row["engine_read_cold_s"], back = engine_read(ck, ss)
                back = None
                f1 = minflt()
                row["engine_read_warm_s"], back = engine_read(ck, ss)
            else:
                raw_back = None
                row["raw_read_cold_s"], raw_back = raw_read(raw_dir, len(arrays))
                raw_back = None
                f1 = minflt()
                row["raw_read_warm_s"], raw_back = raw_read(raw_dir, len(arrays))
            row[f"{who}_read_cold_faults"], row[f"{who}_read_warm_faults"] = f1 - f0, minflt() - f1
        if r == 0:  # round trip check, outside the timings
            got = [a for _, a in arrays_of(back)]
            row["engine_roundtrip_ok"] = len(got) == len(arrays) and all(
                np.array_equal(a, b) for a, b in zip(arrays, got))
            row["raw_roundtrip_ok"] = all(np.array_equal(a, b) for a, b in zip(arrays, raw_back))
        back = raw_back = None
        shutil.rmtree(ck_dir, ignore_errors=True)
        shutil.rmtree(raw_dir, ignore_errors=True)
        rows.append(row)
        progress(f"  round {r}{' (warm-up)' if r == 0 else ''}: write engine {row['engine_write_s']:.3f}s "
                 f"raw {row['raw_write_s']:.3f}s | cold read engine {row['engine_read_cold_s']:.3f}s "
                 f"raw {row['raw_read_cold_s']:.3f}s | warm read engine {row['engine_read_warm_s']:.3f}s "
                 f"raw {row['raw_read_warm_s']:.3f}s")
    timed_rows = rows[1:]
    figs: dict[str, Any] = {}
    for kind in ("write", "read_cold", "read_warm"):
        e = [payload / MB / row[f"engine_{kind}_s"] for row in timed_rows]
        w = [payload / MB / row[f"raw_{kind}_s"] for row in timed_rows]
        figs[kind] = {"engine_mb_s": {"best": max(e), "median": statistics.median(e), "all": e},
                      "raw_mb_s": {"best": max(w), "median": statistics.median(w), "all": w},
                      "ratio_best": max(e) / max(w), "ratio_median": statistics.median(e) / statistics.median(w),
                      "ratio_per_round": [a / b for a, b in zip(e, w)],
                      "faults": {who: statistics.median(row[f"{who}_{kind}_faults"] for row in timed_rows)
                                 for who in ("engine", "raw")}}
    return {"payload_bytes": payload, "tensors": [[p, int(a.size), str(a.dtype)] for p, a in named],
            "engine_file_bytes": rows[0]["engine_file_bytes"], "rounds": rows, "figures": figs, "evict": ev,
            "roundtrip_ok": rows[0]["engine_roundtrip_ok"] and rows[0]["raw_roundtrip_ok"]}


# ---------------------------------------------------------------------------------------------
# Figure 2: where the time goes, and prototypes of the fixes
# ---------------------------------------------------------------------------------------------
def walk_like_pack(obj: Any, arrays: dict[str, np.ndarray]) -> Any:
    """Same walk as checkpoint.pack (array -> {"__npy__": name})."""
    if isinstance(obj, np.ndarray):
        name = f"a{len(arrays)}"
        arrays[name] = obj
        return {"__npy__": name}
    if isinstance(obj, dict):
        return {k: walk_like_pack(x, arrays) for k, x in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [walk_like_pack(x, arrays) for x in obj]
    return obj


def revive(meta: Any, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(meta, dict):
        if len(meta) == 1 and "__npy__" in meta:
            return arrays[meta["__npy__"]]
        return {k: revive(x, arrays) for k, x in meta.items()}
    if isinstance(meta, list):
        return [revive(x, arrays) for x in meta]
    return meta


class HashingWriter:
    """Write-through file wrapper that sha256-hashes what it writes; unseekable, so zipfile
    streams (data descriptors) and the hash is the hash of the file."""

    def __init__(self, f: Any) -> None:
        self.f, self.h, self.n = f, hashlib.sha256(), 0

    def write(self, b: Any) -> int:
        mv = memoryview(b)
        self.h.update(mv)
        self.n += mv.nbytes
        return self.f.write(mv)

    def tell(self) -> int:
        return self.n

    def seek(self, *a: Any) -> int:
        raise OSError("not seekable")

    def read(self, *a: Any) -> bytes:  # numpy's zipfile_factory wants a file-like object with read
        raise io.UnsupportedOperation("write-only")

    def flush(self) -> None:
        self.f.flush()


def proto_stream_write(path: str, state: Any) -> tuple[int, str]:
    """W1: pack() streamed into the temp file with sha256 while writing, fsync, replace."""
    arrays: dict[str, np.ndarray] = {}
    meta = msgpack.packb(walk_like_pack(state, arrays), use_bin_type=True)
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    with open(tmp, "wb") as f:
        hw = HashingWriter(f)
        np.savez(hw, __meta__=np.frombuffer(meta, dtype=np.uint8), **arrays)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return hw.n, hw.h.hexdigest()


def proto_raw_stream_write(path: str, state: Any) -> tuple[int, str]:
    """W2 (format change): msgpack meta + one .npy header and the raw bytes per array, written
    straight from the arrays' buffers (no zip, no CRC32, no copies) while a thread computes the
    sha256 of the same byte sequence (hashlib releases the GIL); fsync; replace."""
    arrays: dict[str, np.ndarray] = {}
    meta = msgpack.packb(walk_like_pack(state, arrays), use_bin_type=True)
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    h = hashlib.sha256()
    n = 0
    with ThreadPoolExecutor(1) as pool, open(tmp, "wb") as f:
        def put(b: Any) -> None:
            nonlocal n
            mv = memoryview(b).cast("B")
            pool.submit(h.update, mv)  # one worker: hashed in write order
            f.write(mv)
            n += mv.nbytes

        put(struct.pack("<Q", len(meta)))
        put(meta)
        for a in arrays.values():
            a = np.ascontiguousarray(a)
            hb = io.BytesIO()
            np.lib.format.write_array_header_2_0(hb, np.lib.format.header_data_from_array_1_0(a))
            put(hb.getvalue())
            put(a)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return n, h.hexdigest()


def read_overlapped(path: str, chunk: int = 16 << 20) -> tuple[np.ndarray, str]:
    """The whole file into one numpy buffer, sha256 of chunk k on a thread while chunk k+1 is read."""
    size = os.path.getsize(path)
    buf = np.empty(size, np.uint8)  # numpy asks for transparent huge pages: few page faults
    mv = memoryview(buf)
    h = hashlib.sha256()
    with ThreadPoolExecutor(1) as pool, open(path, "rb", buffering=0) as f:
        for off in range(0, size, chunk):
            end = min(size, off + chunk)
            got = off
            while got < end:
                k = f.readinto(mv[got:end])
                if not k:
                    raise OSError("short read")
                got += k
            pool.submit(h.update, mv[off:end])
    return buf, h.hexdigest()


def npz_views(buf: Any, zip_source: Any = None) -> dict[str, np.ndarray]:
    """Zero-copy views of the members of a ZIP_STORED .npz held in ``buf`` (no CRC check); the
    zip directory is parsed from ``zip_source`` (the file) when given, else from ``buf``."""
    out = {}
    with zipfile.ZipFile(zip_source if zip_source is not None else io.BytesIO(buf)) as zf:
        for zi in zf.infolist():
            if zi.compress_type != zipfile.ZIP_STORED:
                raise ValueError("compressed member")
            h = zi.header_offset
            fn_len, extra_len = struct.unpack_from("<HH", buf, h + 26)
            start = h + 30 + fn_len + extra_len
            hdr = io.BytesIO(bytes(buf[start:start + 65536]))
            version = np.lib.format.read_magic(hdr)
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            shape, fortran, dtype = read_header(hdr)
            count = int(np.prod(shape, dtype=np.int64))
            a = np.frombuffer(buf, dtype=dtype, count=count, offset=start + hdr.tell())
            out[zi.filename[:-4]] = a.reshape(shape, order="F" if fortran else "C")
    return out


def proto_read_views(path: str, sha: str) -> Any:
    """R2: one read, sha256 check, zero-copy member views, msgpack."""
    with open(path, "rb") as f:
        data = f.read()
    if hashlib.sha256(data).hexdigest() != sha:
        raise RuntimeError("sha256 mismatch")
    arrays = npz_views(data)
    meta = msgpack.unpackb(arrays.pop("__meta__").tobytes(), raw=False, strict_map_key=False)
    return revive(meta, arrays)


def proto_read_overlapped(path: str, sha: str) -> Any:
    """R3: R2 with the sha256 overlapped with the read (chunks on a thread)."""
    data, digest = read_overlapped(path)
    if digest != sha:
        raise RuntimeError("sha256 mismatch")
    arrays = npz_views(data, path)
    meta = msgpack.unpackb(arrays.pop("__meta__").tobytes(), raw=False, strict_map_key=False)
    return revive(meta, arrays)


def breakdown(root: str, state: dict[str, Any], repeat: int) -> dict[str, Any]:
    """Each step of the write and read paths on ``state``, best of ``repeat`` (seconds)."""
    payload = sum(a.nbytes for _, a in arrays_of(state))
    rd = RunDir("file://" + os.path.join(root, "parts"))
    ck = Checkpoints(RunDir("file://" + os.path.join(root, "ck")))
    best: dict[str, float] = {}

    def keep(name: str, secs: float) -> None:
        best[name] = min(secs, best.get(name, float("inf")))

    info: dict[str, Any] = {}
    for r in range(repeat):
        arrays: dict[str, np.ndarray] = {}
        t, meta = timed(lambda: msgpack.packb(walk_like_pack(state, arrays), use_bin_type=True))
        keep("w.walk_msgpack", t)
        buf = io.BytesIO()
        t, _ = timed(lambda: np.savez(buf, __meta__=np.frombuffer(meta, dtype=np.uint8), **arrays))
        keep("w.savez_bytesio", t)
        t, _ = timed(lambda: [zlib.crc32(memoryview(a).cast("B")) for a in arrays.values()])
        keep("w.crc32_alone", t)
        t, data = timed(buf.getvalue)
        keep("w.getvalue", t)
        buf = data = None  # free before the next step
        t, data = timed(lambda: pack(state))
        keep("w.pack_total", t)
        t, sha = timed(lambda: hashlib.sha256(data).hexdigest())
        keep("w.sha256", t)
        # _write_whole, step by step (same calls)
        path = rd.path(f"split-{r}.npz")
        tmp = path + ".tmp"
        os.sync()
        t0 = time.perf_counter()
        f = open(tmp, "wb")
        f.write(data)
        f.flush()
        t1 = time.perf_counter()
        os.fsync(f.fileno())
        t2 = time.perf_counter()
        f.close()
        os.replace(tmp, path)
        t3 = time.perf_counter()
        keep("w.file_write", t1 - t0)
        keep("w.fsync", t2 - t1)
        keep("w.close_replace", t3 - t2)
        os.sync()
        t, _ = timed(lambda: rd.write_bytes(f"real-{r}.npz", data))
        keep("w.write_bytes_total", t)
        os.sync()
        ss = r + 1
        t, part = timed(lambda: ck.write_part(ss, "worker-0", state))
        keep("w.write_part_total", t)
        t, _ = timed(lambda: ck.commit(ss, [part], workers=1))
        keep("w.commit", t)
        os.sync()
        t, (n_w1, sha_w1) = timed(lambda: proto_stream_write(rd.path(f"w1-{r}.npz"), state))
        keep("w.proto_W1_stream_hash", t)
        os.sync()
        t, (n_w2, sha_w2) = timed(lambda: proto_raw_stream_write(rd.path(f"w2-{r}.bin"), state))
        keep("w.proto_W2_raw_stream_thread_hash", t)
        if r == 0:
            info["w2_sha_matches_file"] = hashlib.sha256(open(rd.path("w2-0.bin"), "rb").read()).hexdigest() == sha_w2
        if r == 0:
            w1_back = unpack(open(rd.path("w1-0.npz"), "rb").read())
            info["w1_file_bytes"] = n_w1
            info["w1_sha_matches_file"] = hashlib.sha256(open(rd.path("w1-0.npz"), "rb").read()).hexdigest() == sha_w1
            info["w1_unpack_ok"] = all(np.array_equal(a, b) for (_, a), (_, b)
                                       in zip(arrays_of(state), arrays_of(w1_back)))
            del w1_back
        # read side
        part_file = os.path.join(ck.run_dir.root, ck.folder(ss), "worker-0.npz")
        for temp in ("cold", "warm"):
            if temp == "cold":
                evict([part_file])
            t, got = timed(lambda: ck.run_dir.read_bytes(f"{ck.folder(ss)}/worker-0.npz"))
            keep(f"r.{temp}.cat_file", t)
            got = None
        t, got = timed(lambda: ck.run_dir.read_bytes(f"{ck.folder(ss)}/worker-0.npz"))
        t, _ = timed(lambda: hashlib.sha256(got).hexdigest())
        keep("r.sha256", t)
        t, npz = timed(lambda: (lambda z: {k: z[k] for k in z.files})(np.load(io.BytesIO(got), allow_pickle=False)))
        keep("r.npload_bytesio", t)
        t, _ = timed(lambda: msgpack.unpackb(npz["__meta__"].tobytes(), raw=False, strict_map_key=False))
        keep("r.msgpack", t)
        npz = None
        t, _ = timed(lambda: unpack(got))
        keep("r.unpack_total", t)
        got = None
        for temp in ("cold", "warm"):
            if temp == "cold":
                evict([part_file])
            t, _ = timed(lambda: ck.inspect(ss))
            keep(f"r.{temp}.inspect_total", t)
            t, _ = timed(lambda: ck.read(ss, "worker-0"))
            keep(f"r.{temp}.read_total_after_inspect", t)
            if temp == "cold":
                evict([part_file])

            def r1() -> Any:
                with open(part_file, "rb") as f:
                    d = f.read()
                if hashlib.sha256(d).hexdigest() != part["sha256"]:
                    raise RuntimeError("sha256")
                return unpack(d)

            t, _ = timed(r1)
            keep(f"r.{temp}.proto_R1_one_read", t)
            if temp == "cold":
                evict([part_file])
            t, back = timed(lambda: proto_read_views(part_file, part["sha256"]))
            keep(f"r.{temp}.proto_R2_views", t)
            if r == 0 and temp == "warm":
                info["r2_ok"] = all(np.array_equal(a, b) for (_, a), (_, b) in zip(arrays_of(state), arrays_of(back)))
            back = None
            if temp == "cold":
                evict([part_file])
            t, back = timed(lambda: proto_read_overlapped(part_file, part["sha256"]))
            keep(f"r.{temp}.proto_R3_views_overlapped_sha", t)
            if r == 0 and temp == "warm":
                info["r3_ok"] = all(np.array_equal(a, b) for (_, a), (_, b) in zip(arrays_of(state), arrays_of(back)))
            back = None
        for name in os.listdir(rd.root):
            os.unlink(os.path.join(rd.root, name))
        shutil.rmtree(os.path.join(ck.run_dir.root, ck.folder(ss)), ignore_errors=True)
    progress("  breakdown done")
    return {"payload_bytes": payload, "best_s": best, "mb_s": {k: payload / MB / v for k, v in best.items() if v > 0},
            **info}


# ---------------------------------------------------------------------------------------------
# Figure 3: dnn-dp with and without checkpoints
# ---------------------------------------------------------------------------------------------
def dnn_run(root: str, sets: list[str], every: int, profile: bool = False) -> dict[str, Any]:
    url = "file://" + tempfile.mkdtemp(prefix="run-", dir=root)
    stamps: list[float] = []
    walls: list[float] = []
    marks: list[bool] = []

    def on_ss(rec: dict[str, Any]) -> None:
        stamps.append(time.perf_counter())
        walls.append(rec["wall_s"])
        marks.append("checkpoint" in rec)

    prof = cProfile.Profile() if profile else None
    rd = RunDir(url)
    t = time.perf_counter()
    if prof:
        prof.enable()
    res = run_job("dnn-dp", sets=sets + [f"checkpoint_every={every}"], workers=1, runtime="local", run_dir=rd,
                  on_superstep=on_ss)
    if prof:
        prof.disable()
    total = time.perf_counter() - t
    # time between callbacks not spent computing: checkpointing + metrics.jsonl + bookkeeping
    outside = [stamps[i] - stamps[i - 1] - walls[i] for i in range(1, len(stamps))]
    out: dict[str, Any] = {"run_job_s": total, "engine_s": res.wall_s, "supersteps": res.supersteps,
                           "checkpoints": sum(marks), "outside_compute_s": sum(outside),
                           "outside_at_checkpoints_s": sum(o for o, m in zip(outside, marks[1:]) if m)}
    ck = Checkpoints(rd)
    newest = ck.newest_valid() if every else None
    if newest is not None:
        man = ck.manifest(newest.superstep)
        out["checkpoint_bytes"] = sum(p["bytes"] for p in man["parts"])
        state = ck.read(newest.superstep, "worker-0")
        named = arrays_of(state)
        out["arrays"] = [[p, list(a.shape), str(a.dtype), int(a.nbytes)] for p, a in named]
        out["array_bytes"] = sum(a.nbytes for _, a in named)
        seen: dict[tuple[str, str], str] = {}
        dups = []
        for p, a in named:
            if a.nbytes < 1024:
                continue
            key = (hashlib.sha256(a.tobytes()).hexdigest(), f"{a.dtype}{a.shape}")
            if key in seen:
                dups.append([p, seen[key], int(a.nbytes)])
            else:
                seen[key] = p
        out["duplicate_arrays"] = dups
        out["duplicate_bytes"] = sum(d[2] for d in dups)
    if prof:
        out["profile"] = profile_summary(pstats.Stats(prof), total)
    shutil.rmtree(rd.root, ignore_errors=True)
    return out


PROFILE_ROWS = (
    # label, match on (file suffix or "~" for builtins, function name substring), use cumtime
    ("write_checkpoint (all)", "engine/local.py", "write_checkpoint"),
    ("  Partition.snapshot", "engine/superstep.py", "snapshot"),
    ("  Checkpoints.write_part", "storage/checkpoint.py", "write_part"),
    ("    pack", "storage/checkpoint.py", "pack"),
    ("      msgpack.packb", "msgpack/__init__.py", "packb"),
    ("      np.savez -> BytesIO", "_npyio_impl.py", "_savez"),
    ("        zlib.crc32", "~", "zlib.crc32"),
    ("        ndarray.tobytes (16 MiB chunks)", "~", "'tobytes'"),
    ("        BytesIO.write", "~", "of '_io.BytesIO'"),
    ("      BytesIO.getvalue", "~", "'getvalue'"),
    ("    sha256", "~", "sha256"),
    ("    RunDir.write_bytes (write+fsync+replace)", "storage/rundir.py", "_write_whole"),
    ("      file write()", "~", "of '_io.BufferedWriter'"),
    ("      os.fsync", "~", "posix.fsync"),
    ("  Checkpoints.commit (manifest + prune)", "storage/checkpoint.py", "commit"),
    ("    prune", "storage/checkpoint.py", "prune"),
)


def profile_summary(stats: pstats.Stats, total: float) -> dict[str, Any]:
    rows = []
    for label, fsuffix, fname in PROFILE_ROWS:
        cum = 0.0
        calls = 0
        for (file, _line, func), (cc, nc, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
            if (fsuffix == "~" and file == "~" and fname in func) or \
                    (fsuffix != "~" and file.endswith(fsuffix) and func == fname):
                cum += ct
                calls += nc
        rows.append([label, cum, calls])
    return {"run_s_under_profile": total, "rows": rows}


def dnn_figures(root: str, configs: list[tuple[str, list[str]]], repeat: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label, sets in configs:
        runs: dict[int, list[dict[str, Any]]] = {0: [], 10: []}
        for r in range(repeat):
            for every in ((0, 10) if r % 2 == 0 else (10, 0)):
                runs[every].append(dnn_run(root, sets, every))
        off, on = runs[0], runs[10]
        med = lambda rs, k: statistics.median(x[k] for x in rs)  # noqa: E731
        n_ck = on[0]["checkpoints"]
        per_ck = (med(on, "outside_compute_s") - med(off, "outside_compute_s")) / max(1, n_ck)
        fig = {"sets": sets, "supersteps": on[0]["supersteps"], "checkpoints": n_ck,
               "engine_s_off": med(off, "engine_s"), "engine_s_on": med(on, "engine_s"),
               "run_job_s_off": med(off, "run_job_s"), "run_job_s_on": med(on, "run_job_s"),
               "checkpoint_bytes": on[0].get("checkpoint_bytes"), "array_bytes": on[0].get("array_bytes"),
               "arrays": on[0].get("arrays"), "duplicate_arrays": on[0].get("duplicate_arrays"),
               "duplicate_bytes": on[0].get("duplicate_bytes"), "per_checkpoint_s": per_ck,
               "runs_off": [{k: v for k, v in x.items() if k != "arrays"} for x in off],
               "runs_on": [{k: v for k, v in x.items() if k not in ("arrays", "duplicate_arrays")} for x in on]}
        fig["ratio_engine"] = fig["engine_s_on"] / fig["engine_s_off"]
        fig["ratio_run_job"] = fig["run_job_s_on"] / fig["run_job_s_off"]
        fig["checkpoint_share_of_on"] = 1 - fig["engine_s_off"] / fig["engine_s_on"]
        if fig["checkpoint_bytes"] and per_ck > 0:
            fig["checkpoint_mb_s"] = fig["checkpoint_bytes"] / MB / per_ck
        out[label] = fig
        progress(f"  dnn-dp {label}: off {fig['engine_s_off']:.3f}s on {fig['engine_s_on']:.3f}s "
                 f"(x{fig['ratio_engine']:.2f}), {n_ck} checkpoints of {(fig['checkpoint_bytes'] or 0) / MB:.2f} MB, "
                 f"{per_ck * 1e3:.1f} ms each")
    return out


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------
def report(res: dict[str, Any]) -> str:
    L: list[str] = []
    e = res["env"]
    L.append("== environment")
    L.append(f"python {e['python']}  numpy {e['numpy']}  msgpack {e['msgpack']}  cpus {e['cpus']}  "
             f"OMP/OPENBLAS/MKL_NUM_THREADS=1  OPENBLAS_CORETYPE={e['OPENBLAS_CORETYPE']}  "
             f"OPENBLAS_L2_SIZE={e['OPENBLAS_L2_SIZE']}")
    L.append(f"temp dir {e['tmp']} : {e['fs']}")
    L.append(f"first-touch of a fresh 200 MB buffer: {', '.join(f'{x:.0f}' for x in e['first_touch_mb_s'])} MB/s")
    t = res["throughput"]
    d = t["evict"]
    L.append(f"cold reads: eviction method {d['method']}, accepted={d['accepted']}; resident share of the first "
             f"file right after eviction (mincore): {d['resident_after_evict'] or 'n/a'}")
    if e.get("drop_caches_probe") is not None:
        L.append(f"echo 3 > /proc/sys/vm/drop_caches: {'works' if e['drop_caches_probe'] else 'refused'} "
                 f"(resident share of a probe file after it: {e.get('drop_caches_resident')})")
    L.append(f"load average at start {e['loadavg_start']}, at end {e.get('loadavg_end')}  "
             "(cpus shared with other work make every figure noisier; compare best figures)")
    L.append("")
    L.append(f"== 1. checkpoint of a {t['payload_bytes'] / MB:.0f} MB state ({len(t['tensors'])} float32 tensors, "
             f"{min(x[1] for x in t['tensors']) * 4 / MB:.1f}-{max(x[1] for x in t['tensors']) * 4 / MB:.1f} MB), "
             f"part file {t['engine_file_bytes'] / MB:.1f} MB, {len(t['rounds']) - 1} rounds after a warm-up; "
             "MB/s of array bytes")
    L.append(f"{'':24s}{'engine best':>12s}{'median':>9s}{'raw best':>10s}{'median':>9s}"
             f"{'ratio best':>12s}{'median':>8s}  target {TARGET}")
    names = {"write": "write (+fsync)", "read_cold": "read, cold cache", "read_warm": "read, page cache"}
    for k, f in t["figures"].items():
        ok = "ok" if f["ratio_median"] >= TARGET else "MISSED"
        L.append(f"{names[k]:24s}{f['engine_mb_s']['best']:12.0f}{f['engine_mb_s']['median']:9.0f}"
                 f"{f['raw_mb_s']['best']:10.0f}{f['raw_mb_s']['median']:9.0f}"
                 f"{f['ratio_best']:12.2f}{f['ratio_median']:8.2f}  {ok}")
    L.append("  minor page faults per operation (median; a fresh 4 KiB page each for bytes/BytesIO buffers, "
             "numpy arrays get 2 MiB THP): " + "  ".join(
                 f"{names[k]}: engine {f['faults']['engine']:.0f}, raw {f['faults']['raw']:.0f}"
                 for k, f in t["figures"].items()))
    L.append("  engine/raw per round: " + "  ".join(
        f"{names[k].split(',')[0].split(' ')[0]}{'' if k == 'write' else ' ' + k.split('_')[1]} "
        + " ".join(f"{x:.2f}" for x in f["ratio_per_round"]) for k, f in t["figures"].items()))
    L.append("  per round (s, round 0 = warm-up, not counted): " + "; ".join(
        f"w {r['engine_write_s']:.2f}/{r['raw_write_s']:.2f} rc {r['engine_read_cold_s']:.2f}/"
        f"{r['raw_read_cold_s']:.2f} rw {r['engine_read_warm_s']:.2f}/{r['raw_read_warm_s']:.2f}"
        for r in t["rounds"]) + "  (engine/raw)")
    L.append(f"  round trip equal: {t['roundtrip_ok']}")
    L.append("")
    b = res["breakdown"]
    s = b["best_s"]
    pay = b["payload_bytes"] / MB
    L.append(f"== 2. where the time goes ({pay:.0f} MB, best of {res['args']['repeat']}; s and MB/s)")

    def row(label: str, key: str, note: str = "") -> None:
        if key in s:
            L.append(f"  {label:46s}{s[key]:8.3f} s {pay / s[key]:8.0f} MB/s  {note}")

    L.append(" write path")
    row("pack() total", "w.pack_total")
    row("  walk + msgpack.packb (meta)", "w.walk_msgpack")
    row("  np.savez into BytesIO", "w.savez_bytesio")
    row("    zlib.crc32 over the arrays (alone)", "w.crc32_alone", "(inside savez: zip CRC)")
    row("  BytesIO.getvalue()", "w.getvalue")
    row("sha256(data)", "w.sha256")
    row("file write() of the blob", "w.file_write")
    row("fsync", "w.fsync")
    row("close + os.replace", "w.close_replace")
    row("RunDir.write_bytes() total", "w.write_bytes_total")
    row("write_part() total (pack+write+sha)", "w.write_part_total")
    row("commit() (manifest+fsync, prune)", "w.commit")
    row("proto W1: savez streamed to file + sha256", "w.proto_W1_stream_hash", "(+fsync+replace; same .npz)")
    row("proto W2: raw stream, sha256 on a thread", "w.proto_W2_raw_stream_thread_hash", "(+fsync+replace; no zip)")
    L.append(" read path")
    row("cat_file, cold cache", "r.cold.cat_file")
    row("cat_file, page cache", "r.warm.cat_file")
    row("sha256(data)", "r.sha256")
    row("np.load(BytesIO) all members", "r.npload_bytesio", "(zip CRC + 256 KiB chunk copies)")
    row("msgpack.unpackb(meta)", "r.msgpack")
    row("unpack() total", "r.unpack_total")
    for temp in ("cold", "warm"):
        row(f"inspect() ({temp})", f"r.{temp}.inspect_total", "(reads the whole part + sha256)")
        row(f"read() after inspect ({temp})", f"r.{temp}.read_total_after_inspect", "(reads it again + unpack)")
        row(f"proto R1: one read + sha + unpack ({temp})", f"r.{temp}.proto_R1_one_read")
        row(f"proto R2: one read + sha + views ({temp})", f"r.{temp}.proto_R2_views")
        row(f"proto R3: numpy buffer, sha overlapped ({temp})", f"r.{temp}.proto_R3_views_overlapped_sha")
    L.append(f"  prototype checks: W1 unpack ok {b.get('w1_unpack_ok')}, W1 sha == file sha "
             f"{b.get('w1_sha_matches_file')}, W2 sha == file sha {b.get('w2_sha_matches_file')}, "
             f"R2 equal {b.get('r2_ok')}, R3 equal {b.get('r3_ok')}")
    L.append("")
    L.append("== 3. dnn-dp on LocalRuntime (1 worker, digits), checkpoint_every=10 vs 0, median of "
             f"{res['args']['repeat']}")
    for label, f in res["dnn"].items():
        L.append(f" {label}: {' '.join(f['sets'])}  ({f['supersteps']} supersteps)")
        L.append(f"  engine wall  off {f['engine_s_off']:.3f} s  on {f['engine_s_on']:.3f} s  ratio "
                 f"{f['ratio_engine']:.2f}  (checkpointing = {f['checkpoint_share_of_on'] * 100:.0f}% of the run)")
        L.append(f"  run_job wall off {f['run_job_s_off']:.3f} s  on {f['run_job_s_on']:.3f} s  ratio "
                 f"{f['ratio_run_job']:.2f}")
        L.append(f"  {f['checkpoints']} checkpoints of {(f['checkpoint_bytes'] or 0) / MB:.2f} MB "
                 f"(arrays {(f['array_bytes'] or 0) / MB:.2f} MB), {f['per_checkpoint_s'] * 1e3:.1f} ms each"
                 + (f" = {f['checkpoint_mb_s']:.0f} MB/s" if f.get("checkpoint_mb_s") else ""))
        if f.get("arrays"):
            L.append("  arrays: " + ", ".join(f"{path.replace('/vertices/', '')} {nbytes / MB:.2f} MB"
                                          for path, _shape, _dtype, nbytes in f["arrays"]))
        if f.get("duplicate_arrays"):
            L.append(f"  equal contents stored twice ({f['duplicate_bytes'] / MB:.2f} MB = "
                     f"{f['duplicate_bytes'] / f['array_bytes'] * 100:.0f}% of the arrays): "
                     + "; ".join(f"{a} == {b}" for a, b, _ in f["duplicate_arrays"]))
    for plabel, p in res.get("profile", {}).items():
        n = max(1, p["rows"][0][2])
        L.append(f" cProfile of one checkpoint_every=10 run, {plabel} (run {p['run_s_under_profile']:.2f} s under "
                 f"the profiler): cumulative s, calls, ms per checkpoint ({n} checkpoints)")
        for label, cum, calls in p["rows"]:
            L.append(f"  {label:48s}{cum:8.3f}{calls:7d}{cum / n * 1e3:9.1f}")
    L.append("")
    L.append(f"total bench time {res['bench_s']:.0f} s")
    return "\n".join(L)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="40 MB state, short dnn-dp runs")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    ap.add_argument("--size-mb", type=float, default=None, help="state size (default 200, quick 40)")
    ap.add_argument("--repeat", type=int, default=3, help="rounds per figure (best and median)")
    ap.add_argument("--dir", default=None, help="where the temp dirs go (default: tempfile's)")
    ap.add_argument("--evict", choices=("fadvise", "drop_caches", "none"), default="fadvise",
                    help="how cold reads are made cold: POSIX_FADV_DONTNEED on the bench's own files (default; "
                         "no root, leaves other processes' cache alone), the system-wide drop_caches (root), "
                         "or nothing (cold = page cache)")
    args = ap.parse_args()
    size = int((args.size_mb or (40 if args.quick else 200)) * MB)
    EVICT["method"] = args.evict
    configs = ([("default model", ["epochs=2"]), ("1024-1024 model", ["steps=20", f"model={json.dumps(BIG_MODEL)}"])]
               if args.quick else
               [("default model", ["epochs=5"]), ("1024-1024 model", ["steps=50", f"model={json.dumps(BIG_MODEL)}"])])
    root = tempfile.mkdtemp(prefix="mariana-ckpt-bench-", dir=args.dir)
    res: dict[str, Any] = {"args": {"quick": args.quick, "size_bytes": size, "repeat": args.repeat}}
    try:
        progress(f"OPENBLAS_CORETYPE={BLAS_ENV['OPENBLAS_CORETYPE']} OPENBLAS_L2_SIZE={BLAS_ENV['OPENBLAS_L2_SIZE']}"
                 f" temp {root}")
        res["env"] = {"python": platform.python_version(), "numpy": np.__version__,
                      "msgpack": ".".join(map(str, msgpack.version)), "cpus": os.cpu_count(), **BLAS_ENV,
                      "tmp": root, "fs": fs_of(root), "first_touch_mb_s": [first_touch_mb_s() for _ in range(3)],
                      "loadavg_start": [round(x, 2) for x in os.getloadavg()]}
        if args.evict == "drop_caches":  # does the kernel take it? (system-wide, so only when asked)
            probe = os.path.join(root, "probe")
            with open(probe, "wb") as f:
                f.write(os.urandom(8 << 20))
                f.flush()
                os.fsync(f.fileno())
            res["env"]["drop_caches_probe"] = drop_caches()
            res["env"]["drop_caches_resident"] = resident_fraction(probe)
            os.unlink(probe)
        state = make_state(size)
        progress(f"1. throughput, {size / MB:.0f} MB state")
        res["throughput"] = throughput(root, state, args.repeat)
        progress("2. breakdown")
        res["breakdown"] = breakdown(root, state, args.repeat)
        del state
        progress("3. dnn-dp")
        res["dnn"] = dnn_figures(root, configs, args.repeat)
        res["profile"] = {}
        for label, sets in configs:
            res["profile"][label] = dnn_run(root, sets, 10, profile=True)["profile"]
        progress("  profile done")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    res["bench_s"] = time.perf_counter() - _T0
    res["env"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    if args.json:
        print(json.dumps(res, indent=1, default=float))
    else:
        print(report(res))


if __name__ == "__main__":
    main()
