"""A graph job's output, written by each worker as its own part: ``vertex<TAB>value`` lines in
the ids' string order, or Graphalytics' ``vertex value`` lines (numeric order for integer ids),
formatted and written a piece at a time so that the text of a large part never exists whole.
``jobs/graphjob.py`` commits the parts (``storage.parts``) once every block has written its own.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..errors import StorageError
from .rundir import write_lines
from .ids import Ids, decode_keys
from .parts import part_url

__all__ = ["write_part", "graphalytics_part", "OUTPUT_ROWS"]

#: Output parts are formatted and written this many rows at a time (about 300 bytes a row are
#: alive at once: the ids' strings, the lines and their bytes)
OUTPUT_ROWS = 1 << 14


def _decoded(values: np.ndarray, labels: bool) -> np.ndarray:
    """``values`` as they are written: decoded to strings when they are labels (keys)."""
    return decode_keys(values) if labels else values


def graphalytics_part(keys: np.ndarray, values: np.ndarray, fmt: Callable[[Any], str],
                      numeric: bool, labels: bool = False) -> tuple[Callable[[int, int], str], str]:
    """One worker's part of a Graphalytics output: ``lines(lo, hi)``, the ``vertex value`` lines of
    rows lo..hi (``keys`` in string order, decoded to ids a piece at a time; ``labels``: the
    values are keys too, decoded the same way) ordered by number when every id of the graph is
    an integer (``numeric``); and that order, the key of the parts' merge (``storage.parts.LINE_ORDERS``)."""
    if numeric and len(keys):
        number = np.concatenate([decode_keys(keys[lo:lo + OUTPUT_ROWS]).astype(np.int64)
                                 for lo in range(0, len(keys), OUTPUT_ROWS)])
        by_number = np.argsort(number, kind="stable")
        del number
        keys, values = keys[by_number], values[by_number]

    def lines(lo: int, hi: int) -> str:
        return "".join(map("{} {}\n".format, decode_keys(keys[lo:hi]).tolist(),
                           map(fmt, _decoded(values[lo:hi], labels).tolist())))

    return lines, "numeric" if numeric else "graphalytics"



def write_part(output: str | None, index: int, own: np.ndarray, values: np.ndarray, labels: bool,
               fmt: Callable[[Any], str], graphalytics: bool,
               summarize: Callable[[Ids, Any], dict[str, Any]]) -> dict[str, Any]:
    """Block ``index``'s results (``own``: its keys; ``values``: one per key, keys themselves when
    ``labels``): written as its part of ``output``, returning where, the row count and
    ``summarize``'s summary (labels as ``Ids``); or returned whole (``ids``, ``values``) when
    there is no output. Ids and labels are decoded a piece at a time as the part is written, so
    no string array as long as the part exists. A storage error is returned, not raised: the
    job's finish reports it and discards every part."""
    if not output:
        return {"ids": decode_keys(own).tolist(), "values": decode_keys(values).tolist() if labels else values}
    url = part_url(output, index)
    order = "string"
    lines: Callable[[int, int], str]
    if graphalytics:  # 'vertex value', numeric order for integer ids
        lines, order = graphalytics_part(own, values, fmt, own.dtype.kind != "S", labels)
    elif values.dtype.kind == "f" and not labels:
        def lines(lo: int, hi: int) -> str:  # repr(float), as fmt_float
            return "".join([f"{k}\t{v!r}\n" for k, v in zip(decode_keys(own[lo:hi]).tolist(), values[lo:hi].tolist())])
    else:
        def lines(lo: int, hi: int) -> str:
            return "".join([f"{k}\t{fmt(v)}\n" for k, v in zip(decode_keys(own[lo:hi]).tolist(),
                                                                 _decoded(values[lo:hi], labels).tolist())])
    try:
        write_lines(url, lambda: (lines(lo, lo + OUTPUT_ROWS) for lo in range(0, len(own), OUTPUT_ROWS)))
    except StorageError as exc:
        return {"part": url, "error": str(exc)}
    return {"part": url, "rows": len(own), "summary": summarize(Ids(own), Ids(values) if labels else values),
            "order": order}
