"""Real results on a standard data set (slow tier): Fashion-MNIST from Debian's package
(``apt-get install dataset-fashion-mnist``, which .ci/run does), streamed from shards written
into a fresh cache. The thresholds are the published figures for an MLP and a small CNN."""

from __future__ import annotations

import json

import pytest

from mariana.cli import main
from mariana.vertices.train.named import find_files

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3000)]


@pytest.fixture
def fashion(tmp_path, monkeypatch):
    if find_files("fashion-mnist") is None:
        pytest.skip("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist, or MARIANA_DATA)")
    monkeypatch.setenv("MARIANA_CACHE", str(tmp_path / "cache"))  # the shards are written afresh


@pytest.mark.parametrize("job,workers,threshold", [("dnn-dp", 2, 0.88), ("cnn-hybrid", 2, 0.90)])
def test_fashion_mnist_reaches_the_published_accuracy(fashion, tmp_path, capsys, job, workers, threshold):
    assert main(["run", job, "--set", "data=fashion-mnist", "--workers", str(workers),
                 "--run-dir", str(tmp_path / "run"), "--json", "--no-trace"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["test_accuracy"] >= threshold, summary
