#!/usr/bin/env python
"""Checkpoint throughput of the part format vs raw numpy files, where the time goes, and the
checkpoint overhead of ``dnn-dp``. Details and findings: bench/README.md.

    python bench/checkpoint.py            # 200 MB state, 3 rounds, dnn-dp (~1-2 min on 2 cores)
    python bench/checkpoint.py --quick    # 40 MB state, short dnn-dp runs (smoke, ~15 s)
    python bench/checkpoint.py --smoke    # 4 MB state, 1 round, tiny dnn-dp runs: CI smoke run, no figures
    python bench/checkpoint.py --json     # one JSON object on stdout

1. Throughput, target engine/raw >= 0.8: a 200 MB state shaped like ``Partition.snapshot()``
   written as a checkpoint (``write_part`` worker-0 + master, ``commit``) and read back as a resume
   does (``Checkpoints(RunDir(url)).newest_valid(load=True)``, cold and warm; ``inspect`` too), vs
   ``numpy.save`` + fsync / ``numpy.load`` of one file per array. MB/s of array bytes.
2. Where the time goes on the same state: sha256 alone, raw write + fsync, the part format into
   memory and to a file, ``readinto`` vs ``read_part`` vs ``inspect``, and the previous ``.npz``
   format (copied here) with the new/old speedup.
3. ``dnn-dp`` with ``checkpoint_every=0`` vs ``10`` (in the background, and with
   ``checkpoint_background=false``): wall ratios, ms per checkpoint, bytes written
   vs array bytes, arrays stored once (shared) or twice (equal contents), a cProfile per model.

OMP/OPENBLAS/MKL threads are forced to 1 before numpy is imported. Progress goes to stderr,
results to stdout; everything is written under one temp dir, removed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import ctypes
import hashlib
import io
import json
import mmap
import os
import platform
import pstats
import shutil
import statistics
import sys
import tempfile
import threading
import time
from typing import Any, Callable, cast

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # before numpy is imported
BLAS_ENV = {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}

import msgpack  # noqa: E402
import numpy as np  # noqa: E402

from mariana.jobs.launch import run_job  # noqa: E402
from mariana.storage import partfile  # noqa: E402
from mariana.storage.checkpoint import Checkpoints  # noqa: E402
from mariana.storage.rundir import RunDir  # noqa: E402

TARGET = 0.8
MB = 1e6
BIG_MODEL = ["dense:1024:relu", "dense:1024:relu", "dense:10"]
EVICT = {"method": "fadvise"}
_T0 = time.perf_counter()


def progress(msg: str) -> None:
    print(f"[{time.perf_counter() - _T0:6.1f}s] {msg}", file=sys.stderr, flush=True)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def files_in(folder: str) -> list[str]:
    return [os.path.join(folder, n) for n in sorted(os.listdir(folder))]


# --- environment: page cache control and residency --------------------------------------------
def drop_caches() -> bool:
    """sync + drop the whole page cache (root only, system-wide); False when the kernel refused."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            return f.write("3\n") > 0
    except OSError:
        return False


def evict(paths: list[str]) -> bool | None:
    """Make the next read of ``paths`` come from the disk, per --evict; None: not tried. fadvise =
    fdatasync + POSIX_FADV_DONTNEED on just these files (no root, other processes' cache kept)."""
    if EVICT["method"] != "fadvise":
        return drop_caches() if EVICT["method"] == "drop_caches" else None
    try:
        for p in paths:
            with open(p, "rb") as f:
                os.fdatasync(f.fileno())
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        return True
    except (OSError, AttributeError):
        return False


def resident_fraction(path: str) -> float | None:
    """Share of the file's pages in the page cache (mmap + mincore), None if unavailable."""
    size, page = os.path.getsize(path), mmap.PAGESIZE
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY) as m:
            buf = (ctypes.c_char * size).from_buffer(m)  # a private mapping: mincore sees the page cache
            vec = (ctypes.c_ubyte * ((size + page - 1) // page))()
            ok = ctypes.CDLL(None).mincore(ctypes.c_void_p(ctypes.addressof(buf)), ctypes.c_size_t(size), vec) == 0
            del buf
        return float((np.frombuffer(vec, np.uint8) & 1).mean()) if ok else None
    except (OSError, ValueError, AttributeError):  # ValueError: an empty file cannot be mapped
        return None


def first_touch_mb_s(n_bytes: int = 200_000_000) -> float:
    """MB/s of filling a fresh allocation (page faults: slow on VMs that return free memory to the host)."""
    t, a = time.perf_counter(), np.empty(n_bytes, np.uint8)
    a.fill(1)
    return n_bytes / MB / (time.perf_counter() - t)


def fs_of(path: str) -> str:
    """Device and filesystem type of the mount holding ``path`` (from /proc/mounts)."""
    try:
        with open("/proc/mounts") as f:
            mounts = [line.split()[:3] for line in f]
    except OSError:
        return "unknown"
    dev, mnt, fstype = max((m for m in mounts if path.startswith(m[1])), key=lambda m: len(m[1]))
    return f"{dev} on {mnt} ({fstype})"


# --- the state, and the previous (.npz) part format, copied here: the package only reads it now ---
SHARES = (0.40, 0.25, 0.15, 0.10, 0.06, 0.04)
MASTER = {"coordinator": {"superstep": 0, "aggregates": {"loss": 0.5}, "broadcasts": {}, "active": 6,
                          "in_flight": 0}}


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
    """Every array inside plain data, with its path, in walk order (shared arrays repeated)."""
    if isinstance(obj, np.ndarray):
        return [(path, obj)]
    if isinstance(obj, dict):
        return [x for k, v in obj.items() for x in arrays_of(v, f"{path}/{k}")]
    if isinstance(obj, (list, tuple)):
        return [x for i, v in enumerate(obj) for x in arrays_of(v, f"{path}[{i}]")]
    return []


def same(a: Any, b: Any) -> bool:
    """Equal plain data (arrays: same dtype and contents; tuples come back as lists)."""
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, list) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def tree_map(v: Any, leaf: Callable[[Any], Any]) -> Any:
    """``v`` with every array and every ``{"__npy__": name}`` replaced by ``leaf(it)``."""
    if isinstance(v, np.ndarray) or (isinstance(v, dict) and len(v) == 1 and "__npy__" in v):
        return leaf(v)
    if isinstance(v, dict):
        return {k: tree_map(x, leaf) for k, x in v.items()}
    return [tree_map(x, leaf) for x in v] if isinstance(v, (list, tuple)) else v


def old_write(path: str, obj: Any) -> str:
    """The previous write path: pack (``__meta__`` msgpack + one member per array, ``np.savez``
    into ``BytesIO``), sha256 of the blob, temp file write + fsync + replace."""
    arrays: dict[str, np.ndarray] = {}

    def ref(a: np.ndarray) -> dict[str, str]:
        arrays[f"a{len(arrays)}"] = a
        return {"__npy__": f"a{len(arrays) - 1}"}

    meta = msgpack.packb(tree_map(obj, ref), use_bin_type=True)
    buf = io.BytesIO()
    np.savez(buf, __meta__=np.frombuffer(meta, dtype=np.uint8), **arrays)  # type: ignore[arg-type]
    data = buf.getvalue()
    sha = hashlib.sha256(data).hexdigest()
    with open(path + ".tmp", "wb", buffering=0) as f:
        f.write(data)
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)
    return sha


def old_read(path: str, sha: str) -> Any:
    """The previous read path: the bytes, sha256, ``np.load(BytesIO)`` of every member, msgpack."""
    with open(path, "rb") as f:
        data = f.read()
    if hashlib.sha256(data).hexdigest() != sha:
        raise RuntimeError(f"{path}: sha256 mismatch")
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        members = {k: npz[k] for k in npz.files}
    meta = msgpack.unpackb(members.pop("__meta__").tobytes(), raw=False, strict_map_key=False)
    return tree_map(meta, lambda ref: members[ref["__npy__"]])


# --- figure 1: engine write / resume read vs numpy files ---------------------------------------
def engine_write(ck: Checkpoints, ss: int, state: dict[str, Any]) -> float:
    os.sync()
    t = time.perf_counter()
    ck.commit(ss, [ck.write_part(ss, "worker-0", state), ck.write_part(ss, "master", MASTER)], workers=1)
    return time.perf_counter() - t


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


FIG1 = (  # figure, label, engine op, raw op, has the target
    ("write", "write (+fsync)", "engine_write", "raw_write", True),
    ("read_cold", "resume read, cold", "engine_read_cold", "raw_read_cold", True),
    ("read_warm", "resume read, warm", "engine_read_warm", "raw_read_warm", True),
    ("inspect_cold", "inspect, cold (vs read)", "inspect_cold", "raw_read_cold", False),
    ("inspect_warm", "inspect, warm (vs read)", "inspect_warm", "raw_read_warm", False))


def throughput(root: str, state: dict[str, Any], repeat: int) -> dict[str, Any]:
    named = arrays_of(state)
    arrays = [a for _, a in named]
    payload = sum(a.nbytes for a in arrays)
    url = "file://" + os.path.join(root, "engine")
    ck = Checkpoints(RunDir(url))
    ev: dict[str, Any] = {"method": EVICT["method"], "accepted": None, "resident_after_evict": []}
    rows: list[dict[str, Any]] = []

    def cold_warm(row: dict[str, Any], op: str, files: list[str], fn: Callable[[], Any]) -> Any:
        """Time ``fn`` after evicting ``files`` (cold), then again (warm); returns the warm result."""
        ok = evict(files)
        if ok is not None:
            ev["accepted"] = ok and ev["accepted"] is not False
        if (res := resident_fraction(files[-1])) is not None:
            ev["resident_after_evict"].append(round(res, 4))
        row[f"{op}_cold_s"], out = timed(fn)
        out = None  # every timed read starts with the previous result freed
        row[f"{op}_warm_s"], out = timed(fn)
        return out

    for r in range(repeat + 1):  # round 0 warms up (first touch of buffers, imports); not counted
        ss, row = r + 1, cast(dict[str, Any], {"round": r})
        raw_dir, ck_dir = os.path.join(root, f"raw-{r + 1}"), os.path.join(ck.run_dir.root, ck.folder(r + 1))
        order = ("engine", "raw") if r % 2 == 0 else ("raw", "engine")
        for who in order:
            row[f"{who}_write_s"] = engine_write(ck, ss, state) if who == "engine" else raw_write(raw_dir, arrays)
        row["engine_file_bytes"] = sum(os.path.getsize(p) for p in files_in(ck_dir) if p.endswith(".part"))
        ck_files = sorted(files_in(ck_dir), key=lambda p: p.endswith("worker-0.part"))  # mincore on the part
        for who in order:
            if who == "engine":
                back = cold_warm(row, "engine_read", ck_files, lambda: Checkpoints(RunDir(url)).newest_valid(load=True).loaded)
                info = cold_warm(row, "inspect", ck_files, lambda: ck.inspect(ss))
                if not info.valid:
                    raise RuntimeError(f"inspect: checkpoint {ss} not valid: {info.why}")
            else:
                raw_back = cold_warm(row, "raw_read", files_in(raw_dir),
                                     lambda: [np.load(os.path.join(raw_dir, f"{i}.npy")) for i in range(len(arrays))])
        if r == 0:  # round-trip check, outside the timings
            row["roundtrip_ok"] = (same(state, back["worker-0"]) and same(MASTER, back["master"])
                                   and all(np.array_equal(a, b) for a, b in zip(arrays, raw_back)))
        back = raw_back = None
        shutil.rmtree(ck_dir, ignore_errors=True)
        shutil.rmtree(raw_dir, ignore_errors=True)
        rows.append(row)
        progress(f"  round {r}{' (warm-up)' if r == 0 else ''} (engine/raw s): write {row['engine_write_s']:.3f}/"
                 f"{row['raw_write_s']:.3f}  cold read {row['engine_read_cold_s']:.3f}/{row['raw_read_cold_s']:.3f}"
                 f"  warm read {row['engine_read_warm_s']:.3f}/{row['raw_read_warm_s']:.3f}")
    timed_rows, figs = rows[1:], {}
    for key, label, eng, raw, has_target in FIG1:
        e = [payload / MB / row[f"{eng}_s"] for row in timed_rows]
        w = [payload / MB / row[f"{raw}_s"] for row in timed_rows]
        figs[key] = {"engine_mb_s": {"best": max(e), "median": statistics.median(e), "all": e},
                     "raw_mb_s": {"best": max(w), "median": statistics.median(w), "all": w},
                     "ratio_best": max(e) / max(w), "ratio_median": statistics.median(e) / statistics.median(w),
                     "ratio_per_round": [a / b for a, b in zip(e, w)], "target": TARGET if has_target else None,
                     "label": label}
    return {"payload_bytes": payload, "tensors": [[p, int(a.size), str(a.dtype)] for p, a in named],
            "engine_file_bytes": rows[0]["engine_file_bytes"], "rounds": rows, "figures": figs, "evict": ev,
            "roundtrip_ok": rows[0]["roundtrip_ok"]}


# --- figure 2: where the time goes --------------------------------------------------------------
def raw_write_one(path: str, arrays: list[np.ndarray]) -> None:
    with open(path, "wb", buffering=0) as f:
        for a in arrays:
            mv = memoryview(a.reshape(-1).view(np.uint8))
            while mv.nbytes:
                mv = mv[f.write(mv):]
        os.fsync(f.fileno())


def readinto_file(path: str) -> np.ndarray:
    """The whole file into one fresh numpy buffer (what read_part does, minus parsing and sha256)."""
    buf = np.empty(os.path.getsize(path), np.uint8)
    mv, got = memoryview(buf), 0
    with open(path, "rb", buffering=0) as f:
        while got < buf.nbytes:
            n = f.readinto(mv[got:])
            if not n:
                raise RuntimeError(f"{path}: short read")
            got += n
    return buf


def breakdown(root: str, state: dict[str, Any], repeat: int) -> dict[str, Any]:
    """Each step of the write and read paths on ``state``, best of ``repeat`` (seconds)."""
    arrays = [a for _, a in arrays_of(state)]
    ck = Checkpoints(RunDir("file://" + os.path.join(root, "ck")))
    scratch = os.path.join(root, "scratch")
    os.makedirs(scratch, exist_ok=True)
    raw_path, old_path = os.path.join(scratch, "raw.bin"), os.path.join(scratch, "old.npz")
    best: dict[str, float] = {}
    info: dict[str, Any] = {}

    def keep(name: str, fn: Callable[[], Any], before: Callable[[], Any] | None = None) -> Any:
        if before is not None:
            before()
        t, out = timed(fn)
        best[name] = min(t, best.get(name, float("inf")))
        return out

    def sha256_arrays() -> str:
        h = hashlib.sha256()
        for a in arrays:
            h.update(memoryview(a.reshape(-1).view(np.uint8)))
        return h.hexdigest()

    def read_part(path: str, entry: dict[str, Any]) -> Any:
        with open(path, "rb", buffering=0) as f:
            return partfile.read_part(f, path, entry["bytes"], entry["sha256"])

    for r in range(repeat):
        ss = r + 1
        keep("sha256", sha256_arrays)
        keep("w.raw_write_fsync", lambda: raw_write_one(raw_path, arrays), os.sync)
        keep("w.part_bytesio", lambda: partfile.write_part(io.BytesIO(), state))
        entry = keep("w.write_part", lambda: ck.write_part(ss, "worker-0", state), os.sync)
        keep("w.commit", lambda: ck.commit(ss, [entry], workers=1))
        old_sha = keep("w.old", lambda: old_write(old_path, state), os.sync)
        part_path = os.path.join(ck.run_dir.root, ck.folder(ss), entry["file"])
        for temp in ("cold", "warm"):
            new_cold = (lambda: evict([part_path])) if temp == "cold" else None
            keep(f"r.{temp}.readinto", lambda: readinto_file(part_path), new_cold)
            back = keep(f"r.{temp}.read_part", lambda: read_part(part_path, entry), new_cold)
            info["read_part_ok"] = info.get("read_part_ok", True) and same(state, back)
            back = keep(f"r.{temp}.inspect", lambda: ck.inspect(ss), new_cold)
            info["inspect_valid"] = info.get("inspect_valid", True) and back.valid
            back = keep(f"r.{temp}.old", lambda: old_read(old_path, old_sha),
                        (lambda: evict([old_path])) if temp == "cold" else None)
            info["old_ok"] = info.get("old_ok", True) and same(state, back)
            back = None
        if r == 0:
            with open(part_path, "rb") as f:
                info["part_sha_is_file_sha"] = hashlib.sha256(f.read()).hexdigest() == entry["sha256"]
            with open(old_path, "rb") as f:  # the package still reads the previous format
                info["old_readable_by_unpack"] = same(state, partfile.unpack(f.read()))
            info["part_file_bytes"], info["old_file_bytes"] = entry["bytes"], os.path.getsize(old_path)
        for p in files_in(scratch):
            os.unlink(p)
        shutil.rmtree(os.path.join(ck.run_dir.root, ck.folder(ss)), ignore_errors=True)
    speedup = {"write": best["w.old"] / best["w.write_part"],
               "read_cold": best["r.cold.old"] / best["r.cold.read_part"],
               "read_warm": best["r.warm.old"] / best["r.warm.read_part"]}
    progress("  breakdown done")
    return {"payload_bytes": sum(a.nbytes for a in arrays), "best_s": best, "speedup_new_over_old": speedup, **info}


# --- figure 3: dnn-dp with and without checkpoints --------------------------------------------
PROFILE_ROWS = (  # label, file suffix (or "~": builtins), function name (exact; builtins: a substring)
    ("_checkpoint_job (capture on the loop)", "engine/local.py", "_checkpoint_job"),
    ("  Partition/Coordinator.snapshot", "engine/superstep.py", "snapshot"),
    ("  Partition.params_snapshot", "engine/superstep.py", "params_snapshot"),
    ("  detached (copies of the arrays)", "engine/state.py", "detached"),
    ("BackgroundWriter.submit (waits for the previous)", "engine/checkpointing.py", "submit"),
    ("job (background thread: write + commit)", "engine/local.py", "job"),
    ("  Checkpoints.write_part", "storage/checkpoint.py", "write_part"),
    ("    stream_part (walk, headers, writes)", "storage/partfile.py", "stream_part"),
    ("      _HashingWriter.write", "storage/partfile.py", "write"),
    ("        file write()", "~", "write' of '_io.FileIO'"),
    ("    _HashingWriter.digest (wait for sha256)", "storage/partfile.py", "digest"),
    ("  posix.fsync (parts, manifests, dirs)", "~", "posix.fsync"),
    ("  Checkpoints.commit (manifests + prune)", "storage/checkpoint.py", "commit"),
    ("    prune", "storage/checkpoint.py", "prune"),
)


def profile_summary(stats: pstats.Stats, total: float) -> dict[str, Any]:
    rows = []
    for label, fsuffix, fname in PROFILE_ROWS:
        hits = [(nc, ct) for (file, _line, func), (_cc, nc, _tt, ct, _callers) in stats.stats.items()  # type: ignore
                if ((file == "~" and fname in func) if fsuffix == "~" else (file.endswith(fsuffix) and func == fname))]
        rows.append([label, sum(ct for _, ct in hits), sum(nc for nc, _ in hits)])
    taken = next(calls for label, _, calls in rows if label.startswith("_checkpoint_job"))  # once per checkpoint
    return {"run_s_under_profile": total, "checkpoints": taken, "rows": rows}


def array_census(state: Any) -> dict[str, Any]:
    """The arrays of a part as read back: shared memory comes back as one object referenced
    twice (stored once); separate buffers with equal contents were stored twice."""
    named = arrays_of(state)
    by_id: dict[int, str] = {}
    by_content: dict[tuple, str] = {}
    shared: list[list[Any]] = []
    dups: list[list[Any]] = []
    for p, a in named:
        if id(a) in by_id:
            shared.append([p, by_id[id(a)], int(a.nbytes)])
        elif a.nbytes >= 1024:
            key = (hashlib.sha256(np.ascontiguousarray(a)).hexdigest(), str(a.dtype), a.shape)
            if key in by_content:
                dups.append([p, by_content[key], int(a.nbytes)])
            by_content.setdefault(key, p)
        by_id.setdefault(id(a), p)
    total = sum(a.nbytes for _, a in named)
    return {"arrays": [[p, list(a.shape), str(a.dtype), int(a.nbytes)] for p, a in named], "array_bytes": total,
            "stored_array_bytes": total - sum(s[2] for s in shared), "shared_arrays": shared,
            "duplicate_arrays": dups, "duplicate_bytes": sum(d[2] for d in dups)}


def dnn_run(root: str, sets: list[str], every: int, profile: bool = False) -> dict[str, Any]:
    rd = RunDir("file://" + tempfile.mkdtemp(prefix="run-", dir=root))
    seen: list[tuple[float, float, Any]] = []  # (callback time, superstep wall_s, checkpoint committed)
    on_ss = lambda rec: seen.append((time.perf_counter(), rec["wall_s"], rec.get("checkpoint")))  # noqa: E731

    profs = [cProfile.Profile()]  # this thread's, then one per thread the run starts (a background writer)

    def thread_started(*_: Any) -> None:  # the first event in a new thread: profile the rest of it
        sys.setprofile(None)
        profs.append(cProfile.Profile())
        profs[-1].enable()

    if profile:
        threading.setprofile(thread_started)
    t = time.perf_counter()
    try:
        with profs[0] if profile else contextlib.nullcontext():
            res = run_job("dnn-dp", sets=sets + [f"checkpoint_every={every}"], workers=1, runtime="local",
                          run_dir=rd, on_superstep=on_ss)
    finally:
        threading.setprofile(None)
    total = time.perf_counter() - t
    # time between callbacks not spent computing: checkpointing + metrics.jsonl + bookkeeping
    outside = sum(now[0] - before[0] - now[1] for before, now in zip(seen, seen[1:]))
    newest = Checkpoints(rd).newest_valid(load=True) if every else None
    # a background writer reports a checkpoint in a later superstep's line, and the last one in none
    committed = {x[2] for x in seen if x[2] is not None} | ({newest.superstep} if newest else set())
    out: dict[str, Any] = {"run_job_s": total, "engine_s": res.wall_s, "supersteps": res.supersteps,
                           "checkpoints": len(committed), "outside_compute_s": outside}
    if newest is not None:  # every file of that superstep, per top folder (checkpoints/, params/, ...)
        folders = [(top, os.path.join(rd.root, top, f"ss-{newest.superstep:06d}")) for top in sorted(os.listdir(rd.root))]
        out["written_bytes"] = {top: sum(map(os.path.getsize, files_in(f))) for top, f in folders if os.path.isdir(f)}
        out["checkpoint_bytes"] = newest.size
        out.update(array_census(newest.loaded["worker-0"]))
    if profile:
        out["profile"] = profile_summary(pstats.Stats(*profs), total)
    shutil.rmtree(rd.root, ignore_errors=True)
    return out


CENSUS = ("written_bytes", "checkpoint_bytes", "array_bytes", "stored_array_bytes", "arrays", "shared_arrays",
          "duplicate_arrays", "duplicate_bytes")


def dnn_figures(root: str, configs: list[tuple[str, list[str]]], repeat: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label, sets in configs:
        runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": [], "sync": []}
        variants = {"off": (sets, 0), "on": (sets, 10), "sync": (sets + ["checkpoint_background=false"], 10)}
        for r in range(repeat):
            for name in (("off", "on", "sync") if r % 2 == 0 else ("sync", "on", "off")):
                runs[name].append(dnn_run(root, *variants[name]))
        off, on, sync = runs["off"], runs["on"], runs["sync"]
        med = lambda rs, k: statistics.median(x[k] for x in rs)  # noqa: E731
        n_ck = on[0]["checkpoints"]
        per_ck = (med(on, "outside_compute_s") - med(off, "outside_compute_s")) / max(1, n_ck)
        fig = {"sets": sets, "supersteps": on[0]["supersteps"], "checkpoints": n_ck, "per_checkpoint_s": per_ck,
               **{f"{k}_{x}": med(rs, f"{k}_s") for k in ("engine", "run_job") for x, rs in (("off", off), ("on", on))},
               **{k: on[0].get(k) for k in CENSUS}, "runs_off": off,
               "runs_on": [{k: v for k, v in x.items() if k not in CENSUS} for x in on]}
        fig["ratio_engine"] = fig["engine_on"] / fig["engine_off"]
        fig["engine_sync"] = med(sync, "engine_s")
        fig["ratio_sync"] = fig["engine_sync"] / fig["engine_off"]
        fig["ratio_run_job"] = fig["run_job_on"] / fig["run_job_off"]
        fig["checkpoint_share_of_on"] = 1 - fig["engine_off"] / fig["engine_on"]
        written = sum((fig["written_bytes"] or {}).values())
        out[label] = fig
        progress(f"  dnn-dp {label}: off {fig['engine_off']:.3f}s on {fig['engine_on']:.3f}s "
                 f"(x{fig['ratio_engine']:.2f}), {n_ck} checkpoints of {written / MB:.2f} MB, {per_ck * 1e3:.1f} ms each")
    return out


# --- report ---------------------------------------------------------------------------------------
def report(res: dict[str, Any]) -> str:
    e, t, b, s = res["env"], res["throughput"], res["breakdown"], res["breakdown"]["best_s"]
    d, pay, sizes = t["evict"], b["payload_bytes"] / MB, [x[1] * 4 / MB for x in t["tensors"]]
    L = ["== environment",
         f"python {e['python']}  numpy {e['numpy']}  msgpack {e['msgpack']}  cpus {e['cpus']}  OMP/OPENBLAS/MKL_NUM_"
         f"THREADS=1  OPENBLAS_CORETYPE={e['OPENBLAS_CORETYPE']}  OPENBLAS_L2_SIZE={e['OPENBLAS_L2_SIZE']}",
         f"temp dir {e['tmp']} : {e['fs']}",
         f"first-touch of a fresh 200 MB buffer: {', '.join(f'{x:.0f}' for x in e['first_touch_mb_s'])} MB/s",
         f"cold reads: eviction method {d['method']}, accepted={d['accepted']}; resident share of the part / a raw "
         f"file right after eviction (mincore): {d['resident_after_evict'] or 'n/a'}"]
    if e.get("drop_caches_probe") is not None:
        L.append(f"echo 3 > /proc/sys/vm/drop_caches: {'works' if e['drop_caches_probe'] else 'refused'} "
                 f"(resident share of a probe file after it: {e.get('drop_caches_resident')})")
    L += [f"load average at start {e['loadavg_start']}, at end {e.get('loadavg_end')}  (cpus shared with other "
          "work make every figure noisier; compare best figures)", "",
          f"== 1. checkpoint of a {t['payload_bytes'] / MB:.0f} MB state ({len(sizes)} float32 tensors, "
          f"{min(sizes):.1f}-{max(sizes):.1f} MB), part files {t['engine_file_bytes'] / MB:.1f} MB, "
          f"{len(t['rounds']) - 1} rounds after a warm-up; MB/s of array bytes",
          "   engine write = write_part(worker-0) + write_part(master) + commit; resume read = Checkpoints(RunDir(url))"
          ".newest_valid(load=True); raw = numpy.save + fsync / numpy.load, one file per array",
          f"{'':26s}{'engine best':>12s}{'median':>9s}{'raw best':>10s}{'median':>9s}{'ratio best':>12s}"
          f"{'median':>8s}  target {TARGET}"]
    for k, f in t["figures"].items():
        verdict = ("ok" if f["ratio_median"] >= TARGET else "MISSED") if f["target"] else "(no target)"
        L.append(f"{f['label']:26s}{f['engine_mb_s']['best']:12.0f}{f['engine_mb_s']['median']:9.0f}"
                 f"{f['raw_mb_s']['best']:10.0f}{f['raw_mb_s']['median']:9.0f}"
                 f"{f['ratio_best']:12.2f}{f['ratio_median']:8.2f}  {verdict}")
    L += [f"  ok/MISSED on the median ratio. A verified warm read cannot beat sha256 over the data ({pay / s['sha256']:.0f}"
          " MB/s here, figure 2); numpy.load verifies nothing and copies from the page cache at memcpy speed.",
          "  engine/raw per round: " + "  ".join(f"{k} " + " ".join(f"{x:.2f}" for x in f["ratio_per_round"])
                                                 for k, f in t["figures"].items()),
          f"  round trip equal (engine parts and raw files): {t['roundtrip_ok']}", "",
          f"== 2. where the time goes ({pay:.0f} MB of arrays; part file {b['part_file_bytes'] / MB:.1f} MB, previous "
          f".npz {b['old_file_bytes'] / MB:.1f} MB; best of {res['args']['repeat']}; MB/s of array bytes)"]

    def row(label: str, key: str, note: str = "", rate: bool = True) -> None:
        L.append(f"  {label:50s}{s[key]:7.3f} s" + (f"{pay / s[key]:7.0f} MB/s" if rate else " " * 12) + f"  {note}")

    row("sha256 of the arrays, one thread", "sha256", "the floor of a verified read from the page cache")
    L.append(" write path")
    row("raw write() + fsync of the same bytes", "w.raw_write_fsync", "one file, unbuffered")
    row("partfile.write_part -> BytesIO", "w.part_bytesio", "CPU cost of the format: sha256 on the helper "
        "thread + a copy into memory")
    row("Checkpoints.write_part -> file", "w.write_part", "temp file, write, fsync, replace, dir fsync")
    row("Checkpoints.commit (manifest + prune)", "w.commit", rate=False)
    row("previous: np.savez -> BytesIO, sha256, write+fsync", "w.old")
    L.append(" read path")
    for temp in ("cold", "warm"):
        row(f"raw readinto of the part file, {temp}", f"r.{temp}.readinto", "into one fresh numpy buffer")
        row(f"partfile.read_part from the file, {temp}", f"r.{temp}.read_part", "sha256 on the helper thread")
        row(f"Checkpoints.inspect, {temp}", f"r.{temp}.inspect", "read + sha256, one thread")
        row(f"previous: read, sha256, np.load(BytesIO), {temp}", f"r.{temp}.old")
    sp = b["speedup_new_over_old"]
    L += [f"  new/old speedup: write_part {sp['write']:.2f}x, read_part cold {sp['read_cold']:.2f}x, warm "
          f"{sp['read_warm']:.2f}x",
          f"  checks: read_part equal {b['read_part_ok']}, part sha256 == file sha256 {b['part_sha_is_file_sha']}, "
          f"inspect valid {b['inspect_valid']}, previous format equal {b['old_ok']}, previous .npz read by "
          f"partfile.unpack {b['old_readable_by_unpack']}", "",
          f"== 3. dnn-dp on LocalRuntime (1 worker, digits), checkpoint_every=10 (in the background, and with "
          f"checkpoint_background=false) vs 0, median of {res['args']['repeat']}"]
    for label, f in res["dnn"].items():
        written = f["written_bytes"] or {}
        L += [f" {label}: {' '.join(f['sets'])}  ({f['supersteps']} supersteps)",
              f"  engine wall  off {f['engine_off']:.3f} s  on {f['engine_on']:.3f} s  ratio {f['ratio_engine']:.2f}"
              f"  (checkpointing = {f['checkpoint_share_of_on'] * 100:.0f}% of the run)",
              f"  run_job wall off {f['run_job_off']:.3f} s  on {f['run_job_on']:.3f} s  ratio {f['ratio_run_job']:.2f}",
              f"  checkpoint_background=false (written between supersteps, no copy): engine wall "
              f"{f['engine_sync']:.3f} s  ratio {f['ratio_sync']:.2f}",
              f"  {f['checkpoints']} checkpoints, {f['per_checkpoint_s'] * 1e3:.1f} ms each as seen by the superstep "
              "loop (time outside compute, on minus off)"]
        if f.get("array_bytes"):
            L += ["  files written per checkpoint: " + ", ".join(f"{k}/ {v / MB:.2f} MB" for k, v in written.items())
                  + f"; checkpoint parts {f['checkpoint_bytes'] / MB:.2f} MB; worker-0 arrays "
                  f"{f['array_bytes'] / MB:.2f} MB referenced, {f['stored_array_bytes'] / MB:.2f} MB stored",
                  "  arrays: " + ", ".join(f"{path.replace('/vertices/', '')} {n / MB:.2f} MB"
                                           for path, _shape, _dtype, n in f["arrays"])]
        if f.get("shared_arrays"):
            L.append("  same memory, stored once: " + "; ".join(f"{x} is {y}" for x, y, _ in f["shared_arrays"]))
        if f.get("duplicate_arrays"):
            L.append(f"  equal contents in separate buffers, stored twice ({f['duplicate_bytes'] / MB:.2f} MB = "
                     f"{f['duplicate_bytes'] / f['stored_array_bytes'] * 100:.0f}% of the stored arrays): "
                     + "; ".join(f"{x} == {y}" for x, y, _ in f["duplicate_arrays"]))
    for plabel, p in res["profile"].items():
        n = max(1, p["checkpoints"])
        L.append(f" cProfile of one checkpoint_every=10 run, {plabel} (run {p['run_s_under_profile']:.2f} s under the "
                 f"profiler; all threads the run starts, not partfile's sha256 thread: the wait for it is shown): "
                 f"cumulative s, calls, ms per checkpoint ({n} checkpoints)")
        L += [f"  {label:52s}{cum:8.3f}{calls:7d}{cum / n * 1e3:9.1f}" for label, cum, calls in p["rows"] if calls]
        if missing := [label.strip() for label, _, calls in p["rows"] if not calls]:
            L.append(f"  (not called in this version of the code: {'; '.join(missing)})")
    return "\n".join(L + ["", f"total bench time {res['bench_s']:.0f} s"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="40 MB state, short dnn-dp runs")
    ap.add_argument("--smoke", action="store_true", help="4 MB state, 1 round, tiny dnn-dp runs: the CI smoke run")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    ap.add_argument("--size-mb", type=float, default=None, help="state size (default 200, quick 40, smoke 4)")
    ap.add_argument("--repeat", type=int, default=None, help="rounds per figure (best and median; default 3, smoke 1)")
    ap.add_argument("--dir", default=None, help="where the temp dirs go (default: tempfile's)")
    ap.add_argument("--evict", choices=("fadvise", "drop_caches", "none"), default="fadvise",
                    help="how cold reads are made cold: POSIX_FADV_DONTNEED on the bench's own files (default, no "
                         "root), the system-wide drop_caches (root), or nothing (cold = page cache)")
    args = ap.parse_args()
    size = int((args.size_mb or (4 if args.smoke else 40 if args.quick else 200)) * MB)
    if args.repeat is None:
        args.repeat = 1 if args.smoke else 3
    EVICT["method"] = args.evict
    big = f"model={json.dumps(BIG_MODEL)}"
    configs = ([("default model", ["steps=20"]), ("1024-1024 model", ["steps=10", big])] if args.smoke else
               [("default model", ["epochs=2"]), ("1024-1024 model", ["steps=20", big])] if args.quick else
               [("default model", ["epochs=5"]), ("1024-1024 model", ["steps=50", big])])
    root = tempfile.mkdtemp(prefix="mariana-ckpt-bench-", dir=args.dir)
    res: dict[str, Any] = {"args": {"quick": args.quick, "smoke": args.smoke, "size_bytes": size, "repeat": args.repeat,
                                    "evict": args.evict}}
    try:
        progress(f"OPENBLAS_CORETYPE={BLAS_ENV['OPENBLAS_CORETYPE']} OPENBLAS_L2_SIZE={BLAS_ENV['OPENBLAS_L2_SIZE']}"
                 f" temp {root}")
        res["env"] = {"python": platform.python_version(), "numpy": np.__version__,
                      "msgpack": ".".join(map(str, msgpack.version)), "cpus": os.cpu_count(), **BLAS_ENV,
                      "tmp": root, "fs": fs_of(root),
                      "first_touch_mb_s": [first_touch_mb_s(20_000_000 if args.smoke else 200_000_000) for _ in range(3)],
                      "loadavg_start": [round(x, 2) for x in os.getloadavg()]}
        if args.evict == "drop_caches":  # does the kernel take it? (system-wide, so only when asked)
            probe = os.path.join(root, "probe")
            with open(probe, "wb") as f:
                f.write(os.urandom(8 << 20))
                os.fsync(f.fileno())
            res["env"]["drop_caches_probe"] = drop_caches()
            res["env"]["drop_caches_resident"] = resident_fraction(probe)
        state = make_state(size)
        progress(f"1. throughput, {size / MB:.0f} MB state")
        res["throughput"] = throughput(root, state, args.repeat)
        progress("2. breakdown")
        res["breakdown"] = breakdown(root, state, args.repeat)
        del state
        progress("3. dnn-dp")
        res["dnn"] = dnn_figures(root, configs, args.repeat)
        res["profile"] = {label: dnn_run(root, sets, 10, profile=True)["profile"] for label, sets in configs}
        progress("  profile done")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    res["bench_s"] = time.perf_counter() - _T0
    res["env"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(res, indent=1, default=float) if args.json else report(res))


if __name__ == "__main__":
    main()
