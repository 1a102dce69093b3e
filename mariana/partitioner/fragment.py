"""A worker's fragment of a graph, as the loader builds it (``graphload``): its own vertices and
their out-edges in CSR form. Algorithms receive a built ``LocalGraph`` and compute over it.

Vertices are named by keys (``storage.ids``), which sort in the string order of the ids. No
array here is as long as the whole graph: a block holds its own vertices and their out-edges
(destination keys, destination blocks).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .csr import row_ids

__all__ = ["LOAD_STEPS", "BLOCK_TAG", "LocalGraph"]


#: Supersteps spent loading: parse the splits, route edges to their owners, build the blocks.
LOAD_STEPS = 3
#: The tag of the messages between blocks (the loader's routed edges and the algorithms' own).
BLOCK_TAG = "block"


@dataclass
class LocalGraph:
    """One block's vertices (``own``: sorted keys) and their out-edges in CSR form: each edge's
    destination as an int32 ``slot`` into ``targets`` (the distinct destination keys, sorted) and
    ``target_block`` (the block owning each), ``weight`` per edge or None; ``blocks``: the engine
    vertex id of every block. ``n`` (all vertices of the graph) is known one step later."""

    own: np.ndarray
    indptr: np.ndarray
    slot: np.ndarray
    targets: np.ndarray
    target_block: np.ndarray
    weight: np.ndarray | None
    blocks: list[str]
    n: int = -1

    def local(self, keys: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.own, keys)

    def src_rows(self) -> np.ndarray:
        """The local row of every edge (int32)."""
        return row_ids(self.indptr)

    def edges_of(self, rows: np.ndarray) -> np.ndarray:
        """Indices into ``dst`` of the out-edges of local rows ``rows``."""
        starts = self.indptr[rows]
        counts = self.indptr[rows + 1] - starts
        total = int(counts.sum())
        if total == 0:
            return np.empty(0, dtype=np.int64)
        offsets = np.repeat(starts - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
        return offsets + np.arange(total)

    def slots_are_rows(self) -> bool:
        """Whether the distinct targets are this block's own vertices, in order (one block where
        every vertex has in-edges): then a slot is a row, with nothing to look up."""
        return len(self.targets) == len(self.own) and bool(np.array_equal(self.targets, self.own))

    def drop_edges(self) -> None:
        """Let the edge arrays go once a kernel holds its own form of them: empty arrays, not
        ``[:0]`` views (a view keeps its whole base array alive: 4 bytes an edge for the job)."""
        self.slot, self.targets = np.empty(0, self.slot.dtype), np.empty(0, self.targets.dtype)
        self.target_block, self.weight = np.empty(0, self.target_block.dtype), None

    def nbytes(self) -> int:
        arrays = (self.own, self.indptr, self.slot, self.targets, self.target_block, self.weight)
        return sum(a.nbytes for a in arrays if a is not None)

