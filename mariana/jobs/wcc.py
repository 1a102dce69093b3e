"""``mariana run wcc``: weakly connected components, labelled by their smallest vertex id."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from ..engine import Graph, RunResult
from ..vertices.graph.wcc import WCCComponentsLoaded, WCCVertex
from .graphalytics import load_graph, output_format, write_result
from .graphjob import GRAPH_KEYS, build_graph, build_loaded_graph, collect, parted_results
from ..storage.ids import Ids, label_counts
from .registry import BuildContext, Job


def _summarize(ids: Ids, labels: Ids | np.ndarray) -> dict[str, Any]:
    names, counts = label_counts(labels)
    return {"labels": names, "counts": counts}


def build(config: dict[str, Any], bctx: BuildContext) -> Graph:
    if config["mode"] == "block":  # Graphalytics names a component by its numerically smallest member
        numeric = output_format(config) == "graphalytics"
        g = build_loaded_graph("wcc", config, bctx, lambda bid, io: WCCComponentsLoaded(bid, io, numeric),
                               undirected=True, summarize=_summarize, traversals=True)
    else:
        edges = load_graph(config).undirected()
        g = build_graph("wcc", edges, bctx, WCCVertex)
    g.add_combiner("min")
    g.add_aggregator("updated", "sum")
    return g


def finish(result: RunResult, config: dict[str, Any], run_dir: Any = None) -> tuple[str, dict[str, Any]]:
    parted = parted_results(result, config)
    sizes_counter: Counter[str] = Counter()
    if parted is not None:
        count = parted[0]
        for s in parted[1]:
            sizes_counter.update(dict(zip((str(x) for x in s["labels"]), s["counts"])))
    else:
        rows = [(vid, str(label)) for vid, label in collect(result)]  # block mode: ints for integer ids
        write_result(config, rows, "component")
        count = len(rows)
        sizes_counter.update(label for _, label in rows)
    sizes = sizes_counter.most_common()
    largest = sorted(sizes, key=lambda c: (-c[1], c[0]))[: config["top"]]
    lines = [f"wcc: {len(sizes)} component(s) over {count} vertices, {result.supersteps} supersteps"]
    lines += [f"{label:<24} {size} vertices" for label, size in largest]
    if config["output"]:
        lines.append(f"wrote {count} labels to {config['output']}")
    return "\n".join(lines), {"vertices": count, "components": len(sizes), "largest": largest}


JOB = Job(
    name="wcc",
    description="weakly connected components of an edge list read as undirected (HashMin)",
    keys=GRAPH_KEYS,
    build=build,
    finish=finish,
    progress_metric="updated",
)
