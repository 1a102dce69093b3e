"""Helpers the benchmarks share: the BLAS environment variants, BLAS info, child processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

#: Set on some machines for older OpenBLAS builds; they slow a current numpy's BLAS (~1.8x here).
BLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
#: Thread-pool variables of the BLAS/OpenMP libraries numpy may use.
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")


def variant_envs(mode: str, base: dict[str, str] | None = None, label: str = "env") -> list[tuple[str, dict[str, str]]]:
    """``[(name, environment)]`` to measure in: ``base`` as is (``label``), and/or with ``BLAS_VARS``
    removed (``unset``); ``auto`` measures both only where the variables are set."""
    base = dict(os.environ) if base is None else base
    unset = {k: v for k, v in base.items() if k not in BLAS_VARS}
    if mode == "env" or (mode == "auto" and not any(v in base for v in BLAS_VARS)):
        return [(label, base)]
    if mode == "unset":
        return [("unset", unset)]
    return [(label, base), ("unset", unset)]


def blas_info(keys: tuple[str, ...] = ("internal_api", "architecture", "num_threads", "version")) -> list[dict[str, Any]]:
    """What threadpoolctl says of the BLAS numpy loaded in this process."""
    import numpy  # noqa: F401  (load numpy's BLAS so that threadpoolctl sees it)

    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return [{"internal_api": "threadpoolctl not installed"}]
    return [{k: i.get(k) for k in keys} for i in threadpool_info()]


def run_child(bench: str, spec: dict[str, Any], env: dict[str, str], timeout: float = 1800) -> dict[str, Any]:
    """Run ``bench --child SPEC`` in ``env``; its last stdout line is JSON (plus ``child_s``)."""
    t = time.perf_counter()
    p = subprocess.run([sys.executable, bench, "--child", json.dumps(spec)], env=env, stdout=subprocess.PIPE,
                       timeout=timeout)
    if p.returncode:
        raise SystemExit(f"child {spec['role']} ({spec.get('tag')}) failed with exit code {p.returncode}")
    out = json.loads(p.stdout.decode().strip().splitlines()[-1])
    out["child_s"] = time.perf_counter() - t
    return out


def first_superstep(trace: str) -> dict[str, Any]:
    """The first superstep record of a run's trace file (a master's trace starts with its own events)."""
    with open(trace) as f:
        return next(r for r in map(json.loads, f) if "event" not in r)
