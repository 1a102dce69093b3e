"""Model spec parsing, shape inference errors, flat binding, determinism and a training sanity run."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from mariana.errors import UsageError
from mariana.vertices.train.layers import Conv2D, Dense, Dropout, Flatten, MaxPool2D, ReLU, Sigmoid, Tanh
from mariana.vertices.train.model import Model, build_model, parse_entry

pytestmark = pytest.mark.timeout(120)


def test_expansion_and_named_params_order() -> None:
    m = build_model(["dense:256:relu", "dense:10"], (64,), 10)
    assert isinstance(m, Model)
    assert [type(layer) for layer in m.layers] == [Dense, ReLU, Dense]
    assert m.layer_entries == [0, 0, 1]
    assert m.entries == ["dense:256:relu", "dense:10"]
    names = [n for n, _ in m.named_params()]
    assert names == ["0.W", "0.b", "1.W", "1.b"]
    assert [n for n, _ in m.named_grads()] == names
    shapes = [a.shape for _, a in m.named_params()]
    assert shapes == [(64, 256), (256,), (256, 10), (10,)]
    assert m.num_params == 64 * 256 + 256 + 256 * 10 + 10
    assert all(a.dtype == np.float32 for _, a in m.named_params())


def test_conv_spec_names_shapes_and_autoflatten() -> None:
    spec = ["conv:4:3:1:1:relu", "maxpool:2", "conv:6:2x3:2", "tanh", "dropout:0.25", "dense:16:sigmoid", "dense:5"]
    m = build_model(spec, (2, 8, 8), 5)
    kinds = [type(layer) for layer in m.layers]
    assert kinds == [Conv2D, ReLU, MaxPool2D, Conv2D, Tanh, Dropout, Flatten, Dense, Sigmoid, Dense]
    assert [n for n, _ in m.named_params()] == ["0.W", "0.b", "2.W", "2.b", "5.W", "5.b", "6.W", "6.b"]
    conv2: Any = m.layers[3]
    assert conv2.params["W"].shape == (6, 4, 2, 3) and conv2.stride == (2, 2)
    # 8x8 -pool-> 4x4 -conv 2x3 stride 2-> 2x1
    assert m.layers[7].params["W"].shape == (6 * 2 * 1, 16)


def test_conv_net_forward_backward_shapes() -> None:
    m = build_model(["conv:4:3:1:1:relu", "maxpool:2", "flatten", "dense:10"], (1, 6, 6), 10, seed=3)
    x = np.random.default_rng(0).standard_normal((5, 1, 6, 6))
    logits = m.forward(x)
    assert logits.shape == (5, 10) and logits.dtype == np.float32
    loss = m.loss_and_grad(x, np.arange(5))
    assert isinstance(loss, float) and np.isfinite(loss)
    for (name, p), (gname, g) in zip(m.named_params(), m.named_grads()):
        assert name == gname and p.shape == g.shape and g.any(), name
    assert m.predict(x).shape == (5, 10)


def test_loss_and_grad_matches_finite_differences_float64() -> None:
    m = build_model(["conv:2:2x3:1:1:tanh", "maxpool:2:1", "dense:4:sigmoid", "dense:3"], (1, 4, 4), 3,
                    seed=1, dtype=np.float64)
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((3, 1, 4, 4)), np.array([0, 2, 1])
    m.loss_and_grad(x, y)
    h = 1e-6
    for (name, p), (_, g) in zip(m.named_params(), m.named_grads()):
        analytic = g.copy()
        num = np.zeros_like(p)
        for i in range(p.size):
            old = p.flat[i]
            p.flat[i] = old + h
            fp = m.loss.forward(m.forward(x), y)
            p.flat[i] = old - h
            fm = m.loss.forward(m.forward(x), y)
            p.flat[i] = old
            num.flat[i] = (fp - fm) / (2 * h)
        err = float(np.linalg.norm(analytic - num)) / max(float(np.linalg.norm(analytic) + np.linalg.norm(num)), 1e-300)
        assert err < 1e-6, name


def test_same_seed_bit_identical_and_different_seed_differs() -> None:
    spec = ["conv:3:3:relu", "flatten", "dropout:0.5", "dense:7"]
    a = build_model(spec, (1, 5, 5), 7, seed=4)
    b = build_model(spec, (1, 5, 5), 7, seed=4)
    c = build_model(spec, (1, 5, 5), 7, seed=5)
    for (_, pa), (_, pb), (_, pc) in zip(a.named_params(), b.named_params(), c.named_params()):
        np.testing.assert_array_equal(pa, pb)
    assert not np.array_equal(a.named_params()[0][1], c.named_params()[0][1])
    x = np.random.default_rng(1).standard_normal((4, 1, 5, 5))
    assert a.loss_and_grad(x, np.arange(4)) == b.loss_and_grad(x, np.arange(4))


def test_bind_flat_views() -> None:
    m = build_model(["dense:8:relu", "dense:3"], (5,), 3, seed=2)
    ref = build_model(["dense:8:relu", "dense:3"], (5,), 3, seed=2)
    n = m.num_params
    fp, fg = np.zeros(n, np.float32), np.zeros(n, np.float32)
    m.bind_flat(fp, fg)
    np.testing.assert_array_equal(fp, np.concatenate([p.ravel() for _, p in ref.named_params()]))
    for (_, p), (_, g) in zip(m.named_params(), m.named_grads()):
        assert np.shares_memory(p, fp) and np.shares_memory(g, fg)
    # the flat buffer IS the parameters
    fp[0] = 123.0
    assert m.layers[0].params["W"][0, 0] == 123.0
    fp[0] = ref.layers[0].params["W"][0, 0]
    # loss_and_grad fills the flat grad buffer, equal to an unbound model's grads
    x = np.random.default_rng(3).standard_normal((6, 5))
    labels = np.array([0, 1, 2, 0, 1, 2])
    assert m.loss_and_grad(x, labels) == ref.loss_and_grad(x, labels)
    np.testing.assert_array_equal(fg, np.concatenate([g.ravel() for _, g in ref.named_grads()]))
    assert fg.any()
    # an SGD step on the flat buffer is seen by the next forward
    before = m.predict(x).copy()
    fp -= 0.1 * fg
    assert not np.array_equal(m.predict(x), before)
    with pytest.raises(ValueError, match="length"):
        m.bind_flat(np.zeros(n + 1, np.float32), np.zeros(n + 1, np.float32))
    with pytest.raises(ValueError, match="float32"):
        m.bind_flat(np.zeros(n), np.zeros(n))


def test_training_sanity_mlp_reaches_90_percent() -> None:
    rng = np.random.default_rng(0)
    classes, dim, n = 10, 64, 600
    centers = rng.standard_normal((classes, dim)) * 1.5
    labels = rng.integers(0, classes, n)
    x = (centers[labels] + rng.standard_normal((n, dim))).astype(np.float32)
    m = build_model(["dense:32:relu", "dense:10"], (64,), 10, seed=0)
    fp, fg = np.zeros(m.num_params, np.float32), np.zeros(m.num_params, np.float32)
    m.bind_flat(fp, fg)
    train, test = slice(0, 500), slice(500, n)
    first = None
    for step in range(300):
        idx = rng.integers(0, 500, 32)
        loss = m.loss_and_grad(x[train][idx], labels[train][idx])
        first = loss if first is None else first
        fp -= 0.05 * fg
    acc = float((m.predict(x[test]).argmax(axis=1) == labels[test]).mean())
    assert loss < first
    assert acc > 0.9, acc


def test_float64_model_and_casting() -> None:
    m = build_model(["dense:4"], (3,), 4, dtype=np.float64)
    assert m.layers[0].params["W"].dtype == np.float64
    m32 = build_model(["dense:4"], (3,), 4)
    assert m32.forward(np.ones((2, 3), dtype=np.float64)).dtype == np.float32
    assert m32.forward([[1, 2, 3]]).shape == (1, 4)


# -------------------------------------------------------------------------------------------
# UsageError cases
# -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec,shape,classes,fragments", [
    (["dense:10", "softmax_xent"], (4,), 10, ["entry 1 'softmax_xent'", "appended automatically"]),
    (["dense:8", "dens:10"], (4,), 10, ["entry 1 'dens:10'", "unknown layer type 'dens'", "conv, dense, dropout"]),
    (["dense:abc"], (4,), 10, ["entry 0 'dense:abc'", "unit count 'abc'"]),
    (["dense:0"], (4,), 10, ["entry 0 'dense:0'", "must be >= 1"]),
    (["dense:10:relu:5"], (4,), 10, ["entry 0 'dense:10:relu:5'", "wrong number of fields", "dense:UNITS[:ACT]"]),
    (["dense"], (4,), 10, ["entry 0 'dense'", "wrong number of fields"]),
    (["relu:3", "dense:10"], (4,), 10, ["entry 0 'relu:3'", "wrong number of fields"]),
    (["conv:8"], (1, 4, 4), 10, ["entry 0 'conv:8'", "wrong number of fields"]),
    (["conv:8:3:1:0:2:relu"], (1, 4, 4), 10, ["entry 0", "wrong number of fields"]),
    (["conv:8:3x"], (1, 4, 4), 10, ["entry 0 'conv:8:3x'", "bad kernel"]),
    (["conv:8:3:0"], (1, 4, 4), 10, ["entry 0 'conv:8:3:0'", "bad stride 0"]),
    (["conv:8:3:1:-1"], (1, 4, 4), 10, ["bad padding -1"]),
    (["maxpool:2:2:2"], (1, 4, 4), 10, ["entry 0 'maxpool:2:2:2'", "wrong number of fields"]),
    (["dropout:1.5", "dense:10"], (4,), 10, ["entry 0 'dropout:1.5'", "bad probability"]),
    (["dropout:x", "dense:10"], (4,), 10, ["bad probability 'x'"]),
    (["dense:256:relu", "flatten", "conv:8:3"], (64,), 10,
     ["entry 2 'conv:8:3' needs NCHW input (C, H, W) but gets (256,)"]),
    (["maxpool:2", "dense:10"], (64,), 10, ["entry 0 'maxpool:2' needs NCHW input (C, H, W) but gets (64,)"]),
    (["conv:4:3", "conv:4:7:1:1", "dense:10"], (1, 6, 6), 10,
     ["entry 1 'conv:4:7:1:1'", "kernel 7x7 is larger than the padded input 6x6"]),
    (["maxpool:5", "flatten", "dense:10"], (1, 4, 4), 10, ["entry 0 'maxpool:5'", "larger than the input 4x4"]),
    (["dense:5"], (64,), 10, ["the last layer gives 5 outputs but the data has 10 classes"]),
    (["conv:10:3"], (1, 5, 5), 10, ["shape (10, 3, 3)", "flatten"]),
    ([], (4,), 10, ["empty"]),
    ("dense:10", (4,), 10, ["list of entries"]),
])
def test_usage_errors(spec: Any, shape: tuple[int, ...], classes: int, fragments: list[str]) -> None:
    with pytest.raises(UsageError) as info:
        build_model(spec, shape, classes)
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))


def test_parse_entry_forms() -> None:
    assert parse_entry(0, "dense:12") == ("dense", [12], None)
    assert parse_entry(0, "dense:12:tanh") == ("dense", [12], "tanh")
    assert parse_entry(0, "conv:8:3") == ("conv", [8, (3, 3), (1, 1), (0, 0)], None)
    assert parse_entry(0, "conv:8:3x5:2:1x0:relu") == ("conv", [8, (3, 5), (2, 2), (1, 0)], "relu")
    assert parse_entry(0, "maxpool:3") == ("maxpool", [(3, 3), (3, 3)], None)
    assert parse_entry(0, "maxpool:3:2") == ("maxpool", [(3, 3), (2, 2)], None)
    assert parse_entry(0, "dropout:0.5") == ("dropout", [0.5], None)
    assert parse_entry(0, "flatten") == ("flatten", [], None)


# -------------------------------------------------------------------------------------------
# numpy vs cupy (skipped without a device)
# -------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_model_numpy_matches_cupy() -> None:
    cupy = pytest.importorskip("cupy")
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("cupy imports but no CUDA device is present")
    except Exception as exc:
        pytest.skip(f"cupy imports but no CUDA device is usable: {exc}")
    spec = ["conv:4:3:1:1:relu", "maxpool:2", "dropout:0.2", "dense:16:tanh", "dense:10"]
    cpu = build_model(spec, (2, 8, 8), 10, seed=7)
    gpu = build_model(spec, (2, 8, 8), 10, seed=7).to(cupy)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((6, 2, 8, 8)).astype(np.float32), rng.integers(0, 10, 6)
    n = gpu.num_params
    fp, fg = cupy.zeros(n, dtype=cupy.float32), cupy.zeros(n, dtype=cupy.float32)
    gpu.bind_flat(fp, fg)
    assert abs(cpu.loss_and_grad(x, y) - gpu.loss_and_grad(cupy.asarray(x), cupy.asarray(y))) < 1e-4
    flat_cpu = np.concatenate([g.ravel() for _, g in cpu.named_grads()])
    np.testing.assert_allclose(cupy.asnumpy(fg), flat_cpu, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(cupy.asnumpy(gpu.predict(x)), cpu.predict(x), rtol=1e-4, atol=1e-4)
