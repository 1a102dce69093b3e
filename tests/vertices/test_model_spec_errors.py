"""A malformed layer entry's error names the field at fault (issue 52, item 7): an unknown
activation with the known ones, the missing field, the extra ones, an activation where none goes."""

from __future__ import annotations

import pytest

from mariana.errors import UsageError
from mariana.vertices.train.model import build_model, parse_entry

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize("entry,needles", [
    ("dense:64:rleu", ["unknown activation 'rleu'", "did you mean 'relu'?", "activations: relu, tanh, sigmoid"]),
    ("conv:8:3:1:1:sigmod", ["unknown activation 'sigmod'", "did you mean 'sigmoid'?", "relu, tanh, sigmoid"]),
    ("conv:8:3:rleu", ["unknown activation 'rleu'", "conv:OUT:KERNEL"]),
    ("dense:64:swish", ["unknown activation 'swish'", "activations: relu, tanh, sigmoid"]),
    ("dense", ["UNITS is missing", "dense:UNITS[:ACT]"]),
    ("conv:8", ["KERNEL is missing", "conv:OUT:KERNEL"]),
    ("conv", ["OUT and KERNEL are missing"]),
    ("flatten:3", ["'3' is one field too many for flatten"]),
    ("dense:10:relu:5", ["'relu:5' are 2 fields too many for dense"]),
    ("dense:64:relu:relu", ["'relu' is one field too many for dense"]),
    ("maxpool:2:relu", ["maxpool takes no activation", "put 'relu' in an entry of its own"]),
    ("dense:64:", ["an empty field"]),
    ("rleu", ["unknown layer type 'rleu'", "did you mean 'relu'?"]),
    ("dense:x", ["bad unit count 'x'"]),
    ("conv:8:3:0", ["bad stride 0"]),
])
def test_a_bad_entry_names_its_field(entry, needles):
    with pytest.raises(UsageError) as info:
        parse_entry(2, entry)
    text = str(info.value)
    assert text.startswith(f"config key 'model': entry 2 {entry!r} "), text
    assert "\n" not in text
    for needle in needles:
        assert needle in text, (needle, text)


def test_good_entries_still_parse():
    assert parse_entry(0, "dense:64:RELU") == ("dense", [64], "relu")
    assert parse_entry(0, "conv:8:3x5:2:1x0:tanh") == ("conv", [8, (3, 5), (2, 2), (1, 0)], "tanh")
    assert build_model(["dense:8:sigmoid", "dense:3"], (4,), 3).num_params == 4 * 8 + 8 + 8 * 3 + 3
