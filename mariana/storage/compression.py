"""Compressed files by name, as Hadoop and Spark read and write them: a path that ends in
``.gz``, ``.bz2``, ``.xz`` or ``.zst`` is that format, on any filesystem.

Reading and writing wrap the filesystem's own byte stream, so a local file and an S3 object
decompress alike, and a compressed output is still written whole or not at all (the temp file +
rename, or the one upload, of ``rundir._open_whole``). gzip, bzip2 and xz come with Python;
zstd needs the ``zstandard`` package (the ``[zstd]`` extra), and a ``.zst`` path without it is
one clear error.
A compressed file cannot be entered in the middle: it is read from its start (one input split).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import IO, Any, Iterator

from ..errors import UsageError

__all__ = ["COMPRESSED_EXTS", "compression_of", "require", "decompressed", "compressed"]

#: extension -> format name (fsspec's names)
COMPRESSED_EXTS: dict[str, str] = {".gz": "gzip", ".bz2": "bz2", ".xz": "xz", ".zst": "zstd"}


def compression_of(url: str) -> str | None:
    """The compression of a file by its name (``gzip``, ``bz2``, ``xz``, ``zstd``), or None."""
    for ext, name in COMPRESSED_EXTS.items():
        if url.endswith(ext):
            return name
    return None


def _zstandard(url: str) -> Any:
    try:
        import zstandard
    except ImportError:
        raise UsageError(f"{url}: reading or writing .zst files needs the 'zstandard' package "
                         f"(pip install 'mariana-bsp[zstd]'), or use .gz, .bz2 or .xz") from None
    return zstandard


def require(url: str | None) -> None:
    """Fail now, with the clear error, if ``url``'s format cannot be read or written here (a job
    checks its output's name before it runs, not when it has a result to write)."""
    if url and compression_of(url) == "zstd":
        _zstandard(url)


def _codec_file(raw: IO[bytes], url: str, name: str, mode: str) -> Any:
    """A file object that reads (``mode`` "rb") or writes ("wb") format ``name`` through ``raw``,
    leaving ``raw`` open when closed. (The formats' modules are imported on first use: most
    processes never read one.)"""
    if name == "gzip":
        import gzip

        return gzip.GzipFile(filename="", fileobj=raw, mode=mode, mtime=0)  # (no name, no time: same output, same bytes)
    if name == "bz2":
        import bz2

        return bz2.BZ2File(raw, mode)  # type: ignore[call-overload]
    if name == "xz":
        import lzma

        return lzma.LZMAFile(raw, mode)
    zstd = _zstandard(url)
    if mode == "rb":
        return zstd.ZstdDecompressor().stream_reader(raw, closefd=False)
    return zstd.ZstdCompressor().stream_writer(raw, closefd=False)


def decompressed(raw: IO[bytes], url: str) -> IO[bytes]:
    """A stream of the decompressed bytes of ``raw`` (the file ``url``; uncompressed: ``raw``).
    Closing it leaves ``raw`` open."""
    name = compression_of(url)
    return raw if name is None else _codec_file(raw, url, name, "rb")  # type: ignore[no-any-return]


@contextmanager
def compressed(raw: IO[bytes], url: str) -> Iterator[IO[bytes]]:
    """A stream that writes ``url``'s format into ``raw`` (uncompressed: ``raw`` itself); the
    format's trailer is written when the block ends, and ``raw`` stays open."""
    name = compression_of(url)
    if name is None:
        yield raw
        return
    out = _codec_file(raw, url, name, "wb")
    try:
        yield out
    finally:  # (after a failure too: its trailer goes into a file that is discarded, not committed)
        out.close()
