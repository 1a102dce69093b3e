"""LCC on several blocks sends the wedges that travel in rounds of at most WEDGES_PER_STEP a
receiving block (issue 49): lowered here so that a tiny graph takes many rounds; the values
stay those of ``LCCVertex`` and of one worker to the bit, and a run cut between rounds resumes
from its checkpoint to the same bytes."""

from __future__ import annotations

import uuid

import pytest

import mariana.vertices.graph.lcc as lcc
from mariana.cli import main
from test_graph_jobs import RandomGraph, api_rows, cli_run

pytestmark = pytest.mark.timeout(120)


def _rounds(result) -> list[int]:
    """The wedges sent or still to send in each superstep that sent some (one per round)."""
    return [m["wedges_left"] for m in result.metrics if m.get("wedges_left") is not None]


@pytest.mark.parametrize("directed", (True, False))
@pytest.mark.parametrize("workers", (2, 3))
def test_wedges_in_many_rounds_equal_vertex_mode(tmp_path, monkeypatch, workers, directed):
    path = RandomGraph(5, 200, 2, density=4.0).write(tmp_path)
    sets = [f"graph={path}", f"directed={'true' if directed else 'false'}"]
    want, _ = api_rows("lcc", [*sets, "mode=vertex"])
    assert api_rows("lcc", sets, workers=1)[0] == want
    rows, one = api_rows("lcc", sets, workers=workers)
    assert rows == want and len(_rounds(one)) == 1
    monkeypatch.setattr(lcc, "WEDGES_PER_STEP", 64)
    rows, many = api_rows("lcc", sets, workers=workers)
    assert rows == want  # exact: integer counts divided once
    rounds = _rounds(many)
    assert len(rounds) >= 4 and rounds == sorted(rounds, reverse=True) and rounds[0] == _rounds(one)[0]
    assert many.supersteps == one.supersteps + len(rounds) - 1  # one superstep a round more
    assert all(r - later <= 64 + 200 for r, later in zip(rounds, rounds[1:]))  # a round: its share or one entry's
    monkeypatch.setattr(lcc, "WEDGES_PER_STEP", 1)  # one entry a round
    assert api_rows("lcc", sets, workers=workers)[0] == want


@pytest.mark.parametrize("workers", (2, 3))
def test_a_run_cut_between_rounds_resumes_to_the_same_output(capsys, tmp_path, monkeypatch, workers):
    path = RandomGraph(7, 160, 2, density=4.0).write(tmp_path)
    monkeypatch.setattr(lcc, "WEDGES_PER_STEP", 48)
    want = cli_run(capsys, tmp_path, "lcc", path, workers=workers)[0]
    _, result = api_rows("lcc", [f"graph={path}"], workers=workers)
    first = next(m["superstep"] for m in result.metrics if m.get("wedges_left") is not None)
    rounds = len(_rounds(result))
    assert rounds >= 4
    run_dir = str(tmp_path / f"rd-{uuid.uuid4().hex}")
    out = tmp_path / "lcc.tsv"
    argv = ["run", "lcc", "--set", f"graph={path}", "--set", f"output={out}", "--workers", str(workers),
            "--runtime", "local", "--run-dir", run_dir, "--set", "checkpoint_every=1"]
    # cut after the first rounds, with more to send: the checkpoint holds the cursor and the wedges in flight
    assert main(argv + ["--max-supersteps", str(first + rounds // 2)]) == 0, capsys.readouterr().err
    assert out.read_text() != want  # (the values written at the cut: none computed yet)
    assert main(["run", "--resume", run_dir]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert out.read_text() == want
