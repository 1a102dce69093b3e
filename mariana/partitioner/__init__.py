"""Vertex -> worker -> device placement."""

from .placement import (
    STRATEGIES, ExplicitStrategy, GroupStrategy, HashStrategy, Placement, RangeStrategy, Strategy, resolve_strategy,
)

__all__ = ["Placement", "Strategy", "HashStrategy", "RangeStrategy", "ExplicitStrategy", "GroupStrategy",
           "resolve_strategy", "STRATEGIES"]
