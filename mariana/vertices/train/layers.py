"""Neural-network layers written once against an array module ``xp`` (numpy, or cupy on a GPU).

Every layer has ``forward(x, train=True) -> y``, ``backward(dy) -> dx``, ``params`` and ``grads``
(dicts with the same keys and shapes; empty for parameter-free layers) and ``to(xp)``.

Contract with the training engine, which rebinds ``params``/``grads`` entries to views of one
flat buffer:

- forward and backward read parameters from ``self.params[name]`` at call time, never a copy;
- backward writes gradients INTO ``self.grads[name]`` (``g[...] = ...``), never rebinding them.

The layer math never calls numpy directly: the module comes from the input through
``array_module_of``. Host-side randomness (initialisation, dropout masks) uses
``np.random.default_rng`` and is moved with ``xp.asarray``, so numpy and cupy runs agree.
Images are NCHW. Convolution and pooling gather windows with one strided slice per kernel
position (im2col) and scatter them back the same way (col2im); this is a deterministic
scatter-add (no atomics), so GPU results do not depend on thread scheduling.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import math
from abc import ABC, abstractmethod
from typing import Any, Iterator

import numpy as np

__all__ = [
    "array_module_of", "to_module", "Layer", "Dense", "ReLU", "Sigmoid", "Tanh", "Dropout", "Flatten",
    "Conv2D", "MaxPool2D", "SoftmaxCrossEntropy", "shapes_only",
]

Array = Any  # numpy.ndarray or cupy.ndarray


def array_module_of(x: Any) -> Any:
    """cupy if ``x`` is a cupy array, else numpy; cupy is imported only when actually needed."""
    if type(x).__module__.startswith("cupy"):
        import cupy  # optional dependency: pip install 'mariana-bsp[gpu]'

        return cupy
    return np


def to_module(a: Array, xp: Any) -> Array:
    """``a`` as an array of module ``xp`` (device -> host needs ``.get()``; numpy refuses cupy)."""
    if xp is np:
        return a.get() if array_module_of(a) is not np else a
    return xp.asarray(a)


def _pair(v: int | tuple[int, int] | list[int], what: str) -> tuple[int, int]:
    """Normalise an int-or-pair hyperparameter to a pair of ints."""
    if isinstance(v, (tuple, list)):
        if len(v) != 2:
            raise ValueError(f"{what} must be an int or a pair, got {v!r}")
        a, b = int(v[0]), int(v[1])
    else:
        a = b = int(v)
    return a, b


def _out_size(size: int, k: int, s: int) -> int:
    return (size - k) // s + 1


def _im2col(xp: Any, x: Array, kh: int, kw: int, sh: int, sw: int, oh: int, ow: int) -> Array:
    """Windows of ``x`` (N, C, H, W) as (N, C, kh, kw, oh, ow): one strided slice per kernel cell."""
    n, c = x.shape[:2]
    cols = xp.empty((n, c, kh, kw, oh, ow), dtype=x.dtype)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = x[:, :, i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw]
    return cols


def _im2rows(xp: Any, x: Array, kh: int, kw: int, sh: int, sw: int, oh: int, ow: int) -> Array:
    """Windows of ``x`` (N, C, H, W) as (N, oh, ow, C, kh, kw): the rows of the convolution's
    matrix product, written in place, so the product needs no transposed copy of them."""
    n, c = x.shape[:2]
    rows = xp.empty((n, oh, ow, c, kh, kw), dtype=x.dtype)
    for i in range(kh):
        for j in range(kw):
            rows[..., i, j] = x[:, :, i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw].transpose(0, 2, 3, 1)
    return rows


def _col2im(xp: Any, cols: Array, shape: tuple[int, ...], sh: int, sw: int) -> Array:
    """Inverse of ``_im2col``: sum every window cell back onto ``shape`` (overlaps add up)."""
    _, _, kh, kw, oh, ow = cols.shape
    out = xp.zeros(shape, dtype=cols.dtype)
    for i in range(kh):
        for j in range(kw):
            out[:, :, i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw] += cols[:, :, i, j]
    return out


class Layer(ABC):
    """Base class: parameter-free by default; ``to(xp)`` moves params and grads.

    Model parallelism: a layer with ``split_axes`` (parameter name -> axis of its output units or
    channels) can be cut into ``part(p, parts)`` layers that each compute a slice of the output
    from the whole input; ``out_attr`` names the attribute holding the output size. Layers
    without ``split_axes`` act on each slice of their input independently.
    """

    split_axes: dict[str, int] = {}
    out_attr: str = ""

    def __init__(self) -> None:
        self.params: dict[str, Array] = {}
        self.grads: dict[str, Array] = {}

    def part(self, p: int, parts: int) -> "Layer":
        """Output slice ``p`` of ``parts`` equal slices of this layer, parameters copied from it."""
        size = getattr(self, self.out_attr)
        if size % parts:
            raise ValueError(f"{size} outputs are not divisible into {parts} partitions")
        n = size // parts
        new = copy.copy(self)
        new.params = {}
        for key, arr in self.params.items():
            index = [slice(None)] * arr.ndim
            index[self.split_axes[key]] = slice(p * n, (p + 1) * n)
            new.params[key] = arr[tuple(index)].copy()
        new.grads = {k: v * 0 for k, v in new.params.items()}
        setattr(new, self.out_attr, n)
        return new

    @classmethod
    def join(cls, key: str, slices: list[Array]) -> Array:
        """The whole parameter ``key`` from the partitions' slices (inverse of ``part``)."""
        return np.concatenate(slices, axis=cls.split_axes[key])

    @abstractmethod
    def forward(self, x: Array, train: bool = True) -> Array:
        """The layer's output for input ``x`` (keeps what backward needs)."""

    @abstractmethod
    def backward(self, dy: Array) -> Array:
        """d(loss)/d(input) from d(loss)/d(output); parameter gradients land in ``grads``."""

    def output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        """Per-sample output shape (no batch dim); raises ValueError if the input does not fit."""
        return tuple(input_shape)

    def to(self, xp: Any) -> "Layer":
        """Move params and grads to array module ``xp`` (numpy or cupy); returns self."""
        self.params = {k: to_module(v, xp) for k, v in self.params.items()}
        self.grads = {k: to_module(v, xp) for k, v in self.grads.items()}
        return self

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


#: Set inside ``shapes_only()`` (per thread and task, as a context variable is).
_shapes_only: contextvars.ContextVar[bool] = contextvars.ContextVar("mariana_shapes_only", default=False)


@contextlib.contextmanager
def shapes_only() -> Iterator[None]:
    """Build layers with zero weights instead of drawing them: for the sizes and names of a
    model (a master placing shards), not for training. Drawing 10M normal numbers takes ~0.25 s."""
    token = _shapes_only.set(True)
    try:
        yield
    finally:
        _shapes_only.reset(token)


def _he_normal(shape: tuple[int, ...], fan_in: int, seed: int, dtype: Any) -> np.ndarray:
    """He (Kaiming) normal init ``N(0, sqrt(2 / fan_in))`` drawn on the host, cast to ``dtype``."""
    if _shapes_only.get():
        return np.zeros(shape, dtype=dtype)
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * math.sqrt(2.0 / fan_in)).astype(dtype)


class Dense(Layer):
    """Fully connected ``y = x @ W + b`` with ``W`` (in, out).

    Init: ``W ~ N(0, sqrt(2 / in_features))`` (He normal, drawn with
    ``np.random.default_rng(seed)``), ``b = 0``. He is used regardless of the activation that
    follows, which a layer cannot know; it is also a sound scale for tanh/sigmoid nets this size.
    """

    split_axes = {"W": 1, "b": 0}
    out_attr = "out_features"

    def __init__(self, in_features: int, out_features: int, seed: int = 0, dtype: Any = np.float32) -> None:
        super().__init__()
        if in_features < 1 or out_features < 1:
            raise ValueError(f"Dense needs positive sizes, got {in_features} -> {out_features}")
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.params = {
            "W": _he_normal((self.in_features, self.out_features), self.in_features, seed, dtype),
            "b": np.zeros(self.out_features, dtype=dtype),
        }
        self.grads = {k: np.zeros(v.shape, v.dtype) for k, v in self.params.items()}  # lazily zeroed pages
        self._x: Array | None = None
        self.input_grad = True  # Model turns it off for the first layer

    def output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        if tuple(input_shape) != (self.in_features,):
            raise ValueError(f"needs flat input ({self.in_features},) but gets {tuple(input_shape)}")
        return (self.out_features,)

    def forward(self, x: Array, train: bool = True) -> Array:
        if x.ndim != 2 or x.shape[1] != self.in_features:
            raise ValueError(f"Dense({self.in_features}, {self.out_features}) got input of shape {x.shape}")
        self._x = x
        return x @ self.params["W"] + self.params["b"]

    def backward(self, dy: Array) -> Array:
        x = self._x
        xp = array_module_of(dy)
        xp.matmul(x.T, dy, out=self.grads["W"])  # straight into the (flat-buffer) gradient view
        dy.sum(axis=0, out=self.grads["b"])
        if not self.input_grad:  # the first layer: nobody needs d(input)
            return None
        return dy @ self.params["W"].T

    def __repr__(self) -> str:
        return f"Dense({self.in_features}, {self.out_features})"


class ReLU(Layer):
    """``max(x, 0)``; the gradient at exactly 0 is taken as 0."""

    def forward(self, x: Array, train: bool = True) -> Array:
        self._mask = x > 0
        return x * self._mask

    def backward(self, dy: Array) -> Array:
        return dy * self._mask


class Sigmoid(Layer):
    """Logistic ``1 / (1 + exp(-x))``, computed as ``(tanh(x/2) + 1) / 2`` so it never overflows."""

    def forward(self, x: Array, train: bool = True) -> Array:
        xp = array_module_of(x)
        self._y = 0.5 * (xp.tanh(0.5 * x) + 1.0)
        return self._y

    def backward(self, dy: Array) -> Array:
        y = self._y
        return dy * y * (1.0 - y)


class Tanh(Layer):
    """Hyperbolic tangent."""

    def forward(self, x: Array, train: bool = True) -> Array:
        xp = array_module_of(x)
        self._y = xp.tanh(x)
        return self._y

    def backward(self, dy: Array) -> Array:
        y = self._y
        return dy * (1.0 - y * y)


class Dropout(Layer):
    """Inverted dropout: in training zero each unit with probability ``p`` and scale the rest by
    ``1 / (1 - p)``; identity when ``train=False``.

    The mask is drawn on the host with ``np.random.default_rng(seed)``, which advances once per
    training call, so a run is reproducible and identical on numpy and cupy.
    """

    def __init__(self, p: float, seed: int = 0) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = float(p)
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self._mask: Array | None = None

    def forward(self, x: Array, train: bool = True) -> Array:
        if not train or self.p == 0.0:
            self._mask = None
            return x
        xp = array_module_of(x)
        keep = self.rng.random(x.shape) >= self.p
        self._mask = xp.asarray((keep / (1.0 - self.p)).astype(x.dtype))
        return x * self._mask

    def backward(self, dy: Array) -> Array:
        return dy if self._mask is None else dy * self._mask

    def __repr__(self) -> str:
        return f"Dropout({self.p})"


class Flatten(Layer):
    """(N, ...) -> (N, prod(...)), e.g. NCHW feature maps into a Dense layer."""

    def output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        return (math.prod(input_shape),)

    def forward(self, x: Array, train: bool = True) -> Array:
        self._shape = x.shape
        return x.reshape(x.shape[0], -1)

    def backward(self, dy: Array) -> Array:
        return None if dy is None else dy.reshape(self._shape)  # None: the layer above skipped d(input)


class Conv2D(Layer):
    """2-D convolution on NCHW input, as cross-correlation (like every DL framework).

    ``W`` is (out, in, kh, kw), ``b`` is (out,). ``kernel_size``, ``stride`` and ``padding``
    (zeros, both sides) are an int or an (h, w) pair; the output size is floored.
    Init: ``W ~ N(0, sqrt(2 / (in * kh * kw)))`` (He normal, ``np.random.default_rng(seed)``),
    ``b = 0``. Implemented as im2col + one tensordot; backward scatters back with col2im.
    """

    split_axes = {"W": 0, "b": 0}
    out_attr = "out_channels"

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] = 0,
        seed: int = 0,
        dtype: Any = np.float32,
    ) -> None:
        super().__init__()
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        self.kernel_size = _pair(kernel_size, "kernel_size")
        self.stride = _pair(stride, "stride")
        self.padding = _pair(padding, "padding")
        if self.in_channels < 1 or self.out_channels < 1:
            raise ValueError(f"Conv2D needs positive channel counts, got {in_channels} -> {out_channels}")
        if min(self.kernel_size) < 1 or min(self.stride) < 1 or min(self.padding) < 0:
            raise ValueError(
                f"Conv2D needs kernel >= 1, stride >= 1, padding >= 0; got {self.kernel_size}, "
                f"{self.stride}, {self.padding}"
            )
        kh, kw = self.kernel_size
        shape = (self.out_channels, self.in_channels, kh, kw)
        self.params = {
            "W": _he_normal(shape, self.in_channels * kh * kw, seed, dtype),
            "b": np.zeros(self.out_channels, dtype=dtype),
        }
        self.grads = {k: np.zeros(v.shape, v.dtype) for k, v in self.params.items()}  # lazily zeroed pages
        self.input_grad = True  # Model turns it off for the first layer

    def output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        if len(input_shape) != 3:
            raise ValueError(f"needs NCHW input (C, H, W) but gets {tuple(input_shape)}")
        c, h, w = input_shape
        if c != self.in_channels:
            raise ValueError(f"expects {self.in_channels} input channels but gets {c}")
        (kh, kw), (sh, sw), (ph, pw) = self.kernel_size, self.stride, self.padding
        if kh > h + 2 * ph or kw > w + 2 * pw:
            raise ValueError(f"kernel {kh}x{kw} is larger than the padded input {h + 2 * ph}x{w + 2 * pw}")
        return (self.out_channels, _out_size(h + 2 * ph, kh, sh), _out_size(w + 2 * pw, kw, sw))

    def forward(self, x: Array, train: bool = True) -> Array:
        if x.ndim != 4:
            raise ValueError(f"Conv2D needs NCHW input, got shape {x.shape}")
        xp = array_module_of(x)
        _, oh, ow = self.output_shape(x.shape[1:])
        (kh, kw), (sh, sw), (ph, pw) = self.kernel_size, self.stride, self.padding
        n, c, h, w = x.shape
        if ph or pw:
            xpad = xp.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=x.dtype)
            xpad[:, :, ph:ph + h, pw:pw + w] = x
        else:
            xpad = x
        self._xshape, self._pshape = x.shape, xpad.shape
        self._cols = _im2rows(xp, xpad, kh, kw, sh, sw, oh, ow)  # (N, oh, ow, C, kh, kw)
        W = self.params["W"]
        k = c * kh * kw
        # the matrix product tensordot would make, without its copy of the windows
        y = xp.dot(self._cols.reshape(n * oh * ow, k), W.transpose(1, 2, 3, 0).reshape(k, -1))
        y = y.reshape(n, oh, ow, -1)  # (N, oh, ow, O)
        y += self.params["b"]
        return xp.ascontiguousarray(y.transpose(0, 3, 1, 2))

    def backward(self, dy: Array) -> Array:
        xp = array_module_of(dy)
        cols, W = self._cols, self.params["W"]
        n, oh, ow = cols.shape[:3]
        dy_rows = dy.transpose(1, 0, 2, 3).reshape(dy.shape[1], n * oh * ow)  # (O, N oh ow), as tensordot does
        self.grads["W"][...] = xp.dot(dy_rows, cols.reshape(n * oh * ow, -1)).reshape(W.shape)
        self.grads["b"][...] = dy.sum(axis=(0, 2, 3))
        if not self.input_grad:  # the first layer: nobody needs d(input)
            return None
        dcols = xp.tensordot(W, dy, axes=(0, 1))  # (C, kh, kw, N, oh, ow)
        dcols = dcols.transpose(3, 0, 1, 2, 4, 5)
        dxpad = _col2im(xp, dcols, self._pshape, *self.stride)
        (ph, pw), (h, w) = self.padding, self._xshape[2:]
        return dxpad[:, :, ph:ph + h, pw:pw + w] if (ph or pw) else dxpad

    def __repr__(self) -> str:
        return (f"Conv2D({self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding})")


class MaxPool2D(Layer):
    """Max pooling on NCHW input, no padding, floored output size; ``stride`` defaults to the kernel.

    Ties are broken deterministically: the gradient goes to the FIRST maximal element of the
    window in row-major order (computed explicitly, not left to ``argmax`` of either module).
    Overlapping windows (stride < kernel) add their gradients.
    """

    def __init__(self, kernel_size: int | tuple[int, int], stride: int | tuple[int, int] | None = None) -> None:
        super().__init__()
        self.kernel_size = _pair(kernel_size, "kernel_size")
        self.stride = self.kernel_size if stride is None else _pair(stride, "stride")
        if min(self.kernel_size) < 1 or min(self.stride) < 1:
            raise ValueError(f"MaxPool2D needs kernel >= 1 and stride >= 1; got {self.kernel_size}, {self.stride}")

    def output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        if len(input_shape) != 3:
            raise ValueError(f"needs NCHW input (C, H, W) but gets {tuple(input_shape)}")
        c, h, w = input_shape
        (kh, kw), (sh, sw) = self.kernel_size, self.stride
        if kh > h or kw > w:
            raise ValueError(f"kernel {kh}x{kw} is larger than the input {h}x{w}")
        return (c, _out_size(h, kh, sh), _out_size(w, kw, sw))

    def forward(self, x: Array, train: bool = True) -> Array:
        if x.ndim != 4:
            raise ValueError(f"MaxPool2D needs NCHW input, got shape {x.shape}")
        xp = array_module_of(x)
        _, oh, ow = self.output_shape(x.shape[1:])
        (kh, kw), (sh, sw) = self.kernel_size, self.stride
        n, c = x.shape[:2]
        cols = _im2col(xp, x, kh, kw, sh, sw, oh, ow).reshape(n, c, kh * kw, oh, ow)
        y = cols.max(axis=2)
        cell = xp.arange(kh * kw).reshape(1, 1, kh * kw, 1, 1)
        # index of the first maximal cell; a window of NaNs gets kh*kw (no cell receives gradient)
        self._first = xp.where(cols == y[:, :, None], cell, kh * kw).min(axis=2)
        self._cell, self._xshape = cell, x.shape
        return y

    def backward(self, dy: Array) -> Array:
        xp = array_module_of(dy)
        (kh, kw), (sh, sw) = self.kernel_size, self.stride
        n, c, oh, ow = dy.shape
        dcols = (self._cell == self._first[:, :, None]) * dy[:, :, None]
        return _col2im(xp, dcols.reshape(n, c, kh, kw, oh, ow), self._xshape, sh, sw)

    def __repr__(self) -> str:
        return f"MaxPool2D(kernel_size={self.kernel_size}, stride={self.stride})"


class SoftmaxCrossEntropy(Layer):
    """Softmax + cross-entropy against integer class labels, averaged over the batch.

    ``forward(logits, labels)`` returns the mean loss as a Python float (a host sync on cupy);
    ``backward()`` returns d(mean loss)/d(logits) = (softmax - onehot) / N. Stable for any
    logits: the row max is subtracted before ``exp``.
    """

    def forward(self, logits: Array, labels: Array, train: bool = True) -> float:  # type: ignore[override]
        xp = array_module_of(logits)
        labels = xp.asarray(labels)
        if logits.ndim != 2 or labels.shape != (logits.shape[0],):
            raise ValueError(f"need logits (N, classes) and labels (N,), got {logits.shape} and {labels.shape}")
        shifted = logits - logits.max(axis=1, keepdims=True)
        logp = shifted - xp.log(xp.exp(shifted).sum(axis=1, keepdims=True))
        rows = xp.arange(logits.shape[0])
        self._probs, self._labels, self._rows = xp.exp(logp), labels, rows
        return float(-logp[rows, labels].mean())

    def backward(self, dy: float = 1.0) -> Array:  # type: ignore[override]
        """Gradient of ``dy * mean loss`` with respect to the logits of the last forward."""
        d = self._probs.copy()
        d[self._rows, self._labels] -= 1.0
        d *= dy / d.shape[0]
        return d
