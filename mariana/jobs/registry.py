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
from typing import Any, Sequence

from ..errors import UsageError
from .schema import ENGINE_KEYS, BuildContext, Job, Key

__all__ = ["Key", "Job", "BuildContext", "BUILTIN_JOBS", "ENGINE_KEYS", "get_job", "resolve_config", "parse_set"]

BUILTIN_JOBS: dict[str, str] = {
    "dnn-dp": "mariana.jobs.dnn_data_parallel:JOB",
    "cnn-hybrid": "mariana.jobs.cnn_hybrid:JOB",
    "cpu-cluster": "mariana.jobs.cpu_cluster:JOB",
    # graph algorithms (``vertices.graph.algorithm.Algorithm``), run as jobs by ``graphjob.graph_job``
    "pagerank": "mariana.vertices.graph.pagerank:ALGORITHM",
    "sssp": "mariana.vertices.graph.sssp:ALGORITHM",
    "wcc": "mariana.vertices.graph.wcc:ALGORITHM",
    "bfs": "mariana.vertices.graph.bfs:ALGORITHM",
    "cdlp": "mariana.vertices.graph.cdlp:ALGORITHM",
    "lcc": "mariana.vertices.graph.lcc:ALGORITHM",
}

#: Jobs made in this process for ``mariana.run(graph, runtime="cluster")``: forked workers inherit them.
LOCAL_JOBS: dict[str, Job] = {}


def get_job(name: str) -> Job:
    """A built-in job by name, or ``package.module:attribute`` (a ``Job``, or a graph ``Algorithm``)."""
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
    from ..vertices.graph.algorithm import Algorithm

    if isinstance(job, Algorithm):  # a graph algorithm: the graph framework's job around it
        from .graphjob import graph_job

        job = graph_job(job)
    if not isinstance(job, Job):
        raise UsageError(f"'{name}' is not a mariana Job or graph Algorithm (found {type(job).__name__} at {module_name}:{attr})")
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
