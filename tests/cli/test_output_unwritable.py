"""An output that cannot be written is refused before superstep 0, not after the job ran: one
line naming the config key and the path, exit 2, nothing left behind (issue 52, item 7)."""

from __future__ import annotations

import pytest
from cli_helpers import one_error_line

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("job,workers,mode", [("pagerank", "1", "block"), ("pagerank", "2", "block"), ("wcc", "2", "block"),
                                              ("cdlp", "1", "block"), ("lcc", "1", "block"), ("pagerank", "1", "vertex"),
                                              ("wcc", "2", "vertex")])
def test_an_unwritable_output_is_refused_before_the_run(mariana, tmp_path, job, workers, mode):
    run = tmp_path / "run"
    proc = mariana("run", job, "--workers", workers, "--set", "output=/proc/out.tsv", "--set", f"mode={mode}",
                   "--run-dir", str(run))
    one_error_line(proc, "config key 'output' /proc/out.tsv cannot be written")
    assert not run.exists()  # refused while building: no run directory, no superstep


@pytest.mark.parametrize("output,needle", [("/proc/self/", "/proc/self/ cannot be written"),  # parts go inside
                                           ("/proc/mariana-no-such/deep/out.tsv", "(/proc)"),
                                           ("blocker/out.tsv", "blocker is not a directory")])
def test_other_unwritable_outputs(mariana, tmp_path, output, needle):
    (tmp_path / "blocker").write_text("")
    one_error_line(mariana("run", "wcc", "--set", f"output={output}", "--run-dir", str(tmp_path / "run")),
                   "config key 'output'", needle)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocker"]


@pytest.mark.parametrize("output", ["new/deeper/out.tsv", "parts/"])
def test_a_writable_output_in_a_new_folder_still_works_and_the_probe_leaves_nothing(mariana, tmp_path, output):
    proc = mariana("run", "pagerank", "--workers", "2", "--set", f"output={output}", "--run-dir", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file() and "run" not in p.parts)
    assert written == (["new/deeper/out.tsv"] if output.endswith(".tsv") else ["parts/part-00000.tsv", "parts/part-00001.tsv"])


def test_params_export_to_an_unwritable_place_is_refused_first(mariana, tmp_path):
    run = tmp_path / "run"
    assert mariana("run", "dnn-dp", "--set", "steps=2", "--run-dir", str(run)).returncode == 0
    one_error_line(mariana("params", "export", str(run), "--to", "/proc/model.npz"),
                   "--to /proc/model.npz cannot be written")
