"""The run directory's lease (``mariana.storage.lease``) on a local disk and on a real S3 server
(SeaweedFS, ``tests/s3_fixture.py``): one holder at a time, a refusal that names it, takeover of
a released, expired or killed holder's lease with the next token, and fencing: a holder whose
lease was taken over writes nothing more.

Holders that must die are real processes (``python -c``) killed with SIGKILL; a holder "on
another machine" is a lease record written with another host's name, as such a holder writes it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable

import numpy as np
import pytest

from mariana.errors import UsageError
from mariana.storage import RunDir, save_params
from mariana.storage.checkpoint import Checkpoints
from mariana.storage.lease import Lease, LeaseLost, machine
from polling import until

pytestmark = pytest.mark.timeout(120)

HOLDER = """
import sys
from mariana.storage import RunDir
from mariana.errors import UsageError
run = RunDir(sys.argv[1])
try:
    lease = run.take_lease(wait=False)
except UsageError as exc:
    print("refused", exc, flush=True)
    sys.exit(2)
print("held", lease.token, flush=True)
sys.stdin.read()  # until the test closes stdin (or kills this process)
lease.release()
"""


@pytest.fixture(params=["local", "s3"])
def run_url(request, tmp_path) -> str:
    if request.param == "local":
        return str(tmp_path / "run")
    return request.getfixturevalue("s3_url") + "/run"


def _holder(url: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", HOLDER, url], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)


def _epoch(run: RunDir, n: int) -> dict[str, Any]:
    return json.loads(run.read_bytes(f"lease/{n:010d}.json"))


def _taken(run: RunDir, ttl: float | None = None) -> Callable[[], Lease | None]:
    """A poll: the lease of ``run`` once it can be taken (refused while its holder's lease lasts)."""
    def take() -> Lease | None:
        try:
            return Lease.acquire(run, wait=False, ttl=ttl)
        except UsageError:
            return None
    return take


def test_a_second_run_is_refused_with_one_line_naming_the_holder(run_url):
    first = RunDir(run_url)
    lease = first.take_lease()
    assert lease.token == 1
    with pytest.raises(UsageError) as refused:
        RunDir(run_url).take_lease()
    line = str(refused.value)
    assert "\n" not in line
    for needle in ("is in use by another run", f"pid {os.getpid()}", machine()["host"], "since", "lease 1"):
        assert needle in line, (needle, line)
    first.release_lease()
    second = RunDir(run_url)
    assert second.take_lease().token == 2  # released: taken at once, with the next token
    assert _epoch(second, 1)["released"] is True
    second.release_lease()


def test_a_killed_holder_is_taken_over_at_once_with_the_next_token(run_url):
    proc = _holder(run_url)
    try:
        assert proc.stdout.readline().split() == ["held", "1"]
        rival = _holder(run_url)  # the holder lives: refused
        assert rival.stdout.readline().startswith("refused ")
        assert rival.wait(timeout=60) == 2
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    run = RunDir(run_url)
    t0 = time.monotonic()
    lease = run.take_lease()  # the default 120 s lease has not expired: the dead pid frees it
    assert lease.token == 2 and time.monotonic() - t0 < 30
    assert _epoch(run, 2)["pid"] == os.getpid()
    run.release_lease()


def test_racing_runs_exactly_one_takes_the_lease(run_url):
    procs = [_holder(run_url) for _ in range(4)]
    try:
        firsts = [p.stdout.readline().split() for p in procs]
        held = [f for f in firsts if f[0] == "held"]
        assert held == [["held", "1"]], firsts
        assert sum(f[0] == "refused" for f in firsts) == 3, firsts
    finally:
        for p in procs:
            p.stdin.close()
        for p in procs:
            p.wait(timeout=60)


def _foreign(run: RunDir, ttl: float, renewals: int = 0, token: int = 1) -> None:
    """A lease record as a holder on another machine writes it."""
    now = time.time()
    rec = {"token": token, "owner": "elsewhere", "host": "another-host", "boot_id": "b", "pidns": "p", "pid": 1,
           "since": "then", "acquired": now, "renewed": now, "expires": now + ttl, "ttl_s": ttl,
           "renewals": renewals, "released": False}
    run.fs.makedirs(run.path("lease"), exist_ok=True)
    run.fs.pipe_file(run.path(f"lease/{token:010d}.json"), json.dumps(rec).encode())


def test_a_silent_holder_on_another_machine_is_waited_for_then_taken_over(run_url):
    run = RunDir(run_url)
    _foreign(run, ttl=1.5)
    t0 = time.monotonic()
    lease = Lease.acquire(run, ttl=1.5, renew=False)  # waits until it expires (+ its skew margin)
    assert lease.token == 2
    assert time.monotonic() - t0 > 1.0
    lease.release()


def test_a_holder_on_another_machine_that_renews_is_refused(run_url):
    run = RunDir(run_url)
    _foreign(run, ttl=3.0)
    stop = threading.Event()

    def renewing() -> None:  # a live holder: its renewals keep coming
        n = 0
        while not stop.wait(0.1):
            n += 1
            _foreign(run, ttl=3.0, renewals=n)
    thread = threading.Thread(target=renewing)
    thread.start()
    try:
        with pytest.raises(UsageError, match="is in use by another run: pid 1 on another-host"):
            Lease.acquire(run, ttl=3.0)
    finally:
        stop.set()
        thread.join()


def test_a_stale_holder_cannot_commit_anything(run_url):
    """A holder that stopped renewing (paused) while another run took its expired lease over:
    its job.json, metrics, checkpoint commit, checkpoint pruning and parameters are all refused,
    and what the new holder wrote stays as it is."""
    stale = RunDir(run_url)
    stale.lease = Lease.acquire(stale, ttl=1.2, renew=False)
    stale.write_json("job.json", {"by": "stale"})
    parts = Checkpoints(stale, keep=1)
    entry = parts.write_part(0, "worker-0", {"x": np.arange(3)})
    parts.commit(0, [entry], workers=1)
    fresh = RunDir(run_url)
    fresh.lease = until("takeover of the expired lease", _taken(fresh, ttl=60))
    assert fresh.lease.token == 2
    fresh.write_json("job.json", {"by": "fresh"})
    fresh.append_jsonl("metrics.jsonl", [{"superstep": 0}])
    before = {rel: fresh.read_bytes(rel) for rel in ("job.json", "metrics.jsonl", "checkpoints/ss-000000/manifest.json")}
    with pytest.raises(LeaseLost, match="lost its lease: lease 2 was taken by pid"):
        stale.write_json("job.json", {"by": "stale"})
    with pytest.raises(LeaseLost):
        stale.append_jsonl("metrics.jsonl", [{"superstep": 1}])
    entry = Checkpoints(fresh).write_part(1, "worker-0", {"x": np.arange(3)})  # (a worker's part: no lease)
    with pytest.raises(LeaseLost):
        parts.commit(1, [entry], workers=1)
    with pytest.raises(LeaseLost):
        parts.prune()
    with pytest.raises(LeaseLost):
        save_params(stale, [("w", np.ones(3))])
    assert {rel: fresh.read_bytes(rel) for rel in before} == before
    assert not fresh.exists("checkpoints/ss-000001/manifest.json") and not fresh.exists("params/index.json")
    fresh.lease.release()


def test_a_lapsed_lease_nobody_took_is_reclaimed_and_the_writes_go_on(run_url):
    """A storage outage (or a pause) longer than the lease: no other run came, so the holder
    takes the next epoch itself and its writes go on."""
    run = RunDir(run_url)
    run.lease = Lease.acquire(run, ttl=1.2, renew=False)
    expires = _epoch(run, 1)["expires"]
    until("the lease's expiry", lambda: time.time() > expires + 0.5)
    run.write_json("job.json", {"ok": True})
    assert run.lease.token == 2 and _epoch(run, 2)["pid"] == os.getpid()
    assert run.read_json("job.json") == {"ok": True}
    run.release_lease()


def test_the_renewal_thread_keeps_a_short_lease(tmp_path):
    run = RunDir(str(tmp_path / "run"))
    run.lease = Lease.acquire(run, ttl=1.2)
    first = _epoch(run, 1)
    until("two renewals", lambda: _epoch(run, 1)["renewals"] >= 2)
    assert _epoch(run, 1)["expires"] > first["expires"]
    run.release_lease()
    assert _epoch(run, 1)["released"] is True


def test_workers_still_fork_while_a_lease_renews(tmp_path):
    """The renewal thread does not make forking unsafe: it is paused while the workers fork."""
    from mariana.cluster.forking import fork_is_safe, fork_workers

    if fork_is_safe() is not None:
        pytest.skip(f"this test process cannot fork workers: {fork_is_safe()}")
    run = RunDir(str(tmp_path / "run"))
    run.lease = Lease.acquire(run, ttl=1.2)
    try:
        assert fork_is_safe() is None
        children = fork_workers(1, {}, lambda *a: None)  # type: ignore[arg-type,return-value]
        for child in children:
            assert child.release()
            assert child.wait(timeout=30) == 0
        assert run.lease._thread is not None and run.lease._thread.is_alive()
    finally:
        run.release_lease()
