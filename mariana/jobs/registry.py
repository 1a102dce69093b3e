"""Jobs: a name, a typed config schema, a graph builder and a finisher.

A job reaches every process by name only (a built-in name or ``package.module:attribute``);
each process imports it and builds its own graph from the resolved config. Nothing executable
travels between processes.
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
import tomllib
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Sequence

from ..engine import Graph, RunResult
from ..errors import UsageError

__all__ = ["Key", "Job", "BuildContext", "BUILTIN_JOBS", "ENGINE_KEYS", "get_job", "resolve_config", "parse_set"]

BUILTIN_JOBS: dict[str, str] = {
    "dnn-dp": "mariana.jobs.dnn_data_parallel:JOB",
    "cnn-hybrid": "mariana.jobs.cnn_hybrid:JOB",
    "cpu-cluster": "mariana.jobs.cpu_cluster:JOB",
    "pagerank": "mariana.jobs.pagerank:JOB",
    "sssp": "mariana.jobs.sssp:JOB",
    "wcc": "mariana.jobs.wcc:JOB",
    "bfs": "mariana.jobs.bfs:JOB",
    "cdlp": "mariana.jobs.cdlp:JOB",
    "lcc": "mariana.jobs.lcc:JOB",
}

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


#: Jobs made in this process for ``mariana.run(graph, runtime="cluster")``: forked workers inherit them.
LOCAL_JOBS: dict[str, Job] = {}


def get_job(name: str) -> Job:
    """A built-in job by name, or ``package.module:attribute`` (a ``Job``)."""
    if name in LOCAL_JOBS:
        return LOCAL_JOBS[name]
    target = BUILTIN_JOBS.get(name)
    if target is None and ":" not in name:
        hint = difflib.get_close_matches(name, BUILTIN_JOBS, n=1)
        extra = f" (did you mean '{hint[0]}'?)" if hint else ""
        raise UsageError(f"unknown job '{name}'{extra}; jobs: {', '.join(BUILTIN_JOBS)}, or package.module:attribute")
    module_name, _, attr = (target or name).partition(":")
    if target is None and os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())  # `mariana run mymod:JOB` finds mymod.py here, as `python -m` would
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"cannot import job module '{module_name}': {exc}") from None
    job = getattr(module, attr, None)
    if not isinstance(job, Job):
        raise UsageError(f"'{name}' is not a mariana Job (found {type(job).__name__} at {module_name}:{attr})")
    return job


def parse_set(item: str) -> tuple[str, Any, str]:
    """``KEY=VALUE`` -> (key, TOML-parsed value or the plain string, raw text)."""
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UsageError(f"--set expects KEY=VALUE, got {item!r}")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key, value, raw


def resolve_config(job: Job, file_config: dict[str, Any] | None = None, sets: Sequence[str] = (),
                   file_name: str = "") -> dict[str, Any]:
    """Defaults, then the TOML file's top-level keys, then its ``[JOB]`` table (which wins over the
    top level; other jobs' tables are skipped), then ``--set`` items."""
    config = job.defaults()
    items: list[tuple[str, Any, str | None, str]] = []
    if file_config:
        table = file_config.get(job.name)
        if isinstance(table, dict) and job.name not in job.key_index:
            top = {k: v for k, v in file_config.items()
                   if k != job.name and (not isinstance(v, dict) or k in job.key_index)}
            items += [(k, v, None, f"{file_name}: ") for k, v in top.items()]
            items += [(k, v, None, f"{file_name} [{job.name}]: ") for k, v in table.items()]
        else:
            items += [(k, v, None, f"{file_name}: ") for k, v in file_config.items()]
    items += [(*parse_set(s)[:2], parse_set(s)[2], "--set: ") for s in sets]
    for name, value, raw, where in items:
        key = job.key_index.get(name)
        if key is None:
            hint = difflib.get_close_matches(name, job.key_index, n=1)
            extra = f" (did you mean '{hint[0]}'?)" if hint else ""
            raise UsageError(f"{where}unknown config key '{name}' for job {job.name}{extra}; "
                             f"valid keys: {', '.join(job.key_index)}")
        if key.type == "str" and raw is not None and not isinstance(value, str):
            value = raw.strip()  # --set source=1 means the vertex id "1"
        config[name] = key.check(value, where)
    if job.adjust is not None:
        job.adjust(config, {name for name, *_ in items})
    return config
