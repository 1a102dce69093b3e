"""The part format: plain data with numpy arrays inside, streamed to and from a file.

Checkpoint parts and message captures use it. Layout::

    0        b"MRNPART1"                 magic (8 bytes)
    8        u64 little-endian N         length of the index
    16       msgpack index (N bytes)     {"meta": the data, each array replaced by {"__npy__": i},
                                          "arrays": [record length, ...]}
    ...      zeros up to a multiple of 64
    ...      one complete .npy record per array (numpy's own header, then the C-order buffer),
             each starting at the next multiple of 64 (so every array's data is 64-byte
             aligned), in the order of "arrays"

Why not ``.npz``: a zip member must be built in memory or CRC'd on the side, so writing cost
a ``BytesIO`` copy, a CRC32 pass and a sha256 pass, and reading one more copy per 256 KiB
chunk. Here each array's buffer goes straight from the vertex's memory to ``write()``, and
straight from ``readinto()`` into the array the reader returns; the sha256 the manifest needs
is computed on a helper thread chunk by chunk while the next chunk is written or read
(``hashlib`` and file I/O both release the GIL), so a part costs about one pass over the disk.
Each record is still a plain ``.npy``: ``numpy.load`` reads it from where it starts.

An array that appears twice in the data (the same memory: an inbox message that is a
vertex's own buffer) is stored once and comes back as one array referenced twice. Object
arrays are refused on both sides: nothing executable is ever stored or loaded.
"""

from __future__ import annotations

import hashlib
import io
import struct
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import IO, Any, Callable

import msgpack
import numpy as np

from ..errors import StorageError

__all__ = ["MAGIC", "write_part", "stream_part", "read_part", "pack", "unpack"]

MAGIC = b"MRNPART1"
_REF = "__npy__"
_ALIGN = 64
_CHUNK = 8 << 20  # bytes hashed per hand-off to the helper thread
_INLINE = 1 << 20  # below this, hash on the calling thread (a hand-off costs more)
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _hasher_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mariana-sha256")
        return _pool


def _as_bytes(a: np.ndarray) -> memoryview:
    """The buffer of a C-contiguous array as a flat byte view (any dtype, 0-d included)."""
    return memoryview(a.reshape(-1).view(np.uint8))  # type: ignore[arg-type]  # numpy stubs: no Buffer on 3.11


# ---------------------------------------------------------------------------------------------
# writing
# ---------------------------------------------------------------------------------------------
class _HashingWriter:
    """Writes to ``f`` and hashes what it writes; big buffers are queued to the helper thread
    (one thread, so in order) and the writer goes on: ``digest()`` waits for the queue."""

    def __init__(self, f: IO[bytes]) -> None:
        self.f, self.sha, self.n = f, hashlib.sha256(), 0
        self._last: Future | None = None

    def write(self, data: Any) -> None:
        mv = memoryview(data).cast("B")
        if mv.nbytes < _INLINE and self._last is None:
            self.sha.update(mv)
        else:
            pool = _hasher_pool()
            for i in range(0, mv.nbytes, _CHUNK):
                self._last = pool.submit(self.sha.update, mv[i:i + _CHUNK])
        self._write_all(mv)

    def digest(self) -> tuple[int, str]:
        """(bytes written, sha256 hex) once the helper thread has hashed everything."""
        if self._last is not None:
            self._last.result()
        return self.n, self.sha.hexdigest()

    def _write_all(self, mv: memoryview) -> None:
        while mv.nbytes:
            n = self.f.write(mv)
            n = mv.nbytes if n is None else n  # buffered and fsspec files write everything
            self.n += n
            mv = mv[n:]


def _walk_out(obj: Any, arrays: list[np.ndarray], seen: dict[tuple, int], path: str) -> Any:
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            raise StorageError(f"cannot store {path or 'the value'}: an object array (dtype {obj.dtype}); "
                               "stored state holds numbers and strings only")
        key = (obj.__array_interface__["data"][0], obj.shape, obj.strides, obj.dtype)
        if key not in seen:
            seen[key] = len(arrays)
            arrays.append(obj)
        return {_REF: seen[key]}
    if isinstance(obj, dict):
        return {k: _walk_out(v, arrays, seen, f"{path}/{k}") for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_walk_out(v, arrays, seen, f"{path}[{i}]") for i, v in enumerate(obj)]
    return obj


def _npy_header(a: np.ndarray) -> bytes:
    d = {"descr": np.lib.format.dtype_to_descr(a.dtype), "fortran_order": False, "shape": a.shape}
    buf = io.BytesIO()
    try:
        np.lib.format.write_array_header_1_0(buf, d)
    except ValueError:  # a header over 64 KiB (huge structured dtypes)
        buf = io.BytesIO()
        np.lib.format.write_array_header_2_0(buf, d)
    return buf.getvalue()


def write_part(f: IO[bytes], obj: Any) -> tuple[int, str]:
    """Stream ``obj`` (plain data with arrays anywhere inside) to ``f``; returns (bytes, sha256 hex)."""
    return stream_part(f, obj)()


def stream_part(f: IO[bytes], obj: Any) -> Callable[[], tuple[int, str]]:
    """Write ``obj`` to ``f``; returns a function that waits for the sha256 and gives (bytes, hex).

    The hash of the last chunks may still be running when the data is written: call it after
    ``fsync`` so the two overlap. ``obj``'s arrays must not change until it has returned.
    """
    arrays: list[np.ndarray] = []
    tree = _walk_out(obj, arrays, {}, "")
    arrays = [a if a.flags.c_contiguous else np.ascontiguousarray(a) for a in arrays]
    headers = [_npy_header(a) for a in arrays]
    try:
        index = msgpack.packb({"meta": tree, "arrays": [len(h) + a.nbytes for h, a in zip(headers, arrays)]},
                              use_bin_type=True)
    except (TypeError, ValueError) as exc:
        raise StorageError(f"cannot store this state: {exc}") from None
    w = _HashingWriter(f)
    w.write(MAGIC + struct.pack("<Q", len(index)) + index)
    for header, a in zip(headers, arrays):
        w.write(b"\0" * (_round_up(w.n) - w.n) + header)
        if a.nbytes:
            w.write(_as_bytes(a))
    return w.digest


def _round_up(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


# ---------------------------------------------------------------------------------------------
# reading
# ---------------------------------------------------------------------------------------------
class _HashingReader:
    """Reads from ``f`` and hashes what it reads; big reads are queued to the helper thread (in
    order) while the next chunks are read into their arrays: ``hexdigest()`` waits for the queue."""

    def __init__(self, f: IO[bytes], where: str) -> None:
        self.f, self.where, self.sha, self.n = f, where, hashlib.sha256(), 0
        self._last: Future | None = None

    def read(self, n: int) -> bytes:
        """Exactly ``n`` bytes (numpy's header parser calls this)."""
        buf = bytearray(n)
        self.readinto(memoryview(buf))
        return bytes(buf)

    def readinto(self, mv: memoryview) -> None:
        mv = mv.cast("B")
        if mv.nbytes < _INLINE and self._last is None:
            self._fill(mv)
            self.sha.update(mv)
            return
        pool = _hasher_pool()
        for i in range(0, mv.nbytes, _CHUNK):
            chunk = mv[i:i + _CHUNK]  # a view of memory nobody reuses: the array being read, or read()'s buffer
            self._fill(chunk)
            self._last = pool.submit(self.sha.update, chunk)

    def hexdigest(self) -> str:
        if self._last is not None:
            self._last.result()
        return self.sha.hexdigest()

    def _fill(self, mv: memoryview) -> None:
        while mv.nbytes:
            n = self.f.readinto(mv)  # type: ignore[attr-defined]  # a binary file object
            if not n:
                raise StorageError(f"{self.where}: truncated: the file ends at byte {self.n}")
            self.n += n
            mv = mv[n:]

    def at_end(self) -> bool:
        return not self.f.read(1)


def read_part(f: IO[bytes], where: str = "part", size: int | None = None, sha256: str | None = None) -> Any:
    """The data ``write_part`` wrote to ``f``, checked against ``size``/``sha256`` when given.

    The checksum is verified before anything is returned, so a damaged part is never half-loaded.
    """
    r = _HashingReader(f, where)
    head = r.read(16)
    if head[:8] != MAGIC:
        raise StorageError(f"{where}: not a mariana part file (magic {head[:8]!r})")
    (index_len,) = struct.unpack("<Q", head[8:])
    if 16 + index_len > (size if size is not None else 1 << 32):
        raise StorageError(f"{where}: index of {index_len} bytes runs past the part's {size} bytes")
    try:
        index = msgpack.unpackb(r.read(index_len), raw=False, strict_map_key=False)
        tree, lengths = index["meta"], [int(n) for n in index["arrays"]]
    except (ValueError, KeyError, TypeError, msgpack.UnpackException) as exc:
        raise StorageError(f"{where}: unreadable index ({exc})") from None
    arrays = []
    for i, length in enumerate(lengths):
        end = _round_up(r.n) + length
        if size is not None and end > size:
            raise StorageError(f"{where}: array {i} runs past the part's {size} bytes")
        r.read(_round_up(r.n) - r.n)
        arrays.append(_read_npy(r, end, f"{where}: array {i}"))
    if not r.at_end():
        raise StorageError(f"{where}: has bytes after its last array"
                           + (f" (the manifest says {size} bytes)" if size is not None else ""))
    if size is not None and r.n != size:
        raise StorageError(f"{where}: has {r.n} bytes, the manifest says {size}")
    if sha256 is not None and r.hexdigest() != sha256:
        raise StorageError(f"{where}: does not match its sha256")
    return _walk_in(tree, arrays, where)


def _read_npy(r: _HashingReader, end: int, where: str) -> np.ndarray:
    try:
        version = np.lib.format.read_magic(r)  # type: ignore[arg-type]  # r has read()
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(r)  # type: ignore[arg-type]
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(r)  # type: ignore[arg-type]
        else:
            raise ValueError(f"unsupported .npy version {version}")
    except (ValueError, SyntaxError, TypeError) as exc:
        raise StorageError(f"{where}: bad .npy header ({exc})") from None
    if dtype.hasobject:
        raise StorageError(f"{where}: object arrays are refused (nothing executable is loaded)")
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if r.n + nbytes != end:
        raise StorageError(f"{where}: {nbytes} bytes of data do not fit its record")
    a = np.empty(shape, dtype, order="F" if fortran else "C")
    if a.nbytes:
        r.readinto(_as_bytes(a.T if fortran else a))
    return a


def _walk_in(v: Any, arrays: list[np.ndarray], where: str) -> Any:
    if isinstance(v, dict):
        if len(v) == 1 and _REF in v:
            i = v[_REF]
            if not isinstance(i, int) or not 0 <= i < len(arrays):
                raise StorageError(f"{where}: reference to a missing array {i!r}")
            return arrays[i]
        return {k: _walk_in(x, arrays, where) for k, x in v.items()}
    if isinstance(v, list):
        return [_walk_in(x, arrays, where) for x in v]
    return v


# ---------------------------------------------------------------------------------------------
# whole blobs
# ---------------------------------------------------------------------------------------------
def pack(obj: Any) -> bytes:
    """``obj`` as one part blob (what ``write_part`` writes to a file)."""
    buf = io.BytesIO()
    write_part(buf, obj)
    return buf.getvalue()


def unpack(data: bytes, where: str = "part") -> Any:
    """Inverse of ``pack``; also reads the ``.npz`` blobs of earlier versions (no pickle)."""
    if data[:2] == b"PK":
        return _unpack_npz(data, where)
    return read_part(io.BytesIO(data), where, size=len(data))


def _unpack_npz(data: bytes, where: str) -> Any:
    """Parts and captures written before the part format (an ``.npz`` with a ``__meta__`` member)."""
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            members = {k: npz[k] for k in npz.files}
        tree = msgpack.unpackb(members.pop("__meta__").tobytes(), raw=False, strict_map_key=False)
    except Exception as exc:  # noqa: BLE001 - zipfile/numpy raise many kinds; name the file
        raise StorageError(f"{where}: unreadable .npz ({exc})") from None

    def walk(v: Any) -> Any:
        if isinstance(v, dict):
            if len(v) == 1 and _REF in v:
                return members[v[_REF]]
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    return walk(tree)
