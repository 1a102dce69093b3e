"""The unsplit layers and a whole model against PyTorch autograd (float64, CPU).

The partitioned layers are checked against these layers (test_partition.py), so this is the
chain from PyTorch to every framework's math. Skipped where torch is not installed (it comes
with the torch-ref extra, which .ci/run installs: torch==2.13.0, CPU build)."""

from __future__ import annotations

import numpy as np
import pytest

from mariana.vertices.train.layers import Conv2D, Dense, MaxPool2D, ReLU, Sigmoid, SoftmaxCrossEntropy, Tanh
from mariana.vertices.train.model import build_model

torch = pytest.importorskip("torch", reason="the PyTorch reference needs the torch-ref extra: pip install -e '.[torch-ref]'")
F = torch.nn.functional

pytestmark = pytest.mark.timeout(60)
F64 = np.float64
TOL = dict(rtol=1e-10, atol=1e-12)


def _t(a):
    return torch.tensor(np.asarray(a, dtype=F64), requires_grad=True)


def _check(layer, x, torch_fn, params=()):
    """forward(x), backward(dy) of ``layer`` against ``torch_fn(x, *params)`` with autograd."""
    y = layer.forward(x)
    dy = np.random.default_rng(1).standard_normal(y.shape)
    dx = layer.backward(dy)
    tx = _t(x)
    tp = [_t(layer.params[k]) for k in params]
    ty = torch_fn(tx, *tp)
    ty.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, ty.detach().numpy(), **TOL)
    np.testing.assert_allclose(dx, tx.grad.numpy(), **TOL)
    for k, t in zip(params, tp):
        np.testing.assert_allclose(layer.grads[k], t.grad.numpy(), **TOL)


def test_dense_matches_torch():
    layer = Dense(7, 5, seed=1, dtype=F64)
    _check(layer, np.random.default_rng(0).standard_normal((4, 7)), lambda x, W, b: x @ W + b, ("W", "b"))


@pytest.mark.parametrize("stride,pad", [(1, 0), (1, 1), (2, 1), ((2, 1), (0, 2))])
def test_conv_matches_torch(stride, pad):
    layer = Conv2D(3, 4, (3, 2), stride=stride, padding=pad, seed=2, dtype=F64)
    x = np.random.default_rng(0).standard_normal((2, 3, 7, 6))
    _check(layer, x, lambda x, W, b: F.conv2d(x, W, b, stride=layer.stride, padding=layer.padding), ("W", "b"))


@pytest.mark.parametrize("k,s", [(2, 2), (3, 1), ((2, 3), (1, 2))])
def test_maxpool_matches_torch(k, s):
    layer = MaxPool2D(k, stride=s)
    x = np.random.default_rng(0).standard_normal((2, 3, 7, 8))  # distinct values: no ties
    _check(layer, x, lambda x: F.max_pool2d(x, layer.kernel_size, layer.stride))


@pytest.mark.parametrize("make,fn", [(ReLU, torch.relu), (Tanh, torch.tanh), (Sigmoid, torch.sigmoid)])
def test_activations_match_torch(make, fn):
    _check(make(), np.random.default_rng(0).standard_normal((3, 5)) + 0.01, fn)


def test_softmax_cross_entropy_matches_torch():
    logits = np.random.default_rng(0).standard_normal((6, 4)) * 5
    labels = np.array([0, 3, 1, 1, 2, 3])
    loss = SoftmaxCrossEntropy()
    value = loss.forward(logits, labels)
    d = loss.backward()
    t = _t(logits)
    tl = F.cross_entropy(t, torch.tensor(labels))
    tl.backward()
    assert value == pytest.approx(tl.item(), rel=1e-12)
    np.testing.assert_allclose(d, t.grad.numpy(), **TOL)


def test_a_whole_cnn_matches_torch_autograd():
    spec = ["conv:4:3:1:1:relu", "maxpool:2", "conv:6:3:tanh", "dense:8:sigmoid", "dense:3"]
    model = build_model(spec, (2, 8, 8), 3, seed=5, dtype=F64)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((5, 2, 8, 8)), np.array([0, 2, 1, 1, 0])
    loss = model.loss_and_grad(x, y)
    p = {n: _t(a) for n, a in model.named_params()}
    h = F.max_pool2d(torch.relu(F.conv2d(torch.tensor(x), p["0.W"], p["0.b"], padding=1)), 2)
    h = torch.tanh(F.conv2d(h, p["2.W"], p["2.b"]))
    h = torch.sigmoid(h.reshape(5, -1) @ p["3.W"] + p["3.b"])
    tl = F.cross_entropy(h @ p["4.W"] + p["4.b"], torch.tensor(y))
    tl.backward()
    assert loss == pytest.approx(tl.item(), rel=1e-12)
    for name, g in model.named_grads():
        np.testing.assert_allclose(g, p[name].grad.numpy(), err_msg=name, **TOL)
