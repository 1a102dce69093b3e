"""Results written in parts, one per worker, as Hadoop and Giraph write them.

Every worker writes its part (sorted within the part) under ``OUT.tmp-parts/`` while the job
finishes; then the driver commits them: when ``OUT`` is a directory (ends with ``/`` or already is
one) the parts become ``OUT/part-00000.tsv``, ...; when ``OUT`` is a file, a streaming k-way merge
of the parts writes it sorted by vertex id (as a number, for Graphalytics' format with integer
ids), reading a bounded number of bytes of each part at a time. Until the commit, ``OUT`` is
untouched: a job that fails leaves no half-written output.
"""

from __future__ import annotations

import posixpath
from typing import IO, Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..errors import MarianaError, StorageError
from .rundir import _FS_ERRORS, _fs, _open_whole, check_writable

__all__ = ["part_url", "is_directory_output", "commit_parts", "merge_sorted", "discard_parts", "LINE_ORDERS",
           "check_output"]


def _tmp(output: str) -> str:
    return output.rstrip("/") + ".tmp-parts"


def part_url(output: str, index: int) -> str:
    """Where worker ``index`` writes its part of ``output`` before the commit."""
    return f"{_tmp(output)}/part-{index:05d}.tsv"


def is_directory_output(output: str) -> bool:
    """``OUT/`` or an existing directory: parts; anything else: one merged file."""
    if output.endswith("/"):
        return True
    fs, path = _fs(output)
    try:
        return bool(fs.isdir(path))
    except _FS_ERRORS:
        return False


#: the order of the lines of a part, as (the byte after the id, by number): by id string before a
#: tab ('vertex<TAB>value'), by id string before a space (Graphalytics' 'vertex value') or, every
#: id an integer, by number
LINE_ORDERS: dict[str, tuple[int, bool]] = {"string": (9, False), "graphalytics": (32, False), "numeric": (32, True)}
#: the merge reads each part this many bytes at a time (and the rest of a line)
MERGE_CHUNK = 1 << 20
#: ids up to this many bytes are compared as fixed-width numpy bytes; longer ones as Python bytes
_WIDE_KEY = 64


def merge_sorted(readers: list[IO[Any]], out: IO[bytes], chunk_bytes: int = MERGE_CHUNK, order: str = "string") -> int:
    """Merge streams of lines, each sorted by id (``LINE_ORDERS[order]``), into ``out``, holding
    about ``chunk_bytes`` of each stream at a time; returns the number of lines written. Lines are
    copied as they are: each round cuts every stream's read lines at the smallest last id of the
    streams with more to come, sorts those ids (numpy, stable: runs merge) and gathers the lines'
    bytes in that order; a round with lines of one stream only writes them as they are. (A Python
    line-by-line merge took ~0.65 s for 524k lines; this ~10x less.)"""
    sep, numeric = LINE_ORDERS[order]
    if len(readers) == 1:  # one part is the output as it is
        return _copy(readers[0], out, chunk_bytes)
    runs = [_Run(r, sep, numeric, chunk_bytes) for r in readers]
    written = 0
    while True:
        for run in runs:
            if run.live and run.size() < chunk_bytes:
                run.fill()
        pending = [run for run in runs if len(run.keys)]
        if not pending:
            return written
        ends = [run.keys[-1] for run in pending if run.live]
        limit = min(ends) if ends else None  # every line up to it is final now
        taken = [run.take(len(run.keys) if limit is None else int(np.searchsorted(run.keys, limit, side="right")))
                 for run in pending]
        taken = [t for t in taken if len(t[2])]
        if len(taken) == 1:
            out.write(taken[0][0].tobytes())
        else:
            keys = np.concatenate([t[2] for t in taken])
            base = np.cumsum([0] + [len(t[0]) for t in taken])[:-1]
            starts = np.concatenate([t[1][:-1] + b for t, b in zip(taken, base)])
            lengths = np.concatenate([np.diff(t[1]) for t in taken])
            by_key = np.argsort(keys, kind="stable")
            out.write(_gather_lines([t[0] for t in taken], starts[by_key], lengths[by_key]).tobytes())
        written += sum(len(t[2]) for t in taken)


def _copy(reader: IO[Any], out: IO[bytes], chunk: int) -> int:
    """A stream copied as it is (a last line without a newline gets one); returns its lines."""
    lines, last = 0, b"\n"
    while more := reader.read(max(chunk, 1 << 16)):
        data = more.encode() if isinstance(more, str) else more
        out.write(data)
        lines += data.count(b"\n")
        last = data[-1:]
    if last != b"\n":
        out.write(b"\n")
        lines += 1
    return lines


def _gather_lines(pieces: list[np.ndarray], starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The bytes of the lines ``starts``/``lengths`` of the concatenated ``pieces``, in that order:
    every line as a row of the widest line's bytes (one gather of strided windows), then the
    bytes past each line's end dropped (one compress). (Per-byte indices cost ~3x that.)"""
    width = int(lengths.max(initial=0))
    if width > 4 * _WIDE_KEY:  # a few long lines: per-byte indices
        data = np.concatenate(pieces)
        total = int(lengths.sum())
        return data[np.repeat(starts - (np.cumsum(lengths) - lengths), lengths) + np.arange(total)]
    rows, inside = _padded_rows(np.concatenate(pieces), starts, lengths, width)
    return rows[inside]


def _padded_rows(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """``data[starts[i]:starts[i] + width]`` as the rows of a fresh (n, width) array (one gather of
    strided windows; past the end of ``data``: zeros), and the mask of the bytes inside each
    ``lengths[i]``."""
    padded = np.concatenate([data, np.zeros(width, np.uint8)])
    rows = as_strided(padded, shape=(len(data), width), strides=(1, 1))[starts]
    return rows, np.arange(width) < lengths[:, None]


class _Run:
    """One part being merged: what is read and not yet written (``data``, line bounds ``bounds``
    (lines + 1), each line's id ``keys``) and the rest of a line read past the last newline."""

    def __init__(self, reader: IO[Any], sep: int, numeric: bool, chunk: int) -> None:
        self.reader, self.sep, self.numeric, self.chunk = reader, sep, numeric, chunk
        self.live = True
        self.data = np.empty(0, np.uint8)
        self.bounds = np.zeros(1, np.int64)
        self.keys: np.ndarray = np.empty(0, np.int64 if numeric else "S1")
        self.rest = b""

    def size(self) -> int:
        return len(self.data)

    def fill(self) -> None:
        """Read on until at least one more whole line (or the end)."""
        while self.live:
            more = self.reader.read(self.chunk)
            if isinstance(more, str):
                more = more.encode()
            text = self.rest + more
            if not more:
                self.live = False
                if text and not text.endswith(b"\n"):
                    text += b"\n"
            cut = text.rfind(b"\n") + 1
            self.rest = text[cut:]
            if cut:
                self._append(np.frombuffer(text[:cut], np.uint8))
                return

    def _append(self, new: np.ndarray) -> None:
        ends = np.flatnonzero(new == 10) + 1
        starts = np.concatenate(([0], ends[:-1]))
        keys = _line_keys(new, starts, ends, self.sep, self.numeric)
        base = len(self.data)
        self.data = np.concatenate([self.data, new]) if base else new
        self.bounds = np.concatenate([self.bounds, ends + base])
        self.keys = np.concatenate([self.keys, keys]) if len(self.keys) else keys

    def take(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The first ``n`` lines: (their bytes, their bounds from 0, their keys); kept: the rest."""
        end = int(self.bounds[n])
        out = (self.data[:end], self.bounds[:n + 1], self.keys[:n])
        self.data, self.bounds, self.keys = self.data[end:], self.bounds[n:] - end, self.keys[n:]
        return out


def _line_keys(b: np.ndarray, starts: np.ndarray, ends: np.ndarray, sep: int, numeric: bool) -> np.ndarray:
    """The id of every line (the bytes before its first ``sep``): int64, fixed-width bytes, or
    Python bytes where an id is long or holds a NUL (numpy's bytes compare as if NUL-padded)."""
    seps = np.flatnonzero(b == sep)
    at = np.searchsorted(seps, starts)
    key_end = seps[np.minimum(at, max(len(seps) - 1, 0))] if len(seps) else ends
    if bool(((at >= len(seps)) | (key_end >= ends)).any()):
        raise StorageError(f"a part line has no {'tab' if sep == 9 else 'space'} after its id: cannot merge the parts")
    lengths = key_end - starts
    width = int(lengths.max(initial=1)) or 1
    if width > _WIDE_KEY or bool((b == 0).any()):
        keys = np.array([b[s:e].tobytes() for s, e in zip(starts.tolist(), key_end.tolist())], dtype=object)
        return np.array([int(k) for k in keys], np.int64) if numeric else keys
    mat, inside = _padded_rows(b, starts, lengths, width)
    mat[~inside] = 0
    keys = mat.view(f"S{width}").reshape(-1)
    return keys.astype(np.int64) if numeric else keys


def commit_parts(output: str, parts: list[str], order: str = "string") -> str:
    """Make the written ``parts`` the output ``output``; returns what was written (dir or file).
    ``order``: how each part is sorted, and so the merge (a key of ``LINE_ORDERS``)."""
    fs, path = _fs(output)
    try:
        if is_directory_output(output):
            path = path.rstrip("/")
            fs.makedirs(path, exist_ok=True)
            for old in fs.glob(posixpath.join(path, "part-*.tsv")):  # a previous run's parts
                fs.rm(old)
            for i, p in enumerate(parts):
                src = _fs(p)[1]
                fs.mv(src, posixpath.join(path, f"part-{i:05d}.tsv"))
            discard_parts(output)
            return output.rstrip("/") + "/"
        readers = [fs.open(_fs(p)[1], "rb") for p in parts]
        try:
            with _open_whole(fs, path, fsync=False, compress=True) as out:  # (OUT.tsv.gz: gzip)
                merge_sorted(readers, out, order=order)
        finally:
            for r in readers:
                r.close()
        discard_parts(output)
        return output
    except MarianaError:
        raise
    except _FS_ERRORS as exc:
        raise StorageError(f"cannot write output {output}: {exc}") from exc


def check_output(output: str | None, key: str = "output") -> None:
    """Refuse, before the job runs, an ``output`` this process could not write at its end
    (``rundir.NotWritable`` naming the config key and the path): the folder that gets the parts
    (``OUT.tmp-parts/``) and the merged file beside ``OUT``, and an existing ``OUT/`` folder the
    parts move into. Nothing is left behind (``rundir.check_writable``)."""
    if not output:
        return
    what = f"config key '{key}'"
    check_writable(output, what, inside=False)
    fs, path = _fs(output)
    try:
        existing = bool(fs.isdir(path))
    except _FS_ERRORS:
        existing = False  # (a store that cannot say: the probe beside it has spoken)
    if existing:
        check_writable(output, what, inside=True)


def discard_parts(output: str) -> None:
    """Remove the parts written for ``output`` (after a commit, or a failed run)."""
    fs, path = _fs(_tmp(output))
    try:
        if fs.exists(path):
            fs.rm(path, recursive=True)
    except _FS_ERRORS:
        pass
