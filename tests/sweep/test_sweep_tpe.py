"""``--search tpe``: Optuna's TPE draws, deterministic in (history, trial index, seed)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mariana.cli import main
from mariana.sweep import Trial, parse_space
from mariana.sweep.samplers import tpe_params

pytest.importorskip("optuna")

SPACE = parse_space(["lr=loguniform(1e-3, 1e-1)", "batch_size=int(16, 128)",
                     "model=choice([\"dense:32\"], [\"dense:64\", \"dense:10\"])"])


def _history(n: int) -> list[Trial]:
    """Ended trials whose value grows with log(lr): TPE should learn that large lr is good."""
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        lr = float(10 ** rng.uniform(-3, -1))
        params = {"lr": lr, "batch_size": int(rng.integers(16, 129)), "model": ["dense:32"]}
        status = "stopped" if i % 3 == 2 else "completed"
        t = Trial(i, params, {}, status=status, reports=1 if status == "stopped" else 3, rungs={1: 0.5},
                  last=float(np.log10(lr) + 3))
        out.append(t)
    return out


def test_tpe_draws_are_deterministic_typed_and_learn():
    history = _history(20)
    a = tpe_params(SPACE, history, 20, seed=0, mode="max")
    assert a == tpe_params(SPACE, history, 20, seed=0, mode="max")
    assert a != tpe_params(SPACE, history, 21, seed=0, mode="max")
    assert isinstance(a["batch_size"], int) and a["model"] in (["dense:32"], ["dense:64", "dense:10"])
    draws = [tpe_params(SPACE, history, i, seed=1, mode="max")["lr"] for i in range(20, 30)]
    assert np.median(np.log10(draws)) > -1.8  # toward the good end (uniform in log space: -2)
    worse = [tpe_params(SPACE, history, i, seed=1, mode="min")["lr"] for i in range(20, 30)]
    assert np.median(np.log10(worse)) < np.median(np.log10(draws))


@pytest.mark.slow
def test_tpe_sweep_with_parallel_trials_is_reproducible(tmp_path, capsys):
    args = ["dnn-dp", "--param", "lr=loguniform(1e-3,1e-1)", "--param", "batch_size=choice(64,128)", "--set", "epochs=1",
            "--set", "model=['dense:32:relu','dense:10']", "--trials", "5", "--search", "tpe", "--parallel", "2", "--json"]
    assert main(["sweep", *args, "--sweep-dir", str(tmp_path / "a")]) == 0
    a = json.loads(capsys.readouterr().out)
    assert main(["sweep", *args, "--sweep-dir", str(tmp_path / "b")]) == 0
    b = json.loads(capsys.readouterr().out)
    assert [(t["index"], t["params"], t["last"]) for t in a["trials"]] == [(t["index"], t["params"], t["last"])
                                                                            for t in b["trials"]]
