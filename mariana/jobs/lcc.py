"""``mariana run lcc``: local clustering coefficient of every vertex (Graphalytics LCC)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..engine import Graph, RunResult
from ..vertices.graph.lcc import LCCLoaded, LCCVertex
from .graphalytics import follow, load_graph, value_format, write_result
from .graphjob import GRAPH_KEYS, build_graph, build_loaded_graph, collect, parted_results
from ..storage.ids import Ids
from .registry import BuildContext, Job


def _summarizer(top: int) -> Any:
    def summarize(ids: Ids, lcc: np.ndarray) -> dict[str, Any]:
        best = np.lexsort((ids.keys, -lcc))[:top] if top else np.empty(0, np.int64)
        return {"sum": float(lcc.sum()), "top": [[name, float(lcc[i])] for name, i in zip(ids.of(best), best.tolist())]}

    return summarize


def build(config: dict[str, Any], bctx: BuildContext) -> Graph:
    # directed: neighbours are in- plus out-neighbours, the numerator counts directed edges;
    # undirected: every edge both ways, which gives edges / (d (d - 1) / 2)
    if config["mode"] == "block":
        symmetric = not config["directed"]  # the loader stores every edge both ways
        return build_loaded_graph("lcc", config, bctx, lambda bid, io: LCCLoaded(bid, io, symmetric), undirected=symmetric,
                                  summarize=_summarizer(config["top"]), fmt=value_format(config, "float"))
    return build_graph("lcc", follow(load_graph(config), config), bctx, LCCVertex)


def finish(result: RunResult, config: dict[str, Any], run_dir: Any = None) -> tuple[str, dict[str, Any]]:
    parted = parted_results(result, config)
    if parted is not None:
        count = parted[0]
        total = sum(s["sum"] for s in parted[1])
        top = sorted((tuple(r) for s in parted[1] for r in s["top"]), key=lambda r: (-r[1], r[0]))
    else:
        rows = collect(result)
        write_result(config, rows, "float")
        count = len(rows)
        total = sum(v for _, v in rows)
        top = sorted(rows, key=lambda r: (-r[1], r[0]))
    top = top[: config["top"]]
    mean = total / count if count else 0.0
    lines = [f"lcc: {count} vertices, mean clustering coefficient {mean:.6f}"]
    lines += [f"{vid:<24} {c:.6f}" for vid, c in top]
    if config["output"]:
        lines.append(f"wrote {count} coefficients to {config['output']}")
    return "\n".join(lines), {"vertices": count, "mean": mean, "top": top}


JOB = Job(
    name="lcc",
    description="local clustering coefficient; directed graphs use in- plus out-neighbours (Graphalytics LCC)",
    keys=GRAPH_KEYS,
    build=build,
    finish=finish,
)
