"""Gradient exchange between data-parallel members and parameter shards (every framework's).

A *member* is a vertex holding a whole flat parameter vector of some model (a dnn-dp replica,
or partition p of a cnn-hybrid / cpu-cluster group: then the members are partition p of every
group). Members compute gradients into a flat ``grad`` buffer; *parameter shards*
(``ParameterShardVertex``) each own a contiguous range ``[lo, hi)`` of the flat vector, sum the
members' gradient slices in member order, apply the optimizer and send the fresh slice back.

A ``Topology`` decides how gradients travel and where shards live:

- ``Linear``: one shard per member, shard i beside member i; every member sends every shard its
  slice (reduce-scatter + all-gather; two supersteps per step).
- ``Hierarchical`` (``hier``): linear's shards, with the traffic shaped by hosts. The gradient
  runs member to member in member order, each adding its own (so a host's members sum through
  shared memory and each piece crosses a host boundary once), and each fresh piece goes once to
  every other host, whose first member passes it on (``host_groups``). The sums are linear's,
  bit for bit; ``exchange=auto`` takes it where a host holds several of many members.
- ``ParameterServer``: ``servers`` shards, all beside member 0 (or wherever the job places them).
- ``Tree``: members reduce whole gradients pairwise up a binomial tree (log2 N rounds, one
  superstep each) to member 0, which hands the sum to one shard.
- ``AllReduce``: no shards. Every member sends every other member its gradient buckets; each
  sums them in member order and applies the optimizer to its own copy of the whole vector, as
  DDP does (one superstep per step; (N-1) x the model per member and step against linear's
  2 (N-1)/N: the layout for few members). Parameters are bit-identical to ``linear``'s.

``SyncedMember`` is the member side (a mixin for a Vertex): ``push_gradients`` after backward,
``take_exchange`` for incoming ``param``/``tree`` messages, ``params_ready`` when every fresh
slice is in. Its per-step state is plain attributes, so checkpoints capture it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...engine import Context, Message, Vertex
from ...errors import UsageError
from .layers import to_module
from .model import bind_layer_grads
from .optim import Optimizer, replica_stats

__all__ = ["Shard", "Topology", "Linear", "Hierarchical", "host_groups", "hosts_pay", "ParameterServer", "Tree",
           "TOPOLOGIES", "make_topology", "register_topology", "topology_choices", "topology_help",
           "AllReduce", "AUTO", "auto_topology", "exchange_choices",
           "SyncedMember", "ParameterShardVertex", "ParameterServerVertex", "shard_ranges", "tree_children",
           "tree_parent", "gradient_buckets", "BUCKET"]


def shard_ranges(num_params: int, shards: int, align: int = 16) -> list[tuple[int, int]]:
    """``shards`` contiguous, near-equal ranges covering ``[0, num_params)``, cut at multiples of
    ``align`` so that per-block statistics (``adagrad_approx``) see the same blocks whatever the
    number of shards or the exchange topology."""
    blocks = -(-num_params // align)
    bounds = [min(num_params, blocks * i // shards * align) for i in range(shards + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


def tree_children(rank: int, n: int) -> list[int]:
    """Children of ``rank`` in a binomial reduction tree over ``n`` members, in arrival order."""
    out, step = [], 1
    while step < n and rank % (2 * step) == 0:
        if rank + step < n:
            out.append(rank + step)
        step *= 2
    return out


def tree_parent(rank: int) -> int:
    return rank - (rank & -rank)


@dataclass(frozen=True)
class Shard:
    """A parameter shard: its vertex id, its range of the flat vector, and the member it lives beside."""

    id: str
    lo: int
    hi: int
    home: int


class Topology(ABC):
    """How members' gradients reach the shards; see the module docstring. A new topology is one
    subclass decorated with ``@register_topology``: every job's ``exchange=`` then offers it."""

    name: str
    #: one line for ``mariana jobs``: what it does and where its shards live
    help: str = ""
    #: members' gradient buffers may live in send-buffer memory (``SyncedMember.use_send_buffers``)
    send_buffers = True
    #: usable by partitioned models (cnn-hybrid: one exchange per partition across groups)
    partitioned = True

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Topology:
        """The topology a job's resolved config asks for (its own keys, such as ``ps_shards``)."""
        return cls()

    @abstractmethod
    def shards(self, num_params: int, members: int, namespace: str = "") -> list[Shard]:
        """The shards of a flat vector of ``num_params`` elements shared by ``members`` members."""

    streams = True  # gradients may leave bucket by bucket during backward
    replicated = False  # members apply the optimizer themselves (no shard vertices)
    #: shards send fresh pieces once per host (``ParameterShardVertex``): "always", "hosts"
    #: (where ``host_groups`` says it pays) or None (to every member)
    relay: str | None = None

    def tick(self, ctx: Context, member: "SyncedMember") -> None:
        """Called at each of the member's computes, before its messages: work due this superstep."""
        return None

    def push(self, ctx: Context, member: "SyncedMember", ready_from: int = 0) -> None:
        """Send every bucket of ``member.grad`` at or after flat offset ``ready_from`` not sent yet
        (its gradient is final), with its statistics, to its shard."""
        buckets = member.buckets
        while member.next_bucket >= 0 and buckets[member.next_bucket][1] >= ready_from:
            sid, lo, hi = buckets[member.next_bucket]
            member.next_bucket -= 1
            g = to_module(member.grad[lo:hi], np)  # a view on the CPU, a host copy from a GPU
            payload: dict[str, Any] = {"g": g, "at": lo}
            if member.stats_kind is not None:
                payload["s"] = replica_stats(member.stats_kind, g, member.block)
            member.sync_bytes += g.nbytes + (payload["s"].nbytes if "s" in payload else 0)
            ctx.send(sid, payload, tag="grad")

    def take(self, ctx: Context, member: "SyncedMember", m: Message) -> bool:
        """Handle a topology-specific message; False if ``m`` is not one."""
        return False


#: ``exchange=`` name -> topology class, filled by ``register_topology``.
TOPOLOGIES: dict[str, type[Topology]] = {}


def register_topology(cls: type[Topology]) -> type[Topology]:
    """Class decorator: make ``cls`` a choice of every job's ``exchange=`` key."""
    TOPOLOGIES[cls.name] = cls
    return cls


@register_topology
class Linear(Topology):
    name = "linear"
    help = "a shard beside each member (reduce-scatter + all-gather)"

    def shards(self, num_params: int, members: int, namespace: str = "") -> list[Shard]:
        return [Shard(f"shard{namespace}-{i:03d}", lo, hi, i)
                for i, (lo, hi) in enumerate(shard_ranges(num_params, members))]


def host_groups(ctx: Context, ids: list[str]) -> list[list[str]]:
    """``ids`` grouped by host (``Context.host_of``), groups in order of first appearance."""
    groups: dict[str, list[str]] = {}
    for i in ids:
        groups.setdefault(ctx.host_of(i), []).append(i)
    return list(groups.values())


def hosts_pay(groups: list[list[str]]) -> bool:
    """Whether shaping traffic by hosts sends fewer bytes across them than ``linear``: several
    hosts, one of them with several members."""
    return len(groups) > 1 and max(len(g) for g in groups) > 1


@register_topology
class Hierarchical(Linear):
    """Linear's shards and sums, with the bytes across hosts cut (see the module docstring).

    Reduce: member 0 releases the pieces of one shard per superstep (the last layers' first), so
    every host boundary carries one shard's pieces at a time while the others move on. Member r
    adds its own gradient to the partial sum of members 0..r-1 it receives (tag ``chain``; into
    its gradient buffer, in place: ``P + g`` is ``g + P`` bit for bit) and passes it to member r+1;
    the last member sends the whole sum to the piece's shard, which applies it exactly as it
    applies linear's N slices summed in member order. With ``N`` members a step takes about
    ``2N + 2`` supersteps; each host sends about ``(2H - 1) / H`` x the model in all, against
    linear's ``2 k (H - 1) / H`` with ``k`` members per host.

    ``hosts`` (``exchange=auto``): only where ``hosts_pay``; elsewhere exactly linear."""

    name = "hier"
    help = ("linear's shards; the gradient runs member to member (one crossing per host "
            "boundary), fresh pieces go once per host (bit-identical to linear)")
    partitioned = False

    def __init__(self, hosts: bool = False) -> None:
        self.only_where_it_pays = hosts
        self.relay = "hosts" if hosts else "always"

    def chained(self, ctx: Context, member: "SyncedMember") -> bool:
        return not self.only_where_it_pays or hosts_pay(host_groups(ctx, member.member_ids))

    def push(self, ctx: Context, member: "SyncedMember", ready_from: int = 0) -> None:
        buckets = member.buckets
        if member.next_bucket == len(buckets) - 1 and member.chain_final:  # the step's first push
            member.chain, member.chain_final = self.chained(ctx, member), False
            member.chain_step += 1
            if member.chain and member.rank == 0:
                member.chain_queue = [[i for i, b in enumerate(buckets) if b[0] == sid]
                                      for sid in reversed(dict.fromkeys(b[0] for b in buckets))]
        if not member.chain:
            super().push(ctx, member, ready_from)
            member.chain_final = member.next_bucket < 0
            return
        while member.next_bucket >= 0 and buckets[member.next_bucket][1] >= ready_from:
            _, lo, hi = buckets[member.next_bucket]
            member.next_bucket -= 1
            if member.stats_kind is not None:  # of its own gradient, before sums land in it
                g = to_module(member.grad[lo:hi], np)
                member.own_stats[str(lo)] = np.asarray(replica_stats(member.stats_kind, g, member.block), np.float32)
        if member.next_bucket < 0 and not member.chain_final:  # backward is done: the gradient is final
            member.chain_final = True
            for at in sorted(member.chain_wait, key=int, reverse=True):
                if member.chain_wait[at]["n"] == member.chain_step:
                    self._add_and_pass(ctx, member, member.chain_wait.pop(at))
        if member.rank == 0:
            self.tick(ctx, member)

    def tick(self, ctx: Context, member: "SyncedMember") -> None:
        """Member 0: release the next shard's pieces, one shard per superstep, once final."""
        queue = member.chain_queue
        if not queue or member.chain_sent_at == ctx.superstep:
            return
        if not member.chain_final and min(queue[0]) <= member.next_bucket:
            return
        member.chain_sent_at = ctx.superstep
        for i in queue.pop(0):
            sid, lo, hi = member.buckets[i]
            payload: dict[str, Any] = {"g": to_module(member.grad[lo:hi], np), "at": lo}
            if member.stats_kind is not None:
                payload["s"] = member.own_stats.pop(str(lo))
            self._pass(ctx, member, sid, payload)
        ctx.flush()

    def take(self, ctx: Context, member: "SyncedMember", m: Message) -> bool:
        if m.tag != "chain":
            return False
        payload = m.payload
        if payload["n"] == member.chain_step and member.chain_final:  # this step's gradient is final here
            self._add_and_pass(ctx, member, payload)
        else:  # ahead of this member's backward: keep a copy (the payload is this superstep's only)
            member.chain_wait[str(payload["at"])] = {k: (np.array(v) if isinstance(v, np.ndarray) else v)
                                                     for k, v in payload.items()}
        return True

    def _add_and_pass(self, ctx: Context, member: "SyncedMember", payload: dict[str, Any]) -> None:
        lo = int(payload["at"])
        own = member.grad[lo:lo + len(payload["g"])]
        member.xp.add(member.xp.asarray(payload["g"]), own, out=own)
        out: dict[str, Any] = {"g": to_module(own, np), "at": lo}
        if "s" in payload:
            out["s"] = np.add(payload["s"], member.own_stats.pop(str(lo)))
        sid = next(b[0] for b in member.buckets if b[1] == lo)
        self._pass(ctx, member, sid, out)

    @staticmethod
    def _pass(ctx: Context, member: "SyncedMember", sid: str, payload: dict[str, Any]) -> None:
        """To the next member, or from the last one to the piece's shard."""
        member.sync_bytes += payload["g"].nbytes + (payload["s"].nbytes if "s" in payload else 0)
        if member.rank + 1 < member.members:
            ctx.send(member.member_ids[member.rank + 1], {**payload, "n": member.chain_step}, tag="chain")
        else:
            ctx.send(sid, payload, tag="grad")


@register_topology
class ParameterServer(Topology):
    name = "ps"
    help = "ps_shards dedicated parameter servers, all on worker 0"

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Topology:
        return cls(int(config.get("ps_shards", 1)))

    def __init__(self, servers: int = 1) -> None:
        if servers < 1:
            raise UsageError(f"config key 'ps_shards' must be >= 1, got {servers}")
        self.servers = servers

    def shards(self, num_params: int, members: int, namespace: str = "") -> list[Shard]:
        return [Shard(f"ps{namespace}-{i:03d}", lo, hi, 0)
                for i, (lo, hi) in enumerate(shard_ranges(num_params, self.servers))]


@register_topology
class Tree(Topology):
    name = "tree"
    help = "pairwise reduction up a binomial tree (log2 N rounds)"
    streams = False  # a member sends once its subtree's whole gradient is summed
    send_buffers = False  # children's gradients are summed into ``grad`` while its own was just sent up

    def shards(self, num_params: int, members: int, namespace: str = "") -> list[Shard]:
        return [Shard(f"shard{namespace}-000", 0, num_params, 0)]

    def push(self, ctx: Context, member: "SyncedMember", ready_from: int = 0) -> None:
        if ready_from > 0:
            return
        member.tree_stats = replica_stats(member.stats_kind, to_module(member.grad, np), member.block)
        member.tree_waiting = tree_children(member.rank, member.members)
        if not member.tree_waiting:
            self._up(ctx, member)

    def take(self, ctx: Context, member: "SyncedMember", m: Message) -> bool:
        if m.tag != "tree":
            return False
        xp = member.xp
        xp.add(member.grad, xp.asarray(m.payload["g"]), out=member.grad)
        if member.tree_stats is not None:
            np.add(member.tree_stats, m.payload["s"], out=member.tree_stats)
        member.tree_waiting.remove(m.payload["rank"])
        if not member.tree_waiting:
            self._up(ctx, member)
        return True

    @staticmethod
    def _up(ctx: Context, member: "SyncedMember") -> None:
        """The whole subtree's gradient is here: pass it up, or to the shard from the root."""
        payload: dict[str, Any] = {"g": to_module(member.grad, np), "rank": member.rank, "at": 0}
        if member.tree_stats is not None:
            payload["s"] = member.tree_stats
        member.sync_bytes += payload["g"].nbytes + (payload["s"].nbytes if "s" in payload else 0)
        if member.rank:
            ctx.send(member.member_ids[tree_parent(member.rank)], payload, tag="tree")
        else:
            ctx.send(member.shards[0][0], payload, tag="grad")


@register_topology
class AllReduce(Topology):
    """Every member gets every member's gradient and updates its own copy (see the module docstring).

    A member's gradient buckets of step s are read by the others in the superstep after it sent
    them, while it computes step s+1: members therefore keep two gradient buffers and alternate
    (``SyncedMember.next_grad_buffer``), so a co-located member's views are never overwritten."""

    name = "allreduce"
    help = "no shards: every member sums the others' gradients and updates its own copy (one superstep per step)"
    replicated = True
    partitioned = False

    def shards(self, num_params: int, members: int, namespace: str = "") -> list[Shard]:
        return []

    def push(self, ctx: Context, member: "SyncedMember", ready_from: int = 0) -> None:
        buckets = member.buckets
        others = [m for m in member.member_ids if m != member.id]
        pushed_last = False
        while member.next_bucket >= 0 and buckets[member.next_bucket][1] >= ready_from:
            _, lo, hi = buckets[member.next_bucket]
            member.next_bucket -= 1
            pushed_last = member.next_bucket < 0
            if not others and member.stats_kind is None:
                continue
            g = to_module(member.grad[lo:hi], np)
            payload: dict[str, Any] = {"g": g, "at": lo}
            if member.stats_kind is not None:
                payload["s"] = member.own_stats[str(lo)] = replica_stats(member.stats_kind, g, member.block)
            for other in others:
                member.sync_bytes += g.nbytes + (payload["s"].nbytes if "s" in payload else 0)
                ctx.send(other, payload, tag="grad")
        if pushed_last and member.pending_params == 0:  # a lone member: nothing to wait for
            member.apply_update()

    def take(self, ctx: Context, member: "SyncedMember", m: Message) -> bool:
        if m.tag != "grad":
            return False
        lo = int(m.payload["at"])
        member.incoming.setdefault(lo, {})[member.member_ids.index(m.src)] = m.payload
        member.pending_params -= len(m.payload["g"])
        if member.pending_params == 0:
            member.apply_update()
        return True


#: ``exchange=auto``: the fewest bytes per member and step for the member count and hosts.
#: ``allreduce`` sends (N-1) x the model per member and keeps N copies of the optimizer state,
#: ``linear`` 2(N-1)/N x the model and one copy in all, at the price of a second superstep per
#: step: at two members the bytes are equal and allreduce's single superstep wins; beyond,
#: linear does, shaped by hosts (``Hierarchical``) where a host holds several members.
AUTO = "auto"
AUTO_HELP = ("allreduce for up to 2 members; beyond, linear, run as hier where a host holds "
             "several members (the fewest bytes per member and step)")


def auto_topology(members: int, partitioned: bool = False) -> str:
    """The topology ``exchange=auto`` stands for with ``members`` members (``hier`` chooses
    between linear and its host-shaped run at run time, by the hosts the members are on)."""
    if partitioned:
        return "linear"
    return "allreduce" if members <= 2 else "hier"


def topology_choices(partitioned: bool = False) -> tuple[str, ...]:
    """The registered ``exchange=`` names (``partitioned``: only those partitioned models can use);
    a job's key also offers ``auto`` (``exchange_choices``)."""
    return tuple(name for name, cls in TOPOLOGIES.items() if cls.partitioned or not partitioned)


def exchange_choices(partitioned: bool = False) -> tuple[str, ...]:
    """A job's ``exchange=`` choices: ``auto`` and every registered topology it can use."""
    return (AUTO, *topology_choices(partitioned))


def topology_help(partitioned: bool = False) -> str:
    """The ``exchange`` key's help: every choice with its line."""
    auto = f"{AUTO}: {'linear' if partitioned else AUTO_HELP}"
    return "; ".join([auto, *(f"{name}: {TOPOLOGIES[name].help}" for name in topology_choices(partitioned))])


def make_topology(config: dict[str, Any], members: int, partitioned: bool = False) -> Topology:
    """The topology of a job's resolved config (``exchange=`` and the topology's own keys) for
    ``members`` members; ``auto`` picks by the member count (``auto_topology``)."""
    name, choices = config["exchange"], exchange_choices(partitioned)
    if name not in choices:
        raise UsageError(f"unknown exchange {name!r}; choose one of: {', '.join(choices)}")
    if name == AUTO:
        name = auto_topology(members, partitioned)
        if name == Hierarchical.name:
            return Hierarchical(hosts=True)
    return TOPOLOGIES[name].from_config(config)


#: Gradient buckets hold at most this many elements (4 MB of float32) ...
BUCKET = 1 << 20
#: ... and are cut at a tensor boundary only where both sides keep at least this many, so a
#: small model still sends one message per shard and step.
MIN_BUCKET = 1 << 16


def gradient_buckets(shards: list[tuple[str, int, int]], tensor_sizes: list[int],
                     align: int = 16) -> list[tuple[str, int, int]]:
    """``(shard id, lo, hi)`` pieces of the flat vector, ascending: cut at every shard boundary,
    at tensor boundaries (rounded down to ``align``, so per-block statistics keep their blocks)
    and every ``BUCKET`` elements. Members and shards agree on them without exchanging them:
    each piece carries its offset."""
    out = []
    bounds = [0]
    for size in tensor_sizes:
        bounds.append(bounds[-1] + size)
    for sid, lo, hi in shards:
        cuts = [lo]
        for b in sorted({b // align * align for b in bounds}):
            if b - cuts[-1] >= MIN_BUCKET and hi - b >= MIN_BUCKET:
                cuts.append(b)
        cuts.append(hi)
        for a, b in zip(cuts[:-1], cuts[1:]):
            step = max(align, BUCKET // align * align)
            out += [(sid, x, min(b, x + step)) for x in range(a, b, step)]
    return out


class SyncedMember:
    """Mixin for a Vertex that holds a flat parameter vector kept in sync through shards.

    Call ``init_sync`` once the flat ``self.flat`` / ``self.grad`` buffers exist (``self.xp`` is
    their array module) and ``layers`` are bound to them. Members compute the gradient of the *global* batch's mean loss (their
    mean loss times local / global batch, applied to the loss gradient, not in an extra pass
    over the parameters' gradient), so the shards only sum. ``topology`` and the layers are
    rebuilt, never in the class's ``state_fields``. During backward, ``push_ready(ctx, offset)``
    sends the buckets whose gradients are final (offset and after: backward runs from the last
    layer to the first) and lets them leave at once (``ctx.flush``), so the transfer overlaps
    the rest of backward; ``push_gradients`` sends the rest.
    """

    id: str
    flat: Any
    grad: Any
    xp: Any

    def init_sync(self, rank: int, member_ids: list[str], shards: list[Shard], topology: Topology,
                  optimizer: Optimizer, layers: list[Any]) -> None:
        self.rank, self.members, self.member_ids = rank, len(member_ids), member_ids
        self.grad_layers = layers  # whose gradients are views of ``grad`` (not plain: never checkpointed)
        self.shards = [(s.id, s.lo, s.hi) for s in shards]
        self.topology = topology
        self.stats_kind, self.block = optimizer.stats, optimizer.block
        whole = [("", 0, int(self.flat.size))]  # a replicated member's buckets cut the whole vector
        sizes = [int(a.size) for layer in layers for a in layer.params.values()]
        self.buckets = gradient_buckets(self.shards or whole, sizes or [int(self.flat.size)])
        self.next_bucket = len(self.buckets) - 1  # the last layers' bucket goes first
        self.params_ready = True
        self.pending_params = 0  # elements of fresh parameters still to come this step
        self.tree_waiting: list[int] = []
        self.tree_stats: Any = None
        self.sync_bytes = 0  # gradient and statistics bytes sent, for counters (the member resets it)
        self.params_fresh = False  # set when a step's parameters are all in; the member clears it
        #: the gradient buffers live in send-buffer memory (a static attribute: after a restore in
        #: this process they still do; a new process moves them again)
        self.on_send_buffers = False
        # ``Hierarchical``: this step's gradient runs member to member (decided at its first push);
        # steps whose gradient is final here; pieces of a later step kept until it is; member 0's
        # shards still to release (piece indices) and when it last did; fresh pieces counted only
        # at the next compute (``take_exchange``)
        self.chain, self.chain_step, self.chain_sent_at, self.chain_final = False, 0, -1, True
        self.chain_wait: dict[str, dict[str, Any]] = {}
        self.chain_queue: list[list[int]] = []
        self.deferred_params = 0
        self.own_stats: dict[str, Any] = {}  # this step's statistics per bucket, until used
        if topology.replicated:  # the optimizer runs here: its state, the other gradient buffer
            self.optimizer = optimizer
            self.opt_state = optimizer.init_state(self.flat)
            self.grad_spare = self.xp.zeros(self.grad.shape, dtype=self.grad.dtype)
            self.incoming: dict[int, dict[int, dict[str, Any]]] = {}  # {bucket lo: {member: payload}}

    def use_send_buffers(self, ctx: Context) -> None:
        """Once, at the first compute: move the gradient buffers (``grad``, and ``grad_spare``
        with a replicated topology) into ``ctx.send_buffer`` memory, keeping their values, and
        rebind the layers' gradients to them. Then gradient buckets reach same-host
        peers with no copy. Safe by the exchange's own schedule: a bucket sent in superstep t is
        read by shards / members in t+1, and this member writes it again at the earliest in t+2
        (its next backward waits for the fresh parameters, which come back in t+2; ``AllReduce``
        alternates two buffers). ``Tree`` sums children's gradients into ``grad`` in place while
        its own was sent up the previous superstep: it keeps plain buffers, as do GPU members."""
        if self.on_send_buffers:
            return
        self.on_send_buffers = True
        if self.xp is not np or not self.topology.send_buffers:
            return
        names = ("grad", "grad_spare") if self.topology.replicated else ("grad",)
        for name in names:
            old = getattr(self, name)
            buf = ctx.send_buffer(int(old.size), old.dtype)
            buf[...] = old
            setattr(self, name, buf)
        bind_layer_grads(self.grad_layers, self.grad)

    def push_ready(self, ctx: Context, ready_from: int) -> None:
        """Backward has made the gradient final from flat offset ``ready_from`` on: send it.

        Fresh parameters of those buckets may come back before backward ends (a partition's
        backward spans supersteps); they only touch layers whose backward is done."""
        if self.topology.streams:
            self._await_params()
            before = self.next_bucket
            self.topology.push(ctx, self, ready_from)
            if self.next_bucket != before:
                ctx.flush()

    def push_gradients(self, ctx: Context) -> None:
        """Backward is done: send what is left of this step's gradient, await fresh parameters."""
        self._await_params()
        self.topology.push(ctx, self, 0)
        self.next_bucket = len(self.buckets) - 1

    def _await_params(self) -> None:
        if self.next_bucket == len(self.buckets) - 1:  # the step's first push
            self.params_ready = False
            if self.topology.replicated:
                self.pending_params = (self.members - 1) * int(self.flat.size)
            else:
                self.pending_params = sum(hi - lo for _, lo, hi in self.shards)

    def next_grad_buffer(self) -> None:
        """Swap to the other gradient buffer before a replicated member's backward (see
        ``AllReduce``): the layers write into it from now on."""
        self.grad, self.grad_spare = self.grad_spare, self.grad
        bind_layer_grads(self.grad_layers, self.grad)

    def apply_update(self) -> None:
        """Every member's gradient of the step is in: per bucket, the optimizer sums them in
        member order (as a shard does) and updates this member's whole vector; then the
        parameters are fresh. Our own buffer is only read: co-located members may still read it."""
        xp = self.xp
        for _, lo, hi in self.buckets:
            got = self.incoming.pop(lo, {})
            grads = [self.grad[lo:hi] if r == self.rank else xp.asarray(got[r]["g"]) for r in range(self.members)]
            stats = None
            if self.stats_kind is not None:
                parts = [self.own_stats.pop(str(lo)) if r == self.rank else got[r]["s"] for r in range(self.members)]
                stats = np.array(parts[0], dtype=np.float32)
                for other in parts[1:]:
                    np.add(stats, other, out=stats)
            self.optimizer.step(self.flat, grads, self.opt_state, stats, lo)
        self.params_ready, self.params_fresh = True, True

    def take_exchange(self, ctx: Context, m: Message) -> bool:
        """Consume a ``param`` piece or a topology message; False if ``m`` is neither.

        Returns True also for the last piece, after which ``params_ready`` is set.
        """
        if m.tag == "param":
            lo, p = m.payload["lo"], m.payload["p"]
            for other in m.payload.get("to", ()):  # this member's host gets the piece through it
                ctx.send(other, {"lo": lo, "p": p}, tag="param")
            self.flat[lo:lo + len(p)] = self.xp.asarray(p)
            if "to" in m.payload or m.payload.get("late"):
                # a relayed piece reaches the others a superstep later: count this one then, so
                # every member's step starts (and aggregates) in one superstep
                self.deferred_params += len(p)
            else:
                self.pending_params -= len(p)
                self.params_ready = self.params_fresh = self.pending_params == 0
            return True
        return self.topology.take(ctx, self, m)

    def exchange_tick(self, ctx: Context) -> None:
        """At each compute, before its messages: count fresh pieces deferred by the last one, and
        let the topology do what is due this superstep."""
        if self.deferred_params:
            self.pending_params -= self.deferred_params
            self.deferred_params = 0
            self.params_ready = self.params_fresh = self.pending_params == 0
        self.topology.tick(ctx, self)

    @property
    def exchange_busy(self) -> bool:
        """Work is due next superstep even without a message (the member must not halt)."""
        return bool(self.deferred_params or self.chain_queue)


def _summed(grads: list[dict[str, Any]]) -> tuple[list[Any], Any]:
    """The members' gradient pieces (summed by the optimizer, in member order: message order)
    and their statistics summed likewise."""
    stats = None if "s" not in grads[0] else np.array(grads[0]["s"], dtype=np.float32)
    for other in grads[1:]:
        if stats is not None:
            np.add(stats, other["s"], out=stats)
    return [p["g"] for p in grads], stats


class ParameterShardVertex(Vertex):
    """Owns ``[lo, hi)`` of the flat parameter vector and its optimizer state."""

    state_fields = (*Vertex.state_fields, "hi", "lo", "state", "updates")

    def __init__(self, id: str, lo: int, hi: int, init: np.ndarray, optimizer: Optimizer, replicas: list[str],
                 relay: str | None = None) -> None:
        super().__init__(id, np.array(init[lo:hi], dtype=np.float32))
        self.lo, self.hi, self.optimizer, self.replicas = lo, hi, optimizer, replicas
        self.relay = relay  # ``Topology.relay``: fresh pieces once per host
        self.state = optimizer.init_state(self.value)
        self.updates = 0
        self.on_send_buffers = False  # ``value`` moved into send-buffer memory (static: see SyncedMember)

    def compute(self, ctx: Context, messages: list[Message]) -> None:
        """Per bucket, in the order the members sent them (last layers first): sum, update, send
        the fresh piece back and let it leave while the next bucket is updated."""
        if not self.on_send_buffers:
            # the fresh pieces leave from a send buffer: sent in t, read by the members in t+1, and
            # this shard updates them again at the earliest in t+2 (the members' next gradients,
            # computed once the pieces are in, arrive then)
            self.on_send_buffers = True
            buf = ctx.send_buffer(int(self.value.size), self.value.dtype)
            buf[...] = self.value
            self.value = buf
        buckets: dict[int, list[dict[str, Any]]] = {}
        for m in messages:
            if m.tag == "grad":
                buckets.setdefault(int(m.payload.get("at", self.lo)), []).append(m.payload)
        fanout = self._fanout(ctx) if buckets else []
        for at, grads in buckets.items():
            g, stats = _summed(grads)
            start = at - self.lo
            self.optimizer.step(self.value, g, self.state, stats, start)
            piece = self.value[start:start + len(g[0])]
            for r, extra in fanout:
                ctx.send(r, {"lo": at, "p": piece, **extra}, tag="param")
            ctx.flush()
        if buckets:
            self.updates += 1
        ctx.vote_to_halt()

    def _fanout(self, ctx: Context) -> list[tuple[str, dict[str, Any]]]:
        """(member, what the piece carries besides itself): every member; relayed, one member per
        other host with the rest of that host's members to pass it to (``to``), and the others
        told their piece came early (``late``: it counts when the relayed ones arrive)."""
        groups = host_groups(ctx, self.replicas) if self.relay else []
        if not groups or (self.relay == "hosts" and not hosts_pay(groups)):
            return [(r, {}) for r in self.replicas]
        here = ctx.host_of(self.id)
        out: list[tuple[str, dict[str, Any]]] = []
        for ids in groups:
            if len(ids) > 1 and ctx.host_of(ids[0]) != here:
                out.append((ids[0], {"to": ids[1:]}))
            else:
                out += [(r, {"late": True}) for r in ids]
        return out

    def result(self) -> dict[str, Any]:
        return {"lo": self.lo, "p": self.value, "updates": self.updates}

    def params_snapshot(self) -> dict[str, Any]:
        """This shard of the model, for ``RUN/params/ss-NNNNNN/`` (read by ``mariana params export``)."""
        return {"lo": self.lo, "hi": self.hi, "value": self.value, "updates": self.updates}

    def size_hint(self) -> int:
        return self.hi - self.lo


class ParameterServerVertex(Vertex):
    """Server ``s`` of S: owns segment s of every partition's flat vector (cpu-cluster).

    Members of partition k are partition k of every group; they use the ``ParameterServer``
    topology (``ps-NNN`` ids), so each sends server s its slice ``shard_ranges(len_k, S)[s]``.
    Per partition the server sums the members' slices in member order, applies the optimizer
    elementwise and sends the fresh slice back, exactly as ``ParameterShardVertex`` does: S
    servers give the parameters of one. With ``counters`` it reports the bytes it exchanged
    as the aggregate ``counter/ID/bytes``.
    """

    state_fields = (*Vertex.state_fields, "counters", "segments", "states", "updates", "values")

    def __init__(self, id: str, segments: list[tuple[int, int, int]], inits: list[np.ndarray], optimizer: Optimizer,
                 members: list[list[str]], counters: bool = False) -> None:
        super().__init__(id, None)
        self.segments = [list(s) for s in segments]  # [k, lo, hi]
        self.values = [np.array(inits[k][lo:hi], dtype=np.float32) for k, lo, hi in segments]
        self.optimizer, self.members = optimizer, members
        self.states = [optimizer.init_state(v) for v in self.values]
        self.partition_of = {m: k for k, ids in enumerate(members) for m in ids}
        self.counters = counters
        self.updates = 0
        self.on_send_buffers = False

    def compute(self, ctx: Context, messages: list[Message]) -> None:
        if not self.on_send_buffers:  # fresh slices leave from send buffers (as ParameterShardVertex)
            self.on_send_buffers = True
            for i, v in enumerate(self.values):
                buf = ctx.send_buffer(int(v.size), v.dtype)
                buf[...] = v
                self.values[i] = buf
        buckets: dict[tuple[int, int], list[dict[str, Any]]] = {}
        for m in messages:
            if m.tag == "grad":
                k = self.partition_of[m.src]
                buckets.setdefault((k, int(m.payload["at"])), []).append(m.payload)
        segment = {k: i for i, (k, _, _) in enumerate(self.segments)}
        moved = 0
        for (k, at), grads in buckets.items():
            i = segment[k]
            g, stats = _summed(grads)
            start = at - self.segments[i][1]
            self.optimizer.step(self.values[i], g, self.states[i], stats, start)
            piece = self.values[i][start:start + len(g[0])]
            for member in self.members[k]:
                ctx.send(member, {"lo": at, "p": piece}, tag="param")
            ctx.flush()
            moved += sum(p["g"].nbytes + (p["s"].nbytes if "s" in p else 0) for p in grads)
            moved += piece.nbytes * len(self.members[k])
        if buckets:
            self.updates += 1
            if self.counters:
                ctx.aggregate(f"counter/{self.id}/bytes", moved)
        ctx.vote_to_halt()

    def result(self) -> dict[str, Any]:
        return {"segments": self.segments, "values": self.values, "updates": self.updates}

    def params_snapshot(self) -> dict[str, Any]:
        """This server's segments of the model, for ``RUN/params/ss-NNNNNN/``."""
        return self.result()

    def size_hint(self) -> int:
        return sum(hi - lo for _, lo, hi in self.segments)
