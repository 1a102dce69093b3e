"""A run directory that cannot be made or written: one line naming it and the OS error, exit 2
(a user mistake, as the guide says), never exit 1 or a traceback (issue 52, item 7)."""

from __future__ import annotations

import pytest
from cli_helpers import one_error_line

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("run_dir,needles", [
    ("/proc/mariana-no-such/run", ["run directory /proc/mariana-no-such/run cannot be", "No such file or directory"]),
    ("/proc/self", ["run directory /proc/self cannot be written"]),  # exists; even root cannot write it
])
@pytest.mark.parametrize("workers", ["1", "2"])
def test_an_unwritable_run_dir_is_one_line_exit_2(mariana, run_dir, needles, workers):
    one_error_line(mariana("run", "pagerank", "--workers", workers, "--run-dir", run_dir), *needles)


def test_a_file_where_the_run_dir_goes(mariana, tmp_path):
    (tmp_path / "taken").write_text("")
    one_error_line(mariana("run", "wcc", "--run-dir", "taken/run"), "run directory taken/run cannot be",
                   "ot a directory")


def test_the_run_dir_is_checked_before_the_job_builds(mariana):
    """The job's data is never opened for a run that could not write its results."""
    one_error_line(mariana("run", "dnn-dp", "--set", "data=/no/such/data", "--run-dir", "/proc/mariana-no-such/run"),
                   "run directory /proc/mariana-no-such/run cannot be")
