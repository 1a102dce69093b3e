"""Superstep trace analysis (docs/traces.md): ``mariana trace summary|show|export``.

``load_trace(run)`` reads ``RUN/trace`` (analyze.py); ``summary``/``show`` (show.py) return JSON-able dicts that
``format_summary``/``format_show`` render; ``chrome_trace``/``export_chrome`` write the Chrome
Trace Event Format. ``cmd_summary``, ``cmd_show`` and ``cmd_export`` return (text, dict) for the CLI.
"""

from .analyze import PHASES, Trace, capture_rel, cmd_summary, format_summary, load_trace, summary
from .chrome import THREADS, chrome_trace, cmd_export, export_chrome, master_pid, thread_tid
from .show import cmd_show, format_show, show

__all__ = [
    "Trace", "load_trace", "summary", "format_summary", "show", "format_show", "chrome_trace", "export_chrome",
    "cmd_summary", "cmd_show", "cmd_export", "capture_rel", "PHASES", "THREADS",
    "master_pid", "thread_tid",
]
