"""Plain local paths without importing fsspec: the part of fsspec's ``LocalFileSystem`` that
``storage/`` calls, with its semantics (absolute posix paths, ``~`` expanded; ``ls`` and
``find`` give full paths; ``rm`` of a folder needs ``recursive``).

Why not fsspec for these: importing it pulls in asyncio and ssl, ~11 MB of resident memory and
~45 ms in every process (the CLI, the master and each worker), and a job on local files needs
none of it. A URL with a protocol (``s3://``, ``memory://``, ``file://``, chained ``a::b``) still
goes to fsspec (``rundir._fs``), imported then.
"""

from __future__ import annotations

import glob as _glob
import gzip
import os
import posixpath
import shutil
import stat
from typing import IO, Any

__all__ = ["LocalFS", "LOCAL", "is_plain_path"]

#: fsspec's spellings of a local path that a plain ``open`` would not understand
_PREFIXES = ("file:", "local:")


def is_plain_path(url: str) -> bool:
    """A path on this machine, not a URL: no protocol (``x://``), no chaining (``a::b``)."""
    return "://" not in url and "::" not in url and not url.startswith(_PREFIXES)


class LocalFS:
    """The local disk through ``os`` calls, with fsspec ``LocalFileSystem`` semantics."""

    protocol = ("file", "local")

    @staticmethod
    def strip(path: str) -> str:
        """fsspec's form of a local path: absolute, posix, ``~`` expanded, no trailing slash."""
        if path.startswith("~"):
            path = os.path.expanduser(path)
        elif not path.startswith("/"):
            path = posixpath.join(os.getcwd(), path[2:] if path.startswith("./") else "" if path == "." else path)
        return path.rstrip("/") or "/"

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def isdir(self, path: str) -> bool:
        return os.path.isdir(path)

    def size(self, path: str) -> int:
        return os.stat(path).st_size

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        os.makedirs(path, exist_ok=exist_ok)

    def invalidate_cache(self, path: str | None = None) -> None:
        """Nothing is cached here (fsspec caches listings of remote stores)."""

    def ls(self, path: str, detail: bool = False) -> list[Any]:
        """The full paths in folder ``path`` (a file: itself); ``FileNotFoundError`` if neither.
        ``detail``: fsspec's entries instead, ``{"name", "size", "type"}`` ("file" or "directory")."""
        if os.path.isdir(path):
            with os.scandir(path) as it:
                names = [posixpath.join(path, e.name) for e in it]
        elif os.path.exists(path):
            names = [path]
        else:
            raise FileNotFoundError(path)
        if not detail:
            return names
        return [{"name": n, "size": st.st_size, "type": "directory" if stat.S_ISDIR(st.st_mode) else "file"}
                for n, st in ((n, os.stat(n)) for n in names)]

    def find(self, path: str, maxdepth: int | None = None) -> list[str]:
        """Every file below ``path`` (``maxdepth`` levels at most), sorted; a file: itself."""
        if not os.path.isdir(path):
            return [path] if os.path.exists(path) else []
        out: list[str] = []
        depth0 = path.rstrip("/").count("/")
        for top, dirs, files in os.walk(path):
            level = top.rstrip("/").count("/") - depth0 + 1  # the level of top's entries
            out.extend(posixpath.join(top, f) for f in files)
            if maxdepth is not None and level >= maxdepth:
                dirs.clear()
        return sorted(out)

    def glob(self, pattern: str) -> list[str]:
        """The paths matching ``pattern`` (``*``, ``?``, ``[...]``, ``**`` across folders; hidden
        names included, as fsspec does)."""
        return sorted(p.rstrip("/") for p in _glob.glob(pattern, recursive=True, include_hidden=True))

    def rm(self, path: str, recursive: bool = False) -> None:
        if os.path.isdir(path) and not os.path.islink(path):
            if not recursive:
                raise ValueError("Cannot delete directory, set recursive=True")
            shutil.rmtree(path)
        else:
            os.remove(path)

    def mv(self, path1: str, path2: str) -> None:
        shutil.move(path1, path2)

    def open(self, path: str, mode: str = "rb", compression: str | None = None, encoding: str | None = None) -> IO[Any]:
        if compression == "gzip":
            return gzip.open(path, mode, encoding=encoding)  # type: ignore[return-value]
        if compression is not None:
            raise ValueError(f"unsupported compression {compression!r}")
        return open(path, mode, encoding=encoding)

    def cat_file(self, path: str, start: int | None = None, end: int | None = None) -> bytes:
        """The bytes of ``path`` from ``start`` to ``end`` (negative: from the end, as slices)."""
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            lo = 0 if start is None else start if start >= 0 else max(0, size + start)
            hi = size if end is None else end if end >= 0 else size + end
            f.seek(lo)
            return f.read(max(hi - lo, 0))

    def pipe_file(self, path: str, value: bytes) -> None:
        with open(path, "wb") as f:
            f.write(value)

    def unstrip_protocol(self, name: str) -> str:
        return f"file://{self.strip(name)}"


#: The one local filesystem (it holds no state)
LOCAL = LocalFS()
