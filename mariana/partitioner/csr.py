"""CSR primitives of a graph fragment, over scipy's compiled sparse loops: the row of every
entry (``row_ids``), counting sorts by key (``group_by``, ``transpose``), ``stable_argsort`` and
``first_of_runs``. The loader builds fragments with them (``graphload``, ``graphbuild``) and
the graph kernels (``vertices/graph/kernels.py``) run over the same loops.

scipy's loops are loaded from their file without importing ``scipy.sparse`` (``_load_sparsetools``);
each primitive has a numpy form with the same result, used without scipy or with
``MARIANA_NO_SCIPY=1`` (tests compare the two).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
from typing import Any

import numpy as np

__all__ = ["have_scipy", "row_ids", "first_of_runs", "stable_argsort", "group_by", "transpose"]


def _load_sparsetools() -> Any:
    """scipy's compiled sparse loops (``scipy.sparse._sparsetools``: ``csr_matvec``, ``csr_tocsc``,
    ``expandptr``, ...; private), loaded from their file without importing ``scipy.sparse``: the
    package costs every process ~19 MB and ~0.1 s, and PageRank needs no more than these loops
    (a scale-19 two-worker PageRank: a forked worker starts at 37 MiB, not 46). Where that fails (another
    scipy layout), the package's own import; None without scipy (the numpy forms run)."""
    try:
        spec = importlib.util.find_spec("scipy")  # (finds the package; does not import it)
        if spec is not None and spec.origin:
            folder = os.path.join(os.path.dirname(spec.origin), "sparse")
            for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                path = os.path.join(folder, "_sparsetools" + suffix)
                if os.path.exists(path):
                    ext = importlib.util.spec_from_file_location("scipy.sparse._sparsetools", path)
                    if ext is not None and ext.loader is not None:
                        module = importlib.util.module_from_spec(ext)
                        ext.loader.exec_module(module)
                        return module
    except (ImportError, OSError):  # pragma: no cover - another layout: the package's import below
        pass
    try:
        from scipy.sparse import _sparsetools
    except ImportError:  # pragma: no cover - scipy is a dependency; this is the fallback
        return None
    return _sparsetools


_ST = _load_sparsetools()


_expandptr = getattr(_ST, "expandptr", None)  # a CSR's row pointers into row ids (what tocoo uses)


_tocsc = getattr(_ST, "csr_tocsc", None)  # a CSR by column (``tocsc``): ``transpose``, ``group_by``


#: the data types scipy's loops take as they are (``group_by``'s values)
_LOOP_TYPES = frozenset(np.dtype(c) for c in "?bBhHiIlLqQfdgFDG")


def _by_column(n_row: int, n_col: int, indptr: np.ndarray, indices: np.ndarray,
               data: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``csr_matrix((data, indices, indptr), (n_row, n_col)).tocsc()``'s (indptr, row indices,
    data) with int32 indices, by scipy's loop alone: each column's entries by row, in stored
    order within a row (a stable counting sort)."""
    assert _tocsc is not None
    bp, bi, bx = np.empty(n_col + 1, np.int32), np.empty(len(indices), np.int32), np.empty(len(indices), data.dtype)
    _tocsc(n_row, n_col, indptr.astype(np.int32, copy=False), indices.astype(np.int32, copy=False), data, bp, bi, bx)
    return bp, bi, bx


def have_scipy() -> bool:
    """Whether the scipy kernels run (scipy importable and not switched off by MARIANA_NO_SCIPY)."""
    return _ST is not None and os.environ.get("MARIANA_NO_SCIPY", "") in ("", "0")


def row_ids(indptr: np.ndarray, dtype: Any = np.int32) -> np.ndarray:
    """The row of every entry of a CSR, ``np.repeat(np.arange(k, dtype), np.diff(indptr))``: with
    scipy its C loop (``expandptr``), about half the time of ``np.repeat`` on a graph's rows."""
    k = len(indptr) - 1
    it = np.dtype(dtype)
    if (_expandptr is not None and have_scipy() and k >= 0 and it in (np.dtype(np.int32), np.dtype(np.int64))
            and int(indptr[0]) == 0 and (it == np.int64 or int(indptr[-1]) < 2 ** 31)):
        out = np.empty(int(indptr[-1]), it)
        _expandptr(k, indptr.astype(it, copy=False), out)
        return out
    return np.repeat(np.arange(max(k, 0), dtype=it), np.diff(indptr))


def first_of_runs(a: np.ndarray) -> np.ndarray:
    """The mask of the first element of each run of equal values in ``a`` (sorted ``a``: its distinct values)."""
    first = np.empty(a.size, dtype=bool)
    first[:1] = True
    np.not_equal(a[1:], a[:-1], out=first[1:])
    return first


def transpose(indptr: np.ndarray, indices: np.ndarray, ncols: int) -> tuple[np.ndarray, np.ndarray]:
    """The CSR pattern (``indptr``, column ``indices``) by column: ``(column indptr, rows)``, each
    column's rows ascending, duplicates kept. The pattern only: ~5 bytes an entry of temporaries."""
    k = len(indptr) - 1
    if have_scipy() and _tocsc is not None and max(len(indices), k, ncols) < 2 ** 31:
        tptr, rows, _ = _by_column(k, ncols, indptr, indices, np.ones(len(indices), np.int8))
        return tptr, rows
    order = np.argsort(indices, kind="stable")
    rows = np.repeat(np.arange(k, dtype=np.int32 if k < 2 ** 31 else np.int64), np.diff(indptr))[order]
    return np.concatenate(([0], np.cumsum(np.bincount(indices, minlength=ncols)))), rows


def stable_argsort(a: np.ndarray) -> np.ndarray:
    """``np.argsort(a, kind="stable")``; for non-negative int32 values by two 16-bit radix passes
    (numpy sorts 16-bit keys by radix; 3x faster than its merge sort on millions of edges)."""
    if a.dtype != np.int32 or a.size < 1024 or a.min() < 0:
        return np.argsort(a, kind="stable")
    low = np.argsort((a & 0xFFFF).astype(np.uint16), kind="stable")
    return low[np.argsort((a[low] >> 16).astype(np.uint16), kind="stable")]


def group_by(keys: np.ndarray, nkeys: int, values: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A stable counting sort of int ``keys`` in [0, nkeys): ``(indptr, order)``, key ``j``'s
    positions being ``order[indptr[j]:indptr[j + 1]]``, ascending; with ``values``, those values
    in that order instead of the positions. scipy: one ``tocsc`` of a one-row matrix (the
    positions or values as its data), ~3x faster than the radix argsort of the numpy form."""
    n = len(keys)
    if (have_scipy() and _tocsc is not None and max(n, nkeys) < 2 ** 31
            and (values is None or values.dtype in _LOOP_TYPES)):
        data = np.arange(n, dtype=np.int32) if values is None else np.ascontiguousarray(values)
        tptr, _, out = _by_column(1, nkeys, np.array([0, n], np.int32), keys, data)
        return tptr, out
    order = stable_argsort(keys)
    return np.concatenate(([0], np.cumsum(np.bincount(keys, minlength=nkeys)))), order if values is None else values[order]

