"""cpu-cluster: K workers per group equal one, S servers equal one, runtimes agree bit for bit,
the three frameworks are one engine, the data ledger survives a kill -9 with every sample of
every epoch trained once, servers persist through fsspec (S3 included), counters are reported."""

from __future__ import annotations

import json
import os
import random
import signal

import numpy as np
import pytest

from mariana.jobs import get_job
from mariana.cli import main
from mariana.jobs.cpu_cluster import final_params
from training_helpers import max_diff, same, trainer
from mariana.storage import RunDir
from mariana.vertices.train.data import load_dataset

pytestmark = pytest.mark.timeout(180)

JOB = get_job("cpu-cluster")
SMALL = ['model=["dense:32:relu", "dense:16:relu", "dense:10"]', "steps=6"]
# K workers sum K partial products for every d(input) (and run differently shaped matmuls):
# only float32 summation order differs from one worker; measured max 6e-8 after 6 steps.
SUMMATION_TOL = 1e-6


train = trainer("cpu-cluster", final_params)




@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "adam", "adamw"])
def test_two_workers_per_group_give_the_parameters_of_one(optimizer):
    one, _ = train(SMALL + ["workers_per_group=1", f"optimizer={optimizer}"])
    two, _ = train(SMALL + ["workers_per_group=2", f"optimizer={optimizer}"])
    assert max_diff(one, two) < SUMMATION_TOL
    start, _ = train(SMALL + ["steps=0", "epochs=0"])
    assert max_diff(one, start) > 1e-3  # training moved them


@pytest.mark.parametrize("optimizer", ["momentum", "adagrad_approx", "adamw"])
def test_three_servers_give_bit_identical_parameters_to_one(optimizer):
    """Servers apply the optimizer elementwise on segments cut at multiples of 16 elements, so
    even adagrad_approx's 16-element blocks are the same."""
    one, _ = train(SMALL + ["param_servers=1", f"optimizer={optimizer}"])
    three, _ = train(SMALL + ["param_servers=3", f"optimizer={optimizer}"])
    assert same(one, three)


@pytest.mark.parametrize("sets", [["groups=2", "workers_per_group=2", "param_servers=3"], ["groups=2"]])
def test_local_and_cluster_runtimes_give_bit_identical_parameters(sets):
    local, _ = train(SMALL + sets)
    two, _ = train(SMALL + sets, workers=2, runtime="cluster")
    three, _ = train(SMALL + sets, workers=3, runtime="cluster")
    assert same(local, two) and same(local, three)


@pytest.mark.parametrize("optimizer", ["adagrad", "adam", "adamw"])
def test_the_three_frameworks_are_one_engine(tmp_path, capsys, optimizer):
    """dnn-dp replicas=2, cpu-cluster groups=2 workers_per_group=1 and cnn-hybrid groups=2
    partitions=1 on the same MLP, data, seed and optimizer give the same parameters. Tolerance:
    none. The three graphs do the same float32 operations in the same order (the same batch
    rows, the same matmuls, gradients summed in member order by the shards), so they are
    bit-identical, not merely close."""
    common = ['model=["dense:64:relu", "dense:32:relu", "dense:10"]', "steps=12", f"optimizer={optimizer}",
              "weight_decay=0.01"]
    jobs = {"dnn-dp": ["replicas=2"], "cpu-cluster": ["groups=2", "workers_per_group=1"],
            "cnn-hybrid": ["groups=2", "partitions=1"]}
    params = {}
    for job, sets in jobs.items():
        run, out = tmp_path / job, tmp_path / f"{job}.npz"
        args = ["run", job, "--run-dir", str(run), "--workers", "2"]
        for s in common + sets:
            args += ["--set", s]
        assert main(args) == 0
        assert main(["params", "export", str(run), "--to", str(out)]) == 0
        with np.load(out) as npz:
            params[job] = {k: npz[k] for k in npz.files}
    capsys.readouterr()
    assert list(params["dnn-dp"]) == ["0.W", "0.b", "1.W", "1.b", "2.W", "2.b"]
    assert same(params["dnn-dp"], params["cpu-cluster"]) and same(params["dnn-dp"], params["cnn-hybrid"])


def _epoch_samples(metrics):
    """Sample ids trained per epoch, from the ``samples_served`` audit in metrics.jsonl."""
    out = {}
    for line in metrics:
        for epoch, ids in (line.get("samples_served") or {}).items():
            out.setdefault(int(epoch), []).extend(ids)
    return out


def test_the_ledger_reassigns_shards_after_a_kill_so_every_sample_is_trained_once(tmp_path):
    sets = SMALL + ["steps=0", "epochs=2", "batch_size=128", "checkpoint_every=9", "log_samples=true",
                    "workers_per_group=2", "groups=2"]
    reference, _ = train(sets, workers=2, runtime="cluster", run_dir=RunDir(str(tmp_path / "ref")))
    at = random.Random(12).randrange(30, 80)  # a seeded random superstep, inside the first epoch or the second
    procs, killed = [], []

    def kill(line):
        if line["superstep"] == at and not killed:
            killed.append(procs[0].pid)
            os.kill(procs[0].pid, signal.SIGKILL)

    run = tmp_path / "killed"
    recovered, result = train(sets, workers=2, runtime="cluster", run_dir=RunDir(str(run)),
                              on_superstep=kill, on_start=lambda m, p: procs.extend(p))
    assert killed and result.metrics[-1]["restarts"] == 1 and same(reference, recovered)
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["superstep"] for m in metrics] == list(range(result.supersteps))  # rewound to the checkpoint
    ds = load_dataset("digits", 0.2, 0)
    per_epoch = len(ds.x_train) // 128 * 128
    seen = _epoch_samples(metrics)
    assert sorted(seen) == [0, 1]
    for epoch, ids in seen.items():
        expected = np.random.default_rng([0, epoch]).permutation(len(ds.x_train))[:per_epoch]
        assert sorted(ids) == sorted(expected.tolist())  # each sample of the epoch exactly once


@pytest.mark.slow  # the whole default job: 20 s (cnn-hybrid) / 10 s (cpu-cluster) on a quiet machine
def test_the_main_job_trains_on_two_processes_with_counters(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["run", "cpu-cluster", "--workers", "2", "--run-dir", str(run), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["test_accuracy"] >= 0.95, summary
    c = summary["counters"]
    steps = 8 * (1438 // 64)  # 8 epochs of the training split
    assert c["samples"] == steps * 64 and c["samples_per_s"] > 0
    model = 64 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10
    # one server per process (param_servers=0); together they receive every gradient slice and
    # send every slice back: 2 x 4 bytes per parameter and step
    assert c["ps-000/bytes"] + c["ps-001/bytes"] == steps * model * 4 * 2
    assert c["g00/bytes"] > steps * model * 4  # gradients plus the transfers between the two workers
    assert summary["params"]["0.W"] == [64, 256]
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert sum(m.get("counter/samples", 0) for m in lines) == steps * 64
    assert main(["trace", "summary", str(run)]) == 0
    text = capsys.readouterr().out
    assert "counters:" in text and "ps-001/bytes" in text and "samples_per_s" in text


def test_servers_persist_their_segments_to_s3_and_export_reads_them(tmp_path, s3_url, capsys):
    sets = SMALL + ["steps=10", "param_servers=2", "checkpoint_every=12"]
    local, _ = train(sets)
    url = f"{s3_url}/run"
    args = ["run", "cpu-cluster", "--workers", "2", "--run-dir", url]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 0
    final = tmp_path / "final.npz"
    assert main(["params", "export", url, "--to", str(final)]) == 0
    with np.load(final) as npz:
        assert same(local, {k: npz[k] for k in npz.files})
    capsys.readouterr()
    assert main(["checkpoint", "list", url, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    rows = listed if isinstance(listed, list) else listed.get("checkpoints", [])
    assert rows and all(r.get("params") for r in rows), listed
    last = rows[-1]["superstep"]
    out = tmp_path / "snap.npz"
    assert main(["params", "export", url, "--to", str(out), "--checkpoint", str(last)]) == 0
    assert "parameter snapshot" in capsys.readouterr().out
    with np.load(out) as npz:
        assert list(npz.files) == list(local) and all(np.all(np.isfinite(npz[k])) for k in npz.files)


@pytest.mark.parametrize("case,needle", [
    (["workers_per_group=3"], "not divisible into 3 partitions"),
    (["groups=3"], "batch_size 64 is not divisible by groups 3"),
    (["param_servers=-1"], "'param_servers' must be >= 0"),
    (["workers_per_group=0"], "'workers_per_group' must be >= 1"),
])
def test_bad_configuration_is_one_clear_line_and_exit_2(tmp_path, capsys, case, needle):
    args = ["run", "cpu-cluster", "--run-dir", str(tmp_path / "run")]
    for s in case:
        args += ["--set", s]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
