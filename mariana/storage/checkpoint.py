"""Checkpoints in a run directory: ``RUN/checkpoints/ss-NNNNNN/`` with one part per worker,
a master part, and ``manifest.json`` written last.

A part is a ``.part`` file (``partfile``): the state's plain data with its arrays as ``.npy``
records, streamed to storage while its sha256 is computed. The manifest records the size and
sha256 of every part; a checkpoint without a manifest, or with a part that does not match it,
does not exist. ``read``/``load`` verify while they read (one pass over the data), so nothing
from a damaged part is ever used. Only the newest ``keep`` committed checkpoints are kept, and
older ones are deleted only after a newer one is committed.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import StorageError
from . import partfile
from .partfile import pack, unpack
from .retry import cause, retrying
from .rundir import RunDir

log = logging.getLogger(__name__)

__all__ = ["pack", "unpack", "Checkpoints", "CheckpointInfo"]


@dataclass
class CheckpointInfo:
    """One checkpoint folder as found on storage."""

    superstep: int
    path: str
    valid: bool
    why: str = ""
    time: str = ""
    size: int = 0
    #: the parts, read and verified, when ``newest_valid(load=True)`` found it
    loaded: dict[str, Any] | None = field(default=None, repr=False, compare=False)


class Checkpoints:
    """Write, verify, list and prune the checkpoints of one run directory.

    ``root="params"`` is the same store for the parameter snapshots (``RUN/params/ss-NNNNNN/``,
    one part per worker holding its vertices' ``params_snapshot()``, and a manifest): they are
    written with each checkpoint, committed right after it and pruned with the same ``keep``.
    """

    def __init__(self, run_dir: RunDir, keep: int = 3, root: str = "checkpoints") -> None:
        self.run_dir = run_dir
        self.keep = max(1, keep)
        self.root = root
        self._kept: list[int] | None = None  # committed supersteps kept by the last prune (newest first)
        self._params: Checkpoints | None = None

    def folder(self, superstep: int) -> str:
        return f"{self.root}/ss-{superstep:06d}"

    @property
    def params(self) -> "Checkpoints":
        """The parameter snapshots that go with these checkpoints."""
        if self._params is None:
            self._params = Checkpoints(self.run_dir, self.keep, "params")
        return self._params

    def write_part(self, superstep: int, name: str, state: Any) -> dict[str, Any]:
        """Stream one part to storage; returns its manifest entry."""
        file = f"{name}.part"
        rel = f"{self.folder(superstep)}/{file}"

        def write() -> tuple[int, str]:
            with self.run_dir.open_write(rel, sync_dir=False) as f:  # commit syncs it
                digest = partfile.stream_part(f, state)
            return digest()  # the last chunks were hashed while the file was fsynced
        # the state is in memory: a failed attempt is written again whole
        size, sha = retrying(f"writing {self.run_dir.url}/{rel}", write, offload=self.run_dir.remote)
        return {"name": name, "file": file, "bytes": size, "sha256": sha, "store": self.root}

    def discard(self, superstep: int) -> None:
        """Remove what a failed (never committed) checkpoint of ``superstep`` left behind, in this
        store and in its parameter snapshots: the space is free for the next one. Best effort."""
        self.run_dir.fence()  # a run that lost its lease removes nothing: the folder may be the new holder's
        for store in (self, self.params):
            path = store.run_dir.path(store.folder(superstep))
            if store.exists_committed(superstep):
                continue  # committed after all (never remove a checkpoint that exists)
            try:
                retrying(f"removing {path}", lambda: store.run_dir.fs.rm(path, recursive=True),
                         offload=self.run_dir.remote)
            except FileNotFoundError:
                pass
            except Exception as exc:  # noqa: BLE001 - best effort: a later prune retries
                log.warning("could not remove the failed checkpoint %s: %s", path, cause(exc))

    def exists_committed(self, superstep: int) -> bool:
        """Whether the checkpoint of ``superstep`` has a manifest (committed)."""
        try:
            return self.run_dir.exists(f"{self.folder(superstep)}/manifest.json")
        except StorageError:
            return False

    def commit(self, superstep: int, parts: list[dict[str, Any]], **meta: Any) -> None:
        """Write the manifest (the commit point), then prune older checkpoints."""
        manifest = {"superstep": superstep, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "parts": sorted(parts, key=lambda p: p["name"]), **meta}
        self.run_dir.sync_dir(self.folder(superstep))  # the parts' names are durable before the manifest's
        self.run_dir.write_json(f"{self.folder(superstep)}/manifest.json", manifest)
        self.prune(committed=superstep)

    def supersteps(self) -> list[int]:
        """Supersteps of every checkpoint folder present, newest first (valid or not)."""
        return sorted(self._folders(), reverse=True)

    def _folders(self) -> dict[int, list[str]]:
        """``{superstep: file names}`` of every non-empty ``ss-`` folder, from one recursive listing."""
        top = self.run_dir.path(self.root).rstrip("/")

        def find() -> Any:
            self.run_dir.fs.invalidate_cache(top)  # other processes write here
            return self.run_dir.fs.find(top, maxdepth=2)
        try:
            found = retrying(f"listing {self.run_dir.url}/{self.root}", find, offload=self.run_dir.remote)
        except FileNotFoundError:
            return {}
        except Exception as exc:  # noqa: BLE001 - any filesystem failure: one clear error
            raise StorageError(f"cannot list {self.run_dir.url}/{self.root}: {cause(exc)}") from exc
        out: dict[int, list[str]] = {}
        for path in found:
            rel = path.rstrip("/")[len(top) + 1:].split("/")
            if len(rel) == 2 and rel[0].startswith("ss-") and rel[0][3:].isdigit() and rel[1]:
                out.setdefault(int(rel[0][3:]), []).append(rel[1])  # an emptied folder lists nothing inside
        return out

    def inspect(self, superstep: int, verify: bool = True) -> CheckpointInfo:
        """Whether a checkpoint is complete and intact, and if not, why (hashes every part)."""
        folder = self.folder(superstep)
        info = CheckpointInfo(superstep, f"{self.run_dir.url}/{folder}", False)
        try:
            manifest = self.manifest(superstep)
        except (StorageError, ValueError) as exc:
            info.why = f"no valid manifest ({exc})"
            return info
        info.time = manifest.get("time", "")
        for part in manifest.get("parts", []):
            info.size += part["bytes"]
            if not verify:
                continue
            try:
                with self.run_dir.open_read(f"{folder}/{_file(part)}") as f:
                    n, digest = _digest(f)
            except StorageError as exc:
                info.why = f"part {part['name']} unreadable: {exc}"
                return info
            if n != part["bytes"]:
                info.why = f"part {part['name']} has {n} bytes, the manifest says {part['bytes']}"
                return info
            if digest != part["sha256"]:
                info.why = f"part {part['name']} does not match its sha256"
                return info
        info.valid = True
        return info

    def newest_valid(self, load: bool = False) -> CheckpointInfo | None:
        """The newest checkpoint that verifies; warns about every newer one that does not.

        With ``load``, its parts are read (and verified on the way) into ``info.loaded``: one
        pass over the data for a resume in this process, instead of a hashing pass and a read.
        """
        for ss in self.supersteps():
            if load:
                info = CheckpointInfo(ss, f"{self.run_dir.url}/{self.folder(ss)}", False)
                try:
                    manifest = self.manifest(ss)
                    info.loaded = self.load(ss, manifest)
                except (StorageError, ValueError, KeyError, TypeError) as exc:
                    info.why = str(exc)
                else:
                    info.valid, info.time = True, manifest.get("time", "")
                    info.size = sum(p["bytes"] for p in manifest["parts"])
            else:
                info = self.inspect(ss)
            if info.valid:
                return info
            log.warning("skipping %s at superstep %d: %s", "checkpoint" if self.root == "checkpoints" else
                        f"{self.root} snapshot", ss, info.why)
        return None

    def read(self, superstep: int, name: str, manifest: dict[str, Any] | None = None) -> Any:
        """One part, verified against the manifest while it is read."""
        manifest = manifest if manifest is not None else self.manifest(superstep)
        entry = next((p for p in manifest.get("parts", []) if p.get("name") == name), None)
        if entry is None:
            raise StorageError(f"{self.run_dir.url}/{self.folder(superstep)}: the manifest has no part {name!r}")
        rel = f"{self.folder(superstep)}/{_file(entry)}"
        where = f"{self.run_dir.url}/{rel}"
        if "file" not in entry:  # an .npz part of an earlier version
            data = self.run_dir.read_bytes(rel)
            if len(data) != entry["bytes"] or hashlib.sha256(data).hexdigest() != entry["sha256"]:
                raise StorageError(f"{where}: does not match its manifest entry")
            return unpack(data, where)
        with self.run_dir.open_read(rel) as f:
            return partfile.read_part(f, where, entry["bytes"], entry["sha256"])

    def load(self, superstep: int, manifest: dict[str, Any] | None = None) -> dict[str, Any]:
        """Every part of a checkpoint by name, each verified while it is read."""
        manifest = manifest if manifest is not None else self.manifest(superstep)
        return {p["name"]: self.read(superstep, p["name"], manifest) for p in manifest["parts"]}

    def manifest(self, superstep: int) -> dict[str, Any]:
        """The manifest of a checkpoint, checked for shape: every part entry has its name, file,
        size and sha256, and a checkpoint's manifest lists one part per worker."""
        where = f"{self.run_dir.url}/{self.folder(superstep)}/manifest.json"
        manifest = self.run_dir.read_json(f"{self.folder(superstep)}/manifest.json")
        if not isinstance(manifest, dict) or not isinstance(manifest.get("parts"), list):
            raise StorageError(f"{where}: no list of parts")
        for i, part in enumerate(manifest["parts"]):
            if not isinstance(part, dict):
                raise StorageError(f"{where}: part {i} is not an entry")
            for key, kind in (("name", str), ("bytes", int), ("sha256", str)):
                if not isinstance(part.get(key), kind) or isinstance(part.get(key), bool):
                    raise StorageError(f"{where}: part {part.get('name', i)!r} has no valid {key!r}")
            if "file" in part and not isinstance(part["file"], str):
                raise StorageError(f"{where}: part {part['name']!r} has no valid 'file'")
        if "workers" in manifest:
            n = manifest["workers"]
            if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                raise StorageError(f"{where}: 'workers' is {n!r}, not a count of workers")
            names = {p["name"] for p in manifest["parts"]}
            missing = sorted({f"worker-{i}" for i in range(n)} - names, key=lambda x: int(x[7:]))
            if missing:
                raise StorageError(f"{where}: no part for {', '.join(missing)} ({n} workers)")
        return manifest

    def prune(self, committed: int | None = None) -> None:
        """Delete all but the newest ``keep`` committed checkpoints (and stale incomplete ones).

        ``committed``: the superstep this process has just committed; after a first listing,
        the folders this process keeps are known and storage is not listed again. A run that
        lost its lease deletes nothing (``RunDir.fence``).
        """
        self.run_dir.fence()
        if committed is not None and self._kept is not None:
            kept, stale = sorted({*self._kept, committed}, reverse=True), []
        else:
            folders = self._folders()
            kept = sorted((ss for ss, names in folders.items() if "manifest.json" in names), reverse=True)
            if not kept:
                return
            stale = [ss for ss in folders if ss < kept[0] and ss not in kept]
        doomed, self._kept = kept[self.keep:] + stale, kept[:self.keep]
        for ss in sorted(doomed):
            path = self.run_dir.path(self.folder(ss))
            try:
                retrying(f"deleting {path}", lambda: self.run_dir.fs.rm(path, recursive=True),
                         offload=self.run_dir.remote)
            except Exception as exc:  # noqa: BLE001 - pruning is best effort, never fatal
                log.warning("could not delete old checkpoint %s: %s", self.folder(ss), cause(exc))


def _file(entry: dict[str, Any]) -> str:
    """A part's file name (``NAME.npz`` for checkpoints written before the part format)."""
    return entry.get("file") or f"{entry['name']}.npz"


def _digest(f: Any) -> tuple[int, str]:
    """(bytes, sha256) of a stream, read in 8 MiB chunks into one reused buffer."""
    sha, n = hashlib.sha256(), 0
    buf = bytearray(8 << 20)
    view = memoryview(buf)
    while got := f.readinto(view):
        sha.update(view[:got])
        n += got
    return n, sha.hexdigest()
