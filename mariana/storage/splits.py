"""Input splits: a graph input cut into pieces that workers read in parallel, as Hadoop, Giraph
and Pregel read their inputs.

An input is one file, a directory of part files (names starting with ``_`` or ``.`` skipped, as
Hadoop's ``_SUCCESS``) or a glob, at any fsspec URL. A text file is cut into byte ranges; a split
owns every line that *starts* inside its range, so reading a split means one range read plus the
rest of its last line (``read_text_split``). A compressed file (``.gz``, ``.bz2``, ``.xz``,
``.zst``: ``storage.compression``) cannot be entered in the middle: it is one split. A
``.npy``/``.npz`` edge table is cut into row ranges, a Parquet file (``storage.parquet``) into
runs of row groups. Nothing here reads more than its own split, except to count the lines before
a split when a malformed line must be named.
"""

from __future__ import annotations

import io
import math
import posixpath
import zipfile
from dataclasses import dataclass, field
from typing import IO, Any, Iterator

import numpy as np

from ..errors import StorageError, UsageError
from .compression import compression_of, decompressed
from .localfs import LocalFS
from .parquet import PARQUET_EXTS, parquet_splits
from .rundir import _FS_ERRORS, _fs

__all__ = ["Split", "list_inputs", "split_size", "make_splits", "whole_split", "read_text_split", "iter_text_split",
           "read_table_split", "lines_before", "assigned"]

_CHUNK = 1 << 20
_FETCH = 8 << 20  # the most one request for a split's bytes fetches
_TAIL_FIRST = 256  # the first read for the rest of a split's last line
TABLE_EXTS = (".npy", ".npz")
#: a UTF-8 byte-order mark: at byte 0 of a text file it is no part of the first line (some
#: editors write one); both readers of a split that starts there drop it
BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class Split:
    """``url`` [``start``, ``end``): bytes of a text file, rows of a table (``kind`` ``npy``/``npz``),
    row groups of a Parquet file (``kind`` ``parquet``), or a whole compressed file (``kind``
    ``compressed``, ``end`` = -1)."""

    url: str
    start: int
    end: int
    kind: str = "text"
    #: about how many bytes of the input it holds (what ``assigned`` balances; not compared)
    nbytes: int = field(default=0, compare=False)


def list_inputs(url: str) -> list[tuple[str, int]]:
    """(url, size in bytes) of every file of the input ``url``: a file, a directory or a glob."""
    fs, path = _input_fs(url)
    proto = url.split("://", 1)[0] + "://" if "://" in url else ""
    try:
        if any(c in path for c in "*?["):
            paths = sorted(fs.glob(path))
        elif fs.isdir(path):
            paths = sorted(p for p in fs.find(path) if not posixpath.basename(p).startswith(("_", ".")))
        elif fs.exists(path):
            paths = [path]
        else:
            raise UsageError(f"cannot read graph input: {url}: no such file or directory")
        files = [(p, int(fs.size(p))) for p in paths if not fs.isdir(p)]
    except (UsageError, StorageError):
        raise
    except _FS_ERRORS as exc:
        raise UsageError(f"cannot read graph input {url}: {exc}") from None
    if not files:
        raise UsageError(f"graph input {url} has no files")
    if len(paths) == 1 and paths[0] == path:  # one file: keep the user's spelling (messages name it)
        return [(url, files[0][1])]
    return [(_unstrip(proto, fs, p), size) for p, size in files]


def _input_fs(url: str) -> tuple[Any, str]:
    try:
        return _fs(url)
    except StorageError as exc:
        raise UsageError(f"cannot read graph input: {exc}") from None


def _unstrip(proto: str, fs: Any, path: str) -> str:
    """A path fsspec returned, as a URL again (local paths stay paths)."""
    if not proto or proto == "file://":
        return path
    return fs.unstrip_protocol(path)


def split_size(files: list[tuple[str, int]], workers: int, most: int) -> int:
    """The split size for ``workers`` readers of ``files``: at most ``most`` bytes, and the same
    number of splits for each worker of the bytes that can be cut (compressed files cannot), so
    that no worker reads a split more than another (scale 20, two workers, 64 MiB splits: four
    splits of 64, 64, 64 and 39 MB dealt in turn gave one worker 56 % of the edges)."""
    cuttable = sum(size for url, size in files if not compression_of(url))
    share = max(math.ceil(cuttable / max(workers, 1)), 1)  # each worker's bytes
    each = math.ceil(share / max(most, 1))  # in as few splits as fit ``most``
    return math.ceil(share / each)


def make_splits(files: list[tuple[str, int]], split_bytes: int) -> list[Split]:
    """Cut ``files`` into splits of about ``split_bytes`` (text) or as many rows (tables)."""
    split_bytes = max(int(split_bytes), 1)
    out: list[Split] = []
    for url, size in files:
        if compression_of(url):
            out.append(Split(url, 0, -1, "compressed", size))
        elif url.endswith(PARQUET_EXTS):
            groups = parquet_splits(url, size, split_bytes)
            out.extend(Split(url, a, b, "parquet", size // len(groups)) for a, b in groups)
        elif url.endswith(TABLE_EXTS):
            rows, row_bytes = table_rows(url)
            # a compressed .npz member cannot be entered in the middle (like .gz): one split
            step = max(split_bytes // max(row_bytes, 1), 1) if not _compressed(url) else max(rows, 1)
            out.extend(Split(url, a, b, url[-3:], (b - a) * row_bytes) for a, b in _ranges(rows, step))
        else:
            out.extend(Split(url, a, b, "text", b - a) for a, b in _ranges(size, split_bytes))
    return out


def _ranges(n: int, step: int) -> Iterator[tuple[int, int]]:
    """[a, b) cutting [0, n) every ``step``."""
    for a in range(0, n, step):
        yield a, min(a + step, n)


def whole_split(url: str, size: int) -> Split:
    """A text file as one split, compressed or not."""
    return Split(url, 0, -1, "compressed") if compression_of(url) else Split(url, 0, size)


def assigned(splits: list[Split], worker: int, workers: int) -> list[tuple[int, Split]]:
    """The splits worker ``worker`` of ``workers`` reads, in input order: the largest split first
    to the worker with the fewest bytes so far (the lowest-numbered of those), and so on. Splits
    of one size are dealt in turn; a directory of unequal parts is balanced by bytes."""
    load = [0] * max(workers, 1)
    mine = []
    for i in sorted(range(len(splits)), key=lambda i: -splits[i].nbytes):  # (stable: input order on ties)
        w = load.index(min(load))
        load[w] += splits[i].nbytes
        if w == worker:
            mine.append(i)
    return [(i, splits[i]) for i in sorted(mine)]


def read_text_split(split: Split) -> bytes:
    """The lines of a text split: those starting in [start, end), each with its newline."""
    fs, path = _input_fs(split.url)
    try:
        if split.kind == "compressed":
            with fs.open(path, "rb") as raw, decompressed(raw, split.url) as f:
                return _without_bom(f.read())
        with _open_range(fs, path) as f:
            lo = max(split.start - 1, 0)
            f.seek(lo)
            data = f.read(split.end - lo)
            if split.start > 0:  # the line that started before this split belongs to the previous one
                nl = data.find(b"\n")
                if nl < 0:
                    return b""
                data = data[nl + 1:]
                if not data:  # the next line starts at ``end``: the next split's
                    return b""
            if not data.endswith(b"\n"):  # finish the last line, which may run into the next split
                data += _rest_of_line(f)
            return _without_bom(data) if split.start == 0 else data
    except UsageError:
        raise
    except _FS_ERRORS as exc:
        raise UsageError(f"cannot read graph input {split.url}: {exc}") from None


def iter_text_split(split: Split, block: int) -> Iterator[bytes]:
    """The lines of a text split (as ``read_text_split``) in blocks of about ``block`` bytes, each
    ending at a line end (a longer line is one longer block): a split is never held whole."""
    fs, path = _input_fs(split.url)
    try:
        if split.kind == "compressed":
            with fs.open(path, "rb") as raw, decompressed(raw, split.url) as f:
                yield from _first_without_bom(_line_blocks(f, block, None, skip_first=False))
            return
        with _open_range(fs, path) as f:
            lo = max(split.start - 1, 0)
            f.seek(lo)
            src = f if isinstance(fs, LocalFS) else _Fetches(f, lo, split.end)
            blocks = _line_blocks(src, block, split.end - lo, skip_first=split.start > 0)
            yield from _first_without_bom(blocks) if split.start == 0 else blocks
    except UsageError:
        raise
    except _FS_ERRORS as exc:
        raise UsageError(f"cannot read graph input {split.url}: {exc}") from None


def _without_bom(data: bytes) -> bytes:
    """The bytes of a file's start without a byte-order mark."""
    return data[len(BOM):] if data.startswith(BOM) else data


def _first_without_bom(blocks: Iterator[bytes]) -> Iterator[bytes]:
    """``blocks`` of a file from its start, the first without a byte-order mark (the only block
    looked at: the BOM costs nothing per line)."""
    for block in blocks:
        block = _without_bom(block)
        if block:
            yield block
        break
    yield from blocks


def _line_blocks(f: "IO[bytes] | _Fetches", block: int, limit: int | None, skip_first: bool) -> Iterator[bytes]:
    """Blocks of whole lines read from ``f``: ``limit`` bytes of it (None: to the end), then the
    rest of the last line started in them; ``skip_first``: the first line (up to its newline)
    belongs to the previous split.

    Reads land in one buffer, reused, and each block is copied out of it once: reading a new bytes
    object per block, cutting it at its last line end and joining the rest to the next made three
    copies, and blocks of a few MB were each a fresh mapping faulted in page by page (the
    scale-19 edge list in 4 MB blocks: 76K page faults, 0.18-0.20 s; now, in the parser's 512 KB
    blocks, which the heap reuses: none, 0.02 s)."""
    buf = bytearray(block)
    view = memoryview(buf)
    have, left = 0, limit  # have: the start of buf in use (the last read's unfinished line)
    while left is None or left > 0:
        want = block if left is None else min(block, left)
        if have + want > len(buf):  # a line longer than a block: room for it
            view.release()
            buf.extend(bytes(have + want - len(buf)))
            view = memoryview(buf)
        n = _read_into(f, view[have:have + want])
        if not n:
            break
        if left is not None:
            left -= n
        start, end = 0, have + n
        if skip_first:
            nl = buf.find(b"\n", 0, end)
            if nl < 0:
                continue  # still in the previous split's line
            start, skip_first = nl + 1, False
        cut = buf.rfind(b"\n", start, end) + 1
        if cut > start:
            yield bytes(view[start:cut])
            start = cut
        if start:  # the unfinished line to the front (through a copy: the two may overlap)
            buf[:end - start] = bytes(view[start:end])
        have = end - start
    if skip_first:  # no line starts in this split
        return
    carry = bytes(view[:have])
    view.release()
    if carry and limit is not None:  # finish the last line, which may run into the next split
        carry += _rest_of_line(f)
    if carry:
        yield carry


def _rest_of_line(f: "IO[bytes] | _Fetches") -> bytes:
    """The bytes of ``f`` up to and including its next newline (or to its end), read in chunks
    that start small and double: a line end is usually a few bytes away, and on an object store
    every byte read past it is a byte fetched for nothing."""
    tail, size = [], _TAIL_FIRST
    while True:
        more = f.read(size)
        if not more:
            break
        nl = more.find(b"\n")
        if nl >= 0:
            tail.append(more[:nl + 1])
            break
        tail.append(more)
        size = min(size * 2, _CHUNK)
    return b"".join(tail)


def _open_range(fs: Any, path: str) -> Any:
    """``path`` opened to read byte ranges exactly: no read-ahead cache (s3fs and the other
    object stores otherwise fetch a block of several MB past each read, so that a worker reading
    its split fetches much of the next workers' splits too); local files read as usual."""
    if isinstance(fs, LocalFS):
        return fs.open(path, "rb")
    return fs.open(path, "rb", cache_type="none")


class _Fetches:
    """Reads of ``f`` (opened without a cache, at ``pos``) served from fetches of up to ``_FETCH``
    bytes that stop at ``end``, and past ``end`` fetches of what is asked: one request per few MB
    (an object store's latency is per request), and no byte fetched past the split that is not read."""

    def __init__(self, f: IO[bytes], pos: int, end: int) -> None:
        self.f, self.pos, self.end = f, pos, end
        self.buf, self.at = b"", 0

    def read(self, n: int) -> bytes:
        if self.at >= len(self.buf):
            want = min(max(n, _FETCH), self.end - self.pos) if self.pos < self.end else n
            self.buf, self.at = self.f.read(want), 0
            self.pos += len(self.buf)
        out = self.buf[self.at:self.at + n]
        self.at += len(out)
        return out

    def readinto(self, out: memoryview) -> int:
        data = self.read(len(out))
        out[:len(data)] = data
        return len(data)


def _read_into(f: "IO[bytes] | _Fetches", out: memoryview) -> int:
    """``f.readinto(out)`` where the file has it (local files, fsspec's buffered files, gzip), else a read copied in."""
    readinto = getattr(f, "readinto", None)
    if readinto is not None:
        return int(readinto(out) or 0)
    data = f.read(len(out))
    out[:len(data)] = data
    return len(data)


def lines_before(split: Split) -> int:
    """How many lines of the file come before the first line of ``split`` (to name a bad line)."""
    if split.start == 0 or split.kind != "text":
        return 0
    fs, path = _input_fs(split.url)
    count, left = 0, split.start - 1  # the line through byte start-1 is the previous split's
    with fs.open(path, "rb") as f:
        while left > 0:
            chunk = f.read(min(_CHUNK, left))
            if not chunk:
                break
            count += chunk.count(b"\n")
            left -= len(chunk)
        nl = b""
        while nl != b"\n":  # the rest of the line that started before this split
            nl = f.read(1)
            if not nl:
                break
        return count + 1 if nl else count


# ------------------------------------------------------------------------------------------------
# .npy / .npz edge tables
# ------------------------------------------------------------------------------------------------
def _npy_header(f: Any) -> tuple[np.dtype, tuple[int, ...], int]:
    version = np.lib.format.read_magic(f)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = read(f)
    if fortran:
        raise UsageError("fortran-ordered .npy edge tables are not supported: save with np.ascontiguousarray")
    return dtype, shape, f.tell()


def _npz_members(f: Any) -> dict[str, Any]:
    z = zipfile.ZipFile(f)
    return {name[:-4] if name.endswith(".npy") else name: z for name in z.namelist()}


def _compressed(url: str) -> bool:
    """Whether ``url`` is an .npz whose arrays are deflated (``np.savez_compressed``)."""
    if not url.endswith(".npz"):
        return False
    fs, path = _input_fs(url)
    try:
        with _open_range(fs, path) as f:
            return any(i.compress_type != zipfile.ZIP_STORED for i in zipfile.ZipFile(f).infolist())
    except (ValueError, zipfile.BadZipFile) as exc:
        raise UsageError(f"{url}: not a readable edge table: {exc}") from None


def table_rows(url: str) -> tuple[int, int]:
    """(rows, bytes per row) of an edge table."""
    fs, path = _input_fs(url)
    try:
        with _open_range(fs, path) as f:
            if url.endswith(".npy"):
                dtype, shape, _ = _npy_header(f)
                if len(shape) != 2 or shape[1] not in (2, 3):
                    raise UsageError(f"{url}: a .npy edge table is a (rows, 2 or 3) array, found shape {shape}")
                return shape[0], dtype.itemsize * shape[1]
            z = zipfile.ZipFile(f)
            names = {n[:-4] for n in z.namelist() if n.endswith(".npy")}
            if not {"src", "dst"} <= names:
                raise UsageError(f"{url}: a .npz edge table holds arrays 'src', 'dst' and optionally 'weight', "
                                 f"found {sorted(names)}")
            rows, width = -1, 0
            for name in ("src", "dst", "weight"):
                if name not in names:
                    continue
                with z.open(name + ".npy") as m:
                    dtype, shape, _ = _npy_header(m)
                if len(shape) != 1 or (rows >= 0 and shape[0] != rows):
                    raise UsageError(f"{url}: '{name}' must be a 1-D array as long as 'src', found shape {shape}")
                rows, width = shape[0], width + dtype.itemsize
            return rows, width
    except (UsageError, StorageError):
        raise
    except (ValueError, zipfile.BadZipFile) as exc:
        raise UsageError(f"{url}: not a readable edge table: {exc}") from None
    except _FS_ERRORS as exc:
        raise UsageError(f"cannot read graph input {url}: {exc}") from None


def read_table_split(split: Split) -> dict[str, np.ndarray]:
    """Rows [start, end) of an edge table as ``src``, ``dst`` and (if present) ``weight`` arrays."""
    fs, path = _input_fs(split.url)
    a, b = split.start, split.end
    out: dict[str, np.ndarray] = {}
    try:
        # (an .npz member is read through zipfile's small chunks: those keep the read-ahead cache)
        with _open_range(fs, path) if split.kind == "npy" else fs.open(path, "rb") as f:
            if split.kind == "npy":
                dtype, shape, offset = _npy_header(f)
                width = shape[1]
                f.seek(offset + a * width * dtype.itemsize)
                table = np.frombuffer(f.read((b - a) * width * dtype.itemsize), dtype=dtype).reshape(b - a, width)
                out["src"], out["dst"] = table[:, 0], table[:, 1]
                if width == 3:
                    out["weight"] = table[:, 2]
                return out
            z = zipfile.ZipFile(f)
            for name in ("src", "dst", "weight"):
                if name + ".npy" not in z.namelist():
                    continue
                with z.open(name + ".npy") as m:
                    dtype, _, offset = _npy_header(m)
                    m.seek(offset + a * dtype.itemsize)  # a stored member seeks; a deflated one reads through
                    out[name] = np.frombuffer(m.read((b - a) * dtype.itemsize), dtype=dtype)
            return out
    except (ValueError, zipfile.BadZipFile, io.UnsupportedOperation) as exc:
        raise UsageError(f"{split.url}: not a readable edge table: {exc}") from None
    except _FS_ERRORS as exc:
        raise UsageError(f"cannot read graph input {split.url}: {exc}") from None

