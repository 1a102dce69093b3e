"""Aggregators: values reduced globally at the barrier, visible to every vertex next superstep.

An aggregator folds values into an accumulator on each worker (``add``), the master merges the
workers' accumulators in worker order (``merge``) and publishes ``result(acc)``. Accumulators
cross the wire, so they must be msgpack-able (numbers, strings, lists, dicts, numpy arrays).

``fsum`` is exact: its accumulator keeps every value and the master reduces with ``math.fsum``,
so its result does not depend on placement or worker count (PageRank uses it for the dangling
mass and the L1 change, which keeps ranks bit-identical across worker counts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

__all__ = ["Aggregator", "AGGREGATORS", "resolve_aggregator", "reduce_aggregator"]


@dataclass(frozen=True)
class Aggregator:
    """``identity()`` starts an accumulator; ``add(acc, v)``; ``merge(a, b)``; ``result(acc)``."""

    name: str
    identity: Callable[[], Any]
    add: Callable[[Any, Any], Any]
    merge: Callable[[Any, Any], Any]
    result: Callable[[Any], Any] = lambda acc: acc


def _none_min(a: Any, b: Any) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.minimum(a, b)
    return b if b < a else a


def _none_max(a: Any, b: Any) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.maximum(a, b)
    return b if b > a else a


def _fsum_add(acc: list, value: Any) -> list:
    if isinstance(value, np.ndarray):
        acc.append(np.asarray(value, dtype=np.float64).ravel())
    else:
        acc.append(float(value))
    return acc


def _fsum_result(acc: list) -> float:
    parts: list[float] = []
    for item in acc:
        if isinstance(item, np.ndarray):
            parts.extend(item.tolist())
        elif isinstance(item, list):
            parts.extend(float(x) for x in item)
        else:
            parts.append(float(item))
    return math.fsum(parts)


def _mean_add(acc: list, value: Any) -> list:
    return [acc[0] + value, acc[1] + 1]


def _mean_result(acc: list) -> Any:
    return acc[0] / acc[1] if acc[1] else None


def _wmean_add(acc: list, value: Any) -> list:
    total, weight = value
    return [acc[0] + total, acc[1] + weight]


AGGREGATORS: dict[str, Aggregator] = {
    "sum": Aggregator("sum", lambda: 0, lambda a, v: a + v, lambda a, b: a + b),
    "min": Aggregator("min", lambda: None, _none_min, _none_min),
    "max": Aggregator("max", lambda: None, _none_max, _none_max),
    "count": Aggregator("count", lambda: 0, lambda a, v: a + 1, lambda a, b: a + b),
    "mean": Aggregator("mean", lambda: [0, 0], _mean_add, lambda a, b: [a[0] + b[0], a[1] + b[1]], _mean_result),
    "fsum": Aggregator("fsum", list, _fsum_add, lambda a, b: a + b, _fsum_result),
    # weighted mean: aggregate (sum of values, weight) pairs, e.g. (loss * batch, batch)
    "wmean": Aggregator("wmean", lambda: [0, 0], _wmean_add, lambda a, b: [a[0] + b[0], a[1] + b[1]], _mean_result),
}


def reduce_aggregator(fn: Callable[[Any, Any], Any], name: str = "custom") -> Aggregator:
    """A user-defined aggregator from an associative, commutative binary function."""
    return Aggregator(name, lambda: None, lambda a, v: v if a is None else fn(a, v), lambda a, b: _merge_none(fn, a, b))


def _merge_none(fn: Callable[[Any, Any], Any], a: Any, b: Any) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    return fn(a, b)


def resolve_aggregator(spec: str | Aggregator | Callable[[Any, Any], Any]) -> Aggregator:
    """A built-in by name, an ``Aggregator``, or a binary function (see ``reduce_aggregator``)."""
    if isinstance(spec, Aggregator):
        return spec
    if isinstance(spec, str):
        try:
            return AGGREGATORS[spec]
        except KeyError:
            raise ValueError(f"unknown aggregator {spec!r}; built-ins: {', '.join(AGGREGATORS)}") from None
    if callable(spec):
        return reduce_aggregator(spec, getattr(spec, "__name__", "custom"))
    raise TypeError(f"not an aggregator: {spec!r}")
