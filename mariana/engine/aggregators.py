"""Aggregators: values reduced globally at the barrier, visible to every vertex next superstep.

An aggregator folds values into an accumulator on each worker (``add``), the master merges the
workers' accumulators in worker order (``merge``) and publishes ``result(acc)``. Accumulators
cross the wire, so they must be msgpack-able (numbers, strings, lists, dicts, numpy arrays).

``fsum`` is exact: its result is ``math.fsum`` of every value added, on any worker, so it does
not depend on placement or worker count (PageRank uses it for the dangling mass and the L1
change, which keeps ranks bit-identical across worker counts). Its accumulator is not the values
but their exact sum, held as a few floats (``exact_partials``): a worker sends the master a few
numbers a superstep, not one per vertex (a scale-19 PageRank's L1 change had the master make and
``fsum`` a list of 335K floats every superstep, ~13 ms on its critical path).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

__all__ = ["Aggregator", "AGGREGATORS", "exact_partials", "resolve_aggregator", "reduce_aggregator"]


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


#: an accumulator of more floats than this is folded into its exact partials again
FSUM_FOLD = 4096
#: values summed per ``np.bincount``: halves of significands (< 2^26 each) add exactly in float64
_EXACT_RUN = 1 << 26


def exact_partials(values: Any) -> list[float]:
    """A few floats whose exact sum is the exact sum of ``values`` (so ``math.fsum`` of them is
    ``math.fsum`` of the values, bit for bit: it rounds the exact sum correctly), with any inf or
    nan kept as they are (``fsum``'s own rules then apply). Each finite value is a signed 53-bit
    integer times a power of two (its exponent field): the integers are added per exponent (as
    two exact halves, with ``np.bincount``), the exponents' sums are shifted into one Python int,
    and that int is cut back into floats of 53 bits each, largest first."""
    v = np.ascontiguousarray(values, dtype=np.float64).ravel()
    if not v.size:
        return []
    bits = v.view(np.int64)
    field = (bits >> 52) & 0x7FF
    special: list[float] = []
    if int(field.max()) == 0x7FF:  # inf or nan
        odd = field == 0x7FF
        special, v = v[odd].tolist(), v[~odd]
        bits, field = v.view(np.int64), field[~odd]
    total = 0
    for lo in range(0, len(v), _EXACT_RUN):
        b, f = bits[lo:lo + _EXACT_RUN], field[lo:lo + _EXACT_RUN]
        mant = b & 0xFFFFFFFFFFFFF
        mant |= (f != 0).astype(np.int64) << 52  # the implicit bit (a subnormal has none)
        if bool((b < 0).any()):
            mant = np.where(b < 0, -mant, mant)
        f = np.maximum(f, 1)  # a subnormal's scale is the smallest normal's
        # mant = high * 2^26 + low (high signed, low in [0, 2^26)): both sum exactly in float64
        high = np.bincount(f, weights=(mant >> 26).astype(np.float64))
        low = np.bincount(f, weights=(mant & 0x3FFFFFF).astype(np.float64))
        for e in np.flatnonzero((high != 0) | (low != 0)).tolist():  # value = int * 2^(e - 1075)
            total += ((int(high[e]) << 26) + int(low[e])) << e
    parts = []
    while total:  # total * 2^-1075, as floats of at most 53 bits (each exact: no underflow can cut one)
        cut = max(total.bit_length() - 53, 0)
        top = total >> cut
        try:
            parts.append(math.ldexp(float(top), cut - 1075))
        except OverflowError:  # beyond float range: the values themselves, for fsum to refuse
            return [*v.tolist(), *special]
        total -= top << cut
    return parts + special


def _fold(acc: list) -> list:
    return exact_partials(np.array(acc)) if len(acc) > FSUM_FOLD else acc


def _fsum_add(acc: list, value: Any) -> list:
    if isinstance(value, np.ndarray):
        acc.extend(exact_partials(value))
    else:
        acc.append(float(value))
    return _fold(acc)


def _fsum_result(acc: list) -> float:
    return math.fsum(float(x) for x in acc)


def _mean_add(acc: list, value: Any) -> list:
    return [acc[0] + value, acc[1] + 1]


def _mean_result(acc: list) -> Any:
    return acc[0] / acc[1] if acc[1] else None


def _wmean_add(acc: list, value: Any) -> list:
    """``(value, weight)``: the accumulator is (sum of value * weight, sum of weight)."""
    v, weight = value
    return [acc[0] + v * weight, acc[1] + weight]


def _ratio_add(acc: list, value: Any) -> list:
    """``(numerator, denominator)``: both summed as they are (exact for counts)."""
    num, den = value
    return [acc[0] + num, acc[1] + den]


def _pair_merge(a: list, b: list) -> list:
    return [a[0] + b[0], a[1] + b[1]]


AGGREGATORS: dict[str, Aggregator] = {
    "sum": Aggregator("sum", lambda: 0, lambda a, v: a + v, lambda a, b: a + b),
    "min": Aggregator("min", lambda: None, _none_min, _none_min),
    "max": Aggregator("max", lambda: None, _none_max, _none_max),
    "count": Aggregator("count", lambda: 0, lambda a, v: a + 1, lambda a, b: a + b),
    "mean": Aggregator("mean", lambda: [0, 0], _mean_add, lambda a, b: [a[0] + b[0], a[1] + b[1]], _mean_result),
    "fsum": Aggregator("fsum", list, _fsum_add, lambda a, b: _fold([*a, *b]), _fsum_result),
    # weighted mean of (value, weight) pairs: sum(value * weight) / sum(weight), e.g. (accuracy, batch)
    "wmean": Aggregator("wmean", lambda: [0, 0], _wmean_add, _pair_merge, _mean_result),
    # sum of numerators / sum of denominators of (numerator, denominator) pairs, e.g. (correct, batch),
    # (loss * batch, batch): what the training jobs report, exact where the parts are counts
    "ratio": Aggregator("ratio", lambda: [0, 0], _ratio_add, _pair_merge, _mean_result),
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
