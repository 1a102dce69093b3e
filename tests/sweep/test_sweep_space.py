"""Search spaces: the --param syntax, the [sweep.params] table, checks against the job's keys, draws."""

from __future__ import annotations

import math

import pytest

from mariana.errors import UsageError
from mariana.jobs.registry import get_job
from mariana.sweep import Space, parse_param, parse_space


@pytest.fixture(scope="module")
def dnn():
    return get_job("dnn-dp")


def test_every_kind_parses():
    assert parse_param("lr=loguniform(1e-3, 1e-1)").args == (1e-3, 1e-1)
    assert parse_param("momentum=uniform(0.5,0.99)").kind == "uniform"
    assert parse_param("batch_size=int(16, 128)").args == (16, 128)
    assert parse_param("batch_size=choice(32,64,128)").args == (32, 64, 128)
    assert parse_param("optimizer=grid(sgd, momentum, 'adagrad')").args == ("sgd", "momentum", "adagrad")
    model = parse_param('model=choice(["dense:64"], ["dense:128", "dense:64"])')
    assert model.args == (["dense:64"], ["dense:128", "dense:64"])


@pytest.mark.parametrize("item, words", [
    ("lr", r"expected KEY=DIST\(ARGS\)"),
    ("lr=normal(0,1)", "unknown distribution 'normal'"),
    ("lr=uniform(1)", "two arguments"),
    ("lr=loguniform(0, 1)", "positive bounds"),
    ("lr=uniform(0.5, 0.1)", "must be below"),
    ("lr=uniform(a, b)", "expects numbers"),
    ("batch_size=int(1.5, 4)", "integer bounds"),
    ("batch_size=choice()", "at least one value"),
    ("model=choice([dense)", "cannot read"),
])
def test_malformed_distribution_is_one_line(item, words):
    with pytest.raises(UsageError, match=words) as info:
        parse_param(item)
    assert "\n" not in str(info.value)


def test_keys_and_values_are_checked_against_the_job(dnn):
    with pytest.raises(UsageError, match=r"unknown config key 'lrr'.*did you mean 'lr'"):
        Space(dnn, [parse_param("lrr=uniform(0.1, 0.2)")])
    with pytest.raises(UsageError, match="must be one of"):
        Space(dnn, [parse_param("optimizer=choice(sgd, adamw2)")])
    with pytest.raises(UsageError, match="draws floats but config key 'batch_size' is int"):
        Space(dnn, [parse_param("batch_size=uniform(16, 64)")])
    with pytest.raises(UsageError, match="expects int"):
        Space(dnn, [parse_param("batch_size=choice(32, big)")])
    with pytest.raises(UsageError, match="search space is empty"):
        Space(dnn, [])


def test_toml_table_and_params_override():
    dists = parse_space(["lr=uniform(0.1, 0.2)"], {"lr": "loguniform(1e-3, 1e-1)", "batch_size": [32, 64]}, "c.toml")
    by_key = {d.key: d for d in dists}
    assert by_key["lr"].kind == "uniform" and by_key["batch_size"].kind == "choice"
    with pytest.raises(UsageError, match=r"c.toml: \[sweep.params\] lr"):
        parse_space([], {"lr": 0.1}, "c.toml")


def test_draws_are_seeded_and_in_range(dnn):
    space = Space(dnn, parse_space(["lr=loguniform(1e-3, 1e-1)", "batch_size=int(16, 20)",
                                    "optimizer=choice(sgd, momentum)"]))
    a, b, c = space.trials(50, 7), space.trials(50, 7), space.trials(50, 8)
    assert a == b and a != c
    assert all(1e-3 <= t["lr"] <= 1e-1 and 16 <= t["batch_size"] <= 20 for t in a)
    assert {t["batch_size"] for t in a} == {16, 17, 18, 19, 20}  # both ends included
    assert {t["optimizer"] for t in a} == {"sgd", "momentum"}
    logs = sorted(math.log10(t["lr"]) for t in a)
    assert logs[0] < -2.5 and logs[-1] > -1.5  # spread over the decades, not crowded at the top


def test_grid_points_are_crossed_and_repeated(dnn):
    space = Space(dnn, parse_space(["optimizer=grid(sgd, momentum)", "batch_size=grid(32, 64, 128)",
                                    "lr=uniform(0.01, 0.1)"]))
    trials = space.trials(2, 0)
    assert len(trials) == space.size(2) == 12
    points = [(t["optimizer"], t["batch_size"]) for t in trials]
    assert points[:6] == points[6:] and len(set(points)) == 6
    assert len({t["lr"] for t in trials}) == 12
