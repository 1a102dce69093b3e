"""The ``mariana`` command. Errors are caught here, once: one line and exit 2 for bad input,
exit 1 with the vertex, superstep and traceback when a vertex program raises.

The command is a thin shell: ``parser.py`` declares the subcommands, ``run.py`` starts jobs
(``run``, ``master``, ``worker``) and ``inspect.py`` reads runs (``jobs``, ``params``,
``checkpoint``, ``trace``, ``report``, ``ui``, ``keys``); the work is done by the library.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from typing import Callable, Sequence

from ..errors import MarianaError, VertexError
from .data import cmd_data
from .inspect import cmd_checkpoint, cmd_jobs, cmd_keys, cmd_params, cmd_report, cmd_trace, cmd_ui
from .parser import build_parser
from .run import Terminated, cmd_master_from_env, cmd_run, cmd_worker
from .sweep import cmd_sweep

__all__ = ["main", "build_parser"]

#: Subcommand -> handler (``run`` and ``master`` go through ``cmd_run``).
COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "jobs": cmd_jobs, "params": cmd_params, "checkpoint": cmd_checkpoint, "trace": cmd_trace,
    "worker": cmd_worker, "keys": cmd_keys, "report": cmd_report, "ui": cmd_ui, "data": cmd_data,
    "sweep": cmd_sweep,
}


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated()


def main(argv: Sequence[str] | None = None) -> int:
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return _main(argv)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _main(argv: Sequence[str] | None) -> int:
    try:
        args = build_parser().parse_args(argv)
        chatty = args.command in ("master", "worker") and not args.quiet  # joins and leaves
        base = logging.INFO if chatty else logging.WARNING
        logging.basicConfig(level=base - 10 * min(args.verbose, 2), stream=sys.stderr,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        if getattr(args, "data_dir", None) and args.command in ("run", "master"):
            os.environ["MARIANA_DATA"] = args.data_dir  # spawned workers inherit it
        if args.command in COMMANDS:
            return COMMANDS[args.command](args)
        if args.command == "master" and args.from_env:
            return cmd_master_from_env(args)
        if args.command == "master" and args.bind is None:
            args.bind = "tcp://127.0.0.1:0"
        return cmd_run(args)
    except VertexError as exc:
        print(f"mariana: error: {exc}", file=sys.stderr)
        if exc.traceback_text:
            print(exc.traceback_text, file=sys.stderr, end="")
        return 1
    except MarianaError as exc:
        print(f"mariana: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except Terminated:
        print("mariana: terminated", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("mariana: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `mariana trace summary RUN | head`: the reader left, that is fine
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
