"""What the training-job tests share: run a job to its named parameters, compare parameters."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

from mariana.jobs import get_job, resolve_config
from mariana.jobs.launch import run_job


def trainer(name: str, final_params: Callable[..., Any]) -> Callable[..., tuple[dict[str, np.ndarray], Any]]:
    """``train(sets, workers=1, runtime="local", **run_job options) -> ({name: array}, result)``."""
    job = get_job(name)

    def train(sets: list[str], workers: int = 1, runtime: str = "local", **kw: Any) -> tuple[dict[str, np.ndarray], Any]:
        config = resolve_config(job, None, sets)
        result = run_job(job, config, workers=workers, runtime=runtime, **kw)
        return dict(final_params(result, config)), result

    return train


def max_diff(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    """The largest absolute difference over every tensor (the names must match)."""
    assert a.keys() == b.keys()
    return max(float(np.max(np.abs(a[k] - b[k]))) for k in a)


def same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    """Bit-identical tensors under the same names."""
    return a.keys() == b.keys() and all(a[k].tobytes() == b[k].tobytes() for k in a)


def require_gpu() -> None:
    """Skip the calling test unless cupy and a CUDA device are there."""
    cupy = pytest.importorskip("cupy")
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no CUDA device")
    except Exception as exc:  # noqa: BLE001 - no driver, no runtime: skip and say why
        pytest.skip(f"no usable CUDA device: {exc}")
