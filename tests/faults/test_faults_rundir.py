"""Two runs on one run directory, and what killed processes leave behind, with real ``mariana
run`` processes on a local disk and on a real S3 server (SeaweedFS, ``tests/s3_fixture.py``).

- two ``mariana run ... --run-dir D`` started at once: one runs, the other is refused (exit 2,
  one line); the record is the one run's, every superstep once;
- ``--resume D`` while D's run goes on: refused, naming the running pid;
- the same ``--resume-if-possible`` command started twice after the master was killed (kill -9):
  one resumes at once (the killed holder's lease is free), the other is refused;
- a stale master (SIGSTOP past its lease, another run takes it over, SIGCONT) writes nothing more;
- the temporaries of a writer killed with SIGKILL (``params/.X.npy.*.tmp``, ``.OUT.*.tmp``) and the
  throwaway keys of a killed ``--secure`` master are removed by the next start.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import pytest

from mariana.errors import UsageError
from mariana.storage import RunDir
from mariana.storage.lease import Lease
from polling import until

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]

RUN_S = 120  # one mariana process at most


@pytest.fixture(params=["local", "s3"])
def run_url(request, tmp_path) -> str:
    if request.param == "local":
        return str(tmp_path / "run")
    return request.getfixturevalue("s3_url") + "/run"


def _start(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "mariana", *args], cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})


def _finish(proc: subprocess.Popen) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=RUN_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return proc.returncode, err


def _until(what: str, ok: Callable[[], Any], timeout: float = 60.0) -> Any:
    return until(what, ok, timeout, every=0.05)


def _has(url: str, rel: str) -> bool:
    try:
        return RunDir(url, create=False).exists(rel)
    except Exception:  # noqa: BLE001 - not made yet
        return False


def _checkpointed(url: str) -> bool:
    try:
        run = RunDir(url, create=False)
        return any(run.exists(f"checkpoints/{d}/manifest.json") for d in run.list("checkpoints"))
    except Exception:  # noqa: BLE001 - not made yet
        return False


def _one_refusal(rc: int, err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("mariana: error:")]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, (rc, err)
    return lines[0]


def _record_is_one_run(url: str) -> None:
    """job.json finished and metrics.jsonl holding each superstep of it exactly once."""
    run = RunDir(url, create=False)
    info = run.read_json("job.json")
    assert info["status"] == "finished", info
    steps = Counter(r["superstep"] for r in run.read_jsonl("metrics.jsonl"))
    assert sorted(steps) == list(range(info["supersteps"])), (len(steps), info["supersteps"])
    assert max(steps.values()) == 1, [s for s, n in steps.items() if n > 1][:10]


def test_two_runs_started_at_once_on_one_run_dir(run_url, tmp_path):
    cmd = ["run", "dnn-dp", "--set", "steps=150", "--run-dir", run_url]
    a, b = _start(*cmd, cwd=tmp_path), _start(*cmd, cwd=tmp_path)
    (ra, ea), (rb, eb) = _finish(a), _finish(b)
    assert sorted([ra, rb]) == [0, 2], (ra, ea, rb, eb)
    line = _one_refusal(*((ra, ea) if ra else (rb, eb)))
    assert "is in use by another run" in line or "holds another run" in line, line
    _record_is_one_run(run_url)


def test_resume_while_the_run_goes_on_is_refused(run_url, tmp_path):
    a = _start("run", "dnn-dp", "--set", "steps=600", "--set", "checkpoint_every=20", "--run-dir", run_url,
               cwd=tmp_path)
    try:
        _until("a checkpoint", lambda: _checkpointed(run_url) or a.poll() is not None)
        assert a.poll() is None, "the run ended before the test could resume it; make it longer"
        b = _start("run", "--resume", run_url, cwd=tmp_path)
        line = _one_refusal(*_finish(b))
        assert "is in use by another run" in line and f"pid {a.pid} " in line, line
        rc, err = _finish(a)
        assert rc == 0, err
    finally:
        a.kill()
        a.wait()
    _record_is_one_run(run_url)


def test_the_same_resume_if_possible_started_twice_after_a_kill(run_url, tmp_path):
    cmd = ["run", "dnn-dp", "--set", "steps=400", "--set", "checkpoint_every=20", "--run-dir", run_url,
           "--resume-if-possible"]
    a = _start(*cmd, cwd=tmp_path)
    try:
        _until("a checkpoint", lambda: _checkpointed(run_url) or a.poll() is not None)
        assert a.poll() is None, "the run ended before the test could kill it; make it longer"
    finally:
        a.send_signal(signal.SIGKILL)
        a.wait()
    b, c = _start(*cmd, cwd=tmp_path), _start(*cmd, cwd=tmp_path)
    (rb, eb), (rc, ec) = _finish(b), _finish(c)
    assert sorted([rb, rc]) == [0, 2], (rb, eb, rc, ec)
    ok_err, refused = (eb, (rc, ec)) if rb == 0 else (ec, (rb, eb))
    assert "resuming from it" in ok_err, ok_err  # the killed master's lease did not hold it up
    assert "is in use by another run" in _one_refusal(*refused)
    _record_is_one_run(run_url)


def test_a_stale_master_writes_nothing_once_its_lease_was_taken_over(run_url, tmp_path):
    a = _start("run", "dnn-dp", "--set", "steps=100000", "--run-dir", run_url, cwd=tmp_path,
               env={"MARIANA_LEASE_TTL_S": "2"})
    lease = None
    try:
        _until("metrics", lambda: _has(run_url, "metrics.jsonl") or a.poll() is not None)
        a.send_signal(signal.SIGSTOP)  # paused: its lease runs out
        run = RunDir(run_url)

        def take() -> Lease | None:
            try:
                return Lease.acquire(run, wait=False)
            except UsageError:
                return None
        lease = _until("the takeover of the paused master's lease", take)
        assert lease.token == 2
        before = {rel: run.read_bytes(rel) for rel in ("job.json", "metrics.jsonl")}
        a.send_signal(signal.SIGCONT)
        rc, err = _finish(a)
        assert rc == 1, err
        assert "lost its lease: lease 2 was taken by pid" in err, err
        assert {rel: run.read_bytes(rel) for rel in before} == before
    finally:
        a.send_signal(signal.SIGCONT)
        a.kill()
        a.wait()
        if lease is not None:
            lease.release()


WRITER = """
import sys
from mariana.storage import RunDir, write_lines
def pieces():
    yield "1\\t0.5\\n"
    print("writing", flush=True)
    sys.stdin.read()  # until killed
    yield ""
if sys.argv[1] == "params":
    with RunDir(sys.argv[2]).open_write("params/w.npy") as f:
        f.write(b"x" * 100)
        print("writing", flush=True)
        sys.stdin.read()
else:
    write_lines(sys.argv[2], pieces)
"""


def _writer(kind: str, target: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", WRITER, kind, str(target)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "writing\n"
    return proc


def _temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp")) if folder.is_dir() else []


def test_the_temporaries_of_killed_writers_are_swept_at_the_next_start(tmp_path):
    run = tmp_path / "run"
    first = _start("run", "dnn-dp", "--set", "steps=20", "--set", "checkpoint_every=10", "--run-dir", str(run),
                   cwd=tmp_path)
    assert _finish(first)[0] == 0
    killed, live = _writer("params", run), _writer("params", run)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert len(_temporaries(run / "params")) == 2
    try:
        again = _start("run", "--resume", str(run), cwd=tmp_path)
        rc, err = _finish(again)
        assert rc == 0, err
        left = _temporaries(run / "params")
        assert left == [n for n in left if f".{live.pid}@" in n] and len(left) == 1, left  # the live writer's stays
    finally:
        live.kill()
        live.wait()

    out = tmp_path / "ranks.tsv"
    graph = tmp_path / "g.e"
    graph.write_text("1 2\n2 3\n3 1\n")
    writer = _writer("out", out)
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    assert len([n for n in _temporaries(tmp_path) if n.startswith(".ranks.tsv.")]) == 1
    job = _start("run", "pagerank", "--set", f"graph={graph}", "--set", f"output={out}", cwd=tmp_path)
    rc, err = _finish(job)
    assert rc == 0, err
    assert [n for n in _temporaries(tmp_path) if n.startswith(".ranks.tsv.")] == []
    assert out.read_text().count("\n") == 3


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def test_the_keys_of_a_killed_secure_master_are_removed_at_the_next_start(tmp_path):
    pytest.importorskip("zmq.auth")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {"TMPDIR": str(tmp)}
    a = _start("run", "dnn-dp", "--workers", "2", "--secure", "--set", "steps=100000", "--run-dir",
               str(tmp_path / "a"), cwd=tmp_path, env=env)
    workers: list[int] = []
    try:
        _until("metrics", lambda: (tmp_path / "a" / "metrics.jsonl").exists() or a.poll() is not None)
        assert a.poll() is None, _finish(a)
        workers = _children(a.pid)
        keys = [p.name for p in tmp.iterdir() if p.name.startswith("mariana-keys-")]
        assert len(keys) == 1, keys
    finally:
        a.send_signal(signal.SIGKILL)
        a.wait()
        for pid in workers:  # (they would leave by themselves once the master's heartbeats stop)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert (tmp / keys[0]).is_dir()  # a kill runs no cleanup
    b = _start("run", "dnn-dp", "--workers", "2", "--secure", "--set", "steps=5", "--run-dir", str(tmp_path / "b"),
               cwd=tmp_path, env=env)
    rc, err = _finish(b)
    assert rc == 0, err
    assert [p.name for p in tmp.iterdir() if p.name.startswith("mariana-keys-")] == []
    assert json.loads((tmp_path / "b" / "job.json").read_text())["status"] == "finished"
