"""Helpers of the report tests: start `mariana` processes, read what they print, poll, screenshot."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from mariana.cli import main

def run_cli(*argv: str) -> int:
    return main(list(argv))


def metrics(run: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]


def losses(run: Path) -> tuple[list[int], list[float]]:
    """(supersteps, loss values) of the metrics lines that report a loss."""
    lines = [m for m in metrics(run) if "loss" in m]
    return [m["superstep"] for m in lines], [m["loss"] for m in lines]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def get(url: str, method: str = "GET", timeout: float = 30.0) -> tuple[int, bytes, str]:
    """(status, body, content type) of a request on loopback."""
    req = urllib.request.Request(url, method=method, data=b"x" if method in ("POST", "PUT") else None)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read(), r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers.get("Content-Type", "")


def get_json(url: str) -> Any:
    status, body, ctype = get(url)
    assert status == 200 and ctype == "application/json", (url, status, body[:200])
    return json.loads(body)


def mariana(*argv: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """A `mariana` process; its stderr is a pipe that ``page_url`` reads."""
    return subprocess.Popen([sys.executable, "-m", "mariana", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, env={**os.environ, **(env or {})})


def page_url(proc: subprocess.Popen) -> str:
    """The job page's URL, from the line `mariana: job page at URL ...` on the process's stderr."""
    for line in proc.stderr:  # ends if the process exits
        if line.startswith("mariana: job page at "):
            return line.split()[4]
    raise AssertionError(f"the process exited ({proc.wait()}) without serving a job page")


def reap(*procs: subprocess.Popen) -> None:
    """Kill and wait for every process still running (a test's clean-up)."""
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
        for f in (p.stdout, p.stderr):
            if f is not None:
                f.close()


def screenshot(page: Any, name: str, tmp_path: Path) -> Path:
    """A full-page PNG in ``tmp_path`` (copied to $MARIANA_SCREENSHOTS when set, to look at)."""
    out = tmp_path / f"{name}.png"
    page.screenshot(path=str(out), full_page=True)
    keep = os.environ.get("MARIANA_SCREENSHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(out, Path(keep) / out.name)
    assert out.stat().st_size > 10_000 and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return out
