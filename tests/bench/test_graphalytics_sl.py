"""bench/graphalytics_sl.py's own parts: the graph files it writes, its validation rules, its CDLP
step and its process-tree measurement (a real child process, no engine)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import graphalytics_sl as sl  # noqa: E402


@pytest.mark.timeout(60)
def test_graph_files_agree_and_are_graph500(tmp_path: Path) -> None:
    g = sl.make_graph(10, 3, tmp_path)
    assert sl.make_graph(10, 3, tmp_path) == g  # cached: made once
    text = np.loadtxt(g["e"]).reshape(-1, 3)
    table = np.load(g["npy"])
    assert text.shape == table.shape == (g["edges"], 3)
    np.testing.assert_array_equal(text, table)  # the text and .npy forms hold the same edges
    src, dst, w = table[:, 0].astype(np.int64), table[:, 1].astype(np.int64), table[:, 2]
    assert (src < dst).all() and np.unique(src * (1 << 10) + dst).size == src.size  # each edge once
    assert ((w > 0) & (w < 1)).all()
    ids = np.loadtxt(g["v"], dtype=np.int64)
    np.testing.assert_array_equal(ids, np.unique(np.r_[src, dst]))  # only vertices with an edge
    deg = np.bincount(np.r_[src, dst])
    assert g["source"] == int(np.argmax(deg)) and g["vertices"] == ids.size
    assert not list(tmp_path.glob("*.tmp"))  # no half-written file left


@pytest.mark.timeout(30)
def test_write_lines_formats_like_python() -> None:
    rng = np.random.default_rng(5)
    a, b = rng.integers(0, 10 ** 6, 1000), rng.integers(0, 10, 1000)
    micro = rng.integers(1, 10 ** 6, 1000)
    a[:3] = [0, 9, 10]

    class Sink:
        data = b""

        def write(self, chunk: bytes) -> None:
            self.data += chunk

    sink = Sink()
    sl.write_lines(sink, [a, b], micro)
    want = "".join(f"{x} {y} 0.{m:06d}\n" for x, y, m in zip(a, b, micro))
    assert sink.data.decode() == want


@pytest.mark.timeout(30)
def test_validation_rules() -> None:
    ref = np.array([0.0, 1.0, 2.0, np.inf])
    assert sl.validate("sssp", ref, ref * (1 + 1e-13)) == "ok"
    assert sl.validate("sssp", ref, ref * (1 + 1e-9)).startswith("2 beyond")
    assert sl.validate("pagerank", ref, ref * (1 + 1e-5)) == "ok"
    assert sl.validate("bfs", ref, ref) == "ok" and sl.validate("bfs", ref, ref + 1) == "3 differ"
    assert sl.validate("wcc", np.array([5, 5, 7]), np.array([0, 0, 1])) == "ok"
    assert sl.validate("wcc", np.array([5, 5, 7]), np.array([0, 1, 1])) == "other partition"
    assert sl.validate("wcc", np.array([5, 5, 7]), np.array([0, 0, 0])) == "other partition"
    assert sl.validate("cdlp", ref, ref[:3]) == "3 values for 4"


@pytest.mark.timeout(30)
def test_cdlp_step_is_the_mode_ties_to_smallest() -> None:
    rng = np.random.default_rng(11)
    n = 40
    rows = rng.integers(0, n - 5, 400)  # the last five vertices have no neighbour
    labels_of_cols = rng.integers(0, 6, rows.size)
    current = np.arange(n)
    got = sl.cdlp_step(rows.copy(), labels_of_cols, n, current)
    for v in range(n):
        counts = np.bincount(labels_of_cols[rows == v], minlength=6)
        want = int(np.argmax(counts)) if counts.sum() else v  # argmax: the first (smallest) of ties
        assert got[v] == want, v


@pytest.mark.timeout(60)
def test_measure_reports_peak_and_kills_past_the_cap(tmp_path: Path) -> None:
    grow = "import numpy as np, time\nx = np.ones(50_000_000)\nprint('held')\n"
    r = sl.measure([sys.executable, "-c", grow], dict(os.environ), timeout=30, max_gb=8)
    assert r["rc"] == 0 and "error" not in r and r["stdout"].strip() == "held"
    assert 400 < r["peak_mb"] < 1000  # 400 MB of ones, in the child's own high-water mark
    hog = "import numpy as np, time\nx = np.ones(100_000_000)\ntime.sleep(60)\n"
    r = sl.measure([sys.executable, "-c", hog], dict(os.environ), timeout=30, max_gb=0.5)
    assert "killed at" in r["error"] and r["wall_s"] < 20
    late = sl.measure([sys.executable, "-c", "import time; time.sleep(60)"], dict(os.environ), timeout=2, max_gb=8)
    assert "timeout after" in late["error"]


@pytest.mark.timeout(120)
def test_peers_agree_on_a_small_graph(tmp_path: Path) -> None:
    # the peers are the benchmark's extra ('.[bench]'), not the test suite's
    pytest.importorskip("graphblas", reason="python-graphblas is not installed (pip install -e '.[bench]')")
    pytest.importorskip("networkit", reason="networkit is not installed (pip install -e '.[bench]')")
    g = sl.make_graph(9, 2, tmp_path)
    for algorithm in ("bfs", "wcc", "sssp", "pagerank", "cdlp"):
        _, _, ref = sl.peer_scipy(g, algorithm, 1)
        for peer in (sl.peer_graphblas, sl.peer_networkit):
            if peer is sl.peer_networkit and algorithm == "cdlp":
                continue  # PLP is asynchronous: another answer
            _, _, got = peer(g, algorithm, 1)
            assert sl.validate(algorithm, ref, got) == "ok", (peer.__name__, algorithm)
    _, _, lcc_gb = sl.peer_graphblas(g, "lcc", 1)
    _, _, lcc_nk = sl.peer_networkit(g, "lcc", 1)
    assert sl.validate("lcc", lcc_gb, lcc_nk) == "ok"
    json.dumps(g)  # what a peer child gets on its command line
