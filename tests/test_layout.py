"""The package's layering (docs/design-notes.md, "Layers"), read from the code's own imports.

Every import counts, the lazy ones inside functions too: a lazy import is still a dependency,
only a later one. The rules are checked per subpackage; cycles are checked per module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)

PACKAGE = Path(__file__).resolve().parent.parent / "mariana"

#: subpackage -> the subpackages it may import (besides itself, ``errors``, ``memory`` and the
#: package face's ``__version__``). Anything not listed here may import anything below ``cli``.
#: The partitioner loads graphs (``partitioner/graphload.py``): it reads the formats of
#: ``storage`` and receives routed edge tables as ``messages``; it sees the engine only through
#: a protocol (``partitioner/phase.py``), since the engine imports it.
ALLOWED = {
    "messages": set(),
    "partitioner": {"storage", "messages"},
    "storage": set(),
    "comm": {"messages"},
    "engine": {"messages", "storage", "partitioner"},
    "cluster": {"engine", "comm", "messages", "storage", "partitioner"},
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """The ``mariana`` modules ``path`` imports, anywhere in the file, as absolute names."""
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "mariana")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "mariana":
                continue
            if target == "mariana" and all(a.name == "__version__" for a in node.names):
                continue  # a constant the face defines before any import: no edge to what the face imports
            for alias in node.names:  # `from . import codec` names a module, not the package
                if (PACKAGE.parent / Path(*f"{target}.{alias.name}".split("."))).with_suffix(".py").exists():
                    found.add(f"{target}.{alias.name}")
                else:
                    found.add(target)
    return found


MODULES = {module_name(p): imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


@pytest.mark.parametrize("sub", sorted(ALLOWED))
def test_each_layer_imports_only_the_layers_below_it(sub):
    # itself, the exception hierarchy, the process heap's controls (import nothing), the package face
    free = {sub, "errors", "memory", ""}
    bad = sorted(f"{m} imports {t}" for m, targets in MODULES.items() if layer(m) == sub
                 for t in targets if layer(t) not in free | ALLOWED[sub])
    assert not bad, "\n".join(bad)


def test_nothing_below_the_command_line_imports_it():
    bad = sorted(f"{m} imports {t}" for m, targets in MODULES.items()
                 if layer(m) not in ("cli", "__main__") for t in targets if layer(t) == "cli")
    assert not bad, "\n".join(bad)


def test_only_comm_imports_zmq_and_only_storage_imports_fsspec():
    for lib, home in (("zmq", "comm"), ("fsspec", "storage")):
        users = sorted(module_name(p) for p in PACKAGE.rglob("*.py")
                       if any(isinstance(n, (ast.Import, ast.ImportFrom)) and lib in
                              ([a.name.split(".")[0] for a in n.names] if isinstance(n, ast.Import)
                               else [(n.module or "").split(".")[0]])
                              for n in ast.walk(ast.parse(p.read_text()))))
        assert all(layer(u) == home for u in users), f"{lib} imported outside {home}/: {users}"


def test_no_import_cycle_between_modules():
    graph = {m: {t for t in ts if t in MODULES and t != m} for m, ts in MODULES.items()}
    # the package faces (__init__.py that only hand names on) are not edges of a cycle of their own:
    # `from .. import __version__` reads mariana/__init__.py, which imports engine, never back up
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


GRAPH = PACKAGE / "vertices" / "graph"


def test_each_graph_algorithm_is_one_module_ending_with_its_algorithm_and_one_registry_line():
    from mariana.jobs.registry import BUILTIN_JOBS, get_job
    from mariana.vertices.graph.algorithm import Algorithm

    graph_jobs = {name: target for name, target in BUILTIN_JOBS.items() if target.startswith("mariana.vertices.graph.")}
    assert sorted(graph_jobs) == ["bfs", "cdlp", "lcc", "pagerank", "sssp", "wcc"]
    for name, target in graph_jobs.items():
        module, _, attr = target.partition(":")
        assert module == f"mariana.vertices.graph.{name}" and attr == "ALGORITHM", target
        algorithm = getattr(__import__(module, fromlist=[attr]), attr)
        assert isinstance(algorithm, Algorithm) and algorithm.name == name
        assert get_job(name).name == name  # the framework's job around it
    # jobs/ defines no graph algorithm: no job module per algorithm, no block program
    assert not [p.name for p in (PACKAGE / "jobs").glob("*.py") if p.stem in graph_jobs]
    assert not [m for m in MODULES if layer(m) == "jobs" and "mariana.vertices.graph.block" in MODULES[m]]


def test_only_the_graph_job_branches_on_mode():
    """``config["mode"]`` is read by ``jobs/graphjob.py`` alone: the algorithms do not know it."""
    readers = []
    for path in [*GRAPH.glob("*.py"), *(PACKAGE / "jobs").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            key = node.slice if isinstance(node, ast.Subscript) else (
                node.args[0] if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get" and node.args else None)
            if isinstance(key, ast.Constant) and key.value == "mode":
                readers.append(path.name)
    assert sorted(set(readers)) == ["graphjob.py"], readers


def test_graph_input_is_read_by_the_loader_and_the_formats_only():
    """Splits and Parquet are read in ``storage/`` (the formats) and by the loader
    (``partitioner/graphload.py``); the framework's job only lists the input's files."""
    readers = sorted(m for m, targets in MODULES.items() if layer(m) != "storage"
                     and targets & {"mariana.storage.splits", "mariana.storage.parquet"})
    assert readers == ["mariana.jobs.graphjob", "mariana.partitioner.graphload"], readers
    # the algorithms do not read or write files: no storage module but the id codec and formats' constants
    for m, targets in MODULES.items():
        if m.startswith("mariana.vertices.graph."):
            io = targets & {"mariana.storage.rundir", "mariana.storage.splits", "mariana.storage.parts",
                            "mariana.storage.graphoutput", "mariana.storage"}
            assert not io, f"{m} imports {sorted(io)}"
