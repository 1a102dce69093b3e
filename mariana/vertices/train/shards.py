"""Sharded data sets: the shard format, its index, writing shards, and opening them checked.

A shard is an uncompressed ``.npz`` (a zip of stored members) holding ``x`` (N, ...) and ``y``
(N,), so that numpy, and anything else that reads ``.npz``, opens it as it is; because the
members are stored, not deflated, rows ``[lo, hi)`` of ``x`` are one byte range of the file,
and a reader fetches only the rows it consumes. uint8 samples stay uint8 on disk and in memory
until a batch is decoded.

A shard directory holds ``index.json``::

    {"format": "mariana-shards", "version": 1, "classes": 10, "source": "...",
     "x_shape": [1, 28, 28], "x_dtype": "uint8", "y_dtype": "int64",
     "splits": {"train": [shard, ...], "test": [shard, ...]}}
    shard = {"file": "train-00000.npz", "samples": 60000, "bytes": ..., "sha256": "...",
             "x_offset": ..., "y_offset": ...}

The index is the commit point: ``ShardWriter`` first removes a directory's old index and the
shard files a previous write left (``train-NNNNN.npz``, ``test-NNNNN.npz``, temp files), then
writes the shards (each whole and on disk) and ``index.json`` last, in one atomic write. A
directory without an index is therefore not a data set (an interrupted ``mariana data shard``
leaves none) and is refused; shards without an index are opened only when named as a glob or a
list.

``open_shards(spec)`` opens a directory with an index, checked before training starts: every
field of the index against the shard's own arrays (its size; the zip directory and ``.npy``
headers of ``x`` and ``y``: samples, shapes, dtypes, where each array's data starts), unless told
not to every shard's sha256, and every label (``y`` of every shard is read: 8 bytes a sample)
against the number of classes, ``[0, classes)``. Or a glob or list of ``.npz`` (or ``.npy``)
shards without an index (their headers are read; files named ``test*`` form the test split, else
the last ``test_fraction`` of the samples; labels checked the same way). Every problem is one
``DataError`` line naming the file and the field.

Sources for ``mariana data shard``: an ``.npz`` (``x``, ``y`` and optionally ``x_test``,
``y_test``), a directory of IDX files (MNIST layout, gzipped or not) or of CIFAR-10 binary
batches (``data_batch_*.bin``, ``test_batch.bin``).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import logging
import posixpath
import re
import struct
import zipfile
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import StorageError, UsageError
from ...storage import read_bytes
from ...storage.shards import (digest, exists, expand_urls, file_size, is_dir, join_url, list_names, open_read,
                              open_write, read_range, remove)

log = logging.getLogger(__name__)

__all__ = ["DataError", "Shard", "Split", "ShardSet", "INDEX", "open_shards", "write_shards", "ShardWriter", "read_source",
           "read_idx", "read_cifar_batches", "load_arrays"]

INDEX = "index.json"
FORMAT = "mariana-shards"
VERSION = 1
SPLITS = ("train", "test")
#: what a ``ShardWriter`` writes into a directory (shards, and the temp files of a write cut
#: short): a rewrite removes these, and nothing else of the directory's
_WRITTEN = re.compile(r"^(?:(?:train|test)-\d{5}\.npz|\.(?:(?:train|test)-\d{5}\.npz|index\.json)\.[0-9a-f]+\.tmp)$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_LOCAL_HEADER = struct.Struct("<4s5H3I2H")  # zip local file header (30 bytes)


class DataError(UsageError):
    """A data set that cannot be used as it is: one line naming the file and what is wrong."""


@dataclass
class Shard:
    """One shard file and where its arrays' data start (None: a compressed member, read whole)."""

    url: str
    samples: int
    bytes: int
    sha256: str | None
    x_offset: int | None
    y_offset: int | None
    x_shape: tuple[int, ...] = ()
    x_dtype: str = "uint8"
    y_dtype: str = "int64"
    record: np.dtype | None = None  # a .npy shard: one structured array with fields x and y


@dataclass
class Split:
    """The samples of one split: ``segments`` (shard index, first row, end row) in storage order."""

    shards: list[Shard]
    segments: list[tuple[int, int, int]]
    x_shape: tuple[int, ...]
    x_dtype: np.dtype
    y_dtype: np.dtype

    @property
    def size(self) -> int:
        return sum(hi - lo for _, lo, hi in self.segments)

    @property
    def row_bytes(self) -> int:
        return int(np.prod(self.x_shape, dtype=np.int64)) * self.x_dtype.itemsize

    def read_rows(self, shard: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows ``[lo, hi)`` of one shard: x (as stored) and y (int64). Raises ``DataError``."""
        s = self.shards[shard]
        try:
            if s.record is not None and s.x_offset is not None:
                size = s.record.itemsize
                rec = np.frombuffer(read_range(s.url, s.x_offset + lo * size, s.x_offset + hi * size), dtype=s.record)
                x, y = rec["x"].reshape(hi - lo, *self.x_shape), rec["y"]
            elif s.x_offset is None or s.y_offset is None:
                x, y = _read_whole(s)
                x, y = x[lo:hi], y[lo:hi]
            else:
                rb, yb = self.row_bytes, self.y_dtype.itemsize
                xbuf = read_range(s.url, s.x_offset + lo * rb, s.x_offset + hi * rb)
                ybuf = read_range(s.url, s.y_offset + lo * yb, s.y_offset + hi * yb)
                x = np.frombuffer(xbuf, dtype=self.x_dtype).reshape(hi - lo, *self.x_shape)
                y = np.frombuffer(ybuf, dtype=self.y_dtype)
        except StorageError as exc:
            raise DataError(f"shard {s.url}: {exc}") from None
        return x, y.astype(np.int64, copy=False)


@dataclass
class ShardSet:
    """A sharded data set: the train and test splits, the number of classes, where it came from."""

    url: str
    train: Split
    test: Split | None
    classes: int
    source: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return self.train.x_shape

    @property
    def scale(self) -> float:
        """What decoding multiplies stored values by: 1/255 for uint8, else 1."""
        return 1.0 / 255.0 if self.train.x_dtype == np.uint8 else 1.0


# -- the layout of an .npz member ---------------------------------------------------------------------
def _npy_header(f: Any) -> tuple[tuple[int, ...], np.dtype, bool, int]:
    """(shape, dtype, fortran order, header length) of the .npy record ``f`` is positioned at."""
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
    else:
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
    return tuple(shape), np.dtype(dtype), bool(fortran), f.tell()


def _layout(url: str) -> dict[str, Any]:
    """The arrays of an .npz shard and where their data start in the file (None: deflated)."""
    out: dict[str, Any] = {}
    try:
        with open_read(url) as raw, zipfile.ZipFile(raw) as z:
            for info in z.infolist():
                name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
                if name not in ("x", "y"):
                    continue
                with z.open(info) as member:
                    shape, dtype, fortran, hlen = _npy_header(member)
                offset = None
                if info.compress_type == zipfile.ZIP_STORED and not fortran:
                    raw.seek(info.header_offset)
                    local = _LOCAL_HEADER.unpack(raw.read(_LOCAL_HEADER.size))
                    offset = info.header_offset + _LOCAL_HEADER.size + local[9] + local[10] + hlen
                out[name] = (shape, dtype, offset)
    except (zipfile.BadZipFile, ValueError, EOFError, struct.error) as exc:
        raise DataError(f"shard {url}: not a readable .npz file ({exc})") from None
    except StorageError as exc:
        raise DataError(f"shard {url}: {exc}") from None
    missing = [k for k in ("x", "y") if k not in out]
    if missing:
        raise DataError(f"shard {url}: no array {' or '.join(repr(k) for k in missing)}; a shard holds 'x' and 'y'")
    (xs, xd, _), (ys, _, _) = out["x"], out["y"]
    if len(xs) < 1 or len(ys) != 1 or xs[0] != ys[0]:
        raise DataError(f"shard {url}: expected x of shape (N, ...) and y of shape (N,), got {xs} and {ys}")
    if not np.issubdtype(xd, np.number) or not np.issubdtype(out["y"][1], np.integer):
        raise DataError(f"shard {url}: x must be numeric and y integer, got {xd} and {out['y'][1]}")
    return out


def _read_whole(s: Shard) -> tuple[np.ndarray, np.ndarray]:
    """A shard read whole (deflated members): bounded by one shard's size."""
    try:
        with np.load(io.BytesIO(read_bytes(s.url)), allow_pickle=False) as npz:
            return npz["x"], npz["y"]
    except (ValueError, OSError, KeyError, zipfile.BadZipFile) as exc:
        raise DataError(f"shard {s.url}: not a readable .npz file ({exc})") from None


def _npy_shard(url: str) -> Shard:
    """A .npy shard: a structured array whose records hold ``x`` (a sub-array) and ``y``."""
    try:
        with open_read(url) as f:
            shape, dtype, fortran, hlen = _npy_header(f)
    except (ValueError, EOFError) as exc:
        raise DataError(f"shard {url}: not a readable .npy file ({exc})") from None
    except StorageError as exc:
        raise DataError(f"shard {url}: {exc}") from None
    names = dtype.names or ()
    if "x" not in names or "y" not in names or len(shape) != 1 or fortran:
        raise DataError(f"shard {url}: a .npy shard holds one structured array of records with fields 'x' and 'y' "
                        f"(found dtype {dtype} of shape {shape})")
    xd, yd = dtype.fields["x"][0], dtype.fields["y"][0]  # type: ignore[index]
    if not np.issubdtype(xd.base, np.number) or not np.issubdtype(yd, np.integer):
        raise DataError(f"shard {url}: x must be numeric and y integer, got {xd.base} and {yd}")
    return Shard(url, int(shape[0]), file_size(url), None, hlen, None, tuple(int(d) for d in xd.shape),
                 str(xd.base), str(yd), record=dtype)


def _shard_of(url: str) -> Shard:
    if url.endswith(".npy"):
        return _npy_shard(url)
    lay = _layout(url)
    (xs, xd, xo), (_, yd, yo) = lay["x"], lay["y"]
    return Shard(url, int(xs[0]), file_size(url), None, xo, yo, tuple(int(d) for d in xs[1:]), str(xd), str(yd))


def _split_of(shards: list[Shard], where: str, segments: list[tuple[int, int, int]] | None = None) -> Split:
    """Check the shards agree on sample shape and dtypes (one line naming the first that differs)."""
    first = shards[0]
    for s in shards[1:]:
        if (s.x_shape, s.x_dtype, s.y_dtype) != (first.x_shape, first.x_dtype, first.y_dtype):
            raise DataError(f"{where}: shard {s.url} holds x of shape {s.x_shape} {s.x_dtype} and y {s.y_dtype}, "
                            f"but {first.url} holds {first.x_shape} {first.x_dtype} and y {first.y_dtype}: "
                            f"every shard must agree")
    if segments is None:
        segments = [(i, 0, s.samples) for i, s in enumerate(shards) if s.samples]
    return Split(shards, segments, first.x_shape, np.dtype(first.x_dtype), np.dtype(first.y_dtype))


# -- opening --------------------------------------------------------------------------------------------
def open_shards(spec: str, verify: bool = True, test_fraction: float = 0.2, classes: int = 0) -> ShardSet:
    """The sharded data set at ``spec`` (a directory with ``index.json``, or a directory, glob or
    comma-separated list of ``.npz`` shards), checked; raises ``DataError`` (exit 2)."""
    try:
        index_url = join_url(spec, INDEX) if "," not in spec and is_dir(spec) else None
        if spec.endswith("/" + INDEX) or spec == INDEX:
            index_url, spec = spec, posixpath.dirname(spec) or "."
        if index_url is not None:
            if exists(index_url):
                return _open_indexed(spec, index_url, verify, classes)
            raise DataError(f"data {spec}: no {INDEX}, so not a complete shard set (`mariana data shard` writes the "
                            f"index last; an interrupted run leaves none): rerun it, or name the shards as a glob "
                            f"({join_url(spec, '*.npz')}) to use them without an index")
        urls = expand_urls(spec)
    except StorageError as exc:
        raise DataError(f"data {spec}: {exc}") from None
    if not urls:
        raise DataError(f"data {spec}: no .npz shards found (and no {INDEX})")
    shards = [_shard_of(u) for u in urls]
    test_urls = [i for i, u in enumerate(urls) if posixpath.basename(u).startswith("test")]
    if test_urls and len(test_urls) < len(urls):
        train = _split_of([s for i, s in enumerate(shards) if i not in test_urls], spec)
        test: Split | None = _split_of([shards[i] for i in test_urls], spec)
    else:  # hold out the last test_fraction of the samples, in storage order
        split = _split_of(shards, spec)
        n_test = int(round(split.size * test_fraction))
        train_segs, test_segs, left = [], [], split.size - n_test
        for i, lo, hi in split.segments:
            take = min(hi - lo, max(left, 0))
            if take:
                train_segs.append((i, lo, lo + take))
            if lo + take < hi:
                test_segs.append((i, lo + take, hi))
            left -= take
        train = Split(shards, train_segs, split.x_shape, split.x_dtype, split.y_dtype)
        test = Split(shards, test_segs, split.x_shape, split.x_dtype, split.y_dtype) if test_segs else None
    if test is not None and test.x_shape != train.x_shape:
        raise DataError(f"{spec}: test shards hold samples of shape {test.x_shape}, train shards {train.x_shape}")
    return ShardSet(spec, train, test, _checked_classes(train, test, classes, "config key 'classes'"), spec)


def _checked_classes(train: Split, test: Split | None, classes: int, said: str) -> int:
    """The number of classes (``classes``, else max label + 1), every label of every shard checked
    to be in ``[0, classes)`` (reads ``y`` only: 8 bytes a sample); the first label out of range,
    in storage order, is named. ``said``: where ``classes`` came from, for the message."""
    top = -1
    for split in (train, test):
        for i, lo, hi in split.segments if split else ():
            y = _labels(split, i, lo, hi)
            if not y.size:
                continue
            url = split.shards[i].url
            neg = np.flatnonzero(y < 0)
            if neg.size:
                raise DataError(f"shard {url}: label {y[neg[0]]} at row {lo + neg[0]}: labels must be >= 0")
            over = np.flatnonzero(y >= classes) if classes else neg
            if over.size:
                raise DataError(f"shard {url}: label {y[over[0]]} at row {lo + over[0]} is out of range for {classes} "
                                f"classes ({said} {classes}: labels must be in [0, {classes}))")
            top = max(top, int(y.max()))
    return classes or top + 1


def _labels(split: Split, i: int, lo: int, hi: int) -> np.ndarray:
    s = split.shards[i]
    if s.record is not None:
        return split.read_rows(i, lo, hi)[1]
    if s.y_offset is None:
        return _read_whole(s)[1][lo:hi].astype(np.int64)
    yb = split.y_dtype.itemsize
    try:
        buf = read_range(s.url, s.y_offset + lo * yb, s.y_offset + hi * yb)
    except StorageError as exc:
        raise DataError(f"shard {s.url}: {exc}") from None
    return np.frombuffer(buf, dtype=split.y_dtype).astype(np.int64)


def _int_field(value: Any, where: str, name: str, nullable: bool = False) -> int | None:
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise DataError(f"{where}: {name} must be an integer >= 0{' or null' if nullable else ''}, got {value!r}")
    return value


def _dtype_field(value: Any, where: str, name: str, kind: Any) -> str:
    try:
        dt = np.dtype(value)
    except TypeError:
        dt = None
    if not isinstance(value, str) or dt is None or not np.issubdtype(dt, kind):
        raise DataError(f"{where}: {name} must name a{'n integer' if kind is np.integer else ' numeric'} dtype, "
                        f"got {value!r}")
    return str(dt)


def _index_entry(spec: str, index_url: str, split: str, k: int, e: Any, x_shape: tuple[int, ...],
                 x_dtype: str, y_dtype: str) -> Shard:
    """A shard as the index describes it (every field's type and range checked, nothing read)."""
    where = f"{index_url}: {split} shard {k}"
    if not isinstance(e, dict):
        raise DataError(f"{where}: an entry is an object with file, samples, bytes, sha256, x_offset, y_offset")
    file = e.get("file")
    if (not isinstance(file, str) or not file or "://" in file or file.startswith("/")
            or ".." in file.split("/") or "\\" in file):
        raise DataError(f"{where}: file must be a file name in the shard directory, got {file!r}")
    where = f"{index_url}: {split} shard {file}"
    missing = [f for f in ("samples", "bytes") if f not in e]
    if missing:
        raise DataError(f"{where}: no {' or '.join(missing)}")
    sha = e.get("sha256")
    if sha is not None and (not isinstance(sha, str) or not _SHA256.match(sha)):
        raise DataError(f"{where}: sha256 must be 64 lowercase hex digits or null, got {sha!r}")
    shape = e.get("x_shape", list(x_shape))
    if not isinstance(shape, list) or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in shape):
        raise DataError(f"{where}: x_shape must be a list of positive integers, got {shape!r}")
    return Shard(join_url(spec, file), _int_field(e["samples"], where, "samples"), _int_field(e["bytes"], where, "bytes"),
                 sha, _int_field(e.get("x_offset"), where, "x_offset", True),
                 _int_field(e.get("y_offset"), where, "y_offset", True), tuple(shape),
                 _dtype_field(e.get("x_dtype", x_dtype), where, "x_dtype", np.number),
                 _dtype_field(e.get("y_dtype", y_dtype), where, "y_dtype", np.integer))


def _against_arrays(said: Shard, index_url: str, split: str, file: str) -> Shard:
    """The shard as its own arrays describe it, after checking that every field the index gives
    agrees (one line naming the file and the field)."""
    got = _shard_of(said.url)
    for name in ("samples", "x_offset", "y_offset", "x_shape", "x_dtype", "y_dtype"):
        told, real = getattr(said, name), getattr(got, name)
        if name == "y_offset" and got.record is not None:
            continue  # a .npy shard's labels sit in its records: the index has no y_offset to give
        if told != real:
            raise DataError(f"{index_url}: {split} shard {file}: the index says {name} {_shown(told)}, the shard's "
                            f"arrays say {_shown(real)}")
    got.sha256 = said.sha256
    return got


def _shown(value: Any) -> str:
    return "null (read whole)" if value is None else str(list(value) if isinstance(value, tuple) else value)


def _open_indexed(spec: str, index_url: str, verify: bool, classes: int) -> ShardSet:
    try:
        index = json.loads(read_bytes(index_url))
    except (StorageError, ValueError) as exc:
        raise DataError(f"{index_url}: not a readable index ({exc})") from None
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise DataError(f"{index_url}: not a mariana shard index (format {index.get('format')!r})"
                        if isinstance(index, dict) else f"{index_url}: not a mariana shard index")
    if index.get("version") != VERSION:
        raise DataError(f"{index_url}: index version {index.get('version')!r}; this mariana reads version {VERSION}")
    missing = [f for f in ("x_shape", "x_dtype", "y_dtype", "splits") if f not in index]
    if missing:
        raise DataError(f"{index_url}: the index has no {', '.join(missing)}")
    raw_shape = index["x_shape"]
    if not isinstance(raw_shape, list) or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in raw_shape):
        raise DataError(f"{index_url}: x_shape must be a list of positive integers, got {raw_shape!r}")
    x_shape = tuple(raw_shape)
    x_dtype = _dtype_field(index["x_dtype"], index_url, "x_dtype", np.number)
    y_dtype = _dtype_field(index["y_dtype"], index_url, "y_dtype", np.integer)
    said_classes = _int_field(index.get("classes", 0), index_url, "classes")
    if not isinstance(index["splits"], dict) or any(not isinstance(v, list) for v in index["splits"].values()):
        raise DataError(f"{index_url}: splits must map split names to lists of shards")
    unknown = sorted(set(index["splits"]) - set(SPLITS))
    if unknown:
        raise DataError(f"{index_url}: unknown split(s) {', '.join(map(repr, unknown))}; an index holds "
                        f"{' and '.join(SPLITS)}")
    seen: dict[str, str] = {}
    splits: dict[str, Split] = {}
    for name, entries in index["splits"].items():
        shards = []
        for k, e in enumerate(entries):
            said = _index_entry(spec, index_url, name, k, e, x_shape, x_dtype, y_dtype)
            file = e["file"]
            if file in seen:
                raise DataError(f"{index_url}: {name} shard {file} is listed twice (also in {seen[file]}): every "
                                f"sample would be trained on twice")
            seen[file] = name
            if said.x_shape != x_shape or said.x_dtype != x_dtype:
                raise DataError(f"{index_url}: {name} shard {file}: x {list(said.x_shape)} {said.x_dtype}, the index "
                                f"says {list(x_shape)} {x_dtype} for every shard")
            check_shard(said, False)  # there, and of the indexed size, before its headers are read
            shards.append(_against_arrays(said, index_url, name, file))
        if shards:
            splits[name] = _split_of(shards, index_url)
    if "train" not in splits:
        raise DataError(f"{index_url}: the index has no train shards")
    if verify:
        for split in splits.values():
            for s in split.shards:
                check_shard(s, True)
    whence = "config key 'classes'" if classes else f"{index_url} says classes"
    n = _checked_classes(splits["train"], splits.get("test"), classes or said_classes, whence)
    return ShardSet(spec, splits["train"], splits.get("test"), n, str(index.get("source", "")), index)


def check_shard(s: Shard, verify: bool) -> None:
    """The file is there, has the indexed size, and (``verify``) the indexed sha256."""
    try:
        size = file_size(s.url)
        if size != s.bytes:
            raise DataError(f"shard {s.url}: {size} bytes, the index says {s.bytes} (truncated or replaced)")
        if verify and s.sha256:
            _, got = digest(s.url)
            if got != s.sha256:
                raise DataError(f"shard {s.url}: sha256 {got[:16]}... does not match the index ({s.sha256[:16]}...)")
    except StorageError as exc:
        raise DataError(f"shard {s.url}: {exc}") from None


# -- writing --------------------------------------------------------------------------------------------
def _shard_bytes(x: np.ndarray, y: np.ndarray) -> tuple[bytes, int, int]:
    """An uncompressed .npz of x and y, and the offsets of their data in it."""
    buf = io.BytesIO()
    np.savez(buf, x=np.ascontiguousarray(x), y=np.ascontiguousarray(y))
    blob = buf.getvalue()
    offsets = {}
    with zipfile.ZipFile(io.BytesIO(blob)) as z:
        for info in z.infolist():
            local = _LOCAL_HEADER.unpack(blob[info.header_offset:info.header_offset + _LOCAL_HEADER.size])
            start = info.header_offset + _LOCAL_HEADER.size + local[9] + local[10]
            member = io.BytesIO(blob[start:start + 4096])
            *_, hlen = _npy_header(member)
            offsets[info.filename[:-4]] = start + hlen
    return blob, offsets["x"], offsets["y"]


class ShardWriter:
    """Writes shards of about ``shard_mb`` MB as batches of samples come in (a source larger than
    memory streams through it), then ``index.json`` last: a reader never sees a partial set.

    The index is the commit point. Before anything is written the directory's old index is
    removed (from then on it is no data set until ``close``), and with it what an earlier write
    left there (its shards, temp files of a write cut short); other files are left alone. Each
    shard is written whole and synced before the next, the index last, atomically."""

    def __init__(self, to: str, shard_mb: float = 64.0, source: str = "", shuffle_seed: int | None = None) -> None:
        if shard_mb <= 0:
            raise UsageError(f"--shard-mb must be > 0, got {shard_mb}")
        self.to, self.shard_mb = to, shard_mb
        self._clear()
        self.index: dict[str, Any] = {"format": FORMAT, "version": 1, "source": source, "shuffle_seed": shuffle_seed,
                                      "y_dtype": "int64", "splits": {}}
        self.like: np.ndarray | None = None
        self.pending: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        self.top = -1

    def _clear(self) -> None:
        """Uncommit the directory (its index first), then remove an earlier write's shards."""
        try:
            names = list_names(self.to)
            if INDEX in names:
                remove(join_url(self.to, INDEX))
            stale = [n for n in names if _WRITTEN.match(n)]
            for name in stale:
                remove(join_url(self.to, name))
        except StorageError as exc:
            raise DataError(f"--to {self.to}: {exc}") from None
        if stale:
            log.info("%s: removed %d file(s) an earlier write left", self.to, len(stale))

    def add(self, split: str, x: np.ndarray, y: np.ndarray) -> None:
        """Append samples to ``split``; full shards are written at once."""
        if self.like is None:
            self.like = x[:1]
            self.index.update(x_shape=list(x.shape[1:]), x_dtype=str(x.dtype))
        _check_arrays(x, y, split, self.like)
        y = y.astype(np.int64)
        if y.size:
            self.top = max(self.top, int(y.max()))
        self.index["splits"].setdefault(split, [])
        self.pending.setdefault(split, []).append((x, y))
        per = self._per()
        while sum(len(b[1]) for b in self.pending[split]) >= per:
            self._flush(split, per)

    def _per(self) -> int:
        row = int(self.like[0].nbytes) + 8 if self.like is not None else 1
        return max(1, int(self.shard_mb * (1 << 20)) // row)

    def _flush(self, split: str, n: int) -> None:
        pend = self.pending[split]
        if not pend:
            return
        xs = np.concatenate([b[0] for b in pend]) if len(pend) > 1 else pend[0][0]
        ys = np.concatenate([b[1] for b in pend]) if len(pend) > 1 else pend[0][1]
        self.pending[split] = [(xs[n:], ys[n:])] if len(ys) > n else []
        entries = self.index["splits"][split]
        blob, xo, yo = _shard_bytes(xs[:n], ys[:n])
        file = f"{split}-{len(entries):05d}.npz"
        with open_write(join_url(self.to, file), fsync=True) as f:
            f.write(blob)
        entries.append({"file": file, "samples": int(min(n, len(ys))), "bytes": len(blob),
                        "sha256": hashlib.sha256(blob).hexdigest(), "x_offset": xo, "y_offset": yo})

    def close(self, classes: int = 0) -> dict[str, Any]:
        for split, pend in self.pending.items():
            left = sum(len(b[1]) for b in pend)
            if left or not self.index["splits"][split]:
                self._flush(split, left)
        if classes and self.top >= classes:
            raise DataError(f"label {self.top} is out of range for {classes} classes (labels must be in [0, {classes}))")
        self.index["classes"] = int(classes or self.top + 1)
        with open_write(join_url(self.to, INDEX), fsync=True) as f:  # the commit
            f.write((json.dumps(self.index, indent=1) + "\n").encode())
        return self.index


def write_shards(to: str, train: tuple[np.ndarray, np.ndarray], test: tuple[np.ndarray, np.ndarray] | None,
                 shard_mb: float = 64.0, shuffle_seed: int | None = None, source: str = "",
                 classes: int = 0) -> dict[str, Any]:
    """Write the splits as shards of about ``shard_mb`` MB each plus ``index.json`` (written last)
    into the directory ``to`` (any fsspec URL); ``shuffle_seed``: shuffle each split first."""
    w = ShardWriter(to, shard_mb, source, shuffle_seed)
    for name, arrays in (("train", train), ("test", test)):
        if arrays is None:
            continue
        x, y = arrays
        if shuffle_seed is not None:
            order = np.random.default_rng(shuffle_seed).permutation(len(x))
            x, y = x[order], y[order]
        w.add(name, x, y)
    return w.close(classes)


def _check_arrays(x: np.ndarray, y: np.ndarray, name: str, like: np.ndarray) -> None:
    if x.ndim < 2 or y.ndim != 1 or len(x) != len(y):
        raise DataError(f"{name}: expected x of shape (N, ...) and y of shape (N,), got {x.shape} and {y.shape}")
    if x.shape[1:] != like.shape[1:] or x.dtype != like.dtype:
        raise DataError(f"{name}: x is {x.shape[1:]} {x.dtype}, the train split {like.shape[1:]} {like.dtype}")
    if not np.issubdtype(x.dtype, np.number) or not np.issubdtype(y.dtype, np.number):
        raise DataError(f"{name}: x and y must be numeric, got {x.dtype} and {y.dtype}")
    if y.size and (np.any(y != np.round(y)) or y.min() < 0):
        row = int(np.flatnonzero((y != np.round(y)) | (y < 0))[0])
        raise DataError(f"{name}: labels must be integers >= 0; row {row} has {y[row]!r}")


# -- sources: .npz, IDX, CIFAR-10 binary ----------------------------------------------------------------
_IDX_TYPES: dict[int, Any] = {0x08: np.uint8, 0x09: np.int8, 0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"),
              0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}


def read_idx(url: str) -> np.ndarray:
    """An IDX file (MNIST's format), gzipped or not."""
    try:
        blob = read_bytes(url)
        if blob[:2] == b"\x1f\x8b":
            blob = gzip.decompress(blob)
    except StorageError as exc:
        raise DataError(str(exc)) from None
    except (OSError, EOFError) as exc:
        raise DataError(f"{url}: not a readable gzip file ({exc})") from None
    if len(blob) < 4 or blob[0] != 0 or blob[1] != 0 or blob[2] not in _IDX_TYPES:
        raise DataError(f"{url}: not an IDX file (bad magic {blob[:4].hex()})")
    ndim = blob[3]
    dims = struct.unpack(f">{ndim}I", blob[4:4 + 4 * ndim])
    dtype = np.dtype(_IDX_TYPES[blob[2]])
    need = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    data = blob[4 + 4 * ndim:]
    if len(data) < need:
        raise DataError(f"{url}: truncated IDX file: {len(data)} bytes of data, its header says {need}")
    return np.frombuffer(data, dtype=dtype, count=int(np.prod(dims, dtype=np.int64))).reshape(dims)


def _find(url: str, names: tuple[str, ...]) -> str | None:
    for name in names:
        for candidate in (name, name + ".gz"):
            u = join_url(url, candidate)
            if exists(u):
                return u
    return None


def read_idx_dir(url: str) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray] | None]:
    """train and test (images as (N, 1, H, W) uint8, labels) from MNIST-layout IDX files in ``url``."""
    parts: dict[str, np.ndarray] = {}
    for key, names in (("xtr", ("train-images-idx3-ubyte", "train-images.idx3-ubyte")),
                       ("ytr", ("train-labels-idx1-ubyte", "train-labels.idx1-ubyte")),
                       ("xte", ("t10k-images-idx3-ubyte", "t10k-images.idx3-ubyte")),
                       ("yte", ("t10k-labels-idx1-ubyte", "t10k-labels.idx1-ubyte"))):
        found = _find(url, names)
        if found is None:
            if key in ("xtr", "ytr"):
                raise DataError(f"{url}: no {names[0]}[.gz] (an IDX directory holds train-images-idx3-ubyte, "
                                f"train-labels-idx1-ubyte and optionally t10k-*)")
            continue
        parts[key] = read_idx(found)
    out: list[tuple[np.ndarray, np.ndarray] | None] = []
    for xk, yk in (("xtr", "ytr"), ("xte", "yte")):
        if xk not in parts or yk not in parts:
            out.append(None)
            continue
        x, y = parts[xk], parts[yk]
        if x.ndim == 3:
            x = x[:, None]  # (N, 1, H, W): images for convolutions; dense layers flatten them
        if len(x) != len(y):
            raise DataError(f"{url}: {len(x)} images but {len(y)} labels")
        out.append((x, y.astype(np.int64)))
    return out[0], out[1]  # type: ignore[return-value]


def read_cifar_batches(urls: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """CIFAR-10 binary batches: records of 1 label byte + 3072 pixel bytes (3x32x32)."""
    xs, ys = [], []
    for url in urls:
        try:
            blob = np.frombuffer(read_bytes(url), dtype=np.uint8)
        except StorageError as exc:
            raise DataError(str(exc)) from None
        if blob.size % 3073:
            raise DataError(f"{url}: {blob.size} bytes is not a whole number of CIFAR-10 records (3073 bytes each)")
        rec = blob.reshape(-1, 3073)
        ys.append(rec[:, 0].astype(np.int64))
        xs.append(rec[:, 1:].reshape(-1, 3, 32, 32))
    return np.concatenate(xs), np.concatenate(ys)


def read_cifar_dir(url: str) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray] | None]:
    base = join_url(url, "cifar-10-batches-bin") if exists(join_url(url, "cifar-10-batches-bin")) else url
    train = [join_url(base, f"data_batch_{i}.bin") for i in range(1, 6)]
    train = [u for u in train if exists(u)]
    if not train:
        raise DataError(f"{url}: no data_batch_*.bin (CIFAR-10 binary batches)")
    test = join_url(base, "test_batch.bin")
    return read_cifar_batches(train), read_cifar_batches([test]) if exists(test) else None


def load_arrays(url: str) -> dict[str, np.ndarray]:
    """The arrays of an .npz file at any URL."""
    try:
        with np.load(io.BytesIO(read_bytes(url)), allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    except StorageError as exc:
        raise DataError(str(exc)) from None
    except (ValueError, OSError, zipfile.BadZipFile) as exc:
        raise DataError(f"{url}: not a readable .npz file ({exc})") from None


def read_source(url: str) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray] | None, str]:
    """(train, test or None, kind) from an .npz, an IDX directory (or file pair) or CIFAR-10 batches."""
    try:
        if is_dir(url):
            if exists(join_url(url, "cifar-10-batches-bin")) or exists(join_url(url, "data_batch_1.bin")):
                tr, te = read_cifar_dir(url)
                return tr, te, "cifar"
            tr, te = read_idx_dir(url)
            return tr, te, "idx"
        if not exists(url):
            raise DataError(f"{url}: no such file or directory")
    except StorageError as exc:
        raise DataError(str(exc)) from None
    if url.endswith(".bin"):
        return read_cifar_batches([url]), None, "cifar"
    arrays = load_arrays(url)
    missing = [k for k in ("x", "y") if k not in arrays]
    if missing:
        raise DataError(f"{url}: the data file has no array {' or '.join(repr(k) for k in missing)} "
                        f"(found: {', '.join(arrays) or 'nothing'}); it needs 'x' and 'y'")
    test = (arrays["x_test"], arrays["y_test"]) if "x_test" in arrays and "y_test" in arrays else None
    return (arrays["x"], arrays["y"]), test, "npz"
