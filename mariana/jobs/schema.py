"""A job's schema: its typed config keys (``Key``), the keys every job takes (``ENGINE_KEYS``),
what a builder knows besides its config (``BuildContext``) and the job itself (``Job``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Collection

from ..engine import Graph, RunResult
from ..errors import UsageError

__all__ = ["Key", "Job", "BuildContext", "ENGINE_KEYS"]

_TYPES: dict[str, tuple[type, ...]] = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,),
                                       "list": (list,), "dict": (dict,)}


@dataclass(frozen=True)
class Key:
    """One config key: name, default, type name (int, float, str, bool, list), help, choices (a
    tuple, or a registry such as ``mariana.vertices.train.optim.OPTIMIZERS``, read when checked)."""

    name: str
    default: Any
    type: str
    help: str
    choices: Collection[Any] | None = None
    minimum: float | None = None  # the smallest value allowed (numbers)

    def check(self, value: Any, where: str) -> Any:
        """The value converted to this key's type, or a ``UsageError``."""
        if value is None and self.default is None:
            return None
        ok = isinstance(value, _TYPES[self.type]) and not (self.type in ("int", "float") and isinstance(value, bool))
        if not ok:
            raise UsageError(f"{where}config key '{self.name}' expects {self.type}, got {type(value).__name__} {value!r}")
        if self.type == "float":
            value = float(value)
        if self.minimum is not None and value < self.minimum:
            raise UsageError(f"{where}config key '{self.name}' must be >= {self.minimum:g}; got {value!r}")
        if self.choices is not None and value not in self.choices:
            raise UsageError(f"{where}config key '{self.name}' must be one of {', '.join(map(str, self.choices))}; got {value!r}")
        return value


#: Keys every job accepts: the engine reads them, not the job's build function.
ENGINE_KEYS = (
    Key("checkpoint_every", 0, "int", "checkpoint every N supersteps into RUN/checkpoints (0: never)", minimum=0),
    Key("keep_checkpoints", 3, "int", "how many committed checkpoints to keep", minimum=1),
    Key("checkpoint_background", True, "bool", "write checkpoints from a copy of the state while supersteps go on "
        "(false: between supersteps, no extra memory)"),
)


@dataclass(frozen=True)
class BuildContext:
    """What a job's builder knows besides its config: the worker count and placement strategy."""

    workers: int = 1
    placement: str | None = None


@dataclass
class Job:
    """A job for ``mariana run`` (built-in, or ``package.module:ATTR`` of your own).

    - ``name``, ``description``: what ``mariana jobs`` shows.
    - ``keys``: its typed config keys (``Key``); every job also takes the engine's
      ``checkpoint_every``, ``keep_checkpoints`` and ``checkpoint_background``.
    - ``build(config, ctx) -> Graph``: the graph for a resolved config and a ``BuildContext``
      (worker count, placement strategy); runs in every process, so it must be deterministic.
    - ``finish(result, config, run_dir) -> (text, summary)``: writes the job's outputs (files,
      ``RUN/params/`` through ``mariana.storage.save_params``) and returns what to print and the
      ``--json`` summary's fields.
    - ``progress_metric``: the aggregate shown in the progress line.
    - ``export(vertex_states, config) -> [(name, array)]``: the model held in checkpointed vertex
      states (``{vertex id: state}``), for ``mariana params export RUN [--checkpoint S]`` while
      the job runs or from an earlier superstep; without it every array of every vertex state is
      exported, named by its path (``VERTEX/attribute/key``).
    """

    name: str
    description: str
    keys: tuple[Key, ...]
    build: Callable[[dict[str, Any], BuildContext], Graph]
    finish: Callable[[RunResult, dict[str, Any], Any], tuple[str, dict[str, Any]]] | None = None
    progress_metric: str | None = None
    #: ``export(vertex_states, config) -> [(name, array)]``: the model held in checkpointed vertex states
    export: Callable[[dict[str, Any], dict[str, Any]], list[tuple[str, Any]]] | None = None
    #: ``adjust(config, explicitly_set_keys)``: change defaults that depend on other keys (a named
    #: data set's epochs, lr, ...) in place; keys the user set are never touched
    adjust: Callable[[dict[str, Any], set[str]], None] | None = None
    key_index: dict[str, Key] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.keys = tuple(self.keys) + tuple(k for k in ENGINE_KEYS if k.name not in {j.name for j in self.keys})
        self.key_index = {k.name: k for k in self.keys}

    def defaults(self) -> dict[str, Any]:
        return {k.name: k.default for k in self.keys}
