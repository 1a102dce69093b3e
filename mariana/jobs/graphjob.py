"""The graph framework's job: ``graph_job(algorithm)`` runs any ``vertices.graph.algorithm.Algorithm``.

This is the one place that tells the two modes apart. ``mode=block`` (default): one lazy block
vertex per worker loads its share of the graph in the first supersteps (``partitioner/graphload.py``),
runs the algorithm's block program over its fragment and writes its part of ``output``
(``storage/graphoutput.py``); finish commits the parts. ``mode=vertex``: every process reads the
graph whole and runs one vertex of the algorithm's vertex program per graph vertex; finish writes
the output whole. Either way the algorithm's summary of each part and its report make what is
printed and the ``--json`` fields.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..engine import Graph, RunResult, Vertex
from ..errors import StorageError, UsageError
from ..partitioner import ExplicitStrategy, RangeStrategy
from ..partitioner.fragment import LOAD_STEPS
from ..partitioner.graphload import LOAD_AGGREGATORS, GraphLoader, LoadSpec
from ..storage.compression import require
from ..storage.edgelist import EdgeList, example_graph_url
from ..storage.parts import check_output, commit_parts, discard_parts
from ..storage.splits import list_inputs
from ..vertices.graph.algorithm import Algorithm, Names, Param
from ..vertices.graph.kernels import import_traversals
from .graphalytics import GRAPHALYTICS_KEYS, load_graph, output_format, value_format, write_result
from .schema import BuildContext, Job, Key

__all__ = ["GRAPH_KEYS", "graph_job", "build_graph", "build_loaded_graph", "collect"]

GRAPH_KEYS = (
    Key("graph", None, "str", "edge list (path or fsspec URL; a file, directory or glob; .gz/.bz2/.xz/.zst read "
        "decompressed): 'src dst [weight]' per line; default: shipped example"),
    Key("output", None, "str", "write 'vertex<TAB>value' lines here, sorted by vertex id (OUT/: one part per "
        "worker; .gz/.bz2/.xz/.zst: compressed)"),
    Key("mode", "block", "str", "block: one numpy block vertex per worker (fast); vertex: one vertex per graph vertex",
        choices=("block", "vertex")),
    Key("top", 10, "int", "how many results to print"),
    Key("split_mb", 64.0, "float", "block mode: cut the graph input into splits of at most this many MB"),
) + GRAPHALYTICS_KEYS


def build_graph(name: str, edges: EdgeList, bctx: BuildContext,
                make_vertex: Callable[[str, list[tuple[str, Any]]], Vertex]) -> Graph:
    """Vertex mode: one engine vertex per graph vertex, placed on workers by ``bctx.placement``
    (block mode loads the graph in parts instead: ``build_loaded_graph``)."""
    g = Graph(name=name)
    for vid, adj in zip(edges.ids, edges.adjacency()):
        g.add_vertex(make_vertex(vid, adj))
    g.placement = bctx.placement
    return g


def collect(result: RunResult) -> list[tuple[str, Any]]:
    """(graph vertex id, value) pairs sorted by id, from vertex or block results."""
    rows: list[tuple[str, Any]] = []
    for vid, value in result.values.items():
        if isinstance(value, dict) and "ids" in value:
            vals = value["values"]
            rows.extend(zip(value["ids"], vals.tolist() if hasattr(vals, "tolist") else vals))
        else:
            rows.append((vid, value))
    rows.sort(key=lambda r: r[0])
    return rows


def check_range(config: dict[str, Any], key: str, lo: float | None = None, hi: float | None = None) -> None:
    v = config[key]
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        bounds = f">= {lo}" if hi is None else f"between {lo} and {hi}"
        raise UsageError(f"config key '{key}' must be {bounds}, got {v!r}")


def build_loaded_graph(name: str, config: dict[str, Any], bctx: BuildContext,
                       make_block: Callable[[str, GraphLoader], Vertex], *, undirected: bool = False,
                       weights: bool = False, nonnegative: bool = False,
                       summarize: Callable[[Any, Any], dict[str, Any]] = lambda ids, vals: {},
                       fmt: Callable[[Any], str] = str, traversals: bool = False) -> Graph:
    """One block vertex per worker that loads its own share of ``config['graph']`` in loading
    supersteps (partitioner/graphload.py) and writes its own part of ``config['output']``.

    Nothing is read here but the input's file listing (a missing input fails before any worker
    starts); ``make_block(block id, loader)`` makes the job's ``LoadedBlock``. ``traversals``:
    the blocks use scipy's graph traversals, imported now, so that workers forked from this
    process have them (two-worker scale-19 WCC: two workers importing them at once were ready
    0.15 s after joining, on 2 cores; one process imports them in ~0.09 s).
    """
    if traversals:
        import_traversals()
    if config["graph"] == "":
        raise UsageError("config key 'graph' is empty: give an edge-list path or URL, or leave it out for the example")
    check_range(config, "split_mb", 1e-6)
    placement = bctx.placement
    range_ = placement == "range" or isinstance(placement, RangeStrategy)
    spec = LoadSpec(graph=config["graph"] or example_graph_url(), vertices=config.get("vertices"),
                    undirected=undirected, weights=weights, nonnegative=nonnegative, split_mb=config["split_mb"],
                    placement="range" if range_ else "hash", output=config["output"] or None,
                    graphalytics=output_format(config) == "graphalytics")
    for url in [spec.output, *(f for f, _ in list_inputs(spec.graph))]:
        require(url)  # (a .zst name without its package: said now, not after the run)
    check_output(spec.output)  # (each process that writes a part checks it can, before superstep 0)
    if spec.vertices:
        try:
            list_inputs(spec.vertices)
        except UsageError as exc:
            raise UsageError(f"cannot read vertices file: {exc}") from None
    g = Graph(name=name, first_checkpoint=LOAD_STEPS)  # the state while loading is the input in flight
    blocks = [f"{name}-block-{b:04d}" for b in range(bctx.workers)]
    for b, bid in enumerate(blocks):
        g.add_lazy(bid, lambda b=b, bid=bid: make_block(bid, GraphLoader(spec, bctx.workers, blocks, b, summarize, fmt)))
    g.placement = ExplicitStrategy(lambda vid: int(vid.rsplit("-", 1)[1]), name="range" if range_ else "hash")
    for agg, spec_name in LOAD_AGGREGATORS.items():
        g.add_aggregator(agg, spec_name)
    return g


def _written(result: RunResult) -> list[dict[str, Any]]:
    """The results of the blocks that wrote their part of the output, in block order."""
    return [v for _, v in sorted(result.values.items()) if isinstance(v, dict) and "part" in v]


def _commit(blocks: list[dict[str, Any]], config: dict[str, Any]) -> None:
    errors = [b["error"] for b in blocks if "error" in b]
    try:
        if errors:
            raise StorageError(errors[0])
        commit_parts(config["output"], [b["part"] for b in blocks], order=blocks[0].get("order", "string"))
    except StorageError as exc:
        discard_parts(config["output"])
        raise UsageError(f"cannot write output: {exc}") from None


# --------------------------------------------------------------------------------------------
# An algorithm as a job
# --------------------------------------------------------------------------------------------
_JOBS: dict[int, Job] = {}


def graph_job(algorithm: Algorithm) -> Job:
    """The job that runs ``algorithm`` (one per algorithm object): the graph keys and its own."""
    job = _JOBS.get(id(algorithm))
    if job is None:
        def finish(result: RunResult, config: dict[str, Any], run_dir: Any = None) -> tuple[str, dict[str, Any]]:
            return _finish(algorithm, result, config)

        job = _JOBS[id(algorithm)] = Job(
            name=algorithm.name,
            description=algorithm.description,
            keys=GRAPH_KEYS + tuple(_key(p) for p in algorithm.params),
            build=lambda config, bctx: _build(algorithm, config, bctx),
            finish=finish,
            progress_metric=algorithm.progress_metric,
        )
    return job


def _key(param: Param) -> Key:
    return Key(param.name, param.default, param.type, param.help)


def _build(algorithm: Algorithm, config: dict[str, Any], bctx: BuildContext) -> Graph:
    for p in algorithm.params:
        if p.minimum is not None or p.maximum is not None:
            check_range(config, p.name, p.minimum, p.maximum)
    if algorithm.check is not None:
        algorithm.check(config)
    block = config["mode"] == "block"
    if block:
        g = build_loaded_graph(algorithm.name, config, bctx, lambda bid, io: algorithm.block(bid, io, config),
                               undirected=algorithm.symmetric(config), weights=algorithm.weights,
                               nonnegative=algorithm.nonnegative,
                               summarize=lambda ids, values: algorithm.summarize(config, ids, values),
                               fmt=value_format(config, algorithm.value), traversals=algorithm.traversals)
    else:
        edges = algorithm.edges(load_graph(config, nonnegative=algorithm.nonnegative), config)
        g = build_graph(algorithm.name, edges, bctx, algorithm.vertex(edges, config))
    if algorithm.master is not None:
        g.master_compute = algorithm.master(config, block)
    if algorithm.combiner is not None:
        g.add_combiner(algorithm.combiner)
    for name, kind in algorithm.aggregators:
        g.add_aggregator(name, kind)
    return g


def _finish(algorithm: Algorithm, result: RunResult, config: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Commit or write the output, then the algorithm's report from every part's summary. Nothing
    is committed when the algorithm refuses the result (``Algorithm.refuse``)."""
    blocks = _written(result)
    if blocks:  # block mode with output=: each block wrote its part and summarized it
        summaries = [b["summary"] for b in blocks if "summary" in b]
        try:
            if algorithm.refuse is not None:
                algorithm.refuse(summaries, config)
        except UsageError:
            discard_parts(config["output"])
            raise
        _commit(blocks, config)
        count = sum(int(b["rows"]) for b in blocks)
    else:  # the values returned whole (vertex mode, or no output=): one summary of them all
        rows = collect(result)
        if algorithm.collected is not None:
            rows = algorithm.collected(rows, config)
        values = np.asarray([v for _, v in rows])
        summaries = [algorithm.summarize(config, Names([vid for vid, _ in rows]), values)]
        if algorithm.refuse is not None:
            algorithm.refuse(summaries, config)
        write_result(config, rows, algorithm.value)
        count = len(rows)
    loading = LOAD_STEPS if config["mode"] == "block" else 0
    lines, summary = algorithm.report(count, summaries, config, result, loading)
    if config["output"]:
        lines.append(f"wrote {count} {algorithm.noun} to {config['output']}")
    return "\n".join(lines), summary
