"""``mariana trace replay`` on the training vertices (issue 20, item 1): replicas, shards, cpu-cluster
workers and servers and cnn-hybrid partitions use ``ctx.send_buffer``, which a replay must provide."""

from __future__ import annotations

import json

import pytest

from mariana.cli import main

CASES = [
    ("dnn-dp", ["--set", "replicas=2"], ["replica-001"]),  # allreduce: replicas only
    ("dnn-dp", ["--set", "replicas=2", "--set", "exchange=linear"], ["replica-001", "shard-000"]),
    ("cpu-cluster", ["--set", "groups=1", "--set", "workers_per_group=2"], ["w-g00-k01", "ps-000"]),
    ("cnn-hybrid", ["--set", "partitions=2", "--set", "model=[\"dense:32:relu\", \"dense:10\"]"], ["part-g00-p01"]),
]


@pytest.mark.parametrize(("job", "sets", "vertices"), CASES, ids=["dnn-dp", "dnn-dp-linear", "cpu-cluster", "cnn-hybrid"])
def test_replay_reruns_training_vertices_identically(tmp_path, capsys, job, sets, vertices):
    run = tmp_path / "run"
    assert main(["run", job, *sets, "--set", "epochs=1", "--set", "checkpoint_every=6", "--capture", "*",
                 "--workers", "2", "--runtime", "local", "--run-dir", str(run)]) == 0
    capsys.readouterr()
    for vertex in vertices:
        computed = sorted(int(p.stem.split("-")[1]) for p in (run / "capture" / vertex).glob("ss-*.part"))
        target = computed[-1]  # replayed from the newest checkpoint before it
        assert main(["trace", "replay", str(run), "--vertex", vertex, "--superstep", str(target), "--json"]) == 0
        r = json.loads(capsys.readouterr().out)
        assert r["from_checkpoint"] and r["replayed"], (vertex, r)
        assert all(s["matches"] for s in r["replayed"]), (vertex, r["replayed"])
