"""Several hosts on one machine (bench/netcluster.py): each host a network, UTS and mount
namespace with its own hostname, /dev/shm and scratch, the hosts on a bridge in a namespace of its
own, links shaped with tc. First the emulated cluster itself (isolation, TCP through the bridge
only, shaping, partitions, killed hosts, cleanup), then the documented cross-host steps
(docs/across-hosts.md) for real: a master on host 0 and a worker on each of hosts 1 and 2 over
CURVE, bit-identical to the local runtime. Skips, saying why, where not root or without
``ip netns``."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import netcluster as nc  # noqa: E402

pytestmark = pytest.mark.timeout(60)

#: a host's probe: one command a line on stdin, one answer a line on stdout
PROBE = r"""
import socket, sys, threading

def echo(conn):
    with conn:
        while data := conn.recv(65536):
            conn.sendall(data)

def serve(srv):
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=echo, args=(conn,), daemon=True).start()

for line in sys.stdin:
    cmd, *args = line.split()
    try:
        if cmd == "listen":
            srv = socket.create_server((args[0], int(args[1])))
            threading.Thread(target=serve, args=(srv,), daemon=True).start()
            out = "ok"
        elif cmd == "connect":
            with socket.create_connection((args[0], int(args[1])), timeout=float(args[2])) as s:
                s.sendall(b"ping")
                out = "ok" if s.recv(4) == b"ping" else "bad echo"
        else:
            out = "unknown " + cmd
    except OSError as exc:
        out = "fail " + type(exc).__name__
    print(out, flush=True)
"""

#: receive on PORT until EOF; print bytes and seconds from the first byte to the last
RECEIVER = r"""
import json, socket, sys, time
srv = socket.create_server(("0.0.0.0", int(sys.argv[1])))
print("listening", flush=True)
conn, _ = srv.accept()
first = conn.recv(1 << 20)
t0, n = time.perf_counter(), 0
while data := conn.recv(1 << 20):
    n += len(data)
print(json.dumps({"bytes": n, "seconds": time.perf_counter() - t0}), flush=True)
"""

SENDER = r"""
import socket, sys
with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30) as s:
    s.sendall(b"\0" * int(sys.argv[3]))
"""


@pytest.fixture(autouse=True)
def _needs_namespaces() -> None:
    reason = nc.why_not()
    if reason:
        pytest.skip(reason)


@pytest.fixture
def cluster() -> Iterator:
    """``cluster(n, **kw)``: a started Cluster, closed (with every probe) at the test's end."""
    made: list[nc.Cluster] = []

    def make(n: int, **kw) -> nc.Cluster:
        made.append(nc.Cluster(n, **kw))
        return made[-1]

    try:
        yield make
    finally:
        for c in made:
            c.close()
        while _PROBES:
            _PROBES.pop().close()


class Probe:
    """A long-lived probe process on one host (``PROBE``); the ``cluster`` fixture closes it."""

    def __init__(self, host: nc.Host) -> None:
        self.host = host
        self.proc = host.popen([sys.executable, "-c", PROBE], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        _PROBES.append(self)

    def ask(self, line: str, timeout: float = 10) -> str:
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()
        answer = nc.read_line(self.proc.stdout, time.monotonic() + timeout)
        assert answer, f"{self.host.hostname}: no answer to {line!r} in {timeout} s (exit {self.proc.poll()})"
        return answer.decode().strip()

    def connect(self, address: str, port: int, timeout: float = 2) -> str:
        return self.ask(f"connect {address} {port} {timeout}", timeout + 10)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.proc.stdin.close()
        self.proc.stdout.close()


_PROBES: list[Probe] = []


def _until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"waiting for {what}: timed out after {timeout} s"
        time.sleep(0.02)


def _root_links() -> set[str]:
    return {link["ifname"] for link in json.loads(subprocess.run(["ip", "-j", "link"], capture_output=True, text=True,
                                                                  check=True).stdout)}


def _root_addresses() -> list[str]:
    out = json.loads(subprocess.run(["ip", "-j", "addr"], capture_output=True, text=True, check=True).stdout)
    return [a["local"] for link in out for a in link.get("addr_info", [])]


def _mounts_naming(text: str) -> list[str]:
    """Mount table lines of any process on the machine that contain ``text``."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                found += [f"{entry.name}: {line}" for line in Path(entry.path, "mountinfo").read_text().splitlines()
                          if text in line]
            except OSError:
                pass
    return found


def _pids_in(ns_ids: set[tuple[int, int]]) -> list[int]:
    """Processes whose network namespace is one of ``ns_ids``."""
    return [int(e.name) for e in os.scandir("/proc")
            if e.name.isdigit() and nc._ns_id(f"/proc/{e.name}/ns/net") in ns_ids]


def _dead(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] == "Z"
    except (OSError, IndexError):
        return True


def _leftovers(tag: str, ns_ids: set[tuple[int, int]]) -> list[str]:
    """Everything of cluster ``tag`` still on the machine: namespaces, processes, mounts, folders."""
    left = [f"netns {p.name}" for p in nc.NETNS_DIR.glob(f"{tag}-*")]
    left += [f"process {pid}" for pid in _pids_in(ns_ids)]
    left += [f"mount {m}" for m in _mounts_naming(tag)]
    left += [f"folder {p}" for p in Path("/tmp").glob(f"{tag}*")]
    return left


def test_each_host_has_its_own_hostname_shm_and_scratch(cluster) -> None:
    c = cluster(2)
    h0, h1 = c.hosts
    names = [h.run(["hostname"], check=True).stdout.strip() for h in c.hosts]
    assert names == ["h0", "h1"] and os.uname().nodename not in names
    mnt = [h.run(["readlink", "/proc/self/ns/mnt"], check=True).stdout for h in c.hosts]
    assert mnt[0] != mnt[1] != os.readlink("/proc/self/ns/mnt")
    mark = f"netcluster-mark-{os.getpid()}"
    h0.run(["sh", "-c", f'echo h0 > /dev/shm/{mark} && echo h0 > "$TMPDIR/{mark}"'], check=True)
    assert h0.run(["cat", f"/dev/shm/{mark}", f"{h0.scratch}/{mark}"], check=True).stdout == "h0\nh0\n"
    assert h0.path(f"/dev/shm/{mark}").read_text() == "h0\n"
    # neither host 1 nor the root namespace sees host 0's /dev/shm or scratch
    seen = h1.run(["sh", "-c", f"ls /dev/shm/{mark} {h0.scratch}/{mark}"])
    assert seen.returncode != 0 and seen.stdout == "", seen
    assert not Path("/dev/shm", mark).exists() and not (h0.scratch / mark).exists()
    devs = [h.run([sys.executable, "-c", "import os; print(os.stat('/dev/shm').st_dev)"], check=True).stdout
            for h in c.hosts]
    assert devs[0] != devs[1] != f"{os.stat('/dev/shm').st_dev}\n"


def test_hosts_reach_each_other_through_the_bridge_and_not_the_root_namespace(cluster) -> None:
    links_before = _root_links()
    c = cluster(3)
    p0, p1, p2 = (Probe(h) for h in c.hosts)
    assert p1.ask("listen 0.0.0.0 5000") == "ok"
    before = c.link_bytes(1)
    assert p0.connect(c.hosts[1].address, 5000) == "ok"
    assert p2.connect(c.hosts[1].address, 5000) == "ok"
    after = c.link_bytes(1)
    # both connections crossed host 1's link on the bridge (SYN, ping, FIN: > 100 bytes each way)
    assert after["received"] - before["received"] > 200 and after["sent"] - before["sent"] > 200, (before, after)
    assert _root_links() == links_before
    assert not [a for a in _root_addresses() if a.startswith("10.47.")]
    assert not subprocess.run(["ip", "route", "show", "10.47.0.0/24"], capture_output=True, text=True).stdout.strip()
    # a host's loopback is its own: the root namespace's listener on 127.0.0.1 is not there
    with socket.create_server(("127.0.0.1", 0)) as srv:
        assert p0.connect("127.0.0.1", srv.getsockname()[1]) == "fail ConnectionRefusedError"


def test_partition_cuts_a_host_off_and_heal_brings_it_back(cluster) -> None:
    c = cluster(3)
    p0, p1, p2 = (Probe(h) for h in c.hosts)
    for p in (p1, p2):
        assert p.ask("listen 0.0.0.0 5000") == "ok"
    assert p0.connect(c.hosts[1].address, 5000) == "ok"
    c.partition(1)
    assert p0.connect(c.hosts[1].address, 5000, timeout=0.5) == "fail TimeoutError"
    assert p1.connect(c.hosts[2].address, 5000, timeout=0.5) == "fail TimeoutError"
    assert p0.connect(c.hosts[2].address, 5000) == "ok"  # the others still talk
    c.heal(1)
    _until(lambda: p0.connect(c.hosts[1].address, 5000, timeout=0.5) == "ok", 20, "host 1 reachable after heal")
    assert p1.connect(c.hosts[2].address, 5000) == "ok"


def test_kill_takes_a_host_whole_and_revive_starts_it_empty(cluster) -> None:
    c = cluster(3)
    h2 = c.hosts[2]
    tree = h2.popen(["sh", "-c", 'sleep 600 & echo $!; echo x > /dev/shm/mark; echo x > "$TMPDIR/mark"; wait'],
                    stdout=subprocess.PIPE)
    child = int(nc.read_line(tree.stdout, time.monotonic() + 10))
    tree.stdout.close()
    _until(lambda: h2.path("/dev/shm/mark").exists() and h2.path(f"{h2.scratch}/mark").exists(), 10, "the marks")
    holder, pids = h2.holder.pid, h2.pids()
    assert {tree.pid, child, holder} <= set(pids)
    c.kill(2)
    assert tree.returncode == -signal.SIGKILL and not h2.alive
    _until(lambda: all(_dead(p) for p in pids), 10, f"host 2's processes {pids} to end")
    assert h2.netns not in c.netns() and not h2.scratch.exists()
    assert not _mounts_naming(f"{h2.netns}-")  # its /dev/shm and scratch tmpfs are unmounted everywhere
    with pytest.raises(nc.ClusterError, match="h2 is not running"):
        h2.popen(["true"])
    p0, p1 = Probe(c.hosts[0]), Probe(c.hosts[1])
    assert p1.ask("listen 0.0.0.0 5000") == "ok"
    assert p0.connect(c.hosts[1].address, 5000) == "ok"
    c.revive(2)
    assert h2.run(["sh", "-c", f'hostname; ls -A /dev/shm "$TMPDIR"; echo {h2.scratch}']).stdout == \
        f"h2\n/dev/shm:\n\n{h2.scratch}:\n{h2.scratch}\n"
    assert Probe(h2).connect(c.hosts[1].address, 5000) == "ok"


def test_nothing_is_left_after_the_cluster_even_when_the_test_fails() -> None:
    links = _root_links()
    with pytest.raises(RuntimeError, match="the test failed"):
        with nc.Cluster(3, rate="100mbit") as c:
            tag = c.tag
            ns_ids = {nc._ns_id(nc.NETNS_DIR / name) for name in c.netns()}
            assert len(ns_ids) == 4 and _leftovers(tag, ns_ids)
            for h in c.hosts:
                h.popen(["sh", "-c", "sleep 600 & sleep 600"])
            raise RuntimeError("the test failed")
    assert _leftovers(tag, ns_ids) == []
    assert _root_links() == links


def test_a_killed_runs_cluster_is_swept_by_the_next() -> None:
    code = ("import sys, time; sys.path.insert(0, sys.argv[1]); import netcluster as nc; "
            "c = nc.Cluster(2); print(c.tag, flush=True); time.sleep(600)")
    crashed = subprocess.Popen([sys.executable, "-c", code, str(ROOT / "bench")], stdout=subprocess.PIPE)
    try:
        tag = nc.read_line(crashed.stdout, time.monotonic() + 30).decode().strip()
        assert tag.startswith(f"{nc.PREFIX}-{crashed.pid}-"), tag
    finally:
        crashed.kill()
        crashed.wait()
        crashed.stdout.close()
    names = sorted(p.name for p in nc.NETNS_DIR.glob(f"{tag}-*"))
    ns_ids = {nc._ns_id(nc.NETNS_DIR / n) for n in names}
    assert len(names) == 3 and _pids_in(ns_ids), "the killed run's hosts are still there (their holders run)"
    removed = nc.sweep_stale()
    assert set(names) <= set(removed) and f"/tmp/{tag}" in removed
    assert _leftovers(tag, ns_ids) == []


@pytest.mark.slow
def test_a_shaped_links_throughput_is_near_its_rate(cluster) -> None:
    c = cluster(2, rate="200mbit")
    h0, h1 = c.hosts

    def measure(port: int, size: int) -> float:
        receiver = h1.popen([sys.executable, "-c", RECEIVER, str(port)], stdout=subprocess.PIPE)
        try:
            assert nc.read_line(receiver.stdout, time.monotonic() + 10) == b"listening\n"
            h0.run([sys.executable, "-c", SENDER, h1.address, str(port), str(size)], timeout=30, check=True)
            got = json.loads(nc.read_line(receiver.stdout, time.monotonic() + 30))
        finally:
            receiver.wait(timeout=10)
            receiver.stdout.close()
        assert got["bytes"] > size * 0.9
        return got["bytes"] * 8 / got["seconds"]

    sent = c.link_bytes(0)["sent"]
    fast = measure(5000, 25_000_000)  # ~1 s at 200 Mbit/s
    assert c.link_bytes(0)["sent"] - sent > 25_000_000
    c.shape(0, "50mbit")
    slow = measure(5001, 6_000_000)  # ~1 s at 50 Mbit/s
    # loose bounds: a busy machine may fall short of the rate, the token bucket overshoots it a little
    assert 0.5 * 200e6 < fast < 1.15 * 200e6, f"{fast / 1e6:.0f} Mbit/s on a 200 Mbit/s link"
    assert 0.5 * 50e6 < slow < 1.15 * 50e6, f"{slow / 1e6:.0f} Mbit/s on a 50 Mbit/s link"


def _mariana(*args: str) -> list[str]:
    return [sys.executable, "-m", "mariana", *args]


@pytest.mark.slow
def test_documented_steps_train_across_three_hosts_bit_identical_to_local(cluster, tmp_path) -> None:
    """docs/across-hosts.md as written, on three hosts: CURVE keys, the master on host 0 bound on
    its address, a worker on each of hosts 1 and 2 given the master file and its key."""
    sets = ["--set", "epochs=2"]
    c = cluster(3, rate="1gbit")
    h0, h1, h2 = c.hosts
    for step in (["keys", "init", "keys"], ["keys", "add", "keys", "host1"], ["keys", "add", "keys", "host2"]):
        h0.run(_mariana(*step), cwd=tmp_path, check=True)
    logs = {name: open(tmp_path / f"{name}.log", "w") for name in ("master", "worker1", "worker2")}
    procs: list[subprocess.Popen] = []
    try:
        procs.append(h0.popen(_mariana("master", "dnn-dp", "--bind", f"tcp://{h0.address}:7070", "--workers", "2",
                                       "--keys", "keys/", "--run-dir", "runs/hosts", *sets),
                              cwd=tmp_path, stdout=logs["master"], stderr=subprocess.STDOUT))
        master_file = tmp_path / "keys" / "master.json"
        _until(lambda: (master_file.exists() and master_file.stat().st_size > 0) or procs[0].poll() is not None,
               20, "keys/master.json")
        for i, h in ((1, h1), (2, h2)):
            procs.append(h.popen(_mariana("worker", "--master-file", "keys/master.json", "--key",
                                          f"keys/host{i}.key_secret"),  # (each binds its address on the route)
                                 cwd=tmp_path, stdout=logs[f"worker{i}"], stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 30
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        for f in logs.values():
            f.close()
    codes = [p.poll() for p in procs]
    text = "\n".join(f"--- {n}\n{(tmp_path / f'{n}.log').read_text()[-2000:]}" for n in logs)
    assert codes == [0, 0, 0], f"exit codes {codes}\n{text}"
    assert json.loads(master_file.read_text())["endpoint"].startswith(f"tcp://{h0.address}:")
    # the workers' traffic crossed their links, not loopback
    assert min(c.link_bytes(i)["sent"] for i in (1, 2)) > 100_000
    local = subprocess.run(_mariana("run", "dnn-dp", "--workers", "2", "--runtime", "local", *sets,
                                    "--run-dir", str(tmp_path / "runs" / "local")),
                           capture_output=True, text=True, timeout=30)
    assert local.returncode == 0, local.stderr
    hosts = {p.name: p.read_bytes() for p in sorted((tmp_path / "runs" / "hosts" / "params").glob("*.npy"))}
    reference = {p.name: p.read_bytes() for p in sorted((tmp_path / "runs" / "local" / "params").glob("*.npy"))}
    assert reference and hosts.keys() == reference.keys()
    assert [n for n in hosts if hosts[n] != reference[n]] == []
