"""Where a trial's parameters come from: ``random`` (and grid) draws made when the sweep is
created, or Optuna's TPE sampler (``--search tpe``, the optional extra ``mariana-bsp[sweep]``),
which draws each trial's parameters from the results of the trials before it.

TPE is made deterministic the way the schedulers are: trial ``i`` is drawn from the trials
``j <= i - lag`` only (``lag``: the parallel trials the sweep was created with), once all of them
have ended, by a sampler seeded with (seed, i). So the draws do not depend on which trial ended
first, and a resumed sweep draws what an uninterrupted one would have.
"""

from __future__ import annotations

import json
import math
import warnings
from typing import Any, Sequence

from ..errors import UsageError
from .space import Dist

__all__ = ["SEARCHES", "tpe_params", "require_optuna"]

SEARCHES = ("random", "tpe")


def require_optuna() -> Any:
    try:
        import optuna
    except ImportError:
        raise UsageError("--search tpe needs Optuna: pip install 'mariana-bsp[sweep]'") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def _distribution(optuna: Any, d: Dist) -> Any:
    lo, hi = (d.args + (None, None))[:2]
    if d.kind == "uniform":
        return optuna.distributions.FloatDistribution(lo, hi)
    if d.kind == "loguniform":
        return optuna.distributions.FloatDistribution(lo, hi, log=True)
    if d.kind == "int":
        return optuna.distributions.IntDistribution(lo, hi)
    return optuna.distributions.CategoricalDistribution([json.dumps(v) for v in d.args])  # lists (models) too


def _encode(d: Dist, value: Any) -> Any:
    return json.dumps(value) if d.kind in ("choice", "grid") else value


def tpe_params(dists: Sequence[Dist], history: Sequence[Any], index: int, seed: int, mode: str) -> dict[str, Any]:
    """The parameters of trial ``index`` drawn by TPE from ``history`` (ended trials: completed
    ones with their last value, stopped ones as pruned with their rung values, failed ones as failed)."""
    optuna = require_optuna()
    from optuna.trial import TrialState, create_trial

    space = {d.key: _distribution(optuna, d) for d in dists}
    sampler = optuna.samplers.TPESampler(seed=(seed * 1_000_003 + index) % (2 ** 32))
    study = optuna.create_study(direction="maximize" if mode == "max" else "minimize", sampler=sampler)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_trial with intermediate values is "experimental" in some releases
        for t in history:
            params = {d.key: _encode(d, t.params[d.key]) for d in dists}
            ok = t.last is not None and math.isfinite(t.last)
            if t.status == "completed" and ok:
                study.add_trial(create_trial(params=params, distributions=space, value=t.last))
            elif t.status == "stopped" and ok:
                steps = {int(k): float(v) for k, v in t.rungs.items() if math.isfinite(v)}
                study.add_trial(create_trial(params=params, distributions=space, state=TrialState.PRUNED,
                                             intermediate_values=steps or {t.reports: t.last}))
            else:
                study.add_trial(create_trial(params=params, distributions=space, state=TrialState.FAIL))
        trial = study.ask(space)
    out = {}
    for d in dists:
        v = trial.params[d.key]
        out[d.key] = json.loads(v) if d.kind in ("choice", "grid") else (int(v) if d.kind == "int" else float(v))
    return out
