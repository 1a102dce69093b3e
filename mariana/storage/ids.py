"""Vertex keys: the codes by which block programs and the loader name graph vertices.

Integer ids of at most ``MAX_DIGITS`` characters are int64 codes that sort like the id strings
(``strkeys``, ``intkeys``); other ids are their UTF-8 bytes (``S`` arrays). Either way keys sort in
the string order of the ids, so the smallest key is the smallest id. ``pack_keys`` puts them on
the wire (``S`` strings as uint8 matrices), ``decode_keys`` turns them back into ids.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["MAX_DIGITS", "Ids", "decode_keys", "decimal_len", "intkeys", "label_counts", "pack_keys", "strkeys",
           "unpack_keys"]

#: Integer ids up to this many characters (with the sign) are coded as int64 keys.
MAX_DIGITS = 17
_POW12 = 12 ** np.arange(MAX_DIGITS - 1, -1, -1, dtype=np.int64)
#: Keys are decoded this many at a time (the digit matrix is 8 bytes a character).
DECODE_ROWS = 1 << 14
_POW10 = 10 ** np.arange(19, dtype=np.int64)


def decimal_len(v: np.ndarray) -> np.ndarray:
    """Characters of ``str(x)`` for every int64 ``x`` of ``v`` (not int64's smallest value)."""
    digits = np.maximum(np.searchsorted(_POW10, np.abs(v), side="right"), 1)
    return digits + (v < 0)


def strkeys(names: np.ndarray) -> np.ndarray:
    """int64 codes of decimal id strings (at most 17 characters) that sort as the strings do.

    Each character is a base-12 digit (end = 0, '-' = 1, '0'..'9' = 2..11), so "10" < "9" as keys.
    """
    if names.size == 0:
        return np.empty(0, np.int64)
    u = np.ascontiguousarray(names, dtype=f"U{MAX_DIGITS}").view(np.uint32).reshape(-1, MAX_DIGITS).astype(np.int64)
    sym = np.where(u == 0, 0, np.where(u == 45, 1, u - 46))
    return sym @ _POW12


_POW12_UP = 12 ** np.arange(MAX_DIGITS + 1, dtype=np.int64)
_TWOS = np.array([2 * (12 ** k - 1) // 11 for k in range(MAX_DIGITS + 1)], dtype=np.int64)  # sum of 2 * 12^i, i < k


def intkeys(values: np.ndarray) -> np.ndarray:
    """``strkeys`` of the decimal strings of int64 ``values`` (at most ``MAX_DIGITS`` characters),
    without making the strings: the digits, least significant first, as base-12 digits + 2,
    shifted to the string's place. Routing a scale-19 piece: ~5x faster than the strings' codes."""
    if values.size == 0:
        return np.empty(0, np.int64)
    neg = values < 0
    v = np.abs(values)
    digits = decimal_len(values) - neg
    key = np.zeros(len(v), np.int64)
    for k in range(int(digits.max())):  # digits past a number's own are 0
        v, d = np.divmod(v, 10)
        d *= _POW12_UP[k]
        key += d
    key += _TWOS[digits]
    key *= _POW12_UP[MAX_DIGITS - digits - neg]
    key[neg] += _POW12_UP[MAX_DIGITS - 1]  # '-' first
    return key


def decode_keys(keys: np.ndarray) -> np.ndarray:
    """Ids (a ``U`` array) of keys: int64 codes or UTF-8 bytes."""
    if keys.dtype.kind == "S":
        return np.char.decode(keys, "utf-8")
    width = MAX_DIGITS  # only the characters of the longest id are decoded (scale 19: 6 of 17)
    for chars in range(1, MAX_DIGITS):
        if not (keys % _POW12_UP[MAX_DIGITS - chars]).any():
            width = chars
            break
    out = np.zeros((len(keys), MAX_DIGITS), dtype=np.uint32)
    for lo in range(0, len(keys), DECODE_ROWS):  # in pieces: the digit matrix is 8 bytes a character
        sym = (keys[lo:lo + DECODE_ROWS, None] // _POW12[:width]) % 12
        out[lo:lo + DECODE_ROWS, :width] = np.where(sym == 0, 0, np.where(sym == 1, 45, sym + 46))
    return out.view(f"U{MAX_DIGITS}").reshape(len(keys))


class Ids:
    """A block's vertex ids without decoding them all: ``keys`` (sorted as the ids are) and
    ``of(rows)``, the ids of some rows as strings (what a job's summary names)."""

    def __init__(self, keys: np.ndarray) -> None:
        self.keys = keys

    def of(self, rows: np.ndarray) -> list[str]:
        return [str(x) for x in decode_keys(self.keys[rows]).tolist()]


def label_counts(labels: Ids | np.ndarray) -> tuple[list[Any], list[int]]:
    """Each distinct label (ascending) and how many rows have it; labels given as ``Ids`` (keys)
    are decoded only once each (keys sort as their strings do: the same order)."""
    if isinstance(labels, Ids):
        keys, counts = np.unique(labels.keys, return_counts=True)
        return decode_keys(keys).tolist(), counts.tolist()
    names, counts = np.unique(labels, return_counts=True)
    return names.tolist(), counts.tolist()


def pack_keys(keys: np.ndarray) -> np.ndarray:
    """Keys as a wire-safe array: int64 as is, ``S`` strings as a (n, width) uint8 matrix."""
    if keys.dtype.kind == "S":
        width = max(keys.dtype.itemsize, 1)
        return np.ascontiguousarray(keys, dtype=f"S{width}").view(np.uint8).reshape(len(keys), width)
    return keys


def unpack_keys(a: np.ndarray) -> np.ndarray:
    if a.ndim == 2:
        return np.ascontiguousarray(a).view(f"S{a.shape[1]}").reshape(a.shape[0])
    return a
