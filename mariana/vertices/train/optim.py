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
- ``adam``, ``adamw``: Adam (Kingma & Ba) with bias correction, as ``torch.optim.Adam`` computes
  it; ``weight_decay`` is added to the gradient (L2) for ``adam`` and decoupled
  (``p *= 1 - lr * weight_decay`` before the step, as ``torch.optim.AdamW``) for ``adamw``. The
  state is ``m``, ``v`` and the step count ``t`` per element (every element of a shard takes
  one step per optimizer step), so nothing extra is exchanged.

Optimizers are a registry, like the layers: ``register_optimizer(OptimizerKind(name, help,
make))`` makes ``optimizer=name`` valid in every training job (``make(config)`` gets the job's
resolved config: ``lr``, ``momentum``, ``weight_decay``, ``eps``, ``beta1``, ``beta2``,
``adagrad_block``). An optimizer is elementwise: ``_step`` updates one chunk of a slice in place.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ...errors import UsageError
from .layers import array_module_of

__all__ = ["Optimizer", "SGD", "AdaGrad", "Adam", "OptimizerKind", "register_optimizer", "make_optimizer",
           "replica_stats", "OPTIMIZERS"]
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


@dataclass
class Adam(Optimizer):
    """Adam, or AdamW with ``decoupled=True`` (see the module docstring)."""

    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    decoupled: bool = False

    def init_state(self, param: Any) -> dict[str, Any]:
        return {"m": np.zeros_like(param), "v": np.zeros_like(param), "t": np.zeros_like(param)}

    def _step(self, param: Any, grad: Any, state: dict[str, Any], stats: Any, scratch: bool = False) -> None:
        m, v, t = state["m"], state["v"], state["t"]
        n = float(t[0]) + 1.0  # every element of a chunk is at the same step
        t.fill(n)
        g = grad if self.decoupled else self._decayed(param, grad)
        if self.decoupled and self.weight_decay:
            param *= 1.0 - self.lr * self.weight_decay
        m *= self.beta1
        m += (1.0 - self.beta1) * g
        v *= self.beta2
        v += (1.0 - self.beta2) * (g * g)
        denom = np.sqrt(v)
        denom /= math.sqrt(1.0 - self.beta2 ** n)
        denom += self.eps
        param -= (self.lr / (1.0 - self.beta1 ** n)) * (m / denom)


@dataclass(frozen=True)
class OptimizerKind:
    """One ``optimizer=`` choice: ``make(config) -> Optimizer`` from a job's resolved config."""

    name: str
    help: str
    make: Callable[[dict[str, Any]], Optimizer]


#: Every optimizer, by name (``register_optimizer`` adds one); jobs take their choices from it.
OPTIMIZERS: dict[str, OptimizerKind] = {}


def register_optimizer(kind: OptimizerKind) -> OptimizerKind:
    """Make ``optimizer=kind.name`` valid in every training job."""
    OPTIMIZERS[kind.name] = kind
    return kind


def _block(config: dict[str, Any]) -> int:
    block = int(config.get("adagrad_block", 16))
    if block < 1:
        raise UsageError(f"adagrad_block must be >= 1, got {block}")
    return block


for _kind in (
    OptimizerKind("sgd", "plain SGD", lambda c: SGD(c["lr"], weight_decay=c.get("weight_decay", 0.0))),
    OptimizerKind("momentum", "heavy-ball momentum (momentum)",
                  lambda c: SGD(c["lr"], weight_decay=c.get("weight_decay", 0.0), momentum=c.get("momentum", 0.9))),
    OptimizerKind("adagrad", "exact AdaGrad on the summed gradient (eps)",
                  lambda c: AdaGrad(c["lr"], weight_decay=c.get("weight_decay", 0.0), eps=c.get("eps", 1e-8))),
    OptimizerKind("adagrad_dp", "Mariana's data-parallel AdaGrad (each replica's g^2; doubles the exchange)",
                  lambda c: AdaGrad(c["lr"], weight_decay=c.get("weight_decay", 0.0), stats="sq", eps=c.get("eps", 1e-8))),
    OptimizerKind("adagrad_approx", "adagrad_dp with per-block statistics (adagrad_block)",
                  lambda c: AdaGrad(c["lr"], weight_decay=c.get("weight_decay", 0.0), stats="block", block=_block(c),
                                    eps=c.get("eps", 1e-8))),
    OptimizerKind("adam", "Adam with bias correction (beta1, beta2, eps; weight_decay as L2)",
                  lambda c: Adam(c["lr"], weight_decay=c.get("weight_decay", 0.0), beta1=c.get("beta1", 0.9),
                                 beta2=c.get("beta2", 0.999), eps=c.get("eps", 1e-8))),
    OptimizerKind("adamw", "Adam with decoupled weight decay (beta1, beta2, eps, weight_decay)",
                  lambda c: Adam(c["lr"], weight_decay=c.get("weight_decay", 0.0), beta1=c.get("beta1", 0.9),
                                 beta2=c.get("beta2", 0.999), eps=c.get("eps", 1e-8), decoupled=True)),
):
    register_optimizer(_kind)


def make_optimizer(name: str, lr: float, momentum: float = 0.9, weight_decay: float = 0.0, eps: float = 1e-8,
                   block: int = 16, beta1: float = 0.9, beta2: float = 0.999, **more: Any) -> Optimizer:
    """An optimizer by registry name (one of ``OPTIMIZERS``)."""
    kind = OPTIMIZERS.get(name)
    if kind is None:
        raise UsageError(f"unknown optimizer {name!r}; choose one of: {', '.join(OPTIMIZERS)}")
    return kind.make({"lr": lr, "momentum": momentum, "weight_decay": weight_decay, "eps": eps, "adagrad_block": block,
                      "beta1": beta1, "beta2": beta2, **more})
