"""CSR primitives of a graph fragment, over scipy's compiled sparse loops: the row of every
entry (``row_ids``), counting sorts by key (``group_by``, ``transpose``), ``stable_argsort`` and
``first_of_runs``. The loader builds fragments with them (``graphload``, ``graphbuild``) and
the graph kernels (``vertices/graph/kernels.py``) run over the same loops.

scipy's loops are loaded from their file without importing ``scipy.sparse`` (``_load_sparsetools``).
They take int32 or int64 index arrays: int32 while every size involved (entries, rows, columns)
is below ``INT32_ENTRIES``, int64 above (``index_type``); the result is the same either way.
The graph kernels choose their index arrays by the same constant.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
from typing import Any

import numpy as np

__all__ = ["INT32_ENTRIES", "fits_int32", "index_type", "row_ids", "first_of_runs", "stable_argsort", "group_by",
           "transpose"]

#: scipy's loops (and csgraph's) get int32 index arrays while every size involved is below this,
#: int64 ones above: int32 halves the bytes they read. The one place of that limit: the graph
#: kernels read it through ``fits_int32`` and ``index_type`` (tests lower it to run the int64
#: form on small graphs).
INT32_ENTRIES = 2 ** 31

#: the loops every fragment and kernel needs
_NEEDED = ("expandptr", "csr_tocsc", "csr_matvec")


def fits_int32(*sizes: int) -> bool:
    """Whether every size (a count of entries, rows or columns) is below ``INT32_ENTRIES``."""
    return max(sizes, default=0) < INT32_ENTRIES


def index_type(*sizes: int) -> Any:
    """The index type of arrays that address ``sizes``: np.int32 below ``INT32_ENTRIES``, else np.int64."""
    return np.int32 if fits_int32(*sizes) else np.int64


def _load_sparsetools() -> Any:
    """scipy's compiled sparse loops (``scipy.sparse._sparsetools``: ``csr_matvec``, ``csr_tocsc``,
    ``expandptr``, ...; private), loaded from their file without importing ``scipy.sparse``: the
    package costs every process ~19 MB and ~0.1 s, and PageRank needs no more than these loops
    (a scale-19 two-worker PageRank: a forked worker starts at 37 MiB, not 46). Where that fails (another
    scipy layout), the package's own import; an ImportError where neither gives the loops."""
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
                        if all(hasattr(module, name) for name in _NEEDED):
                            return module
    except (ImportError, OSError):  # pragma: no cover - another layout: the package's import below
        pass
    try:
        from scipy.sparse import _sparsetools
    except ImportError as e:  # pragma: no cover - scipy is a dependency
        raise ImportError(f"mariana's graph kernels need scipy's sparse loops (scipy.sparse._sparsetools): {e}") from e
    missing = [name for name in _NEEDED if not hasattr(_sparsetools, name)]
    if missing:  # pragma: no cover - a scipy without them
        raise ImportError(f"scipy.sparse._sparsetools lacks {', '.join(missing)} (scipy {_scipy_version()})")
    return _sparsetools


def _scipy_version() -> str:  # pragma: no cover - for the error above
    try:
        import scipy

        return str(scipy.__version__)
    except ImportError:
        return "?"


_ST = _load_sparsetools()


_expandptr = _ST.expandptr  # a CSR's row pointers into row ids (what tocoo uses)


_tocsc = _ST.csr_tocsc  # a CSR by column (``tocsc``): ``transpose``, ``group_by``


#: the data types scipy's loops take as they are (``group_by``'s values)
_LOOP_TYPES = frozenset(np.dtype(c) for c in "?bBhHiIlLqQfdgFDG")


def _by_column(n_row: int, n_col: int, indptr: np.ndarray, indices: np.ndarray,
               data: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``csr_matrix((data, indices, indptr), (n_row, n_col)).tocsc()``'s (indptr, row indices,
    data) by scipy's loop alone (indices as ``index_type``): each column's entries by row, in
    stored order within a row (a stable counting sort)."""
    it = index_type(len(indices), n_row, n_col)
    bp, bi, bx = np.empty(n_col + 1, it), np.empty(len(indices), it), np.empty(len(indices), data.dtype)
    _tocsc(n_row, n_col, indptr.astype(it, copy=False), indices.astype(it, copy=False), data, bp, bi, bx)
    return bp, bi, bx


def row_ids(indptr: np.ndarray, dtype: Any = np.int32) -> np.ndarray:
    """The row of every entry of a CSR, ``np.repeat(np.arange(k, dtype), np.diff(indptr))``, by
    scipy's loop (``expandptr``), about half the time of ``np.repeat`` on a graph's rows. The loop
    writes its pointers' type: int64 output, or int32 output where ``index_type`` is int32, comes
    straight from it; another type (or int32 beyond the limit) is cast from its result."""
    k = len(indptr) - 1
    want = np.dtype(dtype)
    if k <= 0:
        return np.empty(0, want)
    if int(indptr[0]):  # (counted from the first pointer, as np.repeat does)
        indptr = indptr - indptr[0]
    n = int(indptr[-1])
    it = np.dtype(np.int64) if want == np.int64 else np.dtype(index_type(n, k))
    out = np.empty(n, it)
    _expandptr(k, indptr.astype(it, copy=False), out)
    return out.astype(want, copy=False)


def first_of_runs(a: np.ndarray) -> np.ndarray:
    """The mask of the first element of each run of equal values in ``a`` (sorted ``a``: its distinct values)."""
    first = np.empty(a.size, dtype=bool)
    first[:1] = True
    np.not_equal(a[1:], a[:-1], out=first[1:])
    return first


def transpose(indptr: np.ndarray, indices: np.ndarray, ncols: int) -> tuple[np.ndarray, np.ndarray]:
    """The CSR pattern (``indptr``, column ``indices``) by column: ``(column indptr, rows)``, each
    column's rows ascending, duplicates kept (``index_type``). The pattern only: ~5 bytes an
    entry of temporaries (int32)."""
    tptr, rows, _ = _by_column(len(indptr) - 1, ncols, indptr, indices, np.ones(len(indices), np.int8))
    return tptr, rows


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
    in that order instead of the positions. One ``tocsc`` of a one-row matrix (the positions or
    values as its data), ~3x faster than a radix argsort; values of a type the loop does not take
    are gathered by the positions."""
    n = len(keys)
    if values is not None and values.dtype not in _LOOP_TYPES:
        tptr, order = group_by(keys, nkeys)
        return tptr, values[order]
    it = index_type(n, nkeys)
    data = np.arange(n, dtype=it) if values is None else np.ascontiguousarray(values)
    tptr, _, out = _by_column(1, nkeys, np.array([0, n], it), keys, data)
    return tptr, out
