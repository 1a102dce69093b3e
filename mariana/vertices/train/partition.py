"""Model parallelism: partition p of P holds output slice p of every parameter layer.

The model is cut into *stages* at every parameter layer (dense, conv) whose input is the output
of another partitioned layer. In a stage a partition runs, on its own slice of the data:

    [gather] -> parameter layer (whole input -> slice p of its outputs) -> slice-wise layers

Slice-wise layers (activations, max pooling, dropout, flatten) act on each channel or unit
independently, so they need nothing from other partitions. Between stages the partitions
exchange *transfer* messages (Mariana's Transfer Layer), one superstep each:

- forward, ``gather``: every partition sends its output slice to the others; each concatenates
  the slices in partition order along axis 1 (channels of NCHW, or units) into the next stage's
  whole input. The last gather brings the whole logits, from which every partition computes the
  loss and takes its slice of d(loss)/d(logits).
- backward, ``scatter`` (reduce-scatter): a stage's first parameter layer gives this
  partition's *partial* d(loss)/d(whole input); slice q of it goes to partition q, which sums the
  P partials in partition order.

The first stage's parameter layer sees the data itself (no gather; no d(input) needed). With one
partition every transfer is local and a whole step runs in one ``compute``, as a dnn-dp replica.
Layers before the first parameter layer act on the whole data in every partition alike
(dropout draws the same mask everywhere); a dropout on a slice draws the mask of the whole
activation and keeps its slice, so P partitions give the same masks as the unsplit model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...engine import Context, Message, Vertex
from ...engine.state import default_state, load_default_state
from ...engine.vertex import array_module
from .exchange import Shard, SyncedMember, Topology
from .layers import Array, Dropout, Layer, SoftmaxCrossEntropy, array_module_of, to_module
from .model import Model, bind_layers
from .optim import Optimizer
from .stream import TestStream
from .training import eval_sums, evaluate_logits, on_device

__all__ = ["Stage", "PartitionPlan", "plan_partition", "SliceDropout", "PartitionVertex", "join_params"]


class SliceDropout(Layer):
    """Dropout on this partition's block of the global activation: the whole mask, sliced.

    ``rows`` (set before each training forward) are the positions of this group's samples in
    the global batch, partition ``p`` of ``parts`` holds slice p of axis 1: the mask is drawn for
    ``(n groups, c parts, ...)`` and cut, so any number of groups and partitions gives the
    masks of one unsplit model trained on the whole batch.
    """

    def __init__(self, inner: Dropout, p: int = 0, parts: int = 1, group: int = 0, groups: int = 1) -> None:
        super().__init__()
        self.inner, self.p, self.parts, self.group, self.groups = inner, p, parts, group, groups
        self.rng = inner.rng
        self.rows: Any = None
        self._mask: Array | None = None

    def forward(self, x: Array, train: bool = True) -> Array:
        if not train or self.inner.p == 0.0:
            self._mask = None
            return x
        xp = array_module_of(x)
        n, c = x.shape[:2]
        keep = self.rng.random((n * self.groups, c * self.parts, *x.shape[2:])) >= self.inner.p
        rows = np.arange(n) if self.rows is None else self.rows
        keep = keep[rows, self.p * c:(self.p + 1) * c]
        self._mask = xp.asarray((keep / (1.0 - self.inner.p)).astype(x.dtype))
        return x * self._mask

    def backward(self, dy: Array) -> Array:
        return dy if self._mask is None else dy * self._mask


@dataclass
class Stage:
    """Layers one partition runs between two transfers; ``head`` indexes the parameter layer."""

    gather: bool
    layers: list[Layer] = field(default_factory=list)
    head: int = -1


@dataclass
class PartitionPlan:
    """Partition ``p`` of ``parts`` of a model: its stages, and where each parameter came from."""

    p: int
    parts: int
    stages: list[Stage]
    #: (name in the unsplit model, layer class) of every parameter, in this partition's flat order
    names: list[tuple[str, type[Layer]]]

    @property
    def layers(self) -> list[Layer]:
        return [layer for stage in self.stages for layer in stage.layers]

    @property
    def num_params(self) -> int:
        return sum(int(a.size) for layer in self.layers for a in layer.params.values())


def plan_partition(model: Model, p: int, parts: int, group: int = 0, groups: int = 1) -> PartitionPlan:
    """Cut ``model`` (a freshly built unsplit model) into partition ``p`` of ``parts`` of group
    ``group`` of ``groups`` (the group only matters to dropout masks).

    Raises ValueError naming the layer whose output size is not divisible by ``parts``.
    """
    stages = [Stage(gather=False)]
    sliced = False
    names: list[tuple[str, type[Layer]]] = []
    for layer, entry in zip(model.layers, model.layer_entries):
        if layer.split_axes:
            if sliced:
                stages.append(Stage(gather=True))
            try:
                piece = layer.part(p, parts)
            except ValueError as exc:
                raise ValueError(f"entry {entry} {model.entries[entry]!r}: {exc}") from None
            stages[-1].head = len(stages[-1].layers)
            stages[-1].layers.append(piece)
            names += [(f"{entry}.{key}", type(layer)) for key in piece.params]
            sliced = True
        elif isinstance(layer, Dropout):
            stages[-1].layers.append(SliceDropout(layer, p, parts, group, groups) if sliced
                                     else SliceDropout(layer, 0, 1, group, groups))
        else:
            stages[-1].layers.append(layer)
    if stages[0].head < 0:
        raise ValueError("the model has no dense or conv layer to train")
    for stage in stages:
        head = stage.layers[stage.head]
        if hasattr(head, "input_grad"):
            head.input_grad = stage.gather  # the first stage's head sees the data: no d(input)
    return PartitionPlan(p, parts, stages, names)


def join_params(plans: list[PartitionPlan], flats: list[np.ndarray]) -> list[tuple[str, np.ndarray]]:
    """The unsplit model's named parameters from every partition's flat vector (partition order)."""
    pieces: dict[str, list[np.ndarray]] = {}
    kinds: dict[str, type[Layer]] = {}
    for plan, flat in zip(plans, flats):
        offset = 0
        for (name, kind), arr in zip(plan.names, (a for layer in plan.layers for a in layer.params.values())):
            pieces.setdefault(name, []).append(np.asarray(flat[offset:offset + arr.size]).reshape(arr.shape))
            kinds[name] = kind
            offset += arr.size
    return [(name, kinds[name].join(name.rsplit(".", 1)[1], ps)) for name, ps in pieces.items()]


class PartitionVertex(SyncedMember, Vertex):
    """Partition ``p`` of group ``g``: forward and backward stage by stage, transfers in between.

    A step: wait for fresh parameters and the batch; forward stages (a gather before each but
    the first, and one for the logits); loss; backward stages (a scatter after each but the
    first); then the gradient goes to the shards through the group-crossing ``topology``
    (members: partition p of every group). After the step that ends an epoch the same stages
    run forward on this group's share of the test set.
    """

    state_fields = (*Vertex.state_fields, "act", "awaiting", "backward", "batches", "block", "counters", "depth",
                    "device", "eval_due", "flat", "grad", "group", "groups", "labels", "member_ids", "members",
                    "mine", "next_bucket", "params_fresh", "params_ready", "part", "parts", "peers",
                    "pending_params", "phase", "pieces", "rank", "report_to", "requested", "requests", "scale",
                    "sent_bytes", "shards", "stage", "stats_kind", "step", "steps_per_epoch", "sync_bytes",
                    "total_steps", "tree_stats", "tree_waiting")

    def __init__(self, id: str, group: int, groups: int, plan: PartitionPlan, peers: list[str], members: list[str],
                 shards: list[Shard], topology: Topology, optimizer: Optimizer, total_steps: int,
                 steps_per_epoch: int, x_test: np.ndarray, y_test: np.ndarray, requests: str | None,
                 depth: int, device: str = "cpu", report_to: str | None = None, counters: bool = False) -> None:
        super().__init__(id, None)
        self.device, self.xp = device, array_module(device)
        self.group, self.groups, self.plan, self.peers = group, groups, plan, peers
        self.part, self.parts = plan.p, plan.parts
        self.total_steps, self.steps_per_epoch = total_steps, steps_per_epoch
        self.x_test, self.y_test = x_test, y_test
        self.requests, self.depth = requests, depth
        self.report_to, self.counters = report_to, counters
        self.sent_bytes = 0  # this compute's bytes out (transfers and gradients), for counters
        self.scale = 1.0 / groups
        self.loss_layer = SoftmaxCrossEntropy()
        with on_device(device):
            for layer in plan.layers:
                layer.to(self.xp)
            self.flat = self.xp.zeros(plan.num_params, dtype=np.float32)
            self.grad = self.xp.zeros(plan.num_params, dtype=np.float32)
            bind_layers(plan.layers, self.flat, self.grad)
        self.init_sync(group, members, shards, topology, optimizer, plan.layers)
        starts = [0]
        for stage in plan.stages:
            starts.append(starts[-1] + sum(int(a.size) for layer in stage.layers for a in layer.params.values()))
        self.stage_offsets = starts[:-1]  # flat offset of each stage's parameters
        self.step = 0
        self.requested = 0  # next step to ask the input pipeline for (partition 0 asks for its group)
        self.batches: list[dict[str, Any]] = []
        self.phase = "idle"  # idle | train | eval
        self.backward = False
        self.stage = 0
        self.act: Any = None
        self.labels: Any = None
        self.awaiting: str | None = None
        self.pieces: dict[str, Any] = {}
        self.mine: Any = None  # this partition's own piece of the transfer in flight
        self.eval_due = False
        self.eval_chunk = 0  # streamed test set: the chunk being evaluated, and the sums so far
        self.eval_total: list[float] = [0.0, 0.0, 0.0]
        self.eval_labels: Any = None

    # -- the loop -------------------------------------------------------------------------------
    def compute(self, ctx: Context, messages: list[Message]) -> None:
        self.use_send_buffers(ctx)
        with on_device(self.device):
            if ctx.superstep == 0:
                self._request(ctx, self.depth)  # the first step and `depth` more
            for m in messages:
                if m.tag == "batch":
                    self.batches.append(m.payload)
                elif m.tag == "xfer":
                    self.pieces[str(m.payload["from"])] = m.payload["a"]
                elif self.take_exchange(ctx, m) and m.tag == "param" and self.params_ready:
                    self.eval_due = self.step == self.total_steps or self.step % self.steps_per_epoch == 0
            self._advance(ctx)
        self.sent_bytes += self.sync_bytes
        if self.counters and self.sent_bytes:
            ctx.aggregate(f"counter/g{self.group:02d}/bytes", self.sent_bytes)
        self.sent_bytes = self.sync_bytes = 0
        ctx.vote_to_halt()

    def _advance(self, ctx: Context) -> None:
        n_stages = len(self.plan.stages)
        while True:
            if self.awaiting is not None:
                if len(self.pieces) < self.parts - 1:
                    return  # the other partitions' pieces arrive next superstep
                self.act = self._combine()
            if self.phase == "idle":
                if not self._begin(ctx):
                    return
            elif not self.backward and self.stage < n_stages:
                x, self.act = self.act, None  # the layers' caches keep what backward needs
                x = self._forward(self.plan.stages[self.stage], x)
                self.stage += 1
                self._transfer(ctx, "gather", x)
            elif not self.backward:  # self.act: the whole logits
                self._loss(ctx)
            else:
                d, self.act = self.act, None
                dx = self._backward(self.plan.stages[self.stage], d)
                self.push_ready(ctx, self.stage_offsets[self.stage])  # shards update these layers meanwhile
                if self.stage == 0:
                    self._finish_step(ctx)
                else:
                    self.stage -= 1
                    self._transfer(ctx, "scatter", dx)

    def _begin(self, ctx: Context) -> bool:
        if not self.params_ready:
            return False
        if self.eval_due:
            self.eval_due = False
            if isinstance(self.x_test, TestStream):
                if self.x_test.n_chunks:
                    self.eval_chunk, self.eval_total = 0, [0.0, 0.0, 0.0]
                    self._eval_chunk()
                    return True
            elif len(self.y_test):
                self.phase, self.act, self.labels = "eval", self.xp.asarray(self.x_test), None
                self.stage, self.backward = 0, False
                return True
        if self.step >= self.total_steps or not self.batches:
            return False
        batch = self.batches.pop(0)
        assert batch["step"] == self.step, (batch["step"], self.step)
        self.phase, self.act, self.labels = "train", self.xp.asarray(batch["x"]), batch["y"]
        self.stage, self.backward = 0, False
        for layer in self.plan.layers:
            if isinstance(layer, SliceDropout):
                layer.rows = batch.get("pos")
        if self.depth:
            self._request(ctx, self.step + self.depth)
        return True

    def _eval_chunk(self) -> None:
        """Start the forward pass of chunk ``eval_chunk`` of the streamed test share."""
        assert isinstance(self.x_test, TestStream)
        x, self.eval_labels = self.x_test.chunk_at(self.eval_chunk)
        self.phase, self.act, self.labels = "eval", self.xp.asarray(x), None
        self.stage, self.backward = 0, False

    def _request(self, ctx: Context, upto: int) -> None:
        """Partition 0 asks the group's input pipeline for every step up to ``upto``."""
        if self.part != 0 or self.requests is None:
            return
        while self.requested <= min(upto, self.total_steps - 1):
            ctx.send(self.requests, self.requested, tag="want")
            self.requested += 1

    def _forward(self, stage: Stage, x: Any) -> Any:
        train = self.phase == "train"
        for layer in stage.layers:
            x = layer.forward(x, train=train)
        return x

    def _backward(self, stage: Stage, d: Any) -> Any:
        for layer in reversed(stage.layers[stage.head:]):
            d = layer.backward(d)
        return d

    def _loss(self, ctx: Context) -> None:
        logits = self.act
        if self.phase == "eval" and isinstance(self.x_test, TestStream):
            if self.part == 0:
                for i, v in enumerate(eval_sums(logits, self.eval_labels)):
                    self.eval_total[i] += v
            self.eval_chunk += 1
            if self.eval_chunk < self.x_test.n_chunks:
                self._eval_chunk()
                return
            if self.part == 0:
                loss, correct, n = self.eval_total
                ctx.aggregate("test_loss", (loss, int(n)))
                ctx.aggregate("test_accuracy", (int(correct), int(n)))
                ctx.aggregate("epoch", self.step / self.steps_per_epoch)
            self.phase, self.act, self.eval_labels = "idle", None, None
            return
        if self.phase == "eval":
            if self.part == 0:
                evaluate_logits(ctx, logits, self.y_test)
                ctx.aggregate("epoch", self.step / self.steps_per_epoch)
            self.phase, self.act = "idle", None
            return
        n = len(self.labels)
        loss = self.loss_layer.forward(logits, self.xp.asarray(self.labels))
        if self.part == 0 and self.report_to is not None:  # the coordinator gathers it
            ctx.send(self.report_to, {"step": self.step, "loss": loss, "n": n}, tag="loss")
        elif self.part == 0:
            ctx.aggregate("loss", (loss * n, n))
        d = self.loss_layer.backward(self.scale)  # the gradient of the global batch's mean loss
        width = d.shape[1] // self.parts
        self.act = d if self.parts == 1 else self.xp.ascontiguousarray(d[:, self.part * width:(self.part + 1) * width])
        self.backward, self.stage = True, len(self.plan.stages) - 1

    def _finish_step(self, ctx: Context) -> None:
        self.step += 1
        self.phase, self.backward, self.act, self.labels = "idle", False, None, None
        if not self.depth:
            self._request(ctx, self.step)
        self.push_gradients(ctx)

    # -- transfers ------------------------------------------------------------------------------
    def _transfer(self, ctx: Context, kind: str, x: Any) -> None:
        """Gather slices (forward) or reduce-scatter partial gradients (backward) over the group."""
        self.awaiting, self.pieces = kind, {}
        if self.parts == 1:
            self.mine = x
            return
        if kind == "gather":
            self.mine = x
            host = to_module(x, np)
            for q, peer in enumerate(self.peers):
                if q != self.part:
                    ctx.send(peer, {"from": self.part, "a": host}, tag="xfer")
            self.sent_bytes += host.nbytes * (self.parts - 1)
            return
        width = x.shape[1] // self.parts
        for q, peer in enumerate(self.peers):
            piece = x[:, q * width:(q + 1) * width]
            if q == self.part:
                self.mine = piece
            else:
                piece = to_module(self.xp.ascontiguousarray(piece), np)
                ctx.send(peer, {"from": self.part, "a": piece}, tag="xfer")
                self.sent_bytes += piece.nbytes

    def _combine(self) -> Any:
        kind, mine, xp = self.awaiting, self.mine, self.xp
        self.awaiting, self.mine = None, None
        if self.parts == 1:
            return mine
        ordered = [mine if q == self.part else xp.asarray(self.pieces[str(q)]) for q in range(self.parts)]
        self.pieces = {}
        if kind == "gather":
            return xp.concatenate(ordered, axis=1)
        total = ordered[0].copy()
        for piece in ordered[1:]:  # partition order, never arrival order
            total += piece
        return total

    # -- results and checkpoints ----------------------------------------------------------------
    def result(self) -> dict[str, Any]:
        return {"step": self.step}

    def state_dict(self) -> dict[str, Any]:
        """Counters, buffers, the step in flight: layer caches (a checkpoint may fall mid-step) and RNGs."""
        caches = [{k: v for k, v in vars(layer).items() if k.startswith("_")} for layer in self.plan.layers]
        loss_cache = {k: v for k, v in vars(self.loss_layer).items() if k.startswith("_")}
        rngs = [json.dumps(layer.rng.bit_generator.state) for layer in self.plan.layers if hasattr(layer, "rng")]
        return {**default_state(self), "layer_caches": caches, "loss_cache": loss_cache, "rngs": rngs}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = dict(state)
        caches, loss_cache, rngs = state.pop("layer_caches"), state.pop("loss_cache"), state.pop("rngs")
        with on_device(self.device):
            flat, grad = state.pop("flat"), state.pop("grad")
            self.flat[...] = self.xp.asarray(flat)  # in place: the layers' params are views of these
            self.grad[...] = self.xp.asarray(grad)
            load_default_state(self, state)
            for layer, cache in zip(self.plan.layers, caches):
                for k, v in cache.items():
                    setattr(layer, k, self._revive(v))
            for k, v in loss_cache.items():
                setattr(self.loss_layer, k, self._revive(v))
        for layer, rng_state in zip([la for la in self.plan.layers if hasattr(la, "rng")], rngs):
            layer.rng.bit_generator.state = json.loads(rng_state)

    def _revive(self, v: Any) -> Any:
        if isinstance(v, np.ndarray):
            return self.xp.asarray(v)
        if isinstance(v, list):
            return tuple(v)  # shapes were tuples
        return v

    def size_hint(self) -> int:
        return self.plan.num_params
