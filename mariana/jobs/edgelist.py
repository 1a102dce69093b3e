"""Edge-list files: ``src dst [weight]`` per line, ``#`` comments, blank lines ignored.

Vertex ids are strings; a vertex that appears only as a destination still exists. Vertices are
indexed 0..N-1 in sorted (string) order, the order every output file uses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import StorageError, UsageError
from ..partitioner import resolve_strategy
from ..storage import read_text
from ..vertices.graph_algos import Subgraph

__all__ = ["EdgeList", "load_edges", "parse_edges", "example_graph_url", "block_subgraphs"]


@dataclass
class EdgeList:
    """A parsed edge list: sorted ids, edges as index arrays, weights (1.0 where absent)."""

    url: str
    ids: list[str]
    src: np.ndarray
    dst: np.ndarray
    weight: np.ndarray
    lineno: np.ndarray

    @property
    def n(self) -> int:
        return len(self.ids)

    def where(self, edge: int) -> str:
        return f"{self.url}:{int(self.lineno[edge])}"

    def undirected(self) -> "EdgeList":
        """Every edge in both directions (self-loops once)."""
        keep = self.src != self.dst
        return EdgeList(self.url, self.ids, np.concatenate([self.src, self.dst[keep]]),
                        np.concatenate([self.dst, self.src[keep]]), np.concatenate([self.weight, self.weight[keep]]),
                        np.concatenate([self.lineno, self.lineno[keep]]))

    def adjacency(self, vertex_index: int | None = None) -> list[list[tuple[str, float]]]:
        """Out-edge lists ``[(dst id, weight), ...]`` per vertex, in file order."""
        out: list[list[tuple[str, float]]] = [[] for _ in self.ids]
        ids = self.ids
        for s, d, w in zip(self.src.tolist(), self.dst.tolist(), self.weight.tolist()):
            out[s].append((ids[d], w))
        return out


def parse_edges(text: str, url: str) -> EdgeList:
    """Parse an edge list; any malformed line is a ``UsageError`` naming ``url:line``."""
    srcs: list[str] = []
    dsts: list[str] = []
    weights: list[float] = []
    linenos: list[int] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        hash_at = line.find("#")
        if hash_at >= 0:
            line = line[:hash_at]
        parts = line.split()
        if not parts:
            continue
        if len(parts) == 2:
            w = 1.0
        elif len(parts) == 3:
            try:
                w = float(parts[2])
            except ValueError:
                raise UsageError(f"{url}:{lineno}: weight {parts[2]!r} is not a number") from None
            if not math.isfinite(w):
                raise UsageError(f"{url}:{lineno}: weight {parts[2]!r} must be a finite number")
        else:
            what = "only one field" if len(parts) == 1 else f"{len(parts)} fields"
            raise UsageError(f"{url}:{lineno}: expected 'src dst [weight]', found {what}: {line.strip()!r}")
        srcs.append(parts[0])
        dsts.append(parts[1])
        weights.append(w)
        linenos.append(lineno)
    ids = sorted(set(srcs).union(dsts))
    index = {v: i for i, v in enumerate(ids)}
    m = len(srcs)
    return EdgeList(
        url, ids,
        np.fromiter((index[v] for v in srcs), dtype=np.int64, count=m),
        np.fromiter((index[v] for v in dsts), dtype=np.int64, count=m),
        np.asarray(weights, dtype=np.float64).reshape(m),
        np.asarray(linenos, dtype=np.int64).reshape(m),
    )


def example_graph_url() -> str:
    """The small example graph shipped with the package."""
    from importlib.resources import files

    return str(files("mariana.jobs") / "data" / "example.e")


def load_edges(url: str | None) -> EdgeList:
    """Read and parse the edge list at ``url`` (path or fsspec URL); None: the shipped example."""
    if url == "":
        raise UsageError("config key 'graph' is empty: give an edge-list path or URL, or leave it out for the example")
    url = url or example_graph_url()
    try:
        text = read_text(url)
    except StorageError as exc:
        raise UsageError(f"cannot read graph file: {exc}") from None
    return parse_edges(text, url)


def block_subgraphs(edges: EdgeList, workers: int, placement: str | None, prefix: str) -> list[Subgraph]:
    """Cut the graph into one ``Subgraph`` per worker; graph vertices are placed by ``placement``."""
    strategy = resolve_strategy(placement)
    owner = np.asarray(strategy.assign(edges.ids, workers), dtype=np.int64).reshape(edges.n)
    blocks = [f"{prefix}{b:04d}" for b in range(workers)]
    order = np.lexsort((edges.dst, edges.src))  # CSR rows by source, stable within a row
    src, dst, weight = edges.src[order], edges.dst[order], edges.weight[order]
    subs = []
    for b in range(workers):
        own = np.flatnonzero(owner == b)
        sel = owner[src] == b
        counts = np.bincount(np.searchsorted(own, src[sel]), minlength=len(own))
        indptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        subs.append(Subgraph(edges.n, own, indptr, dst[sel], weight[sel], owner, blocks,
                             [edges.ids[i] for i in own.tolist()]))
    return subs

