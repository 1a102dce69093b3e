"""A feed-forward model built from a list of layer entries, with a flat parameter buffer.

Spec entries (one string per entry; ACT is relu|tanh|sigmoid; KERNEL, STRIDE and PADDING are an
int or ``HxW`` such as ``3x5``)::

    dense:UNITS[:ACT]
    conv:OUT:KERNEL[:STRIDE[:PADDING]][:ACT]
    maxpool:KERNEL[:STRIDE]
    flatten | relu | tanh | sigmoid
    dropout:P

The loss (``softmax_xent``) is appended automatically and must not appear in the spec.

Shape rules: ``input_shape`` excludes the batch dimension. A ``dense`` entry on image-shaped input
(C, H, W) flattens it automatically (a ``Flatten`` layer is inserted into ``layers``, without
parameters, so names and seeds are unaffected). The last entry must give a flat vector of
``classes`` scores. Layers built from entry ``i`` get seed ``seed + i``, so the same spec and seed
give bit-identical models.

Parameters are named ``f"{entry_index}.W"`` / ``f"{entry_index}.b"``. ``bind_flat`` makes every
layer's params and grads views of two flat buffers (the form the engine sends and reduces).
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import numpy as np

from ..errors import UsageError
from .layers import (
    Array, Conv2D, Dense, Dropout, Flatten, Layer, MaxPool2D, ReLU, Sigmoid, SoftmaxCrossEntropy, Tanh,
    array_module_of, to_module,
)

__all__ = ["Model", "build_model", "parse_entry", "LAYER_TYPES", "ACTIVATIONS"]

log = logging.getLogger(__name__)

ACTIVATIONS: dict[str, Callable[[], Layer]] = {"relu": ReLU, "tanh": Tanh, "sigmoid": Sigmoid}
#: Entry types and their syntax, for error messages.
LAYER_TYPES: dict[str, str] = {
    "conv": "conv:OUT:KERNEL[:STRIDE[:PADDING]][:ACT]",
    "dense": "dense:UNITS[:ACT]",
    "dropout": "dropout:P",
    "flatten": "flatten",
    "maxpool": "maxpool:KERNEL[:STRIDE]",
    "relu": "relu",
    "sigmoid": "sigmoid",
    "tanh": "tanh",
}
LOSS_NAME = "softmax_xent"


class Model:
    """Layers in order plus the softmax cross-entropy loss; see the module docstring."""

    def __init__(
        self,
        layers: list[Layer],
        layer_entries: list[int],
        entries: list[str],
        input_shape: tuple[int, ...],
        classes: int,
        dtype: Any = np.float32,
    ) -> None:
        self.layers = layers
        #: index of the spec entry each layer comes from (same length as ``layers``)
        self.layer_entries = layer_entries
        self.entries = entries
        self.input_shape = tuple(input_shape)
        self.classes = classes
        self.dtype = np.dtype(dtype)
        self.loss = SoftmaxCrossEntropy()
        self.xp: Any = np
        if layers and hasattr(layers[0], "input_grad"):
            layers[0].input_grad = False  # d(loss)/d(data) is never used: skip that matmul

    # ---------------------------------------------------------------------------------------
    def forward(self, x: Array, train: bool = True) -> Array:
        """Logits (N, classes); ``x`` is cast to the model's dtype and array module first."""
        x = self.xp.asarray(x, dtype=self.dtype)
        for layer in self.layers:
            x = layer.forward(x, train=train)
        return x

    def loss_and_grad(self, x: Array, labels: Array) -> float:
        """Mean loss of a training forward pass; the gradients land in every layer's ``grads``."""
        loss = self.loss.forward(self.forward(x, train=True), labels)
        d = self.loss.backward()
        for layer in reversed(self.layers):
            d = layer.backward(d)  # None after a first layer that skips d(input)
        return loss

    def predict(self, x: Array) -> Array:
        """Logits of an inference pass (dropout off)."""
        return self.forward(x, train=False)

    # ---------------------------------------------------------------------------------------
    def _named(self, which: str) -> list[tuple[str, Array]]:
        out = []
        for layer, entry in zip(self.layers, self.layer_entries):
            for key, arr in getattr(layer, which).items():
                out.append((f"{entry}.{key}", arr))
        return out

    def named_params(self) -> list[tuple[str, Array]]:
        """``(name, array)`` in layer order, named ``"{entry_index}.{W|b}"``."""
        return self._named("params")

    def named_grads(self) -> list[tuple[str, Array]]:
        """Same names and order as ``named_params``."""
        return self._named("grads")

    @property
    def num_params(self) -> int:
        """Total number of parameter elements."""
        return sum(int(a.size) for _, a in self.named_params())

    def bind_flat(self, flat_params: Array, flat_grads: Array) -> None:
        """Copy the current params (and grads) into the two flat buffers, then make every layer's
        params/grads entries reshaped views of them, in ``named_params`` order.

        The buffers must be 1-D, of the model's dtype and length ``num_params``. Their array
        module becomes the model's (binding cupy buffers moves the model to the GPU).
        """
        n = self.num_params
        for what, buf in (("flat_params", flat_params), ("flat_grads", flat_grads)):
            if buf.ndim != 1 or buf.shape[0] != n or buf.dtype != self.dtype:
                raise ValueError(
                    f"{what} must be 1-D {self.dtype} of length {n}, got {buf.dtype} of shape {buf.shape}"
                )
        xp = array_module_of(flat_params)
        if array_module_of(flat_grads) is not xp:
            raise ValueError("flat_params and flat_grads must live in the same array module")
        offset = 0
        for layer in self.layers:
            for key in list(layer.params):
                p, g = layer.params[key], layer.grads[key]
                size, shape = int(p.size), p.shape
                pv = flat_params[offset:offset + size].reshape(shape)
                gv = flat_grads[offset:offset + size].reshape(shape)
                pv[...] = to_module(p, xp)
                gv[...] = to_module(g, xp)
                layer.params[key], layer.grads[key] = pv, gv
                offset += size
        self.xp = xp

    def to(self, xp: Any) -> "Model":
        """Move every layer to array module ``xp`` (numpy or cupy); returns self.

        Moving copies, so a previous ``bind_flat`` no longer applies; bind again afterwards.
        """
        for layer in self.layers:
            layer.to(xp)
        self.loss.to(xp)
        self.xp = xp
        return self

    def __repr__(self) -> str:
        return f"Model({self.entries!r}, input_shape={self.input_shape}, classes={self.classes})"


# -------------------------------------------------------------------------------------------
# Spec parsing and shape inference
# -------------------------------------------------------------------------------------------
def _fail(index: int, entry: str, message: str) -> UsageError:
    return UsageError(f"entry {index} {entry!r} {message}")


def _int(index: int, entry: str, field: str, what: str, minimum: int) -> int:
    try:
        v = int(field)
    except ValueError:
        raise _fail(index, entry, f"has a bad {what} {field!r}: expected an integer") from None
    if v < minimum:
        raise _fail(index, entry, f"has a bad {what} {v}: must be >= {minimum}")
    return v


def _size2(index: int, entry: str, field: str, what: str, minimum: int) -> tuple[int, int]:
    parts = field.split("x")
    if len(parts) == 1:
        v = _int(index, entry, parts[0], what, minimum)
        return v, v
    if len(parts) == 2:
        return _int(index, entry, parts[0], what, minimum), _int(index, entry, parts[1], what, minimum)
    raise _fail(index, entry, f"has a bad {what} {field!r}: expected N or HxW")


def parse_entry(index: int, entry: str) -> tuple[str, list[Any], str | None]:
    """Split one spec entry into (type, arguments, activation or None); UsageError if malformed."""
    if not isinstance(entry, str):
        raise UsageError(f"entry {index} {entry!r} is not a string")
    fields = [f.strip() for f in entry.strip().split(":")]
    kind, rest = fields[0].lower(), fields[1:]
    if kind == LOSS_NAME:
        raise _fail(index, entry, "is the loss, which is appended automatically; remove it from the spec")
    if kind not in LAYER_TYPES:
        raise _fail(index, entry, f"has unknown layer type {kind!r}; known types: {', '.join(LAYER_TYPES)}")
    act = None
    if kind in ("dense", "conv") and rest and rest[-1].lower() in ACTIVATIONS:
        act = rest.pop().lower()
    counts = {"dense": (1, 1), "conv": (2, 4), "maxpool": (1, 2), "dropout": (1, 1)}
    lo, hi = counts.get(kind, (0, 0))
    if not lo <= len(rest) <= hi:
        raise _fail(index, entry, f"has the wrong number of fields; expected {LAYER_TYPES[kind]}")
    if kind == "dense":
        args: list[Any] = [_int(index, entry, rest[0], "unit count", 1)]
    elif kind == "conv":
        args = [_int(index, entry, rest[0], "output channel count", 1), _size2(index, entry, rest[1], "kernel", 1)]
        args.append(_size2(index, entry, rest[2], "stride", 1) if len(rest) > 2 else (1, 1))
        args.append(_size2(index, entry, rest[3], "padding", 0) if len(rest) > 3 else (0, 0))
    elif kind == "maxpool":
        k = _size2(index, entry, rest[0], "kernel", 1)
        args = [k, _size2(index, entry, rest[1], "stride", 1) if len(rest) > 1 else k]
    elif kind == "dropout":
        try:
            p = float(rest[0])
        except ValueError:
            raise _fail(index, entry, f"has a bad probability {rest[0]!r}: expected a number") from None
        if not 0.0 <= p < 1.0:
            raise _fail(index, entry, f"has a bad probability {p}: must be in [0, 1)")
        args = [p]
    else:
        args = []
    return kind, args, act


def build_model(
    spec: list[str], input_shape: tuple[int, ...], classes: int, seed: int = 0, dtype: Any = np.float32
) -> Model:
    """Build a ``Model`` from spec entries, inferring every layer's shape; UsageError names the
    offending entry (index and text) for unknown types, malformed fields and shape mismatches."""
    if isinstance(spec, str) or not isinstance(spec, (list, tuple)):
        raise UsageError(f"the model spec must be a list of entries, got {spec!r}")
    if not spec:
        raise UsageError("the model spec is empty; give at least one layer entry, e.g. ['dense:10']")
    try:
        shape = in_shape = tuple(int(d) for d in input_shape)
    except (TypeError, ValueError):
        raise UsageError(f"the input shape must be a tuple of ints, got {input_shape!r}") from None
    if not shape or min(shape) < 1:
        raise UsageError(f"the input shape must be non-empty positive sizes, got {tuple(input_shape)}")
    if int(classes) < 1:
        raise UsageError(f"the number of classes must be >= 1, got {classes}")
    layers: list[Layer] = []
    layer_entries: list[int] = []
    parsed = [parse_entry(i, e) for i, e in enumerate(spec)]  # report syntax errors before shapes

    def add(layer: Layer, i: int) -> None:
        nonlocal shape
        try:
            shape = layer.output_shape(shape)
        except ValueError as exc:
            raise _fail(i, spec[i], str(exc)) from None
        if min(shape) < 1:
            raise _fail(i, spec[i], f"gives an empty output of shape {shape}")
        layers.append(layer)
        layer_entries.append(i)

    for i, (kind, args, act) in enumerate(parsed):
        s = seed + i
        if kind == "dense":
            if len(shape) != 1:
                log.debug("entry %d %r flattens input of shape %s", i, spec[i], shape)
                add(Flatten(), i)
            add(Dense(shape[0], args[0], seed=s, dtype=dtype), i)
        elif kind == "conv":
            if len(shape) != 3:
                raise _fail(i, spec[i], f"needs NCHW input (C, H, W) but gets {shape}")
            out, k, st, pad = args
            add(Conv2D(shape[0], out, k, stride=st, padding=pad, seed=s, dtype=dtype), i)
        elif kind == "maxpool":
            add(MaxPool2D(args[0], stride=args[1]), i)
        elif kind == "dropout":
            add(Dropout(args[0], seed=s), i)
        elif kind == "flatten":
            add(Flatten(), i)
        else:
            add(ACTIVATIONS[kind](), i)
        if act is not None:
            add(ACTIVATIONS[act](), i)
    if len(shape) != 1:
        raise UsageError(
            f"the last layer gives outputs of shape {shape}, not a flat vector of {classes} class scores; "
            f"end the spec with 'flatten' and 'dense:{classes}'"
        )
    if shape[0] != classes:
        raise UsageError(f"the last layer gives {shape[0]} outputs but the data has {classes} classes")
    model = Model(layers, layer_entries, [str(e) for e in spec], in_shape, int(classes), dtype)
    log.debug("built %r: %d layers, %d parameters", model, len(layers), model.num_params)
    return model
