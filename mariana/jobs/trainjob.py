"""What the three training jobs (dnn-dp, cnn-hybrid, cpu-cluster) share: their optimizer and
schedule config keys, the optimizer and step schedule from a config, the aggregators, the flat
parameter vector of a list of layers, and the finisher that saves and reports the model."""

from __future__ import annotations

import copy
import json
import math
from typing import Any, Callable

import numpy as np

from ..engine import Graph, RunResult
from ..errors import UsageError
from ..storage import save_params
from ..vertices.train.data import Dataset, open_dataset
from ..vertices.train.stream import InMemorySource, StreamedDataset
from ..vertices.train.layers import Layer, shapes_only
from ..vertices.train.model import build_model
from ..vertices.train.partition import PartitionPlan, plan_partition
from ..vertices.train.optim import OPTIMIZERS, Optimizer
from .registry import Key

__all__ = ["OPTIMIZER_KEYS", "DATA_KEYS", "DATA_HELP", "schedule_keys", "dataset_of", "train_source", "test_of",
           "named_defaults", "devices", "optimizer_of", "schedule", "add_training_aggregators", "flat_of",
           "partition_maker", "partition_sizes", "finish_training", "model_info"]

OPTIMIZER_KEYS = (
    # the choices are the registry itself: an optimizer registered later is valid too
    Key("optimizer", "momentum", "str", "optimizer (mariana.vertices.train.optim registry)", choices=OPTIMIZERS),
    Key("lr", 0.05, "float", "learning rate"),
    Key("momentum", 0.9, "float", "momentum factor (optimizer=momentum)"),
    Key("weight_decay", 0.0, "float", "weight decay: L2 on the gradient, decoupled for adamw"),
    Key("eps", 1e-8, "float", "AdaGrad and Adam epsilon"),
    Key("adagrad_block", 16, "int", "block size of adagrad_approx's squared-gradient statistics"),
    Key("beta1", 0.9, "float", "Adam's first-moment decay (optimizer=adam|adamw)"),
    Key("beta2", 0.999, "float", "Adam's second-moment decay (optimizer=adam|adamw)"),
)


def schedule_keys(epochs: int, split_over: str) -> tuple[Key, ...]:
    """batch_size, epochs, steps, seed, test_fraction, classes."""
    return (
        Key("batch_size", 64, "int", f"global batch size (split equally over {split_over})", minimum=1),
        Key("epochs", epochs, "int", "passes over the training set (0: none, the initial model)", minimum=0),
        Key("steps", 0, "int", "stop after this many steps (0: epochs x steps per epoch)", minimum=0),
        Key("seed", 0, "int", "seed of the split, the initialisation and the batch order"),
        Key("test_fraction", 0.2, "float", "share of the data held out for evaluation"),
        Key("classes", 0, "int", "number of classes (0: max label + 1)"),
    )


DATA_HELP = ("'digits' (bundled 8x8 handwritten digits), a named data set (fashion-mnist, mnist, cifar10: "
             "found in --data-dir/MARIANA_DATA, /usr/share/datasets or the cache, or downloaded with download=true), "
             "a directory/glob/comma-separated list of .npz shards (streamed; `mariana data shard`), or one .npz "
             "with arrays x and y (loaded whole) at any URL")

DATA_KEYS = (
    Key("shuffle_buffer", 8192, "int", "sharded data: samples shuffled together (a window of the stream, rounded up "
                                       "to a multiple of batch_size); memory per reader is about two windows' share"),
    Key("verify_data", True, "bool", "sharded data: check every shard's sha256 against its index before training"),
    Key("download", False, "bool", "a named data set whose files are missing is downloaded into the cache "
                                   "(MARIANA_CACHE, default ~/.cache/mariana), its published checksum checked"),
)

#: A cache, and the only module-level state of the training jobs: the last data set opened in
#: this process, by its data keys (the build and the finisher of one run share it; a forked
#: worker inherits what the launcher loaded). One entry, so memory holds one data set at most.
_DATASET_CACHE: list[tuple[str, Any]] = []


def dataset_of(config: dict[str, Any], images: bool = False) -> Dataset | StreamedDataset:
    """The config's data set (``vertices.train.data.open_dataset`` of its data keys), kept for the next
    call with the same data keys in this process (the finisher names and shapes the exported
    model without reading the data again).

    ``images``: the digits as (1, 8, 8) images and uint8 samples left raw, for an input pipeline.
    Named and sharded data sets are opened (index and shards checked), never loaded: the readers
    stream them.
    """
    data_keys = ("data", "test_fraction", "seed", "classes", "shuffle_buffer", "verify_data", "download")
    from ..vertices.train.named import DATASETS, find_files

    # a named data set by where it is found now too (MARIANA_DATA, --data-dir, the cache may change)
    found = str(find_files(config["data"])) if config["data"] in DATASETS else None
    key = json.dumps([images, found, *(config.get(k) for k in data_keys)])
    if _DATASET_CACHE and _DATASET_CACHE[0][0] == key:
        return _DATASET_CACHE[0][1]
    ds = open_dataset(config["data"], test_fraction=config["test_fraction"], seed=config["seed"],
                      classes=config["classes"], images=images, shuffle_buffer=config.get("shuffle_buffer", 8192),
                      verify=config.get("verify_data", True), download=config.get("download", False))
    _DATASET_CACHE[:] = [(key, ds)]
    return ds


def train_source(ds: Dataset | StreamedDataset, config: dict[str, Any], decode: bool, total_steps: int = 0) -> Any:
    """Where a reader vertex draws its batches from (one per reader: it holds its own caches)."""
    if isinstance(ds, StreamedDataset):
        return ds.source(config["seed"], config["batch_size"], decode, total_steps)
    return InMemorySource(ds.x_train, ds.y_train, config["seed"], config["batch_size"])


def test_of(ds: Dataset | StreamedDataset, r: int, n: int, mean: float = 0.0, std: float = 1.0) -> tuple[Any, Any]:
    """Consumer r of n's share of the test set: in memory every n-th sample (as before), streamed
    a contiguous range read in chunks (``TestStream``, with y None)."""
    if isinstance(ds, StreamedDataset):
        stream = ds.test_share(r, n, mean, std)
        if stream is None:
            return np.zeros((0, *ds.input_shape), np.float32), np.zeros(0, np.int64)
        return stream, None
    return ds.x_test[r::n], ds.y_test[r::n]


def named_defaults(job: str) -> Callable[[dict[str, Any], set[str]], None]:
    """A job's ``adjust`` hook: on a named data set, its per-job defaults for the keys not set."""

    def adjust(config: dict[str, Any], explicit: set[str]) -> None:
        from ..vertices.train.named import DATASETS

        named = DATASETS.get(config.get("data", ""))
        if named is None:
            return
        for k, v in named.defaults.get(job, {}).items():
            if k not in explicit and k in config:
                config[k] = v

    return adjust


def devices(kind: str, count: int, of: Any = None) -> list[str]:
    """Device of each of ``count`` compute vertices: cpu, or with device=cuda GPU ``of(i)`` mod the
    number of GPUs (``of`` defaults to i: replica r on GPU r)."""
    if kind == "cpu":
        return ["cpu"] * count
    try:
        import cupy

        gpus = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - no cupy, no driver, no device: one clear message
        raise UsageError(f"device=cuda needs cupy and a CUDA device: {exc}") from None
    return [f"cuda:{(of(i) if of else i) % gpus}" for i in range(count)]


def optimizer_of(config: dict[str, Any]) -> Optimizer:
    """The config's optimizer, made by its registry entry from the whole config."""
    name = config["optimizer"]
    if name not in OPTIMIZERS:
        raise UsageError(f"unknown optimizer {name!r}; choose one of: {', '.join(OPTIMIZERS)}")
    return OPTIMIZERS[name].make(config)


def schedule(config: dict[str, Any], train_size: int, shares: int, what: str) -> tuple[int, int]:
    """(steps per epoch, total steps); the global batch must split into ``shares`` equal ``what``."""
    B = config["batch_size"]
    if B < 1:
        raise UsageError(f"config key 'batch_size' must be >= 1, got {B}")
    if B % shares:
        raise UsageError(f"batch_size {B} is not divisible by {what} {shares}: each needs an equal share")
    if B > train_size:
        raise UsageError(f"batch_size {B} is larger than the training set ({train_size} samples)")
    spe = train_size // B
    return spe, config["steps"] or config["epochs"] * spe


def add_training_aggregators(graph: Graph) -> None:
    """loss, test_loss, test_accuracy and epoch (max): every job's metrics keys. The vertices
    contribute sums and counts, ``(loss * n, n)`` and ``(correct, n)``: ``ratio`` pairs."""
    for name in ("loss", "test_loss", "test_accuracy"):
        graph.add_aggregator(name, "ratio")
    graph.add_aggregator("epoch", "max")


def flat_of(layers: list[Layer]) -> np.ndarray:
    """The layers' parameters as one float32 vector, in order (a shard's initial values)."""
    return np.concatenate([a.ravel() for layer in layers for a in layer.params.values()]).astype(np.float32)


def partition_maker(config: dict[str, Any], ds: Any, parts: int, groups: int,
                    what: str) -> Callable[..., PartitionPlan]:
    """``make(p, g=0)``: partition p (of ``parts``) of group g of the config's model.

    The unsplit model is built once per process (its He initialisation is the slow part of
    start-up) and copied for every partition, which then keeps only its slices.
    """
    base: list[Any] = []

    def make(p: int, g: int = 0) -> PartitionPlan:
        if not base:
            base.append(build_model(config["model"], ds.input_shape, ds.classes, config["seed"]))
        try:
            model = copy.deepcopy(base[0], {id(np): np})  # the array module is shared, not copied
            return plan_partition(model, p, parts, g, groups)
        except ValueError as exc:
            raise UsageError(f"cannot split the model into {parts} {what}: {exc}") from None

    return make


def partition_sizes(config: dict[str, Any], ds: Any, parts: int, what: str) -> list[int]:
    """Parameters of each of ``parts`` partitions, from the model's shapes alone (no weights are
    drawn: a master sizes the shards, the workers build the model); checks the model splits."""
    with shapes_only():
        sizes = partition_maker(config, ds, parts, 1, what)
        return [sizes(p).num_params for p in range(parts)]


def model_info(config: dict[str, Any], input_shape: tuple[int, ...], classes: int) -> dict[str, Any]:
    """What ``load_model`` needs besides the arrays, as the training jobs record it in
    ``RUN/params/index.json``: the model spec, the input shape and the number of classes."""
    return {"spec": list(config["model"]), "input_shape": [int(d) for d in input_shape], "classes": int(classes),
            "seed": int(config.get("seed", 0))}


def _number(value: Any) -> float:
    """A metric as a float (metrics lines hold non-finite values as the strings "nan", "inf")."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def finish_training(result: RunResult, config: dict[str, Any], run_dir: Any, job: str,
                    params: list[tuple[str, np.ndarray]], step_prefix: str, layout: str,
                    extra: dict[str, Any] | None = None, images: bool = False) -> tuple[str, dict[str, Any]]:
    """Save the model to ``RUN/params/`` (with its spec and shapes, for ``mariana.load_model``) and
    say how training went (text and the --json summary).

    ``step_prefix``: the id prefix of the vertices whose results carry ``step``; ``layout``: how
    the job ran (replicas, groups x partitions, ...); ``extra``: more summary keys (counters);
    ``images``: the job reads the data as images (``dataset_of``)."""
    if run_dir is not None:
        ds = dataset_of(config, images=images)
        save_params(run_dir, params, job=job, supersteps=result.supersteps,
                    model=model_info(config, ds.input_shape, ds.classes))
    evals = [m for m in result.metrics if "test_accuracy" in m]
    last = evals[-1] if evals else {}
    steps = max((v.get("step", 0) for k, v in result.values.items() if k.startswith(step_prefix)), default=0)
    acc, loss = last.get("test_accuracy"), last.get("test_loss")
    text = (f"{job}: {steps} steps on {layout}, optimizer={config['optimizer']}, "
            f"{result.supersteps} supersteps, {result.wall_s:.1f}s\n")
    for key, value in (extra or {}).items():
        if isinstance(value, dict):
            text += f"{key}: {', '.join(f'{k} {v}' for k, v in value.items())}\n"
    text += f"test accuracy {_number(acc):.4f}, test loss {_number(loss):.4f}" if acc is not None else "no evaluation ran"
    if acc is not None and not (math.isfinite(_number(loss)) and math.isfinite(_number(acc))):
        text += "\nthe loss is not finite: training diverged (a smaller lr may help)"
    return text, {"steps": steps, "test_accuracy": acc, "test_loss": loss, **(extra or {}),
                  "params": {name: list(p.shape) for name, p in params}}
