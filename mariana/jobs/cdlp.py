"""``mariana run cdlp``: community detection by label propagation (Graphalytics CDLP)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from ..engine import Graph, RunResult
from ..vertices.graph.cdlp import CDLPLoaded, CDLPVertex
from ..storage.edgelist import EdgeList
from .graphalytics import label_ranks, load_graph, write_result
from .graphjob import GRAPH_KEYS, build_graph, build_loaded_graph, check_range, collect, parted_results
from ..storage.ids import Ids, label_counts
from .registry import BuildContext, Job, Key


def _summarize(ids: Ids, labels: Ids | np.ndarray) -> dict[str, Any]:
    names, counts = label_counts(labels)
    return {"labels": [str(x) for x in names], "counts": counts}


def build(config: dict[str, Any], bctx: BuildContext) -> Graph:
    check_range(config, "iterations", 0)
    it = config["iterations"]
    if config["mode"] == "block":  # in- plus out-neighbours whatever `directed` says: see both_ways
        symmetric = not config["directed"]  # loaded both ways: the out-edges are the neighbours
        g = build_loaded_graph("cdlp", config, bctx, lambda bid, io: CDLPLoaded(bid, io, it, symmetric),
                               undirected=symmetric, summarize=_summarize)
    else:
        edges = both_ways(load_graph(config))
        rank = label_ranks(edges.ids)
        index = {vid: i for i, vid in enumerate(edges.ids)}
        g = build_graph("cdlp", edges, bctx, lambda vid, adj: CDLPVertex(vid, adj, int(rank[index[vid]]), it))
    g.add_aggregator("updated", "sum")
    g.add_aggregator("cdlp_lo", "min")  # block mode: the range of the integer labels
    g.add_aggregator("cdlp_hi", "max")
    return g


def both_ways(edges: EdgeList) -> EdgeList:
    """In- plus out-neighbours as a multiset: every edge in both directions, so a pair linked both
    ways counts twice and a self-loop counts the vertex's own label twice (in and out). An
    undirected graph (each edge listed once) gives each neighbour once per edge."""
    return EdgeList(edges.url, edges.ids, np.concatenate([edges.src, edges.dst]), np.concatenate([edges.dst, edges.src]),
                    np.concatenate([edges.weight, edges.weight]), np.concatenate([edges.lineno, edges.lineno]))


def finish(result: RunResult, config: dict[str, Any], run_dir: Any = None) -> tuple[str, dict[str, Any]]:
    parted = parted_results(result, config)
    sizes_counter: Counter[str] = Counter()
    if parted is not None:
        count = parted[0]
        for s in parted[1]:
            sizes_counter.update(dict(zip(s["labels"], s["counts"])))
    else:
        rows = collect(result)
        if config["mode"] == "vertex":  # labels are ranks in label order
            ids = [vid for vid, _ in rows]
            by_rank = [ids[i] for i in label_ranks(ids).argsort().tolist()]
            rows = [(vid, by_rank[lab]) for vid, lab in rows]
        else:  # the labels themselves (ints for integer ids)
            rows = [(vid, str(lab)) for vid, lab in rows]
        write_result(config, rows, "label")
        count = len(rows)
        sizes_counter.update(label for _, label in rows)
    sizes = sizes_counter.most_common()
    largest = sorted(sizes, key=lambda c: (-c[1], c[0]))[: config["top"]]
    lines = [f"cdlp: {len(sizes)} communit{'y' if len(sizes) == 1 else 'ies'} over {count} vertices "
             f"after {config['iterations']} iteration(s)"]
    lines += [f"{label:<24} {size} vertices" for label, size in largest]
    if config["output"]:
        lines.append(f"wrote {count} labels to {config['output']}")
    return "\n".join(lines), {"vertices": count, "communities": len(sizes), "largest": largest}


JOB = Job(
    name="cdlp",
    description="community detection by synchronous label propagation, ties to the smallest label (Graphalytics CDLP)",
    keys=GRAPH_KEYS + (Key("iterations", 10, "int", "label propagation rounds"),),
    build=build,
    finish=finish,
    progress_metric="updated",
)
