"""What the CLI tests check of a finished ``mariana`` process."""

from __future__ import annotations

import subprocess


def one_error_line(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit 2 with one ``mariana: error:`` line on stderr holding every needle, no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mariana: error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    return lines[0]
