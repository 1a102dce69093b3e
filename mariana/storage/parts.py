"""Results written in parts, one per worker, as Hadoop and Giraph write them.

Every worker writes its part (sorted within the part) under ``OUT.tmp-parts/`` while the job
finishes; then the driver commits them: when ``OUT`` is a directory (ends with ``/`` or already is
one) the parts become ``OUT/part-00000.tsv``, ...; when ``OUT`` is a file, a streaming k-way merge
of the parts writes it sorted by vertex id (as a number, for Graphalytics' format with integer
ids), reading a bounded number of lines of each part at a
time. Until the commit, ``OUT`` is untouched: a job that fails leaves no half-written output.
"""

from __future__ import annotations

import posixpath
from itertools import islice
from typing import IO, Any, Callable, Iterator

from ..errors import MarianaError, StorageError
from .rundir import _FS_ERRORS, _fs, _open_whole

__all__ = ["part_url", "is_directory_output", "commit_parts", "merge_sorted", "discard_parts", "LINE_KEYS"]


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


def _key(line: str) -> str:
    return line[:line.find("\t")]


def _graphalytics_key(line: str) -> str:
    return line[:line.find(" ")]


def _numeric_key(line: str) -> int:
    return int(line[:line.find(" ")])


#: the order of the lines of a part: ``string`` ('vertex<TAB>value', by id string), Graphalytics'
#: 'vertex value' by id string (``graphalytics``) or, every id an integer, by number (``numeric``)
LINE_KEYS: dict[str, Callable[[str], Any]] = {"string": _key, "graphalytics": _graphalytics_key,
                                              "numeric": _numeric_key}


def merge_sorted(readers: list[IO[str]], out: IO[bytes], chunk_lines: int = 1 << 16,
                 key: Callable[[str], Any] = _key) -> int:
    """Merge text streams, each sorted by ``key``, into ``out``; at most ``chunk_lines`` lines of
    each stream in memory. Returns the number of lines written."""
    buffers: list[list[str]] = [[] for _ in readers]
    live = [True] * len(readers)
    written = 0
    while True:
        for i, r in enumerate(readers):
            if live[i] and len(buffers[i]) < chunk_lines:
                more = list(islice(r, chunk_lines - len(buffers[i])))
                if len(more) < chunk_lines - len(buffers[i]):
                    live[i] = False
                buffers[i].extend(more)
        pending = [i for i, b in enumerate(buffers) if b]
        if not pending:
            return written
        # every line up to the smallest last key of a stream that has more to come is final now
        bounds = [key(buffers[i][-1]) for i in pending if live[i]]
        limit = min(bounds) if bounds else None
        batch: list[str] = []
        for i in pending:
            b = buffers[i]
            if limit is None:
                cut = len(b)
            else:
                lo, hi = 0, len(b)
                while lo < hi:  # first line with key > limit
                    mid = (lo + hi) // 2
                    if key(b[mid]) <= limit:
                        lo = mid + 1
                    else:
                        hi = mid
                cut = lo
            batch.extend(b[:cut])
            buffers[i] = b[cut:]
        batch.sort(key=key)  # sorted runs: timsort merges them
        out.write("".join(batch).encode())
        written += len(batch)


def commit_parts(output: str, parts: list[str], order: str = "string") -> str:
    """Make the written ``parts`` the output ``output``; returns what was written (dir or file).
    ``order``: how each part is sorted, and so the merge (a key of ``LINE_KEYS``)."""
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
        readers = [fs.open(_fs(p)[1], "rt", encoding="utf-8") for p in parts]
        try:
            with _open_whole(fs, path, fsync=False) as out:
                merge_sorted(readers, out, key=LINE_KEYS[order])
        finally:
            for r in readers:
                r.close()
        discard_parts(output)
        return output
    except MarianaError:
        raise
    except _FS_ERRORS as exc:
        raise StorageError(f"cannot write output {output}: {exc}") from exc


def discard_parts(output: str) -> None:
    """Remove the parts written for ``output`` (after a commit, or a failed run)."""
    fs, path = _fs(_tmp(output))
    try:
        if fs.exists(path):
            fs.rm(path, recursive=True)
    except _FS_ERRORS:
        pass


def iter_lines(url: str) -> Iterator[str]:
    """The lines of a text file at any URL (for tests and tools)."""
    fs, path = _fs(url)
    with fs.open(path, "rt", encoding="utf-8") as f:
        yield from f

