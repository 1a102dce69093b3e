"""The top-level functions of ``mariana`` that span layers: ``run`` (a ``Graph`` on the local or the
cluster runtime) and ``load_model`` (a trained model from a run directory or a ``params.npz``).
They import the job layer lazily, so ``import mariana`` stays light."""

from __future__ import annotations

from typing import Any

from .engine import Graph, RunResult

__all__ = ["run", "load_model"]


def run(graph: Graph, *, workers: int = 1, runtime: str = "local", **options: Any) -> RunResult:
    """Run ``graph`` to the end and return its ``RunResult`` (``.values``, ``.aggregates``, ...).

    ``runtime="local"`` (default) runs every partition in this process; ``runtime="cluster"``
    runs ``workers`` worker processes forked from this one over ZeroMQ (same results, bit for
    bit); ``runtime="inproc"`` runs the cluster runtime's master and workers as threads here.
    Other keywords: ``placement``, ``max_supersteps``, ``run_dir`` (a ``RunDir``),
    ``on_superstep``, ``checkpoint_every``, ``keep_checkpoints``, ``resume``, ``trace``,
    ``capture`` (see ``mariana.engine.runner.run``).
    """
    from .jobs.launch import run_graph

    return run_graph(graph, workers=workers, runtime=runtime, **options)


def load_model(source: Any, **kwargs: Any) -> Any:
    """A trained ``Model`` ready for ``predict(x)`` from a run directory or a ``params.npz``
    (keywords: ``model``, ``input_shape``, ``classes``, ``checkpoint``; see
    ``mariana.jobs.export.load_model``)."""
    from .jobs.export import load_model as _load

    return _load(source, **kwargs)
