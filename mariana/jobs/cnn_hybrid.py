"""``mariana run cnn-hybrid``: CNN model + data parallelism (Mariana framework 2) as a vertex graph.

G worker groups x P partition vertices. Inside a group, partition p holds output slice p of
every conv/dense layer and activations cross partitions as transfer messages
(``vertices/train/partition.py``); between groups only partition p talks to partition p, through
parameter shards of partition p's flat vector (``vertices/train/exchange.py``: linear, tree or ps,
every optimizer). Each group has an input pipeline of two vertices: a reader (storage -> raw
samples) and a preprocess vertex (decode, normalise, augment) running ``pipeline`` batches ahead.

Placement: partition p of group g on worker g*P+p (device cuda:p with device=cuda); shard i of
partition p beside partition p of the group the topology names; the input pipeline of group g
on a spare worker when there are more workers than G*P, else beside partition 0 of its group.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..engine import Graph, RunResult
from ..errors import UsageError
from ..partitioner import GroupStrategy
from ..vertices.train.data import InputReader, Preprocess
from ..vertices.train.layers import shapes_only
from ..vertices.train.exchange import ParameterShardVertex, exchange_choices, make_topology, topology_help
from ..vertices.train.partition import PartitionVertex, join_params
from .registry import BuildContext, Job, Key
from .trainjob import (DATA_HELP, DATA_KEYS, OPTIMIZER_KEYS, add_training_aggregators, dataset_of, devices,
                       finish_training, flat_of, named_defaults, optimizer_of, partition_maker, partition_sizes, schedule,
                       schedule_keys, test_of, train_source)
from ..vertices.train.stream import StreamedDataset

DEFAULT_MODEL = ["conv:16:3:1:1:relu", "maxpool:2", "conv:32:3:1:1:relu", "maxpool:2", "dense:64:relu", "dense:10"]


def part_id(g: int, p: int) -> str:
    return f"part-g{g:02d}-p{p:02d}"


def plan(config: dict[str, Any], bctx: BuildContext | None = None) -> dict[str, Any]:
    """Everything the graph, the finisher and the exporter need, validated (one UsageError each)."""
    ds = dataset_of(config, images=True)  # the digits as (1, 8, 8) images
    G, P, B = config["groups"], config["partitions"], config["batch_size"]
    for key, v in (("groups", G), ("partitions", P)):
        if v < 1:
            raise UsageError(f"config key '{key}' must be >= 1, got {v}")
    if B < 1:
        raise UsageError(f"config key 'batch_size' must be >= 1, got {B}")
    if G * P > B:
        raise UsageError(f"groups*partitions = {G * P} is larger than batch_size {B}")
    if config["pipeline"] < 0:
        raise UsageError(f"config key 'pipeline' must be >= 0, got {config['pipeline']}")
    spe, total = schedule(config, ds.train_size, G, "groups")
    opt = optimizer_of(config)
    topology = make_topology(config, G, partitioned=True)
    make = partition_maker(config, ds, P, G, "partitions")
    sizes = partition_sizes(config, ds, P, "partitions")
    shards = [topology.shards(n, G, f"-p{p:02d}") for p, n in enumerate(sizes)]
    return dict(ds=ds, G=G, P=P, spe=spe, total=total, opt=opt, topology=topology, make=make, shards=shards,
                devices=devices(config["device"], G * P, of=lambda i: i % P))


def build(config: dict[str, Any], bctx: BuildContext) -> Graph:
    pl = plan(config, bctx)
    ds, G, P = pl["ds"], pl["G"], pl["P"]
    where: dict[str, tuple[int, int]] = {}
    helpers: dict[str, int] = {}
    for g in range(G):
        for p in range(P):
            where[part_id(g, p)] = (g, p)
        for kind in ("reader", "prep"):
            where[f"{kind}-g{g:02d}"] = (g, 0)
            helpers[f"{kind}-g{g:02d}"] = g
    for p, shards in enumerate(pl["shards"]):
        for s in shards:
            where[s.id] = (s.home, p)
    graph = Graph(name="cnn-hybrid", placement=GroupStrategy(where.__getitem__, P, G, helpers.get),
                  devices={part_id(g, p): pl["devices"][g * P + p] for g in range(G) for p in range(P)})
    seed = config["seed"]
    for g in range(G):
        peers = [part_id(g, p) for p in range(P)]
        reader, prep = f"reader-g{g:02d}", f"prep-g{g:02d}"
        graph.add_lazy(reader, lambda g=g, reader=reader, prep=prep: InputReader(
            reader, prep, train_source(ds, config, False, pl["total"]), config["batch_size"], G, g, pl["total"]))
        graph.add_lazy(prep, lambda g=g, prep=prep, peers=peers: Preprocess(
            prep, peers, ds.scale, config["mean"], config["std"], config["augment"], config["crop"], seed, config["batch_size"]))
        for p in range(P):
            members = [part_id(h, p) for h in range(G)]
            graph.add_lazy(part_id(g, p), lambda g=g, p=p, peers=peers, members=members, reader=reader: PartitionVertex(
                part_id(g, p), g, G, pl["make"](p, g), peers, members, pl["shards"][p], pl["topology"], pl["opt"],
                pl["total"], pl["spe"], *_test_share(ds, g, G, config), reader,
                config["pipeline"], pl["devices"][g * P + p]))
    for p, shards in enumerate(pl["shards"]):
        members = [part_id(h, p) for h in range(G)]
        for s in shards:
            graph.add_lazy(s.id, lambda s=s, p=p, members=members: ParameterShardVertex(
                s.id, s.lo, s.hi, flat_of(pl["make"](p).layers), pl["opt"], members), size_hint=s.hi - s.lo)
    add_training_aggregators(graph)
    return graph


def _test_share(ds: Any, g: int, G: int, config: dict[str, Any]) -> tuple[Any, Any]:
    """Group g's share of the test set, decoded as the preprocess vertex would (no augmentation)."""
    if isinstance(ds, StreamedDataset):
        return test_of(ds, g, G, config["mean"], config["std"])
    return _normalised(ds.x_test[g::G], config), ds.y_test[g::G]


def _normalised(x: np.ndarray, config: dict[str, Any]) -> np.ndarray:
    """The test set as the preprocess vertex would decode it (without augmentation)."""
    out = np.array(x, dtype=np.float32)
    if config["mean"] != 0.0:
        out -= np.float32(config["mean"])
    if config["std"] != 1.0:
        out /= np.float32(config["std"])
    return out


def _assemble(values: dict[str, tuple[int, np.ndarray]], config: dict[str, Any]) -> list[tuple[str, np.ndarray]]:
    """The unsplit model's named tensors from the shards' (lo, slice) of every partition."""
    pl = plan(config)
    flats = []
    for shards in pl["shards"]:
        slices = sorted(values[s.id] for s in shards if s.id in values)
        if not slices:
            return []
        flats.append(np.concatenate([np.asarray(v) for _, v in slices]))
    with shapes_only():  # the partitions' names and shapes; the values are the shards'
        return join_params([pl["make"](p) for p in range(pl["P"])], flats)


def final_params(result: RunResult, config: dict[str, Any]) -> list[tuple[str, np.ndarray]]:
    return _assemble({vid: (v["lo"], v["p"]) for vid, v in result.values.items() if isinstance(v, dict) and "lo" in v}, config)


def export_params(states: dict[str, Any], config: dict[str, Any]) -> list[tuple[str, np.ndarray]]:
    """The model held by the shards' checkpointed states (``mariana params export``)."""
    return _assemble({vid: (st["lo"], st["value"]) for vid, st in states.items() if "lo" in st and "value" in st},
                     config)


def finish(result: RunResult, config: dict[str, Any], run_dir: Any = None) -> tuple[str, dict[str, Any]]:
    return finish_training(result, config, run_dir, "cnn-hybrid", final_params(result, config), "part-",
                           f"{config['groups']} group(s) x {config['partitions']} partition(s), "
                           f"exchange={config['exchange']}", images=True)


JOB = Job(
    name="cnn-hybrid",
    description="CNN model + data parallelism: groups x partitions with transfer messages (Mariana framework 2)",
    keys=(
        Key("data", "digits", "str", DATA_HELP + " (the digits as 1x8x8 images; x NCHW float32 or uint8)"),
        *DATA_KEYS,
        Key("model", DEFAULT_MODEL, "list", "layers as dnn-dp: conv:OUT:K[:STRIDE[:PAD]][:ACT], maxpool:K[:STRIDE], "
                                            "dense:UNITS[:ACT], flatten, dropout:P, relu|tanh|sigmoid"),
        Key("groups", 1, "int", "worker groups (data parallelism)"),
        Key("partitions", 2, "int", "partitions per group (model parallelism: each holds 1/P of every layer's "
                                    "channels or units)"),
        Key("exchange", "linear", "str", "parameter exchange between groups: " + topology_help(partitioned=True),
            choices=exchange_choices(partitioned=True)),
        Key("ps_shards", 1, "int", "parameter-server vertices per partition for exchange=ps"),
        *OPTIMIZER_KEYS,
        *schedule_keys(20, "groups"),
        Key("augment", False, "bool", "random crop (zero padding of 'crop' pixels) and horizontal flip per sample"),
        Key("crop", 1, "int", "pixels of random shift per side when augment=true"),
        Key("mean", 0.0, "float", "subtracted from every decoded pixel"),
        Key("std", 1.0, "float", "every decoded pixel is divided by it"),
        Key("pipeline", 2, "int", "batches the input pipeline (reader, preprocess) runs ahead (0: on demand)"),
        Key("device", "cpu", "str", "where partitions compute: cpu, or cuda (partition p on GPU p; needs cupy)",
            choices=("cpu", "cuda")),
    ),
    build=build,
    finish=finish,
    progress_metric="loss",
    export=export_params,
    adjust=named_defaults("cnn-hybrid"),
)
