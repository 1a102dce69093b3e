"""The Graphalytics keys of the graph jobs, and their config's reading of the conventions in
``storage/graphalytics.py``.

Input: ``graph=`` an edge file (``src dst [weight]``), ``vertices=`` the ``.v`` file (one vertex
id per line; isolated vertices included, and every edge endpoint must be listed), and
``directed=true|false`` (an undirected graph lists each edge once; the jobs then follow every
edge both ways). Output: ``format=graphalytics`` writes Graphalytics' ``vertex value`` lines,
``format=mariana`` the engine's ``vertex<TAB>value`` lines; ``format=auto`` (default) is
``graphalytics`` when ``vertices=`` is given, otherwise ``mariana``.
"""

from __future__ import annotations

from typing import Any, Callable

from ..storage.compression import require
from ..storage.edgelist import EdgeList, load_edges
from ..storage.graphalytics import output_format, read_vertices, value_format as _value_format, with_vertices, write_rows
from ..storage.parts import check_output
from .schema import Key

__all__ = ["GRAPHALYTICS_KEYS", "load_graph", "output_format", "write_result", "value_format"]

GRAPHALYTICS_KEYS = (
    Key("vertices", None, "str", "Graphalytics .v file: every vertex id, one per line (isolated vertices "
        "included); implies format=graphalytics under format=auto"),
    Key("directed", True, "bool", "false: the edge file lists each undirected edge once; jobs follow it both ways"),
    Key("format", "auto", "str", "output lines: graphalytics ('vertex value', Graphalytics' conventions), "
        "mariana ('vertex<TAB>value'), auto (graphalytics when vertices= is set)",
        choices=("auto", "mariana", "graphalytics")),
)


def load_graph(config: dict[str, Any], nonnegative: bool = False) -> EdgeList:
    """The edge list of ``graph=`` over the vertices of ``vertices=`` (if set), as stored: the
    caller applies ``directed`` (``vertices.graph.algorithm.follow``). ``nonnegative``: a negative weight is a bad line
    (``load_edges``)."""
    require(config.get("output"))  # (the output's format and place: said before the run, not after it)
    check_output(config.get("output"))
    edges = load_edges(config["graph"], nonnegative=nonnegative)
    if config.get("vertices"):
        edges = with_vertices(edges, read_vertices(config["vertices"]), config["vertices"])
    return edges


def value_format(config: dict[str, Any], kind: str) -> Callable[[Any], str]:
    """How a value of ``kind`` is written in the output format of ``config``."""
    return _value_format(output_format(config) == "graphalytics", kind)


def write_result(config: dict[str, Any], rows: list[tuple[str, Any]], kind: str) -> None:
    """Write ``rows`` (sorted by id string) to ``config['output']`` if set (``storage.graphalytics.write_rows``)."""
    if config.get("output"):
        write_rows(config["output"], rows, kind, output_format(config) == "graphalytics")
