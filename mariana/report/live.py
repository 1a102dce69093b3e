"""The live job page: a small read-only HTTP server (standard library) beside a running job.

``mariana run ... --ui [HOST:PORT]``, ``mariana master ... --ui`` and ``mariana ui RUN`` serve:

- ``/``                     the job page (the report's page, re-rendered every second)
- ``/api/state``            JSON: status, phase, current superstep, workers and hosts, counters
- ``/api/run``              JSON: the whole snapshot (``data.collect``) and its plotly figures
- ``/static/plotly.min.js`` plotly.js from the plotly package (no network needed)

Loopback by default; GET and HEAD only (anything else is 405); JSON only, no pickle. On a
loopback address only a loopback ``Host`` header (``localhost``, ``127.0.0.1``, ``[::1]`` or the
bound address, with the port) is answered, anything else is 421: a DNS-rebinding page on
another site cannot read the run's config, paths and pids. A connection idle for
``idle_timeout_s`` is closed, so that idle or half-open clients do not each hold a thread. The data
comes from the run directory, read again when a request finds it older than ``refresh_s`` (so a
page nobody watches costs the job nothing), plus what the job's ``on_superstep`` callback and the
cluster master report (the newest superstep, the workers still joining). Nothing here may stop
a job: every failure is logged and the job goes on.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ..errors import UsageError
from ..comm import is_loopback
from .data import collect, json_safe
from .page import render_page

log = logging.getLogger(__name__)

__all__ = ["LiveServer", "parse_address", "DEFAULT_UI"]

#: ``--ui`` without an address: loopback, a free port (the URL is printed on stderr).
DEFAULT_UI = "127.0.0.1:0"
_ADDR = re.compile(r"^(?:(?P<host>\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]*):)?(?P<port>\d{1,5})$")


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[V6]:PORT``, ``:PORT`` or ``PORT`` (host: loopback) -> (host, port)."""
    m = _ADDR.match(text.strip())
    if not m or int(m["port"]) > 65535:
        raise UsageError(f"--ui {text!r}: expected HOST:PORT (for example 127.0.0.1:8470) or a port number")
    host = (m["host"] or "127.0.0.1").strip("[]")
    return host, int(m["port"])


#: Seconds a connection may stay idle (or a request take to arrive) before the server closes it.
IDLE_TIMEOUT_S = 30.0
#: The names a page served on a loopback address is reached by, besides the bound address itself.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


def allowed_hosts(host: str, port: int) -> frozenset[str] | None:
    """The ``Host`` header values a server bound on ``host``:``port`` answers (lowercase), or None
    for any: a server bound on a non-loopback address is meant to be reached by other names."""
    if not is_loopback(host):
        return None
    names = set(LOOPBACK_NAMES) | {f"[{host}]" if ":" in host else host}
    hosts = {f"{n}:{port}" for n in names}
    if port == 80:  # a browser leaves the default port out
        hosts |= names
    return frozenset(h.lower() for h in hosts)


def master_view(master: Any) -> dict[str, Any]:
    """What a cluster master tells about itself (``Master.status()``: phase, superstep, joined workers)."""
    return master.status()


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"
    server_version = "mariana-ui"
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *args: Any) -> None:  # access log: debug only, never stdout
        log.debug("ui %s: " + fmt, self.address_string(), *args)

    def _send(self, code: int, body: bytes, ctype: str, cache: bool = False) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "max-age=3600" if cache else "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _host_ok(self) -> bool:
        """Whether the Host header names this server; if not, the request is refused with 421."""
        allowed = self.server.allowed_hosts
        host = (self.headers.get("Host") or "").strip().lower()
        if allowed is None or host in allowed:
            return True
        log.debug("job page: refused a request for Host %r from %s", host[:100], self.address_string())
        body = b"misdirected request: this job page answers to loopback Host names only"
        self.send_response(421)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        if self.command != "HEAD":
            self.wfile.write(body)
        return False

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        if not self._host_ok():
            return
        live = self.server.live
        path = self.path.split("?", 1)[0]
        try:
            if path in ("/", "/index.html"):
                self._send(200, live.page, "text/html; charset=utf-8")
            elif path == "/api/state":
                live.maybe_refresh()
                self._send(200, json.dumps(live.state(), allow_nan=False).encode(), "application/json")
            elif path == "/api/run":
                live.maybe_refresh()
                have = parse_qs(urlsplit(self.path).query).get("have", [""])[0]
                self._send(200, live.document(int(have) if have.isdigit() else None), "application/json")
            elif path == "/static/plotly.min.js":
                js = live.plotly_js()
                if js is None:
                    self._send(404, b"plotly is not installed: pip install 'mariana-bsp[report]'", "text/plain")
                else:
                    self._send(200, js, "application/javascript; charset=utf-8", cache=True)
            else:
                self._send(404, b"not found", "text/plain")
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as exc:  # a bug here must cost one request, never the job
            log.warning("job page: %s failed: %s", path, exc)
            try:
                self._send(500, f"error: {exc}".encode(), "text/plain")
            except OSError:
                pass

    do_HEAD = do_GET

    def _refuse(self) -> None:
        if not self._host_ok():
            return
        body = b"read-only: GET and HEAD only"
        self.send_response(405)
        self.send_header("Allow", "GET, HEAD")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _refuse


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    live: "LiveServer"
    allowed_hosts: frozenset[str] | None

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("job page: error serving %s", client_address, exc_info=True)


class LiveServer:
    """Serve the job page of run directory ``run`` at ``address`` (``HOST:PORT``)."""

    def __init__(self, run: str, address: str = DEFAULT_UI, refresh_s: float = 1.0,
                 idle_timeout_s: float = IDLE_TIMEOUT_S) -> None:
        self.run = run
        self.host, self.port = parse_address(address)
        self.refresh_s = refresh_s
        self.idle_timeout_s = idle_timeout_s
        self.url = ""
        self.page = render_page("mariana job", plotly_src="/static/plotly.min.js", api="/api/run",
                                state_api="/api/state").encode()
        self._lock = threading.Lock()
        self._doc = json.dumps({"snapshot": {"run": run, "status": "starting", "live": True}, "figures": {}}).encode()
        self._seq = 0  # which refresh self._doc is (a page that has it is sent only the live keys)
        self._snap: dict[str, Any] = {"run": run, "status": "starting"}
        self._line: dict[str, Any] = {}
        self._line_workers: list[dict[str, Any]] = []  # the newest line's per-worker counts
        self._status: tuple[str, str | None] | None = None
        self._master: Any = None
        self._server: _Server | None = None
        self._threads: list[threading.Thread] = []
        self._refreshing = threading.Lock()
        self._fresh_at = 0.0
        self._interval = refresh_s
        self._warned: set[str] = set()
        self._js: bytes | None = None
        self._js_loaded = False
        self._read_once = False

    # -- life cycle ---------------------------------------------------------------------------
    def start(self) -> str:
        """Bind and serve in background threads; returns the page's URL. An address that cannot be
        bound is a ``UsageError`` (the caller decides whether the job goes on without a page)."""
        if not is_loopback(self.host):
            log.warning("the job page at %s:%d is reachable from other hosts (read-only, no authentication)",
                        self.host, self.port)
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        server_cls = type("_BoundServer", (_Server,), {"address_family": family})
        # ``timeout``: http.server sets it on each connection, so one that sends nothing for that
        # long (idle keep-alive, half-open) is closed and its thread ends
        handler_cls = type("_TimedHandler", (_Handler,), {"timeout": self.idle_timeout_s})
        try:
            self._server = server_cls((self.host, self.port), handler_cls)
        except OSError as exc:
            raise UsageError(f"cannot serve the job page on {self.host}:{self.port}: {exc.strerror or exc}") from None
        self._server.live = self
        port = self._server.server_address[1]
        self._server.allowed_hosts = allowed_hosts(self.host, port)
        shown = f"[{self.host}]" if ":" in self.host else self.host
        self.url = f"http://{shown}:{port}/"
        t = threading.Thread(target=self._server.serve_forever, name="mariana-ui-http", daemon=True)
        t.start()
        self._threads.append(t)
        return self.url

    def close(self) -> None:
        """Stop serving and join the server thread."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        for t in self._threads:
            t.join(timeout=10)

    # -- what the job tells ---------------------------------------------------------------------
    def on_superstep(self, line: dict[str, Any]) -> None:
        """The job's per-superstep callback: remember the newest line (never raises)."""
        try:
            workers = [w for w in line.get("workers") or [] if isinstance(w, dict) and isinstance(w.get("worker"), int)]
            with self._lock:
                self._line = {k: v for k, v in line.items() if k != "workers"}
                self._line["at"] = time.time()
                self._line_workers = workers
        except Exception as exc:  # pragma: no cover - a dict copy; kept for the rule
            self._warn(f"superstep callback: {exc}")

    def attach(self, master: Any) -> None:
        """Show a cluster master's phase and joining workers."""
        self._master = master

    def set_status(self, status: str, error: str | None = None) -> None:
        """The job's end (finished, failed): shown at once, not only when job.json is read again."""
        with self._lock:
            self._status = (status, error)

    # -- data ----------------------------------------------------------------------------------
    def _warn(self, text: str) -> None:
        if text not in self._warned:
            self._warned.add(text)
            log.warning("job page: %s", text)

    def maybe_refresh(self) -> None:
        """Refresh if the data is older than the refresh interval and no other request is refreshing it.
        The interval is ``refresh_s``, or 5 times what the last refresh took on a big run, so that
        reading the run directory never takes more than a sixth of the job's process time."""
        if time.monotonic() - self._fresh_at < self._interval or not self._refreshing.acquire(blocking=False):
            return
        try:
            if time.monotonic() - self._fresh_at >= self._interval:
                t0 = time.monotonic()
                self.refresh()
                self._interval = max(self.refresh_s, 5 * (time.monotonic() - t0))
        finally:
            self._refreshing.release()

    def refresh(self) -> None:
        """Read the run directory again and rebuild the page's data (errors are logged, the old data stays)."""
        self._fresh_at = time.monotonic()
        try:
            snap = collect(self.run)
        except Exception as exc:  # the run directory may not exist yet, or a read may fail: keep going
            if self._read_once:
                self._warn(f"cannot read {self.run}: {exc}")
            else:  # the job has not written it yet (it does once its graph is built): try again soon
                log.debug("job page: %s not readable yet: %s", self.run, exc)
                self._fresh_at = time.monotonic() - self._interval + 0.1
            return
        self._read_once = True
        figs: dict[str, Any] = {}
        try:
            from .figures import figures

            figs = figures(snap)
        except UsageError as exc:  # plotly missing: the page shows the tables without plots
            self._warn(str(exc))
        except Exception as exc:
            self._warn(f"cannot draw the figures: {exc}")
        with self._lock:
            self._snap = snap
            doc = {"snapshot": self._overlay(dict(snap)), "figures": figs}
            self._doc = json.dumps(doc, allow_nan=False).encode()
            self._seq += 1

    def _overlay(self, snap: dict[str, Any]) -> dict[str, Any]:
        """What the job said since the run directory was read (caller holds the lock)."""
        snap["live"] = True
        snap["collected"] = time.time()
        ss = self._line.get("superstep")
        read = snap.get("superstep") if isinstance(snap.get("superstep"), int) else -1
        if isinstance(ss, int) and ss >= read and self._line_workers:
            # every worker in the newest line passed that superstep's barrier: the workers table
            # shows it, not the superstep of the run directory read up to a few seconds ago
            known = {w["worker"]: dict(w) for w in snap.get("workers") or []}
            for w in self._line_workers:
                row = known.setdefault(w["worker"], {"worker": w["worker"], "host": None, "pid": None})
                row.update(superstep=ss, computed=w.get("computed"), active=w.get("active"))
            snap["workers"] = [known[k] for k in sorted(known)]
        if self._master is not None:
            try:
                view = master_view(self._master)
            except Exception as exc:
                self._warn(f"cannot read the master's state: {exc}")
                view = {}
            snap["phase"] = view.get("phase")
            if view.get("workers"):
                known = {w["worker"]: dict(w) for w in snap.get("workers") or []}
                for w in view["workers"]:
                    row = known.setdefault(w["worker"], {"worker": w["worker"]})
                    row["host"], row["pid"] = row.get("host") or w["host"], row.get("pid") or w["pid"]
                snap["workers"] = [known[k] for k in sorted(known)]
            if isinstance(view.get("superstep"), int):
                snap["superstep"] = max(view["superstep"], snap.get("superstep") or -1)
            snap["workers_expected"] = view.get("workers_expected")
        ss = self._line.get("superstep")
        if isinstance(ss, int) and ss > (snap.get("superstep") if isinstance(snap.get("superstep"), int) else -1):
            snap["superstep"] = ss
        if self._status is not None:
            snap["status"], error = self._status
            if error:
                snap["error"] = error
        return snap

    def state(self) -> dict[str, Any]:
        """The small JSON of ``/api/state``."""
        with self._lock:
            snap = self._overlay(dict(self._snap))
        job = snap.get("job") or {}
        return json_safe({"run": self.run, "job": job.get("job"), "status": snap.get("status"), "phase": snap.get("phase"),
                "superstep": snap.get("superstep"), "workers": snap.get("workers") or [],
                "workers_expected": snap.get("workers_expected"), "counters": snap.get("counters") or {},
                # the job's newest line, or on a run read from its directory (`mariana ui`) the last one there
                "last_metrics": self._line_json() or snap.get("last_metrics") or {}, "error": snap.get("error"),
                "updated": snap.get("collected")})

    def _line_json(self) -> dict[str, Any]:
        """The job's newest line, JSON-safe: NaN and +-Inf values as null, strings as they are."""
        with self._lock:
            line = dict(self._line)
        return json_safe(line)

    #: The snapshot keys that what the job said since the run directory was read may change.
    LIVE_KEYS = ("status", "phase", "superstep", "workers", "workers_expected", "error", "live", "collected")

    def document(self, have: int | None = None) -> bytes:
        """The JSON of ``/api/run``: the snapshot and its figures as built at the last refresh (not
        encoded again per request), its number ``seq``, and under ``live`` the keys the job changed
        since (the page lays them over the snapshot). A page that has refresh ``have`` already
        gets ``{"live", "seq", "same": true}`` only: a megabyte less to read and draw each second."""
        with self._lock:
            snap = self._overlay(dict(self._snap))
            live = {k: snap.get(k) for k in self.LIVE_KEYS}
            head = b'{"live":' + json.dumps(json_safe(live), allow_nan=False).encode() + b',"seq":%d' % self._seq
            if have == self._seq:
                return head + b',"same":true}'
            return head + b"," + self._doc[1:]

    def plotly_js(self) -> bytes | None:
        if not self._js_loaded:
            try:
                from .figures import plotly_js

                self._js = plotly_js().encode()
            except UsageError as exc:
                self._warn(str(exc))
            self._js_loaded = True
        return self._js
