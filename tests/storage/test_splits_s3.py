"""Input splits read from a real S3 server (SeaweedFS, tests/s3_fixture.py): each worker fetches its
own byte range and the rest of its last line, not a store-sized read-ahead past it."""

from __future__ import annotations

import fsspec
import numpy as np
import pytest

from mariana.storage.splits import (
    iter_text_split, list_inputs, make_splits, read_table_split, read_text_split, table_rows)

SPLITS = 8


def _edges(n: int = 120_000, seed: int = 3) -> bytes:
    rng = np.random.default_rng(seed)
    e = rng.integers(0, 1 << 20, size=(n, 2))
    return "".join(f"{a}\t{b}\n" for a, b in e).encode()


@pytest.fixture
def fetched(monkeypatch):
    """Bytes the S3 files fetched from the server (a counter around s3fs's own range fetch)."""
    import s3fs.core

    got: list[int] = []
    real = s3fs.core.S3File._fetch_range

    def counted(self, start, end):
        data = real(self, start, end)
        got.append(len(data))
        return data

    monkeypatch.setattr(s3fs.core.S3File, "_fetch_range", counted)
    return got


@pytest.mark.timeout(120)
def test_text_splits_fetch_only_their_range(s3_url, fetched):
    text = _edges()
    url = f"{s3_url}/graph/g.e"
    fs, path = fsspec.core.url_to_fs(url)
    fs.pipe(path, text)
    files = list_inputs(url)
    splits = make_splits(files, -(-len(text) // SPLITS))
    assert len(splits) == SPLITS

    whole = [read_text_split(s) for s in splits]
    assert b"".join(whole) == text
    # each split: its range, one byte before it (the line end that says where its first line
    # starts) and the rest of its last line; nothing like a read-ahead block past it
    assert sum(fetched) <= len(text) + SPLITS * 512, (sum(fetched), len(text))

    fetched.clear()
    blocks = [b"".join(iter_text_split(s, 64 << 10)) for s in splits]
    assert blocks == whole
    assert sum(fetched) <= len(text) + SPLITS * 512, (sum(fetched), len(text))
    # and in few requests (a store's latency is per request): the split's bytes in one, not one
    # per parser block, then its last line's rest
    assert len(fetched) <= 3 * SPLITS, len(fetched)


@pytest.mark.timeout(120)
def test_npy_splits_fetch_only_their_rows(s3_url, fetched):
    table = np.random.default_rng(5).integers(0, 1 << 30, size=(200_000, 2), dtype=np.int64)
    url = f"{s3_url}/graph/g.npy"
    fs, path = fsspec.core.url_to_fs(url)
    with fs.open(path, "wb") as f:
        np.save(f, table)
    rows, _ = table_rows(url)
    assert rows == len(table)
    fetched.clear()
    splits = make_splits(list_inputs(url), table.nbytes // SPLITS + 1)
    got = [read_table_split(s) for s in splits]
    assert np.array_equal(np.concatenate([g["src"] for g in got]), table[:, 0])
    assert np.array_equal(np.concatenate([g["dst"] for g in got]), table[:, 1])
    assert sum(fetched) <= table.nbytes + len(splits) * 4096, (sum(fetched), table.nbytes)
