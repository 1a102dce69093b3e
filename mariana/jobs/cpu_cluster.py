"""``mariana run cpu-cluster``: the CPU-cluster DNN framework (Mariana framework 3) as a vertex graph.

Per worker group: a GroupCoordinator vertex (mini-batches out, loss in, counters) and K worker
vertices, each holding slice k of every layer (model parallelism across processes or hosts:
the partitioned layers and transfer messages of cnn-hybrid, ``vertices/train/partition.py``). S
parameter-server vertices each own segment s of every worker slice's parameters, apply the
optimizer and persist their segments to the run directory at every checkpoint
(``RUN/params/``, through fsspec). Data parallelism across groups; master compute keeps the
data ledger that assigns each step's data shards to the groups (``vertices/train/coordinator.py``).

Placement: worker k of group g on process g*K+k, the coordinator beside worker 0 of its group,
server s on process s mod N.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..engine import Graph, RunResult
from ..errors import UsageError
from ..partitioner import GroupStrategy
from ..trace.analyze import counters
from ..vertices.train.coordinator import DataLedger, GroupCoordinator
from ..vertices.train.layers import shapes_only
from ..vertices.train.exchange import ParameterServer, ParameterServerVertex
from ..vertices.train.partition import PartitionVertex, join_params
from .dnn_data_parallel import DEFAULT_MODEL
from .registry import BuildContext, Job, Key
from .trainjob import (DATA_HELP, DATA_KEYS, OPTIMIZER_KEYS, add_training_aggregators, dataset_of, finish_training,
                       flat_of, named_defaults, optimizer_of, partition_maker, partition_sizes, schedule, schedule_keys,
                       test_of, train_source)


def worker_id(g: int, k: int) -> str:
    return f"w-g{g:02d}-k{k:02d}"


def plan(config: dict[str, Any], workers: int = 1) -> dict[str, Any]:
    """Everything the graph, the finisher and the exporter need, validated (one UsageError each).

    ``param_servers`` 0 means one per worker process (``workers``): the servers' update and
    traffic then spread over every process instead of queueing on the first.
    """
    ds = dataset_of(config)
    if config["param_servers"] < 0:
        raise UsageError(f"config key 'param_servers' must be >= 0 (0: one per worker process), "
                         f"got {config['param_servers']}")
    G, K, S = config["groups"], config["workers_per_group"], config["param_servers"] or workers
    for key, v in (("groups", G), ("workers_per_group", K)):
        if v < 1:
            raise UsageError(f"config key '{key}' must be >= 1, got {v}")
    spe, total = schedule(config, ds.train_size, G, "groups")
    opt = optimizer_of(config)

    make = partition_maker(config, ds, K, G, "worker slices")
    topology = ParameterServer(S)
    shards = [topology.shards(n, G) for n in partition_sizes(config, ds, K, "worker slices")]  # ps-000.. for every slice k
    return dict(ds=ds, G=G, K=K, S=S, spe=spe, total=total, opt=opt, make=make, topology=topology, shards=shards)


def build(config: dict[str, Any], bctx: BuildContext) -> Graph:
    pl = plan(config, bctx.workers)
    ds, G, K, S = pl["ds"], pl["G"], pl["K"], pl["S"]
    where: dict[str, tuple[int, int]] = {f"ps-{s:03d}": (0, s) for s in range(S)}
    for g in range(G):
        where[f"coord-g{g:02d}"] = (g, 0)
        where.update({worker_id(g, k): (g, k) for k in range(K)})
    graph = Graph(name="cpu-cluster", placement=GroupStrategy(where.__getitem__, K, G))
    members = [[worker_id(g, k) for g in range(G)] for k in range(K)]
    for g in range(G):
        peers = [worker_id(g, k) for k in range(K)]
        coord = f"coord-g{g:02d}"
        graph.add_lazy(coord, lambda g=g, coord=coord, peers=peers: GroupCoordinator(
            coord, g, G, peers, train_source(ds, config, True, pl["total"]), config["batch_size"], pl["total"],
            log_samples=config["log_samples"]))
        for k in range(K):
            graph.add_lazy(worker_id(g, k), lambda g=g, k=k, peers=peers, coord=coord: PartitionVertex(
                worker_id(g, k), g, G, pl["make"](k, g), peers, members[k], pl["shards"][k], pl["topology"],
                pl["opt"], pl["total"], pl["spe"], *test_of(ds, g, G), None, 0,
                report_to=coord, counters=True))
    for s in range(S):
        segments = [(k, pl["shards"][k][s].lo, pl["shards"][k][s].hi) for k in range(K)]
        graph.add_lazy(f"ps-{s:03d}", lambda s=s, segments=segments: ParameterServerVertex(
            f"ps-{s:03d}", segments, [flat_of(pl["make"](k).layers) for k in range(K)], pl["opt"], members, counters=True),
            size_hint=sum(hi - lo for _, lo, hi in segments))
    graph.master_compute = DataLedger(G, pl["spe"], pl["total"])
    add_training_aggregators(graph)
    graph.add_aggregator("_want", "min")  # internal ("_": not plotted)
    for name in ["counter/samples", *(f"counter/ps-{s:03d}/bytes" for s in range(S)),
                 *(f"counter/g{g:02d}/bytes" for g in range(G))]:
        graph.add_aggregator(name, "sum")
    if config["log_samples"]:
        graph.add_aggregator("samples_served", _merge_served)
    return graph


def _merge_served(a: Any, b: Any) -> dict[str, list[int]]:
    """``samples_served``: sample ids by epoch (``[epoch, ids]`` items or merged dicts)."""
    out: dict[str, list[int]] = {}
    for part in (a, b):
        items = part.items() if isinstance(part, dict) else [(str(part[0]), part[1])]
        for epoch, ids in items:
            out.setdefault(epoch, []).extend(ids)
    return out


def _assemble(servers: list[dict[str, Any]], config: dict[str, Any]) -> list[tuple[str, np.ndarray]]:
    """The unsplit model's named tensors from every server's segments."""
    if not servers:
        return []
    pl = plan(config)
    pieces: dict[int, list[tuple[int, np.ndarray]]] = {k: [] for k in range(pl["K"])}
    for st in servers:
        for (k, lo, _), value in zip(st["segments"], st["values"]):
            pieces[int(k)].append((int(lo), np.asarray(value)))
    flats = [np.concatenate([v for _, v in sorted(pieces[k], key=lambda item: item[0])]) for k in range(pl["K"])]
    with shapes_only():  # the slices' names and shapes; the values are the servers'
        return join_params([pl["make"](k) for k in range(pl["K"])], flats)


def final_params(result: RunResult, config: dict[str, Any]) -> list[tuple[str, np.ndarray]]:
    return _assemble([v for vid, v in sorted(result.values.items()) if vid.startswith("ps-")], config)


def export_params(states: dict[str, Any], config: dict[str, Any]) -> list[tuple[str, np.ndarray]]:
    """The model held by the servers' checkpointed states or snapshots (``mariana params export``)."""
    return _assemble([st for _, st in sorted(states.items()) if "segments" in st], config)


def finish(result: RunResult, config: dict[str, Any], run_dir: Any = None) -> tuple[str, dict[str, Any]]:
    return finish_training(result, config, run_dir, "cpu-cluster", final_params(result, config), "w-",
                           f"{config['groups']} group(s) x {config['workers_per_group']} worker(s), "
                           f"{sum(k.startswith('ps-') for k in result.values)} parameter server(s)",
                           {"counters": counters(result.metrics)})


JOB = Job(
    name="cpu-cluster",
    description="CPU-cluster DNN: coordinators + model-parallel workers + parameter servers (Mariana framework 3)",
    keys=(
        Key("data", "digits", "str", DATA_HELP),
        *DATA_KEYS,
        Key("model", DEFAULT_MODEL, "list", "layers as dnn-dp: dense:UNITS[:ACT], conv:OUT:K[:STRIDE[:PAD]][:ACT], "
                                            "maxpool:K, flatten, dropout:P, relu|tanh|sigmoid"),
        Key("groups", 1, "int", "worker groups (data parallelism)"),
        Key("workers_per_group", 2, "int", "worker vertices per group, each holding a slice of every layer"),
        Key("param_servers", 0, "int", "parameter-server vertices, each owning a segment of every slice "
                                       "(0: one per worker process)"),
        *OPTIMIZER_KEYS,
        *schedule_keys(8, "groups"),
        Key("log_samples", False, "bool", "write the sample ids each epoch trained to metrics.jsonl (an audit)"),
    ),
    build=build,
    finish=finish,
    progress_metric="loss",
    export=export_params,
    adjust=named_defaults("cpu-cluster"),
)

__all__ = ["JOB", "counters", "final_params", "export_params"]
