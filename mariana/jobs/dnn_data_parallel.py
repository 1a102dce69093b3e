"""``mariana run dnn-dp``: DNN data parallelism (Mariana framework 1) as a vertex graph.

N replica vertices each hold the whole model and train on their slice of every global batch;
parameter-shard vertices own slices of the flat parameter vector and apply the optimizer.
Replica ``r``, its reader and shard ``r`` are placed on worker ``r mod workers``.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import numpy as np

from ..engine import Graph, RunResult
from ..errors import UsageError
from ..partitioner import GroupStrategy
from ..vertices.train.layers import shapes_only
from ..vertices.train.model import build_model
from ..vertices.train.data import DataReader
from ..vertices.train.exchange import AUTO, ParameterShardVertex, auto_topology, exchange_choices, make_topology, topology_help
from ..vertices.train.training import ReplicaVertex
from .registry import BuildContext, Job, Key
from .trainjob import (DATA_HELP, DATA_KEYS, OPTIMIZER_KEYS, add_training_aggregators, dataset_of, devices,
                       finish_training, named_defaults, optimizer_of, schedule, schedule_keys, test_of, train_source)

DEFAULT_MODEL = ["dense:256:relu", "dense:256:relu", "dense:10"]


def _plan(config: dict[str, Any], bctx: BuildContext) -> dict[str, Any]:
    """Everything the graph and the finisher need, validated (one UsageError per mistake)."""
    ds = dataset_of(config)
    if config["replicas"] < 0:
        raise UsageError(f"config key 'replicas' must be >= 0 (0: one per worker), got {config['replicas']}")
    replicas = config["replicas"] or bctx.workers
    spe, total = schedule(config, ds.train_size, replicas, "replicas")
    with shapes_only():  # sizes for the shards; the weights are drawn where vertices are built
        num_params = build_model(config["model"], ds.input_shape, ds.classes, config["seed"]).num_params
    opt = optimizer_of(config)
    topology = make_topology(config, replicas)
    return dict(ds=ds, replicas=replicas, spe=spe, total=total, opt=opt, topology=topology,
                model=functools.cache(lambda: build_model(config["model"], ds.input_shape, ds.classes, config["seed"])),
                shards=topology.shards(num_params, replicas), devices=devices(config["device"], replicas))


def build(config: dict[str, Any], bctx: BuildContext) -> Graph:
    plan = _plan(config, bctx)
    ds, n = plan["ds"], plan["replicas"]
    replica_ids = [f"replica-{r:03d}" for r in range(n)]
    # replica r and its reader on group r; every shard beside the member the topology says
    home = {s.id: (s.home, 0) for s in plan["shards"]}
    group = {**home, **{f"{kind}-{r:03d}": (r, 0) for r in range(n) for kind in ("replica", "reader")}}
    g = Graph(name="dnn-dp", placement=GroupStrategy(group.__getitem__, parts=1),
              devices=dict(zip(replica_ids, plan["devices"])))
    model = plan["model"]  # the model: built once per process, on first use
    init = functools.cache(lambda: np.concatenate([p.ravel() for _, p in model().named_params()]).astype(np.float32))
    taken: list[bool] = []

    def own_model() -> Any:
        """The first replica of this process takes the built model, the others a copy of it
        (vertices are all built before the first superstep: it is still untrained)."""
        if taken:
            return copy.deepcopy(model(), {id(np): np})  # the array module is shared, not copied
        taken.append(True)
        return model()

    for r, rid in enumerate(replica_ids):
        reader = f"reader-{r:03d}"
        g.add_lazy(reader, lambda r=r, rid=rid, reader=reader: DataReader(
            reader, rid, train_source(ds, config, True, plan["total"]), config["batch_size"], n, r, plan["total"],
            ahead=2 if plan["topology"].replicated else 1))
        g.add_lazy(rid, lambda r=r, rid=rid, reader=reader: ReplicaVertex(
            rid, r, replica_ids, own_model, reader, plan["shards"],
            plan["topology"], plan["opt"], 1.0 / n, plan["total"], plan["spe"],
            *test_of(ds, r, n), plan["devices"][r]))
    for s in plan["shards"]:
        g.add_lazy(s.id, lambda s=s: ParameterShardVertex(s.id, s.lo, s.hi, init(), plan["opt"], replica_ids,
                                                                     plan["topology"].relay),
                   size_hint=s.hi - s.lo)
    add_training_aggregators(g)
    return g


def final_params(result: RunResult, config: dict[str, Any]) -> list[tuple[str, np.ndarray]]:
    """The trained model as named arrays (``0.W``, ``0.b``, ...) from the shards' results."""
    return _assemble({vid: (v["lo"], v["p"]) for vid, v in result.values.items()
                      if isinstance(v, dict) and "lo" in v}, config)


def export_params(states: dict[str, Any], config: dict[str, Any]) -> list[tuple[str, np.ndarray]]:
    """The model held by the shards' checkpointed states (``mariana params export --checkpoint``),
    or with ``exchange=allreduce`` (no shards) by replica 0's."""
    slices = {vid: (st["lo"], st["value"]) for vid, st in states.items() if "lo" in st and "value" in st}
    if not slices and "flat" in states.get("replica-000", {}):
        slices = {"replica-000": (0, states["replica-000"]["flat"])}
    return _assemble(slices, config)


def _assemble(slices_by_vertex: dict[str, tuple[int, np.ndarray]], config: dict[str, Any]) -> list[tuple[str, np.ndarray]]:
    slices = sorted(slices_by_vertex.values(), key=lambda lo_p: lo_p[0])
    flat = np.concatenate([np.asarray(p) for _, p in slices]) if slices else np.zeros(0, np.float32)
    out, offset = [], 0
    ds = dataset_of(config)
    with shapes_only():  # names and shapes only
        named = build_model(config["model"], ds.input_shape, ds.classes, config["seed"]).named_params()
    for name, p in named:
        out.append((name, flat[offset:offset + p.size].reshape(p.shape).copy()))
        offset += p.size
    return out


def _exchange_name(config: dict[str, Any], replicas: int) -> str:
    """``exchange=``, with what ``auto`` stood for."""
    name = config["exchange"]
    return f"auto ({auto_topology(replicas)})" if name == AUTO else name


def finish(result: RunResult, config: dict[str, Any], run_dir: Any = None) -> tuple[str, dict[str, Any]]:
    replicas = sum(k.startswith("replica-") for k in result.values)
    return finish_training(result, config, run_dir, "dnn-dp", final_params(result, config), "replica-",
                           f"{replicas} replica(s), exchange={_exchange_name(config, replicas)}")


JOB = Job(
    name="dnn-dp",
    description="DNN data parallelism: replicas + parameter shards, synchronous SGD (Mariana framework 1)",
    keys=(
        Key("data", "digits", "str", DATA_HELP),
        *DATA_KEYS,
        Key("model", DEFAULT_MODEL, "list", "layers: dense:UNITS[:ACT], conv:OUT:K[:STRIDE[:PAD]][:ACT], maxpool:K, "
                                            "flatten, dropout:P, relu|tanh|sigmoid; softmax cross-entropy is appended"),
        Key("replicas", 0, "int", "model replicas (0: one per worker)"),
        # every topology gives the same parameters, bit for bit; auto picks the fewest bytes per step
        Key("exchange", "auto", "str", "gradient exchange: " + topology_help(), choices=exchange_choices()),
        Key("ps_shards", 1, "int", "parameter-server vertices for exchange=ps (all on worker 0)"),
        *OPTIMIZER_KEYS,
        *schedule_keys(20, "replicas"),
        Key("device", "cpu", "str", "where replicas compute: cpu, or cuda (replica r on GPU r mod #GPUs; needs cupy)",
            choices=("cpu", "cuda")),
    ),
    build=build,
    finish=finish,
    progress_metric="loss",
    export=export_params,
    adjust=named_defaults("dnn-dp"),
)
