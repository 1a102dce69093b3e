"""Shared fixtures of the vertex kernels' tests."""

from __future__ import annotations

import pytest

from mariana.vertices import block_kernels as bk


@pytest.fixture(params=["scipy", "numpy"])
def form(request, monkeypatch):
    """Each kernel in its scipy form and its numpy form (``MARIANA_NO_SCIPY=1``)."""
    if request.param == "numpy":
        monkeypatch.setenv("MARIANA_NO_SCIPY", "1")
    else:
        monkeypatch.delenv("MARIANA_NO_SCIPY", raising=False)
        if not bk.have_scipy():
            pytest.skip("scipy is not installed")
    return request.param
