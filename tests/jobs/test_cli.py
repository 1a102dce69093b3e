"""The ``mariana`` command: bad input, ``jobs``, ``--json``, ``--explain-placement``, the run
directory, ``--set``/``--config`` parsing and a vertex program that raises.

Most checks call ``main(argv)`` in-process; a handful run ``python -m mariana`` for the real
exit code and stderr.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
import zlib
from collections import Counter
from pathlib import Path

import fsspec
import pytest

import mariana
from mariana.jobs import BUILTIN_JOBS, get_job, resolve_config
from mariana.cli import main
from mariana.jobs.registry import parse_set
from mariana.partitioner.fragment import LOAD_STEPS

pytestmark = pytest.mark.timeout(120)

GRAPH = "# a small graph\n\n1 2 0.5\n2 3\n3 1 2\n10 9\n9 10 1.5\nv17 v2   # trailing comment\n"
GRAPH_IDS = sorted({"1", "2", "3", "10", "9", "v17", "v2"})


def memory_run_dir() -> str:
    return f"memory://mariana-test-cli/{uuid.uuid4().hex}"


@pytest.fixture
def graph(tmp_path: Path) -> Path:
    p = tmp_path / "g.e"
    p.write_text(GRAPH)
    return p


@pytest.fixture(autouse=True)
def _cwd_in_tmp(tmp_path: Path, monkeypatch) -> None:
    """Each test runs in its own directory: a run that fails after its run directory was made
    (an input error found while loading) leaves its default ``runs/JOB-...`` there, not in the
    checkout."""
    monkeypatch.chdir(tmp_path)


def run_main(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        rc = main(list(argv))
    except Exception as exc:  # noqa: BLE001 - main() must turn every failure into an exit code
        cap = capsys.readouterr()
        pytest.fail(f"main({list(argv)!r}) raised {type(exc).__name__}: {exc} (a traceback, not a clean exit); "
                    f"stderr: {cap.err!r}")
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def assert_usage_error(rc: int, out: str, err: str, *needles: str) -> str:
    """Exit 2, exactly one line on stderr starting 'mariana: error:', no traceback."""
    assert rc == 2, (rc, out, err)
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {err!r}"
    assert lines[0].startswith("mariana: error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    assert out == ""
    return lines[0]


def run_subprocess(args: list[str], cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run([sys.executable, "-m", "mariana", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=100)


# ----------------------------------------------------------------------------------------------
# bad input: one line, exit 2, no traceback
# ----------------------------------------------------------------------------------------------
def test_unknown_job_lists_the_jobs(capsys):
    rc, out, err = run_main(capsys, "run", "pagerenk")
    line = assert_usage_error(rc, out, err, "pagerenk", "did you mean 'pagerank'")
    for name in BUILTIN_JOBS:
        assert name in line
    rc, out, err = run_main(capsys, "run", "frobnicate")
    line = assert_usage_error(rc, out, err, "unknown job 'frobnicate'")
    assert all(name in line for name in ("pagerank", "sssp", "wcc"))


def test_job_module_that_does_not_import_or_is_not_a_job(capsys):
    rc, out, err = run_main(capsys, "run", "no_such_module_mariana_xyz:JOB")
    assert_usage_error(rc, out, err, "no_such_module_mariana_xyz")
    rc, out, err = run_main(capsys, "run", "mariana.jobs.graphjob:collect")
    assert_usage_error(rc, out, err, "not a mariana Job")
    rc, out, err = run_main(capsys, "run", "mariana.vertices.graph.pagerank:NOPE")
    assert_usage_error(rc, out, err, "NOPE")


@pytest.mark.parametrize("job,key,valid", [
    ("pagerank", "iteration", ["graph", "output", "mode", "top", "damping", "iterations", "tol"]),
    ("pagerank", "dampign", ["damping", "iterations", "tol"]),
    ("sssp", "sorce", ["graph", "output", "mode", "top", "source"]),
    ("wcc", "colour", ["graph", "output", "mode", "top"]),
])
def test_unknown_or_misspelt_config_key(capsys, graph, job, key, valid):
    rc, out, err = run_main(capsys, "run", job, "--set", f"graph={graph}", "--set", f"{key}=5")
    line = assert_usage_error(rc, out, err, f"'{key}'")
    for k in valid:
        assert k in line
    if key != "colour":
        assert "did you mean" in line


def test_misspelt_key_in_config_file_names_the_file(capsys, tmp_path, graph):
    cfg = tmp_path / "job.toml"
    cfg.write_text(f'graph = "{graph}"\niteratons = 3\n')
    rc, out, err = run_main(capsys, "run", "pagerank", "--config", str(cfg))
    assert_usage_error(rc, out, err, str(cfg), "'iteratons'", "iterations")


@pytest.mark.parametrize("job,item,needles", [
    ("pagerank", "iterations=abc", ["iterations", "int", "abc"]),
    ("pagerank", "iterations=2.5", ["iterations", "int"]),
    ("pagerank", "iterations=true", ["iterations", "int"]),
    ("pagerank", "damping=high", ["damping", "float", "high"]),
    ("pagerank", "damping=false", ["damping", "float"]),
    ("pagerank", "tol=[1]", ["tol", "float"]),
    ("wcc", "top=ten", ["top", "int", "ten"]),
    ("wcc", "mode=fast", ["mode", "block", "vertex", "fast"]),
    ("sssp", "mode=VERTEX", ["mode", "block", "vertex"]),
])
def test_value_of_the_wrong_type_or_choice(capsys, graph, job, item, needles):
    extra = ["--set", "source=1"] if job == "sssp" else []
    rc, out, err = run_main(capsys, "run", job, "--set", f"graph={graph}", *extra, "--set", item)
    assert_usage_error(rc, out, err, *needles)


@pytest.mark.parametrize("item,key", [
    ("damping=1.5", "damping"), ("damping=-0.1", "damping"), ("iterations=-1", "iterations"), ("tol=-1e-3", "tol"),
])
def test_value_out_of_range(capsys, graph, item, key):
    rc, out, err = run_main(capsys, "run", "pagerank", "--set", f"graph={graph}", "--set", item)
    assert_usage_error(rc, out, err, key)


def test_set_without_equals(capsys, graph):
    rc, out, err = run_main(capsys, "run", "pagerank", "--set", "iterations")
    assert_usage_error(rc, out, err, "KEY=VALUE")
    rc, out, err = run_main(capsys, "run", "pagerank", "--set", "=3")
    assert_usage_error(rc, out, err, "KEY=VALUE")


@pytest.mark.parametrize("job", ["pagerank", "sssp", "wcc"])
def test_missing_graph_file(capsys, tmp_path, job):
    missing = tmp_path / "does-not-exist.e"
    extra = ["--set", "source=1"] if job == "sssp" else []
    rc, out, err = run_main(capsys, "run", job, "--set", f"graph={missing}", *extra, "--run-dir", memory_run_dir())
    assert_usage_error(rc, out, err, str(missing))


def test_missing_graph_at_a_memory_url(capsys):
    url = f"memory://mariana-test-cli-missing/{uuid.uuid4().hex}/g.e"
    rc, out, err = run_main(capsys, "run", "wcc", "--set", f"graph={url}")
    assert_usage_error(rc, out, err, url)


def test_unreadable_graph(capsys, tmp_path):
    rc, out, err = run_main(capsys, "run", "wcc", "--set", f"graph={tmp_path}")  # a directory
    assert_usage_error(rc, out, err, str(tmp_path))
    binary = tmp_path / "binary.e"
    binary.write_bytes(b"\xff\xfe\x00a b\n")
    rc, out, err = run_main(capsys, "run", "wcc", "--set", f"graph={binary}")
    assert_usage_error(rc, out, err, str(binary))
    rc, out, err = run_main(capsys, "run", "wcc", "--set", "graph=nosuchproto-xyz://g.e")
    assert_usage_error(rc, out, err, "nosuchproto-xyz")


@pytest.mark.parametrize("job", ["pagerank", "sssp", "wcc"])
@pytest.mark.parametrize("bad_line,what", [
    ("lonely", "one field"),
    ("a b c d", "4 fields"),
    ("a b heavy", "heavy"),
    ("a b nan", "finite"),
])
def test_malformed_edge_line_names_file_and_line(capsys, tmp_path, job, bad_line, what):
    p = tmp_path / "bad.e"
    p.write_text(f"# comment\n1 2\n\n2 3 0.5\n{bad_line}\n3 1\n")
    extra = ["--set", "source=1"] if job == "sssp" else []
    rc, out, err = run_main(capsys, "run", job, "--set", f"graph={p}", *extra)
    assert_usage_error(rc, out, err, f"{p}:5", what)


def test_negative_weight_for_sssp_names_file_and_line(capsys, tmp_path):
    p = tmp_path / "neg.e"
    p.write_text("# weights\n1 2 0.5\n\n2 3 0   # zero is fine\n3 4 -2.5\n4 1 -1\n")
    rc, out, err = run_main(capsys, "run", "sssp", "--set", f"graph={p}", "--set", "source=1")
    assert_usage_error(rc, out, err, f"{p}:5", "negative")
    # pagerank and wcc ignore weights: the same file is fine for them
    for job in ("pagerank", "wcc"):
        rc, out, err = run_main(capsys, "run", job, "--set", f"graph={p}", "--run-dir", memory_run_dir())
        assert rc == 0, err


def test_source_vertex_that_does_not_exist(capsys, graph):
    rc, out, err = run_main(capsys, "run", "sssp", "--set", f"graph={graph}", "--set", "source=42")
    assert_usage_error(rc, out, err, "'42'")
    rc, out, err = run_main(capsys, "run", "sssp", "--set", f"graph={graph}", "--set", "source=V17")
    assert_usage_error(rc, out, err, "'V17'")  # ids are case-sensitive strings


def test_sssp_with_a_graph_needs_a_source(capsys, graph):
    rc, out, err = run_main(capsys, "run", "sssp", "--set", f"graph={graph}")
    assert_usage_error(rc, out, err, "source")


@pytest.mark.parametrize("args,needle", [
    (["--workers", "0"], "workers"),
    (["--workers", "-3"], "workers"),
    (["--workers", "many"], "workers"),
    (["--placement", "random"], "placement"),
    (["--max-supersteps", "-1"], "max-supersteps"),
])
def test_invalid_options(capsys, graph, args, needle):
    rc, out, err = run_main(capsys, "run", "wcc", "--set", f"graph={graph}", *args)
    assert_usage_error(rc, out, err, needle)


def test_missing_command_or_job(capsys):
    rc, out, err = run_main(capsys)
    assert_usage_error(rc, out, err)
    rc, out, err = run_main(capsys, "run")
    assert_usage_error(rc, out, err, "job")
    rc, out, err = run_main(capsys, "fly")
    assert_usage_error(rc, out, err, "fly")


def test_bad_config_files(capsys, tmp_path):
    missing = tmp_path / "nope.toml"
    rc, out, err = run_main(capsys, "run", "wcc", "--config", str(missing))
    assert_usage_error(rc, out, err, str(missing))
    bad = tmp_path / "bad.toml"
    bad.write_text("graph = \n[[[")
    rc, out, err = run_main(capsys, "run", "wcc", "--config", str(bad))
    assert_usage_error(rc, out, err, str(bad), "TOML")
    typed = tmp_path / "typed.toml"
    typed.write_text("[pagerank]\niterations = \"many\"\n")
    rc, out, err = run_main(capsys, "run", "pagerank", "--config", str(typed))
    assert_usage_error(rc, out, err, str(typed), "iterations")


def test_output_that_cannot_be_written(capsys, tmp_path, graph):
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # a file where the output's directory would be
    for mode in ("block", "vertex"):
        rc, out, err = run_main(capsys, "run", "wcc", "--set", f"graph={graph}", "--set", f"output={blocker}/out.tsv",
                                "--set", f"mode={mode}", "--run-dir", memory_run_dir())
        assert_usage_error(rc, out, err, "output")
        assert not [p for p in tmp_path.iterdir() if p.name.startswith("a-file")][1:]  # nothing left behind


@pytest.mark.parametrize("job", ["pagerank", "sssp", "wcc"])
def test_graph_without_edges_is_the_same_in_both_modes_and_never_a_traceback(capsys, tmp_path, job):
    """An edge list with only comments: exit 0 with an empty output or one usage line, never a
    crash, and block mode must agree with vertex mode (networkx: pagerank of an empty graph is {})."""
    p = tmp_path / "empty.e"
    p.write_text("# no edges at all\n\n")
    results = {}
    for mode in ("vertex", "block"):
        out_file = tmp_path / f"out-{mode}.tsv"
        extra = ["--set", "source=a"] if job == "sssp" else []
        rc, out, err = run_main(capsys, "run", job, "--set", f"graph={p}", "--set", f"mode={mode}",
                                "--set", f"output={out_file}", "--run-dir", memory_run_dir(), *extra)
        assert "Traceback" not in err, f"mode={mode}: {err}"
        assert rc in (0, 2), f"mode={mode}: exit {rc}: {err}"
        if rc == 2:
            assert_usage_error(rc, out, err)
        else:
            assert out_file.read_text() == ""
        results[mode] = rc
    assert results["block"] == results["vertex"], results


@pytest.mark.parametrize("job", ["pagerank", "sssp", "wcc"])
def test_max_supersteps_zero_is_not_a_crash(capsys, graph, job):
    """``--max-supersteps 0`` is accepted (only < 0 is refused); both modes must finish cleanly,
    and agree once block mode has loaded its graph (its first LOAD_STEPS supersteps)."""
    outputs = {}
    for mode, steps in (("vertex", 0), ("block", 0), ("block", LOAD_STEPS)):
        out_file = graph.parent / f"out-{job}-{mode}-{steps}.tsv"
        extra = ["--set", "source=1"] if job == "sssp" else []
        rc, out, err = run_main(capsys, "run", job, "--set", f"graph={graph}", "--set", f"mode={mode}",
                                "--set", f"output={out_file}", "--max-supersteps", str(steps),
                                "--run-dir", memory_run_dir(), *extra)
        assert "Traceback" not in err, f"mode={mode}: {err}"
        assert rc == 0, f"mode={mode}: exit {rc}: {err}"
        text = out_file.read_text()
        assert [line.split("\t")[0] for line in text.splitlines()] == (GRAPH_IDS if steps or mode == "vertex" else [])
        outputs[mode, steps] = text
    assert outputs["block", LOAD_STEPS] == outputs["vertex", 0]


@pytest.mark.parametrize("args,needle", [
    (["run", "pagerank", "--set", "iteration=3"], "iteration"),
    (["run", "wcc", "--set", "graph=/definitely/not/here.e"], "/definitely/not/here.e"),
    (["run", "sssp", "--set", "source=nowhere"], "nowhere"),
    (["run", "pagerank", "--set", "iterations=abc"], "iterations"),
    (["run", "wcc", "--workers", "0"], "workers"),
    (["run", "bogus"], "pagerank"),
])
def test_bad_input_end_to_end(tmp_path, args, needle):
    proc = run_subprocess(args, tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mariana: error: ") and needle in lines[0], proc.stderr
    assert proc.stdout == ""
    runs = list((tmp_path / "runs").glob("*/job.json")) if (tmp_path / "runs").exists() else []
    if args[1] == "sssp":  # the source is looked up while loading (no process reads the whole graph first)
        assert [json.loads(r.read_text())["status"] for r in runs] == ["failed"]
    else:
        assert not (tmp_path / "runs").exists()


def test_malformed_line_end_to_end(tmp_path):
    p = tmp_path / "bad.e"
    p.write_text("1 2\n2 3 x\n")
    proc = run_subprocess(["run", "pagerank", "--set", f"graph={p}"], tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [f"mariana: error: {p}:2: weight 'x' is not a number"]


# ----------------------------------------------------------------------------------------------
# mariana jobs
# ----------------------------------------------------------------------------------------------
def test_jobs_lists_every_job_with_its_keys(capsys):
    rc, out, err = run_main(capsys, "jobs")
    assert rc == 0, err
    sections: dict[str, list[str]] = {}
    current = None
    for line in out.splitlines():
        if not line.startswith(" "):
            current = line.split(":", 1)[0]
            sections[current] = []
        else:
            sections[current].append(line.strip())
    assert list(sections) == list(BUILTIN_JOBS)
    for name in BUILTIN_JOBS:
        job = get_job(name)
        listed = [line.split(" = ", 1)[0] for line in sections[name]]
        assert listed == [k.name for k in job.keys], name
        for line, key in zip(sections[name], job.keys):
            assert f"[{key.type}]" in line and json.dumps(key.default) in line


def test_jobs_json(capsys):
    rc, out, err = run_main(capsys, "jobs", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert [j["name"] for j in doc] == list(BUILTIN_JOBS)
    for j in doc:
        job = get_job(j["name"])
        assert j["description"] == job.description
        assert [k["name"] for k in j["keys"]] == [k.name for k in job.keys]
        for k, key in zip(j["keys"], job.keys):
            assert k["type"] == key.type and k["default"] == key.default
    pr = {k["name"]: k for k in next(j for j in doc if j["name"] == "pagerank")["keys"]}
    assert pr["damping"]["default"] == 0.85 and pr["iterations"]["default"] == 100
    assert pr["mode"]["choices"] == ["block", "vertex"]


def test_jobs_end_to_end(tmp_path):
    proc = run_subprocess(["jobs", "--json"], tmp_path)
    assert proc.returncode == 0
    assert {j["name"] for j in json.loads(proc.stdout)} >= {"pagerank", "sssp", "wcc", "dnn-dp"}


# ----------------------------------------------------------------------------------------------
# --json and --explain-placement
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("job,extra,field", [
    ("pagerank", ["--set", "iterations=3", "--set", "tol=0"], "updates"),
    ("sssp", ["--set", "source=1"], "reachable"),
    ("wcc", [], "components"),
])
def test_run_json_output_parses(capsys, graph, job, extra, field):
    run_dir = memory_run_dir()
    rc, out, err = run_main(capsys, "run", job, "--set", f"graph={graph}", *extra, "--json", "--run-dir", run_dir,
                            "--workers", "2", "--runtime", "local")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["job"] == job
    assert doc["run_dir"] == run_dir
    assert doc["supersteps"] >= 1 and isinstance(doc["halt_reason"], str) and doc["wall_s"] >= 0
    assert doc["vertices"] == len(GRAPH_IDS)
    assert field in doc
    if job == "pagerank":
        assert doc["updates"] == 3
    elif job == "sssp":
        assert doc["reachable"] == 3  # 1 -> 2 -> 3 -> 1
    else:
        assert doc["components"] == 3


@pytest.mark.parametrize("placement", ["hash", "range"])
@pytest.mark.parametrize("workers", [1, 3, 4])
def test_explain_placement_prints_the_table_and_does_not_run(capsys, tmp_path, graph, placement, workers):
    ids = GRAPH_IDS
    if placement == "range":
        want = Counter(i * workers // len(ids) for i in range(len(ids)))
    else:
        want = Counter(zlib.crc32(v.encode()) % workers for v in ids)
    want_counts = [want.get(w, 0) for w in range(workers)]
    per_mode = {}
    for mode in ("vertex", "block"):
        run_dir = tmp_path / f"rd-{mode}"
        out_file = tmp_path / f"out-{mode}.tsv"
        rc, out, err = run_main(capsys, "run", "wcc", "--set", f"graph={graph}", "--set", f"mode={mode}",
                                "--set", f"output={out_file}", "--workers", str(workers), "--placement", placement,
                                "--explain-placement", "--run-dir", str(run_dir))
        assert rc == 0, err
        assert not run_dir.exists(), "--explain-placement must not run the job"
        assert not out_file.exists()
        lines = out.strip().splitlines()
        assert lines[0].startswith("placement:") and f"{workers} worker(s)" in lines[0]
        header = lines[1].split()
        assert header[:3] == ["worker", "vertices", "items"]
        rows = [line.split() for line in lines[2:]]
        assert [int(r[0]) for r in rows] == list(range(workers))
        per_mode[mode] = rows
    # vertex mode: one engine vertex per graph vertex
    assert [int(r[1]) for r in per_mode["vertex"]] == want_counts
    # block mode: one block per worker; its graph vertices are known only once the workers loaded
    # their splits (nothing reads the graph before the job runs)
    assert [int(r[1]) for r in per_mode["block"]] == [1] * workers


# ----------------------------------------------------------------------------------------------
# the run directory
# ----------------------------------------------------------------------------------------------
def check_metrics(lines: list[dict], supersteps: int) -> None:
    assert len(lines) == supersteps
    assert [m["superstep"] for m in lines] == list(range(supersteps))
    for m in lines:
        for key in ("superstep", "active", "messages", "wall_s"):
            assert key in m, key
        assert isinstance(m["active"], int) and isinstance(m["messages"], int) and m["wall_s"] >= 0


@pytest.mark.parametrize("mode", ["block", "vertex"])
def test_run_dir_local_path(capsys, tmp_path, graph, mode):
    run_dir = tmp_path / "runs" / "one"
    rc, out, err = run_main(capsys, "run", "pagerank", "--set", f"graph={graph}", "--set", "iterations=4",
                            "--set", "tol=0", "--set", f"mode={mode}", "--workers", "3", "--placement", "range",
                            "--runtime", "local", "--run-dir", str(run_dir))
    assert rc == 0, err
    info = json.loads((run_dir / "job.json").read_text())
    cfg = resolve_config(get_job("pagerank"), None, [f"graph={graph}", "iterations=4", "tol=0", f"mode={mode}"])
    assert info["config"] == cfg
    assert info["status"] == "finished"
    loading = LOAD_STEPS if mode == "block" else 0  # block mode loads its graph in supersteps first
    assert info["supersteps"] == 5 + loading
    assert info["workers"] == 3
    assert info["placement"]["num_workers"] == 3
    if mode == "vertex":  # block mode: the master never reads the graph, so it cannot count it
        assert sum(info["placement"]["items_per_worker"]) == len(GRAPH_IDS)
    assert info["versions"]["mariana"] == mariana.__version__
    assert info["versions"]["python"].count(".") == 2 and "numpy" in info["versions"]
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    check_metrics(lines, 5 + loading)


@pytest.mark.parametrize("mode", ["block", "vertex"])
@pytest.mark.parametrize("placement", ["hash", "range"])
def test_job_json_records_the_chosen_placement_strategy(capsys, tmp_path, graph, mode, placement):
    """``--placement range`` must be recorded as such: block mode may not reduce it to 'explicit'."""
    run_dir = tmp_path / "rd"
    rc, out, err = run_main(capsys, "run", "wcc", "--set", f"graph={graph}", "--set", f"mode={mode}",
                            "--workers", "2", "--placement", placement, "--runtime", "local",
                            "--run-dir", str(run_dir))
    assert rc == 0, err
    info = json.loads((run_dir / "job.json").read_text())
    assert info["placement"]["strategy"] == placement, info["placement"]


@pytest.mark.parametrize("second", [["wcc"], ["pagerank"], ["wcc", "--set", "mode=vertex"]])
def test_a_run_dir_that_holds_a_run_is_refused_unless_resumed(capsys, tmp_path, graph, second):
    """Issue 52: a fresh run on a --run-dir that holds another run (the same job too) would mix
    the two runs' records; it is refused with one line saying what to do, and writes nothing."""
    run_dir = tmp_path / "rd"
    rc, out, err = run_main(capsys, "run", "wcc", "--set", f"graph={graph}", "--run-dir", str(run_dir))
    assert rc == 0, err
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    rc, out, err = run_main(capsys, "run", *second, "--set", f"graph={graph}", "--run-dir", str(run_dir))
    assert_usage_error(rc, out, err, f"{run_dir} holds another run (job wcc, finished, started ", "--resume")
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before


def test_a_run_dir_that_holds_a_run_is_refused_through_run_job(tmp_path, graph):
    from mariana.errors import UsageError
    from mariana.jobs.launch import run_job

    url = str(tmp_path / "rd")
    run_job("wcc", sets=[f"graph={graph}"], run_dir=url)
    with pytest.raises(UsageError, match="holds another run"):
        run_job("wcc", sets=[f"graph={graph}"], run_dir=url)


def test_run_dir_memory_url(capsys, graph):
    url = memory_run_dir()
    rc, out, err = run_main(capsys, "run", "sssp", "--set", f"graph={graph}", "--set", "source=9",
                            "--run-dir", url)
    assert rc == 0, err
    assert url in err  # "run directory: URL" on stderr
    fs = fsspec.filesystem("memory")
    info = json.loads(fs.cat(f"{url}/job.json"))
    assert info["config"]["source"] == "9"
    assert info["status"] == "finished"
    lines = [json.loads(x) for x in fs.cat(f"{url}/metrics.jsonl").decode().splitlines()]
    check_metrics(lines, info["supersteps"])


def test_default_run_dir_is_runs_job_timestamp(tmp_path, graph):
    proc = run_subprocess(["run", "wcc", "--set", f"graph={graph}"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    dirs = list((tmp_path / "runs").iterdir())
    assert len(dirs) == 1 and dirs[0].name.startswith("wcc-")
    assert json.loads((dirs[0] / "job.json").read_text())["status"] == "finished"
    assert (dirs[0] / "metrics.jsonl").is_file()


# ----------------------------------------------------------------------------------------------
# --set and --config parsing
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("item,expected", [
    ("n=3", 3), ("n=-7", -7), ("n=1_000", 1000), ("x=0.25", 0.25), ("x=1e-14", 1e-14),
    ("b=true", True), ("b=false", False),
    ('s="quoted string"', "quoted string"), ("s='literal'", "literal"),
    ("s=vertex", "vertex"), ("s=plain words", "plain words"), ("s=a=b", "a=b"), ("s=", ""),
    ("l=[1, 2]", [1, 2]), ("d={a = 1}", {"a": 1}),
])
def test_parse_set(item, expected):
    key, value, raw = parse_set(item)
    assert key == item.split("=", 1)[0]
    assert value == expected and type(value) is type(expected)
    assert raw == item.split("=", 1)[1]


def test_set_values_reach_the_config(graph):
    job = get_job("pagerank")
    cfg = resolve_config(job, None, [f"graph={graph}", "damping=0.5", "iterations=7", "tol=0", "mode=vertex",
                                     'output="out.tsv"', "top=3"])
    assert cfg == {"graph": str(graph), "damping": 0.5, "iterations": 7, "tol": 0.0, "mode": "vertex",
                   "output": "out.tsv", "top": 3, "checkpoint_every": 0, "keep_checkpoints": 3,
                   "checkpoint_background": True, "vertices": None, "directed": True, "format": "auto",
                   "split_mb": 64.0}
    assert isinstance(cfg["tol"], float)  # an int given for a float key becomes a float
    cfg = resolve_config(job, None, ["damping=1", "mode='block'", "iterations=2", "iterations=5"])
    assert cfg["damping"] == 1.0 and isinstance(cfg["damping"], float)
    assert cfg["mode"] == "block"
    assert cfg["iterations"] == 5  # the last --set wins


@pytest.mark.parametrize("raw", ["10", "007", "1e3", "1.50", "true", "inf", "-0", "1_0", "[x]"])
def test_string_keys_keep_the_raw_text(raw):
    """``--set source=1.50`` means the vertex id "1.50", not the float 1.5."""
    cfg = resolve_config(get_job("sssp"), None, [f"source={raw}"])
    assert cfg["source"] == raw


def test_numeric_looking_source_ids_through_the_cli(capsys, tmp_path):
    p = tmp_path / "g.e"
    p.write_text("007 1e3 2\n1e3 true 3\ntrue 7 1\n7 007\n")
    out_file = tmp_path / "out.tsv"
    for source, want in [("007", {"007": 0.0, "1e3": 2.0, "7": 6.0, "true": 5.0}),
                         ("1e3", {"007": 5.0, "1e3": 0.0, "7": 4.0, "true": 3.0}),
                         ("true", {"007": 2.0, "1e3": 4.0, "7": 1.0, "true": 0.0}),
                         ('"7"', {"007": 1.0, "1e3": 3.0, "7": 0.0, "true": 6.0})]:
        rc, out, err = run_main(capsys, "run", "sssp", "--set", f"graph={p}", "--set", f"source={source}",
                                "--set", f"output={out_file}", "--run-dir", memory_run_dir())
        assert rc == 0, err
        got = {v: float(d) for v, d in (line.split("\t") for line in out_file.read_text().splitlines())}
        assert got == want, source


def test_config_file_top_level_and_job_table(capsys, tmp_path, graph):
    out_file = tmp_path / "out.tsv"
    top = tmp_path / "top.toml"
    top.write_text(f'graph = "{graph}"\noutput = "{out_file}"\niterations = 2\ntol = 0\nmode = "vertex"\n')
    rc, out, err = run_main(capsys, "run", "pagerank", "--config", str(top), "--json", "--run-dir", memory_run_dir())
    assert rc == 0, err
    assert json.loads(out)["updates"] == 2
    first = out_file.read_text()
    assert len(first.splitlines()) == len(GRAPH_IDS)

    table = tmp_path / "table.toml"
    table.write_text(f'[pagerank]\ngraph = "{graph}"\noutput = "{out_file}"\niterations = 2\ntol = 0.0\n'
                     f'[sssp]\nsource = "1"\n')
    out_file.unlink()
    rc, out, err = run_main(capsys, "run", "pagerank", "--config", str(table), "--json", "--run-dir", memory_run_dir())
    assert rc == 0, err
    assert json.loads(out)["updates"] == 2
    assert out_file.read_text() == first  # block mode gives the same bytes as vertex mode

    # --set overrides the file
    rc, out, err = run_main(capsys, "run", "pagerank", "--config", str(table), "--set", "iterations=1", "--json",
                            "--run-dir", memory_run_dir())
    assert rc == 0, err
    assert json.loads(out)["updates"] == 1

    # the [sssp] table of the same file serves sssp
    rc, out, err = run_main(capsys, "run", "sssp", "--config", str(table), "--set", f"graph={graph}", "--json",
                            "--run-dir", memory_run_dir())
    assert rc == 0, err
    assert json.loads(out)["reachable"] == 3


# ----------------------------------------------------------------------------------------------
# user jobs (package.module:attribute), and a vertex program that raises
# ----------------------------------------------------------------------------------------------
USER_JOBS = '''
"""Test jobs written by test_cli.py."""
import json

from mariana import Graph, Vertex
from mariana.jobs import Job, Key


class Ping(Vertex):
    def __init__(self, id, victim, at, explode):
        super().__init__(id, 0)
        self.victim, self.at, self.explode = victim, at, explode

    def compute(self, ctx, messages):
        self.value += len(messages)
        if self.explode and ctx.superstep == self.at and self.id == self.victim:
            raise ZeroDivisionError("kaboom from the test job")
        if ctx.superstep < 4:
            ctx.send(self.id, 1)
        ctx.vote_to_halt()


def build(config, bctx):
    g = Graph(name="boom")
    for i in range(6):
        g.add_vertex(Ping(f"v{i}", config["victim"], config["at"], config["explode"]))
    return g


def finish(result, config, run_dir):
    return json.dumps({"config": config, "values": result.values}, sort_keys=True), {"echo": config}


BOOM = Job(
    name="boom", description="raises in one vertex",
    keys=(Key("victim", "v3", "str", "the vertex that raises"), Key("at", 2, "int", "at this superstep"),
          Key("explode", True, "bool", "raise at all"), Key("ratio", 0.5, "float", "unused"),
          Key("tags", [], "list", "unused"), Key("extra", {}, "dict", "unused")),
    build=build, finish=finish,
)
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch) -> str:
    name = f"mariana_test_userjobs_{uuid.uuid4().hex[:10]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(USER_JOBS))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_user_job_runs_and_sees_typed_config(capsys, user_module):
    rc, out, err = run_main(capsys, "run", f"{user_module}:BOOM", "--set", "explode=false", "--set", "at=3",
                            "--set", "ratio=2", "--set", 'tags=["a", 1]', "--set", "extra={k = true}",
                            "--set", "victim=v1", "--run-dir", memory_run_dir())
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["config"] == {"victim": "v1", "at": 3, "explode": False, "ratio": 2.0, "tags": ["a", 1],
                             "extra": {"k": True}, "checkpoint_every": 0, "keep_checkpoints": 3,
                             "checkpoint_background": True}
    assert doc["values"] == {f"v{i}": 4 for i in range(6)}


@pytest.mark.parametrize("item,needle", [("explode=yes", "explode"), ("explode=1", "explode"),
                                         ("tags=a", "tags"), ("at=true", "at")])
def test_user_job_type_errors(capsys, user_module, item, needle):
    rc, out, err = run_main(capsys, "run", f"{user_module}:BOOM", "--set", item)
    assert_usage_error(rc, out, err, needle)


def test_vertex_program_that_raises_in_process(capsys, user_module):
    url = memory_run_dir()
    rc, out, err = run_main(capsys, "run", f"{user_module}:BOOM", "--run-dir", url)
    assert rc == 1
    lines = err.splitlines()
    assert lines[0].startswith("mariana: error: ")
    assert "'v3'" in lines[0] and "superstep 2" in lines[0] and "kaboom from the test job" in lines[0]
    assert "Traceback (most recent call last):" in err
    assert 'raise ZeroDivisionError("kaboom from the test job")' in err
    assert f"{user_module}.py" in err
    info = json.loads(fsspec.filesystem("memory").cat(f"{url}/job.json"))
    assert info["status"] == "failed" and "v3" in info["error"]


@pytest.mark.parametrize("victim,at", [("v0", 0), ("v5", 3)])
def test_vertex_program_that_raises_end_to_end(tmp_path, victim, at):
    name = f"mariana_test_userjobs_e2e_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(USER_JOBS))
    proc = run_subprocess(["run", f"{name}:BOOM", "--set", f"victim={victim}", "--set", f"at={at}",
                           "--run-dir", str(tmp_path / "rd")], tmp_path, pythonpath=tmp_path)
    assert proc.returncode == 1, proc.stderr
    first, *rest = proc.stderr.splitlines()
    assert first.startswith("mariana: error: ")
    assert f"'{victim}'" in first and f"superstep {at}" in first and "ZeroDivisionError" in first
    assert rest and rest[0] == "Traceback (most recent call last):"
    assert rest[-1] == "ZeroDivisionError: kaboom from the test job"
    assert json.loads((tmp_path / "rd" / "job.json").read_text())["status"] == "failed"


@pytest.mark.parametrize("argv", [
    ["checkpoint", "list", "{missing}"],
    ["params", "export", "{missing}", "--to", "{tmp}/p.npz"],
    ["trace", "summary", "{missing}"],
    ["trace", "replay", "{missing}", "--vertex", "a", "--superstep", "1"],
    ["run", "--resume", "{missing}"],
])
def test_commands_that_read_a_run_refuse_a_missing_one_and_create_nothing(tmp_path, capsys, argv):
    missing = tmp_path / "no-such-run"
    assert main([a.format(missing=missing, tmp=tmp_path) for a in argv]) == 2
    assert "no such run directory" in capsys.readouterr().err
    assert not missing.exists()
