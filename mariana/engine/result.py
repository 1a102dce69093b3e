"""RunResult: what a finished job hands back to its caller."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["RunResult"]


@dataclass
class RunResult:
    """Supersteps run, why the job stopped, each vertex's ``result()``, the last aggregates,
    one metrics line per superstep, wall time and the placement used."""

    supersteps: int
    halt_reason: str
    values: dict[str, Any]
    aggregates: dict[str, Any]
    metrics: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0
    placement: Any = None
