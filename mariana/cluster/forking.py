"""Local workers forked from the launching process instead of started as fresh interpreters.

A fresh ``python -m mariana worker`` spends ~0.2-0.25 s importing numpy, zmq, fsspec and
mariana before it can join, and that sits on the critical path of a short ``mariana run``. A
child forked from the ``mariana run`` process has every module imported already. It is forked
before this process makes any zmq context (the master's sockets, IO threads and CURVE
authenticator come after) and while only the main thread runs, blocks on a pipe until the master
is bound, then reads one JSON line, its ``WorkerSpec``, and runs the one worker entry
(``entry.run_worker``) with it and the ``build`` function it inherited. ``ForkedWorker`` is the
parent's handle on such a child, with the part of ``subprocess.Popen`` the launcher, the master
and the tests use.
"""

from __future__ import annotations

import atexit
import importlib.util
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from typing import NoReturn

from ..engine.threads import apply_thread_vars
from ..storage.lease import paused_renewals, renewal_threads
from .entry import WorkerSpec, configure_logging, report_error, run_worker
from .worker import GraphBuilder

log = logging.getLogger(__name__)

__all__ = ["ForkedWorker", "fork_workers", "fork_is_safe", "fork_holding_interrupts", "set_pdeathsig", "apply_thread_vars",
           "NO_FORK_VAR"]

#: Set to 1 to always start local workers as fresh interpreters (as ``--no-fork`` does).
NO_FORK_VAR = "MARIANA_NO_FORK"


def fork_is_safe() -> str | None:
    """None when local workers may be forked from this process now, else why not (for the debug log).

    Safe means: ``os.fork`` exists, no other Python thread runs (a lock held by another thread
    would stay locked forever in the child) and no zmq context of this process is open (a child
    must not inherit the master's context, sockets or IO threads), and the user did not opt out.
    A run directory's lease renewal thread does not count: ``fork_workers`` pauses it.
    """
    if os.environ.get(NO_FORK_VAR, "") not in ("", "0"):
        return f"{NO_FORK_VAR} is set"
    if not hasattr(os, "fork"):
        return "os.fork is not available"
    others = threading.active_count() - len(renewal_threads())  # (paused while it forks: fork_workers)
    if others != 1:
        return f"{others} threads run"
    if importlib.util.find_spec("threadpoolctl") is None:
        return "threadpoolctl is not installed (a forked worker sizes its BLAS threads with it)"
    from ..comm.zmqcomm import open_contexts

    if open_contexts():
        return "a zmq context is open in this process"
    return None


def _pidfd(pid: int) -> int | None:
    """A descriptor of child ``pid`` that turns readable when it exits (Linux 5.3+), or None
    where there are none (or the child is reaped already)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


class ForkedWorker:
    """A forked worker process, handled like a ``subprocess.Popen`` (pid, poll, wait, terminate,
    kill, returncode, args). It waits for ``start(argv)``; ``release()`` lets it exit 0 unstarted."""

    def __init__(self, pid: int, pipe: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.args: list[str] = []  # what `mariana worker` would have been started with
        self._pipe: int | None = pipe

    def start(self, spec: WorkerSpec) -> None:
        """Hand the child its ``WorkerSpec``: one JSON line."""
        self.args = [sys.executable, "-m", "mariana", *spec.argv()]  # what a spawned worker would run
        pipe, self._pipe = self._pipe, None
        assert pipe is not None, "a forked worker starts once"
        try:
            os.write(pipe, spec.to_json().encode() + b"\n")  # far below PIPE_BUF: one write
        except BrokenPipeError:
            pass  # it died already; poll() says how
        finally:
            os.close(pipe)

    def release(self) -> bool:
        """Close the pipe without a line: the child exits 0 (the job did not start). False if it had started."""
        if self._pipe is None:
            return False
        os.close(self._pipe)
        self._pipe = None
        return True

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: nothing more can be known (as Popen does)
                self.returncode = 0
            else:
                if pid == self.pid:
                    self.returncode = os.waitstatus_to_exitcode(status)  # -N for signal N, as Popen
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """The exit code; ``subprocess.TimeoutExpired`` if the child still runs after ``timeout`` s."""
        if timeout is None:
            while self.returncode is None:
                try:
                    _, status = os.waitpid(self.pid, 0)
                    self.returncode = os.waitstatus_to_exitcode(status)
                except ChildProcessError:
                    self.returncode = 0
            return self.returncode
        deadline, delay = time.monotonic() + timeout, 0.0005
        exited = _pidfd(self.pid)
        try:
            while (code := self.poll()) is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise subprocess.TimeoutExpired(self.args, timeout)
                if exited is not None:  # woken as the child exits (a sleep overshot it by up to 50 ms)
                    select.select([exited], [], [], left)
                else:
                    time.sleep(min(delay, left))
                    delay = min(2 * delay, 0.05)
            return code
        finally:
            if exited is not None:
                os.close(exited)

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __repr__(self) -> str:
        return f"<ForkedWorker pid={self.pid} returncode={self.returncode}>"


def fork_workers(n: int, thread_vars: dict[str, str], build: GraphBuilder,
                 die_with_parent: bool = False) -> list[ForkedWorker]:
    """Fork ``n`` children that wait for ``ForkedWorker.start``. ``thread_vars``: the BLAS/OpenMP
    thread variables a spawned worker would get (``engine.threads.thread_vars``); each child sizes its
    thread pools by them. ``build``: the job's graph builder the workers run. ``die_with_parent``
    (Linux): a child gets SIGKILL when this process dies (a sweep host's segment workers). Call
    only when ``fork_is_safe()``."""
    for stream in (sys.stdout, sys.stderr):  # buffered text must not be written twice
        stream.flush()
    children: list[ForkedWorker] = []
    try:
        with paused_renewals():  # no lease renewal thread runs (holding a lock) while it forks
            _fork_children(n, children, thread_vars, build, die_with_parent)
    except BaseException:
        for c in children:
            c.release()
            c.wait()
        raise
    return children


def _fork_children(n: int, children: list[ForkedWorker], thread_vars: dict[str, str], build: GraphBuilder,
                   die_with_parent: bool) -> None:
    """``fork_workers``'s loop: each child forked is appended to ``children`` as it is made."""
    for _ in range(n):
        read, write = os.pipe()
        pid = fork_holding_interrupts()
        if pid == 0:  # the child: never returns
            os.close(write)
            if die_with_parent:
                set_pdeathsig()
            for sibling in children:  # the parent's ends of earlier pipes: EOF must mean the parent
                if sibling._pipe is not None:
                    os.close(sibling._pipe)
            _child(read, thread_vars, build)
        os.close(read)
        children.append(ForkedWorker(pid, write))


def _child(pipe: int, thread_vars: dict[str, str], build: GraphBuilder) -> NoReturn:
    """A forked worker: wait for its spec, run the worker entry with it, exit with its code
    through ``os._exit`` (never back into the parent's stack, never the parent's exit handlers)."""
    code = 1
    try:
        atexit._clear()  # the parent's; the worker's own still run below
        _reset_signals()
        devnull = os.open(os.devnull, os.O_RDONLY)  # stdin as a spawned worker has it
        os.dup2(devnull, 0)
        os.close(devnull)
        with os.fdopen(pipe, "rb") as f:
            line = f.readline()
        if not line:  # the launch ended before the master bound: leave quietly
            code = 0
        else:
            spec = WorkerSpec.from_json(line)
            apply_thread_vars(thread_vars)
            root = logging.getLogger()
            for handler in list(root.handlers):  # logging afresh, as in a new process
                root.removeHandler(handler)
            root.setLevel(logging.WARNING)
            configure_logging(spec.verbosity)
            try:
                code = run_worker(spec, build)
            except Exception as exc:  # noqa: BLE001 - this child's process boundary
                code = report_error(exc)
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group, before the worker began too
        code = 130
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            atexit._run_exitfuncs()
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
        finally:
            os._exit(code)


def fork_holding_interrupts() -> int:
    """``os.fork`` with SIGINT held until it has returned, in both processes. A Ctrl-C that lands
    while the fork runs its own handlers (logging releases its locks there) is raised inside them,
    where Python reports it as ignored: the interrupted sweep or launch ran on to the end (a CI
    run of the sweep's Ctrl-C test). Held, it is raised once the fork is done."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        return os.fork()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def set_pdeathsig() -> None:
    """This process gets SIGKILL when its parent dies (Linux PR_SET_PDEATHSIG; elsewhere nothing)."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _reset_signals() -> None:
    """Signal handlers as a fresh interpreter has them: Python handlers of the parent (the test
    runner's alarm, a server's SIGTERM) are gone, SIGINT raises KeyboardInterrupt, ignored stay ignored."""
    signal.set_wakeup_fd(-1)
    for sig in signal.valid_signals():
        try:
            handler = signal.getsignal(sig)
        except (OSError, ValueError):
            continue
        if callable(handler) and sig != signal.SIGINT:
            signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
