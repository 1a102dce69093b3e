"""Compressed files by name (storage/compression.py): written whole in their format, read back
decompressed, on a local path and on memory://; input splits of them are whole files."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import sys
import uuid

import pytest
import zstandard

from mariana.errors import StorageError, UsageError
from mariana.storage import read_bytes, read_text, write_bytes, write_text
from mariana.storage.compression import compression_of
from mariana.storage.rundir import write_lines
from mariana.storage.splits import iter_text_split, list_inputs, make_splits, read_text_split

pytestmark = pytest.mark.timeout(30)



def _unzstd(data: bytes) -> bytes:  # (a streamed frame does not state its size: read it as a stream)
    return zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)).read()


COMPRESS = {".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress, ".zst": zstandard.ZstdCompressor().compress}
DECOMPRESS = {".gz": gzip.decompress, ".bz2": bz2.decompress, ".xz": lzma.decompress, ".zst": _unzstd}
TEXT = "".join(f"{i} {i * 7 % 101} {i / 3!r}\n" for i in range(5000))


def _url(tmp_path, kind: str, name: str) -> str:
    return str(tmp_path / name) if kind == "file" else f"memory://compression-{uuid.uuid4().hex}/{name}"


def test_the_format_comes_from_the_name():
    assert [compression_of(n) for n in ("g.e.gz", "g.e.bz2", "g.e.xz", "g.e.zst", "g.e", "g.gz.e", "s3://b/x.tsv.gz")] \
        == ["gzip", "bz2", "xz", "zstd", None, None, "gzip"]


@pytest.mark.parametrize("kind", ["file", "memory"])
@pytest.mark.parametrize("ext", sorted(DECOMPRESS))
def test_a_compressed_name_is_written_in_its_format_and_read_back(tmp_path, kind, ext):
    url = _url(tmp_path, kind, f"out.tsv{ext}")
    write_text(url, TEXT)
    raw = read_bytes(url)
    assert len(raw) < len(TEXT) // 2  # compressed, not the text under a compressed name
    assert DECOMPRESS[ext](raw).decode() == TEXT  # the standard tools read it
    assert read_text(url) == TEXT
    write_lines(url, lambda: iter([TEXT[:100], TEXT[100:]]))  # piece by piece, the same file
    assert DECOMPRESS[ext](read_bytes(url)).decode() == TEXT


def test_bytes_are_written_and_read_as_they_are_whatever_the_name(tmp_path):
    """Only text outputs are compressed by name: a downloaded .gz file is stored as it came."""
    url = str(tmp_path / "train-images.gz")
    blob = gzip.compress(TEXT.encode())
    write_bytes(url, blob)
    assert (tmp_path / "train-images.gz").read_bytes() == blob == read_bytes(url)


def test_the_same_output_is_the_same_gzip_bytes(tmp_path):
    """No file name or time in the gzip header: the same result writes the same bytes."""
    write_text(str(tmp_path / "a.tsv.gz"), TEXT)
    write_text(str(tmp_path / "b.tsv.gz"), TEXT)
    assert (tmp_path / "a.tsv.gz").read_bytes() == (tmp_path / "b.tsv.gz").read_bytes()


def test_a_failed_write_leaves_no_file(tmp_path):
    url = str(tmp_path / "out.tsv.gz")

    def pieces():
        yield TEXT[:100]
        raise RuntimeError("the job failed while writing")

    with pytest.raises(Exception, match="the job failed"):
        write_lines(url, pieces)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("ext", sorted(DECOMPRESS))
def test_a_compressed_input_is_one_split_read_whole(tmp_path, ext):
    path = tmp_path / f"g.e{ext}"
    path.write_bytes(COMPRESS[ext](TEXT.encode()))
    splits = make_splits(list_inputs(str(path)), 1000)  # small splits: a plain file would be many
    assert len(splits) == 1 and splits[0].kind == "compressed"
    assert read_text_split(splits[0]) == TEXT.encode()
    blocks = list(iter_text_split(splits[0], 4096))
    assert len(blocks) > 1 and all(b.endswith(b"\n") for b in blocks) and b"".join(blocks) == TEXT.encode()


def test_a_corrupt_compressed_input_is_named(tmp_path):
    path = tmp_path / "g.e.gz"
    path.write_bytes(gzip.compress(TEXT.encode())[:200])  # cut short
    (split,) = make_splits(list_inputs(str(path)), 1 << 20)
    with pytest.raises(UsageError, match=r"g\.e\.gz"):
        read_text_split(split)
    with pytest.raises(StorageError, match=r"g\.e\.gz: not a readable gzip file"):
        read_text(str(path))


def test_zst_without_zstandard_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "zstandard", None)  # as if not installed
    with pytest.raises(UsageError, match=r"out\.tsv\.zst: .*needs the 'zstandard' package"):
        write_text(str(tmp_path / "out.tsv.zst"), TEXT)
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "g.e.zst").write_bytes(b"\x28\xb5\x2f\xfd")  # zstd's magic number
    (split,) = make_splits(list_inputs(str(tmp_path / "g.e.zst")), 1 << 20)
    with pytest.raises(UsageError, match=r"g\.e\.zst: .*needs the 'zstandard' package"):
        read_text_split(split)
