"""Wire codec: one msgpack header frame followed by raw array buffer frames.

``encode(header)`` returns ``[header_bytes, buf1, buf2, ...]``. Every numpy array found anywhere
inside ``header`` is replaced, by msgpack's ``default=`` hook, with
``ExtType(1, packb([first_frame_index, n_frames, dtype.str, shape]))`` and its bytes travel as
zero-copy ``memoryview`` frames (split into ``chunk_bytes`` pieces when larger). Nothing
executable ever travels: no pickle, only an allow-list of plain numeric dtypes.

``decode(frames)`` is the inverse and raises ``ProtocolError(kind, detail)`` on anything
malformed, with ``kind`` one of ``frame_count``, ``header``, ``version``, ``dtype``, ``length``,
``structure`` (a header that would build too many lists, maps or values, or nests too deeply:
refused before anything is built, see messages/bounds.py).

Caller-visible decisions:

- Tuples come back as lists; numpy scalars come back as Python scalars; cupy arrays come back
  as numpy arrays; big-endian arrays are byte-swapped (copied) to little-endian on encode.
- Every decoded array is read-only. A single-frame array is a view over the received buffer
  (which it keeps alive); copy it (``arr.copy()``) before modifying it.
- Encoded frames are views of the caller's arrays: do not modify those arrays until the
  frames have been sent (with ``copy=False`` zmq may read them after ``send`` returns).
- The returned dict still holds ``'v'``.
- A msgpack timestamp extension (code -1) is decoded by msgpack itself into an inert
  ``msgpack.Timestamp``; it cannot be intercepted by ``ext_hook``. Every other ext code but 1
  is rejected.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import operator
from dataclasses import dataclass
from typing import Any, Sequence

import msgpack
import numpy as np

from mariana.errors import ProtocolError
from mariana.messages import bounds

logger = logging.getLogger(__name__)

PROTOCOL_VERSION: int = 1
DEFAULT_CHUNK_BYTES: int = 4 * 1024 * 1024
ARRAY_EXT_CODE: int = 1
ALLOWED_DTYPES: frozenset[str] = frozenset(
    {
        "|b1", "|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8",
        "<f2", "<f4", "<f8", "<c8", "<c16",
    }
)
_MAX_DIM = 2**63 - 1
#: an array reference is ``[int, int, str, [<= max_ndim ints]]``: a few hundred bytes at most
_MAX_SPEC_BYTES = 1024


@dataclass(frozen=True)
class Limits:
    """Explicit decode limits. msgpack limits left as ``None`` derive from ``max_header_bytes``."""

    max_header_bytes: int = 64 * 1024 * 1024
    max_frames: int = 1_000_000
    max_array_bytes: int = 8 * 1024**3
    max_ndim: int = 32
    max_str_len: int | None = None
    max_bin_len: int | None = None
    max_array_len: int | None = None
    max_map_len: int | None = None
    max_ext_len: int | None = None
    #: lists and maps in one header. A vertex-mode batch holds one list per message: 4 million
    #: is a 64 MB header of the shortest messages' half, ~300 MB of Python objects.
    max_containers: int = 4_000_000
    #: values in one header, keys and containers included (a frame this long or shorter holds no
    #: more, so only longer ones are counted)
    max_items: int = 32_000_000
    #: nesting levels of one header, at most msgpack's own stack (1024; the decoder counts them
    #: there). 1000 keeps a header within Python's default recursion limit for code that walks it;
    #: what a vertex may send nests far less (messages/payload.py)
    max_depth: int = 1000

    def __post_init__(self) -> None:
        if not 1 <= self.max_depth <= bounds.MSGPACK_STACK:
            raise ValueError(f"max_depth must be in [1, {bounds.MSGPACK_STACK}], got {self.max_depth}")

    @functools.cached_property
    def unpack_kwargs(self) -> dict[str, int]:
        """The explicit size limits handed to ``msgpack.unpackb`` (worked out once: every decode asks)."""
        h = self.max_header_bytes
        return {
            "max_str_len": h if self.max_str_len is None else self.max_str_len,
            "max_bin_len": h if self.max_bin_len is None else self.max_bin_len,
            "max_array_len": h if self.max_array_len is None else self.max_array_len,
            "max_map_len": h // 2 if self.max_map_len is None else self.max_map_len,
            "max_ext_len": h if self.max_ext_len is None else self.max_ext_len,
        }


DEFAULT_LIMITS = Limits()


def _type_name(obj: Any) -> str:
    t = type(obj)
    return f"{t.__module__}.{t.__qualname__}"


def _wire_array(arr: np.ndarray) -> np.ndarray:
    """Return ``arr`` as a plain, C-contiguous ndarray of an allowed dtype (copy only if needed)."""
    if type(arr) is not np.ndarray:
        arr = arr.view(np.ndarray)
    dt = arr.dtype
    if dt.str not in ALLOWED_DTYPES and dt.kind in "biufc" and dt.fields is None:
        swapped = dt.newbyteorder("<")
        if swapped.str in ALLOWED_DTYPES:
            arr = arr.astype(swapped)
    if arr.dtype.str not in ALLOWED_DTYPES:
        raise TypeError(
            f"cannot encode numpy array of dtype {arr.dtype.str!r} ({arr.dtype}); "
            f"allowed: {sorted(ALLOWED_DTYPES)}"
        )
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)
    return arr


def encode(header: dict, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> list:
    """Return frames ``[header_bytes, buf1, buf2, ...]`` for ``header``.

    ``header['v']`` is set to ``PROTOCOL_VERSION`` in the packed copy; the caller's dict is not
    mutated. Array frames are zero-copy ``memoryview`` slices of the arrays (send them with
    ``copy=False``). Raises ``TypeError`` for anything that cannot travel.
    """
    if not isinstance(header, dict):
        raise TypeError(f"header must be a dict, not {_type_name(header)}")
    if not isinstance(chunk_bytes, int) or isinstance(chunk_bytes, bool) or chunk_bytes <= 0:
        raise ValueError(f"chunk_bytes must be a positive int, got {chunk_bytes!r}")
    frames: list = [b""]

    def default(obj: Any) -> Any:
        if isinstance(obj, np.generic):
            value = obj.item()
            if isinstance(value, (bool, int, float, str, bytes)):
                return value
            raise TypeError(f"cannot encode numpy scalar of type {_type_name(obj)}")
        if not isinstance(obj, np.ndarray) and type(obj).__module__.startswith("cupy") and hasattr(obj, "get"):
            obj = obj.get()
        if not isinstance(obj, np.ndarray):
            raise TypeError(f"cannot encode object of type {_type_name(obj)}")
        shape = [int(d) for d in obj.shape]
        arr = _wire_array(obj)
        first = len(frames)
        size = arr.nbytes
        if size:
            buf = memoryview(arr.reshape(-1).view(np.uint8))  # type: ignore[arg-type]  # numpy stubs, 3.11
            if size <= chunk_bytes:
                frames.append(buf)
            else:
                frames.extend(buf[i : i + chunk_bytes] for i in range(0, size, chunk_bytes))
        spec = [first, len(frames) - first, arr.dtype.str, shape]
        return msgpack.ExtType(ARRAY_EXT_CODE, msgpack.packb(spec, use_bin_type=True))

    packed = {"v": PROTOCOL_VERSION, **header}
    packed["v"] = PROTOCOL_VERSION
    frames[0] = msgpack.packb(packed, default=default, use_bin_type=True, datetime=False)
    return frames


def _buffer(frame: Any, index: int) -> memoryview:
    """A flat byte memoryview of one frame (bytes, bytearray, memoryview or zmq.Frame)."""
    if type(frame) is bytes:
        return memoryview(frame)
    obj = frame.buffer if hasattr(frame, "buffer") else frame
    try:
        mv = memoryview(obj)
        if mv.ndim != 1 or mv.format != "B":
            mv = mv.cast("B")
    except (TypeError, ValueError) as exc:
        raise ProtocolError("frame_count", f"frame {index} is not a contiguous bytes-like object: {exc}") from exc
    return mv


def nbytes(frames: Sequence) -> int:
    """Total number of bytes in a frame list (header plus buffers), for counters."""
    return sum(_buffer(f, i).nbytes for i, f in enumerate(frames))


def _is_int(x: Any) -> bool:
    return type(x) is int


class _ArrayBuilder:
    """The ``ext_hook`` of one decode: validates an array reference and rebuilds the array."""

    def __init__(self, frames: Sequence, limits: Limits) -> None:
        self.frames = frames
        self.limits = limits
        self.bufs: list[memoryview | None] = [None] * len(frames)
        self.used = bytearray(len(frames))
        self.used[0] = 1

    def buf(self, i: int) -> memoryview:
        mv = self.bufs[i]
        if mv is None:
            mv = self.bufs[i] = _buffer(self.frames[i], i)
        return mv

    def __call__(self, code: int, data: bytes) -> np.ndarray:
        if code != ARRAY_EXT_CODE:
            raise ProtocolError("header", f"unknown msgpack ext code {code}")
        if len(data) > _MAX_SPEC_BYTES:  # (unpacked below without the header's budgets)
            raise ProtocolError("header", f"array reference of {len(data)} bytes")
        try:
            spec = msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=True)
        except Exception as exc:
            raise ProtocolError("header", f"malformed array reference: {exc!r}") from exc
        if not (
            isinstance(spec, list) and len(spec) == 4 and _is_int(spec[0]) and _is_int(spec[1])
            and isinstance(spec[2], str) and isinstance(spec[3], list)
            and all(_is_int(d) and 0 <= d <= _MAX_DIM for d in spec[3])
        ):
            raise ProtocolError("header", f"malformed array reference {spec!r:.200}")
        first, count, dtype_str, shape = spec
        if len(shape) > self.limits.max_ndim:
            raise ProtocolError("header", f"array has {len(shape)} dims > max_ndim {self.limits.max_ndim}")
        if dtype_str not in ALLOWED_DTYPES:
            raise ProtocolError("dtype", f"dtype {dtype_str!r:.50} is not allowed")
        dtype = np.dtype(dtype_str)
        expected = math.prod(shape) * dtype.itemsize
        if expected > self.limits.max_array_bytes:
            raise ProtocolError("length", f"array of {expected} bytes > max_array_bytes {self.limits.max_array_bytes}")
        n = len(self.frames)
        if first < 1 or count < 0 or first + count > n:
            raise ProtocolError("frame_count", f"array refers to frames [{first}, {first + count}) of {n}")
        for i in range(first, first + count):
            if self.used[i]:
                raise ProtocolError("frame_count", f"frame {i} is used twice")
            self.used[i] = 1
        bufs = [self.buf(i) for i in range(first, first + count)]
        got = sum(b.nbytes for b in bufs)
        if got != expected:
            raise ProtocolError("length", f"array {dtype_str}{shape} needs {expected} bytes, frames hold {got}")
        try:
            if count == 1 and expected:
                arr = np.frombuffer(bufs[0], dtype=dtype).reshape(shape)
            else:
                flat = np.empty(expected, dtype=np.uint8)
                pos = 0
                for b in bufs:
                    flat[pos : pos + b.nbytes] = np.frombuffer(b, dtype=np.uint8)
                    pos += b.nbytes
                arr = flat.view(dtype).reshape(shape)
        except (ValueError, OverflowError, MemoryError) as exc:
            raise ProtocolError("length", f"cannot build array {dtype_str}{shape}: {exc}") from exc
        arr.flags.writeable = False
        return arr


def _ignore_ext(code: int, data: bytes) -> None:
    return None


def _unpack(head: bytes | memoryview, limits: Limits, ext_hook: Any) -> Any:
    """``msgpack.unpackb`` of a header frame within ``limits``'s budgets: containers, values and
    depth are bounded before anything is built (``ProtocolError("structure", ...)``)."""
    kwargs = limits.unpack_kwargs
    n = len(head)
    if n <= limits.max_depth:  # (as many values and levels as bytes at most: nothing to count)
        return msgpack.unpackb(head, raw=False, strict_map_key=True, use_list=True, ext_hook=ext_hook, **kwargs)
    wrap = bounds.MSGPACK_STACK - limits.max_depth
    # A frame of at most max_containers and max_items bytes holds no more containers or values;
    # counting its candidate bytes (~1 ns a byte) would only tell whether its depth needs
    # checking, and msgpack's stack checks it for less (~1.5 us) unless many levels must be filled.
    if n > limits.max_containers or n > limits.max_items or wrap > _CHEAP_WRAP:
        if bounds.check(head, limits.max_containers, limits.max_items) <= limits.max_depth:
            return msgpack.unpackb(head, raw=False, strict_map_key=True, use_list=True, ext_hook=ext_hook, **kwargs)
    # The depth is unknown: msgpack refuses nesting beyond its fixed stack, so the header goes
    # in under as many one-element lists as leave max_depth levels of that stack to it.
    try:
        obj = msgpack.unpackb(b"".join((_WRAPPERS[:wrap], head)), raw=False, strict_map_key=True, use_list=True,
                              ext_hook=ext_hook, **kwargs)
    except msgpack.StackError as exc:
        raise ProtocolError("structure", f"header nested deeper than {limits.max_depth} levels (max_depth)") from exc
    return functools.reduce(operator.getitem, itertools.repeat(0, wrap), obj)


_WRAPPERS = b"\x91" * bounds.MSGPACK_STACK  # fixarray of one element
_CHEAP_WRAP = 64  # wrapping levels that cost less than counting a frame's candidate bytes


def _version_of(head: bytes | memoryview, limits: Limits) -> Any:
    """Best-effort ``header['v']`` ignoring arrays (used to prefer a ``version`` error)."""
    try:
        obj = _unpack(head, limits, _ignore_ext)
    except Exception:
        return PROTOCOL_VERSION
    return obj.get("v") if isinstance(obj, dict) else PROTOCOL_VERSION


def _check_version(v: Any) -> None:
    if not (_is_int(v) and v == PROTOCOL_VERSION):
        raise ProtocolError("version", f"protocol version {v!r:.50}, expected {PROTOCOL_VERSION}")


def peek(head: Any, key: str, limits: Limits = DEFAULT_LIMITS) -> Any:
    """``header[key]`` of a header frame, arrays skipped (None when absent); ``ProtocolError`` if malformed.

    For a transport that must read a field before the arrays are built (comm/shm.py).
    """
    head = head if type(head) is bytes else _buffer(head, 0)
    if len(head) > limits.max_header_bytes:
        raise ProtocolError("header", f"header of {len(head)} bytes > max_header_bytes {limits.max_header_bytes}")
    try:
        obj = _unpack(head, limits, _ignore_ext)
    except ProtocolError:
        raise
    except Exception as exc:
        raise ProtocolError("header", f"header is not valid msgpack: {exc!r:.200}") from exc
    if not isinstance(obj, dict):
        raise ProtocolError("header", f"header top level is {type(obj).__name__}, not a dict")
    return obj.get(key)


def decode(frames: Sequence, *, limits: Limits = DEFAULT_LIMITS) -> dict:
    """Inverse of ``encode``. Raises ``ProtocolError(kind, detail)`` on anything malformed.

    Decoded arrays are read-only; single-frame arrays are views over the received buffers.
    """
    try:
        n = len(frames)
    except TypeError as exc:
        raise ProtocolError("frame_count", f"frames is not a sequence: {_type_name(frames)}") from exc
    if n == 0:
        raise ProtocolError("frame_count", "no frames")
    if n > limits.max_frames:
        raise ProtocolError("frame_count", f"{n} frames > max_frames {limits.max_frames}")
    builder = _ArrayBuilder(frames, limits)
    head = frames[0]
    if type(head) is not bytes:  # (arrays never refer to frame 0: the builder needs no view of it)
        head = _buffer(head, 0)
    if len(head) > limits.max_header_bytes:  # (a byte view: its length is its bytes)
        raise ProtocolError("header", f"header of {len(head)} bytes > max_header_bytes {limits.max_header_bytes}")
    try:
        obj = _unpack(head, limits, builder)
    except ProtocolError as exc:
        if exc.kind not in ("version", "structure"):
            _check_version(_version_of(head, limits))
        logger.debug("decode failed: %s", exc)
        raise
    except (RecursionError, msgpack.StackError) as exc:
        raise ProtocolError("structure", f"header nested deeper than {limits.max_depth} levels (max_depth)") from exc
    except Exception as exc:
        raise ProtocolError("header", f"header is not valid msgpack: {exc!r:.200}") from exc
    if not isinstance(obj, dict):
        raise ProtocolError("header", f"header top level is {type(obj).__name__}, not a dict")
    v = obj.get("v")
    if type(v) is not int or v != PROTOCOL_VERSION:
        _check_version(v)
    if n > 1 and not all(builder.used):
        unused = [i for i, u in enumerate(builder.used) if not u]
        raise ProtocolError("frame_count", f"{len(unused)} frames unused by any array (first {unused[0]})")
    return obj
