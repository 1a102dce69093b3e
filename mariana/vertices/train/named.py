"""The standard data sets by name: ``fashion-mnist``, ``mnist`` (IDX files, gzipped or not) and
``cifar10`` (the binary batches).

Where their files are looked for, in order: the data directories (``--data-dir``, else
``MARIANA_DATA``: a list separated by ``:``), each as ``DIR/NAME/`` or ``DIR/`` itself; the system
location Debian's packages install to (``/usr/share/datasets/NAME``: ``apt-get install
dataset-fashion-mnist``); the download cache (``MARIANA_CACHE``, default ``~/.cache/mariana``,
under ``datasets/NAME``). When they are nowhere and the download is allowed (``download=true``,
or ``mariana data get NAME``), they are fetched from their canonical address (a mirror first
when ``MARIANA_DATA_MIRROR`` names one) into the cache, with the published checksum checked and
a progress bar on stderr.

The files are then written once as shards into the cache (``shards/NAME-KEY``, the key derived
from the files' names, sizes and times), which the streaming readers read from.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tarfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import StorageError
from ...storage.shards import download as fetch
from .shards import INDEX, DataError, read_cifar_dir, read_idx_dir, write_shards

__all__ = ["NamedFile", "NamedDataset", "DATASETS", "data_dirs", "cache_dir", "find_files", "get_files",
           "named_shards", "SYSTEM_DIR"]

SYSTEM_DIR = "/usr/share/datasets"


@dataclass(frozen=True)
class NamedFile:
    """A file of a named data set: its name, where it is published, its published checksum
    (``sha256:HEX`` or, where only that is published, ``md5:HEX``)."""

    name: str
    urls: tuple[str, ...]
    checksum: str
    archive: bool = False  # a .tar.gz to unpack into the data set's directory


@dataclass(frozen=True)
class NamedDataset:
    name: str
    kind: str  # idx | cifar
    files: tuple[NamedFile, ...]
    needed: tuple[str, ...]  # the files (after unpacking) that must be present, without .gz
    debian_package: str = ""
    #: per job, config keys that differ from the job's defaults on this data set
    defaults: dict[str, dict[str, Any]] = field(default_factory=dict)


def _idx_files(base: tuple[str, ...], sums: dict[str, str]) -> tuple[NamedFile, ...]:
    return tuple(NamedFile(f"{n}.gz", tuple(b + f"{n}.gz" for b in base), f"sha256:{sums[n]}") for n in sums)


_IDX_NEEDED = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")

DATASETS: dict[str, NamedDataset] = {}


def register(ds: NamedDataset) -> None:
    DATASETS[ds.name] = ds


register(NamedDataset(
    "fashion-mnist", "idx",
    _idx_files(("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",), {
        "train-images-idx3-ubyte": "08dc20ab1689590a0bcd66e874647b6ee8464e2d501b5a3f1f78831db19a3fdc",
        "train-labels-idx1-ubyte": "b0197879cbda89f3dc7b894f9fd52b858e68ea4182b6947c9d8c2b67e5f18dcc",
        "t10k-images-idx3-ubyte": "78dcbbfb5a27efaf1b6c1d616caca68560be8766c5bffcb2791df9273a534229",
        "t10k-labels-idx1-ubyte": "42bd18137a62d5998cdeae52bf3a0676ac6b706f5cf8439b47bb5b151ae3dccf"}),
    _IDX_NEEDED, "dataset-fashion-mnist",
    defaults={"dnn-dp": {"epochs": 10, "batch_size": 128, "lr": 0.05},
              "cnn-hybrid": {"epochs": 5, "batch_size": 64, "lr": 0.02},
              "cpu-cluster": {"epochs": 10, "batch_size": 128, "lr": 0.05}}))
register(NamedDataset(
    "mnist", "idx",
    _idx_files(("http://yann.lecun.com/exdb/mnist/",), {
        "train-images-idx3-ubyte": "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
        "train-labels-idx1-ubyte": "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
        "t10k-images-idx3-ubyte": "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
        "t10k-labels-idx1-ubyte": "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6"}),
    _IDX_NEEDED,
    defaults={"dnn-dp": {"epochs": 10, "batch_size": 128, "lr": 0.05},
              "cnn-hybrid": {"epochs": 3, "batch_size": 64, "lr": 0.02},
              "cpu-cluster": {"epochs": 10, "batch_size": 128, "lr": 0.05}}))
register(NamedDataset(
    "cifar10", "cifar",
    (NamedFile("cifar-10-binary.tar.gz", ("https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz",),
               "md5:c32a1d4ab5d03f1284b67883e8d87530", archive=True),),
    ("data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin",
     "test_batch.bin"),
    defaults={"dnn-dp": {"epochs": 10, "batch_size": 128, "lr": 0.01},
              "cnn-hybrid": {"epochs": 10, "batch_size": 64, "lr": 0.01, "augment": True},
              "cpu-cluster": {"epochs": 10, "batch_size": 128, "lr": 0.01}}))


def data_dirs(data_dir: str | None = None) -> list[str]:
    """The data directories searched, in order (``--data-dir``/``MARIANA_DATA`` first)."""
    given = data_dir or os.environ.get("MARIANA_DATA", "")
    return [d for d in given.split(os.pathsep) if d]


def cache_dir() -> Path:
    return Path(os.environ.get("MARIANA_CACHE") or Path.home() / ".cache" / "mariana")


def _present(d: Path, ds: NamedDataset) -> Path | None:
    """The directory under ``d`` that holds every needed file of ``ds`` (gzipped or not)."""
    for cand in (d / ds.name, d, d / "cifar-10-batches-bin", d / ds.name / "cifar-10-batches-bin"):
        if all((cand / n).is_file() or (cand / f"{n}.gz").is_file() for n in ds.needed):
            return cand
    return None


def find_files(name: str, data_dir: str | None = None) -> Path | None:
    """Where ``name``'s files are, or None (see the module's docstring for the search order)."""
    ds = DATASETS[name]
    for d in [*data_dirs(data_dir), f"{SYSTEM_DIR}/{ds.name}", str(cache_dir() / "datasets" / ds.name)]:
        found = _present(Path(d), ds)
        if found is not None:
            return found
    return None


def missing_message(name: str, data_dir: str | None = None) -> str:
    ds = DATASETS[name]
    where = [*data_dirs(data_dir), f"{SYSTEM_DIR}/{name}", str(cache_dir() / "datasets" / name)]
    how = [f"install Debian's package (apt-get install {ds.debian_package})"] if ds.debian_package else []
    how += [f"put {', '.join(ds.needed[:2])}... in a directory given by --data-dir or MARIANA_DATA",
            f"or allow the download (--set download=true, or `mariana data get {name}`)"]
    return f"data set {name}: its files are not in {', '.join(where)}; " + ", ".join(how)


class _Bar:
    """A text progress bar on stderr (redrawn in place on a terminal, a line per 25% elsewhere)."""

    def __init__(self, label: str) -> None:
        self.label, self.tty, self.shown = label, sys.stderr.isatty(), -1

    def __call__(self, done: int, total: int | None) -> None:
        frac = done / total if total else 0.0
        if self.tty:
            bar = "#" * int(frac * 30)
            sys.stderr.write(f"\r{self.label} [{bar:<30}] {done / 1e6:.1f}/{(total or 0) / 1e6:.1f} MB")
            if total and done >= total:
                sys.stderr.write("\n")
        else:
            step = int(frac * 4) if total else 0
            if step > self.shown:
                self.shown = step
                sys.stderr.write(f"{self.label}: {int(frac * 100)}% of {(total or 0) / 1e6:.1f} MB\n")
        sys.stderr.flush()


def _check(path: Path, checksum: str, where: str) -> None:
    algo, _, want = checksum.partition(":")
    h = hashlib.new(algo)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    if h.hexdigest() != want:
        path.unlink(missing_ok=True)
        raise DataError(f"{where}: {algo} {h.hexdigest()} does not match the published {want}; the download was "
                        f"discarded")


def get_files(name: str, data_dir: str | None = None, download: bool = False) -> Path:
    """The directory holding ``name``'s files, downloading them into the cache if allowed."""
    if name not in DATASETS:
        raise DataError(f"unknown data set {name!r}; named data sets: {', '.join(DATASETS)}")
    found = find_files(name, data_dir)
    if found is not None:
        return found
    if not download:
        raise DataError(missing_message(name, data_dir))
    ds = DATASETS[name]
    target = cache_dir() / "datasets" / name
    target.mkdir(parents=True, exist_ok=True)
    mirror = os.environ.get("MARIANA_DATA_MIRROR", "").rstrip("/")
    for nf in ds.files:
        dest = target / nf.name
        urls = ([f"{mirror}/{name}/{nf.name}"] if mirror else []) + list(nf.urls)
        errors = []
        for url in urls:
            try:
                fetch(url, str(dest), _Bar(f"downloading {name}/{nf.name}"))
                break
            except StorageError as exc:
                errors.append(str(exc))
        else:
            raise DataError(f"data set {name}: cannot download {nf.name}: {'; '.join(errors)}")
        _check(dest, nf.checksum, url)
        if nf.archive:
            with tarfile.open(dest) as tar:
                tar.extractall(target, filter="data")
    found = find_files(name, data_dir)
    if found is None:
        raise DataError(f"data set {name}: downloaded into {target}, but {', '.join(ds.needed)} are not all there")
    return found


def named_shards(name: str, data_dir: str | None = None, download: bool = False) -> str:
    """The shard directory of a named data set (written into the cache on first use)."""
    src = get_files(name, data_dir, download)
    ds = DATASETS[name]
    stamp = hashlib.sha256()
    for p in sorted(src.iterdir()):
        if p.is_file():
            st = p.stat()
            stamp.update(f"{p.name}:{st.st_size}:{st.st_mtime_ns};".encode())
    out = cache_dir() / "shards" / f"{name}-{stamp.hexdigest()[:12]}"
    if (out / INDEX).is_file():
        return str(out)
    train, test = read_cifar_dir(str(src)) if ds.kind == "cifar" else read_idx_dir(str(src))
    tmp = out.with_name(f".{out.name}.{uuid.uuid4().hex[:8]}.tmp")
    t0 = time.monotonic()
    write_shards(str(tmp), train, test, shard_mb=8.0, source=str(src), classes=10)
    del train, test
    try:
        os.replace(tmp, out)  # another process may have written it meanwhile: theirs is as good
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    import logging

    logging.getLogger(__name__).info("wrote %s's shards to %s in %.1fs", name, out, time.monotonic() - t0)
    return str(out)
