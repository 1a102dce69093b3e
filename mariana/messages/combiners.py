"""Combiners: reduce messages with the same (destination, tag) to one, sender- and receiver-side.

A combiner is any callable ``(a, b) -> payload``, associative and commutative (as in Pregel:
how messages are grouped before combining depends on placement). It must not modify its arguments (payloads are
shared, never copied, on the local path). The engine applies it in the deterministic message
order (source vertex id, send order), so min/max/integer sums give the same result on any
placement; float sums may differ in the last bits between worker counts (summation order).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

Combiner = Callable[[Any, Any], Any]

__all__ = ["Combiner", "sum_combiner", "min_combiner", "max_combiner", "COMBINERS", "resolve_combiner"]


def sum_combiner(a: Any, b: Any) -> Any:
    """a + b for numbers and arrays (a new array: inputs are never modified)."""
    return a + b


def min_combiner(a: Any, b: Any) -> Any:
    """Element-wise minimum for arrays, ``min`` for anything ordered (numbers, strings)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.minimum(a, b)
    return b if b < a else a


def max_combiner(a: Any, b: Any) -> Any:
    """Element-wise maximum for arrays, ``max`` for anything ordered."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.maximum(a, b)
    return b if b > a else a


COMBINERS: dict[str, Combiner] = {"sum": sum_combiner, "min": min_combiner, "max": max_combiner}


def resolve_combiner(spec: str | Combiner) -> Combiner:
    """A built-in combiner by name, or the callable itself."""
    if callable(spec):
        return spec
    try:
        return COMBINERS[spec]
    except KeyError:
        raise ValueError(f"unknown combiner {spec!r}; built-ins: {', '.join(COMBINERS)}") from None
