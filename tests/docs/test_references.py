"""What the README and the docstrings point to exists (issue 20, item 7): no citation of a design
document outside the repository, every ``mariana.x.y`` named in a docstring resolves, TensorBoard
has an extra, and ``mariana.run(graph, runtime="cluster")`` runs."""

from __future__ import annotations

import importlib
import pkgutil
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import mariana

ROOT = Path(__file__).resolve().parents[2]
DOTTED = re.compile(r"``(mariana(?:\.\w+)+)")


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def test_no_citation_of_a_design_section_outside_the_repository():
    files = [ROOT / "README.md", *ROOT.glob("mariana/**/*.py"), *ROOT.glob("tests/**/*.py")]
    cited = [str(f.relative_to(ROOT)) for f in files if f.name != "test_references.py" and "DESIGN section" in f.read_text()]
    assert not cited, cited
    assert "## 2. The superstep contract" in (ROOT / "docs" / "design.md").read_text()


def test_every_mariana_name_in_a_docstring_exists():
    missing = []
    for info in pkgutil.walk_packages(mariana.__path__, "mariana."):
        if ".cli" in info.name or info.name.endswith("__main__"):
            continue
        source = Path(importlib.import_module(info.name).__file__).read_text()
        missing += [f"{info.name}: {d}" for d in DOTTED.findall(source) if not _resolves(d.rstrip("."))]
    assert not missing, missing


def test_tensorboard_has_an_extra():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(dep.startswith("tensorboard>") for dep in extras["tensorboard"])
    assert "[tensorboard]" in (ROOT / "README.md").read_text()


SCRIPT = '''
import mariana

class MaxValue(mariana.Vertex):
    def compute(self, ctx, messages):
        best = max([self.value, *(m.payload for m in messages)])
        if ctx.superstep == 0 or best > self.value:
            self.value = best
            ctx.send_to_neighbors(best)
        ctx.vote_to_halt()

g = mariana.Graph(name="max-value")
for vid, value in [("a", 3), ("b", 6), ("c", 2)]:
    g.add_vertex(MaxValue(vid, value))
for src, dst in [("a", "b"), ("b", "a"), ("b", "c"), ("c", "b")]:
    g.add_edge(src, dst)
g.add_combiner("max")
local = mariana.run(g, workers=2).values
print(mariana.run(g, workers=2, runtime="cluster").values == local == mariana.run(g, workers=2, runtime="inproc").values
      == {"a": 6, "b": 6, "c": 6})
'''


def test_run_a_graph_object_on_the_cluster_runtime(tmp_path):
    script = tmp_path / "maxvalue.py"
    script.write_text(SCRIPT)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=90)
    assert out.returncode == 0 and out.stdout.strip() == "True", out.stderr


def test_the_dev_extra_is_light_and_ci_installs_the_torch_reference():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert not any(dep.startswith("torch") for dep in extras["dev"])
    assert any(dep.startswith("torch==") for dep in extras["torch-ref"])
    assert "pip install -e '.[torch-ref]'" in (ROOT / ".ci" / "run").read_text()
