"""``wmean`` is the weighted mean of ``(value, weight)`` pairs, as documented; ``ratio`` adds up
``(numerator, denominator)`` pairs (what the training jobs report); both the same on any runtime."""

from __future__ import annotations

import pytest

import mariana
from mariana.jobs.launch import run_job

pytestmark = pytest.mark.timeout(120)

#: per vertex: its accuracy on its share of a test set and the share's size
SHARES = [(0.5, 10), (1.0, 30), (0.25, 40)]


class Evaluator(mariana.Vertex):
    """Contributes its share of a test set to ``name``: as (accuracy, n) for ``wmean``, as
    (correct, n) for ``ratio``."""

    def __init__(self, id: str, name: str, accuracy: float, n: int) -> None:
        super().__init__(id)
        self.name, self.accuracy, self.n = name, accuracy, n

    def compute(self, ctx, messages):
        if ctx.superstep == 0:
            part = self.accuracy if self.name == "wmean" else round(self.accuracy * self.n)
            ctx.aggregate(self.name, (part, self.n))
        else:
            self.value = ctx.aggregated(self.name)
            ctx.vote_to_halt()


@pytest.mark.parametrize("runtime,workers", [("local", 1), ("inproc", 2)])
@pytest.mark.parametrize("name", ["wmean", "ratio"])
def test_wmean_weighs_values_and_ratio_divides_sums(runtime, workers, name):
    g = mariana.Graph(name)
    g.add_vertices(Evaluator(f"e{i}", name, a, n) for i, (a, n) in enumerate(SHARES))
    g.add_aggregator(name, name)
    result = mariana.run(g, workers=workers, runtime=runtime)
    expected = sum(a * n for a, n in SHARES) / sum(n for _, n in SHARES)  # 45 of 80 right
    assert [result.values[f"e{i}"] for i in range(3)] == [pytest.approx(expected)] * 3


def test_the_training_jobs_accuracy_is_a_share_of_the_test_set():
    result = run_job("dnn-dp", sets=["epochs=1", "replicas=2"])
    evals = [m["test_accuracy"] for m in result.metrics if "test_accuracy" in m]
    assert evals and all(0.5 < a <= 1.0 for a in evals), evals  # digits: an MLP after one epoch
