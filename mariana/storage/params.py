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
from .retry import retrying
from .rundir import RunDir

__all__ = ["save_params", "load_params"]


def save_params(run_dir: RunDir, named: list[tuple[str, np.ndarray]], prefix: str = "params", **extra: Any) -> None:
    """Write each array as ``PREFIX/NAME.npy``, then the index.

    Each file is the ``.npy`` header followed by the array's own memory, streamed and hashed as
    it goes (no in-memory copy of the file); the folder is synced once, before the index."""
    index = []
    for name, arr in named:
        arr = np.require(arr, requirements="C")
        head = io.BytesIO()
        np.lib.format.write_array_header_1_0(head, np.lib.format.header_data_from_array_1_0(arr))
        digest = hashlib.sha256(head.getvalue())
        body = memoryview(arr.reshape(-1)).cast("B") if arr.size else memoryview(b"")  # keeps 0-d arrays 0-d
        digest.update(body)

        def write(name: str = name, head: io.BytesIO = head, body: memoryview = body) -> None:
            with run_dir.open_write(f"{prefix}/{name}.npy", sync_dir=False) as f:  # all or nothing
                f.write(head.getvalue())
                f.write(body)
        retrying(f"writing {run_dir.url}/{prefix}/{name}.npy", write, offload=run_dir.remote)
        index.append({"name": name, "shape": list(arr.shape), "dtype": str(arr.dtype),
                      "bytes": len(head.getvalue()) + body.nbytes, "sha256": digest.hexdigest()})
    run_dir.sync_dir(prefix)  # the tensors' names are durable before the index names them
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
