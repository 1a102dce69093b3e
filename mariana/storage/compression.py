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


def decompressed(raw: IO[bytes], url: str) -> IO[bytes]:
    """A stream of the decompressed bytes of ``raw`` (the file ``url``; uncompressed: ``raw``).
    Closing it leaves ``raw`` open. (The formats' modules are imported on first use: most
    processes never read one.)"""
    import bz2
    import gzip
    import lzma

    name = compression_of(url)
    if name == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    if name == "bz2":
        return bz2.BZ2File(raw, "rb")  # type: ignore[return-value]
    if name == "xz":
        return lzma.LZMAFile(raw, "rb")  # type: ignore[return-value]
    if name == "zstd":
        return _zstandard(url).ZstdDecompressor().stream_reader(raw, closefd=False)  # type: ignore[no-any-return]
    return raw


@contextmanager
def compressed(raw: IO[bytes], url: str) -> Iterator[IO[bytes]]:
    """A stream that writes ``url``'s format into ``raw`` (uncompressed: ``raw`` itself); the
    format's trailer is written when the block ends, and ``raw`` stays open."""
    name = compression_of(url)
    if name is None:
        yield raw
        return
    import bz2
    import gzip
    import lzma

    out: Any
    if name == "gzip":
        out = gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0)  # (no name, no time: same output, same bytes)
    elif name == "bz2":
        out = bz2.BZ2File(raw, "wb")
    elif name == "xz":
        out = lzma.LZMAFile(raw, "wb")
    else:
        out = _zstandard(url).ZstdCompressor().stream_writer(raw, closefd=False)
    try:
        yield out
    finally:  # (after a failure too: its trailer goes into a file that is discarded, not committed)
        out.close()
