"""Superstep semantics and the runtimes that execute them."""

from .aggregators import AGGREGATORS, Aggregator, reduce_aggregator
from .graph import Graph, MasterContext
from .local import LocalRuntime
from .options import RunOptions
from .result import RunResult
from .runner import run
from .vertex import Context, Message, Vertex

__all__ = ["Vertex", "Context", "Message", "Graph", "MasterContext", "LocalRuntime", "RunOptions", "RunResult", "run",
           "Aggregator", "AGGREGATORS", "reduce_aggregator"]
