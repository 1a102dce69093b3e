"""Layer gradients against central finite differences (float64), naive references, the in-place
gradient contract, and numpy-vs-cupy agreement (``gpu``, skipped without a device)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

from mariana.vertices.train.layers import (
    Conv2D, Dense, Dropout, Flatten, Layer, MaxPool2D, ReLU, Sigmoid, SoftmaxCrossEntropy, Tanh,
    array_module_of,
)

pytestmark = pytest.mark.timeout(120)

F64 = np.float64


# -------------------------------------------------------------------------------------------
# helpers
# -------------------------------------------------------------------------------------------
def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    """||a - b|| / max(||a|| + ||b||, tiny)."""
    return float(np.linalg.norm(a - b)) / max(float(np.linalg.norm(a) + np.linalg.norm(b)), 1e-300)


def numeric_grad(f: Callable[[], float], arr: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """Central differences of scalar ``f()`` with respect to ``arr``, perturbed in place."""
    g = np.zeros_like(arr)
    flat, gflat = arr.reshape(-1), g.reshape(-1)
    assert np.shares_memory(flat, arr)
    for i in range(flat.size):
        old = flat[i]
        flat[i] = old + h
        fp = f()
        flat[i] = old - h
        fm = f()
        flat[i] = old
        gflat[i] = (fp - fm) / (2 * h)
    return g


def check_layer(make: Callable[[], Layer], x: np.ndarray, seed: int = 0, tol: float = 1e-6) -> Any:
    """Check dx and every parameter gradient of ``L = sum(forward(x) * R)``.

    ``make`` builds a fresh layer; one instance is used throughout (layers with host RNG state
    are checked separately)."""
    layer = make()
    y = layer.forward(x)
    r = np.random.default_rng(seed).standard_normal(y.shape)
    dx = layer.backward(r)
    analytic = {k: g.copy() for k, g in layer.grads.items()}

    def loss() -> float:
        return float(np.sum(layer.forward(x) * r))

    assert dx.shape == x.shape
    assert rel_err(dx, numeric_grad(loss, x)) < tol
    assert set(layer.grads) == set(layer.params)
    for k, p in layer.params.items():
        assert layer.grads[k].shape == p.shape
        assert rel_err(analytic[k], numeric_grad(loss, p)) < tol, k
    return layer


def away_from_zero(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Random values with |v| in [0.1, 1.1], so ReLU kinks are never crossed by the FD step."""
    rng = np.random.default_rng(seed)
    return rng.choice([-1.0, 1.0], size=shape) * (0.1 + rng.random(shape))


def distinct(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Values at least 0.01 apart (no ties, no near ties for the FD step)."""
    rng = np.random.default_rng(seed)
    return rng.permutation(np.prod(shape)).reshape(shape).astype(F64) * 0.01 - 0.3


def naive_conv(x: np.ndarray, W: np.ndarray, b: np.ndarray, stride: tuple[int, int], pad: tuple[int, int]) -> np.ndarray:
    n, c, h, w = x.shape
    o, _, kh, kw = W.shape
    xp_ = np.zeros((n, c, h + 2 * pad[0], w + 2 * pad[1]))
    xp_[:, :, pad[0]:pad[0] + h, pad[1]:pad[1] + w] = x
    oh = (h + 2 * pad[0] - kh) // stride[0] + 1
    ow = (w + 2 * pad[1] - kw) // stride[1] + 1
    y = np.zeros((n, o, oh, ow))
    for ni in range(n):
        for oi in range(o):
            for i in range(oh):
                for j in range(ow):
                    win = xp_[ni, :, i * stride[0]:i * stride[0] + kh, j * stride[1]:j * stride[1] + kw]
                    y[ni, oi, i, j] = np.sum(win * W[oi]) + b[oi]
    return y


def naive_pool(x: np.ndarray, k: tuple[int, int], s: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Max pooling and its gradient for dy = 1 (first max in row-major order gets it)."""
    n, c, h, w = x.shape
    oh, ow = (h - k[0]) // s[0] + 1, (w - k[1]) // s[1] + 1
    y = np.zeros((n, c, oh, ow))
    dx = np.zeros_like(x)
    for ni in range(n):
        for ci in range(c):
            for i in range(oh):
                for j in range(ow):
                    win = x[ni, ci, i * s[0]:i * s[0] + k[0], j * s[1]:j * s[1] + k[1]]
                    y[ni, ci, i, j] = win.max()
                    a, bb = np.unravel_index(int(np.argmax(win)), win.shape)
                    dx[ni, ci, i * s[0] + a, j * s[1] + bb] += 1.0
    return y, dx


# -------------------------------------------------------------------------------------------
# finite differences
# -------------------------------------------------------------------------------------------
def test_array_module_of_numpy() -> None:
    assert array_module_of(np.zeros(2)) is np
    assert array_module_of([1, 2]) is np


def test_dense_gradients() -> None:
    x = np.random.default_rng(1).standard_normal((4, 5))
    layer = check_layer(lambda: Dense(5, 3, seed=2, dtype=F64), x)
    assert layer.params["W"].shape == (5, 3) and layer.params["b"].shape == (3,)
    np.testing.assert_allclose(layer.forward(x), x @ layer.params["W"] + layer.params["b"])


@pytest.mark.parametrize("act", [ReLU, Sigmoid, Tanh])
def test_activation_gradients(act: type[Layer]) -> None:
    layer = check_layer(act, away_from_zero((3, 7), seed=3))
    assert layer.params == {} and layer.grads == {}


def test_activation_values() -> None:
    x = np.array([[-800.0, -1.0, 0.0, 2.0, 800.0]])
    np.testing.assert_allclose(ReLU().forward(x), [[0, 0, 0, 2, 800]])
    s = Sigmoid().forward(x)
    assert np.all(np.isfinite(s))
    np.testing.assert_allclose(s, 1 / (1 + np.exp(-np.clip(x, -700, 700))), rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(Tanh().forward(x), np.tanh(x))


def test_flatten_gradients() -> None:
    x = np.random.default_rng(4).standard_normal((2, 3, 2, 2))
    layer = check_layer(Flatten, x)
    assert layer.forward(x).shape == (2, 12)
    assert layer.output_shape((3, 2, 2)) == (12,)


def test_dropout_gradient_with_fixed_mask() -> None:
    x = np.random.default_rng(5).standard_normal((6, 8))
    r = np.random.default_rng(6).standard_normal((6, 8))
    layer = Dropout(0.4, seed=9)
    y = layer.forward(x)
    dx = layer.backward(r)
    # a fresh layer with the same seed draws the same mask for every FD evaluation
    num = numeric_grad(lambda: float(np.sum(Dropout(0.4, seed=9).forward(x) * r)), x)
    assert rel_err(dx, num) < 1e-6
    kept = y != 0
    assert 0 < kept.sum() < kept.size
    np.testing.assert_allclose(y[kept], x[kept] / 0.6)


def test_dropout_modes_and_rng() -> None:
    x = np.ones((50, 40))
    layer = Dropout(0.5, seed=1)
    assert layer.forward(x, train=False) is x
    assert layer.backward(x) is x
    a, b = layer.forward(x), layer.forward(x)
    assert not np.array_equal(a, b), "the mask must advance per call"
    np.testing.assert_array_equal(Dropout(0.5, seed=1).forward(x), a)
    assert abs((a != 0).mean() - 0.5) < 0.05
    assert abs(a.mean() - 1.0) < 0.1
    assert Dropout(0.5, seed=1).forward(x).dtype == x.dtype
    with pytest.raises(ValueError):
        Dropout(1.0)


CONV_CASES = [
    # (in, out, kernel, stride, padding, input HxW)
    (2, 3, 3, 1, 0, (5, 6)),
    (2, 3, 3, 2, 1, (5, 6)),
    (1, 2, (2, 3), 1, 1, (4, 5)),
    (3, 2, (3, 2), (2, 1), (0, 1), (6, 5)),
    (2, 2, (1, 3), 2, 0, (5, 7)),
]


@pytest.mark.parametrize("cin,cout,k,s,p,hw", CONV_CASES)
def test_conv_gradients_and_reference(cin: int, cout: int, k: Any, s: Any, p: Any, hw: tuple[int, int]) -> None:
    x = np.random.default_rng(7).standard_normal((2, cin, *hw))
    layer = check_layer(lambda: Conv2D(cin, cout, k, stride=s, padding=p, seed=3, dtype=F64), x)
    layer.params["b"][...] = np.arange(cout) * 0.5
    y = layer.forward(x)
    ref = naive_conv(x, layer.params["W"], layer.params["b"], layer.stride, layer.padding)
    np.testing.assert_allclose(y, ref, rtol=1e-12, atol=1e-12)
    assert y.shape[1:] == layer.output_shape(x.shape[1:])


def test_conv_init_and_shapes() -> None:
    layer = Conv2D(4, 8, 3, seed=0)
    assert layer.params["W"].shape == (8, 4, 3, 3) and layer.params["W"].dtype == np.float32
    assert layer.params["b"].shape == (8,) and not layer.params["b"].any()
    std = float(Conv2D(16, 64, 3, seed=0).params["W"].std())
    assert abs(std - np.sqrt(2 / (16 * 9))) < 0.01
    np.testing.assert_array_equal(Conv2D(4, 8, 3, seed=5).params["W"], Conv2D(4, 8, 3, seed=5).params["W"])
    with pytest.raises(ValueError, match="NCHW"):
        layer.output_shape((36,))
    with pytest.raises(ValueError, match="larger than the padded input"):
        layer.output_shape((4, 2, 2))


POOL_CASES = [((2, 2), None, (6, 6)), ((3, 3), (2, 2), (7, 6)), ((2, 3), (1, 2), (5, 7)), ((3, 3), 1, (4, 4))]


@pytest.mark.parametrize("k,s,hw", POOL_CASES)
def test_maxpool_gradients_and_reference(k: Any, s: Any, hw: tuple[int, int]) -> None:
    x = distinct((2, 3, *hw), seed=8)
    layer = check_layer(lambda: MaxPool2D(k, stride=s), x)
    y = layer.forward(x)
    ref_y, ref_dx = naive_pool(x, layer.kernel_size, layer.stride)
    np.testing.assert_array_equal(y, ref_y)
    np.testing.assert_array_equal(layer.backward(np.ones_like(y)), ref_dx)


def test_maxpool_ties_go_to_first_max() -> None:
    x = np.zeros((1, 1, 4, 4))
    x[0, 0, 0, :] = [5, 5, 1, 1]          # window (0,0): tie in the first row
    x[0, 0, 1, :] = [5, 0, 2, 2]          # window (0,1): 1 1 / 2 2 -> the first 2
    x[0, 0, 2:, :2] = 7.0                 # window (1,0): all equal
    x[0, 0, 2, 2:] = [0, 3]
    x[0, 0, 3, 2:] = [3, 3]               # window (1,1): tie between (2,3), (3,2), (3,3)
    layer = MaxPool2D(2)
    y = layer.forward(x)
    np.testing.assert_array_equal(y[0, 0], [[5, 2], [7, 3]])
    dx = layer.backward(np.array([[[[1.0, 2.0], [3.0, 4.0]]]]))[0, 0]
    expected = np.zeros((4, 4))
    expected[0, 0], expected[1, 2], expected[2, 0], expected[2, 3] = 1.0, 2.0, 3.0, 4.0
    np.testing.assert_array_equal(dx, expected)
    # overlapping windows that share a tied maximum each send their gradient to their own first max
    x2 = np.full((1, 1, 3, 3), 1.0)
    y2 = MaxPool2D(2, stride=1)
    y2.forward(x2)
    dx2 = y2.backward(np.ones((1, 1, 2, 2)))[0, 0]
    np.testing.assert_array_equal(dx2, [[1, 1, 0], [1, 1, 0], [0, 0, 0]])
    np.testing.assert_array_equal(dx2, naive_pool(x2, (2, 2), (1, 1))[1][0, 0])


def test_softmax_xent_gradient() -> None:
    rng = np.random.default_rng(10)
    logits = rng.standard_normal((5, 4)) * 2
    labels = np.array([0, 3, 1, 1, 2])
    loss = SoftmaxCrossEntropy()
    value = loss.forward(logits, labels)
    assert isinstance(value, float)
    p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    assert abs(value - float(-np.log(p[np.arange(5), labels]).mean())) < 1e-12
    analytic = loss.backward()
    num = numeric_grad(lambda: SoftmaxCrossEntropy().forward(logits, labels), logits)
    assert rel_err(analytic, num) < 1e-6
    assert loss.params == {} and loss.grads == {}


def test_softmax_xent_large_logits_stay_finite() -> None:
    loss = SoftmaxCrossEntropy()
    logits = np.array([[1e4, 0.0, -1e4], [1e30, 1e30, 0.0], [-5e5, 0.0, 5e5]])
    value = loss.forward(logits, np.array([0, 1, 0]))
    g = loss.backward()
    assert np.isfinite(value) and np.all(np.isfinite(g))
    # row 0: loss 0; row 1: log 2; row 2: 1e6
    assert abs(value - (0 + np.log(2) + 1e6) / 3) < 1e-6
    np.testing.assert_allclose(g[1], [0.5 / 3, -0.5 / 3, 0.0], atol=1e-15)
    f32 = loss.forward(np.array([[1e30, -1e30], [80.0, 0.0]], dtype=np.float32), np.array([1, 1]))
    assert np.isfinite(f32) and np.all(np.isfinite(loss.backward()))


# -------------------------------------------------------------------------------------------
# the in-place contract the engine relies on
# -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("make,x_shape", [
    (lambda: Dense(4, 3, seed=0, dtype=F64), (5, 4)),
    (lambda: Conv2D(2, 3, (2, 3), stride=2, padding=1, seed=0, dtype=F64), (2, 2, 5, 5)),
])
def test_grads_written_into_rebound_views(make: Callable[[], Layer], x_shape: tuple[int, ...]) -> None:
    x = np.random.default_rng(11).standard_normal(x_shape)
    ref = make()
    dy = np.random.default_rng(12).standard_normal(ref.forward(x).shape)
    ref.backward(dy)

    layer = make()
    sizes = {k: p.size for k, p in layer.params.items()}
    total = sum(sizes.values())
    pbuf, gbuf = np.zeros(total + 10), np.full(total + 10, -7.0)
    offset = 5
    for k, p in layer.params.items():
        pv = pbuf[offset:offset + p.size].reshape(p.shape)
        pv[...] = p
        layer.params[k] = pv
        layer.grads[k] = gbuf[offset:offset + p.size].reshape(p.shape)
        offset += p.size
    layer.forward(x)
    layer.backward(dy)
    offset = 5
    for k in layer.params:
        np.testing.assert_allclose(gbuf[offset:offset + sizes[k]], ref.grads[k].ravel(), rtol=1e-12)
        assert np.shares_memory(layer.grads[k], gbuf)
        offset += sizes[k]
    assert np.all(gbuf[:5] == -7.0) and np.all(gbuf[-5:] == -7.0)
    # params are read at call time: editing the buffer changes the output
    pbuf[5:5 + total] = 0.0
    assert not layer.forward(x).any()


def test_to_numpy_keeps_arrays() -> None:
    layer = Dense(3, 2)
    assert layer.to(np) is layer
    assert isinstance(layer.params["W"], np.ndarray) and layer.params["W"].dtype == np.float32


# -------------------------------------------------------------------------------------------
# numpy vs cupy (skipped without a device)
# -------------------------------------------------------------------------------------------
def _cupy() -> Any:
    cupy = pytest.importorskip("cupy")
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no driver / no device
        pytest.skip(f"cupy imports but no CUDA device is usable: {exc}")
    if count < 1:
        pytest.skip("cupy imports but no CUDA device is present")
    return cupy


GPU_CASES = [
    ("dense", lambda: Dense(12, 7, seed=1), (8, 12)),
    ("relu", ReLU, (8, 12)),
    ("sigmoid", Sigmoid, (8, 12)),
    ("tanh", Tanh, (8, 12)),
    ("dropout", lambda: Dropout(0.3, seed=2), (8, 12)),
    ("flatten", Flatten, (4, 3, 5, 5)),
    ("conv", lambda: Conv2D(3, 4, 3, stride=1, padding=1, seed=3), (4, 3, 9, 8)),
    ("conv_s2", lambda: Conv2D(3, 4, (2, 3), stride=2, padding=(1, 0), seed=4), (4, 3, 9, 8)),
    ("maxpool", lambda: MaxPool2D(2), (4, 3, 8, 8)),
    ("maxpool_overlap", lambda: MaxPool2D(3, stride=2), (4, 3, 9, 8)),
]


@pytest.mark.gpu
@pytest.mark.parametrize("name,make,x_shape", GPU_CASES, ids=[c[0] for c in GPU_CASES])
def test_layer_numpy_matches_cupy(name: str, make: Callable[[], Layer], x_shape: tuple[int, ...]) -> None:
    cupy = _cupy()
    rng = np.random.default_rng(13)
    x = rng.standard_normal(x_shape).astype(np.float32)
    cpu, gpu = make(), make().to(cupy)
    assert array_module_of(cupy.zeros(1)) is cupy
    y = cpu.forward(x)
    yg = gpu.forward(cupy.asarray(x))
    assert array_module_of(yg) is cupy
    np.testing.assert_allclose(cupy.asnumpy(yg), y, rtol=1e-4, atol=1e-4)
    dy = rng.standard_normal(y.shape).astype(np.float32)
    dx = cpu.backward(dy)
    dxg = gpu.backward(cupy.asarray(dy))
    np.testing.assert_allclose(cupy.asnumpy(dxg), dx, rtol=1e-4, atol=1e-4)
    for k in cpu.grads:
        np.testing.assert_allclose(cupy.asnumpy(gpu.grads[k]), cpu.grads[k], rtol=1e-4, atol=1e-4)
    back = gpu.to(np)
    assert all(isinstance(v, np.ndarray) for v in back.params.values())


@pytest.mark.gpu
def test_softmax_xent_numpy_matches_cupy() -> None:
    cupy = _cupy()
    rng = np.random.default_rng(14)
    logits = (rng.standard_normal((16, 10)) * 3).astype(np.float32)
    labels = rng.integers(0, 10, 16)
    cpu, gpu = SoftmaxCrossEntropy(), SoftmaxCrossEntropy()
    assert abs(cpu.forward(logits, labels) - gpu.forward(cupy.asarray(logits), cupy.asarray(labels))) < 1e-4
    np.testing.assert_allclose(cupy.asnumpy(gpu.backward()), cpu.backward(), rtol=1e-4, atol=1e-4)
