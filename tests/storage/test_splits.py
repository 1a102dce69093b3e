"""Text splits read in blocks of whole lines (``storage.splits._line_blocks``) and grouped into
the parser's pieces (``jobs.graphload._pieces``)."""

from __future__ import annotations

import io
import random

import pytest

from mariana.jobs.graphload import _pieces
from mariana.storage.splits import _line_blocks

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
