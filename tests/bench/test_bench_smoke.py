"""bench/smoke.py, the CI smoke run of the benchmarks: its contract and how it reports failures.

The benchmarks themselves run in ``.ci/run`` (``python bench/smoke.py``), not here: here only the
runner, on small scripts written to a temp folder, and a static check that every benchmark in
bench/ declares ``--smoke`` (so that a new one without it fails the fast tier, not only CI).
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "bench" / "smoke.py"
sys.path.insert(0, str(ROOT / "bench"))

import smoke  # noqa: E402

ARGPARSE = """
import argparse, sys
ap = argparse.ArgumentParser()
ap.add_argument("--smoke", action="store_true")
args = ap.parse_args()
"""


def write(folder: Path, name: str, body: str) -> None:
    (folder / name).write_text(textwrap.dedent(body))


def run_smoke(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SMOKE), "--dir", str(folder), *args], capture_output=True, text=True,
                          timeout=60)


def test_every_benchmark_declares_smoke() -> None:
    benches, libs = smoke.discover()
    assert {"transport.py", "dnn_dp.py", "graph_local.py"} <= set(benches)
    assert {"common.py", "transport_jobs.py"} <= set(libs) and "smoke.py" not in benches + libs
    missing = [b for b in benches if '"--smoke"' not in (ROOT / "bench" / b).read_text()]
    assert not missing, f"benchmarks without a --smoke flag (see bench/smoke.py): {missing}"


def test_runner_names_each_failure(tmp_path: Path) -> None:
    write(tmp_path, "good.py", ARGPARSE + 'print("table")\nif __name__ == "__main__":\n    pass\n')
    write(tmp_path, "nosmoke.py", """
        import argparse
        if __name__ == "__main__":
            argparse.ArgumentParser().parse_args()
            print("table")
        """)
    write(tmp_path, "crash.py", ARGPARSE + 'if __name__ == "__main__":\n    raise RuntimeError("boom in crash.py")\n')
    write(tmp_path, "silent.py", ARGPARSE + 'if __name__ == "__main__":\n    print("progress", file=sys.stderr)\n')
    write(tmp_path, "helpers.py", "X = 1\n")  # a library: no __main__ guard, never run
    p = run_smoke(tmp_path)
    assert p.returncode == 1, p.stdout + p.stderr
    lines = {m[1]: m[2] for m in re.finditer(r"^  (\S+\.py) +[\d.]+ s \(cpu +[\d.]+ s\)  (.*)$", p.stdout, re.MULTILINE)}
    assert set(lines) == {"good.py", "nosmoke.py", "crash.py", "silent.py"}, p.stdout
    assert lines["good.py"] == "ok"
    assert "FAILED: does not accept --smoke" in lines["nosmoke.py"]
    assert "FAILED: exit code 1" in lines["crash.py"]
    assert "FAILED: printed nothing on stdout" in lines["silent.py"]
    assert "skipped libraries: helpers.py" in p.stdout
    assert "1/4 ok" in p.stdout
    assert "--- crash.py (exit code 1)" in p.stdout and "RuntimeError: boom in crash.py" in p.stdout

    ok = run_smoke(tmp_path, "good")
    assert ok.returncode == 0 and "1/1 ok" in ok.stdout, ok.stdout + ok.stderr
    bad = run_smoke(tmp_path, "helpers")
    assert bad.returncode == 2 and "not a benchmark" in bad.stderr


def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    write(tmp_path, "hang.py", ARGPARSE + f"""
import subprocess, time
if __name__ == "__main__":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    open({str(pidfile)!r}, "w").write(str(child.pid))
    time.sleep(120)
""")
    p = run_smoke(tmp_path, "--timeout", "1.5")
    assert p.returncode == 1 and "FAILED: timed out after 1.5 s" in p.stdout, p.stdout + p.stderr
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while True:  # killed with its parent (then reaped by init): gone, or at most a zombie
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            break
        if state == "Z":
            break
        assert time.monotonic() < deadline, f"the benchmark's child {pid} outlived the timeout (state {state})"
        time.sleep(0.05)
