"""The one rule for what a vertex may send (``ctx.send``) or aggregate (``ctx.aggregate``).

A payload is what the wire carries and the receiver's decoder accepts, and every runtime
delivers it as the wire does, so a program that runs on LocalRuntime runs the same on the cluster
(and a message to a vertex of the same worker looks like one from another host):

- ``None``, ``bool``, ``int`` in ``[-2**63, 2**64)``, ``float``, ``str``, ``bytes``;
- ``list`` and ``tuple`` (a tuple arrives as a list: msgpack has one array type, as JSON);
- ``dict`` with ``str`` (or ``bytes``) keys;
- numpy arrays of a plain numeric or bool dtype (codec.ALLOWED_DTYPES, either byte order),
  and cupy arrays (on the cluster they arrive as numpy arrays, staged through host memory);
- numpy scalars, which arrive as the Python scalar (``np.float32(x)`` as ``float``);
- nested at most ``MAX_DEPTH`` levels. Subclasses arrive as their base type (an
  ``OrderedDict`` as a ``dict``, a ``bytearray`` as ``bytes``).

Anything else (a set, a complex number, an object, an ``int``-keyed dict, a dtype=object array)
is refused at the call, by ``PayloadError`` naming the type and where inside the payload it sits.
``wire_value`` is that check: it returns the payload itself when it already is in the form the
wire delivers (no copy), else a converted copy (tuples as lists, numpy scalars as Python ones).
Cost per call (measured): a float or an int ~30-50 ns (Partition.send tests those inline), a str
or an array ~150-200 ns, a dict of two arrays ~0.9 us, a list of scalars ~17 ns an element (its
element types are collected in C; ints add a min/max), a tuple's copy as a list ~0.7 us.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .codec import ALLOWED_DTYPES

__all__ = ["PayloadError", "wire_value", "MAX_DEPTH", "containers"]

#: nesting levels of a payload (the wire's header puts a batch's payloads 3 levels down and
#: decodes up to codec.Limits.max_depth; msgpack's encoder stops at 512)
MAX_DEPTH = 100
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 64) - 1
#: types that travel as they are, whatever their value
_ATOMS = frozenset({float, bool, type(None), bytes})
_KEYS = frozenset({str, bytes})
_INT = {int}
#: the allowed array dtypes (a set of dtypes: a membership test is 4x cheaper than ``dtype.str``)
_DTYPES = frozenset(np.dtype(d) for d in ALLOWED_DTYPES)
#: numpy scalar types -> the Python type they arrive as (the rest: ``item()``, in ``_other``)
_NUMPY_SCALARS: dict[type, Any] = {
    **{t: float for t in (np.float64, np.float32, np.float16)},
    **{t: int for t in (np.int64, np.int32, np.int16, np.int8, np.uint32, np.uint16, np.uint8)},
    np.bool_: bool,
}


class PayloadError(TypeError):
    """A value the wire cannot carry: ``where`` is its place inside the payload (keys, indexes)."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.where: list[Any] = []

    def __str__(self) -> str:
        at = "".join(f"[{k!r}]" for k in self.where)
        return f"{self.problem}{' at ' + at if at else ''}"


def wire_value(x: Any) -> Any:
    """``x`` as the wire delivers it (``x`` itself when nothing changes); ``PayloadError`` when
    the wire cannot carry it."""
    return _value(x, type(x), 0)


def _value(x: Any, t: type, depth: int) -> Any:
    if t in _ATOMS:
        return x
    if t is int:
        if _INT_MIN <= x <= _INT_MAX:
            return x
        raise PayloadError(f"int {_short(x)} is outside the wire's range [-2**63, 2**64)")
    if t is str:
        if not x.isascii():
            _utf8(x)
        return x
    if t is np.ndarray:
        if x.dtype not in _DTYPES:
            _dtype(x)
        return x
    if depth >= MAX_DEPTH:
        raise PayloadError(f"payload nests deeper than {MAX_DEPTH} levels")
    if t is list or t is tuple:
        return _sequence(x, t is tuple, depth + 1)
    if t is dict:
        return _dict(x, False, depth + 1)
    scalar = _NUMPY_SCALARS.get(t)
    if scalar is not None:
        return scalar(x)
    return _other(x, t, depth)


def _item(v: Any, where: Any, depth: int) -> Any:
    """``_value`` of a container's item at index or key ``where``, which a refusal's path names."""
    try:
        return _value(v, type(v), depth)
    except PayloadError as exc:
        exc.where.insert(0, where)
        raise


def _sequence(x: Any, copy: bool, depth: int) -> Any:
    types = set(map(type, x))
    if types <= _ATOMS or (types == _INT and _INT_MIN <= min(x) and max(x) <= _INT_MAX):
        return list(x) if copy else x
    out = None
    for i, v in enumerate(x):
        c = _item(v, i, depth)
        if c is not v and out is None:
            out = list(x[:i])
        if out is not None:
            out.append(c)
    if out is not None:
        return out
    return list(x) if copy else x


def _dict(x: dict, copy: bool, depth: int) -> dict:
    if not set(map(type, x)) <= _KEYS:
        for k in x:
            if type(k) not in _KEYS:
                if isinstance(k, str):  # a str subclass (an enum's member): its str goes
                    copy = True
                    continue
                raise PayloadError(f"dict key {_short(k)} of type {_name(k)}: the wire carries str keys only")
    out: dict | None = {} if copy else None
    for i, (k, v) in enumerate(x.items()):
        c = _item(v, k, depth)
        if out is None and c is not v:
            out = dict(list(x.items())[:i])
        if out is not None:
            out[str.__str__(k) if type(k) not in _KEYS else k] = c
    return x if out is None else out


def _other(x: Any, t: type, depth: int) -> Any:
    """The rest: numpy scalars, subclasses of the plain types, cupy arrays; or a refusal."""
    if isinstance(x, np.generic):
        value = x.item()
        if type(value) in (bool, int, float, str, bytes):
            return _value(value, type(value), depth)
        raise PayloadError(f"numpy scalar of type {_name(x)} has no wire form")
    if isinstance(x, np.ndarray):  # a subclass (np.matrix, a masked array): its plain array goes
        _dtype(x)
        return x.view(np.ndarray)
    if t.__module__.startswith("cupy") and hasattr(x, "get") and hasattr(x, "dtype"):
        _dtype(x)
        return x
    if isinstance(x, int):  # an IntEnum, a numpy-free int subclass
        return _value(int(x), int, depth)
    if isinstance(x, float):
        return float(x)
    if isinstance(x, str):
        return _value(str.__str__(x), str, depth)
    if isinstance(x, (bytes, bytearray, memoryview)):
        return bytes(x)
    if isinstance(x, (list, tuple)):
        return _sequence(x, True, depth + 1)
    if isinstance(x, dict):
        return _dict(x, True, depth + 1)
    raise PayloadError(f"{_name(x)} is not a payload the wire carries (None, bool, int, float, str, bytes, "
                       f"list, tuple, str-keyed dict, numpy array or scalar)")


def _utf8(s: str) -> None:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise PayloadError(f"str {_short(s)} is not valid UTF-8 ({exc.reason})") from None


def _dtype(arr: Any) -> None:
    dt = arr.dtype
    if dt.str in ALLOWED_DTYPES:
        return
    if dt.kind in "biufc" and dt.fields is None and dt.newbyteorder("<").str in ALLOWED_DTYPES:
        return  # big-endian: the wire swaps it
    raise PayloadError(f"array of dtype {dt.str!r} ({dt}): the wire carries plain numeric and bool dtypes only")


def _name(x: Any) -> str:
    t = type(x)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _short(x: Any) -> str:
    text = repr(x)
    return text if len(text) <= 40 else text[:37] + "..."


#: the wire's containers (a tuple travels as a list)
_NESTED = (list, tuple, dict)


def containers(x: Any, stop: int = 1 << 20) -> int:
    """How many lists and maps the wire form of payload ``x`` holds (arrays travel as frames of
    their own: none), counting at most about ``stop``: what a batch's parts are sized by, so that
    no part's header exceeds the receiver's container budget (``codec.Limits.max_containers``)."""
    t = type(x)
    if t not in _NESTED:
        return 0
    n = 1
    for v in x.values() if t is dict else x:
        if type(v) in _NESTED:
            n += containers(v, stop - n)
            if n > stop:
                break
    return n

