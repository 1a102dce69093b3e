"""Fixtures of the report tests (tests/report/): real runs, made once per session, and a real
headless Chromium. A plugin of tests/conftest.py, so that tests/ keeps one conftest module."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

import pytest

from mariana.cli import main

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def run_cli(*argv: str) -> int:
    return main(list(argv))


@pytest.fixture(scope="session")
def dnn_run(tmp_path_factory) -> Path:
    """A finished dnn-dp run on the local runtime: 2 epochs, checkpoints every 20 supersteps."""
    run = tmp_path_factory.mktemp("report") / "dnn"
    assert run_cli("run", "dnn-dp", "--run-dir", str(run), "--set", "epochs=2", "--set", "checkpoint_every=20") == 0
    return run


@pytest.fixture(scope="session")
def cluster_run(tmp_path_factory) -> Path:
    """A finished dnn-dp run on two worker processes (traces from two workers, stragglers)."""
    run = tmp_path_factory.mktemp("report") / "cluster"
    assert run_cli("run", "dnn-dp", "--workers", "2", "--run-dir", str(run), "--set", "epochs=1",
                   "--set", "replicas=2") == 0
    return run


def _chromium() -> str | None:
    found = os.environ.get("MARIANA_CHROMIUM")
    if found:
        return found
    for c in CHROMIUM_CANDIDATES:
        if os.path.exists(c):
            return c
    return shutil.which("chromium")


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """Headless Chromium (Debian's package) driven by playwright; skipped, saying why, without either."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install -e '.[dev]')")
    exe = _chromium()
    if exe is None:
        pytest.skip("no Chromium: apt-get install -y chromium (.ci/run does it as root)")
    profile = tempfile.mkdtemp(prefix="mariana-chromium-")
    with sync_playwright() as p:
        try:
            ctx = p.chromium.launch_persistent_context(profile, executable_path=exe, headless=True, args=CHROMIUM_ARGS,
                                                       viewport={"width": 1300, "height": 900})
        except Exception as exc:  # a Chromium that cannot start here (no sandbox support, missing libraries)
            shutil.rmtree(profile, ignore_errors=True)
            pytest.skip(f"Chromium at {exe} does not start: {str(exc).splitlines()[0]}")
        try:
            yield ctx
        finally:
            ctx.close()
            shutil.rmtree(profile, ignore_errors=True)

