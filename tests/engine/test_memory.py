"""The process's allocator settings: numpy's huge-page advice goes off only where the kernel's THP
defrag policy would compact memory on every fault of an advised array, and never against a
user's explicit ``NUMPY_MADVISE_HUGEPAGE``."""

from __future__ import annotations

import pytest
from numpy._core.multiarray import _set_madvise_hugepage  # type: ignore[attr-defined]

from mariana.engine import memory


@pytest.fixture
def advice():
    """numpy's advice switch, on for the test and restored after it."""
    def now() -> bool:
        value = _set_madvise_hugepage(True)  # the one way to read it: set it, then set it back
        _set_madvise_hugepage(value)
        return value

    before = _set_madvise_hugepage(True)
    yield now
    _set_madvise_hugepage(before)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("policy,off", [("always defer defer+madvise [madvise] never", True),
                                        ("always defer [defer+madvise] madvise never", True),
                                        ("[always] defer defer+madvise madvise never", False),
                                        ("always defer defer+madvise madvise [never]", False)])
def test_the_advice_goes_off_only_under_a_stalling_defrag_policy(tmp_path, monkeypatch, advice, policy, off):
    monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE", raising=False)
    (tmp_path / "defrag").write_text(policy + "\n")
    monkeypatch.setattr(memory, "_THP_DEFRAG", tmp_path / "defrag")
    assert memory.avoid_hugepage_stalls() is off
    assert advice() is not off


@pytest.mark.timeout(10)
def test_an_explicit_numpy_setting_and_a_missing_policy_file_leave_the_advice_alone(tmp_path, monkeypatch, advice):
    (tmp_path / "defrag").write_text("always defer defer+madvise [madvise] never\n")
    monkeypatch.setattr(memory, "_THP_DEFRAG", tmp_path / "defrag")
    monkeypatch.setenv("NUMPY_MADVISE_HUGEPAGE", "1")
    assert memory.avoid_hugepage_stalls() is False
    monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE")
    monkeypatch.setattr(memory, "_THP_DEFRAG", tmp_path / "absent")
    assert memory.avoid_hugepage_stalls() is False
    assert advice() is True
