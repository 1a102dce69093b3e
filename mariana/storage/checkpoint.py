"""Checkpoints in a run directory: ``RUN/checkpoints/ss-NNNNNN/`` with one part per worker,
a master part, and ``manifest.json`` written last.

A part is an ``.npz`` file: the arrays of the state as ``.npy`` members plus ``__meta__``, the
msgpack of the state with each array replaced by a reference to its member. The manifest
records the size and sha256 of every part; a checkpoint without a manifest, or with a part
that does not match it, does not exist. Only the newest ``keep`` committed checkpoints are
kept, and older ones are deleted only after a newer one is committed.
"""

from __future__ import annotations

import hashlib
import io
import logging
import time
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np

from ..errors import StorageError
from .rundir import RunDir

log = logging.getLogger(__name__)

__all__ = ["pack", "unpack", "Checkpoints", "CheckpointInfo"]

_REF = "__npy__"


def pack(obj: Any) -> bytes:
    """Plain data with numpy arrays anywhere inside -> one ``.npz`` blob."""
    arrays: dict[str, np.ndarray] = {}

    def walk(v: Any) -> Any:
        if isinstance(v, np.ndarray):
            name = f"a{len(arrays)}"
            arrays[name] = v
            return {_REF: name}
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [walk(x) for x in v]
        return v

    meta = msgpack.packb(walk(obj), use_bin_type=True)
    buf = io.BytesIO()
    np.savez(buf, __meta__=np.frombuffer(meta, dtype=np.uint8), **arrays)
    return buf.getvalue()


def unpack(data: bytes) -> Any:
    """Inverse of ``pack`` (no pickle: object arrays are refused)."""
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    meta = msgpack.unpackb(arrays.pop("__meta__").tobytes(), raw=False, strict_map_key=False)

    def walk(v: Any) -> Any:
        if isinstance(v, dict):
            if len(v) == 1 and _REF in v:
                return arrays[v[_REF]]
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    return walk(meta)


@dataclass
class CheckpointInfo:
    """One checkpoint folder as found on storage."""

    superstep: int
    path: str
    valid: bool
    why: str = ""
    time: str = ""
    size: int = 0


class Checkpoints:
    """Write, verify, list and prune the checkpoints of one run directory."""

    def __init__(self, run_dir: RunDir, keep: int = 3) -> None:
        self.run_dir = run_dir
        self.keep = max(1, keep)

    @staticmethod
    def folder(superstep: int) -> str:
        return f"checkpoints/ss-{superstep:06d}"

    def write_part(self, superstep: int, name: str, state: Any) -> dict[str, Any]:
        """Pack and write one part; returns its manifest entry."""
        data = pack(state)
        self.run_dir.write_bytes(f"{self.folder(superstep)}/{name}.npz", data)
        return {"name": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}

    def commit(self, superstep: int, parts: list[dict[str, Any]], **meta: Any) -> None:
        """Write the manifest (the commit point), then prune older checkpoints."""
        manifest = {"superstep": superstep, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "parts": sorted(parts, key=lambda p: p["name"]), **meta}
        self.run_dir.write_json(f"{self.folder(superstep)}/manifest.json", manifest)
        self.prune()

    def supersteps(self) -> list[int]:
        """Supersteps of every checkpoint folder present, newest first (valid or not)."""
        self.run_dir.fs.invalidate_cache(self.run_dir.path("checkpoints"))  # other processes write here
        try:
            entries = self.run_dir.fs.ls(self.run_dir.path("checkpoints"), detail=False)
        except FileNotFoundError:
            return []
        out = []
        for e in entries:
            base = e.rstrip("/").rsplit("/", 1)[-1]
            if base.startswith("ss-") and base[3:].isdigit() and self._has_files(e):
                out.append(int(base[3:]))
        return sorted(out, reverse=True)

    def _has_files(self, folder: str) -> bool:
        """An emptied folder is not a checkpoint (object stores with real directories keep them)."""
        try:
            inside = self.run_dir.fs.find(folder, maxdepth=1)
        except FileNotFoundError:
            return False
        return any(f.rstrip("/") != folder.rstrip("/") for f in inside)  # SeaweedFS lists the emptied folder

    def inspect(self, superstep: int, verify: bool = True) -> CheckpointInfo:
        """Whether a checkpoint is complete and intact, and if not, why."""
        folder = self.folder(superstep)
        info = CheckpointInfo(superstep, f"{self.run_dir.url}/{folder}", False)
        try:
            manifest = self.run_dir.read_json(f"{folder}/manifest.json")
        except (StorageError, ValueError) as exc:
            info.why = f"no valid manifest ({exc})"
            return info
        info.time = manifest.get("time", "")
        for part in manifest.get("parts", []):
            info.size += part["bytes"]
            if not verify:
                continue
            try:
                data = self.run_dir.read_bytes(f"{folder}/{part['name']}.npz")
            except StorageError as exc:
                info.why = f"part {part['name']} unreadable: {exc}"
                return info
            if len(data) != part["bytes"]:
                info.why = f"part {part['name']} has {len(data)} bytes, the manifest says {part['bytes']}"
                return info
            if hashlib.sha256(data).hexdigest() != part["sha256"]:
                info.why = f"part {part['name']} does not match its sha256"
                return info
        info.valid = True
        return info

    def newest_valid(self) -> CheckpointInfo | None:
        """The newest checkpoint that verifies; warns about every newer one that does not."""
        for ss in self.supersteps():
            info = self.inspect(ss)
            if info.valid:
                return info
            log.warning("skipping checkpoint at superstep %d: %s", ss, info.why)
        return None

    def read(self, superstep: int, name: str) -> Any:
        """One part of a checkpoint that ``inspect`` found valid."""
        return unpack(self.run_dir.read_bytes(f"{self.folder(superstep)}/{name}.npz"))

    def manifest(self, superstep: int) -> dict[str, Any]:
        return self.run_dir.read_json(f"{self.folder(superstep)}/manifest.json")

    def prune(self) -> None:
        """Delete all but the newest ``keep`` committed checkpoints (and stale incomplete ones)."""
        committed = [ss for ss in self.supersteps() if self.run_dir.exists(f"{self.folder(ss)}/manifest.json")]
        if not committed:
            return
        newest = committed[0]
        doomed = committed[self.keep:] + [ss for ss in self.supersteps() if ss < newest and ss not in committed]
        for ss in doomed:
            try:
                self.run_dir.fs.rm(self.run_dir.path(self.folder(ss)), recursive=True)
            except Exception as exc:  # noqa: BLE001 - pruning is best effort, never fatal
                log.warning("could not delete old checkpoint %s: %s", self.folder(ss), exc)
