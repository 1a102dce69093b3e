"""An emulated cluster on one machine: N hosts as Linux namespaces joined by a shaped bridge.

Each host has its own network, UTS and mount namespace: its own hostname (``h0``, ``h1``, ...),
its own address on a private subnet, its own ``/dev/shm`` and its own scratch directory (both
tmpfs mounted inside its mount namespace, so no other host and not the root namespace sees what
it writes there). Everything else is the machine's file system, so a process on a host sees the
project, its virtual environment and the test's temporary folders as on the machine itself.

The hosts' links meet in a bridge that lives in a network namespace of its own; no interface,
address or route is ever added to the root namespace. Each link is shaped in both directions
with ``tc tbf`` (``rate``, e.g. ``"1gbit"``; ``None``: unshaped). A link can be cut and restored
(``partition``/``heal``: the bridge's port goes down, packets are dropped silently as on a pulled
cable) and a host can be killed whole (``kill``: every process in its network namespace, its
/dev/shm and its scratch are gone; ``revive`` starts it again, empty).

    with Cluster(3, rate="1gbit") as c:
        p = c.hosts[1].popen([sys.executable, "-c", "..."])
        c.hosts[1].address            # "10.47.0.2"
        c.partition(1); c.heal(1); c.kill(2)

It needs root, ``ip netns``, ``tc``, ``unshare`` and ``nsenter`` (iproute2, util-linux);
``why_not()`` says what is missing. Names carry the creating process's pid and start time
(``mcluster-PID-START-SEQ-h1``): parallel runs do not collide, and each new Cluster first removes
what runs whose process is gone left behind (``sweep_stale``). ``close`` (also at exit) removes
every namespace, link and mount a Cluster made.

This module is test and benchmark infrastructure, independent of the mariana package: the tests
(tests/cluster/test_multihost.py) and the benchmarks (bench/) import it as ``netcluster``.
"""

from __future__ import annotations

import atexit
import ipaddress
import itertools
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any, Sequence

PREFIX = "mcluster"
NETNS_DIR = Path("/run/netns")
#: a namespace this module made: PREFIX-PID-START-SEQ-ROLE (ROLE: br, hN, probe)
NETNS_NAME = re.compile(rf"^{PREFIX}-(\d+)-(\d+)-(\d+)-(br|h\d+|probe)$")
#: a cluster's folder under the temporary directory: PREFIX-PID-START-SEQ
BASE_NAME = re.compile(rf"^{PREFIX}-(\d+)-(\d+)-(\d+)$")
TOOLS = ("ip", "tc", "unshare", "nsenter")
#: tc's rate units, in bits per second
_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12,
          "kibit": 2**10, "mibit": 2**20, "gibit": 2**30, "tibit": 2**40,
          "bps": 8, "kbps": 8 * 10**3, "mbps": 8 * 10**6, "gbps": 8 * 10**9, "tbps": 8 * 10**12}
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*$", re.IGNORECASE)


class ClusterUnavailable(RuntimeError):
    """This machine cannot run an emulated cluster (not root, no ``ip netns``, ...)."""


class ClusterError(RuntimeError):
    """A command that builds or changes the emulated cluster failed."""


def _start_time(pid: int) -> str:
    """Process ``pid``'s start (clock ticks since boot), "" where it does not exist."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[-1].split()
    except OSError:
        return ""
    return fields[19] if len(fields) > 19 else ""


def _owner_alive(pid: str, start: str) -> bool:
    """Whether the process that made a name (``pid`` started at ``start``) still runs."""
    return _start_time(int(pid)) == start


_ME = f"{os.getpid()}-{_start_time(os.getpid())}"
_SEQ = itertools.count(1)
_LIVE: set[Cluster] = set()
_LOCK = threading.Lock()
_WHY_NOT: list[str | None] = []


def rate_bits(rate: str) -> float:
    """A tc rate (``"1gbit"``, ``"200mbit"``, ``"10mbps"``) in bits per second."""
    m = _RATE.match(rate)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"rate {rate!r}: expected a number and one of {', '.join(_UNITS)} (tc's units)")
    return float(m.group(1)) * _UNITS[m.group(2).lower()]


def _cmd(argv: Sequence[str], timeout: float = 30) -> str:
    """Run a setup command; its stdout, or ClusterError naming it and its stderr."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ClusterError(f"{' '.join(argv)}: {exc}") from exc
    if done.returncode != 0:
        raise ClusterError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def why_not() -> str | None:
    """Why an emulated cluster cannot run here (one line), or None where it can."""
    if _WHY_NOT:
        return _WHY_NOT[0]
    reason: str | None = None
    if not sys.platform.startswith("linux"):
        reason = "network namespaces are Linux only"
    elif os.geteuid() != 0:
        reason = "the emulated cluster needs root (network namespaces, tc, mounts); .ci/run runs as root"
    elif missing := [t for t in TOOLS if shutil.which(t) is None]:
        reason = f"no {', '.join(missing)} (apt-get install iproute2 util-linux)"
    else:
        probe = f"{PREFIX}-{_ME}-0-probe"
        try:
            _cmd(["ip", "netns", "add", probe])
            _cmd(["ip", "netns", "exec", probe, "unshare", "--uts", "--mount", "--propagation", "slave", "true"])
        except ClusterError as exc:
            reason = f"ip netns is unavailable: {exc}"
        finally:
            if (NETNS_DIR / probe).exists():
                subprocess.run(["ip", "netns", "delete", probe], capture_output=True, timeout=30)
    _WHY_NOT.append(reason)
    return reason


def _ns_id(path: str | Path) -> tuple[int, int] | None:
    """The identity (device, inode) of the namespace at ``path``, None where there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def pids_in_netns(name: str) -> list[int]:
    """Every live process whose network namespace is ``name`` (as ``ip netns pids`` finds them)."""
    want = _ns_id(NETNS_DIR / name)
    if want is None:
        return []
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and _ns_id(f"/proc/{entry.name}/ns/net") == want:
            found.append(int(entry.name))
    return found


def _kill_netns(name: str, timeout: float = 20) -> None:
    """SIGKILL every process in network namespace ``name`` until none is left (a process that
    forks while this runs is found on the next pass)."""
    deadline = time.monotonic() + timeout
    while pids := pids_in_netns(name):
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if time.monotonic() > deadline:
            raise ClusterError(f"processes {pids} in network namespace {name} outlived SIGKILL for {timeout:.0f} s")
        time.sleep(0.01)


def _delete_netns(name: str) -> None:
    """Kill what runs in ``name``, then delete it (its veths go with it)."""
    if not (NETNS_DIR / name).exists():
        return
    _kill_netns(name)
    _cmd(["ip", "netns", "delete", name])


def sweep_stale() -> list[str]:
    """Remove the namespaces (with their processes) and folders of clusters whose creating
    process is gone (a crashed or killed run); returns what was removed."""
    removed = []
    if NETNS_DIR.is_dir():
        for entry in sorted(NETNS_DIR.iterdir()):
            m = NETNS_NAME.match(entry.name)
            if m and not _owner_alive(m.group(1), m.group(2)):
                _delete_netns(entry.name)
                removed.append(entry.name)
    tmp = Path(tempfile.gettempdir())
    for entry in sorted(tmp.glob(f"{PREFIX}-*")):
        m = BASE_NAME.match(entry.name)
        if m and entry.is_dir() and not _owner_alive(m.group(1), m.group(2)):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(str(entry))
    return removed


def wait_all(procs: Sequence[subprocess.Popen], logs: Sequence[Path], timeout: float) -> str | None:
    """Wait for every process (on any host) to end, at most ``timeout`` seconds, stopping at the
    first that fails; kill whatever still runs. None when all exited 0, else the exit codes and
    each log's tail."""
    deadline = time.monotonic() + timeout
    try:
        while any(p.poll() is None for p in procs):
            if time.monotonic() > deadline or any(p.returncode for p in procs if p.poll() is not None):
                break
            time.sleep(0.05)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    codes = [p.returncode for p in procs]
    if codes == [0] * len(procs):
        return None
    return f"exit codes {codes}\n" + "\n".join(f"--- {log.name}\n{log.read_bytes()[-2000:].decode(errors='replace')}"
                                              for log in logs)


def read_line(stream: IO[bytes], deadline: float) -> bytes:
    """One line from a pipe, or b"" at EOF or past ``deadline``."""
    buf = b""
    fd = stream.fileno()
    while not buf.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return b""
        chunk = os.read(fd, 1)
        if not chunk:
            return b""
        buf += chunk
    return buf


class Host:
    """One emulated host: a network namespace, and a holder process whose UTS and mount
    namespaces (hostname, /dev/shm, scratch) every process started here enters."""

    def __init__(self, cluster: Cluster, index: int, address: str) -> None:
        self.cluster = cluster
        self.index = index
        self.hostname = f"h{index}"
        self.netns = f"{cluster.tag}-h{index}"
        self.address = address
        #: this host's scratch directory (a tmpfs only this host sees; also its TMPDIR)
        self.scratch = cluster.base / self.hostname
        #: the bridge's port of this host's link (in the bridge's namespace)
        self.port = f"v{index}"
        self.holder: subprocess.Popen | None = None
        self._procs: list[subprocess.Popen] = []

    def __repr__(self) -> str:
        return f"Host({self.hostname}, {self.address}, {'up' if self.alive else 'dead'})"

    @property
    def alive(self) -> bool:
        """Whether the host runs (it was started and not killed)."""
        return self.holder is not None and self.holder.poll() is None

    def popen(self, argv: Sequence[str], env: dict[str, str] | None = None, cwd: str | Path | None = None,
              **kw: Any) -> subprocess.Popen:
        """Start ``argv`` on this host (``subprocess.Popen`` keywords pass through). ``env``
        (default: this process's) gets TMPDIR set to the host's scratch unless it names one;
        ``cwd`` (default: this process's) is a path as the host sees it. The Popen is the
        process itself (nsenter execs it), so its signals and exit status are the program's."""
        if not self.alive:
            raise ClusterError(f"{self.hostname} is not running (killed, or its cluster closed)")
        env = dict(os.environ if env is None else env)
        env.setdefault("TMPDIR", str(self.scratch))
        wd = str(cwd if cwd is not None else os.getcwd())
        enter = ["nsenter", f"--target={self.holder.pid}", "--net", "--uts", "--mount", f"--wd={wd}", "--"]
        p = subprocess.Popen([*enter, *argv], env=env, **kw)
        self._procs = [q for q in self._procs if q.poll() is None] + [p]
        return p

    def run(self, argv: Sequence[str], timeout: float = 60, check: bool = False, **kw: Any) -> subprocess.CompletedProcess:
        """Run ``argv`` on this host to its end, its output captured as text (``popen``'s keywords)."""
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        kw.setdefault("stdin", subprocess.DEVNULL)
        kw.setdefault("text", True)
        with self.popen(argv, **kw) as p:
            try:
                out, err = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
                raise
        done = subprocess.CompletedProcess(p.args, p.returncode, out, err)
        if check:
            done.check_returncode()
        return done

    def pids(self) -> list[int]:
        """Every process running on this host (its holder included)."""
        return pids_in_netns(self.netns)

    def path(self, path: str | Path) -> Path:
        """``path`` as this host sees it, reachable from outside (``/proc/HOLDER/root/...``):
        its /dev/shm and scratch hold what only this host sees."""
        if not self.alive:
            raise ClusterError(f"{self.hostname} is not running")
        return Path(f"/proc/{self.holder.pid}/root") / Path(path).relative_to("/")

    def _start(self) -> None:
        c = self.cluster
        ns, br = self.netns, c.bridge_ns
        _cmd(["ip", "netns", "add", ns])
        # no IPv6: its router solicitations and duplicate-address probes would be traffic of nobody's
        _cmd(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1",
              "net.ipv6.conf.default.disable_ipv6=1"])
        _cmd(["ip", "-n", br, "link", "add", self.port, "type", "veth", "peer", "name", "eth0", "netns", ns])
        _cmd(["ip", "-n", br, "link", "set", self.port, "master", c.bridge, "up"])
        _cmd(["ip", "-n", ns, "addr", "add", f"{self.address}/{c.network.prefixlen}", "dev", "eth0"])
        _cmd(["ip", "-n", ns, "link", "set", "eth0", "up"])
        _cmd(["ip", "-n", ns, "link", "set", "lo", "up"])
        c.shape(self.index, c.rates[self.index])
        self.scratch.mkdir(exist_ok=True)
        # slave propagation: the root namespace's `ip netns delete` reaches this namespace's copies
        # of /run/netns (a private copy would keep every namespace alive as long as this host)
        script = ('hostname "$1" && mount -t tmpfs -o "size=$2,mode=1777" "$3-shm" /dev/shm '
                  '&& mount -t tmpfs -o "size=$4,mode=1777" "$3-scratch" "$5" && echo ready && exec sleep infinity')
        log = open(c.base / f"{self.hostname}.holder.log", "wb")
        try:
            self.holder = subprocess.Popen(
                ["ip", "netns", "exec", ns, "unshare", "--uts", "--mount", "--propagation", "slave", "--",
                 "sh", "-c", script, "holder", self.hostname, c.shm_size, ns, c.scratch_size, str(self.scratch)],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log)
        finally:
            log.close()
        ready = read_line(self.holder.stdout, time.monotonic() + 30)
        self.holder.stdout.close()
        if ready != b"ready\n":
            self.holder.kill()
            self.holder.wait()
            why = (c.base / f"{self.hostname}.holder.log").read_text(errors="replace").strip()
            raise ClusterError(f"{self.hostname}: its namespaces did not come up: {why or 'no output'}")

    def _stop(self) -> None:
        _delete_netns(self.netns)
        # the kernel destroys a deleted namespace's veths a moment later (its cleanup work queue,
        # seconds behind under load): wait for the bridge's end, deleting it (and so the pair) if
        # it lingers
        br = self.cluster.bridge_ns
        deadline, linger = time.monotonic() + 30, time.monotonic() + 2
        while (NETNS_DIR / br).exists() and subprocess.run(
                ["ip", "-n", br, "link", "show", "dev", self.port], capture_output=True, timeout=30).returncode == 0:
            if time.monotonic() > deadline:
                raise ClusterError(f"{self.hostname}: the bridge's port {self.port} outlived its namespace")
            if time.monotonic() > linger:
                subprocess.run(["ip", "-n", br, "link", "del", "dev", self.port], capture_output=True, timeout=30)
            time.sleep(0.01)
        for p in [*self._procs, *([self.holder] if self.holder else [])]:
            p.wait()  # reaped: killed above with everything else in the namespace
        self._procs = []
        shutil.rmtree(self.scratch, ignore_errors=True)


class Cluster:
    """``n`` emulated hosts on a bridge, each link shaped to ``rate`` (``None``: unshaped).

    ``subnet`` holds the hosts' addresses (host i: the subnet's (i+1)-th address); it exists only
    inside the cluster's namespaces, so two clusters may use the same one. ``shm_size`` and
    ``scratch_size`` bound each host's /dev/shm and scratch (tmpfs: memory used as written)."""

    def __init__(self, n: int, rate: str | None = "1gbit", *, subnet: str = "10.47.0.0/24",
                 shm_size: str = "1g", scratch_size: str = "1g") -> None:
        reason = why_not()
        if reason:
            raise ClusterUnavailable(reason)
        self.network = ipaddress.ip_network(subnet)
        if n < 1 or n > self.network.num_addresses - 2:
            raise ValueError(f"{n} hosts: subnet {subnet} holds 1 to {self.network.num_addresses - 2}")
        if rate is not None:
            rate_bits(rate)
        sweep_stale()
        self.tag = f"{PREFIX}-{_ME}-{next(_SEQ)}"
        self.bridge_ns = f"{self.tag}-br"
        self.bridge = "br0"
        self.shm_size, self.scratch_size = shm_size, scratch_size
        self.rates: list[str | None] = [rate] * n
        self.base = Path(tempfile.gettempdir()) / self.tag
        self.base.mkdir(mode=0o755)
        self.hosts = [Host(self, i, str(self.network[i + 1])) for i in range(n)]
        self.closed = False
        with _LOCK:
            _LIVE.add(self)
        try:
            _cmd(["ip", "netns", "add", self.bridge_ns])
            _cmd(["ip", "-n", self.bridge_ns, "link", "add", self.bridge, "type", "bridge"])
            _cmd(["ip", "-n", self.bridge_ns, "link", "set", self.bridge, "up"])
            for h in self.hosts:
                h._start()
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Cluster({self.tag}, {self.hosts})"

    def _host(self, i: int) -> Host:
        if not 0 <= i < len(self.hosts):
            raise IndexError(f"host {i}: the cluster has hosts 0 to {len(self.hosts) - 1}")
        return self.hosts[i]

    def netns(self) -> list[str]:
        """The names of every network namespace this cluster holds now."""
        return sorted(p.name for p in NETNS_DIR.glob(f"{self.tag}-*"))

    def shape(self, i: int, rate: str | None) -> None:
        """Shape host ``i``'s link to ``rate`` both ways (tbf on each end; ``None``: unshaped)."""
        h = self._host(i)
        self.rates[i] = rate
        for ns, dev in ((h.netns, "eth0"), (self.bridge_ns, h.port)):
            if rate is None:
                subprocess.run(["tc", "-n", ns, "qdisc", "del", "dev", dev, "root"], capture_output=True, timeout=30)
                continue
            # a bucket of at least 2 ms at the rate (the timer's granularity) and of one 64 KB
            # GSO segment; a queue of 50 ms at the rate before tbf drops
            burst = max(int(rate_bits(rate) / 8 * 0.002), 96 * 1024)
            _cmd(["tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate,
                  "burst", str(burst), "latency", "50ms"])

    def partition(self, i: int) -> None:
        """Cut host ``i`` off: its bridge port goes down, its packets are dropped (no error
        reaches its processes: TCP retransmits, as behind a pulled cable)."""
        _cmd(["ip", "-n", self.bridge_ns, "link", "set", self._host(i).port, "down"])

    def heal(self, i: int) -> None:
        """Restore host ``i``'s link after ``partition``."""
        _cmd(["ip", "-n", self.bridge_ns, "link", "set", self._host(i).port, "up"])

    def kill(self, i: int) -> None:
        """Kill host ``i`` whole: every process in it (SIGKILL), its link, /dev/shm and scratch."""
        h = self._host(i)
        h._stop()
        h.holder = None

    def revive(self, i: int) -> None:
        """Start a killed host ``i`` again, with its name and address, an empty /dev/shm and scratch."""
        h = self._host(i)
        if h.alive:
            raise ClusterError(f"{h.hostname} is running")
        h._start()

    def link_bytes(self, i: int) -> dict[str, int]:
        """Bytes that crossed host ``i``'s link since it was made: ``sent`` by the host,
        ``received`` by it (the bridge port's counters)."""
        out = _cmd(["ip", "-n", self.bridge_ns, "-j", "-s", "link", "show", "dev", self._host(i).port])
        stats = json.loads(out)[0]["stats64"]
        return {"sent": int(stats["rx"]["bytes"]), "received": int(stats["tx"]["bytes"])}

    def close(self) -> None:
        """Kill every host and remove every namespace, link, mount and folder of this cluster."""
        if self.closed:
            return
        self.closed = True
        errors = []
        for h in self.hosts:
            try:
                h._stop()
                h.holder = None
            except ClusterError as exc:
                errors.append(str(exc))
        try:
            _delete_netns(self.bridge_ns)
        except ClusterError as exc:
            errors.append(str(exc))
        shutil.rmtree(self.base, ignore_errors=True)
        with _LOCK:
            _LIVE.discard(self)
        if errors:
            raise ClusterError("; ".join(errors))


#: the SeaweedFS listeners ``HostS3`` opens, each on a port of its own
S3_PORT_FLAGS = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
                 "filer.port", "filer.port.grpc", "s3.port", "s3.port.grpc")
S3_ACCESS_KEY = "mariana-cluster-access-key"
S3_SECRET_KEY = "mariana-cluster-secret-key-0123456789"
S3_REGION = "us-east-1"

#: weed's (verbosity 4) line as a GET starts streaming: the byte range it sends
_RANGE_LINE = re.compile(r"streamFromVolumeServers: entry has \d+ chunks, totalSize=(\d+), isRange=\w+, "
                         r"offset=(\d+), size=(\d+)")

#: on a host: create a bucket, write, read back, delete, until it works or the deadline passes
_S3_PROBE = r"""
import sys, time, uuid
import s3fs
deadline = time.monotonic() + float(sys.argv[1])
while True:
    try:
        fs = s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False,
                               config_kwargs={"connect_timeout": 2, "read_timeout": 10, "retries": {"max_attempts": 1}})
        fs.retries = 1
        b = f"ready-{uuid.uuid4().hex[:12]}"
        fs.mkdir(b)
        fs.pipe_file(f"{b}/probe", b"ready")
        assert fs.cat_file(f"{b}/probe") == b"ready"
        fs.rm(b, recursive=True)
        break
    except Exception as exc:
        if time.monotonic() > deadline:
            sys.exit(f"S3 not ready: {exc!r}")
        time.sleep(0.2)
"""

#: on a host: make bucket argv[1] (if missing), then upload each local file argv[2k] to key argv[2k+1]
_S3_PUT = r"""
import sys
import s3fs
fs = s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False)
if not fs.exists(sys.argv[1]):
    fs.mkdir(sys.argv[1])
for local, key in zip(sys.argv[2::2], sys.argv[3::2]):
    fs.put_file(local, f"{sys.argv[1]}/{key}")
"""


def _free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports free on the root namespace's loopback (held together so they differ)."""
    import socket

    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class HostS3:
    """A SeaweedFS S3 store (``weed server -filer -s3``) running on one emulated host, bound to that
    host's address only: the other hosts reach it across their links, the root namespace not at all.

        with Cluster(3) as c, HostS3(c.hosts[0], weed, tmp / "s3") as s3:
            s3.put("graph", {"g.e": local_file})      # uploaded from host 0 itself (no link crossed)
            c.hosts[1].popen([...], env={**os.environ, **s3.env()})   # reads s3://graph/g.e

    Its data, log (``log_path``) and configs live under ``workdir``; its ports are picked free on the
    machine, since weed names unix sockets in the shared /tmp after them; ``verbosity`` 4 logs each
    object read with its byte range (``range_reads``). ``env()`` points
    botocore/s3fs at it (path-style addressing, one identity). Needs ``s3fs`` in this interpreter;
    ``stop`` (also on leaving the ``with``) kills it and removes its sockets."""

    def __init__(self, host: Host, weed: str, workdir: Path, timeout: float = 90, verbosity: int = 0) -> None:
        self.host, self.workdir = host, Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "tmp").mkdir(exist_ok=True)
        (self.workdir / "fsspec-config").mkdir(exist_ok=True)
        (self.workdir / "aws-config").write_text(f"[default]\nregion = {S3_REGION}\ns3 =\n    addressing_style = path\n")
        (self.workdir / "aws-credentials").write_text("")
        config = self.workdir / "s3.json"
        config.write_text(json.dumps({"identities": [{
            "name": "mariana-cluster", "credentials": [{"accessKey": S3_ACCESS_KEY, "secretKey": S3_SECRET_KEY}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
        self.ports = dict(zip(S3_PORT_FLAGS, _free_ports(len(S3_PORT_FLAGS))))
        self.endpoint_url = f"http://{host.address}:{self.ports['s3.port']}"
        self.log_path = self.workdir / "weed.log"
        data = self.workdir / "data"
        data.mkdir(exist_ok=True)
        argv = [weed, "-logtostderr=true", f"-v={verbosity}", "server", f"-ip={host.address}", f"-ip.bind={host.address}", f"-dir={data}",
                "-master.telemetry=false", "-master.volumeSizeLimitMB=64", "-volume.max=200",
                "-volume.preStopSeconds=0", "-filer", "-s3", f"-s3.config={config}",
                "-s3.port.iceberg=0", "-s3.port.lance=0",
                f"-filer.localSocket={self.workdir / 'tmp' / 'filer.sock'}",
                f"-s3.localSocket={self.workdir / 'tmp' / 's3.sock'}",
                *(f"-{flag}={port}" for flag, port in self.ports.items())]
        with open(self.log_path, "ab") as log:
            self.proc: subprocess.Popen | None = host.popen(
                argv, env={**os.environ, "TMPDIR": str(self.workdir / "tmp")}, cwd=self.workdir,
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        t0 = time.monotonic()
        try:
            done = self.run_python(_S3_PROBE, str(timeout), timeout=timeout + 30)
            if done.returncode != 0 or self.proc.poll() is not None:
                raise ClusterError(f"SeaweedFS on {host.hostname} ({self.endpoint_url}) did not serve S3: "
                                   f"{done.stderr.strip()[-500:]}\n--- {self.log_path}\n{self.log_tail()}")
        except BaseException:
            self.stop()
            raise
        #: seconds from its start to a bucket created, written, read back and deleted
        self.startup_s = time.monotonic() - t0

    def __enter__(self) -> HostS3:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def env(self) -> dict[str, str]:
        """Environment variables pointing botocore/s3fs (in any process on any host) at this store."""
        return {"AWS_ACCESS_KEY_ID": S3_ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": S3_SECRET_KEY,
                "AWS_DEFAULT_REGION": S3_REGION, "AWS_REGION": S3_REGION, "AWS_ENDPOINT_URL_S3": self.endpoint_url,
                "AWS_CONFIG_FILE": str(self.workdir / "aws-config"),
                "AWS_SHARED_CREDENTIALS_FILE": str(self.workdir / "aws-credentials"),
                "AWS_EC2_METADATA_DISABLED": "true", "FSSPEC_CONFIG_DIR": str(self.workdir / "fsspec-config")}

    def run_python(self, script: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """Run a Python ``script`` on this store's host with ``env()`` set (output captured)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "FSSPEC_"))}
        return self.host.run([sys.executable, "-c", script, *args], env={**env, **self.env()}, timeout=timeout)

    def put(self, bucket: str, files: dict[str, Path], timeout: float = 600) -> None:
        """Upload local ``files`` ({key: path}) into ``bucket`` (made if missing), from the store's own
        host, so the upload crosses no link."""
        done = self.run_python(_S3_PUT, bucket, *(str(a) for key, p in files.items() for a in (p, key)),
                               timeout=timeout)
        if done.returncode != 0:
            raise ClusterError(f"upload to s3://{bucket} failed: {done.stderr.strip()[-1000:]}")

    def range_reads(self, size: int) -> list[tuple[int, int]]:
        """(offset, bytes) of every GET the store served of an object of ``size`` bytes, in its log's
        order (needs ``verbosity`` >= 4: weed logs each GET's range as it starts streaming it; the
        size tells the objects apart where GETs of several interleave)."""
        reads = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            m = _RANGE_LINE.search(line)
            if m and int(m.group(1)) == size:
                reads.append((int(m.group(2)), int(m.group(3))))
        return reads

    def log_tail(self, n: int = 4000) -> str:
        return self.log_path.read_bytes()[-n:].decode(errors="replace") if self.log_path.exists() else "(no log)"

    def stop(self) -> None:
        """Kill the store (it keeps no state a test wants back) and remove its sockets in /tmp."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc = None
        for kind in ("master-grpc", "volume-grpc", "filer-grpc", "s3-grpc", "filer", "s3"):
            for port in self.ports.values():
                p = Path(f"/tmp/seaweedfs-{kind}-{port}.sock")
                if p.is_socket():
                    p.unlink(missing_ok=True)


@atexit.register
def _close_all() -> None:
    """Close the clusters still open when the interpreter exits."""
    for c in list(_LIVE):
        try:
            c.close()
        except ClusterError:
            pass
