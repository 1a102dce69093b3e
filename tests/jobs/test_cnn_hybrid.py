"""cnn-hybrid: P partitions equal the unsplit model, G groups equal one group with the whole
batch, runtimes agree bit for bit, the input pipeline does not change results, the main job
trains, the model exports under the unsplit names, bad input is refused."""

from __future__ import annotations

import io
import json
import os
import signal

import numpy as np
import pytest

from mariana.jobs import get_job, resolve_config
from mariana.cli import main
from mariana.jobs.cnn_hybrid import final_params
from training_helpers import max_diff, require_gpu, trainer
from mariana.storage import RunDir

pytestmark = pytest.mark.timeout(180)

JOB = get_job("cnn-hybrid")
CNN = ['model=["conv:4:3:1:1:relu", "maxpool:2", "conv:8:3:1:1:relu", "dropout:0.2", "dense:16:relu", "dense:10"]']
SMALL = CNN + ["steps=5", "batch_size=32"]

# P partitions compute d(input) as a sum of P partial products (and the conv/dense outputs
# through differently shaped BLAS calls), so only float32 summation order differs from one
# partition: a few ulps of values ~1e-1 after 5 steps (measured max 6e-8).
SUMMATION_TOL = 1e-6
# AdaGrad (and Adam) divide by sqrt(sum g^2): on its first steps an elementwise rounding difference of a
# near-zero gradient moves a weight by up to lr * (relative difference); measured max 1.0e-6.
ADAGRAD_TOL = 1e-5


train = trainer("cnn-hybrid", final_params)



@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "adagrad", "adam", "adamw"])
def test_two_partitions_give_the_parameters_of_one(optimizer):
    """Elementwise optimizers only: adagrad_approx's 16-element blocks follow each partition's
    flat layout, so by definition it groups other parameters under P=2 than under P=1."""
    one, _ = train(SMALL + ["partitions=1", f"optimizer={optimizer}"])
    two, _ = train(SMALL + ["partitions=2", f"optimizer={optimizer}"])
    assert max_diff(one, two) < (ADAGRAD_TOL if optimizer.startswith("ada") else SUMMATION_TOL)
    start, _ = train(SMALL + ["partitions=1", "steps=0", "epochs=0"])
    assert max_diff(one, start) > 1e-3  # training moved them


@pytest.mark.parametrize(("exchange", "optimizer"), [("linear", "momentum"), ("tree", "momentum"), ("ps", "momentum"),
                                                    ("linear", "adamw")])
def test_two_groups_with_half_batches_equal_one_group_with_the_whole_batch(exchange, optimizer):
    one, _ = train(SMALL + ["partitions=2", "groups=1", f"optimizer={optimizer}"])
    two, _ = train(SMALL + ["partitions=2", "groups=2", f"exchange={exchange}", "ps_shards=3", f"optimizer={optimizer}"])
    assert max_diff(one, two) < (ADAGRAD_TOL if optimizer.startswith("ada") else SUMMATION_TOL)


@pytest.mark.parametrize("sets", [["partitions=2"], ["partitions=2", "groups=2", "exchange=tree", "augment=true"]])
def test_local_and_cluster_runtimes_give_bit_identical_parameters(sets):
    local, _ = train(SMALL + sets, workers=1)
    two, _ = train(SMALL + sets, workers=2, runtime="cluster")
    five, _ = train(SMALL + sets, workers=5, runtime="cluster")  # spare workers host the input pipeline
    for name in local:
        assert local[name].tobytes() == two[name].tobytes() == five[name].tobytes(), name


@pytest.mark.parametrize("depth", [0, 1, 5])
def test_the_pipeline_depth_changes_timing_not_results(depth):
    ref, ref_result = train(SMALL + ["partitions=2", "augment=true"])
    got, result = train(SMALL + ["partitions=2", "augment=true", f"pipeline={depth}"])
    assert all(ref[k].tobytes() == got[k].tobytes() for k in ref)
    if depth == 0:  # batches on demand: the read and the decode sit on every step's critical path
        assert result.supersteps > ref_result.supersteps


def test_placement_puts_partition_p_of_group_g_on_worker_g_times_p_plus_p():
    config = resolve_config(JOB, None, SMALL + ["partitions=2", "groups=2"])
    from mariana.jobs.registry import BuildContext

    table = JOB.build(config, BuildContext(workers=5)).place(5)
    assert [table.worker_of(f"part-g{g:02d}-p{p:02d}") for g in range(2) for p in range(2)] == [0, 1, 2, 3]
    assert table.worker_of("reader-g00") == table.worker_of("prep-g01") == 4  # the spare worker
    assert table.worker_of("shard-p01-001") == 3  # shard 1 of partition 1 beside group 1's partition 1
    small = JOB.build(config, BuildContext(workers=4)).place(4)
    assert small.worker_of("prep-g01") == 2  # no spare: beside the group's partition 0


@pytest.mark.slow  # the whole default job: 20 s (cnn-hybrid) / 10 s (cpu-cluster) on a quiet machine
def test_the_main_job_trains_digits_to_97_percent_and_exports_the_unsplit_names(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["run", "cnn-hybrid", "--run-dir", str(run)]) == 0
    out = capsys.readouterr().out
    assert float(out.split("test accuracy ")[1].split(",")[0]) >= 0.97, out
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    evals = [m for m in lines if "test_accuracy" in m]
    assert len(evals) == 20 and evals[-1]["epoch"] == 20 and all(0 < m["loss"] < 3 for m in lines if "loss" in m)
    export = tmp_path / "params.npz"
    assert main(["params", "export", str(run), "--to", str(export)]) == 0
    from mariana.vertices.train.data import load_dataset
    from mariana.vertices.train.model import build_model

    spec = JOB.defaults()["model"]
    ds = load_dataset("digits", 0.2, 0, image_shape=(1, 8, 8))
    unsplit = build_model(spec, ds.input_shape, 10)
    with np.load(export) as npz:
        assert npz.files == [n for n, _ in unsplit.named_params()]
        assert all(npz[n].shape == p.shape for n, p in unsplit.named_params())


def test_killing_a_partition_worker_mid_step_recovers_to_bit_identical_parameters(tmp_path):
    """Checkpoints every 7 supersteps fall inside steps (9 supersteps each): the partitions'
    activations, transfers in flight and layer caches must come back exactly."""
    sets = SMALL + ["partitions=2", "steps=12", "checkpoint_every=7"]
    reference, _ = train(sets, workers=2, runtime="cluster", run_dir=RunDir(str(tmp_path / "ref")))
    procs, killed = [], []

    def kill(line):
        if line["superstep"] == 40 and not killed:
            killed.append(procs[1].pid)
            os.kill(procs[1].pid, signal.SIGKILL)

    recovered, result = train(sets, workers=2, runtime="cluster", run_dir=RunDir(str(tmp_path / "killed")),
                              on_superstep=kill, on_start=lambda m, p: procs.extend(p))
    assert killed and result.metrics[-1]["restarts"] == 1
    assert all(reference[k].tobytes() == recovered[k].tobytes() for k in reference)


def _npz(tmp_path, **arrays):
    path = tmp_path / "data.npz"
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    path.write_bytes(buf.getvalue())
    return str(path)


def test_uint8_nchw_data_is_decoded_by_the_pipeline(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(96, 3, 6, 6), dtype=np.uint8)
    y = (x[:, 0].mean(axis=(1, 2)) > 127).astype(np.int64)
    data = _npz(tmp_path, x=x, y=y)
    sets = [f"data={data}", 'model=["conv:4:3:relu", "dense:2"]', "steps=4", "batch_size=16", "augment=true",
            "mean=0.5", "std=0.25"]
    one, _ = train(sets + ["partitions=1"])
    two, _ = train(sets + ["partitions=2", "groups=2"], workers=2, runtime="cluster")
    assert max_diff(one, two) < SUMMATION_TOL


@pytest.mark.parametrize("case,needle", [
    (["partitions=3"], "not divisible into 3 partitions"),
    (["groups=8", "partitions=2", "batch_size=8"], "groups*partitions = 16 is larger than batch_size 8"),
    (["groups=3"], "batch_size 64 is not divisible by groups 3"),
    (['model=["conv:4:9", "dense:10"]'], "larger than the padded input"),
    (['model=["conv:4:3", "dense:5"]'], "10 classes"),
    (["pipeline=-1"], "'pipeline' must be >= 0"),
])
def test_bad_configuration_is_one_clear_line_and_exit_2(tmp_path, capsys, case, needle):
    args = ["run", "cnn-hybrid", "--run-dir", str(tmp_path / "run")]
    for s in case:
        args += ["--set", s]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


def test_flat_samples_with_a_conv_model_are_refused(tmp_path, capsys):
    data = _npz(tmp_path, x=np.zeros((40, 12), np.float32), y=np.zeros(40, np.int64))
    assert main(["run", "cnn-hybrid", "--set", f"data={data}", "--set", "batch_size=8",
                 "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs NCHW input" in err[0], err


@pytest.mark.gpu
def test_partitions_on_gpus_match_the_cpu():
    """device=cuda puts partition p on GPU p mod #GPUs; transfers are staged through the host."""
    require_gpu()
    cpu, _ = train(SMALL + ["partitions=2", "groups=2"])
    gpu, _ = train(SMALL + ["partitions=2", "groups=2", "device=cuda"])
    two, _ = train(SMALL + ["partitions=2", "groups=2", "device=cuda"], workers=2, runtime="cluster")
    assert max_diff(cpu, gpu) < 1e-4 and all(gpu[k].tobytes() == two[k].tobytes() for k in gpu)
