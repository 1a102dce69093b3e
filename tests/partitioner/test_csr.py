"""The CSR primitives (``partitioner.csr``): scipy's loops with int32 index arrays below
``INT32_ENTRIES`` and int64 ones above give the same values in the same order, those of their
definitions; without the loops the import fails, with a message saying so."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from mariana.partitioner import csr

pytestmark = pytest.mark.timeout(60)


def _both(monkeypatch, call):
    """``call()`` with the limit as shipped and lowered to 1 (every non-empty size int64)."""
    narrow = call()
    monkeypatch.setattr(csr, "INT32_ENTRIES", 1)
    wide = call()
    monkeypatch.undo()
    return narrow, wide


def _same(a: np.ndarray, b: np.ndarray) -> None:
    """The same values in the same order (the index types may differ)."""
    assert a.shape == b.shape
    assert a.astype(np.int64).tobytes() == b.astype(np.int64).tobytes()


def test_the_limit_picks_the_index_type(monkeypatch):
    assert csr.INT32_ENTRIES == 2 ** 31
    assert csr.index_type(0, 2 ** 31 - 1) is np.int32 and csr.index_type(5, 2 ** 31) is np.int64
    assert csr.fits_int32() and not csr.fits_int32(3, 2 ** 40)
    monkeypatch.setattr(csr, "INT32_ENTRIES", 4)
    assert csr.index_type(3) is np.int32 and csr.index_type(3, 4) is np.int64


@pytest.mark.parametrize("counts", [[3, 0, 2, 0, 0, 1], [], [0, 0], [5], [40, 0, 7]])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int16])
def test_row_ids_are_the_same_with_int64_pointers(monkeypatch, counts, dtype):
    indptr = np.concatenate(([0], np.cumsum(np.asarray(counts, dtype=np.int64)))).astype(np.int64)
    want = [r for r, c in enumerate(counts) for _ in range(c)]
    for ptr in (indptr, indptr.astype(np.int32), indptr + 9):
        narrow, wide = _both(monkeypatch, lambda: csr.row_ids(ptr, dtype))
        assert narrow.dtype == wide.dtype == np.dtype(dtype)
        assert narrow.tolist() == wide.tolist() == want


@pytest.mark.parametrize("k, ncols, m", [(40, 90, 3000), (5, 3, 0), (1, 7, 50), (300, 4, 900)])
def test_transpose_is_the_same_with_int64_indices(monkeypatch, k, ncols, m):
    rng = np.random.default_rng(k + m)
    rows = np.sort(rng.integers(0, k, m))
    cols = rng.integers(0, ncols, m).astype(np.int32)
    indptr = np.concatenate(([0], np.cumsum(np.bincount(rows, minlength=k))))
    (tp32, r32), (tp64, r64) = _both(monkeypatch, lambda: csr.transpose(indptr, cols, ncols))
    assert tp32.dtype == r32.dtype == np.int32 and tp64.dtype == r64.dtype == np.int64
    _same(tp32, tp64)
    _same(r32, r64)
    for c in range(ncols):  # each column's rows ascending, duplicates kept
        assert r64[tp64[c]:tp64[c + 1]].tolist() == rows[cols == c].tolist()


@pytest.mark.parametrize("n, nkeys", [(5000, 300), (0, 4), (70000, 3), (1, 1)])
@pytest.mark.parametrize("values", [None, "float", "int64", "bytes"])
def test_group_by_is_the_same_with_int64_indices(monkeypatch, n, nkeys, values):
    """Positions, values the loop takes (float, int64) and values it does not (bytes: gathered)."""
    rng = np.random.default_rng(n + nkeys)
    keys = rng.integers(0, nkeys, n).astype(np.int32)
    vals = {None: None, "float": rng.random(n), "int64": rng.integers(-2 ** 40, 2 ** 40, n),
            "bytes": rng.integers(0, 10 ** 6, n).astype("S7")}[values]
    (p32, o32), (p64, o64) = _both(monkeypatch, lambda: csr.group_by(keys, nkeys, vals))
    assert p32.dtype == np.int32 and p64.dtype == np.int64
    _same(p32, p64)
    order = np.argsort(keys, kind="stable")
    want = order if vals is None else vals[order]
    assert o32.dtype == o64.dtype or vals is None
    assert o32.tolist() == o64.tolist() == want.tolist()
    assert np.diff(p64).tolist() == np.bincount(keys, minlength=nkeys).tolist()


def test_without_scipys_loops_the_import_says_so():
    """scipy is a dependency: where its sparse loops cannot be loaded, importing the primitives
    fails at once with an ImportError that names them (there is no other form)."""
    code = "\n".join([
        "import sys",
        "sys.modules['scipy'] = None  # (every import of scipy fails)",
        "try:",
        "    import mariana.partitioner.csr",
        "except ImportError as e:",
        "    assert 'scipy.sparse._sparsetools' in str(e), e",
        "else:",
        "    raise SystemExit('imported without scipy')",
    ])
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
