"""docs/block-centric.md: its code runs, as tests/docs/test_docs_code.py runs the other pages'
(python blocks in one namespace, bash blocks with `bash -e`, in a fresh directory), and the
module it shows block by block is examples/kcore.py exactly."""

from __future__ import annotations


import pytest

from test_docs_code import DOCS, ROOT, blocks, run_page

pytestmark = pytest.mark.timeout(120)

PAGE = "block-centric.md"


def test_the_page_shows_examples_kcore_as_it_is():
    """The python blocks before "Running it" joined are the module after its docstring."""
    shown = (DOCS / PAGE).read_text().split("\n## Running it\n")[0]
    parts = [code for lang, code in blocks(PAGE) if lang == "python" and code in shown]
    source = (ROOT / "examples" / "kcore.py").read_text()
    body = source[source.index('"""', 3) + 3:].lstrip("\n")
    assert "\n\n".join(parts) == body


def test_the_code_on_the_page_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace, ran = run_page(PAGE, tmp_path, timeout=100)
    assert ran.count("python") == 6 and ran.count("bash") == 1
    cores = dict(line.split("\t") for line in (tmp_path / "cores.tsv").read_text().splitlines())
    assert {v: int(c) for v, c in cores.items()} == namespace["want"]


def test_the_page_is_in_the_nav():
    assert f": {PAGE}" in (ROOT / "mkdocs.yml").read_text()
