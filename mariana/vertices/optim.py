"""Optimizers that act in place on one contiguous parameter slice (a parameter shard's).

``opt.init_state(param)`` makes the per-slice state; ``opt.step(param, grad, state, stats)``
updates ``param`` in place from the summed gradient of every replica. ``opt.stats`` says what
each replica sends beside its gradient slice, and ``replica_stats`` computes it:

- ``sgd``, ``momentum`` (with optional weight decay): nothing extra.
- ``adagrad``: exact AdaGrad on the synchronous (summed) gradient, ``G += g^2``. The shard owns
  the whole state, so nothing extra is exchanged and N replicas with batch B/N equal one replica
  with batch B.
- ``adagrad_dp``: Mariana's data-parallel AdaGrad, which accumulates every replica's own squared
  gradient, ``G += sum_r g_r^2``; each replica sends ``g_r^2`` too, doubling the exchange.
- ``adagrad_approx``: our approximation of ``adagrad_dp``. Each replica sends, per block of
  ``block`` consecutive elements, the sum of its squared gradient over the block; the shard keeps
  one accumulator per block and uses ``G_block / block`` for every element of the block. The
  extra exchange shrinks from 1x to 1/block of the gradient (16x less at the default block=16).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import UsageError
from .layers import array_module_of

__all__ = ["Optimizer", "SGD", "AdaGrad", "make_optimizer", "replica_stats", "OPTIMIZERS"]

OPTIMIZERS = ("sgd", "momentum", "adagrad", "adagrad_dp", "adagrad_approx")
#: Elements updated per pass: the step's temporaries stay this small (and in cache) instead of
#: the size of the shard. Every update is elementwise, so chunking changes no bit of the result.
CHUNK = 1 << 16


@dataclass
class Optimizer(ABC):
    """Base: ``lr``, ``weight_decay``; ``stats`` is None, ``"sq"`` or ``"block"``."""

    lr: float
    weight_decay: float = 0.0
    stats: str | None = None
    block: int = 16

    def init_state(self, param: Any) -> dict[str, Any]:
        return {}

    def _decayed(self, param: Any, grad: Any) -> Any:
        return grad + self.weight_decay * param if self.weight_decay else grad

    def step(self, param: Any, grad: Any, state: dict[str, Any], stats: Any = None, at: int = 0) -> None:
        """Update ``param[at:at + len(grad)]`` in place from the summed gradient (and its
        statistics), ``CHUNK`` elements at a time; ``state`` is the whole slice's. ``at`` must be a
        multiple of ``block`` when the statistics are per block (a bucket of a shard).

        ``grad`` may be a list of the members' gradients: they are summed in list order chunk by
        chunk (bit for bit what summing them first gives, in one pass over memory instead of two)."""
        if stats is None and self.stats is not None:
            raise ValueError(f"{type(self).__name__} with stats={self.stats!r} needs the replicas' statistics")
        grads = grad if isinstance(grad, list) else [grad]
        size = int(grads[0].size)
        per_block = self.stats == "block"
        chunk = max(self.block, CHUNK // self.block * self.block)  # whole blocks of adagrad_approx
        total = None if len(grads) == 1 else array_module_of(grads[0]).empty(min(chunk, size), dtype=grads[0].dtype)
        for lo in range(at, at + size, chunk):
            hi = min(at + size, lo + chunk)
            blocks = slice(lo // self.block, -(-hi // self.block))
            part = {k: v[blocks] if per_block and k == "G" else v[lo:hi] for k, v in state.items()}
            local = slice((lo - at) // self.block, -(-(hi - at) // self.block)) if per_block else slice(lo - at, hi - at)
            s = None if stats is None else stats[local]
            if total is None:
                g = grads[0][lo - at:hi - at]
            else:
                g = total[:hi - lo]
                np.add(grads[0][lo - at:hi - at], grads[1][lo - at:hi - at], out=g)
                for other in grads[2:]:
                    np.add(g, other[lo - at:hi - at], out=g)
            self._step(param[lo:hi], g, part, s, total is not None)

    @abstractmethod
    def _step(self, param: Any, grad: Any, state: dict[str, Any], stats: Any, scratch: bool = False) -> None:
        """Update one chunk in place (every optimizer is elementwise, so chunks are independent);
        ``scratch``: ``grad`` is the step's own sum buffer, which may be overwritten."""


@dataclass
class SGD(Optimizer):
    """Plain SGD, or heavy-ball momentum when ``momentum > 0``: ``v = m v + g; p -= lr v``."""

    momentum: float = 0.0

    def init_state(self, param: Any) -> dict[str, Any]:
        return {"v": np.zeros_like(param)} if self.momentum else {}

    def _step(self, param: Any, grad: Any, state: dict[str, Any], stats: Any, scratch: bool = False) -> None:
        if scratch and not self.momentum and not self.weight_decay:  # no temporary: lr * g in place
            np.multiply(grad, np.float32(self.lr) if grad.dtype == np.float32 else self.lr, out=grad)
            param -= grad
            return
        g = self._decayed(param, grad)
        if self.momentum:
            v = state["v"]
            v *= self.momentum
            v += g
            g = v
        param -= self.lr * g


@dataclass
class AdaGrad(Optimizer):
    """AdaGrad: ``p -= lr g / (sqrt(G) + eps)``; what feeds ``G`` depends on ``stats`` (see module)."""

    eps: float = 1e-8

    def init_state(self, param: Any) -> dict[str, Any]:
        if self.stats == "block":
            return {"G": np.zeros(-(-param.size // self.block), dtype=param.dtype)}
        return {"G": np.zeros_like(param)}

    def _step(self, param: Any, grad: Any, state: dict[str, Any], stats: Any, scratch: bool = False) -> None:
        g = self._decayed(param, grad)
        G = state["G"]
        if self.stats is None:
            G += g * g
            scale = np.sqrt(G)
        else:
            G += stats
            scale = np.sqrt(G) if self.stats == "sq" else np.repeat(np.sqrt(G / self.block), self.block)[: param.size]
        scale += self.eps
        param -= self.lr * g / scale


def replica_stats(kind: str | None, grad: Any, block: int = 16) -> Any:
    """What a replica sends beside its gradient slice: ``g^2`` ("sq") or per-block sums ("block")."""
    if kind is None:
        return None
    sq = grad * grad
    if kind == "sq":
        return sq
    return np.add.reduceat(sq, np.arange(0, sq.size, block)) if sq.size else sq


def make_optimizer(name: str, lr: float, momentum: float = 0.9, weight_decay: float = 0.0, eps: float = 1e-8,
                   block: int = 16) -> Optimizer:
    """An optimizer by config name (one of ``OPTIMIZERS``)."""
    if name == "sgd":
        return SGD(lr, weight_decay=weight_decay)
    if name == "momentum":
        return SGD(lr, weight_decay=weight_decay, momentum=momentum)
    if name == "adagrad":
        return AdaGrad(lr, weight_decay=weight_decay, eps=eps)
    if name == "adagrad_dp":
        return AdaGrad(lr, weight_decay=weight_decay, stats="sq", eps=eps)
    if name == "adagrad_approx":
        if block < 1:
            raise UsageError(f"adagrad_block must be >= 1, got {block}")
        return AdaGrad(lr, weight_decay=weight_decay, stats="block", block=block, eps=eps)
    raise UsageError(f"unknown optimizer {name!r}; choose one of: {', '.join(OPTIMIZERS)}")
