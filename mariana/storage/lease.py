"""The run directory's lease: one run writes a run directory at a time, and a writer that lost
the lease (paused or cut off, then woken after another run took over) cannot commit.

Layout: ``RUN/lease/NNNNNNNNNN.json``, one file per epoch. The epoch number is the fencing
token: the lease is held by the newest epoch's owner, and taking it over means creating the
next epoch's file, an atomic create-if-absent that exactly one contender wins (a hard link of a
complete temp file on a local disk, ``If-None-Match: *`` on S3). The file records the holder
(host, pid, since when, the command) and when its lease expires; the holder rewrites its own
epoch's file to renew it (every ``ttl / 6`` seconds, on a thread) and marks it released when the
run ends. Nothing else ever writes an epoch's file.

A lease is free when its newest epoch is released, has expired (``expires`` plus a clock-skew
margin has passed on the taker's clock), or its holder is dead: the same machine (host name,
boot id and pid namespace all equal) and its pid gone or reused (a different start time). A
holder on another machine that is neither is waited for: until it renews (alive: refused) or
its lease expires (taken over). A held lease refuses a second run with one line naming the
holder (``UsageError``, exit 2).

Fencing: a writer of the run record (``RunDir`` with ``lease`` set: metrics, job.json,
checkpoint manifests, parameters) calls ``check`` before it commits. The holder trusts its lease
for ``ttl - skew`` seconds after a renewal began (no other run can take it over before ``ttl +
skew``); past that it renews first, and a lease that may have lapsed is reclaimed the way a
taker takes it, by creating the next epoch: if another run got there first, ``check`` raises
``LeaseLost`` and nothing is written. The limit: a check and the write after it are two calls
to storage, so a write that takes longer than the skew margin after a check that passed at the
last moment may land after a takeover; S3 has no way to make a PUT conditional on another
object.

Expiry (``MARIANA_LEASE_TTL_S``, default 120 s, the default storage retry window): a storage
outage shorter than that never lets the lease lapse, and after a longer one the holder reclaims
it unless another run took it meanwhile. A Slurm job requeued after its master was killed
starts ``cred_expire`` + 1 s later (121 s by default): on the same node the dead pid frees the
lease at once, on another node it has expired by then (at worst it waits out the rest).
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import posixpath
import re
import socket
import sys
import threading
import time
import uuid
import weakref
from contextlib import contextmanager, suppress
from typing import Any, Iterator

from ..errors import StorageError, UsageError
from .localfs import LocalFS
from .retry import cause, env_seconds, retrying

log = logging.getLogger(__name__)

__all__ = ["Lease", "LeaseLost", "ENV_TTL", "DEFAULT_TTL_S", "lease_ttl", "machine", "pid_alive", "paused_renewals",
           "renewal_threads", "holder_line", "start_time"]

ENV_TTL = "MARIANA_LEASE_TTL_S"
DEFAULT_TTL_S = 120.0
FOLDER = "lease"
_NAME = re.compile(r"^(\d{10})\.json$")


class LeaseLost(StorageError):
    """This process's lease on a run directory was taken over by another run: it must not write."""


def lease_ttl() -> float:
    """Seconds a lease lasts without a renewal (``MARIANA_LEASE_TTL_S``, at least 1)."""
    return env_seconds(ENV_TTL, DEFAULT_TTL_S, least=1.0)


def _skew(ttl: float) -> float:
    """How far two hosts' clocks (and one write's duration) may be apart: 10 s, less for a short lease."""
    return min(10.0, ttl / 6)


def _read_text(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def machine() -> dict[str, str]:
    """What makes a pid mean the same process: host name, boot id (a reboot reuses pids) and pid
    namespace (containers on one host may share its name)."""
    ns = ""
    with suppress(OSError):
        ns = os.readlink("/proc/self/ns/pid")
    return {"host": socket.gethostname(), "boot_id": _read_text("/proc/sys/kernel/random/boot_id"), "pidns": ns}


def start_time(pid: int) -> str:
    """When process ``pid`` started (clock ticks since boot, /proc), "" where unknown."""
    stat = _read_text(f"/proc/{pid}/stat")
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else ""


def pid_alive(pid: int, start: str = "") -> bool:
    """Whether process ``pid`` of this machine runs (and, with ``start``, is the one that started then)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    return not start or not (now := start_time(pid)) or now == start


def _same_machine(rec: dict[str, Any]) -> bool:
    here = machine()
    return all(rec.get(k) == here[k] for k in ("host", "boot_id", "pidns")) and bool(here["boot_id"])


def holder_alive(rec: dict[str, Any]) -> bool | None:
    """True: the holder runs; False: it is dead; None: it is on another machine (unknown)."""
    if not _same_machine(rec) or not isinstance(rec.get("pid"), int):
        return None
    return pid_alive(rec["pid"], str(rec.get("pid_start") or ""))


def holder_line(rec: dict[str, Any]) -> str:
    """``pid P on HOST since T`` (and the command, when recorded)."""
    what = f"pid {rec.get('pid', '?')} on {rec.get('host', '?')} since {rec.get('since', '?')}"
    return f"{what} ({rec['command']})" if rec.get("command") else what


# -- the renewal threads, paused around a fork (``cluster.forking``) -----------------------------
_leases: "weakref.WeakSet[Lease]" = weakref.WeakSet()
_registry_lock = threading.Lock()


def renewal_threads() -> set[threading.Thread]:
    """The lease renewal threads running now (a fork pauses them: ``paused_renewals``)."""
    with _registry_lock:
        return {t for lease in _leases if (t := lease._thread) is not None and t.is_alive()}


@contextmanager
def paused_renewals() -> Iterator[None]:
    """No renewal thread runs inside the block (a child forked there inherits no lock one held);
    they start again after it. The lease stays valid meanwhile for the rest of its ``ttl``."""
    with _registry_lock:
        running = [lease for lease in _leases if lease._thread is not None]
    for lease in running:
        lease._stop_renewing()
    try:
        yield
    finally:
        for lease in running:
            if lease.token is not None and lease._lost is None:
                lease._start_renewing()


class Lease:
    """This process's lease on ``run_dir`` (``acquire``), or none yet."""

    def __init__(self, run_dir: Any, ttl: float | None = None) -> None:
        self.run_dir = run_dir
        self.ttl = lease_ttl() if ttl is None else ttl
        self.skew = _skew(self.ttl)
        self.token: int | None = None
        self.record: dict[str, Any] = {}
        self._confirmed = 0.0  # monotonic time the last successful renewal (or the acquisition) began
        self._lost: str | None = None
        self._lock = threading.RLock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.local = isinstance(run_dir.fs, LocalFS)
        self.folder = run_dir.path(FOLDER)

    # -- taking and giving back -------------------------------------------------------------------
    @classmethod
    def acquire(cls, run_dir: Any, *, wait: bool = True, renew: bool = True, ttl: float | None = None) -> "Lease":
        """Take the lease on ``run_dir``, or raise ``UsageError`` naming its holder.

        A free lease is taken at once (the next epoch). A holder on this machine that runs is
        refused at once; one on another machine is watched until it renews (refused) or its lease
        expires (taken over), unless ``wait`` is false. ``renew``: keep it on a thread (tests of
        fencing leave it off)."""
        lease = cls(run_dir, ttl)
        lease._take(wait)
        if renew:
            lease._start_renewing()
        return lease

    def _take(self, wait: bool) -> None:
        watched: tuple[int, Any] | None = None
        while True:
            newest = self._newest()
            n, rec = newest if newest is not None else (0, None)
            why = self._free(rec)
            if why is not None:
                begin_m, mine = time.monotonic(), self._mine(n + 1)
                if self._create(n + 1, mine):
                    if rec is not None and why != "released":
                        log.warning("%s: taking over the lease of %s (%s)", self.run_dir.url, holder_line(rec), why)
                    self.token, self.record, self._confirmed = n + 1, mine, begin_m
                    self._prune(n)
                    with _registry_lock:
                        _leases.add(self)
                    return
                continue  # another run took epoch n + 1 first: look at it
            assert rec is not None
            alive = holder_alive(rec)
            if alive or not wait:
                raise UsageError(self._refusal(n, rec))
            seen = (n, rec.get("renewals"))
            if watched is None:
                watched = seen
                left = float(rec.get("expires", 0)) + self.skew - time.time()
                log.warning("%s is in use by %s; waiting up to %.0fs for it to renew its lease (then this run is "
                            "refused) or let it expire (a dead holder: then this run takes over)",
                            self.run_dir.url, holder_line(rec), left)
            elif seen != watched:
                raise UsageError(self._refusal(n, rec))
            left = float(rec.get("expires", 0)) + self.skew - time.time()
            time.sleep(max(0.05, min(2.0, self.ttl / 20, left)))

    def _free(self, rec: dict[str, Any] | None) -> str | None:
        """Why the lease of ``rec`` (the newest epoch) is free, or None while it is held."""
        if rec is None:
            return "none"
        if rec.get("released"):
            return "released"
        try:
            expires = float(rec["expires"])
        except (KeyError, TypeError, ValueError):
            return "no expiry recorded"
        try:
            skew = _skew(float(rec.get("ttl_s", self.ttl)))  # the holder's margin: it stops writing that early
        except (TypeError, ValueError):
            skew = self.skew
        if time.time() > expires + skew:
            return f"it expired {time.time() - expires:.0f}s ago"
        if holder_alive(rec) is False:
            return "that process has ended"
        return None

    def _refusal(self, n: int, rec: dict[str, Any]) -> str:
        return (f"{self.run_dir.url} is in use by another run: {holder_line(rec)} (lease {n}, renewed "
                f"{max(0.0, time.time() - float(rec.get('renewed', time.time()))):.0f}s ago); wait for it to end "
                f"or give another run directory")

    def _mine(self, token: int) -> dict[str, Any]:
        now = time.time()
        return {"token": token, "owner": uuid.uuid4().hex, **machine(), "pid": os.getpid(),
                "pid_start": start_time(os.getpid()), "since": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(now)),
                "acquired": now, "renewed": now, "expires": now + self.ttl, "ttl_s": self.ttl, "renewals": 0,
                "released": False, "command": " ".join(["mariana", *sys.argv[1:]])[:200] if sys.argv else ""}

    def release(self) -> None:
        """Give the lease back (its epoch marked released: the next run takes it at once). Idempotent."""
        self._stop_renewing()
        with self._lock:
            if self.token is None:
                return
            token, self.token = self.token, None
            if self._lost is None:
                rec = {**self.record, "released": True, "renewed": time.time(), "expires": time.time()}
                try:
                    self._overwrite(token, rec)
                except StorageError as exc:  # it expires by itself
                    log.warning("could not release the lease on %s: %s", self.run_dir.url, exc)
            self._lost = self._lost or "released"
        with _registry_lock:
            _leases.discard(self)

    # -- fencing ----------------------------------------------------------------------------------
    def check(self) -> None:
        """Raise ``LeaseLost`` unless this process still holds the lease (renewing it first when
        the last renewal is too old to trust): the fence before every commit to the run record."""
        if self._lost is not None:
            raise LeaseLost(self._lost_line())
        if time.monotonic() - self._confirmed < self.ttl - self.skew:
            return
        self.renew()

    def _lost_line(self) -> str:
        if self._lost == "released":
            return f"{self.run_dir.url}: this run's lease was released; it writes nothing more"
        return f"{self.run_dir.url}: this run lost its lease: {self._lost}; it writes nothing more"

    def renew(self) -> None:
        """Extend the lease by ``ttl``; one that may have lapsed is reclaimed as the next epoch."""
        with self._lock:
            if self._lost is not None:
                raise LeaseLost(self._lost_line())
            assert self.token is not None
            begin_m, begin_w = time.monotonic(), time.time()
            if begin_m - self._confirmed >= self.ttl - self.skew:
                return self._reclaim(begin_m, begin_m - self._confirmed)
            rec = {**self.record, "renewed": begin_w, "expires": begin_w + self.ttl,
                   "renewals": int(self.record.get("renewals", 0)) + 1}
            self._overwrite(self.token, rec)
            self.record = rec
            if time.monotonic() - self._confirmed >= self.ttl - self.skew:  # landed late: a taker may have judged it lapsed
                return self._reclaim(begin_m, time.monotonic() - self._confirmed)
            if (taken := self._read(self.token + 1)) is not None:
                self._lose(taken)
            self._confirmed = begin_m

    def _reclaim(self, begin_m: float, idle: float) -> None:
        """The lease went ``idle`` seconds without a renewal (a pause, a storage outage): take the
        next epoch as any taker would, or learn that another run has."""
        assert self.token is not None
        mine = {**self._mine(self.token + 1), "owner": self.record.get("owner"), "since": self.record.get("since"),
                "acquired": self.record.get("acquired")}
        if self._create(self.token + 1, mine):
            log.warning("%s: the lease went %.0fs without a renewal; reclaimed as lease %d", self.run_dir.url, idle,
                        self.token + 1)
            self.token, self.record, self._confirmed = self.token + 1, mine, begin_m
            return
        self._lose(self._read(self.token + 1) or {"token": self.token + 1})

    def _lose(self, taken: dict[str, Any]) -> None:
        by = f" by {holder_line(taken)}" if "pid" in taken else ""
        self._lost = f"lease {taken.get('token', '?')} was taken{by}"
        log.error("%s", self._lost_line())
        raise LeaseLost(self._lost_line())

    def _start_renewing(self) -> None:
        if self._thread is not None:
            return
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renewing, args=(self._stop,), name="mariana-lease", daemon=True)
        self._thread.start()

    def _stop_renewing(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            if thread is not threading.current_thread():
                thread.join()

    def _renewing(self, stop: threading.Event) -> None:
        while not stop.wait(self.ttl / 6):
            try:
                self.renew()
            except LeaseLost:
                return
            except Exception as exc:  # noqa: BLE001 - storage away: the writers' check renews or refuses
                log.warning("could not renew the lease on %s: %s", self.run_dir.url, exc)

    # -- the epoch files --------------------------------------------------------------------------
    def _retry(self, what: str, call: Any) -> Any:
        try:
            return retrying(f"{what} {self.run_dir.url}/{FOLDER}", call, offload=self.run_dir.remote)
        except StorageError:
            raise
        except Exception as exc:  # noqa: BLE001 - any filesystem failure: one clear error
            raise StorageError(f"cannot {what} {self.run_dir.url}/{FOLDER}: {cause(exc)}") from exc

    def _path(self, n: int) -> str:
        return posixpath.join(self.folder, f"{n:010d}.json")

    def _epochs(self) -> list[int]:
        def ls() -> list[str]:
            if self.local:
                try:
                    return os.listdir(self.folder)
                except FileNotFoundError:
                    return []
            self.run_dir.fs.invalidate_cache(self.folder)
            try:
                return [posixpath.basename(str(p).rstrip("/")) for p in self.run_dir.fs.ls(self.folder, detail=False)]
            except FileNotFoundError:
                return []
        return sorted(int(m.group(1)) for name in self._retry("listing", ls) if (m := _NAME.match(name)))

    def _newest(self) -> tuple[int, dict[str, Any]] | None:
        for _ in range(10):  # an epoch pruned between the listing and the read: list again
            epochs = self._epochs()
            if not epochs:
                return None
            rec = self._read(epochs[-1])
            if rec is not None:
                return epochs[-1], rec
        raise StorageError(f"{self.run_dir.url}/{FOLDER}: its files keep changing; cannot read the lease")

    def _read(self, n: int) -> dict[str, Any] | None:
        path = self._path(n)

        def cat() -> bytes | None:
            try:
                if self.local:
                    with open(path, "rb") as f:
                        return f.read()
                # s3fs answers a read from a cached listing of the folder ("not found") when it has one
                self.run_dir.fs.invalidate_cache(self.folder)
                return self.run_dir.fs.cat_file(path)
            except FileNotFoundError:
                return None
        data = self._retry("reading", cat)
        if data is None:
            log.debug("%s: no lease %d", self.run_dir.url, n)
            return None
        try:
            rec = json.loads(data)
            if not isinstance(rec, dict):
                raise ValueError("not an object")
        except ValueError as exc:
            raise StorageError(f"{path}: not a lease record ({exc}); remove it if no run uses "
                               f"{self.run_dir.url}") from None
        return rec

    def _create(self, n: int, rec: dict[str, Any]) -> bool:
        """Create epoch ``n``'s file with ``rec`` unless it exists: whether this call created it."""
        data = (json.dumps(rec, indent=2, sort_keys=True) + "\n").encode()
        path = self._path(n)
        if self.local:
            return self._retry("taking the lease in", lambda: _link_create(path, data))

        def put() -> bool:
            self.run_dir.fs.makedirs(self.folder, exist_ok=True)
            try:
                self.run_dir.fs.pipe_file(path, data, mode="create")
            except Exception as exc:  # noqa: BLE001 - an existing object, or a real failure
                if not _exists_error(exc):
                    raise
                # a retried PUT that had landed finds its own object
                theirs = self._read(n)
                return theirs is not None and theirs.get("owner") == rec["owner"]
            return True
        return self._retry("taking the lease in", put)

    def _overwrite(self, n: int, rec: dict[str, Any]) -> None:
        data = (json.dumps(rec, indent=2, sort_keys=True) + "\n").encode()
        path = self._path(n)
        if self.local:
            self._retry("renewing the lease in", lambda: _replace(path, data))
        else:
            self._retry("renewing the lease in", lambda: self.run_dir.fs.pipe_file(path, data))

    def _prune(self, below: int) -> None:
        """Remove epochs older than ``below`` (best effort): the newest two tell a stale holder it lost."""
        for n in self._epochs():
            if n >= below:
                break
            with suppress(Exception):
                if self.local:
                    os.remove(self._path(n))
                else:
                    self.run_dir.fs.rm(self._path(n))


def _exists_error(exc: BaseException) -> bool:
    """Whether a conditional PUT failed because the object exists (412 PreconditionFailed; 409
    ConditionalRequestConflict: another conditional write to it is in flight)."""
    e: BaseException | None = exc
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, FileExistsError):
            return True
        response = getattr(e, "response", None)
        if isinstance(response, dict):
            code = str((response.get("Error") or {}).get("Code", ""))
            status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
            if code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (409, 412):
                return True
        e = e.__cause__ or e.__context__
    return False


def _tmp(path: str) -> str:
    return posixpath.join(posixpath.dirname(path), tmp_name(posixpath.basename(path)))


def _write_tmp(path: str, data: bytes) -> str:
    os.makedirs(posixpath.dirname(path), exist_ok=True)
    tmp = _tmp(path)
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return tmp


def _link_create(path: str, data: bytes) -> bool:
    """Create ``path`` holding ``data`` unless it exists, atomically: a hard link of a complete
    temp file (atomic on NFS too), so a reader never finds it half-written."""
    tmp = _write_tmp(path, data)
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
            raise
        try:  # a filesystem without hard links: an exclusive create, then the content
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    finally:
        with suppress(OSError):
            os.unlink(tmp)
    _fsync_dir(posixpath.dirname(path))
    return True


def _replace(path: str, data: bytes) -> None:
    tmp = _write_tmp(path, data)
    try:
        os.replace(tmp, path)
    finally:
        with suppress(OSError):
            os.unlink(tmp)


def _fsync_dir(path: str) -> None:
    with suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def host_tag() -> str:
    """This machine in a temporary's name: its host name, and a hash of its boot id and pid
    namespace (a pid names one process only within both)."""
    if not _HOST_TAG:
        here = machine()
        digest = hashlib.sha1(f"{here['boot_id']}/{here['pidns']}".encode()).hexdigest()[:6]
        _HOST_TAG.append(f"{re.sub(r'[^A-Za-z0-9-]', '-', socket.gethostname())[:24]}-{digest}")
    return _HOST_TAG[0]


_HOST_TAG: list[str] = []  # (after a fork the child's pid changes, not its machine)


def tmp_name(base: str) -> str:
    """The name of a temporary file that becomes ``base``: it names its writer (pid and machine),
    so that the next start can tell a killed writer's leftover from a live writer's file."""
    return f".{base}.{uuid.uuid4().hex[:12]}.{os.getpid()}@{host_tag()}.tmp"
