"""mariana-bsp: Tencent's Mariana deep-learning platform re-created as one BSP vertex/message engine.

The core nouns: write a ``Vertex`` program, put vertices in a ``Graph``, ``run`` it.
"""

#: First, before any import: modules of every layer read it (``from .. import __version__``), also
#: while this face is still importing (``api`` imports the job layer lazily, on first call).
__version__ = "0.1.0"

from .engine import AGGREGATORS, Aggregator, Context, Graph, LocalRuntime, MasterContext, Message, RunResult, Vertex
from .engine.aggregators import reduce_aggregator
from .api import load_model, run
from .errors import MarianaError, ProtocolError, StorageError, UsageError, VertexError
from .messages.combiners import COMBINERS, max_combiner, min_combiner, sum_combiner
from .partitioner import ExplicitStrategy, GroupStrategy, HashStrategy, Placement, RangeStrategy

__all__ = [
    "Vertex", "Context", "Message", "Graph", "MasterContext", "run", "load_model", "LocalRuntime", "RunResult",
    "Aggregator", "AGGREGATORS", "reduce_aggregator", "COMBINERS", "sum_combiner", "min_combiner", "max_combiner",
    "Placement", "HashStrategy", "RangeStrategy", "ExplicitStrategy", "GroupStrategy",
    "MarianaError", "UsageError", "VertexError", "ProtocolError", "StorageError", "__version__",
]
