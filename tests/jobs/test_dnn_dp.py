"""dnn-dp: synchronous data parallelism is exact, runtimes agree bit for bit, approximate
AdaGrad saves exchange at no accuracy cost, the main job trains, bad input is refused."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from mariana.jobs import get_job, resolve_config
from mariana.cli import main
from mariana.jobs.dnn_data_parallel import final_params
from mariana.jobs.launch import run_job
from training_helpers import max_diff, require_gpu, same, trainer

pytestmark = pytest.mark.timeout(180)

JOB = get_job("dnn-dp")
SMALL = ['model=["dense:32:relu", "dense:10"]', "steps=6", "batch_size=64"]


train = trainer("dnn-dp", final_params)



# Four replicas sum four float32 gradient slices where one replica has one gradient: the only
# difference is float32 summation order, a few ulps of values ~1e-2 after 6 steps (measured
# max 3e-8 for sgd/momentum, 2e-7 for adagrad, whose 1/sqrt(G) amplifies the first steps).
SUMMATION_TOL = 1e-6


@pytest.mark.parametrize(("exchange", "optimizer"), [(ex, opt) for ex in ("linear", "tree", "ps")
                                                    for opt in ("sgd", "momentum", "adagrad")]
                         + [("linear", "adam"), ("allreduce", "adamw")])
def test_four_replicas_equal_one_replica_with_the_same_global_batch(exchange, optimizer):
    one, _ = train(SMALL + [f"optimizer={optimizer}", "replicas=1"])
    four, _ = train(SMALL + [f"optimizer={optimizer}", "replicas=4", f"exchange={exchange}", "ps_shards=3"])
    assert max_diff(one, four) < SUMMATION_TOL
    assert max_diff(one, dict(final_params(run_job(JOB, resolve_config(JOB, None, SMALL + ["steps=0", "epochs=0"])),
                                                resolve_config(JOB, None, SMALL)))) > 1e-3  # training moved them


@pytest.mark.parametrize("optimizer", ["adagrad_dp", "adagrad_approx"])
def test_per_replica_adagrad_variants_agree_across_topologies(optimizer):
    """These accumulate each replica's own squared gradient, so by definition they depend on how
    the batch is split; they must not depend on how the gradients travel."""
    runs = [train(SMALL + [f"optimizer={optimizer}", "replicas=4", f"exchange={ex}", "ps_shards=3"])[0]
            for ex in ("linear", "tree", "ps")]
    assert max_diff(runs[0], runs[1]) < SUMMATION_TOL and max_diff(runs[0], runs[2]) < SUMMATION_TOL


@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "adagrad", "adagrad_dp", "adagrad_approx", "adam", "adamw"])
@pytest.mark.parametrize("replicas", [1, 2, 4])
def test_allreduce_gives_the_parameters_of_linear_bit_for_bit_in_one_superstep_per_step(replicas, optimizer):
    """Each replica sums the same slices in the same (replica) order as a linear shard and runs
    the same elementwise optimizer on its own copy, so the bytes match; without the shard
    superstep a step takes one superstep instead of two."""
    sets = SMALL + [f"optimizer={optimizer}", f"replicas={replicas}"]
    linear, lin = train(sets + ["exchange=linear"])
    allreduce, ar = train(sets + ["exchange=allreduce"])
    assert same(linear, allreduce)
    assert lin.supersteps == 2 * 6 + 2 and ar.supersteps <= 6 + 2
    assert not any(k.startswith("shard") for k in ar.values)


@pytest.mark.parametrize(("replicas", "stands_for"), [(1, "allreduce"), (2, "allreduce"), (4, "linear"), (8, "linear")])
def test_auto_exchange_is_allreduce_up_to_two_replicas_and_linear_beyond(replicas, stands_for):
    """The default: the same parameters as either, with the supersteps (and shards) of the one it picks."""
    sets = SMALL + ["optimizer=adam", f"replicas={replicas}"]
    auto, a = train(sets)
    picked, p = train(sets + [f"exchange={stands_for}"])
    assert {k.name: k.default for k in JOB.keys}["exchange"] == "auto"
    assert same(auto, picked) and a.supersteps == p.supersteps
    assert any(k.startswith("shard") for k in a.values) == (stands_for == "linear")


@pytest.mark.timeout(240)
def test_auto_exchange_sends_at_most_2_n_minus_1_over_n_models_per_member_and_step(tmp_path):
    """Bytes on the wire (the cluster's trace) per member and step against reduce-scatter +
    all-gather's bound, 2 (N-1)/N x the model, plus headers; allreduce's (N-1) x is over it."""
    from mariana.trace import cmd_summary

    n, steps = 4, 3
    model = 64 * 256 + 256 + 256 * 10 + 10  # the digits' 64 inputs, 256 hidden, 10 classes
    bound = 2 * (n - 1) / n * model * 4
    per_member = {}
    for ex in ("auto", "allreduce"):
        run = tmp_path / ex
        sets = ['model=["dense:256:relu", "dense:10"]', f"steps={steps}", f"exchange={ex}"]
        assert main(["run", "dnn-dp", "--workers", str(n), "--runtime", "cluster", "--run-dir", str(run),
                     *(x for kv in sets for x in ("--set", kv))]) == 0
        per_member[ex] = cmd_summary(str(run), as_json=True)[1]["bytes"]["total"] / (n * steps)
    assert per_member["auto"] <= bound * 1.02 + 4096, per_member
    assert per_member["allreduce"] > 1.9 * bound, per_member  # (N-1) = 3 models against 1.5


@pytest.mark.parametrize("sets", [["replicas=2", "exchange=linear"], ["replicas=4", "exchange=tree"],
                                  ["replicas=4", "exchange=ps", "ps_shards=3"],
                                  ["replicas=2", "optimizer=adagrad_approx"], ["replicas=2", "exchange=allreduce"],
                                  ["replicas=4", "exchange=allreduce", "optimizer=momentum"]])
def test_local_and_cluster_runtimes_give_bit_identical_parameters(sets):
    local, _ = train(SMALL + sets, workers=2, runtime="local")
    cluster, _ = train(SMALL + sets, workers=2, runtime="cluster")
    one_worker, _ = train(SMALL + sets, workers=1, runtime="local")
    for name in local:
        assert local[name].tobytes() == cluster[name].tobytes() == one_worker[name].tobytes(), name


@pytest.mark.slow
def test_approximate_adagrad_matches_exact_accuracy_and_exchanges_far_less():
    sets = ["replicas=2", "epochs=8", "lr=0.02", "exchange=linear"]  # gradients out, parameters back: half each
    runs = {}
    for opt in ("sgd", "adagrad_dp", "adagrad_approx"):
        lines = []
        _, result = train(sets + [f"optimizer={opt}"], workers=2, runtime="cluster", on_superstep=lines.append)
        steps = max(v["step"] for k, v in result.values.items() if k.startswith("replica-"))
        accuracy = [m for m in lines if "test_accuracy" in m][-1]["test_accuracy"]
        runs[opt] = (sum(m["bytes"] for m in lines) / steps, accuracy)  # bytes the engine counted on the wire
    (sgd_b, _), (dp_b, dp_acc), (ap_b, ap_acc) = runs["sgd"], runs["adagrad_dp"], runs["adagrad_approx"]
    assert dp_acc > 0.9 and abs(ap_acc - dp_acc) <= 0.01
    assert 0.9 < (dp_b - sgd_b) / sgd_b * 2 < 1.1  # exact: the gradient half of the exchange doubles
    assert (dp_b - sgd_b) / (ap_b - sgd_b) > 10  # approximate: >10x less extra data (block 16)


def test_the_main_job_trains_digits_to_95_percent(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["run", "dnn-dp", "--run-dir", str(run)]) == 0
    out = capsys.readouterr().out
    accuracy = float(out.split("test accuracy ")[1].split(",")[0])
    assert accuracy >= 0.95, out
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steps = 20 * (1438 // 64)  # 20 epochs of the training split: 1797 digits less 359 held out
    assert sum("loss" in m for m in lines) == steps and all(0 < m["loss"] < 3 for m in lines if "loss" in m)
    evals = [m for m in lines if "test_accuracy" in m]
    assert len(evals) == 20 and evals[-1]["epoch"] == 20  # one evaluation per epoch, top-level keys
    assert (run / "params" / "index.json").exists()

    export = tmp_path / "params.npz"
    assert main(["params", "export", str(run), "--to", str(export)]) == 0
    with np.load(export) as npz:
        assert npz.files == ["0.W", "0.b", "1.W", "1.b", "2.W", "2.b"]
        assert npz["0.W"].shape == (64, 256) and npz["2.b"].shape == (10,)


def _npz(tmp_path, **arrays):
    path = tmp_path / "data.npz"
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    path.write_bytes(buf.getvalue())
    return path


@pytest.mark.parametrize("case,needle", [
    (["model=[\"dense:32:relu\", \"spline:3\"]"], "unknown layer type"),
    (["model=[\"conv:4:3\", \"dense:10\"]"], "needs NCHW input"),
    (["model=[\"dense:32:relu\", \"dense:5\"]"], "10 classes"),
    (["batch_size=30", "replicas=4"], "not divisible by replicas"),
    (["optimizer=lamb"], "must be one of"),
    (["data=/nonexistent/data.npz"], "cannot read data"),
])
def test_bad_configuration_is_one_clear_line_and_exit_2(tmp_path, capsys, case, needle):
    run = tmp_path / "run"
    argv = ["run", "dnn-dp", "--run-dir", str(run)] + [a for c in case for a in ("--set", c)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mariana: error:") and needle in err and "\n" not in err, err
    assert not run.exists() or sorted(p.name for p in run.iterdir()) == ["job.json"]


@pytest.mark.parametrize("arrays,needle", [
    ({"x": np.zeros((10, 4))}, "no array 'y'"),
    ({"features": np.zeros((10, 4)), "labels": np.zeros(10)}, "no array 'x' or 'y'"),
    ({"x": np.zeros((10, 4)), "y": np.array([0, 1, 2, 3, -1, 0, 1, 2, 3, 0])}, "labels must be integers >= 0"),
    ({"x": np.zeros((10, 4)), "y": np.arange(10)}, "out of range for 5 classes"),
    ({"x": np.where(np.eye(10, 4) > 0, np.nan, 0.0), "y": np.zeros(10, int)}, "NaN or Inf"),
])
def test_bad_data_files_are_refused(tmp_path, capsys, arrays, needle):
    path = _npz(tmp_path, **arrays)
    argv = ["run", "dnn-dp", "--run-dir", str(tmp_path / "run"), "--set", f"data={path}",
            "--set", "batch_size=4", "--set", 'model=["dense:5"]']
    if "classes" in needle:
        argv += ["--set", "classes=5"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err, err


def test_data_from_an_fsspec_url(tmp_path):
    import fsspec

    rng = np.random.default_rng(3)
    x = rng.normal(size=(200, 6)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    buf = io.BytesIO()
    np.savez(buf, x=x, y=y)
    fsspec.filesystem("memory").pipe("/dnn-test/data.npz", buf.getvalue())
    _, result = train(["data=memory://dnn-test/data.npz", 'model=["dense:16:relu", "dense:2"]', "epochs=15",
                       "batch_size=20", "replicas=2", "optimizer=sgd", "lr=0.2"])
    acc = [m for m in result.metrics if "test_accuracy" in m][-1]["test_accuracy"]
    assert acc > 0.9


@pytest.mark.gpu
def test_data_parallel_equivalence_on_gpu():
    require_gpu()
    cpu, _ = train(SMALL + ["replicas=2"])
    gpu, _ = train(SMALL + ["replicas=2", "device=cuda"])
    assert max_diff(cpu, gpu) < 1e-4


def test_the_same_placement_is_bit_identical_with_matmuls_big_enough_for_blas_threads():
    """OpenBLAS sums differently with 1 and 2 threads (64x256 @ 256x128 already differs here);
    cluster workers get cores // workers threads, so the local runtime simulating the same
    workers must use as many, or the runtimes stop agreeing once a model is more than a toy."""
    sets = ["steps=4", "replicas=2", "batch_size=128"]  # the default 64-256-256-10 model
    local, _ = train(sets, workers=2, runtime="local")
    cluster, _ = train(sets, workers=2, runtime="cluster")
    assert all(local[k].tobytes() == cluster[k].tobytes() for k in local)


def test_allreduce_snapshots_and_exports_the_model_without_shards(tmp_path, capsys):
    """Replica 0 holds the model: the parameter snapshots, a checkpoint export and the final
    export all come from it, and agree with linear's shards."""
    run = tmp_path / "run"
    sets = [x for kv in ["epochs=2", "checkpoint_every=10", "replicas=2", "exchange=allreduce"] for x in ("--set", kv)]
    assert main(["run", "dnn-dp", "--run-dir", str(run), "--workers", "2", "--max-supersteps", "25", *sets]) == 0
    assert main(["params", "export", str(run), "--to", str(tmp_path / "final.npz")]) == 0
    (run / "params" / "index.json").unlink()  # as if still training
    capsys.readouterr()
    assert main(["params", "export", str(run), "--to", str(tmp_path / "now.npz")]) == 0
    assert "from the parameter snapshot at superstep 20" in capsys.readouterr().out
    assert main(["params", "export", str(run), "--to", str(tmp_path / "ck.npz"), "--checkpoint", "20"]) == 0
    with np.load(tmp_path / "now.npz") as now, np.load(tmp_path / "ck.npz") as ck, np.load(tmp_path / "final.npz") as end:
        assert now.files == ["0.W", "0.b", "1.W", "1.b", "2.W", "2.b"]
        assert all(now[k].tobytes() == ck[k].tobytes() for k in now.files)
        assert any(now[k].tobytes() != end[k].tobytes() for k in now.files)  # 20 supersteps are 19 steps, not 24


def _fake_hosts(monkeypatch, per_host: int) -> None:
    """Every ``per_host`` consecutive replicas (and their readers and shards) on one host."""
    from mariana.engine.vertex import Context

    monkeypatch.setattr(Context, "host_of", lambda self, vid: f"h{int(vid.rsplit('-', 1)[1]) // per_host}")


@pytest.mark.parametrize("optimizer", ["momentum", "adagrad_approx", "adam"])
@pytest.mark.parametrize("replicas", [1, 2, 4])
def test_hier_gives_the_parameters_of_linear_bit_for_bit(replicas, optimizer):
    """The gradient summed member to member in member order is linear's sum of N slices."""
    sets = SMALL + [f"optimizer={optimizer}", f"replicas={replicas}"]
    linear, _ = train(sets + ["exchange=linear"])
    hier, h = train(sets + ["exchange=hier"])
    assert same(linear, hier)
    assert h.supersteps <= 6 * (2 * replicas + 3) + 2  # the chain: about 2N + 2 supersteps a step


@pytest.mark.parametrize("optimizer", ["momentum", "adagrad_approx"])
def test_hier_across_hosts_relays_fresh_pieces_once_per_host_and_keeps_linears_parameters(monkeypatch, optimizer):
    """Two hosts of two replicas: shards send the other host one copy, its first replica passes it
    on, and every replica still starts each step in the same superstep (one loss per step)."""
    sets = SMALL + [f"optimizer={optimizer}", "replicas=4"]
    linear, lin = train(sets + ["exchange=linear"])
    _fake_hosts(monkeypatch, 2)
    hier, h = train(sets + ["exchange=hier"])
    auto, a = train(sets)  # auto: a host holds several of 4 members, so it runs as hier
    assert same(linear, hier) and same(linear, auto) and a.supersteps == h.supersteps > lin.supersteps

    def losses(result):
        return [m["loss"] for m in result.metrics if "loss" in m]

    assert losses(h) == losses(lin) and len(losses(h)) == 6


def test_auto_on_one_member_per_host_is_linear(monkeypatch):
    sets = SMALL + ["optimizer=momentum", "replicas=4"]
    linear, lin = train(sets + ["exchange=linear"])
    _fake_hosts(monkeypatch, 1)
    auto, a = train(sets)
    assert same(linear, auto) and a.supersteps == lin.supersteps


def test_hier_on_the_cluster_runtime_is_bit_identical_to_local():
    config = resolve_config(JOB, None, SMALL + ["optimizer=adagrad_approx", "replicas=4", "exchange=hier"])
    local = dict(final_params(run_job(JOB, config, workers=4, runtime="local"), config))
    cluster = dict(final_params(run_job(JOB, config, workers=4, runtime="cluster"), config))
    assert all(local[k].tobytes() == cluster[k].tobytes() for k in local)
