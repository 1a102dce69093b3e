"""Training data: loading a data set, and the vertices that feed batches to the training vertices.

- ``open_dataset``: what a training job's ``data=`` names, opened the way the built-in jobs open
  it: the bundled digits or one ``.npz`` loaded (``Dataset``), a named data set or shards opened
  for streaming (``stream.StreamedDataset``, checked, never loaded whole).
- ``load_dataset``: the same names, all of it in memory (``Dataset``): the digits or an ``.npz``
  (arrays ``x`` and ``y``) at any fsspec URL split into train and test by a seeded shuffle, a
  named or sharded data set split as it is stored. The split is the one a job with the same
  data keys trained and evaluated on.
- ``DataReader`` (dnn-dp): serves one replica its slice of every global batch, one step ahead.
- ``InputReader`` + ``Preprocess`` (cnn-hybrid, Mariana's input pipeline as vertices): the reader
  takes a group's raw samples of a batch out of storage order (the bytes as stored, uint8 stays
  uint8) and the preprocess vertex decodes them (to float32, scaled, normalised, and randomly
  cropped and flipped when ``augment`` is on), then hands the batch to every partition of the
  group. Requests run ``depth`` batches ahead, so reading, preprocessing and computing different
  batches fall into the same supersteps.

Every batch comes from one seeded permutation of the training set per epoch, shared by all
readers: N consumers with batch B/N see exactly the samples one consumer with batch B sees.
"""

from __future__ import annotations

import gzip
import io
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

import numpy as np

from ...engine import Context, Message, Vertex
from ...errors import StorageError, UsageError
from ...storage import read_bytes
from .stream import batch_rows

__all__ = ["Dataset", "open_dataset", "load_dataset", "batch_indices", "batch_rows", "DataReader", "InputReader", "Preprocess", "decode"]


@dataclass
class Dataset:
    """Train and test arrays (y int64), the number of classes and the input shape.

    ``x`` is float32 unless the data was stored as uint8 and ``raw=True`` was asked for (the
    input pipeline decodes it later); ``scale`` is what decoding multiplies raw values by.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    classes: int
    scale: float = 1.0

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    @property
    def train_size(self) -> int:
        return len(self.x_train)


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


def _in_memory(data: str) -> bool:
    """Whether ``data`` is loaded whole (the digits, one ``.npz`` file) rather than streamed."""
    from .named import DATASETS

    if data == "digits":
        return True
    return not (data in DATASETS or "," in data or any(c in data for c in "*?[") or not data.endswith(".npz"))


def open_dataset(data: str, *, test_fraction: float = 0.2, seed: int = 0, classes: int = 0, images: bool = False,
                 shuffle_buffer: int = 8192, verify: bool = True, download: bool = False,
                 data_dir: str | None = None) -> Any:
    """The data set ``data`` names, opened as the built-in training jobs open their ``data=``
    (the keywords are their config keys of the same names; ``verify`` is ``verify_data``).

    ``digits`` or one ``.npz``: a ``Dataset`` in memory, split by a seeded shuffle (``images``:
    the digits as ``(1, 8, 8)`` images and uint8 samples left raw, for an input pipeline).
    A named data set (``fashion-mnist``, ``mnist``, ``cifar10``: found in ``data_dir``, else
    ``MARIANA_DATA``, the system location or the cache; fetched if ``download``) or a shard
    directory, glob or list: a ``stream.StreamedDataset``, its index, shards and labels checked
    and nothing loaded; ``.source(seed, global_batch, decode)`` serves batches (``rows(step,
    start, count)``) and ``.test_share(r, n)`` a consumer's share of the test split.
    Bad input is one ``UsageError`` line (exit 2 from the command line).
    """
    import difflib

    from .named import DATASETS, named_shards
    from .shards import DataError, open_shards
    from .stream import StreamedDataset

    if _in_memory(data):
        shape = (1, 8, 8) if images and data == "digits" else None
        return load_dataset(data, test_fraction, seed, classes, image_shape=shape, raw=images)
    url = named_shards(data, data_dir, download) if data in DATASETS else data
    try:
        shards = open_shards(url, verify=verify, test_fraction=test_fraction, classes=classes)
    except DataError as exc:
        hint = difflib.get_close_matches(data, [*DATASETS, "digits"], n=1)
        raise DataError(f"{exc} (did you mean data={hint[0]}?)" if hint else str(exc)) from None
    if shuffle_buffer < 1:
        raise UsageError(f"config key 'shuffle_buffer' must be >= 1, got {shuffle_buffer}")
    return StreamedDataset(shards, shuffle_buffer)


def load_dataset(data: str, test_fraction: float, seed: int, classes: int = 0,
                 image_shape: tuple[int, ...] | None = None, raw: bool = False, *, download: bool = False,
                 data_dir: str | None = None, verify: bool = True) -> Dataset:
    """Every name ``data=`` takes, loaded whole into memory.

    ``digits`` (bundled, 8x8 pixels scaled to [0, 1]) or an ``.npz`` with ``x`` and ``y`` at any
    URL: split into train and test by a seeded shuffle; ``classes`` 0 means ``max(y) + 1``.
    A named data set or shards (``open_dataset``; ``download``, ``data_dir`` and ``verify`` as
    there): their train and test splits as stored (the official test set of a named one).
    ``image_shape``: reshape each sample (the digits become ``(1, 8, 8)`` images this way).
    ``raw``: keep uint8 training samples as stored (``scale`` 1/255) for an input pipeline to
    decode; the test samples are decoded (float32) either way.
    """
    if not _in_memory(data):
        streamed = open_dataset(data, test_fraction=test_fraction, seed=seed, classes=classes, verify=verify,
                                download=download, data_dir=data_dir)
        return _loaded(streamed.shards, image_shape, raw, data)
    if data == "digits":
        with (files("mariana.vertices.train") / "data" / "digits.csv.gz").open("rb") as packed:
            raw_csv = np.loadtxt(gzip.open(packed), delimiter=",")
        x, y, where = raw_csv[:, :-1] / 16.0, raw_csv[:, -1], "digits"
    else:
        x, y = _read_npz(data)
        where = data
    if x.ndim < 2 or y.ndim != 1 or len(x) != len(y):
        raise UsageError(f"{where}: expected x of shape (N, ...) and y of shape (N,), got {x.shape} and {y.shape}")
    if not (np.issubdtype(x.dtype, np.number) and np.issubdtype(y.dtype, np.number)):
        raise UsageError(f"{where}: x and y must be numeric, got {x.dtype} and {y.dtype}")
    if x.dtype != np.uint8:
        bad = np.flatnonzero(~np.isfinite(x.reshape(len(x), -1)).all(axis=1))
        if bad.size:
            raise UsageError(f"{where}: x has NaN or Inf in {bad.size} sample(s), the first at row {bad[0]}")
    if y.size and (np.any(y != np.round(y)) or y.min() < 0):
        row = int(np.flatnonzero((y != np.round(y)) | (y < 0))[0])
        raise UsageError(f"{where}: labels must be integers >= 0; row {row} has {y[row]!r}")
    if image_shape is not None and x.shape[1:] != tuple(image_shape):
        if int(np.prod(x.shape[1:])) != int(np.prod(image_shape)):
            raise UsageError(f"{where}: samples of shape {x.shape[1:]} cannot be images of shape {tuple(image_shape)}")
        x = x.reshape(len(x), *image_shape)
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
    scale = 1.0
    if x.dtype == np.uint8:
        scale = 1.0 / 255.0
        x_test = (x[test] * np.float32(scale)).astype(np.float32)  # the test set is decoded once, here
        x_train = x[train] if raw else (x[train] * np.float32(scale)).astype(np.float32)
        return Dataset(x_train, y[train], x_test, y[test], classes, scale if raw else 1.0)
    x = x.astype(np.float32, copy=False)  # indexing by the split copies it anyway
    return Dataset(x[train], y[train], x[test], y[test], classes)


def _loaded(ss: Any, image_shape: tuple[int, ...] | None, raw: bool, where: str) -> Dataset:
    """A ``shards.ShardSet``'s splits read whole, in storage order (uint8 decoded unless ``raw``)."""
    def read(split: Any) -> tuple[np.ndarray, np.ndarray]:
        if split is None or not split.segments:
            return np.zeros((0, *ss.input_shape), split.x_dtype if split else ss.train.x_dtype), np.zeros(0, np.int64)
        parts = [split.read_rows(i, lo, hi) for i, lo, hi in split.segments]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    (xtr, ytr), (xte, yte) = read(ss.train), read(ss.test)
    if image_shape is not None and xtr.shape[1:] != tuple(image_shape):
        if int(np.prod(xtr.shape[1:])) != int(np.prod(image_shape)):
            raise UsageError(f"{where}: samples of shape {xtr.shape[1:]} cannot be images of shape {tuple(image_shape)}")
        xtr, xte = xtr.reshape(len(xtr), *image_shape), xte.reshape(len(xte), *image_shape)
    scale = ss.scale
    xte = (xte * np.float32(scale)).astype(np.float32)
    if raw and xtr.dtype == np.uint8:
        return Dataset(xtr, ytr, xte, yte, ss.classes, scale)
    return Dataset((xtr * np.float32(scale)).astype(np.float32), ytr, xte, yte, ss.classes)


def batch_indices(seed: int, epoch_size: int, global_batch: int, step: int, start: int, count: int,
                  cache: list[Any]) -> np.ndarray:
    """Sorted sample indices ``[start, start + count)`` of global batch ``step``.

    One seeded permutation per epoch (``default_rng([seed, epoch])``), so every consumer of every
    framework sees the same samples for the same step; ``cache`` (a one-item list) keeps the
    current epoch's permutation.
    """
    return batch_rows(seed, epoch_size, global_batch, step, start, count, cache)[0]


class DataReader(Vertex):
    """Serves replica ``rank`` its slice of each global batch; ``ahead`` batches ahead of the replica.

    Batches come from ``source`` (``stream.InMemorySource`` or ``stream.StreamSource``), whose
    order depends only on the data, the seed and the global batch, so N replicas with batch B/N
    see exactly the samples one replica with batch B sees. ``position`` (epoch, window, batch of
    the last step served) is checkpointed with the reader; the order is a function of the step,
    so a resume continues mid-epoch exactly.
    """

    state_fields = (*Vertex.state_fields, "ahead", "global_batch", "local", "position", "rank", "replica",
                    "total_steps")  # not the data source and its caches: rebuilt, never checkpointed

    def __init__(self, id: str, replica: str, source: Any, batch_size: int, replicas: int,
                 rank: int, total_steps: int, ahead: int = 1) -> None:
        super().__init__(id, 0)
        self.ahead = ahead
        self.replica, self.source = replica, source
        self.global_batch, self.local = batch_size, batch_size // replicas
        self.rank, self.total_steps = rank, total_steps
        self.position: dict[str, int] = {}

    def compute(self, ctx: Context, messages: list[Message]) -> None:
        wanted = list(range(self.ahead)) if ctx.superstep == 0 else [int(m.payload) for m in messages]
        for step in wanted:
            if step < self.total_steps:
                x, y, _ = self.source.rows(step, self.rank * self.local, self.local)
                ctx.send(self.replica, {"step": step, "x": x, "y": y}, tag="batch")
                self.value = step
                self.position = self.source.position(step)
        ctx.vote_to_halt()


# -- the input pipeline of cnn-hybrid ---------------------------------------------------------------
def decode(x: np.ndarray, scale: float, mean: float, std: float, crop: int, rng: np.random.Generator | None,
           flip: bool, rows: np.ndarray | None = None, total: int = 0) -> np.ndarray:
    """Raw samples (N, C, H, W) -> float32 ``(x * scale - mean) / std``; with ``rng``, a random
    crop of ``crop`` pixels per side (zero padding, as in CIFAR training) and, if ``flip``, a
    random horizontal flip per sample. The draws are made for ``total`` samples (the global
    batch) and sample i takes draw ``rows[i]`` (its position there), so however a batch is split
    over groups every sample gets the same crop and flip."""
    out = x.astype(np.float32)
    if scale != 1.0:
        out *= np.float32(scale)
    if mean != 0.0:
        out -= np.float32(mean)
    if std != 1.0:
        out /= np.float32(std)
    if rng is None:
        return out
    n, _, h, w = out.shape
    rows = np.arange(n) if rows is None else rows
    total = max(total, n)
    shifts = rng.integers(-crop, crop + 1, size=(total, 2))[rows] if crop else np.zeros((n, 2), dtype=np.int64)
    flips = (rng.random(total) < 0.5)[rows] if flip else np.zeros(n, dtype=bool)
    if crop:
        padded = np.zeros(out.shape[:2] + (h + 2 * crop, w + 2 * crop), dtype=np.float32)
        padded[:, :, crop:crop + h, crop:crop + w] = out
        for i, (dy, dx) in enumerate(shifts):
            out[i] = padded[i, :, crop + dy:crop + dy + h, crop + dx:crop + dx + w]
    if flips.any():
        out[flips] = out[flips, :, :, ::-1]
    return out


class InputReader(Vertex):
    """Storage -> raw samples: for every requested step, the group's share of the global batch,
    as stored (no decoding), sent to the group's ``Preprocess`` vertex."""

    state_fields = (*Vertex.state_fields, "global_batch", "group", "local", "position", "preprocess", "total_steps")

    def __init__(self, id: str, preprocess: str, source: Any, batch_size: int, groups: int,
                 group: int, total_steps: int) -> None:
        super().__init__(id, -1)
        self.preprocess, self.source = preprocess, source
        self.global_batch, self.local = batch_size, batch_size // groups
        self.group, self.total_steps = group, total_steps
        self.position: dict[str, int] = {}

    def compute(self, ctx: Context, messages: list[Message]) -> None:
        for m in messages:  # requests, in the order the consumer made them
            step = int(m.payload)
            if step < self.total_steps:
                x, y, pos = self.source.rows(step, self.group * self.local, self.local)
                ctx.send(self.preprocess, {"step": step, "x": x, "y": y, "pos": pos}, tag="raw")
                self.value = step
                self.position = self.source.position(step)
        ctx.vote_to_halt()


class Preprocess(Vertex):
    """Raw samples -> the float32 batch every partition of the group trains on.

    Augmentation draws from ``default_rng([seed, step])`` for the whole global batch of
    ``batch_size`` samples, each sample taking the draw of its position: it does not depend on
    when or where a batch is decoded (pipelined or not, any placement or number of groups, after
    a rollback).
    """

    state_fields = (*Vertex.state_fields, "augment", "batch_size", "consumers", "crop", "mean", "scale", "seed", "std")

    def __init__(self, id: str, consumers: list[str], scale: float, mean: float, std: float, augment: bool,
                 crop: int, seed: int, batch_size: int) -> None:
        super().__init__(id, -1)
        self.consumers, self.scale, self.mean, self.std = consumers, scale, mean, std
        self.augment, self.crop, self.seed, self.batch_size = augment, crop, seed, batch_size

    def compute(self, ctx: Context, messages: list[Message]) -> None:
        for m in messages:
            step = int(m.payload["step"])
            rng = np.random.default_rng([self.seed, step]) if self.augment else None
            x = m.payload["x"]
            if x.ndim == 4:
                x = decode(x, self.scale, self.mean, self.std, self.crop, rng, True, m.payload["pos"], self.batch_size)
            else:  # flat samples: decoding only
                x = decode(x, self.scale, self.mean, self.std, 0, None, flip=False)
            batch = {"step": step, "x": x, "y": m.payload["y"], "pos": m.payload["pos"]}
            for c in self.consumers:
                ctx.send(c, batch, tag="batch")
            self.value = step
        ctx.vote_to_halt()
