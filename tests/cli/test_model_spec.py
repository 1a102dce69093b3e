"""``mariana run dnn-dp --set model=[...]`` with a misspelt activation: one line naming it (issue 52, item 7)."""

from __future__ import annotations

import pytest
from cli_helpers import one_error_line

pytestmark = pytest.mark.timeout(120)


def test_a_misspelt_activation_is_named_with_the_valid_ones(mariana, tmp_path):
    proc = mariana("run", "dnn-dp", "--set", 'model=["dense:64:rleu", "dense:10"]', "--set", "epochs=1",
                   "--run-dir", str(tmp_path / "run"))
    one_error_line(proc, "entry 0 'dense:64:rleu'", "unknown activation 'rleu'", "did you mean 'relu'?",
                   "relu, tanh, sigmoid")
    assert not (tmp_path / "run").exists()  # refused before the run directory is made
