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

import difflib
import logging
import math
import re
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ...errors import UsageError
from .layers import (
    Array, Conv2D, Dense, Dropout, Flatten, Layer, MaxPool2D, ReLU, Sigmoid, SoftmaxCrossEntropy, Tanh,
    array_module_of, to_module,
)

__all__ = ["Model", "build_model", "bind_layers", "bind_layer_grads", "parse_entry", "LayerKind", "register_layer", "LAYERS", "LAYER_TYPES",
           "ACTIVATIONS"]

log = logging.getLogger(__name__)

ACTIVATIONS: dict[str, Callable[[], Layer]] = {"relu": ReLU, "tanh": Tanh, "sigmoid": Sigmoid}


class _Fields:
    """The fields of one entry after its type, read with messages that name the entry."""

    def __init__(self, index: int, entry: str, rest: list[str]) -> None:
        self.index, self.entry, self.rest, self.count = index, entry, rest, len(rest)

    def __call__(self, i: int, what: str, minimum: int) -> int:
        return _int(self.index, self.entry, self.rest[i], what, minimum)

    def size2(self, i: int, what: str, minimum: int) -> tuple[int, int]:
        return _size2(self.index, self.entry, self.rest[i], what, minimum)

    def probability(self, i: int) -> float:
        try:
            p = float(self.rest[i])
        except ValueError:
            raise _fail(self.index, self.entry, f"has a bad probability {self.rest[i]!r}: expected a number") from None
        if not 0.0 <= p < 1.0:
            raise _fail(self.index, self.entry, f"has a bad probability {p}: must be in [0, 1)")
        return p


@dataclass(frozen=True)
class LayerKind:
    """One type of spec entry: a new layer is one ``Layer`` class and one ``register_layer(LayerKind(...))``.

    ``parse(field)`` turns the entry's fields after the type into arguments (``field(i, what,
    minimum)`` reads field i as an int, ``field.size2`` as N or HxW, ``field.number`` as a float,
    ``field.count`` is how many there are); ``build(args, shape, seed, dtype)`` returns the layers
    for an input of per-sample ``shape`` (raise ValueError when it does not fit).
    """

    name: str
    syntax: str
    fields: tuple[int, int] = (0, 0)
    parse: Callable[["_Fields"], list[Any]] = lambda f: []
    build: Callable[[list[Any], tuple[int, ...], int, Any], list[Layer]] = lambda a, s, seed, dt: []
    activation: bool = False  # accepts a trailing :ACT


#: Every entry type, by name (``register_layer`` adds one).
LAYERS: dict[str, LayerKind] = {}
#: Entry types and their syntax, for error messages.
LAYER_TYPES: dict[str, str] = {}


def register_layer(kind: LayerKind) -> LayerKind:
    """Make ``kind`` usable in model specs."""
    LAYERS[kind.name] = kind
    LAYER_TYPES[kind.name] = kind.syntax
    return kind


def _dense(args: list[Any], shape: tuple[int, ...], seed: int, dtype: Any) -> list[Layer]:
    if len(shape) != 1:  # image-shaped input: flatten first (no parameters, names unaffected)
        return [Flatten(), Dense(math.prod(shape), args[0], seed=seed, dtype=dtype)]
    return [Dense(shape[0], args[0], seed=seed, dtype=dtype)]


def _conv(args: list[Any], shape: tuple[int, ...], seed: int, dtype: Any) -> list[Layer]:
    if len(shape) != 3:
        raise ValueError(f"needs NCHW input (C, H, W) but gets {shape}")
    out, k, st, pad = args
    return [Conv2D(shape[0], out, k, stride=st, padding=pad, seed=seed, dtype=dtype)]


register_layer(LayerKind("conv", "conv:OUT:KERNEL[:STRIDE[:PADDING]][:ACT]", (2, 4), lambda f: [
    f(0, "output channel count", 1), f.size2(1, "kernel", 1),
    f.size2(2, "stride", 1) if f.count > 2 else (1, 1), f.size2(3, "padding", 0) if f.count > 3 else (0, 0)],
    _conv, activation=True))
register_layer(LayerKind("dense", "dense:UNITS[:ACT]", (1, 1), lambda f: [f(0, "unit count", 1)], _dense,
                         activation=True))
register_layer(LayerKind("dropout", "dropout:P", (1, 1), lambda f: [f.probability(0)],
                         lambda a, s, seed, dt: [Dropout(a[0], seed=seed)]))
register_layer(LayerKind("flatten", "flatten", build=lambda a, s, seed, dt: [Flatten()]))
register_layer(LayerKind("maxpool", "maxpool:KERNEL[:STRIDE]", (1, 2), lambda f: [
    f.size2(0, "kernel", 1), f.size2(1, "stride", 1) if f.count > 1 else f.size2(0, "kernel", 1)],
    lambda a, s, seed, dt: [MaxPool2D(a[0], stride=a[1])]))


def _activation(make: Callable[[], Layer]) -> Callable[[list[Any], tuple[int, ...], int, Any], list[Layer]]:
    return lambda args, shape, seed, dtype: [make()]


for _name, _act in ACTIVATIONS.items():
    register_layer(LayerKind(_name, _name, build=_activation(_act)))

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
        for layer in layers:  # the first layer that sees the data (a Flatten before it changes nothing)
            if hasattr(layer, "input_grad"):
                layer.input_grad = False  # d(loss)/d(data) is never used: skip that matmul
            if not isinstance(layer, Flatten):
                break

    # ---------------------------------------------------------------------------------------
    def forward(self, x: Array, train: bool = True) -> Array:
        """Logits (N, classes); ``x`` is cast to the model's dtype and array module first."""
        x = self.xp.asarray(x, dtype=self.dtype)
        for layer in self.layers:
            x = layer.forward(x, train=train)
        return x

    def loss_and_grad(self, x: Array, labels: Array, on_backward: Callable[[int], None] | None = None,
                      scale: float = 1.0) -> float:
        """Mean loss of a training forward pass; the gradients (of ``scale`` x the mean loss) land
        in every layer's ``grads``.

        ``on_backward(i)`` is called once layer ``i``'s gradients are final (from the last layer
        to the first), so they can leave while the layers below are still in backward."""
        loss = self.loss.forward(self.forward(x, train=True), labels)
        d = self.loss.backward(scale)
        for i in range(len(self.layers) - 1, -1, -1):
            d = self.layers[i].backward(d)  # None after a first layer that skips d(input)
            if on_backward is not None:
                on_backward(i)
        return loss

    def param_offsets(self) -> list[int | None]:
        """Per layer, the flat offset of its first parameter (None for a layer without any)."""
        out: list[int | None] = []
        offset = 0
        for layer in self.layers:
            out.append(offset if layer.params else None)
            offset += sum(int(a.size) for a in layer.params.values())
        return out

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
        """Copy the current params into ``flat_params`` and make every layer's params/grads entries
        reshaped views of the two buffers, in ``named_params`` order (gradients are what the next
        backward writes, so ``flat_grads`` is taken as it is, not filled).

        The buffers must be 1-D, of the model's dtype and length ``num_params``. Their array
        module becomes the model's (binding cupy buffers moves the model to the GPU).
        """
        bind_layers(self.layers, flat_params, flat_grads)
        self.xp = array_module_of(flat_params)

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


def bind_layer_grads(layers: list[Layer], flat_grads: Array) -> None:
    """Make the layers' grads entries views of ``flat_grads`` (``bind_flat``'s layout) without
    copying: for a member that alternates two gradient buffers or moves them (send buffers)."""
    offset = 0
    for layer in layers:
        for key, g in layer.grads.items():
            layer.grads[key] = flat_grads[offset:offset + g.size].reshape(g.shape)
            offset += g.size
    if offset != flat_grads.size:
        raise ValueError(f"flat_grads has {flat_grads.size} elements, the layers {offset}")


def bind_layers(layers: list[Layer], flat_params: Array, flat_grads: Array) -> None:
    """``Model.bind_flat`` for any list of layers (a partition's slices, say)."""
    n = sum(int(p.size) for layer in layers for p in layer.params.values())
    dtype = next((p.dtype for layer in layers for p in layer.params.values()), flat_params.dtype)
    for what, buf in (("flat_params", flat_params), ("flat_grads", flat_grads)):
        if buf.ndim != 1 or buf.shape[0] != n or buf.dtype != dtype:
            raise ValueError(f"{what} must be 1-D {dtype} of length {n}, got {buf.dtype} of shape {buf.shape}")
    xp = array_module_of(flat_params)
    if array_module_of(flat_grads) is not xp:
        raise ValueError("flat_params and flat_grads must live in the same array module")
    offset = 0
    for layer in layers:
        for key in list(layer.params):
            p = layer.params[key]
            size, shape = int(p.size), p.shape
            pv = flat_params[offset:offset + size].reshape(shape)
            gv = flat_grads[offset:offset + size].reshape(shape)
            pv[...] = to_module(p, xp)  # gradients are outputs of the next backward: not copied
            layer.params[key], layer.grads[key] = pv, gv
            offset += size


# -------------------------------------------------------------------------------------------
# Spec parsing and shape inference
# -------------------------------------------------------------------------------------------
def _fail(index: int, entry: str, message: str) -> UsageError:
    return UsageError(f"config key 'model': entry {index} {entry!r} {message}")


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
    """Split one spec entry into (type, arguments, activation or None); UsageError if malformed,
    naming the field at fault (an unknown activation with the known ones, a missing or extra field)."""
    if not isinstance(entry, str):
        raise UsageError(f"config key 'model': entry {index} {entry!r} is not a string")
    fields = [f.strip() for f in entry.strip().split(":")]
    name, rest = fields[0].lower(), fields[1:]
    if name == LOSS_NAME:
        raise _fail(index, entry, "is the loss, which is appended automatically; remove it from the spec")
    kind = LAYERS.get(name)
    if kind is None:
        raise _fail(index, entry, f"has unknown layer type {name!r}{_did_you_mean(name, LAYERS)}; "
                                  f"known types: {', '.join(sorted(LAYERS))}")
    act = None
    if kind.activation and rest and rest[-1].lower() in ACTIVATIONS:
        act = rest.pop().lower()
    lo, hi = kind.fields
    if "" in rest:
        raise _fail(index, entry, f"has an empty field (a stray ':'); expected {kind.syntax}")
    word = rest[-1].lower() if lo < len(rest) <= hi + 1 and _WORD.fullmatch(rest[-1]) else None
    if word is not None and not (kind.activation and word in ACTIVATIONS):  # a name in the activation's place
        if not kind.activation:
            where = (f"put {word!r} in an entry of its own" if word in ACTIVATIONS
                     else f"expected {kind.syntax}")
            raise _fail(index, entry, f"has a field {rest[-1]!r}, but {name} takes no activation; {where}")
        raise _fail(index, entry, f"has unknown activation {rest[-1]!r}{_did_you_mean(word, ACTIVATIONS)}; "
                                  f"activations: {', '.join(ACTIVATIONS)} (expected {kind.syntax})")
    if len(rest) < lo:
        missing = _field_names(kind)[len(rest):lo]
        raise _fail(index, entry, f"has the wrong number of fields: {' and '.join(missing) or 'a field'} "
                                  f"{'is' if len(missing) < 2 else 'are'} missing; expected {kind.syntax}")
    if len(rest) > hi:
        extra = ":".join(rest[hi:])
        raise _fail(index, entry, f"has the wrong number of fields: {extra!r} {_too_many(len(rest) - hi)} "
                                  f"for {name}; expected {kind.syntax}")
    return name, kind.parse(_Fields(index, entry, rest)), act


#: a field that is a name, not a number or ``HxW`` size: where an activation would be
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _too_many(n: int) -> str:
    return "is one field too many" if n == 1 else f"are {n} fields too many"


def _field_names(kind: LayerKind) -> list[str]:
    """The names of ``kind``'s fields after its type, from its syntax (``dense:UNITS[:ACT]``: UNITS)."""
    return [t for t in re.findall(r"[A-Z][A-Z_]*", kind.syntax) if t != "ACT"]


def _did_you_mean(word: str, known: Any) -> str:
    hint = difflib.get_close_matches(word, list(known), n=1)
    return f" (did you mean {hint[0]!r}?)" if hint else ""


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
        try:
            built = LAYERS[kind].build(args, shape, seed + i, dtype)
        except ValueError as exc:
            raise _fail(i, spec[i], str(exc)) from None
        for layer in built:
            add(layer, i)
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
