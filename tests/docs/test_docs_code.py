"""The code in the user guide runs (docs/*.md), so the guide cannot rot.

Every page's ```python blocks run in order in one namespace, in a fresh working directory;
its ```bash blocks run in order with `bash -e` in that directory (each line a command a user
would type). Blocks meant to be read, not run (commands for other hosts, a cluster manager) are
fenced as ```sh or ```text. The site itself builds with `mkdocs build --strict` (.ci/run; here
too where mkdocs is installed). The quick pages run in the fast tier, the others in the slow tier (`pytest -m slow tests/docs`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```", re.S | re.M)
#: Pages whose code runs (each a "how do I ..." answer); design notes and the trace format hold none.
PAGES = ["index.md", "getting-started.md", "vertex-api.md", "writing-a-job.md", "training-job.md",
         "exported-parameters.md", "across-hosts.md", "traces-and-debugging.md", "checkpoints.md"]


def blocks(page: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in FENCE.finditer((DOCS / page).read_text())]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.setdefault("MARIANA_DOCS_TEST", "1")
    return env


def test_every_page_of_the_guide_is_tested_and_in_the_nav():
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = sorted(p.name for p in DOCS.glob("*.md"))
    assert all(p in nav for p in pages), [p for p in pages if p not in nav]
    assert all(any(lang in ("python", "bash") for lang, _ in blocks(p)) for p in PAGES)


#: Pages that train models and start clusters (10-30 s each on 2 cores) run in the slow tier.
QUICK = ("index.md", "vertex-api.md", "writing-a-job.md")


def run_page(page: str, tmp_path: Path, timeout: float = 240) -> tuple[dict[str, object], list[str]]:
    """Run ``page``'s code in ``tmp_path`` (the caller's cwd and sys.path put it first): python
    blocks in one namespace, bash blocks with ``bash -euo pipefail``. The namespace and the
    languages of the blocks run, in order."""
    namespace: dict[str, object] = {"__name__": f"docs_{page[:-3].replace('-', '_')}"}
    ran = []
    for i, (lang, code) in enumerate(blocks(page)):
        if lang == "python":
            exec(compile(code, f"{page} python block {i}", "exec"), namespace)  # noqa: S102 - the docs' own code
        elif lang == "bash":
            out = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=tmp_path, env=_env(),
                                 capture_output=True, text=True, timeout=timeout)
            assert out.returncode == 0, f"{page} bash block {i} failed:\n{code}\n{out.stdout}\n{out.stderr}"
        ran.append(lang)
    return namespace, ran


@pytest.mark.parametrize("page", [p if p in QUICK else pytest.param(p, marks=pytest.mark.slow) for p in PAGES])
def test_the_code_on_the_page_runs(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    run_page(page, tmp_path)


@pytest.mark.slow
def test_the_site_builds_with_warnings_as_errors(tmp_path):
    if shutil.which("mkdocs", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("mkdocs is not installed: pip install -e '.[docs]'")
    out = subprocess.run([str(Path(sys.executable).parent / "mkdocs"), "build", "--strict", "--site-dir",
                          str(tmp_path / "site")], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "site" / "api" / "index.html").exists()
