"""A trained model out of a run: its parameters as named arrays (``mariana params export``) and a
``Model`` ready for ``predict`` (``mariana.load_model``).

The final parameters are ``RUN/params/`` (written when the job finishes). While a job runs, or
for an earlier superstep, they come from a parameter snapshot or checkpoint through the job's
``export`` hook (``Job(export=...)``); a job without the hook exports every array its vertices
hold, named by their path in the vertex state (``VERTEX/attribute/key``).
"""

from __future__ import annotations

import io
import logging
from typing import Any

import numpy as np

from ..errors import StorageError, UsageError
from ..storage import RunDir, load_params, read_bytes
from .registry import get_job, resolve_config
from .trainjob import dataset_of, model_info

log = logging.getLogger(__name__)

__all__ = ["run_params", "load_model", "model_info"]


def run_params(run: str | RunDir, checkpoint: int | None = None) -> tuple[list[tuple[str, np.ndarray]], str]:
    """``(named arrays, where they came from)``: the final parameters of ``run``, or those of the
    parameter snapshot or checkpoint at ``checkpoint`` (default: the newest valid one)."""
    run_dir = run if isinstance(run, RunDir) else RunDir(run, create=False)
    if checkpoint is None and run_dir.exists("params/index.json"):
        return load_params(run_dir), "final parameters"
    return _from_checkpoint(run_dir, checkpoint)


def _from_checkpoint(run_dir: RunDir, superstep: int | None) -> tuple[list[tuple[str, np.ndarray]], str]:
    from ..storage.checkpoint import Checkpoints

    prev = _job_json(run_dir)
    job = get_job(prev["job"])
    ck = Checkpoints(run_dir)
    parts, source = None, ""
    for store, what in ((ck.params, "parameter snapshot"), (ck, "checkpoint")):
        if superstep is None:
            info = store.newest_valid(load=True)
            if info is not None:
                parts, source = info.loaded or {}, f"{what} at superstep {info.superstep}"
        elif superstep in store.supersteps():
            try:
                parts, source = store.load(superstep), f"{what} at superstep {superstep}"
            except StorageError as exc:
                log.warning("%s", exc)
        if parts is not None:
            break
    if parts is None:
        which = f"at superstep {superstep}" if superstep is not None else "at all"
        raise UsageError(f"{run_dir.url}: no valid parameter snapshot or checkpoint {which} to export from "
                         "(`mariana checkpoint list` shows what there is)")
    states: dict[str, Any] = {}
    for name, part in sorted(parts.items()):
        if name.startswith("worker-"):
            states.update(part.get("vertices", part))  # a checkpoint part, or a snapshot {vertex: params}
    if job.export is not None:
        return job.export(states, resolve_config(job, prev["config"])), source
    named = [item for vid, state in sorted(states.items()) for item in _arrays(vid, state)]
    if not named:
        raise UsageError(f"job {job.name} has no export hook (Job(export=...)) and its vertices hold no arrays "
                         f"at the {source}")
    log.warning("job %s has no export hook (Job(export=...)): exporting every array of its vertices by path",
                job.name)
    return named, source


def _arrays(path: str, value: Any) -> list[tuple[str, np.ndarray]]:
    """Every array inside a vertex state, named by its path (``VERTEX/attr/key``)."""
    if isinstance(value, np.ndarray):
        return [(path, value)]
    if isinstance(value, dict):
        return [item for k, v in sorted(value.items(), key=lambda kv: str(kv[0])) for item in _arrays(f"{path}/{k}", v)]
    if isinstance(value, (list, tuple)):
        return [item for i, v in enumerate(value) for item in _arrays(f"{path}/{i}", v)]
    return []


def _job_json(run_dir: RunDir) -> dict[str, Any]:
    try:
        return run_dir.read_json("job.json")
    except (StorageError, ValueError) as exc:
        raise UsageError(f"{run_dir.url}: not a run directory ({exc})") from None


def load_model(source: str | RunDir, *, model: list[str] | None = None, input_shape: tuple[int, ...] | None = None,
               classes: int | None = None, checkpoint: int | None = None) -> Any:
    """A ``mariana.vertices.train.model.Model`` holding trained parameters, ready for ``predict(x)``.

    ``source``: a run directory of dnn-dp, cnn-hybrid or cpu-cluster (any fsspec URL; its model
    spec and shapes come from the run; ``checkpoint=S`` takes the parameters of superstep S), or
    a ``.npz`` written by ``mariana params export`` (then give ``model`` (the spec) and
    ``input_shape``; ``classes`` defaults to the size of the last bias). ``predict`` takes inputs
    as the job's data set gives them (digits: pixel values scaled to [0, 1]) and returns logits.
    """
    from ..vertices.train.model import build_model

    text = source.url if isinstance(source, RunDir) else str(source)
    if text.endswith(".npz"):
        try:
            with np.load(io.BytesIO(read_bytes(text)), allow_pickle=False) as npz:
                named = [(k, npz[k]) for k in npz.files]
        except StorageError as exc:
            raise UsageError(f"cannot read {text}: {exc}") from None
        if model is None or input_shape is None:
            raise UsageError(f"{text} holds only the arrays: pass model=[...] (the spec) and input_shape=(...), "
                             f"or load the run directory instead")
        if classes is None:
            classes = int(np.asarray(named[-1][1]).shape[-1])
        seed = 0
    else:
        run_dir = source if isinstance(source, RunDir) else RunDir(text, create=False)
        prev = _job_json(run_dir)
        named, _ = run_params(run_dir, checkpoint)
        info = run_dir.read_json("params/index.json").get("model") if run_dir.exists("params/index.json") else None
        config = prev["config"]
        if info is None:  # a run from before the index recorded the model: the job's data set says
            if "model" not in config:
                raise UsageError(f"{text}: job {prev['job']} has no model spec; use load_model(params.npz, model=...)")
            ds = dataset_of(resolve_config(get_job(prev["job"]), config), images=prev["job"] == "cnn-hybrid")
            info = model_info(config, ds.input_shape, ds.classes)
        model = model if model is not None else info["spec"]
        input_shape = input_shape or tuple(info["input_shape"])
        classes = classes or info["classes"]
        seed = info.get("seed", 0)
    built = build_model(list(model), tuple(input_shape), int(classes), seed)
    arrays = dict(named)
    for name, param in built.named_params():
        if name not in arrays:
            raise UsageError(f"{text}: no array {name!r} for the model {list(model)} (found: {', '.join(arrays)})")
        value = np.asarray(arrays[name])
        if value.shape != param.shape:
            raise UsageError(f"{text}: array {name!r} has shape {value.shape}, the model needs {param.shape}")
        param[...] = value
    return built
