"""Small jobs that pin down each point of the superstep contract (docs/design.md, "The superstep contract").

They are ``Job`` objects reachable as ``contract_jobs:NAME`` so that every runtime, including
one whose workers are separate processes, builds the same graph from the same name and config.
Each vertex logs what it saw; ``result()`` returns the log.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from mariana import Graph, Vertex
from mariana.jobs import BuildContext, Job, Key


class Logger(Vertex):
    def __init__(self, id: str, edges=None) -> None:
        super().__init__(id, [], edges)


# -- 1. delivery in s+1 and out-edge values ----------------------------------------------------
class Relay(Logger):
    def compute(self, ctx, messages):
        for m in messages:
            self.value.append([ctx.superstep, m.src, m.payload])
        if ctx.superstep == 0 and self.id == "a":
            for dst, w in self.edges:
                ctx.send(dst, w)
        elif messages:
            for dst, w in self.edges:
                ctx.send(dst, messages[0].payload + w)
        ctx.vote_to_halt()


def build_delivery(config, bctx: BuildContext) -> Graph:
    g = Graph("delivery")
    g.add_vertices([Relay("a", [("b", 1)]), Relay("b", [("c", 10)]), Relay("c", [("a", 100)])])
    g.max_supersteps = 3
    return g


# -- 2. deterministic order: by (source id, send order), never by arrival ------------------------
class Sender(Logger):
    def compute(self, ctx, messages):
        if ctx.superstep == 0:
            for seq in range(3):
                ctx.send("sink", [self.id, seq])
        ctx.vote_to_halt()


class Sink(Logger):
    def compute(self, ctx, messages):
        self.value.extend([m.src, m.payload[1]] for m in messages)
        ctx.vote_to_halt()


def build_ordering(config, bctx: BuildContext) -> Graph:
    g = Graph("ordering")
    g.add_vertex(Sink("sink"))
    g.add_vertices(Sender(f"s{i:02d}") for i in range(config["senders"]))
    g.placement = bctx.placement
    return g


# -- 3. halting and waking ----------------------------------------------------------------------
class Sleeper(Logger):
    def compute(self, ctx, messages):
        self.value.append(ctx.superstep)
        if self.id == "alarm" and ctx.superstep < 4:
            if ctx.superstep == 3:
                ctx.send("sleeper", "wake up")
            return  # stays active until superstep 4
        ctx.vote_to_halt()


def build_halting(config, bctx: BuildContext) -> Graph:
    g = Graph("halting")
    g.add_vertices([Sleeper("alarm"), Sleeper("sleeper"), Sleeper("idle")])
    g.placement = bctx.placement
    return g


# -- 4. combiners per tag ----------------------------------------------------------------------
def merge_sorted(a, b):
    return sorted(a + b)  # user-defined; like every combiner, associative and commutative


class Emitter(Logger):
    def compute(self, ctx, messages):
        if ctx.superstep == 0:
            k = int(self.id[1:])
            ctx.send("sink", k, tag="sum")
            ctx.send("sink", 10 - k, tag="min")
            ctx.send("sink", k * k, tag="max")
            ctx.send("sink", [self.id], tag="custom")
            ctx.send("sink", np.full(3, float(k)), tag="vec")
            ctx.send("sink", k, tag="plain")
        ctx.vote_to_halt()


class TagSink(Logger):
    def compute(self, ctx, messages):
        for m in messages:
            p = m.payload.tolist() if isinstance(m.payload, np.ndarray) else m.payload
            self.value.append([m.tag, p])
        ctx.vote_to_halt()


def build_combiners(config, bctx: BuildContext) -> Graph:
    g = Graph("combiners")
    g.add_vertex(TagSink("sink"))
    g.add_vertices(Emitter(f"e{k}") for k in range(1, 7))
    for tag in ("sum", "min", "max"):
        g.add_combiner(tag, tag=tag)
    g.add_combiner("sum", tag="vec")
    g.add_combiner(merge_sorted, tag="custom")
    g.placement = bctx.placement
    return g


# -- 5. aggregators, visible in the next superstep -----------------------------------------------
def longest(a, b):
    return a if (len(a), a) >= (len(b), b) else b


class Contributor(Logger):
    def compute(self, ctx, messages):
        k = int(self.id[1:])
        self.value.append([ctx.superstep, {name: ctx.aggregated(name) for name in
                                           ("sum", "min", "max", "mean", "count", "fsum", "longest")}])
        if ctx.superstep < 2:
            for name in ("sum", "min", "max", "mean", "count"):
                ctx.aggregate(name, k + 10 * ctx.superstep)
            ctx.aggregate("fsum", 0.1 * k)
            ctx.aggregate("longest", self.id * k)
        else:
            ctx.vote_to_halt()


def build_aggregators(config, bctx: BuildContext) -> Graph:
    g = Graph("aggregators")
    g.add_vertices(Contributor(f"c{k}") for k in range(1, 5))
    for name in ("sum", "min", "max", "mean", "count", "fsum"):
        g.add_aggregator(name, name)
    g.add_aggregator("longest", longest)
    g.placement = bctx.placement
    return g


# -- 6. master compute: broadcast and halt -------------------------------------------------------
class Listener(Logger):
    def compute(self, ctx, messages):
        self.value.append([ctx.superstep, ctx.broadcast("phase"), ctx.aggregated("n")])
        ctx.aggregate("n", 1)


def master(mctx) -> None:
    mctx.broadcast("phase", f"phase-{mctx.superstep}")
    if mctx.superstep == 3:
        mctx.halt("master says stop")


def build_master(config, bctx: BuildContext) -> Graph:
    g = Graph("master")
    g.add_vertices(Listener(f"l{k}") for k in range(3))
    g.add_aggregator("n", "count")
    g.master_compute = master
    g.placement = bctx.placement
    return g


# -- 7. max_supersteps, num_vertices, superstep ------------------------------------------------
class Forever(Logger):
    def compute(self, ctx, messages):
        self.value.append([ctx.superstep, ctx.num_vertices])


def build_forever(config, bctx: BuildContext) -> Graph:
    g = Graph("forever")
    g.add_vertices(Forever(f"f{k}") for k in range(4))
    g.max_supersteps = config["max_supersteps"]
    g.placement = bctx.placement
    return g


# -- 8. a vertex that raises, a send to an unknown vertex -------------------------------------
class Faulty(Logger):
    def compute(self, ctx, messages):
        if ctx.superstep == 2 and self.id == "boom":
            if ctx.broadcast("how") == "raise":
                raise ZeroDivisionError("deliberate")
            ctx.send("nobody", 1)


def build_faulty(config, bctx: BuildContext) -> Graph:
    g = Graph("faulty")
    g.add_vertices([Faulty("boom"), Faulty("calm")])
    g.master_compute = lambda m: m.broadcast("how", config["how"])
    g.placement = bctx.placement
    return g


# -- 10. checkpoints of state that changes in place ------------------------------------------------
class InPlace(Vertex):
    """Adds 1 to every element of its array in place each superstep and sends the array itself
    (the same buffer) to the next vertex: a checkpoint must hold the values at its barrier."""

    state_fields = (*Vertex.state_fields, "nxt", "seen")

    def __init__(self, id: str, nxt: str, n: int) -> None:
        super().__init__(id, np.zeros(n))
        self.nxt, self.seen = nxt, 0.0

    def compute(self, ctx, messages):
        for m in messages:
            self.seen += float(m.payload[0])
        self.value += 1.0
        ctx.send(self.nxt, self.value)


def build_inplace(config, bctx: BuildContext) -> Graph:
    g = Graph("inplace")
    k, n = 4, config["size"]
    g.add_vertices(InPlace(f"v{i}", f"v{(i + 1) % k}", n) for i in range(k))
    g.max_supersteps = config["max_supersteps"]
    g.placement = bctx.placement
    return g


# -- 11. send buffers (Context.send_buffer): double-buffered sends with no copy ----------------------
class DoubleBuffered(Vertex):
    """Writes ``value + superstep`` into one of ``buffers`` send buffers (alternating) and sends it
    in two halves to the next vertex, which folds them into its value. With two buffers the
    send-buffer contract holds; with one it is broken (each buffer is sent every superstep)."""

    state_fields = (*Vertex.state_fields, "bufs", "k", "last", "n", "nxt")

    def __init__(self, id: str, nxt: str, n: int, buffers: int, last: int) -> None:
        super().__init__(id, np.full(n, float(len(id) + ord(id[-1])), dtype=np.float32))
        self.nxt, self.n, self.k, self.last = nxt, n, buffers, last
        self.bufs: list[np.ndarray] | None = None

    def compute(self, ctx, messages):
        if self.bufs is None:
            self.bufs = [ctx.send_buffer(self.n, np.float32) for _ in range(self.k)]
        half = self.n // 2
        for m in messages:
            lo = 0 if m.tag == "a" else half
            self.value[lo:lo + len(m.payload)] = self.value[lo:lo + len(m.payload)] * np.float32(0.5) + m.payload
        if ctx.superstep >= self.last:
            ctx.vote_to_halt()
            return
        buf = self.bufs[ctx.superstep % self.k]
        np.add(self.value, np.float32(ctx.superstep), out=buf)
        ctx.send(self.nxt, buf[:half], tag="a")
        ctx.send(self.nxt, buf[half:], tag="b")


def build_double_buffered(config, bctx: BuildContext) -> Graph:
    g = Graph("double_buffered")
    k, n = 4, config["size"]
    g.add_vertices(DoubleBuffered(f"v{i}", f"v{(i + 1) % k}", n, config["buffers"], config["last"]) for i in range(k))
    g.placement = lambda vid: int(vid[1:]) % max(1, bctx.workers)  # every message crosses workers
    return g


def _job(name: str, build, *keys: Key) -> Job:
    return Job(name=name, description=f"contract test: {name}", keys=tuple(keys), build=build)


delivery = _job("delivery", build_delivery)
ordering = _job("ordering", build_ordering, Key("senders", 12, "int", "number of senders"))
halting = _job("halting", build_halting)
combiners = _job("combiners", build_combiners)
aggregators = _job("aggregators", build_aggregators)
master_job = _job("master", build_master)
forever = _job("forever", build_forever, Key("max_supersteps", 5, "int", "limit"))
faulty = _job("faulty", build_faulty, Key("how", "raise", "str", "raise or unknown"))
inplace = _job("inplace", build_inplace, Key("max_supersteps", 40, "int", "limit"),
               Key("size", 1 << 18, "int", "elements per vertex array"))
double_buffered = _job("double_buffered", build_double_buffered, Key("size", 1 << 17, "int", "elements per buffer"),
                       Key("buffers", 2, "int", "send buffers per vertex"), Key("last", 12, "int", "last superstep"))


def values(result) -> dict[str, Any]:
    return result.values


# -- 9. tracing: a slow vertex, a NaN, a vertex that never returns ---------------------------------
class Traced(Logger):
    """Every vertex pings the next one each superstep; ``slow`` takes 60 ms at supersteps 2-4,
    ``bad`` sends a NaN at superstep 3, ``stuck`` never returns from superstep 2 (``block``), ``z``
    sends a 4 MB array at superstep 2 (``oversize``), and holds ``hold_mib`` MiB at superstep 3
    only (``hold``: a spike in its worker's resident memory)."""

    def compute(self, ctx, messages):
        s = ctx.superstep
        if self.id == "z" and ctx.broadcast("hold"):
            self.held = np.ones(ctx.broadcast("hold") << 17) if s == 3 else None  # (8-byte ones: touched)
        if self.id == "slow" and 2 <= s <= 4:
            time.sleep(0.06)  # the workload itself, not a wait for something
        if self.id == "stuck" and s == 2 and ctx.broadcast("block"):
            threading.Event().wait()
        if s >= 6:
            ctx.vote_to_halt()
            return
        payload = {"g": np.array([1.0, float("nan") if (self.id == "bad" and s == 3) else 2.0])}
        if self.id == "z" and s == 2 and ctx.broadcast("oversize"):  # z (worker 1) -> a (worker 0)
            payload["big"] = np.zeros(1 << 19)  # 4 MB: over a 1 MB --max-message-mb, lost on the wire
        ctx.send(self.edges[0][0], payload)


def build_traced(config, bctx: BuildContext) -> Graph:
    g = Graph("traced")
    names = ["a", "bad", "c", "slow", "stuck", "z"]
    for i, n in enumerate(names):
        g.add_vertex(Traced(n, [(names[(i + 1) % len(names)], 1)]))
    where = {"a": 0, "bad": 0, "c": 0, "slow": 1, "stuck": 1, "z": 1}
    g.placement = lambda vid: where[vid] % bctx.workers
    def master(m) -> None:
        m.broadcast("block", config["block"])
        m.broadcast("oversize", config["oversize"])
        m.broadcast("hold", config["hold_mib"])

    g.master_compute = master
    return g


traced = _job("traced", build_traced, Key("block", False, "bool", "make 'stuck' block forever"),
              Key("oversize", False, "bool", "make 'z' send worker 0 a batch too large for 1 MB messages"),
              Key("hold_mib", 0, "int", "make 'z' (worker 1) hold this many MiB at superstep 3 only"))


# -- launching: what each worker process's BLAS was given -----------------------------------------
class BlasThreads(Vertex):
    """Reports the thread count of every BLAS library loaded in its process (threadpoolctl)."""

    def compute(self, ctx, messages):
        ctx.vote_to_halt()

    def result(self):
        from threadpoolctl import threadpool_info

        return sorted({(i["internal_api"], i["num_threads"]) for i in threadpool_info() if i["user_api"] == "blas"})


def build_blas(config, bctx: BuildContext) -> Graph:
    g = Graph("blas")
    g.add_vertices(BlasThreads(f"b{w}") for w in range(bctx.workers))
    g.placement = lambda vid: int(vid[1:])
    return g


blas = _job("blas", build_blas)


# -- streaming: a batch leaves in parts while vertices compute; delivery order is unchanged --------
class Streamer(Logger):
    """Each superstep: small messages, a large array (a part of its own once queued), an explicit
    ``ctx.flush()`` in the middle, more small messages; every vertex logs what it received."""

    def compute(self, ctx, messages):
        s = ctx.superstep
        self.value.append([[m.src, m.tag, float(m.payload["x"].sum()), int(m.payload["x"].size)] for m in messages])
        if s >= 4:
            ctx.vote_to_halt()
            return
        rng = np.random.default_rng([s, int(self.id[1:])])
        for dst, _ in self.edges:
            ctx.send(dst, {"x": rng.standard_normal(3)}, tag="a")
            ctx.send(dst, {"x": rng.standard_normal(150_000)}, tag="big")  # 1.2 MB: over the part threshold
            ctx.send(dst, {"x": rng.standard_normal(2)}, tag="b")
            ctx.flush()
            ctx.send(dst, {"x": rng.standard_normal(5)}, tag="c")


def _add_c(a, b):
    return {"x": a["x"] + b["x"]}


def build_streamed(config, bctx: BuildContext) -> Graph:
    """``combined=true``: tag 'c' has a combiner; a worker's queue holding a 'c' message waits for
    the end of compute (combined there), and the other tags still stream before it."""
    g = Graph("streamed")
    n = 5
    for i in range(n):
        g.add_vertex(Streamer(f"v{i}", [(f"v{(i + k) % n}", None) for k in range(1, 1 + config.get("fanin", 2))]))
    if config.get("combined"):
        g.add_combiner(_add_c, tag="c")
    g.placement = bctx.placement
    return g


streamed = _job("streamed", build_streamed, Key("combined", False, "bool", "a combiner for tag 'c'"),
                Key("fanin", 2, "int", "messages of each tag into each vertex (at most 4)"))
