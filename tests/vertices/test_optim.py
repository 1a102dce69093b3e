"""Optimizers update in chunks of CHUNK elements; the result must equal the one-pass formulas.
Adam and AdamW match PyTorch's; the registry makes a new optimizer valid in every training job."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mariana.vertices.train.optim import CHUNK, make_optimizer, replica_stats

pytestmark = pytest.mark.timeout(60)

N = 2 * CHUNK + 1234  # three chunks, the last one partial


def _reference(name, p, g, stats, steps, lr=0.05, m=0.9, eps=1e-8, block=10, wd=0.01):
    """The same updates written for the whole slice at once (the code before chunking)."""
    p, v, G = p.copy(), np.zeros_like(p), None
    if name in ("adam", "adamw"):
        mom, sq = np.zeros_like(p), np.zeros_like(p)
        for t in range(1, steps + 1):
            d = g if name == "adamw" else g + wd * p
            if name == "adamw":
                p *= 1.0 - lr * wd
            mom *= 0.9
            mom += (1.0 - 0.9) * d
            sq *= 0.999
            sq += (1.0 - 0.999) * (d * d)
            denom = np.sqrt(sq)
            denom /= math.sqrt(1.0 - 0.999 ** t)
            denom += eps
            p -= (lr / (1.0 - 0.9 ** t)) * (mom / denom)
        return p
    for _ in range(steps):
        d = g + wd * p
        if name in ("sgd", "momentum"):
            if name == "momentum":
                v *= m
                v += d
                d = v
            p -= lr * d
            continue
        if name == "adagrad":
            G = np.zeros_like(p) if G is None else G
            G += d * d
            scale = np.sqrt(G)
        elif name == "adagrad_dp":
            G = np.zeros_like(p) if G is None else G
            G += stats
            scale = np.sqrt(G)
        else:
            G = np.zeros(-(-p.size // block), p.dtype) if G is None else G
            G += stats
            scale = np.repeat(np.sqrt(G / block), block)[: p.size]
        scale += eps
        p -= lr * d / scale
    return p


@pytest.mark.parametrize("name", ["sgd", "momentum", "adagrad", "adagrad_dp", "adagrad_approx", "adam", "adamw"])
def test_chunked_updates_equal_the_whole_slice_formula_bit_for_bit(name):
    rng = np.random.default_rng(0)
    p0 = rng.standard_normal(N).astype(np.float32)
    g = rng.standard_normal(N).astype(np.float32)
    opt = make_optimizer(name, 0.05, 0.9, 0.01, 1e-8, block=10)  # 10: chunks must still cut at whole blocks
    stats = replica_stats(opt.stats, g, opt.block)
    p, state = p0.copy(), opt.init_state(p0)
    g.setflags(write=False)  # a received gradient is a read-only view: the update must not write it
    for _ in range(3):
        opt.step(p, g, state, stats)
    assert p.tobytes() == _reference(name, p0, g, stats, 3).tobytes()


@pytest.mark.parametrize("name", ["sgd", "momentum", "adagrad", "adagrad_approx", "adam", "adamw"])
@pytest.mark.parametrize("members", [2, 3])
def test_a_list_of_gradients_is_summed_in_order_chunk_by_chunk_bit_for_bit(name, members):
    """``step(p, [g0, g1, ...])`` fuses the members' sum into the update: the same bytes as
    summing ((g0 + g1) + g2) first, also from an offset inside the state (a bucket)."""
    rng = np.random.default_rng(1)
    p0 = rng.standard_normal(N).astype(np.float32)
    grads = [rng.standard_normal(N - 96).astype(np.float32) for _ in range(members)]
    total = grads[0] + grads[1]
    for g in grads[2:]:
        total += g
    opt = make_optimizer(name, 0.05, 0.9, 0.01, 1e-8, block=16)
    stats = replica_stats(opt.stats, total, opt.block)
    fused, summed = p0.copy(), p0.copy()
    fused_state, summed_state = opt.init_state(p0), opt.init_state(p0)
    for _ in range(2):
        opt.step(fused, grads, fused_state, stats, at=96)
        opt.step(summed, total, summed_state, stats, at=96)
    assert fused.tobytes() == summed.tobytes() and fused[:96].tobytes() == p0[:96].tobytes()


def test_statistics_are_required_where_the_optimizer_uses_them():
    opt = make_optimizer("adagrad_approx", 0.1)
    with pytest.raises(ValueError, match="needs the replicas' statistics"):
        opt.step(np.zeros(32, np.float32), np.zeros(32, np.float32), opt.init_state(np.zeros(32, np.float32)))


@pytest.mark.parametrize("name", ["adam", "adamw"])
def test_adam_and_adamw_match_pytorch(name):
    torch = pytest.importorskip("torch", reason="the PyTorch reference needs the torch-ref extra: pip install -e '.[torch-ref]'")
    rng = np.random.default_rng(2)
    p0 = rng.standard_normal(N).astype(np.float32)
    opt = make_optimizer(name, 0.01, weight_decay=0.05)
    p, state = p0.copy(), opt.init_state(p0)
    ref = torch.tensor(p0.copy(), requires_grad=True)
    ref_opt = (torch.optim.AdamW if name == "adamw" else torch.optim.Adam)([ref], lr=0.01, weight_decay=0.05, eps=1e-8)
    for _ in range(5):
        g = rng.standard_normal(N).astype(np.float32)
        opt.step(p, g, state, at=0)
        ref.grad = torch.from_numpy(g)
        ref_opt.step()
    np.testing.assert_allclose(p, ref.detach().numpy(), rtol=0, atol=1e-6)  # float32 rounding of one formula


def test_a_registered_optimizer_is_valid_in_every_training_job(tmp_path, capsys):
    from dataclasses import dataclass

    from mariana.cli import main
    from mariana.vertices.train.optim import OPTIMIZERS, Optimizer, OptimizerKind, register_optimizer

    @dataclass
    class SignSGD(Optimizer):
        def _step(self, param, grad, state, stats, scratch=False):
            param -= self.lr * np.sign(grad)

    assert main(["run", "dnn-dp", "--set", "optimizer=signsgd", "--run-dir", str(tmp_path / "no")]) == 2
    assert "must be one of sgd, momentum" in capsys.readouterr().err
    register_optimizer(OptimizerKind("signsgd", "sign of the gradient", lambda c: SignSGD(c["lr"])))
    try:
        for job in ("dnn-dp", "cnn-hybrid", "cpu-cluster"):
            assert main(["run", job, "--set", "optimizer=signsgd", "--set", "lr=0.001", "--set", "steps=3",
                         "--run-dir", str(tmp_path / job), "--json"]) == 0
        assert main(["jobs"]) == 0
        assert "signsgd" in capsys.readouterr().out
    finally:
        del OPTIMIZERS["signsgd"]
