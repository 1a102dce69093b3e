"""Fixtures of the fault-injection tier (``-m faults``): a small filesystem that fills up."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path
from typing import Callable, Iterator

import pytest


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Callable[[int], Path]]:
    """``small_disk(kib)``: a fresh tmpfs of that size mounted under ``tmp_path`` (unmounted at
    the end). A real full disk: short writes, then ENOSPC. Skips where mounting is not allowed."""
    mounted: list[Path] = []

    def mount(kib: int) -> Path:
        where = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
        where.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", str(where)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip() or done.returncode}")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)
