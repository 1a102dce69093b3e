"""Training vertices: DataReader, ReplicaVertex, ParameterShardVertex (Mariana's framework 1).

One synchronous SGD step with the ``linear`` or ``ps`` exchange takes two supersteps:

    superstep t     replica r: forward + backward on its slice of the global batch, sends each
                    shard its gradient slice (tag ``grad``), asks its reader for the next batch
    superstep t+1   shard i: sums the replicas' slices in replica order, applies the optimizer,
                    sends the fresh slice to every replica (tag ``param``); reader r: sends the
                    next batch (tag ``batch``), so loading overlaps the exchange
    superstep t+2   replica r: copies the slices into its parameters and computes the next step

``tree`` reduces whole gradients pairwise up a binomial tree (log2 N rounds, one superstep each)
to replica 0, which hands the sum to a single shard. Replicas scale their mean-loss gradient by
``local batch / global batch``, so the summed gradient is that of one replica on the whole batch.

Every replica and shard holds its parameters as one flat float32 vector; a shard owns the
contiguous range ``[lo, hi)`` of it (all tensors in layer order), so slices travel as zero-copy
views. Sums run in a fixed order, never by arrival: results do not depend on placement.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import logging
from dataclasses import dataclass
from importlib.resources import files
from typing import Any, Callable

import numpy as np

from ..engine import Context, Message, Vertex
from ..engine.state import default_state, load_default_state
from ..engine.vertex import array_module
from ..errors import StorageError, UsageError
from ..storage import read_bytes
from .layers import to_module
from .optim import Optimizer, replica_stats

log = logging.getLogger(__name__)

__all__ = ["Dataset", "load_dataset", "DataReader", "ReplicaVertex", "ParameterShardVertex", "shard_ranges",
           "tree_children", "tree_parent"]


# -- data ------------------------------------------------------------------------------------------
@dataclass
class Dataset:
    """Train and test arrays (x float32, y int64), the number of classes and the input shape."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    classes: int

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])


def _read_npz(url: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        blob = read_bytes(url)
    except StorageError as exc:
        raise UsageError(f"cannot read data: {exc}") from None
    try:
        with np.load(io.BytesIO(blob), allow_pickle=False) as npz:
            missing = [k for k in ("x", "y") if k not in npz.files]
            if missing:
                raise UsageError(f"{url}: the data file has no array {' or '.join(repr(k) for k in missing)} "
                                 f"(found: {', '.join(npz.files) or 'nothing'}); it needs 'x' and 'y'")
            return npz["x"], npz["y"]
    except (ValueError, OSError) as exc:
        raise UsageError(f"{url}: not a readable .npz file ({exc})") from None


def load_dataset(data: str, test_fraction: float, seed: int, classes: int = 0) -> Dataset:
    """``digits`` (bundled, 8x8 pixels scaled to [0, 1]) or an ``.npz`` with ``x`` and ``y`` at any URL.

    The split into train and test is a seeded shuffle; ``classes`` 0 means ``max(y) + 1``.
    """
    if data == "digits":
        raw = np.loadtxt(gzip.open(files("mariana.vertices") / "data" / "digits.csv.gz"), delimiter=",")
        x, y, where = raw[:, :-1] / 16.0, raw[:, -1], "digits"
    else:
        x, y = _read_npz(data)
        where = data
    if x.ndim < 2 or y.ndim != 1 or len(x) != len(y):
        raise UsageError(f"{where}: expected x of shape (N, ...) and y of shape (N,), got {x.shape} and {y.shape}")
    if not (np.issubdtype(x.dtype, np.number) and np.issubdtype(y.dtype, np.number)):
        raise UsageError(f"{where}: x and y must be numeric, got {x.dtype} and {y.dtype}")
    bad = np.flatnonzero(~np.isfinite(x.reshape(len(x), -1)).all(axis=1))
    if bad.size:
        raise UsageError(f"{where}: x has NaN or Inf in {bad.size} sample(s), the first at row {bad[0]}")
    if y.size and (np.any(y != np.round(y)) or y.min() < 0):
        row = int(np.flatnonzero((y != np.round(y)) | (y < 0))[0])
        raise UsageError(f"{where}: labels must be integers >= 0; row {row} has {y[row]!r}")
    y = y.astype(np.int64)
    classes = classes or (int(y.max()) + 1 if y.size else 0)
    if y.size and y.max() >= classes:
        row = int(np.argmax(y))
        raise UsageError(f"{where}: label {y[row]} at row {row} is out of range for {classes} classes")
    if not 0.0 <= test_fraction < 1.0:
        raise UsageError(f"config key 'test_fraction' must be in [0, 1), got {test_fraction}")
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = int(round(len(x) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    x = x.astype(np.float32)
    return Dataset(x[train], y[train], x[test], y[test], classes)


class DataReader(Vertex):
    """Serves replica ``rank`` its slice of each global batch; one batch ahead of the replica.

    Batches come from one seeded permutation of the training set per epoch, shared by all
    readers, so N replicas with batch B/N see exactly the samples one replica with batch B sees.
    """

    static_attributes = ("x", "y", "_perm")  # data and a cache: rebuilt, never checkpointed

    def __init__(self, id: str, replica: str, x: np.ndarray, y: np.ndarray, batch_size: int, replicas: int,
                 rank: int, seed: int, total_steps: int) -> None:
        super().__init__(id, 0)
        self.replica, self.x, self.y = replica, x, y
        self.global_batch, self.local = batch_size, batch_size // replicas
        self.rank, self.seed, self.total_steps = rank, seed, total_steps
        self.steps_per_epoch = len(x) // batch_size
        self._perm: tuple[int, np.ndarray] | None = None

    def indices(self, step: int) -> np.ndarray:
        epoch, k = divmod(step, self.steps_per_epoch)
        if self._perm is None or self._perm[0] != epoch:
            self._perm = (epoch, np.random.default_rng([self.seed, epoch]).permutation(len(self.x)))
        start = k * self.global_batch + self.rank * self.local
        return self._perm[1][start:start + self.local]

    def compute(self, ctx: Context, messages: list[Message]) -> None:
        wanted = [0] if ctx.superstep == 0 else [int(m.payload) for m in messages]
        for step in wanted:
            if step < self.total_steps:
                idx = np.sort(self.indices(step))
                ctx.send(self.replica, {"step": step, "x": self.x[idx], "y": self.y[idx]}, tag="batch")
                self.value = step
        ctx.vote_to_halt()


# -- exchange layout ---------------------------------------------------------------------------------
def shard_ranges(num_params: int, shards: int, align: int = 16) -> list[tuple[int, int]]:
    """``shards`` contiguous, near-equal ranges covering ``[0, num_params)``, cut at multiples of
    ``align`` so that per-block statistics (``adagrad_approx``) see the same blocks whatever the
    number of shards or the exchange topology."""
    blocks = -(-num_params // align)
    bounds = [min(num_params, blocks * i // shards * align) for i in range(shards + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


def on_device(device: str) -> Any:
    """A context that makes ``device`` current: a no-op on the CPU, ``cupy.cuda.Device(n)`` on a GPU."""
    if device == "cpu":
        return contextlib.nullcontext()
    return array_module(device).cuda.Device(int(device.partition(":")[2] or 0))


def tree_children(rank: int, n: int) -> list[int]:
    """Children of ``rank`` in a binomial reduction tree over ``n`` replicas, in arrival order."""
    out, step = [], 1
    while step < n and rank % (2 * step) == 0:
        if rank + step < n:
            out.append(rank + step)
        step *= 2
    return out


def tree_parent(rank: int) -> int:
    return rank - (rank & -rank)


# -- vertices --------------------------------------------------------------------------------------
class ReplicaVertex(Vertex):
    """A whole model on one device: forward and backward of one step in one ``compute``."""

    static_attributes = ("x_test", "y_test", "shards", "model", "xp")

    def __init__(self, id: str, rank: int, replicas: int, make_model: Callable[[], Any], reader: str,
                 shards: list[tuple[str, int, int]], topology: str, optimizer: Optimizer, scale: float,
                 total_steps: int, steps_per_epoch: int, x_test: np.ndarray, y_test: np.ndarray,
                 replica_ids: list[str], device: str = "cpu") -> None:
        super().__init__(id, None)
        self.device, self.xp = device, array_module(device)
        self.rank, self.replicas, self.reader, self.shards, self.topology = rank, replicas, reader, shards, topology
        self.stats_kind, self.block, self.scale = optimizer.stats, optimizer.block, scale
        self.total_steps, self.steps_per_epoch = total_steps, steps_per_epoch
        self.x_test, self.y_test = x_test, y_test
        with on_device(device):
            self.model = make_model().to(self.xp)
            self.flat = self.xp.zeros(self.model.num_params, dtype=np.float32)
            self.grad = self.xp.zeros_like(self.flat)
            self.model.bind_flat(self.flat, self.grad)
        self.step = 0
        self.batch: dict[str, Any] | None = None
        self.params_ready = True
        self.pending_slices = 0
        self.children: list[int] = []
        self.stats: Any = None
        self.parent = replica_ids[tree_parent(rank)] if rank else None

    def compute(self, ctx: Context, messages: list[Message]) -> None:
        with on_device(self.device):
            self._compute(ctx, messages)
        ctx.vote_to_halt()

    def _compute(self, ctx: Context, messages: list[Message]) -> None:
        """Messages arrive and leave as host (numpy) arrays; the model may live on a GPU."""
        xp = self.xp
        for m in messages:
            if m.tag == "batch":
                self.batch = m.payload
            elif m.tag == "param":
                lo, p = m.payload["lo"], m.payload["p"]
                self.flat[lo:lo + len(p)] = xp.asarray(p)
                self.pending_slices -= 1
                if self.pending_slices == 0:
                    self.params_ready = True
                    if self.step == self.total_steps or self.step % self.steps_per_epoch == 0:
                        self.evaluate(ctx)
            elif m.tag == "tree":
                xp.add(self.grad, xp.asarray(m.payload["g"]), out=self.grad)
                if self.stats is not None:
                    np.add(self.stats, m.payload["s"], out=self.stats)
                self.children.remove(m.payload["rank"])
                if not self.children:
                    self.send_tree(ctx)
        if self.params_ready and self.batch is not None and self.step < self.total_steps:
            self.train_step(ctx)

    def train_step(self, ctx: Context) -> None:
        batch, self.batch = self.batch, None
        assert batch["step"] == self.step, (batch["step"], self.step)
        loss = self.model.loss_and_grad(batch["x"], self.xp.asarray(batch["y"]))
        if self.scale != 1.0:
            self.grad *= self.scale
        ctx.aggregate("loss", (loss * len(batch["y"]), len(batch["y"])))
        self.step += 1
        self.params_ready = False
        self.pending_slices = len(self.shards)
        if self.step < self.total_steps:
            ctx.send(self.reader, self.step, tag="next")
        if self.topology == "tree":
            self.stats = replica_stats(self.stats_kind, to_module(self.grad, np), self.block)
            self.children = tree_children(self.rank, self.replicas)
            if not self.children:
                self.send_tree(ctx)
            return
        for sid, lo, hi in self.shards:
            g = to_module(self.grad[lo:hi], np)  # a view on the CPU, a host copy from a GPU
            payload = {"g": g}
            if self.stats_kind is not None:
                payload["s"] = replica_stats(self.stats_kind, g, self.block)
            ctx.send(sid, payload, tag="grad")

    def send_tree(self, ctx: Context) -> None:
        """The whole subtree's gradient is here: pass it up, or to the shard from the root."""
        payload = {"g": to_module(self.grad, np), "rank": self.rank}
        if self.stats is not None:
            payload["s"] = self.stats
        if self.parent is not None:
            ctx.send(self.parent, payload, tag="tree")
        else:
            ctx.send(self.shards[0][0], payload, tag="grad")

    def evaluate(self, ctx: Context) -> None:
        """Test loss and accuracy of this replica's share of the test set (weighted-mean aggregates)."""
        if len(self.y_test) == 0:
            return
        logits = to_module(self.model.predict(self.x_test), np).astype(np.float64)
        shifted = logits - logits.max(axis=1, keepdims=True)
        logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        n = len(self.y_test)
        ctx.aggregate("test_loss", (float(-logp[np.arange(n), self.y_test].sum()), n))
        ctx.aggregate("test_accuracy", (int((logits.argmax(axis=1) == self.y_test).sum()), n))
        ctx.aggregate("epoch", self.step / self.steps_per_epoch)

    def result(self) -> dict[str, Any]:
        return {"step": self.step}

    def state_dict(self) -> dict[str, Any]:
        """Counters, the flat parameter and gradient buffers, a pending batch, dropout RNGs."""
        return {**default_state(self), "dropout_rngs": [layer.rng for layer in self.model.layers if hasattr(layer, "rng")]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = dict(state)
        rngs = state.pop("dropout_rngs", [])
        with on_device(self.device):
            flat, grad = state.pop("flat"), state.pop("grad")
            self.flat[...] = self.xp.asarray(flat)  # in place: the model's layers are views of these
            self.grad[...] = self.xp.asarray(grad)
            load_default_state(self, state)
        for layer, rng_state in zip([la for la in self.model.layers if hasattr(la, "rng")], rngs):
            layer.rng.bit_generator.state = json.loads(rng_state["__rng__"])


class ParameterShardVertex(Vertex):
    """Owns ``[lo, hi)`` of the flat parameter vector and its optimizer state."""

    static_attributes = ("optimizer", "replicas")

    def __init__(self, id: str, lo: int, hi: int, init: np.ndarray, optimizer: Optimizer, replicas: list[str]) -> None:
        super().__init__(id, np.array(init[lo:hi], dtype=np.float32))
        self.lo, self.hi, self.optimizer, self.replicas = lo, hi, optimizer, replicas
        self.state = optimizer.init_state(self.value)
        self.updates = 0

    def compute(self, ctx: Context, messages: list[Message]) -> None:
        grads = [m.payload for m in messages if m.tag == "grad"]
        if grads:
            if len(grads) == 1:  # nothing to sum: the optimizer only reads the gradient
                g, stats = grads[0]["g"], grads[0].get("s")
            else:
                g = np.array(grads[0]["g"], dtype=np.float32)
                stats = None if "s" not in grads[0] else np.array(grads[0]["s"], dtype=np.float32)
            for other in grads[1:]:  # in replica order (message order is by source id)
                np.add(g, other["g"], out=g)
                if stats is not None:
                    np.add(stats, other["s"], out=stats)
            self.optimizer.step(self.value, g, self.state, stats)
            self.updates += 1
            for r in self.replicas:
                ctx.send(r, {"lo": self.lo, "p": self.value}, tag="param")
        ctx.vote_to_halt()

    def result(self) -> dict[str, Any]:
        return {"lo": self.lo, "p": self.value, "updates": self.updates}

    def params_snapshot(self) -> dict[str, Any]:
        """This shard of the model, for ``RUN/params/ss-NNNNNN/`` (read by ``mariana params export``)."""
        return {"lo": self.lo, "hi": self.hi, "value": self.value, "updates": self.updates}

    def size_hint(self) -> int:
        return self.hi - self.lo
