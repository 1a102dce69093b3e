"""Training on streamed shards: the same parameters on every runtime, equal (summation order) across
replica and group counts, exact resume mid-epoch, the cpu-cluster ledger's exactly-once epochs,
and a shard that goes bad mid-run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from mariana.cli import main
from mariana.jobs import get_job, resolve_config
from mariana.jobs.cnn_hybrid import final_params as cnn_params
from mariana.jobs.cpu_cluster import final_params as cc_params
from mariana.jobs.dnn_data_parallel import final_params as dp_params
from mariana.jobs.launch import run_job
from mariana.storage import RunDir
from mariana.storage.checkpoint import Checkpoints
from mariana.vertices.train.shards import DataError, write_shards

from training_helpers import max_diff, same, trainer

SMALL = ['model=["dense:16:relu", "dense:4"]', "batch_size=32", "shuffle_buffer=100", "lr=0.05"]


def synthetic(n: int, seed: int = 0, classes: int = 4, side: int = 6) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    x = rng.integers(0, 60, (n, 1, side, side)).astype(np.uint8)
    for c in range(classes):
        x[y == c, 0, c, :] = 200
    return x, y


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("shards")
    write_shards(str(d), synthetic(960), synthetic(240, seed=1), shard_mb=0.01)
    return str(d)


def test_streamed_dnn_dp_is_bit_identical_across_runtimes_and_equal_across_replicas(shards):
    train = trainer("dnn-dp", dp_params)
    sets = [f"data={shards}", *SMALL, "epochs=2"]
    local, result = train(sets + ["replicas=2"], workers=1)
    cluster, _ = train(sets + ["replicas=2"], workers=2, runtime="cluster")
    assert same(local, cluster)
    one, _ = train(sets + ["replicas=1"], workers=1)
    assert max_diff(one, local) < 1e-5  # one replica with the whole batch: summation order only
    assert result.metrics[-1]["test_accuracy"] > 0.9


def test_streamed_cnn_hybrid_and_cpu_cluster_train_and_agree_across_groups(shards):
    cnn = trainer("cnn-hybrid", cnn_params)
    sets = [f"data={shards}", 'model=["conv:4:3:1:1:relu", "maxpool:2", "dense:4"]', "batch_size=32",
            "shuffle_buffer=100", "epochs=1", "lr=0.05"]
    g1, r1 = cnn(sets + ["groups=1"])
    g2, _ = cnn(sets + ["groups=2"], workers=2, runtime="cluster")
    assert max_diff(g1, g2) < 1e-5 and r1.metrics[-1]["test_accuracy"] > 0.5
    cc = trainer("cpu-cluster", cc_params)
    a, res = cc([f"data={shards}", *SMALL, "epochs=2", "groups=2", "log_samples=true"])
    b, _ = cc([f"data={shards}", *SMALL, "epochs=2", "groups=1"])
    assert max_diff(a, b) < 1e-5
    served = {}
    for m in res.metrics:
        for epoch, ids in (m.get("samples_served") or {}).items():
            served.setdefault(epoch, []).extend(ids)
    assert sorted(served) == ["0", "1"]
    for ids in served.values():  # every sample of each epoch trained exactly once (960 = 30 x 32)
        assert sorted(ids) == list(range(960))


def test_resume_mid_epoch_continues_the_stream_exactly(shards, tmp_path):
    sets = [a for s in [f"data={shards}", *SMALL, "epochs=2"] for a in ("--set", s)]
    assert main(["run", "dnn-dp", "--run-dir", str(tmp_path / "full"), *sets]) == 0
    assert main(["run", "dnn-dp", "--run-dir", str(tmp_path / "cut"), *sets, "--set", "checkpoint_every=7",
                 "--max-supersteps", "23"]) == 0  # stops in the first epoch (30 steps, 2 supersteps each)
    ck = Checkpoints(RunDir(str(tmp_path / "cut")))
    assert 21 in ck.supersteps()
    state = ck.load(21)
    readers = [st for part in [state] for vid, st in _vertex_states(part).items() if vid.startswith("reader-")]
    assert readers and readers[0]["position"]["epoch"] == 0  # the reader's position is checkpointed
    assert main(["run", "--resume", str(tmp_path / "cut")]) == 0
    full = {p.name: p.read_bytes() for p in (tmp_path / "full" / "params").glob("*.npy")}
    cut = {p.name: p.read_bytes() for p in (tmp_path / "cut" / "params").glob("*.npy")}
    assert full and full == cut


def _vertex_states(loaded: object) -> dict[str, dict]:
    """Vertex id -> state from a loaded checkpoint (whatever nesting the parts use)."""
    out: dict[str, dict] = {}

    def walk(obj: object) -> None:
        if isinstance(obj, dict):
            for k, v in obj.items():
                if isinstance(k, str) and k.startswith("reader-") and isinstance(v, dict):
                    out[k] = v
                else:
                    walk(v)
        elif isinstance(obj, list):
            for v in obj:
                walk(v)

    walk(loaded)
    return out


def test_a_shard_going_bad_mid_run_names_it_and_keeps_the_last_checkpoint(shards, tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    for p in Path(shards).iterdir():
        (d / p.name).write_bytes(p.read_bytes())
    job = get_job("dnn-dp")
    config = resolve_config(job, None, [f"data={d}", *SMALL, "epochs=2", "checkpoint_every=5",
                                        "checkpoint_background=false"])
    run = tmp_path / "run"

    def damage(line: dict) -> None:
        if line["superstep"] == 12:
            for p in d.glob("train-*.npz"):
                os.truncate(p, 100)

    # bad input met inside a superstep is the user's error (exit 2), as a malformed line of a graph split is
    with pytest.raises(DataError) as info:
        run_job(job, config, run_dir=str(run), on_superstep=damage)
    assert "train-" in str(info.value) and "truncated" in str(info.value)
    ck = Checkpoints(RunDir(str(run)))
    assert ck.supersteps() and ck.inspect(max(ck.supersteps())).valid
    assert json.loads((run / "job.json").read_text())["job"] == "dnn-dp"
