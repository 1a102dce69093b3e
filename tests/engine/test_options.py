"""RunOptions: the one record of run options; job config keys taken once, '0 means none' there."""

from __future__ import annotations

import pytest

from mariana import UsageError
from mariana.engine import RunOptions

pytestmark = pytest.mark.timeout(30)


def test_config_keys_are_taken_and_checkpoint_every_0_means_none():
    o = RunOptions.from_config({"checkpoint_every": 0, "keep_checkpoints": 5, "checkpoint_background": False,
                                "lr": 0.1}, workers=2)
    assert o.checkpoint_every is None and o.keep_checkpoints == 5 and o.checkpoint_background is False
    assert RunOptions.from_config({"checkpoint_every": 10}).checkpoint_every == 10
    assert RunOptions(checkpoint_every=0).checkpoint_every is None


def test_keywords_override_the_config_and_unknown_ones_are_refused():
    assert RunOptions.from_config({"keep_checkpoints": 5}, keep_checkpoints=2).keep_checkpoints == 2
    with pytest.raises(TypeError, match="worker_timout"):
        RunOptions.from_config({}, worker_timout=3)


def test_the_runtime_follows_the_worker_count_unless_asked():
    assert RunOptions(workers=1).runtime_name == "local"
    assert RunOptions(workers=3).runtime_name == "cluster"
    assert RunOptions(workers=1, runtime="cluster").runtime_name == "cluster"


@pytest.mark.parametrize("kw,needle", [({"workers": 0}, "workers must be >= 1"),
                                       ({"max_supersteps": -1}, "max_supersteps must be >= 0"),
                                       ({"runtime": "gpu"}, "unknown runtime 'gpu'")])
def test_bad_options_are_usage_errors(kw, needle):
    with pytest.raises(UsageError, match=needle):
        RunOptions(**kw)
