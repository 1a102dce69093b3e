"""Model parameters in a run directory: ``RUN/params/NAME.npy`` per tensor plus ``index.json``.

``index.json`` lists the names in layer order with shape, dtype, size and sha256, and is written
last, so a reader never sees a half-written model.
"""

from __future__ import annotations

import hashlib
import io
from typing import Any

import numpy as np

from ..errors import StorageError
from .rundir import RunDir

__all__ = ["save_params", "load_params"]


def save_params(run_dir: RunDir, named: list[tuple[str, np.ndarray]], prefix: str = "params", **extra: Any) -> None:
    """Write each array as ``PREFIX/NAME.npy``, then the index."""
    index = []
    for name, arr in named:
        buf = io.BytesIO()
        np.save(buf, np.require(arr, requirements='C'), allow_pickle=False)  # keeps 0-d arrays 0-d
        data = buf.getvalue()
        run_dir.write_bytes(f"{prefix}/{name}.npy", data)
        index.append({"name": name, "shape": list(arr.shape), "dtype": str(arr.dtype), "bytes": len(data),
                      "sha256": hashlib.sha256(data).hexdigest()})
    run_dir.write_json(f"{prefix}/index.json", {"tensors": index, **extra})


def load_params(run_dir: RunDir, prefix: str = "params") -> list[tuple[str, np.ndarray]]:
    """The arrays of ``PREFIX/`` in layer order, checked against the index's checksums."""
    if not run_dir.exists(f"{prefix}/index.json"):
        raise StorageError(f"{run_dir.url}: no {prefix}/index.json (has this run finished, or written parameters?)")
    out = []
    for entry in run_dir.read_json(f"{prefix}/index.json")["tensors"]:
        data = run_dir.read_bytes(f"{prefix}/{entry['name']}.npy")
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise StorageError(f"{run_dir.url}/{prefix}/{entry['name']}.npy does not match its checksum")
        out.append((entry["name"], np.load(io.BytesIO(data), allow_pickle=False)))
    return out
