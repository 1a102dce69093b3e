"""The dnn-dp replica: a whole model on one device (Mariana's framework 1).

One synchronous SGD step with the ``linear`` or ``ps`` exchange takes two supersteps:

    superstep t     replica r: forward + backward on its slice of the global batch, sends each
                    shard its gradient slice (tag ``grad``), asks its reader for the next batch
    superstep t+1   shard i: sums the replicas' slices in replica order, applies the optimizer,
                    sends the fresh slice to every replica (tag ``param``); reader r: sends the
                    next batch (tag ``batch``), so loading overlaps the exchange
    superstep t+2   replica r: copies the slices into its parameters and computes the next step

``tree`` reduces whole gradients pairwise up a binomial tree (log2 N rounds, one superstep each)
to replica 0, which hands the sum to a single shard. ``allreduce`` has no shards and one superstep
per step: in superstep t every replica receives the others' gradient buckets of step t-1, sums
them in replica order, updates its own copy of the parameters and computes step t (its reader
then keeps two batches ahead). Replicas take the gradient of their mean loss times
``local batch / global batch``, so the summed gradient is that of one replica on the whole batch.

Every replica and shard holds its parameters as one flat float32 vector; a shard owns the
contiguous range ``[lo, hi)`` of it (all tensors in layer order), so slices travel as zero-copy
views. Sums run in a fixed order, never by arrival: results do not depend on placement. How the
gradients travel is the topology's business (``exchange.py``); data comes from ``data.py``.
"""

from __future__ import annotations

import contextlib
import json
import logging
from typing import Any, Callable

import numpy as np

from ...engine import Context, Message, Vertex
from ...engine.state import default_state, load_default_state
from ...engine.vertex import array_module
from .exchange import Shard, SyncedMember, Topology
from .layers import to_module
from .optim import Optimizer
from .stream import TestStream

log = logging.getLogger(__name__)

__all__ = ["ReplicaVertex", "on_device", "evaluate_logits", "eval_sums", "aggregate_eval"]


def on_device(device: str) -> Any:
    """A context that makes ``device`` current: a no-op on the CPU, ``cupy.cuda.Device(n)`` on a GPU."""
    if device == "cpu":
        return contextlib.nullcontext()
    return array_module(device).cuda.Device(int(device.partition(":")[2] or 0))


def eval_sums(logits: Any, labels: np.ndarray) -> tuple[float, int, int]:
    """(summed test loss, correct predictions, samples) of ``logits`` against ``labels``."""
    logits = to_module(logits, np).astype(np.float64)
    shifted = logits - logits.max(axis=1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    n = len(labels)
    return float(-logp[np.arange(n), labels].sum()), int((logits.argmax(axis=1) == labels).sum()), n


def evaluate_logits(ctx: Context, logits: Any, labels: np.ndarray) -> None:
    """Aggregate test loss and accuracy of ``logits`` against ``labels`` (weighted-mean aggregates)."""
    aggregate_eval(ctx, eval_sums(logits, labels))


def aggregate_eval(ctx: Context, sums: tuple[float, int, int]) -> None:
    loss, correct, n = sums
    ctx.aggregate("test_loss", (loss, n))
    ctx.aggregate("test_accuracy", (correct, n))


class ReplicaVertex(SyncedMember, Vertex):
    """A whole model on one device: forward and backward of one step in one ``compute``."""

    state_fields = (*Vertex.state_fields, "ahead", "batches", "block", "chain", "chain_final", "chain_queue", "chain_sent_at",
                    "chain_step", "chain_wait", "deferred_params", "device", "flat", "grad", "grad_spare", "incoming",
                    "member_ids", "members", "next_bucket", "opt_state", "own_stats", "params_fresh",
                    "params_ready", "pending_params", "rank", "reader", "scale", "shards", "stats_kind", "step",
                    "steps_per_epoch", "sync_bytes", "total_steps", "tree_stats", "tree_waiting")

    def __init__(self, id: str, rank: int, replica_ids: list[str], make_model: Callable[[], Any], reader: str,
                 shards: list[Shard], topology: Topology, optimizer: Optimizer, scale: float,
                 total_steps: int, steps_per_epoch: int, x_test: np.ndarray, y_test: np.ndarray,
                 device: str = "cpu") -> None:
        super().__init__(id, None)
        self.device, self.xp = device, array_module(device)
        self.reader, self.scale = reader, scale
        self.total_steps, self.steps_per_epoch = total_steps, steps_per_epoch
        self.x_test, self.y_test = x_test, y_test
        with on_device(device):
            self.model = make_model().to(self.xp)
            self.flat = self.xp.zeros(self.model.num_params, dtype=np.float32)
            self.grad = self.xp.zeros(self.model.num_params, dtype=np.float32)
            self.model.bind_flat(self.flat, self.grad)
        self.init_sync(rank, replica_ids, shards, topology, optimizer, self.model.layers)
        self.offsets = self.model.param_offsets()
        self.step = 0
        self.ahead = 2 if topology.replicated else 1  # batches the reader serves ahead of the step
        self.batches: list[dict[str, Any]] = []

    def compute(self, ctx: Context, messages: list[Message]) -> None:
        self.use_send_buffers(ctx)
        with on_device(self.device):
            self._compute(ctx, messages)
        if not (self.params_ready and self.batches and self.step < self.total_steps) and not self.exchange_busy:
            ctx.vote_to_halt()  # else a buffered batch is due next superstep (a lone allreduce replica)

    def _compute(self, ctx: Context, messages: list[Message]) -> None:
        """Messages arrive and leave as host (numpy) arrays; the model may live on a GPU."""
        self.exchange_tick(ctx)
        for m in messages:
            if m.tag == "batch":
                self.batches.append(m.payload)
            else:
                self.take_exchange(ctx, m)
        self.after_update(ctx)
        if self.params_ready and self.batches and self.step < self.total_steps:
            self.train_step(ctx)
            self.after_update(ctx)  # a lone allreduce replica has updated already

    def after_update(self, ctx: Context) -> None:
        """Evaluate once fresh parameters of an epoch's last step (or of the last step) are in."""
        if self.params_fresh:
            self.params_fresh = False
            if self.step == self.total_steps or self.step % self.steps_per_epoch == 0:
                self.evaluate(ctx)

    def train_step(self, ctx: Context) -> None:
        batch = self.batches.pop(0)
        assert batch["step"] == self.step, (batch["step"], self.step)
        if self.topology.replicated:
            self.next_grad_buffer()
        def ready(layer: int) -> None:  # this layer's gradient is final: its buckets may leave
            if self.offsets[layer] is not None:
                self.push_ready(ctx, self.offsets[layer])

        loss = self.model.loss_and_grad(batch["x"], self.xp.asarray(batch["y"]), ready, self.scale)
        ctx.aggregate("loss", (loss * len(batch["y"]), len(batch["y"])))
        self.step += 1
        if self.step + self.ahead - 1 < self.total_steps:
            ctx.send(self.reader, self.step + self.ahead - 1, tag="next")
        self.push_gradients(ctx)

    def evaluate(self, ctx: Context) -> None:
        """Test loss and accuracy of this replica's share of the test set (weighted-mean aggregates)."""
        if isinstance(self.x_test, TestStream):  # streamed: chunk by chunk, one aggregate
            total = [0.0, 0, 0]
            for x, y in self.x_test.chunks():
                for i, v in enumerate(eval_sums(self.model.predict(x), y)):
                    total[i] += v
            if total[2]:
                aggregate_eval(ctx, (total[0], int(total[1]), int(total[2])))
                ctx.aggregate("epoch", self.step / self.steps_per_epoch)
            return
        if len(self.y_test) == 0:
            return
        evaluate_logits(ctx, self.model.predict(self.x_test), self.y_test)
        ctx.aggregate("epoch", self.step / self.steps_per_epoch)

    def result(self) -> dict[str, Any]:
        """The step; with ``allreduce``, replica 0 also returns the model (there are no shards)."""
        if self.topology.replicated and self.rank == 0:
            return {"step": self.step, "lo": 0, "p": to_module(self.flat, np)}
        return {"step": self.step}

    def params_snapshot(self) -> dict[str, Any] | None:
        """With ``allreduce``, replica 0 holds the model for ``RUN/params/ss-NNNNNN/``."""
        if self.topology.replicated and self.rank == 0:
            return {"lo": 0, "hi": int(self.flat.size), "value": to_module(self.flat, np), "updates": self.step}
        return None

    def state_dict(self) -> dict[str, Any]:
        """Counters, the flat parameter and gradient buffers, pending batches, dropout RNGs (and
        with ``allreduce`` the optimizer state and the other gradient buffer)."""
        return {**default_state(self), "dropout_rngs": [layer.rng for layer in self.model.layers if hasattr(layer, "rng")]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = dict(state)
        rngs = state.pop("dropout_rngs", [])
        with on_device(self.device):
            flat, grad = state.pop("flat"), state.pop("grad")
            self.flat[...] = self.xp.asarray(flat)  # in place: the model's layers are views of these
            self.grad[...] = self.xp.asarray(grad)
            if "grad_spare" in state:
                self.grad_spare[...] = self.xp.asarray(state.pop("grad_spare"))
                for key, value in state.pop("opt_state").items():
                    self.opt_state[key][...] = self.xp.asarray(value)
            load_default_state(self, state)
        for layer, rng_state in zip([la for la in self.model.layers if hasattr(la, "rng")], rngs):
            layer.rng.bit_generator.state = json.loads(rng_state["__rng__"])


