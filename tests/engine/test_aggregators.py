"""The exact ``fsum`` aggregator: a few floats stand for any number of values, and ``math.fsum`` of
them is ``math.fsum`` of the values, bit for bit, however the values are split among workers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mariana.engine.aggregators import AGGREGATORS, FSUM_FOLD, exact_partials


def _fsum(values: list[float]) -> object:
    """``math.fsum``, or the name of the exception it raises."""
    try:
        return math.fsum(values)
    except (OverflowError, ValueError) as exc:
        return type(exc).__name__


def _same(a: object, b: object) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def _values(seed: int) -> np.ndarray:
    """Seeded values of every kind: wide exponents, subnormals, both signs, cancellation."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 4000))
    x = rng.standard_normal(n) * 10.0 ** rng.integers(-320, 300, n)
    if n and seed % 3 == 0:  # subnormals (multiples of the smallest one)
        x[: n // 5] = 5e-324 * rng.integers(-40, 40, n // 5)
    if n and seed % 4 == 0:  # values that cancel
        x[n // 2:] = -x[: n - n // 2]
    if seed % 5 == 0:  # one scale: the usual PageRank case
        x = rng.random(n) ** 4 / max(n, 1)
    return x


@pytest.mark.timeout(60)
@pytest.mark.parametrize("seed", range(60))
def test_partials_sum_like_the_values_however_split(seed):
    x = _values(seed)
    want = _fsum(x.tolist())
    assert _same(_fsum(exact_partials(x)), want)
    cuts = sorted(np.random.default_rng(seed + 1000).integers(0, len(x) + 1, 3).tolist())
    pieces = [exact_partials(p) for p in np.split(x, cuts)]
    assert _same(_fsum([p for piece in pieces for p in piece]), want)
    assert len(exact_partials(x)) <= 40  # ~53 bits each: a few, not one per value


@pytest.mark.timeout(10)
@pytest.mark.parametrize("values", [[math.inf, 1.0], [-math.inf, 2.0, -math.inf], [math.inf, -math.inf, 1.0],
                                    [math.nan, 1.0], [1.7e308, 1.7e308],
                                    [5e-324, 5e-324, -1e-323], [0.0, -0.0], [-0.0]])
def test_special_values_give_what_fsum_gives(values):
    assert _same(_fsum(exact_partials(np.array(values))), _fsum(values))


@pytest.mark.timeout(10)
def test_an_intermediate_overflow_is_no_error():
    """fsum refuses where its running sum overflows though the sum itself does not; the exact sum does not."""
    values = [1.7e308, 1.7e308, -1.7e308]
    assert _fsum(values) == "OverflowError"
    assert math.fsum(exact_partials(np.array(values))) == 1.7e308


@pytest.mark.timeout(30)
def test_the_accumulator_stays_small_and_exact():
    agg = AGGREGATORS["fsum"]
    rng = np.random.default_rng(7)
    scalars = (rng.random(3 * FSUM_FOLD) * 10.0 ** rng.integers(-20, 20, 3 * FSUM_FOLD)).tolist()
    acc = agg.identity()
    for v in scalars:  # one value a vertex (the per-vertex PageRank)
        acc = agg.add(acc, v)
        assert len(acc) <= FSUM_FOLD
    array = rng.random(100_000)
    acc = agg.add(acc, array)
    other = agg.add(agg.identity(), -array[:500])
    merged = agg.merge(acc, other)
    assert len(merged) < 64  # what a worker sends the master
    assert agg.result(merged) == math.fsum(scalars + array.tolist() + (-array[:500]).tolist())
