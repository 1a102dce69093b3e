"""Hyperparameter sweeps: a search space over a job's config keys, random or grid search, early
stopping with successive halving (ASHA), one ordinary run directory per trial, resumable.

``Sweep.create(url, SweepSpec(...)).run()`` from Python; ``mariana sweep JOB --param ...`` from
the shell. See docs/design-notes.md ("Sweeps") for how a sweep maps onto the engine.
"""

from .driver import Sweep, SweepSpec, Trial, infer_mode, is_sweep, ranking
from .schedulers import SCHEDULERS, make_scheduler
from .space import Dist, Space, parse_param, parse_space

__all__ = ["Sweep", "SweepSpec", "Trial", "infer_mode", "is_sweep", "ranking", "SCHEDULERS", "make_scheduler",
           "Dist", "Space", "parse_param", "parse_space"]
