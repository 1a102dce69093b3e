"""Model parallelism at the layer level: each partitioned layer against the unsplit layer, the cut
into stages, dropout masks, and joining the partitions' parameters back into the unsplit model."""

from __future__ import annotations

import numpy as np
import pytest

from mariana.vertices.train.layers import Conv2D, Dense, Dropout
from mariana.vertices.train.model import build_model
from mariana.vertices.train.partition import SliceDropout, join_params, plan_partition

pytestmark = pytest.mark.timeout(60)

F64 = np.float64


def _split_matches_whole(whole, x, parts):
    """Forward slices concatenate to the whole output; partial d(input)s sum to the whole one;
    parameter gradients are the whole gradients' slices. Exact up to float64 rounding."""
    y = whole.forward(x)
    rng = np.random.default_rng(1)
    dy = rng.standard_normal(y.shape)
    dx = whole.backward(dy)
    outs, dxs, grads = [], [], {k: [] for k in whole.grads}
    n = y.shape[1] // parts
    for p in range(parts):
        piece = whole.part(p, parts)
        outs.append(piece.forward(x))
        dxs.append(piece.backward(dy[:, p * n:(p + 1) * n]))
        for k, g in piece.grads.items():
            grads[k].append(g.copy())
    np.testing.assert_allclose(np.concatenate(outs, axis=1), y, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(sum(dxs), dx, rtol=1e-10, atol=1e-12)
    for k in whole.grads:
        np.testing.assert_allclose(type(whole).join(k, grads[k]), whole.grads[k], rtol=1e-12, atol=1e-12)
        assert type(whole).join(k, [whole.part(p, parts).params[k] for p in range(parts)]).tobytes() \
            == whole.params[k].tobytes()


@pytest.mark.parametrize("parts", [1, 2, 4])
def test_a_dense_layer_split_by_units_matches_the_unsplit_layer(parts):
    whole = Dense(6, 8, seed=3, dtype=F64)
    _split_matches_whole(whole, np.random.default_rng(0).standard_normal((5, 6)), parts)


@pytest.mark.parametrize("parts", [1, 2, 3])
@pytest.mark.parametrize("stride,pad", [(1, 0), (2, 1)])
def test_a_conv_layer_split_by_output_channels_matches_the_unsplit_layer(parts, stride, pad):
    whole = Conv2D(3, 6, 3, stride=stride, padding=pad, seed=2, dtype=F64)
    _split_matches_whole(whole, np.random.default_rng(0).standard_normal((2, 3, 7, 6)), parts)


def test_a_layer_that_does_not_divide_says_so():
    with pytest.raises(ValueError, match="6 outputs are not divisible into 4 partitions"):
        Dense(3, 6).part(0, 4)


def test_sliced_dropout_uses_the_slice_of_the_whole_mask():
    x = np.ones((4, 6, 2, 2))
    whole = Dropout(0.5, seed=7).forward(x)
    slices = [SliceDropout(Dropout(0.5, seed=7), p, 3).forward(x[:, 2 * p:2 * p + 2]) for p in range(3)]
    assert np.concatenate(slices, axis=1).tobytes() == whole.tobytes()


SPEC = ["conv:4:3:1:1:relu", "maxpool:2", "dropout:0.1", "conv:6:3:1:1", "tanh", "dense:8:relu", "dense:4"]


def test_the_model_is_cut_into_stages_at_every_gathering_parameter_layer():
    model = build_model(SPEC, (2, 8, 8), 4, seed=0)
    plan = plan_partition(model, 1, 2)
    assert [s.gather for s in plan.stages] == [False, True, True, True]
    heads = [type(s.layers[s.head]).__name__ for s in plan.stages]
    assert heads == ["Conv2D", "Conv2D", "Dense", "Dense"]
    assert [s.layers[s.head].input_grad for s in plan.stages] == [False, True, True, True]
    assert any(isinstance(la, SliceDropout) for la in plan.stages[0].layers)  # after the first conv: sliced
    assert [n for n, _ in plan.names] == ["0.W", "0.b", "3.W", "3.b", "5.W", "5.b", "6.W", "6.b"]
    assert plan.num_params * 2 == model.num_params


def test_partitions_join_back_into_the_unsplit_model_with_its_names():
    model = build_model(SPEC, (2, 8, 8), 4, seed=0)
    whole = {n: p.copy() for n, p in model.named_params()}
    plans = [plan_partition(build_model(SPEC, (2, 8, 8), 4, seed=0), p, 2) for p in range(2)]
    flats = [np.concatenate([a.ravel() for la in pl.layers for a in la.params.values()]) for pl in plans]
    joined = join_params(plans, flats)
    assert [n for n, _ in joined] == list(whole)
    for name, arr in joined:
        assert arr.tobytes() == whole[name].tobytes(), name


def test_a_model_without_parameter_layers_cannot_be_planned():
    with pytest.raises(ValueError, match="no dense or conv layer"):
        plan_partition(build_model(["flatten"], (10,), 10), 0, 1)
