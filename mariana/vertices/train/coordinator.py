"""The cpu-cluster control vertices: a GroupCoordinator per worker group, and the data ledger that
master compute keeps (Mariana's job scheduling).

Data shards: each epoch's seeded permutation of the training set is cut into shards of
``batch_size / groups`` samples; step k of an epoch trains shards ``k*G .. k*G + G - 1``, one per
group (so G groups see exactly the samples dnn-dp's G replicas see).

The ledger (``DataLedger``, run as master compute) hands shards out: when the coordinators ask
for step k (aggregate ``want``), it broadcasts ``assign = {step, epoch, shards}``; the
coordinators read the assignment and send the samples to their workers. The ledger lives in the
master's broadcasts, which every checkpoint holds. When a worker is lost and the job rolls back,
the ledger rolls back with it: shards handed out after that checkpoint are handed out again, to
the same groups, so in the model every sample of an epoch is trained exactly once, none skipped
or repeated (``log_samples`` writes the ids to metrics.jsonl to audit it).

The GroupCoordinator hands its group's workers their mini-batches up to ``depth`` steps ahead,
gathers the loss from the group's partition 0, and keeps the counters (samples).
"""

from __future__ import annotations

from typing import Any

from ...engine import Context, Message, Vertex
from ...engine.graph import MasterContext

__all__ = ["GroupCoordinator", "DataLedger"]


class DataLedger:
    """Master compute: assign step k's data shards to the groups when the coordinators want it."""

    def __init__(self, groups: int, steps_per_epoch: int, total_steps: int) -> None:
        self.groups, self.steps_per_epoch, self.total_steps = groups, steps_per_epoch, total_steps

    def __call__(self, mctx: MasterContext) -> None:
        want = mctx.aggregates.get("_want")
        if want is None or want >= self.total_steps:
            return
        current = mctx.broadcasts.get("assign")
        if current is not None and current["step"] >= want:
            return
        epoch, k = divmod(int(want), self.steps_per_epoch)
        mctx.broadcast("assign", {"step": int(want), "epoch": epoch,
                                  "shards": [k * self.groups + g for g in range(self.groups)]})


class GroupCoordinator(Vertex):
    """Group ``group``'s coordinator: mini-batches out to the workers, loss in, counters."""

    state_fields = (*Vertex.state_fields, "batch_size", "depth", "group", "groups", "log_samples", "position", "served",
                    "shard_size", "total_steps", "trained", "workers")  # not the data source: rebuilt

    def __init__(self, id: str, group: int, groups: int, workers: list[str], source: Any,
                 batch_size: int, total_steps: int, depth: int = 2, log_samples: bool = False) -> None:
        super().__init__(id, 0)
        self.group, self.groups, self.workers = group, groups, workers
        self.source, self.batch_size = source, batch_size
        self.total_steps, self.depth, self.log_samples = total_steps, depth, log_samples
        self.shard_size = batch_size // groups
        self.served = 0  # steps whose batch went out
        self.trained = 0  # steps whose loss came back
        self.position: dict[str, int] = {}

    def compute(self, ctx: Context, messages: list[Message]) -> None:
        for m in messages:
            if m.tag == "loss":
                n = int(m.payload["n"])
                ctx.aggregate("loss", (float(m.payload["loss"]) * n, n))
                ctx.aggregate("counter/samples", n)
                self.trained += 1
        assign = ctx.broadcast("assign")
        if assign is not None and assign["step"] == self.served < self.total_steps:
            self._serve(ctx, assign)
        if self.served < self.total_steps and self.served - self.trained <= self.depth:
            ctx.aggregate("_want", self.served)
        if self.trained >= self.total_steps:
            ctx.vote_to_halt()  # otherwise stay active: the next assignment needs no message to arrive

    def _serve(self, ctx: Context, assign: dict[str, Any]) -> None:
        step, shard = assign["step"], assign["shards"][self.group]
        k = step % (self.source.size // self.batch_size)
        within = shard - k * self.groups  # which shard of the step: the offset inside the global batch
        x, y, pos = self.source.rows(step, within * self.shard_size, self.shard_size)
        batch = {"step": step, "x": x, "y": y, "pos": pos}
        for w in self.workers:
            ctx.send(w, batch, tag="batch")
        if self.log_samples:
            ctx.aggregate("samples_served", [assign["epoch"], self.source.ids(step, within * self.shard_size,
                                                                              self.shard_size).tolist()])
        self.served += 1
        self.value = step
        self.position = self.source.position(step)
