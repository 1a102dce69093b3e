"""``mariana report RUN --out report.html``: one self-contained HTML file about a run.

The file holds plotly.js, the run's snapshot and its figures, so it opens anywhere without a
network; it can be made while the run is still going and from any fsspec run directory.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ..storage import write_text
from .data import collect
from .figures import figures, plotly_js
from .page import render_page

log = logging.getLogger(__name__)

__all__ = ["report_html", "write_report"]


def report_html(run: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The report page of ``run``, the snapshot it shows and its figures."""
    snap = collect(run)
    figs = figures(snap)
    job = (snap.get("job") or {}).get("job") or "run"
    title = f"mariana report: {job} ({snap.get('status')})"
    page = render_page(title, plotly_js=plotly_js(), embedded={"snapshot": snap, "figures": figs,
                                                               "generated": time.time()})
    return page, snap, figs


def write_report(run: str, out: str) -> dict[str, Any]:
    """Write the report of ``run`` to ``out`` (a path or fsspec URL); returns a short summary."""
    page, snap, figs = report_html(run)
    write_text(out, page)
    log.info("wrote %s (%d bytes)", out, len(page))
    return {"run": run, "out": out, "bytes": len(page.encode()), "status": snap.get("status"),
            "superstep": snap.get("superstep"), "supersteps": snap["counters"]["supersteps"],
            "figures": sorted(figs)}
