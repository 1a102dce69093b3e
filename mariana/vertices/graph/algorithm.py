"""A graph algorithm as the framework runs it: one object per algorithm, defined at the end of
its module (``pagerank``, ``sssp``, ``bfs``, ``wcc``, ``cdlp``, ``lcc``).

The framework does the rest, the same way for every algorithm (``jobs/graphjob.graph_job``):
it loads the graph in parts in the first supersteps (``partitioner/graphload.py``) and hands
each block its fragment, writes each block's values as its part of the output
(``storage/graphoutput.py``) and commits the parts, or, with ``mode=vertex``, reads the graph
whole and runs the vertex program. The algorithm supplies what is its own:

- ``block(id, io, config)``: its block program, a ``LoadedBlock`` (computes over the fragment);
- ``vertex(edges, config)``: the factory ``(vertex id, out-edges) -> Vertex`` of its
  vertex-centric program (the Pregel form, and the tests' bit-identity oracle);
- ``master(config, block)``: its master compute, if any;
- ``summarize(config, ids, values)``: a part's summary (the same for a block's part and for the
  whole graph in vertex mode); ``report(count, summaries, config, result, loading)``: the lines
  printed and the ``--json`` fields, from every part's summary (``loading``: the supersteps
  spent loading);
- ``params``: its own config keys; how it loads (``symmetric``: each edge both ways;
  ``weights``; ``nonnegative``), its combiner, aggregators and progress metric.

A new algorithm is one module with one ``Algorithm`` and one line in ``jobs/registry.BUILTIN_JOBS``
(or ``mariana run mymodule:ALGORITHM`` without the line): docs/block-centric.md shows k-core.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ...engine import RunResult, Vertex
from ...storage.edgelist import EdgeList
from ...storage.ids import Ids
from .block import GraphIO, LoadedBlock

__all__ = ["Algorithm", "Param", "Names", "MIN_PROPAGATION", "follow", "undirected_unless_directed", "merged_top"]

Adjacency = list[tuple[str, Any]]


@dataclass(frozen=True)
class Param:
    """One config key of an algorithm: name, default, type name (int, float, str, bool), help and
    the range a number must lie in (``minimum``/``maximum``, inclusive)."""

    name: str
    default: Any
    type: str
    help: str
    minimum: float | None = None
    maximum: float | None = None


def follow(edges: EdgeList, config: dict[str, Any]) -> EdgeList:
    """The edges a directed algorithm follows: as listed, or both ways for ``directed=false``."""
    return edges if config.get("directed", True) else edges.undirected()


def undirected_unless_directed(config: dict[str, Any]) -> bool:
    """Load each edge both ways when the input is undirected (``directed=false``)."""
    return not config.get("directed", True)


def merged_top(summaries: list[dict[str, Any]], field: str, top: int, descending: bool = True) -> list[tuple[Any, ...]]:
    """The ``top`` best ``[vertex, value]`` rows of every part's ``field``, by value (largest first
    when ``descending``), ties by vertex id."""
    rows = (tuple(r) for s in summaries for r in s[field])
    return sorted(rows, key=(lambda r: (-r[1], r[0])) if descending else (lambda r: (r[1], r[0])))[:top]


#: a traversal that propagates minima (distances, depths, labels): scipy's traversals in its
#: blocks, a min combiner, and its count of vertices updated as its progress
MIN_PROPAGATION: dict[str, Any] = {"traversals": True, "combiner": "min", "aggregators": (("updated", "sum"),),
                                   "progress_metric": "updated"}


@dataclass(frozen=True)
class Algorithm:
    """One graph algorithm: its programs, its summary and its report (see the module's docstring)."""

    name: str
    description: str
    block: Callable[[str, GraphIO, dict[str, Any]], LoadedBlock]
    vertex: Callable[[EdgeList, dict[str, Any]], Callable[[str, Adjacency], Vertex]]
    summarize: Callable[[dict[str, Any], Ids, Any], dict[str, Any]]
    report: Callable[[int, list[dict[str, Any]], dict[str, Any], RunResult, int], tuple[list[str], dict[str, Any]]]
    #: what the output calls a value ("ranks", "distances", ...: "wrote N ranks to OUT")
    noun: str
    #: how values are written: float, depth (BFS), label (CDLP), component (WCC)
    value: str = "float"
    params: tuple[Param, ...] = ()
    symmetric: Callable[[dict[str, Any]], bool] = undirected_unless_directed
    weights: bool = False
    nonnegative: bool = False
    #: the block program uses scipy's graph traversals (imported before workers fork)
    traversals: bool = False
    #: vertex mode: the edges the vertex program follows, from the edge list as stored
    edges: Callable[[EdgeList, dict[str, Any]], EdgeList] = follow
    #: the rows as written from the values returned whole (vertex mode, or no ``output``): labels as ids
    collected: Callable[[list[tuple[str, Any]], dict[str, Any]], list[tuple[str, Any]]] | None = None
    #: config checks beyond the keys' types (a missing source vertex, ...)
    check: Callable[[dict[str, Any]], None] | None = None
    #: ``refuse(summaries, config)``: raise before any output is committed (SSSP's overflow)
    refuse: Callable[[list[dict[str, Any]], dict[str, Any]], None] | None = None
    master: Callable[[dict[str, Any], bool], Any] | None = None
    combiner: str | None = None
    aggregators: tuple[tuple[str, str], ...] = ()
    progress_metric: str | None = None


class Names(Ids):
    """``Ids`` over id strings already decoded (vertex mode's whole graph, ids in string order):
    what a summary sees in place of a block's keys."""

    def __init__(self, names: Sequence[str]) -> None:
        super().__init__(np.asarray(names, dtype=str) if len(names) else np.empty(0, dtype="U1"))
        self.names = list(names)

    def of(self, rows: np.ndarray) -> list[str]:
        return [self.names[i] for i in np.asarray(rows, dtype=np.int64).tolist()]
