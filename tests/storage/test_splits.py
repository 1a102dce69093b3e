"""Text splits read in blocks of whole lines (``storage.splits._line_blocks``) and grouped into
the parser's pieces (``partitioner.graphload._pieces``); the split size and which worker reads which split."""

from __future__ import annotations

import io
import random

import pytest

from mariana.partitioner.graphload import _pieces
from mariana.storage.splits import _line_blocks, assigned, make_splits, split_size

pytestmark = pytest.mark.timeout(60)


class _ReadOnly:
    """A file with ``read`` alone (no ``readinto``), as some file-likes are."""

    def __init__(self, data: bytes) -> None:
        self._f = io.BytesIO(data)

    def read(self, n: int = -1) -> bytes:
        return self._f.read(n)


def _expected(text: bytes, limit: int | None, skip_first: bool) -> bytes:
    """What a split reading ``limit`` bytes holds: its lines, the first dropped when it belongs to
    the previous split, the last finished past the limit."""
    end = len(text) if limit is None else limit
    start = 0
    if skip_first:
        nl = text.find(b"\n", 0, end)
        if nl < 0:
            return b""
        start = nl + 1
    if limit is not None and end > start and not text[:end].endswith(b"\n"):
        nl = text.find(b"\n", end)
        end = len(text) if nl < 0 else nl + 1
    return text[start:end] if end > start else b""


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("readinto", [True, False])
def test_line_blocks_are_the_splits_lines_in_blocks_ending_at_line_ends(seed, readinto):
    """Whatever the block size (lines longer than a block included), the blocks are the split's
    lines exactly once, each but the last ending at a line end, through ``readinto`` or ``read``."""
    rnd = random.Random(seed)
    text = b"".join(rnd.choice([b"1 2\n", b"10 200 3.5\n", b"x" * rnd.randint(1, 300) + b"\n", b"\n"]) for _ in range(200))
    text += rnd.choice([b"", b"7 8"])  # with and without a last line break
    for block in (1, 3, 16, 100, 4096):
        for limit in (None, 0, 1, 57, len(text) // 2, len(text)):
            for skip in (False, True):
                f = io.BytesIO(text) if readinto else _ReadOnly(text)
                got = list(_line_blocks(f, block, limit, skip))  # type: ignore[arg-type]
                assert b"".join(got) == _expected(text, limit, skip), (block, limit, skip)
                assert all(b.endswith(b"\n") for b in got[:-1]), (block, limit, skip)
                assert all(b for b in got), (block, limit, skip)


def test_pieces_group_consecutive_blocks_to_at_least_the_size():
    blocks = [bytes([65 + i]) * n for i, n in enumerate([3, 1, 4, 1, 5, 9, 2, 6])]
    pieces = list(_pieces(iter(blocks), 5))
    assert [b"".join(p) for p in pieces] == [b"AAAB" + b"CCCC", b"D" + b"EEEEE", b"F" * 9, b"GG" + b"HHHHHH"]
    assert [x for p in pieces for x in p] == blocks
    assert list(_pieces(iter([]), 5)) == []
    assert list(_pieces(iter([b"ab"]), 5)) == [[b"ab"]]


@pytest.mark.parametrize("size", [1, 999, 114_000_000, 240_000_000, 490_000_000])
@pytest.mark.parametrize("workers", [1, 2, 3, 4])
def test_every_worker_gets_the_same_number_of_equal_splits(size, workers):
    most = 64 << 20
    files = [("g.e", size)]
    split = split_size(files, workers, most)
    assert split <= most
    splits = make_splits(files, split)
    assert splits and [s.start for s in splits] == [0] + [s.end for s in splits[:-1]] and splits[-1].end == size
    assert sum(s.nbytes for s in splits) == size
    dealt = [assigned(splits, w, workers) for w in range(workers)]
    shares = [sum(s.nbytes for _, s in mine) for mine in dealt]
    counts = [len(mine) for mine in dealt]
    assert sorted(i for mine in dealt for i, _ in mine) == list(range(len(splits)))
    if size >= workers:  # (rounding: the last split is a few bytes short)
        assert max(shares) - min(shares) <= len(splits), (shares, split)
        assert max(counts) - min(counts) <= 1, counts


def test_unequal_part_files_are_dealt_by_bytes_each_worker_in_input_order():
    files = [("p/a.e", 100), ("p/b.e", 10), ("p/c.e", 50), ("p/d.e", 40), ("p/e.gz", 30)]
    splits = make_splits(files, 1000)  # one split a file
    got = [[s.url for _, s in assigned(splits, w, 2)] for w in range(2)]
    # largest first to the lighter worker: a; c; d (90 < 100); e (.gz: its file's bytes); b
    assert got == [["p/a.e", "p/b.e"], ["p/c.e", "p/d.e", "p/e.gz"]]  # 110 bytes and 120
    assert [i for i, _ in assigned(splits, 1, 2)] == [2, 3, 4]
