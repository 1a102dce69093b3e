"""The run directory on any fsspec URL, and reading user files. The only module importing fsspec,
and only for a URL with a protocol: a plain path goes to ``localfs.LOCAL`` (os calls; fsspec's
import costs every process ~11 MB and ~45 ms).

Layout (docs/design.md, "The run directory")::

    RUN/job.json          resolved config, graph summary, placement, versions
    RUN/metrics.jsonl     one line per superstep
    RUN/trace/            per-worker superstep traces
    RUN/checkpoints/      checkpoints (manifest.json written last)
    RUN/params/           parameter snapshots

JSON documents are written whole (temp file + ``os.replace`` on a local disk, a single PUT on
object stores). JSON-lines files are appended where the filesystem can append (local, memory)
and rewritten whole elsewhere, so a reader never sees a half-written document.

Writes are all-or-nothing: on a local disk every ``write`` is checked for its length (a full
disk returns short writes before it fails) and the file's size against the bytes written before
the fsync and the rename; a failed append is cut back to where it started. Transient errors of
a storage server (connection refused, timeouts, throttling) are retried (``storage.retry``), and
a failure names its cause.
"""

from __future__ import annotations

import builtins
import errno
import io
import json
import logging
import os
import posixpath
import re
import time
import uuid
from contextlib import contextmanager, nullcontext, suppress
from typing import IO, Any, Callable, Iterable, Iterator

from ..errors import MarianaError, StorageError, UsageError
from .compression import compressed, compression_of, decompressed
from .localfs import LOCAL, LocalFS, is_plain_path
from .lease import host_tag, pid_alive, tmp_name
from .retry import cause, retrying

log = logging.getLogger(__name__)

#: What a filesystem may raise: OSError from most, but object stores raise their clients' own
#: errors (botocore's EndpointConnectionError, ClientError, ...), which are not OSErrors, so at
#: this boundary any failure of the filesystem call becomes one StorageError naming the file.
_FS_ERRORS = Exception

__all__ = ["RunDir", "read_text", "read_bytes", "write_text", "write_bytes", "default_run_url", "tmp_name",
           "sweep_temporaries", "STALE_TMP_S", "host_tag", "NotWritable", "check_writable"]

#: A temporary file nobody has written for this long is no live writer's (any host, any version)
STALE_TMP_S = 3600.0


def _fs(url: str) -> tuple[Any, str]:
    """(filesystem, path) of a path or fsspec URL: ``LOCAL`` for a path on this machine (a plain
    path, or ``file://``), else fsspec's filesystem for the URL."""
    if is_plain_path(url):
        return LOCAL, LOCAL.strip(url)
    import fsspec
    from fsspec.implementations.local import LocalFileSystem

    try:
        fs, path = fsspec.core.url_to_fs(url)
    except (ValueError, ImportError) as exc:
        raise StorageError(f"cannot open {url!r}: {exc}") from exc
    return (LOCAL, path) if type(fs) is LocalFileSystem else (fs, path)


def _in_process(fs: Any) -> bool:
    """A local disk or fsspec's memory filesystem: calls that cannot hang, files that can be
    appended to."""
    return isinstance(fs, LocalFS) or "memory" in ((fs.protocol,) if isinstance(fs.protocol, str) else fs.protocol)


def read_text(url: str) -> str:
    """The whole text of a file at a path or fsspec URL (UTF-8; a compressed name decompressed)."""
    data = read_bytes(url)
    name = compression_of(url)
    if name is not None:
        try:
            with decompressed(io.BytesIO(data), url) as f:
                data = f.read()
        except UsageError:
            raise
        except Exception as exc:  # (each format raises its own: OSError, EOFError, lzma.LZMAError, ...)
            raise StorageError(f"{url}: not a readable {name} file: {exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StorageError(f"{url}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def default_run_url(job: str, root: str = "runs") -> str:
    """``runs/JOB-YYYYmmdd-HHMMSS-xxxx``: unique even for runs started in the same second."""
    return f"{root}/{job}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"


class NotWritable(UsageError, StorageError):
    """A place the user named (run directory, output) that this process cannot write: their
    mistake to fix (one line, exit 2), and a ``StorageError`` to code that handles those."""


#: OS errors that say the place itself is wrong (permissions, a read-only or pseudo filesystem,
#: a missing or non-directory parent), not that the storage is having trouble
_PLACE_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT, errno.ENOTDIR, errno.EEXIST, errno.EISDIR}


def _wrong_place(exc: BaseException) -> bool:
    """(Object stores' clients raise ``PermissionError``/``FileNotFoundError`` without an errno.)"""
    return isinstance(exc, (PermissionError, FileNotFoundError, NotADirectoryError, FileExistsError)) or (
        isinstance(exc, OSError) and exc.errno in _PLACE_ERRNOS)


def _reason(exc: BaseException, path: str) -> str:
    """An OS error as its words and the file it names when that is not ``path`` itself."""
    if isinstance(exc, OSError) and exc.strerror:
        named = str(exc.filename).rstrip("/") if exc.filename else ""
        return exc.strerror + (f" ({named})" if named and named != path.rstrip("/") else "")
    return cause(exc)


def check_writable(url: str, what: str, inside: bool = True) -> None:
    """Refuse (``NotWritable``, naming ``what`` and ``url``) a place this process cannot write,
    creating nothing that stays: a probe file (a ``tmp_name``, so a killed probe is swept) is
    made and removed in the folder ``url`` (``inside``) or the folder that holds it, or, where that
    does not exist yet, in the nearest folder above it that does (a writable folder there can
    hold the new ones). On a remote store the probe is written where the data would go (on a
    store with folders: in the nearest one that exists). Transient storage errors are retried,
    then raised as ``StorageError``."""
    fs, path = _fs(url)
    path = path.rstrip("/") or "/"
    folder = path if inside else (posixpath.dirname(path) or ".")
    if isinstance(fs, LocalFS):
        while not os.path.lexists(folder) and posixpath.dirname(folder) != folder:
            folder = posixpath.dirname(folder)
        if not os.path.isdir(folder):
            raise NotWritable(f"{what} {url} cannot be written: {folder} is not a directory")
        probe = posixpath.join(folder, tmp_name("probe"))
        try:
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            os.unlink(probe)
        except OSError as exc:  # (the error names the probe: say the folder instead)
            where = "" if folder == path else f" ({folder})"
            raise NotWritable(f"{what} {url} cannot be written: {exc.strerror or exc}{where}") from None
        return

    def put_and_remove() -> None:
        probe = posixpath.join(folder, tmp_name("probe"))
        with fs.open(probe, "wb") as f:
            f.write(b"")
        try:
            fs.rm(probe)
        except Exception as exc:  # noqa: BLE001 - it could be written, which is what was asked
            log.warning("could not remove the probe %s: %s", probe, cause(exc))
    while True:
        try:
            retrying(f"checking that {url} can be written", put_and_remove)
            return
        except FileNotFoundError:  # a store with folders, this one not made yet: probe the one above
            if posixpath.dirname(folder) in ("", folder):
                raise NotWritable(f"{what} {url} cannot be written: no such bucket or folder") from None
            folder = posixpath.dirname(folder)
        except _FS_ERRORS as exc:
            if not _wrong_place(exc):
                raise StorageError(f"cannot check that {what} {url} can be written: {cause(exc)}") from exc
            where = "" if folder == path else f" ({folder})"
            raise NotWritable(f"{what} {url} cannot be written: {getattr(exc, 'strerror', None) or exc}{where}") from None


class RunDir:
    """A run directory at ``url`` (a path or any fsspec URL).

    ``create=False`` opens an existing one (the commands that only read a run): a missing run
    directory is a ``StorageError`` and nothing is created.
    """

    def __init__(self, url: str, create: bool = True) -> None:
        self.url = url
        self.fs, self.root = _fs(url)
        self.remote = not _in_process(self.fs)  # calls that may hang (not a local disk or memory)
        if not create:
            try:
                found = self._retry(f"opening {url}", lambda: self.fs.isdir(self.root))
            except _FS_ERRORS as exc:
                raise StorageError(f"cannot open run directory {url}: {cause(exc)}") from exc
            if not found:
                raise StorageError(f"{url}: no such run directory")
        try:
            self._retry(f"creating {url}", lambda: self.fs.makedirs(self.root, exist_ok=True))
        except _FS_ERRORS as exc:
            if _wrong_place(exc):  # (a path the user gave: theirs to fix, exit 2)
                raise NotWritable(f"run directory {url} cannot be created: {_reason(exc, self.root)}") from None
            raise StorageError(f"cannot create run directory {url}: {cause(exc)}") from exc
        if create and isinstance(self.fs, LocalFS):  # a folder it cannot write: said now, not at the first
            check_writable(url, "run directory")     # record (on a remote store a probe costs round trips)
        self._can_append = _in_process(self.fs)
        self._lines: dict[str, list[str]] = {}
        self._dirs: set[str] = set()
        #: this run's ``storage.lease.Lease`` on the directory: every write checks it first (fencing)
        self.lease: Any = None

    def fence(self) -> None:
        """Raise ``storage.lease.LeaseLost`` when this directory's lease (if it has one) was taken
        by another run: what this process would write now is no longer its to write."""
        if self.lease is not None:
            self.lease.check()

    def take_lease(self, wait: bool = True) -> Any:
        """Take the directory's lease for this run (``storage.lease``; ``UsageError`` naming the
        holder when another run has it), then remove the temporaries that killed writers left
        here. Returns the lease, also kept as ``self.lease``: the writes through this object check it."""
        from .lease import Lease

        self.lease = Lease.acquire(self, wait=wait)
        if isinstance(self.fs, LocalFS):
            sweep_temporaries(self.root, depth=3)
        return self.lease

    def release_lease(self) -> None:
        """Give the lease taken by ``take_lease`` back (nothing if there is none)."""
        lease, self.lease = self.lease, None
        if lease is not None:
            lease.release()

    def _retry(self, what: str, call: Any) -> Any:
        """``storage.retry.retrying``; a local disk's calls stay on the calling thread."""
        return retrying(what, call, offload=self.remote)

    def path(self, rel: str) -> str:
        return posixpath.join(self.root, rel)

    def exists(self, rel: str) -> bool:
        """Whether ``rel`` exists now (listing caches are dropped: other processes write here too)."""
        path = self.path(rel)

        def look() -> bool:
            self.fs.invalidate_cache(posixpath.dirname(path))
            return self.fs.exists(path)
        try:
            return self._retry(f"looking for {self.url}/{rel}", look)
        except _FS_ERRORS as exc:
            raise StorageError(f"cannot look for {self.url}/{rel}: {cause(exc)}") from exc

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Write a whole file so that readers see the old or the new content, never a mix."""
        def write() -> None:
            with self.open_write(rel) as f:
                f.write(data)
        self._retry(f"writing {self.url}/{rel}", write)  # (open_write checks the lease before it commits)

    @contextmanager
    def open_write(self, rel: str, fsync: bool = True, sync_dir: bool = True) -> Iterator[IO[bytes]]:
        """A file to stream into; it appears at ``rel`` whole, only if the block ends without error.

        Local disk: an unbuffered temp file in the same directory, fsync, ``os.replace``, fsync
        of the directory. Object stores: the upload completes on close and is discarded on error.
        Any failure of the filesystem becomes one ``StorageError`` naming the file; a lost lease
        (``fence``), checked before the file is made and again before it appears, writes nothing.
        ``sync_dir=False`` leaves the directory's fsync to the caller (``sync_dir``): one for
        many files, as a checkpoint's commit does before it writes the manifest.
        """
        self.fence()
        try:
            with _open_whole(self.fs, self.path(rel), fsync, sync_dir, fence=self.fence, sweep=False) as f:
                yield f
        except MarianaError:
            raise
        except _FS_ERRORS as exc:
            raise StorageError(f"cannot write {self.url}/{rel}: {cause(exc)}") from exc

    def sync_dir(self, rel: str) -> None:
        """Make the names created in folder ``rel`` durable (fsync of the directory; local disk only)."""
        if isinstance(self.fs, LocalFS):
            try:
                _fsync_dir(self.path(rel))
            except OSError as exc:
                raise StorageError(f"cannot sync {self.url}/{rel}: {exc}") from exc

    @contextmanager
    def open_read(self, rel: str) -> Iterator[IO[bytes]]:
        """A file to stream from (unbuffered on a local disk: ``readinto`` lands in the caller's buffer)."""
        path = self.path(rel)
        try:
            f = self._retry(f"opening {self.url}/{rel}", lambda: open(path, "rb", buffering=0)
                         if isinstance(self.fs, LocalFS) else self.fs.open(path, "rb"))
        except FileNotFoundError:
            raise StorageError(f"{self.url}/{rel}: no such file") from None
        except _FS_ERRORS as exc:
            raise StorageError(f"cannot read {self.url}/{rel}: {cause(exc)}") from exc
        try:
            with f:
                yield f
        except MarianaError:
            raise
        except _FS_ERRORS as exc:
            raise StorageError(f"cannot read {self.url}/{rel}: {cause(exc)}") from exc

    def read_bytes(self, rel: str) -> bytes:
        try:
            return self._retry(f"reading {self.url}/{rel}", lambda: self.fs.cat_file(self.path(rel)))
        except FileNotFoundError:
            raise StorageError(f"{self.url}/{rel}: no such file") from None
        except _FS_ERRORS as exc:
            raise StorageError(f"cannot read {self.url}/{rel}: {cause(exc)}") from exc

    def write_json(self, rel: str, obj: Any) -> None:
        self.write_bytes(rel, (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode())

    def read_json(self, rel: str) -> Any:
        try:
            return json.loads(self.read_bytes(rel))
        except ValueError as exc:
            raise StorageError(f"{self.url}/{rel}: not valid JSON ({exc})") from None

    def append_jsonl(self, rel: str, records: Iterable[dict[str, Any]]) -> None:
        """Append JSON lines to ``rel``."""
        lines = [jsonl(r) for r in records]
        if not lines:
            return
        path = self.path(rel)
        data = "".join(lines).encode()

        def append() -> None:
            self.fence()
            if self._can_append:
                parent = posixpath.dirname(path)
                if parent not in self._dirs:
                    self.fs.makedirs(parent, exist_ok=True)
                    self._dirs.add(parent)
                if isinstance(self.fs, LocalFS):
                    _append_whole(path, data)
                else:
                    with self.fs.open(path, "ab") as f:
                        f.write(data)
            else:  # object stores cannot append: keep the object's lines and rewrite it whole
                if rel not in self._lines:
                    old = self.fs.cat_file(path).decode() if self.fs.exists(path) else ""
                    self._lines[rel] = old.splitlines(keepends=True)
                kept = self._lines[rel] + lines
                self.fs.pipe_file(path, "".join(kept).encode())
                self._lines[rel] = kept  # only once stored: a retried append adds its lines once
        try:
            self._retry(f"appending to {self.url}/{rel}", append)
        except MarianaError:  # (a lost lease: said as it is)
            raise
        except _FS_ERRORS as exc:
            raise StorageError(f"cannot append to {self.url}/{rel}: {cause(exc)}") from exc

    def truncate_jsonl(self, rel: str, keep: Any) -> None:
        """Rewrite ``rel`` with only the lines whose record satisfies ``keep(record)`` (resume)."""
        if not self.exists(rel):
            return
        kept = [r for r in self.read_jsonl(rel) if keep(r)]
        lines = [jsonl(r) for r in kept]
        self.write_bytes(rel, "".join(lines).encode())
        self._lines[rel] = lines

    def read_jsonl(self, rel: str) -> list[dict[str, Any]]:
        """The records of a JSON-lines file. A last line cut short (a crash or a full disk in the
        middle of an append) is left out with a warning; a damaged line elsewhere is a
        ``StorageError`` naming the file and line."""
        text = self.read_bytes(rel).decode("utf-8", errors="replace")
        lines = text.split("\n")
        out = []
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except ValueError as exc:
                if n == len(lines):  # no newline after it: an append that did not finish
                    log.warning("%s/%s:%d: ignoring a partly written last line (%d bytes)", self.url, rel, n, len(line))
                    continue
                raise StorageError(f"{self.url}/{rel}:{n}: not a JSON record ({exc})") from None
        return out

    def list(self, rel: str) -> builtins.list[str]:
        """The names in folder ``rel``, sorted; none when it does not exist (listing caches are
        dropped: other processes write here too). ``StorageError`` when it cannot be listed."""
        path = self.path(rel).rstrip("/")

        def ls() -> Any:
            self.fs.invalidate_cache(path)
            return self.fs.ls(path, detail=False)
        try:
            names = self._retry(f"listing {self.url}/{rel}", ls)
        except (FileNotFoundError, NotADirectoryError):
            return []
        except _FS_ERRORS as exc:
            raise StorageError(f"{self.url}/{rel}: cannot list: {cause(exc)}") from exc
        return sorted(posixpath.basename(str(n).rstrip("/")) for n in names)


def jsonl(record: dict[str, Any]) -> str:
    """One JSON line (metrics, traces); what JSON cannot hold (numpy scalars, paths) as its ``str``."""
    return json.dumps(record, default=str) + "\n"


def write_text(url: str, text: str) -> None:
    """Write a whole text file at a path or fsspec URL (temp file + rename on a local disk); a
    compressed name (``.gz``, ...: ``storage.compression``) is written in that format."""
    write_lines(url, lambda: (text,))


def write_lines(url: str, pieces: Callable[[], Iterable[str]]) -> None:
    """Write a text file piece by piece (``pieces()`` yields its text in order; called again if a
    transient error makes the write start over): a large output never exists whole in memory,
    and appears at ``url`` whole or not at all, as with ``write_text``, compressed as its name says."""
    fs, path = _fs(url)

    def write() -> None:
        with _open_whole(fs, path, fsync=False, compress=True) as f:
            for text in pieces():
                f.write(text.encode("utf-8"))

    try:
        retrying(f"writing {url}", write)
    except MarianaError:  # (a .zst name without its package: the user's to fix, said as it is)
        raise
    except _FS_ERRORS as exc:
        raise StorageError(f"cannot write {url}: {cause(exc)}") from exc


def write_bytes(url: str, data: bytes) -> None:
    """Write a whole file at a path or fsspec URL (temp file + rename on a local disk)."""
    fs, path = _fs(url)
    try:
        retrying(f"writing {url}", lambda: _write_whole(fs, path, data, fsync=False))
    except _FS_ERRORS as exc:
        raise StorageError(f"cannot write {url}: {cause(exc)}") from exc


def _write_whole(fs: Any, path: str, data: bytes, fsync: bool) -> None:
    with _open_whole(fs, path, fsync) as f:
        f.write(data)


@contextmanager
def _open_whole(fs: Any, path: str, fsync: bool, sync_dir: bool = True, compress: bool = False,
                fence: Callable[[], None] | None = None, sweep: bool = True) -> Iterator[IO[bytes]]:
    """Local disk: temp file in the same directory (+ fsync) then ``os.replace``; elsewhere one upload.
    ``compress``: a compressed name (``.gz``, ...: ``storage.compression``) writes that format (text
    outputs; bytes are written as they are: a downloaded ``.gz`` stays the file it was).
    ``fence``: called just before the file appears (the rename, the upload's completion); what it
    raises discards the file. ``sweep``: first remove the stale temporaries of this same name that
    killed writers left (``sweep_temporaries``; a run directory sweeps itself when its lease is taken)."""
    parent = posixpath.dirname(path)
    if parent:
        fs.makedirs(parent, exist_ok=True)
    if not isinstance(fs, LocalFS):
        f = fs.open(path, "wb")
        try:
            with compressed(f, path) if compress else nullcontext(f) as out:
                yield out
            written = f.tell()
            if fence is not None:
                fence()
        except BaseException:
            if hasattr(f, "discard"):
                f.discard()  # a buffered upload: never complete it with part of the data
                with suppress(Exception):  # marks it closed (it has nothing left to flush)
                    f.close()
            raise
        f.close()
        _check_stored(fs, path, written)
        return
    if sweep:
        sweep_temporaries(parent or ".", posixpath.basename(path))
    tmp = posixpath.join(parent, tmp_name(posixpath.basename(path)))
    try:
        with open(tmp, "wb", buffering=0) as raw:
            f = _FullWriter(raw)
            with compressed(f, path) if compress else nullcontext(f) as out:  # type: ignore[arg-type]  # (a file in all but name)
                yield out  # type: ignore[misc]
            size = os.fstat(raw.fileno()).st_size
            if size != f.written:
                raise OSError(errno.EIO, f"short write: {size} of {f.written} bytes reached the file")
            if fsync:
                os.fsync(raw.fileno())
        if fence is not None:
            fence()
        os.replace(tmp, path)
        if fsync and sync_dir:  # the rename itself must survive a crash: it is what commits a checkpoint
            _fsync_dir(parent or ".")
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


#: ``.NAME.HEX.PID@HOST.tmp`` (this version), ``.NAME.HEX32.tmp`` (earlier ones: no writer recorded)
_TMP = re.compile(r"^\.(?P<base>.+)\.[0-9a-f]{8,32}(?:\.(?P<pid>\d+)@(?P<host>[A-Za-z0-9-]+))?\.tmp$")


def sweep_temporaries(folder: str, base: str | None = None, depth: int = 1) -> list[str]:
    """Remove the temporary files (``tmp_name``) in local ``folder`` (and ``depth - 1`` levels of
    folders below) that no live writer owns: one whose writer ran on this machine and has ended,
    or that nobody has written for ``STALE_TMP_S`` seconds. ``base``: only the temporaries of
    that name. Returns the paths removed; best effort (a file another sweep removed is skipped)."""
    here = host_tag()
    removed: list[str] = []
    now = time.time()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        name = entry.name
        if depth > 1 and not name.startswith(".") and entry.is_dir(follow_symlinks=False):
            removed += sweep_temporaries(entry.path, base, depth - 1)
            continue
        if not (name.startswith(".") and name.endswith(".tmp")) or (m := _TMP.match(name)) is None:
            continue
        if base is not None and m.group("base") != base:
            continue
        try:
            idle = now - entry.stat(follow_symlinks=False).st_mtime
        except OSError:
            continue
        mine = m.group("host") == here
        if idle < STALE_TMP_S and not (mine and not pid_alive(int(m.group("pid")))):
            continue
        try:
            os.unlink(entry.path)
        except OSError:
            continue
        removed.append(entry.path)
    if removed:
        log.info("removed %d temporary file(s) left by writers that were killed: %s", len(removed),
                 ", ".join(posixpath.basename(p) for p in removed[:5]) + (", ..." if len(removed) > 5 else ""))
    return removed


def _check_stored(fs: Any, path: str, written: int) -> None:
    """What an object store (or any non-local filesystem) holds after an upload is all of it: a
    store or proxy that cut the object short is an error (retried as a transient one), not a
    checkpoint that fails to load later. One metadata request per whole-file write."""
    with suppress(Exception):
        fs.invalidate_cache(path)
    size = fs.size(path)
    if size != written:
        raise OSError(getattr(errno, "EREMOTEIO", errno.EIO), f"short upload: {size} of {written} bytes reached {path}")


class _FullWriter:
    """An unbuffered local file whose ``write`` writes everything or raises: a raw write may
    return short (a full disk writes what fits; the next write raises ENOSPC), which ``write``
    repeats until the rest is written or the error comes."""

    def __init__(self, raw: Any) -> None:
        self.raw, self.written = raw, 0

    def write(self, data: Any) -> int:
        mv = memoryview(data).cast("B")
        total = mv.nbytes
        while mv.nbytes:
            n = self.raw.write(mv)
            if not n:
                raise OSError(errno.ENOSPC, "the write made no progress")
            self.written += n
            mv = mv[n:]
        return total

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


def _append_whole(path: str, data: bytes) -> None:
    """Append ``data`` to a local file, all or nothing: a failed append is cut back off."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        start = os.fstat(fd).st_size
        try:
            mv = memoryview(data)
            while mv.nbytes:
                n = os.write(fd, mv)
                if not n:
                    raise OSError(errno.ENOSPC, "the write made no progress")
                mv = mv[n:]
        except BaseException:
            with suppress(OSError):
                os.ftruncate(fd, start)
            raise
    finally:
        os.close(fd)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_bytes(url: str) -> bytes:
    """The whole content of a file at a path or fsspec URL."""
    fs, path = _fs(url)
    try:
        return retrying(f"reading {url}", lambda: fs.cat_file(path))
    except FileNotFoundError:
        raise StorageError(f"{url}: no such file") from None
    except IsADirectoryError:
        raise StorageError(f"{url}: is a directory, not a file") from None
    except _FS_ERRORS as exc:
        raise StorageError(f"{url}: cannot read: {cause(exc)}") from exc

