#!/usr/bin/env python
"""Smoke-run every benchmark so that a change that breaks one fails CI (``.ci/run`` runs this).

    python bench/smoke.py                    # every benchmark with --smoke, one after the other
    python bench/smoke.py transport dnn_dp   # only these (names with or without .py)
    python bench/smoke.py --list             # what would run, and the library modules skipped
    python bench/smoke.py -v                 # also print each benchmark's own output

The contract: every ``bench/*.py`` accepts ``--smoke``. A file that runs as a script (it has an
``if __name__ == "__main__":`` guard) is a benchmark; one without the guard (``common.py``,
``transport_jobs.py``) is a library the benchmarks import, and is skipped. Benchmarks are found
by glob, so a new one is picked up without editing this file; one that does not accept
``--smoke`` fails here, by name.

``--smoke`` is the tiny mode of a benchmark: the smallest sizes, one round, a few steps, one BLAS
environment variant, no peer that needs a package outside ``.[dev]`` (no PyTorch), finishing in
a few seconds, and printing its table to stdout as usual. It runs every code path of the
benchmark (its baselines and ratios included) but its figures mean nothing and none is asserted:
the smoke run fails only when a benchmark exits non-zero, times out or prints nothing on stdout.

Each benchmark runs as ``python bench/NAME.py --smoke`` in its own process group (killed whole on
timeout, so no worker outlives it), from the repository root, with this process's environment.
One line per benchmark (name, wall seconds, CPU seconds of its process tree, ok / FAILED and why;
the CPU figure tells how long it would take on idle cores when the machine is shared); the stderr
tail of every failed one follows; the exit status is 1 if any failed.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import signal
import subprocess
import sys
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH_DIR)
SELF = os.path.basename(__file__)
MAIN_GUARD = re.compile(r"""^if __name__ == ["']__main__["']\s*:""", re.MULTILINE)
TAIL_LINES = 40


def discover(bench_dir: str = BENCH_DIR) -> tuple[list[str], list[str]]:
    """(benchmarks, libraries): the ``*.py`` files with and without a ``__main__`` guard, but this one."""
    benches: list[str] = []
    libs: list[str] = []
    for name in sorted(os.listdir(bench_dir)):
        if not name.endswith(".py") or name == SELF:
            continue
        with open(os.path.join(bench_dir, name), encoding="utf-8") as f:
            (benches if MAIN_GUARD.search(f.read()) else libs).append(name)
    return benches, libs


def tail(text: str, lines: int = TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def children_cpu_s() -> float:
    """CPU seconds (user + system) of every waited-for descendant so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_one(name: str, timeout: float, bench_dir: str = BENCH_DIR) -> tuple[bool, float, str, str, str]:
    """Run ``bench/NAME --smoke``: (ok, seconds, why, stdout, stderr)."""
    t = time.perf_counter()
    p = subprocess.Popen([sys.executable, os.path.join(bench_dir, name), "--smoke"], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # the benchmark and every process it started
        out, err = p.communicate()
        return False, time.perf_counter() - t, f"timed out after {timeout:g} s", out, err
    finally:
        try:  # workers a benchmark left behind (it exited, its process group may not have)
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    dt = time.perf_counter() - t
    if p.returncode == 2 and "unrecognized arguments: --smoke" in err:
        return False, dt, "does not accept --smoke (every bench/*.py must: see bench/smoke.py)", out, err
    if p.returncode:
        return False, dt, f"exit code {p.returncode}", out, err
    if not out.strip():
        return False, dt, "printed nothing on stdout (a smoke run prints its table)", out, err
    return True, dt, "", out, err


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help="benchmarks to run (default: every bench/*.py with a __main__ guard)")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds per benchmark (default 180)")
    ap.add_argument("--list", action="store_true", help="list the benchmarks and the skipped library modules")
    ap.add_argument("-v", "--verbose", action="store_true", help="also print each benchmark's stdout")
    ap.add_argument("--dir", default=BENCH_DIR, help="the folder of benchmarks (default: this file's, bench/)")
    args = ap.parse_args(argv)
    benches, libs = discover(args.dir)
    if args.list:
        print("\n".join(benches))
        print(f"(libraries, skipped: {', '.join(libs) or 'none'})")
        return 0
    if args.names:
        wanted = [n if n.endswith(".py") else f"{n}.py" for n in args.names]
        if unknown := [n for n in wanted if n not in benches]:
            ap.error(f"not a benchmark in {args.dir}: {', '.join(unknown)} "
                     f"(benchmarks: {', '.join(b[:-3] for b in benches)})")
        benches = wanted
    print(f"bench smoke: {len(benches)} benchmarks with --smoke (timeout {args.timeout:g} s each; "
          f"skipped libraries: {', '.join(libs) or 'none'}); load average {os.getloadavg()[0]:.2f}", flush=True)
    t0, cpu0, failed = time.perf_counter(), children_cpu_s(), []
    for name in benches:
        cpu = children_cpu_s()
        ok, dt, why, out, err = run_one(name, args.timeout, args.dir)
        print(f"  {name:24} {dt:6.1f} s (cpu {children_cpu_s() - cpu:5.1f} s)  {'ok' if ok else 'FAILED: ' + why}",
              flush=True)
        if args.verbose and out.strip():
            print("    " + out.rstrip().replace("\n", "\n    "), flush=True)
        if not ok:
            failed.append((name, why, out, err))
    print(f"bench smoke: {len(benches) - len(failed)}/{len(benches)} ok in {time.perf_counter() - t0:.1f} s "
          f"(cpu {children_cpu_s() - cpu0:.1f} s); load average {os.getloadavg()[0]:.2f}")
    for name, why, out, err in failed:
        print(f"\n--- {name} ({why}): last {TAIL_LINES} lines of stderr" + ("" if err.strip() else " (empty; stdout)"))
        print(tail(err if err.strip() else out))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
