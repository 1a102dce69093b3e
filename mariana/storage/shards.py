"""File access for sharded data sets at any fsspec URL: listing shards (a directory, a glob or a
comma-separated list), byte-range reads, streaming sha256, whole-file writes and HTTP downloads.

The data set code (``vertices/train/shards.py``, ``vertices/train/named.py``) reaches storage only through
these functions, so that fsspec stays behind ``storage/``. Every failure of the filesystem is
one ``StorageError`` naming the file. Calls off the local disk go through ``retry.retrying``: a
store reached before rides out an outage, one that never answered fails within a few seconds
naming its endpoint (``storage.retry``).
"""

from __future__ import annotations

import hashlib
import posixpath
import time
import urllib.request
from contextlib import contextmanager
from typing import IO, Any, Callable, Iterator, TypeVar

from ..errors import StorageError
from .retry import cause, retrying
from .rundir import _FS_ERRORS, _fs, _open_whole

T = TypeVar("T")

__all__ = ["expand_urls", "is_dir", "exists", "file_size", "read_range", "open_read", "digest", "open_write",
           "list_names", "remove", "join_url", "download", "local_path"]

_CHUNK = 4 << 20
_GLOB = set("*?[")


def _has_protocol(url: str) -> bool:
    return "://" in url


def _unstrip(fs: Any, path: str, like: str) -> str:
    """The URL of ``path`` on ``fs``, in the style of ``like`` (plain local paths stay plain)."""
    return path if not _has_protocol(like) else fs.unstrip_protocol(path)


def join_url(base: str, name: str) -> str:
    return posixpath.join(base.rstrip("/"), name)


def local_path(url: str) -> str | None:
    """The local path of ``url`` when it is on the local disk, else None."""
    if not _has_protocol(url):
        return url
    if url.startswith("file://"):
        return url[len("file://"):]
    return None


def _retried(what: str, url: str, call: Callable[[], T]) -> T:
    """``call()``; off the local disk retried as ``retry.retrying`` does (``what`` says what it does)."""
    if local_path(url) is not None:
        return call()
    return retrying(f"{what} {url}", call, url=url)


def is_dir(url: str) -> bool:
    fs, path = _fs(url)
    try:
        return bool(_retried("looking at", url, lambda: fs.isdir(path)))
    except _FS_ERRORS as exc:
        raise StorageError(f"{url}: cannot stat: {cause(exc)}") from exc


def exists(url: str) -> bool:
    fs, path = _fs(url)
    try:
        return bool(_retried("looking for", url, lambda: fs.exists(path)))
    except _FS_ERRORS as exc:
        raise StorageError(f"{url}: cannot stat: {cause(exc)}") from exc


def expand_urls(spec: str, suffixes: tuple[str, ...] = (".npz", ".npy")) -> list[str]:
    """The shard files ``spec`` names, sorted: a directory (its files with ``suffixes``), a glob,
    or a comma-separated list of those and of single files."""
    out: list[str] = []
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        fs, path = _fs(item)

        def listing(fs: Any = fs, path: str = path) -> list[str] | None:
            """The files ``item`` names (None: nothing there)."""
            if _GLOB & set(path):
                return [_unstrip(fs, p, item) for p in sorted(fs.glob(path))]
            if fs.isdir(path):
                fs.invalidate_cache(path)
                return [_unstrip(fs, str(p), item) for p in sorted(p for p in fs.ls(path, detail=False)
                                                                     if str(p).endswith(suffixes))]
            return [item] if fs.exists(path) else None
        try:
            found = _retried("listing", item, listing)
        except _FS_ERRORS as exc:
            raise StorageError(f"{item}: cannot list: {cause(exc)}") from exc
        if found is None:
            raise StorageError(f"{item}: no such file or directory")
        if not found and _GLOB & set(path):
            raise StorageError(f"{item}: no file matches")
        out += found
    return out


def file_size(url: str) -> int:
    fs, path = _fs(url)
    try:
        return int(_retried("looking at", url, lambda: fs.size(path)))
    except FileNotFoundError:
        raise StorageError(f"{url}: no such file") from None
    except _FS_ERRORS as exc:
        raise StorageError(f"{url}: cannot stat: {cause(exc)}") from exc


def read_range(url: str, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of a file; a short read (a truncated file) is a ``StorageError``."""
    lp = local_path(url)
    try:
        if lp is not None:
            with open(lp, "rb", buffering=0) as f:
                f.seek(start)
                data = f.read(end - start)
        else:
            fs, path = _fs(url)
            data = _retried("reading", url, lambda: fs.cat_file(path, start=start, end=end))
    except FileNotFoundError:
        raise StorageError(f"{url}: no such file") from None
    except _FS_ERRORS as exc:
        raise StorageError(f"{url}: cannot read bytes {start}-{end}: {cause(exc)}") from exc
    if len(data) != end - start:
        raise StorageError(f"{url}: truncated: bytes {start}-{end} wanted, the file ends at {start + len(data)}")
    return data


@contextmanager
def open_read(url: str) -> Iterator[IO[bytes]]:
    """A seekable file to read from (zip directories, whole members)."""
    fs, path = _fs(url)
    try:
        f = _retried("opening", url, lambda: fs.open(path, "rb"))
    except FileNotFoundError:
        raise StorageError(f"{url}: no such file") from None
    except _FS_ERRORS as exc:
        raise StorageError(f"{url}: cannot open: {cause(exc)}") from exc
    with f:
        yield f


def digest(url: str, algorithm: str = "sha256") -> tuple[int, str]:
    """(size, hex digest) of a file, read in chunks (memory does not grow with the file)."""
    h = hashlib.new(algorithm)
    size = 0
    try:
        with open_read(url) as f:
            while True:
                chunk = f.read(_CHUNK)
                if not chunk:
                    break
                h.update(chunk)
                size += len(chunk)
    except StorageError:
        raise
    except _FS_ERRORS as exc:
        raise StorageError(f"{url}: cannot read: {cause(exc)}") from exc
    return size, h.hexdigest()


@contextmanager
def open_write(url: str, fsync: bool = False) -> Iterator[IO[bytes]]:
    """A file to stream into; it appears at ``url`` whole, only if the block ends without error
    (local disk: a temp file renamed; ``fsync``: its data and the rename on disk before it returns)."""
    fs, path = _fs(url)
    try:
        with _open_whole(fs, path, fsync=fsync) as f:
            yield f
    except StorageError:
        raise
    except _FS_ERRORS as exc:
        raise StorageError(f"cannot write {url}: {cause(exc)}") from exc


def list_names(url: str) -> list[str]:
    """The names of the files and directories directly in the directory ``url`` (hidden ones too),
    listed fresh; [] when there is no such directory."""
    fs, path = _fs(url)

    def ls() -> list[str]:
        if not fs.isdir(path):
            return []
        fs.invalidate_cache(path)
        return sorted(posixpath.basename(str(p).rstrip("/")) for p in fs.ls(path, detail=False))
    try:
        return _retried("listing", url, ls)
    except _FS_ERRORS as exc:
        raise StorageError(f"{url}: cannot list: {cause(exc)}") from exc


def remove(url: str) -> None:
    """Delete the file ``url``; one that is not there is no error."""
    fs, path = _fs(url)

    def rm() -> None:
        try:
            fs.rm(path)
        except FileNotFoundError:
            pass
    try:
        _retried("removing", url, rm)
    except _FS_ERRORS as exc:
        raise StorageError(f"cannot remove {url}: {cause(exc)}") from exc


def download(url: str, to: str, progress: Callable[[int, int | None], None] | None = None,
             timeout: float = 60.0) -> tuple[int, str]:
    """Fetch ``url`` (http, https) into the file ``to`` (written whole: temp file + rename), calling
    ``progress(done, total)`` as bytes arrive; returns (size, sha256)."""
    h = hashlib.sha256()
    done = 0
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp, open_write(to) as out:  # noqa: S310 - http(s) only
            total = resp.headers.get("Content-Length")
            total_n = int(total) if total and total.isdigit() else None
            last = 0.0
            while True:
                chunk = resp.read(1 << 16)
                if not chunk:
                    break
                out.write(chunk)
                h.update(chunk)
                done += len(chunk)
                now = time.monotonic()
                if progress is not None and now - last > 0.1:
                    progress(done, total_n)
                    last = now
            if progress is not None:
                progress(done, total_n)
    except StorageError:
        raise
    except (OSError, ValueError) as exc:  # URLError, HTTPError, timeouts are OSErrors
        raise StorageError(f"cannot download {url}: {exc}") from None
    return done, h.hexdigest()
