"""The ``mariana`` command as a user runs it: a real ``python -m mariana`` subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

Mariana = Callable[..., subprocess.CompletedProcess]


@pytest.fixture
def mariana(tmp_path: Path) -> Mariana:
    """``mariana(*args)``: run ``python -m mariana ARGS`` in ``tmp_path`` (stdin closed, output
    captured as text, at most 100 s) and return the completed process."""

    def run(*args: str, timeout: float = 100.0) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "mariana", *args], cwd=tmp_path, env=dict(os.environ),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)

    return run

