"""Gradient buckets: their layout, and that sending gradients and parameters bucket by bucket
(streamed while backward and the shards' updates go on) changes no bit of the result."""

from __future__ import annotations

import numpy as np
import pytest

from mariana.jobs import get_job, resolve_config
from mariana.jobs.dnn_data_parallel import final_params
from mariana.jobs.launch import run_job
from mariana.vertices.train import exchange
from mariana.vertices.train.exchange import BUCKET, MIN_BUCKET, gradient_buckets, shard_ranges

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("sizes,shards", [([784 * 2048, 2048, 2048 * 2048, 2048, 2048 * 10, 10], 2),
                                          ([64 * 256, 256, 256 * 256, 256, 2560, 10], 3),
                                          ([5_000_000], 1)])
def test_buckets_tile_each_shard_cut_at_aligned_boundaries(sizes, shards):
    total = sum(sizes)
    ranges = [(f"s{i}", lo, hi) for i, (lo, hi) in enumerate(shard_ranges(total, shards))]
    buckets = gradient_buckets(ranges, sizes)
    for sid, lo, hi in ranges:
        mine = [(a, b) for s, a, b in buckets if s == sid]
        assert mine[0][0] == lo and mine[-1][1] == hi
        assert all(b0 == a1 for (_, b0), (a1, _) in zip(mine, mine[1:]))  # contiguous, ascending
        assert all(a % 16 == 0 and 0 < b - a <= BUCKET for a, b in mine)
        inner = [a for a, _ in mine[1:]]
        assert all(a - lo >= MIN_BUCKET or a % BUCKET == lo % BUCKET for a in inner)


def test_a_small_model_sends_one_bucket_per_shard():
    sizes = [64 * 256, 256, 256 * 256, 256, 2560, 10]
    ranges = [(f"s{i}", lo, hi) for i, (lo, hi) in enumerate(shard_ranges(sum(sizes), 2))]
    assert len(gradient_buckets(ranges, sizes)) == 2


MODEL = 'model=["dense:1024:relu", "dense:1024:relu", "dense:512:relu", "dense:10"]'


@pytest.mark.parametrize("sets", [["replicas=2"], ["replicas=2", "optimizer=adagrad_approx"],
                                  ["replicas=3", "batch_size=96", "exchange=ps", "ps_shards=2",
                                   "optimizer=adagrad_dp"]])
def test_buckets_give_the_parameters_of_one_message_per_shard(monkeypatch, sets):
    job = get_job("dnn-dp")
    config = resolve_config(job, None, [MODEL, "steps=4", *sets])
    bucketed = dict(final_params(run_job(job, config), config))
    monkeypatch.setattr(exchange, "BUCKET", 1 << 40)
    monkeypatch.setattr(exchange, "MIN_BUCKET", 1 << 40)
    whole = dict(final_params(run_job(job, config), config))
    assert all(bucketed[k].tobytes() == whole[k].tobytes() for k in whole)


def test_streamed_buckets_are_bit_identical_on_both_runtimes():
    job = get_job("dnn-dp")
    config = resolve_config(job, None, [MODEL, "steps=4", "replicas=2"])
    sizes = [int(np.prod(s)) for s in ([64, 1024], [1024], [1024, 1024], [1024], [1024, 512], [512], [512, 10], [10])]
    assert len(gradient_buckets([("a", 0, sum(sizes) // 32 * 16), ("b", sum(sizes) // 32 * 16, sum(sizes))],
                                sizes)) > 2  # several buckets per step really travel
    local = dict(final_params(run_job(job, config, workers=2, runtime="local"), config))
    cluster = dict(final_params(run_job(job, config, workers=2, runtime="cluster"), config))
    assert all(local[k].tobytes() == cluster[k].tobytes() for k in local)
