"""Vertex state for checkpoints: what a vertex holds, as plain data and arrays.

Each vertex says what it checkpoints: ``vertex_state(v)`` calls ``v.state_dict()`` when the
vertex defines one, else captures the attributes its class declares in ``state_fields``
(``("value",)`` on ``Vertex``): plain data only, None, bool, int, float, str, bytes, numpy (or
cupy) arrays and scalars, ``numpy.random.Generator`` (its bit-generator state), and
lists/tuples/dicts of those. A declared field that holds anything else is a mistake in the
declaration and fails the checkpoint naming the vertex and the field. Everything not declared (a
model object, a callable, the data and subgraph a job rebuilds on every start) is recreated by
the job's build. ``load_vertex_state`` sets the attributes back (or calls ``load_state_dict``).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from ..errors import MarianaError
from .vertex import Vertex

__all__ = ["vertex_state", "load_vertex_state", "default_state", "load_default_state", "plain", "detached"]

_RNG = "__rng__"


class _NotPlain(Exception):
    pass


def plain(value: Any) -> Any:
    """``value`` as checkpointable plain data, or raise ``_NotPlain``."""
    if value is None or isinstance(value, (bool, int, float, str, bytes, np.ndarray)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.random.Generator):
        return {_RNG: json.dumps(value.bit_generator.state)}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: plain(v) for k, v in value.items()}
    if type(value).__module__.startswith("cupy"):
        return value.get()
    raise _NotPlain(type(value).__name__)


def detached(state: Any, memo: dict[tuple, Any] | None = None) -> Any:
    """A copy of plain data that owns its arrays, so it can be written while the vertices go on.

    An array reached twice (the same memory: the same object, or a view of all of it) is copied
    once and stays shared in the copy, so the part format still stores it once.
    """
    memo = {} if memo is None else memo
    if isinstance(state, np.ndarray):  # keyed by memory, as the part format dedupes: a view is the same array
        key = (state.__array_interface__["data"][0], state.shape, state.strides, state.dtype)
        if key not in memo:
            memo[key] = state.copy()
        return memo[key]
    if isinstance(state, dict):
        return {k: detached(v, memo) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return [detached(v, memo) for v in state]
    return state


def vertex_state(v: Vertex) -> dict[str, Any]:
    """The checkpointable state of ``v``."""
    if hasattr(v, "state_dict"):
        return plain(v.state_dict())
    return default_state(v)


def default_state(v: Vertex) -> dict[str, Any]:
    """The declared ``state_fields`` of ``v`` that it has (what ``vertex_state`` captures without
    ``state_dict``); a field set only in some configurations is simply absent in the others."""
    out = {}
    for name in type(v).state_fields:
        if not hasattr(v, name):
            continue
        try:
            out[name] = plain(getattr(v, name))
        except _NotPlain as exc:
            raise MarianaError(f"vertex {v.id!r}: state field {name!r} of {type(v).__name__} holds a {exc}, "
                               "not plain data (declare only plain fields in state_fields)") from None
    return out


def _revive(value: Any, current: Any) -> Any:
    if isinstance(value, dict) and _RNG in value:
        rng = current if isinstance(current, np.random.Generator) else np.random.default_rng()
        rng.bit_generator.state = json.loads(value[_RNG])
        return rng
    if isinstance(value, np.ndarray):
        if isinstance(current, np.ndarray) and current.shape == value.shape and current.dtype == value.dtype \
                and current.flags.writeable:
            current[...] = value  # in place: views of this buffer (a model's layers) stay bound
            return current
        return np.array(value)  # writable, owned (checkpoint arrays may be read-only views)
    if isinstance(value, list) and isinstance(current, tuple):
        return tuple(value)
    return value


def load_vertex_state(v: Vertex, state: dict[str, Any]) -> None:
    """Put ``state`` (from ``vertex_state``) back into ``v``."""
    if hasattr(v, "load_state_dict"):
        v.load_state_dict(state)
        return
    load_default_state(v, state)


def load_default_state(v: Vertex, state: dict[str, Any]) -> None:
    """Set every attribute of ``state`` on ``v``; arrays are copied into existing buffers."""
    for name, value in state.items():
        setattr(v, name, _revive(value, getattr(v, name, None)))
