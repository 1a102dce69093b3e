"""Streaming readers: the sample order of a sharded data set and the sources the reader vertices
draw batches from, in memory (the bundled digits, one ``.npz``) or streamed from shards.

The order of epoch ``e`` (``StreamOrder``) depends only on the data set, the seed and the
global batch ``B``:

1. the split's segments (shards, or parts of shards) are put in a seeded order
   (``default_rng([seed, e])``), which makes a stream of the split's samples;
2. the stream is cut into windows of ``W`` samples (the shuffle buffer rounded up to a multiple
   of ``B``) and each window is shuffled (``default_rng([seed, e, w, 1])``), the way a bounded
   shuffle buffer mixes what flows through it;
3. global batch ``k`` of the epoch is samples ``[kB, kB + B)`` of the shuffled stream, sorted by
   where they are stored; a consumer taking ``count`` samples from ``start`` takes that slice of
   the sorted batch (and its positions, for dropout masks).

Because a batch is sorted by storage position before it is split, consumer ``r`` of ``N`` takes
about the ``r``-th ``1/N`` of each window's bytes: a reader loads only the rows its consumer
trains on, as byte ranges of the shards (``Split.read_rows``), one window at a time; for shards
off the local disk (object stores, HTTP) a background thread loads the next window while this
one is served (on a local disk the page cache serves a window in milliseconds, and a thread
measured slower: it contends for the GIL with the superstep). Memory per reader is about
two windows' share of one consumer, whatever the size of the data set. The reader's position
is a function of the step, so a checkpoint that records the step resumes mid-epoch exactly.

``TestStream``: a consumer's contiguous share of the test split, read and decoded in chunks
when it is evaluated (evaluation is spread over replicas or groups and never holds the whole
test set).
"""

from __future__ import annotations

import math
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from ...storage.shards import local_path
from .shards import ShardSet, Split

__all__ = ["InMemorySource", "StreamOrder", "StreamSource", "TestStream", "StreamedDataset"]


def _decode(x: np.ndarray, scale: float | None) -> np.ndarray:
    """uint8 -> float32 ``x * scale`` (the in-memory loader's formula); float data as float32."""
    if scale is None:
        return x
    if scale != 1.0:
        return np.multiply(x, np.float32(scale), dtype=np.float32)
    return x.astype(np.float32, copy=False)


class InMemorySource:
    """The training set in memory: one seeded permutation of it per epoch (``batch_rows``)."""

    def __init__(self, x: np.ndarray, y: np.ndarray, seed: int, global_batch: int) -> None:
        self.x, self.y, self.seed, self.global_batch = x, y, seed, global_batch
        self.size = len(x)
        self._perm: list[Any] = []

    def rows(self, step: int, start: int, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        idx, pos = batch_rows(self.seed, self.size, self.global_batch, step, start, count, self._perm)
        return self.x[idx], self.y[idx], pos

    def ids(self, step: int, start: int, count: int) -> np.ndarray:
        """The sample indices (rows of the training set) of that slice of the step's batch."""
        return batch_rows(self.seed, self.size, self.global_batch, step, start, count, self._perm)[0]

    def position(self, step: int) -> dict[str, int]:
        spe = self.size // self.global_batch
        return {"epoch": step // spe, "batch": step % spe}


class StreamOrder:
    """Which samples (by storage id: the index in the split's storage order) each global batch holds."""

    def __init__(self, split: Split, seed: int, global_batch: int, buffer: int) -> None:
        self.sizes = np.array([hi - lo for _, lo, hi in split.segments], dtype=np.int64)
        self.storage_starts = np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(np.int64)
        self.size = int(self.sizes.sum())
        self.seed, self.B = seed, global_batch
        self.W = max(1, math.ceil(max(buffer, 1) / global_batch)) * global_batch
        self.steps_per_epoch = self.size // global_batch
        self._epoch: tuple[int, np.ndarray, np.ndarray] | None = None
        self._windows: dict[tuple[int, int], np.ndarray] = {}
        self._lock = threading.Lock()  # the prefetch thread asks too

    def locate(self, step: int) -> tuple[int, int, int]:
        """(epoch, window, batch within the epoch) of a step."""
        epoch, k = divmod(step, self.steps_per_epoch)
        return epoch, (k * self.B) // self.W, k

    def _segments(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        if self._epoch is None or self._epoch[0] != epoch:
            perm = np.random.default_rng([self.seed, epoch]).permutation(len(self.sizes))
            starts = np.concatenate([[0], np.cumsum(self.sizes[perm])[:-1]]).astype(np.int64)
            self._epoch = (epoch, perm, starts)
        return self._epoch[1], self._epoch[2]

    def window_ids(self, epoch: int, w: int) -> np.ndarray:
        """The storage ids of window ``w`` of ``epoch``, in their shuffled order (the last two
        windows asked for are kept: the one being served and the one being prefetched)."""
        with self._lock:
            hit = self._windows.get((epoch, w))
            if hit is not None:
                return hit
            perm, stream_starts = self._segments(epoch)
            lo = w * self.W
            n = min(self.W, self.size - lo)
            p = lo + np.random.default_rng([self.seed, epoch, w, 1]).permutation(n)
            j = np.searchsorted(stream_starts, p, side="right") - 1
            ids = self.storage_starts[perm[j]] + (p - stream_starts[j])
            self._windows[(epoch, w)] = ids
            while len(self._windows) > 2:
                del self._windows[next(iter(self._windows))]
            return ids

    def batch_ids(self, step: int) -> np.ndarray:
        """The global batch of ``step``: storage ids, sorted."""
        epoch, w, k = self.locate(step)
        ids = self.window_ids(epoch, w)
        off = k * self.B - w * self.W
        return np.sort(ids[off:off + self.B])

    def steps_of_window(self, epoch: int, w: int) -> range:
        first = epoch * self.steps_per_epoch + (w * self.W) // self.B
        last = epoch * self.steps_per_epoch + min(self.steps_per_epoch, ((w + 1) * self.W) // self.B)
        return range(first, last)

    def next_window(self, epoch: int, w: int) -> tuple[int, int]:
        if (w + 1) * self.W < self.steps_per_epoch * self.B:
            return epoch, w + 1
        return epoch + 1, 0


def _distinct(a: np.ndarray) -> np.ndarray:
    """Sorted distinct values (``np.unique`` without its first-call import of numpy's set routines)."""
    a = np.sort(a)
    return a[np.concatenate(([True], a[1:] != a[:-1]))] if a.size else a


@dataclass
class _Window:
    ids: np.ndarray  # sorted storage ids held
    x: np.ndarray
    y: np.ndarray


class StreamSource:
    """Batches of a sharded split for one consumer, read window by window, the next one prefetched.

    ``decode``: multiply by this and make float32 (None: leave samples as stored, for an input
    pipeline that decodes them itself).
    """

    def __init__(self, split: Split, seed: int, global_batch: int, buffer: int, decode: float | None,
                 prefetch: bool | None = None, total_steps: int = 0) -> None:
        if prefetch is None:  # a thread hides remote latency; on a local disk (page cache) it only contends for the GIL
            prefetch = any(local_path(s.url) is None for s in split.shards)
        self.split, self.decode, self.prefetch, self.total_steps = split, decode, prefetch, total_steps
        self.order = StreamOrder(split, seed, global_batch, buffer)
        self.size = self.order.size
        self._seg_of = np.array([lo for _, lo, _ in split.segments], dtype=np.int64)
        self._windows: dict[tuple[int, int, int, int], Future[_Window] | _Window] = {}
        self._pool: ThreadPoolExecutor | None = None
        self.bytes_read = 0

    def position(self, step: int) -> dict[str, int]:
        epoch, w, k = self.order.locate(step)
        return {"epoch": epoch, "window": w, "batch": k}

    def ids(self, step: int, start: int, count: int) -> np.ndarray:
        """The storage ids (index in the split's storage order) of that slice of the step's batch."""
        return self.order.batch_ids(step)[start:start + count]

    def rows(self, step: int, start: int, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        epoch, w, _ = self.order.locate(step)
        key = (epoch, w, start, count)
        win = self._get(key)
        ids = self.order.batch_ids(step)[start:start + count]
        at = np.searchsorted(win.ids, ids)
        x, y = win.x[at], win.y[at]
        for old in [k for k in self._windows if k[:2] < (epoch, w)]:
            del self._windows[old]
        if self.prefetch:
            nxt = (*self.order.next_window(epoch, w), start, count)
            due = self.order.steps_of_window(nxt[0], nxt[1])
            if nxt not in self._windows and (not self.total_steps or due.start < self.total_steps):
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mariana-prefetch")
                self._windows[nxt] = self._pool.submit(self._load, nxt)
        return _decode(x, self.decode), y, start + np.arange(count)

    def _get(self, key: tuple[int, int, int, int]) -> _Window:
        got = self._windows.get(key)
        if got is None:
            got = self._load(key)
        elif isinstance(got, Future):
            got = got.result()  # a DataError of the prefetch thread is raised here, in compute
        self._windows[key] = got
        return got

    def _load(self, key: tuple[int, int, int, int]) -> _Window:
        """This consumer's rows of one window: one byte range per segment touched."""
        epoch, w, start, count = key
        need = _distinct(np.concatenate([self.order.batch_ids(s)[start:start + count]
                                         for s in self.order.steps_of_window(epoch, w)] or [np.zeros(0, np.int64)]))
        seg = np.searchsorted(self.order.storage_starts, need, side="right") - 1
        xs, ys = [], []
        for j in _distinct(seg):
            mine = need[seg == j]
            shard, lo, _ = self.split.segments[j]
            rows = lo + (mine - self.order.storage_starts[j])
            x, y = self.split.read_rows(shard, int(rows[0]), int(rows[-1]) + 1)
            self.bytes_read += x.nbytes + y.nbytes
            xs.append(x[rows - rows[0]])
            ys.append(y[rows - rows[0]])
        if not xs:
            shape = (0, *self.split.x_shape)
            return _Window(need, np.zeros(shape, self.split.x_dtype), np.zeros(0, np.int64))
        return _Window(need, np.concatenate(xs) if len(xs) > 1 else xs[0], np.concatenate(ys) if len(ys) > 1 else ys[0])


class TestStream:
    """Samples ``[lo, hi)`` of a split in storage order, read and decoded ``chunk`` at a time:
    float32 ``(x * scale - mean) / std``."""

    def __init__(self, split: Split, lo: int, hi: int, scale: float, mean: float = 0.0, std: float = 1.0,
                 chunk: int = 500) -> None:
        self.split, self.lo, self.hi, self.chunk = split, lo, hi, chunk
        self.scale, self.mean, self.std = scale, mean, std
        sizes = np.array([h - low for _, low, h in split.segments], dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)

    def __len__(self) -> int:
        return self.hi - self.lo

    @property
    def n_chunks(self) -> int:
        return math.ceil(len(self) / self.chunk)

    def chunk_at(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        a = self.lo + i * self.chunk
        b = min(self.hi, a + self.chunk)
        xs, ys = [], []
        j = int(np.searchsorted(self.starts, a, side="right") - 1)
        while a < b:
            shard, lo, hi = self.split.segments[j]
            take = min(b, int(self.starts[j + 1])) - a
            first = lo + a - int(self.starts[j])
            x, y = self.split.read_rows(shard, first, first + take)
            xs.append(x)
            ys.append(y)
            a += take
            j += 1
        x = np.concatenate(xs) if len(xs) > 1 else xs[0]
        out = x.astype(np.float32)
        if self.scale != 1.0:
            out *= np.float32(self.scale)
        if self.mean != 0.0:
            out -= np.float32(self.mean)
        if self.std != 1.0:
            out /= np.float32(self.std)
        return out, np.concatenate(ys) if len(ys) > 1 else ys[0]

    def chunks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for i in range(self.n_chunks):
            yield self.chunk_at(i)


@dataclass
class StreamedDataset:
    """A sharded data set opened for training: what the jobs need of it."""

    shards: ShardSet
    buffer: int

    @property
    def input_shape(self) -> tuple[int, ...]:
        return self.shards.input_shape

    @property
    def classes(self) -> int:
        return self.shards.classes

    @property
    def scale(self) -> float:
        return self.shards.scale

    @property
    def train_size(self) -> int:
        return self.shards.train.size

    def source(self, seed: int, global_batch: int, decode: bool, total_steps: int = 0) -> StreamSource:
        return StreamSource(self.shards.train, seed, global_batch, self.buffer, self.scale if decode else None,
                            total_steps=total_steps)

    def test_share(self, r: int, n: int, mean: float = 0.0, std: float = 1.0) -> TestStream | None:
        """Consumer ``r`` of ``n``'s contiguous share of the test split (None: no test split)."""
        test = self.shards.test
        if test is None:
            return None
        size = test.size
        return TestStream(test, r * size // n, (r + 1) * size // n, self.scale, mean, std)


def batch_rows(seed: int, epoch_size: int, global_batch: int, step: int, start: int, count: int,
               cache: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """``batch_indices`` and, for each, its position in the global batch (which row of a
    whole-batch dropout mask is its own, however the batch is split)."""
    steps_per_epoch = epoch_size // global_batch
    epoch, k = divmod(step, steps_per_epoch)
    if not cache or cache[0][0] != epoch:
        cache[:] = [(epoch, np.random.default_rng([seed, epoch]).permutation(epoch_size))]
    begin = k * global_batch + start
    segment = cache[0][1][begin:begin + count]
    order = np.argsort(segment, kind="stable")
    return segment[order], start + order
