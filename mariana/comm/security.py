"""CURVE authentication and encryption for every socket of a job (ZeroMQ's built-in security).

Keys use pyzmq's ``zmq.auth`` certificate files. ``mariana keys init DIR`` makes the master's
keypair and an empty allow-list ``DIR/allowed/``; ``mariana keys add DIR NAME`` makes a worker
keypair and allows its public key. The master's sockets are CURVE servers that accept only
allow-listed client keys (a CURVE server without an authenticator would accept any key); every
worker's data socket is a CURVE server that accepts only the job's other workers, whose public
keys the master hands out in WELCOME. Secret key files must not be readable by others, and (as
ssh requires of ``~/.ssh``) the key directory, its ``allowed/`` and the public keys in it must not
be writable by others: whoever can write there can let any key in.
"""

from __future__ import annotations

import logging
import os
import stat
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import zmq
import zmq.auth

if TYPE_CHECKING:  # (its import brings asyncio and ssl: ~5 MB in every process; made only with CURVE)
    from zmq.auth.thread import ThreadAuthenticator

from ..errors import UsageError

log = logging.getLogger(__name__)

__all__ = ["Security", "init_keys", "add_key", "load_keypair", "load_public", "require_curve", "local_keys"]


def require_curve() -> None:
    if not zmq.has("curve"):
        raise UsageError("this libzmq has no CURVE support (pyzmq wheels include it; reinstall pyzmq from a wheel)")


def _check_private(path: Path) -> None:
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise UsageError(f"secret key file {path} is readable by others (mode {stat.S_IMODE(mode):04o}): "
                         f"run chmod 600 {path}")


def _check_not_writable(path: Path, what: str) -> None:
    """Refuse ``path`` when its group or others may write it (they could plant a key)."""
    mode = path.stat().st_mode
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UsageError(f"{what} {path} is writable by others (mode {stat.S_IMODE(mode):04o}), so anyone could "
                         f"add a key to it: run chmod go-w {path}")


def _load_allowed(keys_dir: str) -> set[bytes]:
    """The public keys of ``DIR/allowed/*.key``, refused if the directories or a key file there
    are group- or world-writable."""
    d = Path(keys_dir)
    allowed = d / "allowed"
    _check_not_writable(d, "key directory")
    if allowed.is_dir():
        _check_not_writable(allowed, "allow-list directory")
        for f in sorted(allowed.glob("*.key")):  # (what zmq.auth.load_certificates reads)
            _check_not_writable(f, "allowed public key file")
    return set(zmq.auth.load_certificates(str(allowed)))


def init_keys(directory: str) -> Path:
    """``DIR/master.key``, ``DIR/master.key_secret`` (mode 0600) and an empty ``DIR/allowed/``."""
    require_curve()
    d = Path(directory)
    if (d / "master.key_secret").exists():
        raise UsageError(f"{d} already holds a master key; refusing to overwrite it")
    d.mkdir(mode=0o755, parents=True, exist_ok=True)
    (d / "allowed").mkdir(mode=0o755, exist_ok=True)
    _check_not_writable(d, "key directory")
    _check_not_writable(d / "allowed", "allow-list directory")
    public, secret = zmq.auth.create_certificates(str(d), "master")
    os.chmod(secret, 0o600)
    os.chmod(public, 0o644)  # (written under the umask: not group-writable whatever it is)
    return Path(secret)


def add_key(directory: str, name: str) -> Path:
    """A worker keypair ``DIR/NAME.key_secret`` (0600) whose public key goes to ``DIR/allowed/NAME.key``."""
    require_curve()
    d = Path(directory)
    if not (d / "allowed").is_dir():
        raise UsageError(f"{d} is not a key directory: run `mariana keys init {d}` first")
    if not name or "/" in name or name == "master":
        raise UsageError(f"bad key name {name!r}")
    if (d / f"{name}.key_secret").exists():
        raise UsageError(f"{d / name}.key_secret already exists")
    _check_not_writable(d, "key directory")
    _check_not_writable(d / "allowed", "allow-list directory")
    public, secret = zmq.auth.create_certificates(str(d), name)
    os.chmod(secret, 0o600)
    os.chmod(public, 0o644)
    os.replace(public, d / "allowed" / f"{name}.key")
    return Path(secret)


def load_keypair(path: str) -> tuple[bytes, bytes]:
    """(public, secret) from a ``.key_secret`` file, refused if others can read it."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"no key file at {p}")
    try:
        public, secret = zmq.auth.load_certificate(str(p))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{p} is not a key file: {exc}") from None
    if not secret:  # a public key (.key) where the secret one belongs: say so, not "readable by others"
        raise UsageError(f"{p} holds only a public key; --key takes the secret key file (NAME.key_secret)")
    _check_private(p)
    return public, secret


def load_public(spec: str) -> bytes:
    """A public key: a ``.key`` file or the 40-character z85 text itself."""
    if len(spec) == 40 and not os.path.exists(spec):
        return spec.encode()
    public, _ = zmq.auth.load_certificate(spec)
    return public


def local_keys(workers: int) -> tuple[str, list[str]]:
    """A private temporary key directory for a one-machine secure run: (dir, worker secret files)."""
    d = tempfile.mkdtemp(prefix="mariana-keys-")
    os.chmod(d, 0o700)
    init_keys(d)
    return d, [str(add_key(d, f"worker-{i}")) for i in range(workers)]


class _AllowList:
    """ZAP credentials provider: exactly these public keys (z85) get in.

    A worker learns its peers' keys from WELCOME, and a peer that got its WELCOME first may
    already be connecting: until the list is set, the authenticator thread waits (bounded)."""

    def __init__(self, keys: set[bytes], ready: bool = True) -> None:
        self.keys = set(keys)
        self.ready = threading.Event()
        if ready:
            self.ready.set()

    def callback(self, domain: str, key: bytes) -> bool:
        self.ready.wait(timeout=30)
        ok = key in self.keys
        if not ok:
            log.warning("refused a CURVE client with an unknown key %s", key.decode(errors="replace"))
        return ok


@dataclass
class Security:
    """One process's CURVE identity, the master's public key, and who may connect to it."""

    public: bytes
    secret: bytes
    server_key: bytes | None = None  # the master's public key (workers)
    allowed: _AllowList = field(default_factory=lambda: _AllowList(set(), ready=False))
    _auth: ThreadAuthenticator | None = None

    @classmethod
    def for_master(cls, keys_dir: str) -> "Security":
        require_curve()
        public, secret = load_keypair(str(Path(keys_dir) / "master.key_secret"))
        allowed = _load_allowed(keys_dir)
        if not allowed:
            log.warning("the allow-list %s/allowed is empty: no worker can join (mariana keys add %s NAME)",
                        keys_dir, keys_dir)
        return cls(public, secret, allowed=_AllowList(allowed))

    @classmethod
    def for_worker(cls, key_file: str, server_key: bytes) -> "Security":
        require_curve()
        public, secret = load_keypair(key_file)
        return cls(public, secret, server_key=server_key)

    def start(self, ctx: zmq.Context) -> None:
        """Install the ZAP authenticator on ``ctx`` (every CURVE server socket of the process)."""
        from zmq.auth.thread import ThreadAuthenticator

        self._auth = ThreadAuthenticator(ctx)
        self._auth.start()
        self._auth.configure_curve_callback(domain="*", credentials_provider=self.allowed)

    def allow(self, keys: list[bytes | str]) -> None:
        """Exactly these clients may connect from now on (a worker's peers)."""
        self.allowed.keys = {k.encode() if isinstance(k, str) else k for k in keys} - {self.public}
        self.allowed.ready.set()

    def server(self, sock: zmq.Socket) -> None:
        sock.curve_secretkey = self.secret
        sock.curve_publickey = self.public
        sock.curve_server = True

    def client(self, sock: zmq.Socket, server_key: bytes) -> None:
        sock.curve_secretkey = self.secret
        sock.curve_publickey = self.public
        sock.curve_serverkey = server_key

    def stop(self) -> None:
        if self._auth is not None:
            self._auth.stop()
            self._auth = None

    def describe(self) -> dict[str, Any]:
        return {"public_key": self.public.decode()}
