"""Parquet edge tables (the ``parquet`` extra, through pyarrow): columns ``src``, ``dst`` and an
optional ``weight``, as Spark, GraphX and DuckDB write them (one file or a directory of parts).

A split is a run of consecutive row groups (``Split.start``/``end`` are row-group indices): a
worker reads the footer, then only its own row groups and only the edge columns, through an
fsspec file object (so ``s3://`` works; a local path goes to pyarrow directly, which maps it).
Integer ids come back as int64 arrays; string ids (``string``, ``large_string`` or a dictionary
of them) as numpy ``U`` arrays, which the loader treats like the ids of a text edge list.
pyarrow is imported only when a ``.parquet`` input is read.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np

from ..errors import StorageError, UsageError
from .localfs import LocalFS
from .rundir import _fs

__all__ = ["PARQUET_EXTS", "parquet_splits", "read_parquet_split", "row_offset"]

PARQUET_EXTS = (".parquet", ".parq", ".pq")
_EDGE_COLUMNS = ("src", "dst", "weight")


def _pa() -> tuple[Any, Any]:
    """(pyarrow, pyarrow.parquet), or the one-line error that says how to get them."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise UsageError("reading a Parquet graph input needs pyarrow: pip install 'mariana-bsp[parquet]'") from None
    return pa, pq


class _Open:
    """The Parquet file at ``url`` (fsspec URL or local path) as a ``ParquetFile``."""

    def __init__(self, url: str) -> None:
        _, self.pq = _pa()
        self.url = url
        try:
            self.fs, self.path = _fs(url)
        except StorageError as exc:
            raise UsageError(f"cannot read graph input: {exc}") from None
        self.f: Any = None

    def __enter__(self) -> Any:
        try:
            if isinstance(self.fs, LocalFS):
                return self.pq.ParquetFile(self.path, memory_map=True)
            self.f = self.fs.open(self.path, "rb")
            return self.pq.ParquetFile(self.f)
        except (UsageError, StorageError):
            raise
        except Exception as exc:  # pyarrow.ArrowInvalid (not Parquet), OSError, fsspec's errors
            self.close()
            raise UsageError(f"{self.url}: not a readable Parquet edge table: {exc}") from None

    def close(self) -> None:
        if self.f is not None:
            self.f.close()
            self.f = None

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _check_schema(url: str, schema: Any) -> None:
    """Columns ``src``/``dst`` of integer, float (whole numbers) or string type; ``weight`` numeric."""
    pa, _ = _pa()
    names = schema.names
    if not {"src", "dst"} <= set(names):
        raise UsageError(f"{url}: a Parquet edge table has columns 'src', 'dst' and optionally 'weight', "
                         f"found {names}")
    for name in _EDGE_COLUMNS:
        if name not in names:
            continue
        t = schema.field(name).type
        base = t.value_type if pa.types.is_dictionary(t) else t
        numeric = pa.types.is_integer(base) or pa.types.is_floating(base)
        text = pa.types.is_string(base) or pa.types.is_large_string(base)
        if not (numeric or (text and name != "weight")):
            want = "a number" if name == "weight" else "an integer or string"
            raise UsageError(f"{url}: column '{name}' has type {t}; it must be {want}")


def parquet_splits(url: str, file_bytes: int, split_bytes: int) -> list[tuple[int, int]]:
    """Row-group ranges [a, b): the file's row groups dealt, in order and by compressed size, into
    about ``file_bytes / split_bytes`` splits. A split never cuts a row group, so a file of one
    row group is one split whatever its size."""
    with _Open(url) as pf:
        _check_schema(url, pf.schema_arrow)
        meta = pf.metadata
        sizes = [sum(meta.row_group(g).column(c).total_compressed_size for c in range(meta.num_columns))
                 for g in range(meta.num_row_groups)]
    n = max(-(-file_bytes // max(split_bytes, 1)), 1)
    total = max(sum(sizes), 1)
    out: list[tuple[int, int, int]] = []  # (first group, end group, split number)
    held = 0
    for g, size in enumerate(sizes):  # a group goes to the split its middle byte falls in
        k = min(int((held + size / 2) / total * n), n - 1)
        if not out or k != out[-1][2]:
            out.append((g, g + 1, k))
        else:
            out[-1] = (out[-1][0], g + 1, k)
        held += size
    return [(a, b) for a, b, _ in out]


def row_offset(url: str, group: int) -> int:
    """How many rows of the file come before row group ``group`` (to name a bad row)."""
    with _Open(url) as pf:
        meta = pf.metadata
        return sum(meta.row_group(g).num_rows for g in range(group))


def _arrow_column(url: str, table: Any, name: str, first_row: int) -> Any:
    """Column ``name`` of ``table``, dictionaries decoded; a null is named by its row."""
    pa, _ = _pa()
    col = table.column(name)
    if col.null_count:
        import pyarrow.compute as pc

        row = int(pc.index(pc.is_null(col), True).as_py())
        raise UsageError(f"{url}: row {first_row + row}: '{name}' is null")
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    return col


def _is_text(pa: Any, col: Any) -> bool:
    return bool(pa.types.is_string(col.type) or pa.types.is_large_string(col.type))


def _piece(url: str, table: Any, columns: list[str], first_row: int) -> dict[str, np.ndarray]:
    """One piece as numpy arrays: ``src``, ``dst`` (numbers, or ``U`` strings when one of them is
    text) and ``weight``; when both are text, instead ``names`` (its distinct ids, found by
    Arrow's hash table: one Python string per distinct id, not per row) and ``pairs`` (rows x 2
    indices into them)."""
    pa, _ = _pa()
    cols = {name: _arrow_column(url, table, name, first_row) for name in columns}
    out: dict[str, np.ndarray] = {}
    if "weight" in cols:
        out["weight"] = cols.pop("weight").to_numpy()
    src, dst = cols["src"], cols["dst"]
    if _is_text(pa, src) and _is_text(pa, dst):
        both = pa.chunked_array(src.cast(pa.large_string()).chunks + dst.cast(pa.large_string()).chunks)
        enc = both.combine_chunks().dictionary_encode() if len(both) else None
        if enc is None:
            out["names"], out["pairs"] = np.empty(0, "U1"), np.empty((0, 2), np.int32)
        else:
            out["names"] = np.array(enc.dictionary.to_pylist(), dtype=str)
            out["pairs"] = enc.indices.to_numpy().reshape(2, -1).T
        return out
    for name, col in (("src", src), ("dst", dst)):
        out[name] = (np.array(col.to_pylist(), dtype=str) if len(col) else np.empty(0, dtype="U1")) \
            if _is_text(pa, col) else col.to_numpy()
    return out


def read_parquet_split(url: str, groups: tuple[int, int], weights: bool,
                       rows: int = 1 << 62) -> Iterator[tuple[dict[str, np.ndarray], int]]:
    """The ``src``, ``dst`` (and, if present and ``weights``, ``weight``) arrays of row groups
    [a, b), one row group at a time in pieces of at most ``rows`` rows (so a worker holds one
    decoded row group and one piece's arrays at a time), each with the file's row number of its
    first row."""
    a, b = groups
    with _Open(url) as pf:
        names = pf.schema_arrow.names
        _check_schema(url, pf.schema_arrow)
        columns = ["src", "dst"] + (["weight"] if weights and "weight" in names else [])
        meta = pf.metadata
        first = sum(meta.row_group(g).num_rows for g in range(a))
        for g in range(a, b):
            try:
                table = pf.read_row_group(g, columns=columns, use_threads=False)
            except Exception as exc:  # a damaged file: pyarrow's ArrowInvalid / OSError
                raise UsageError(f"{url}: row group {g}: not readable: {exc}") from None
            for at in range(0, table.num_rows, rows):
                piece = table.slice(at, rows)
                yield _piece(url, piece, columns, first + at), first + at
            first += table.num_rows
            del table
