"""The one page that shows a run: used whole by the HTML report and served by the live job page.

The page is static HTML plus a small script that renders a snapshot (``data.collect``) and its
figures (``figures.figures``): tables with the DOM's ``textContent`` (never ``innerHTML``, so
nothing in a run's config can inject markup) and plots with ``Plotly.react``. The report embeds
one snapshot; the live page fetches ``/api/run`` every second (only its live part when the
snapshot is unchanged) and ``/api/state`` five times a second, and renders what is newer.
"""

from __future__ import annotations

import html
import json
from functools import lru_cache
from importlib import resources
from typing import Any

__all__ = ["render_page", "json_for_script"]

FIGURE_ORDER = ("fig-loss", "fig-accuracy", "fig-samples", "fig-wall", "fig-progress", "fig-memory", "fig-other",
                "fig-timeline", "fig-stragglers")


@lru_cache(maxsize=1)
def _assets() -> tuple[str, str]:
    """The page's stylesheet and script (``static/page.css``, ``static/page.js``)."""
    static = resources.files(__package__).joinpath("static")
    css = static.joinpath("page.css").read_text(encoding="utf-8")
    script = static.joinpath("page.js").read_text(encoding="utf-8")
    return css, script.replace("__ORDER__", json.dumps(list(FIGURE_ORDER)))


def json_for_script(obj: Any) -> str:
    """JSON that is safe inside ``<script>``: ``<``, ``>`` and ``&`` as unicode escapes."""
    text = json.dumps(obj, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_page(title: str, *, plotly_js: str | None = None, plotly_src: str | None = None,
                embedded: dict[str, Any] | None = None, api: str | None = None, interval_ms: int = 1000,
                state_api: str | None = None, state_interval_ms: int = 200) -> str:
    """The page: plotly.js inline (``plotly_js``, for a self-contained report) or by URL
    (``plotly_src``, for the live page); data embedded (``embedded``) or polled from ``api``
    every ``interval_ms``, and the small state (status, superstep, workers) from ``state_api``
    every ``state_interval_ms``, so that the superstep shown keeps up with a fast job."""
    if plotly_js is not None:
        lib = "<script>" + plotly_js.replace("</script", "<\\/script") + "</script>"
    elif plotly_src is not None:
        lib = f'<script src="{html.escape(plotly_src)}"></script>'
    else:
        lib = ""
    data = ""
    if embedded is not None:
        data = f'<script type="application/json" id="run-data">{json_for_script(embedded)}</script>'
    attrs = f' data-api="{html.escape(api)}" data-interval="{int(interval_ms)}"' if api else ""
    if api and state_api:
        attrs += f' data-state-api="{html.escape(state_api)}" data-state-interval="{int(state_interval_ms)}"'

    css, script = _assets()
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title><style>{css}</style>{lib}</head>
<body{attrs}>
<header><h1 id="title">{html.escape(title)}</h1><div class="sub" id="subtitle"></div></header>
<main>
<div id="error" class="bad"></div>
<section><h2>Job</h2><div class="cards" id="counters"></div></section>
<section><h2>Curves</h2><p id="nofigs" class="muted">nothing to plot yet</p><div class="grid" id="figures"></div></section>
<section><h2>Workers</h2><div id="workers"></div></section>
<section><h2>Stragglers</h2><div id="stragglers"></div></section>
<section><h2>Checkpoints</h2><div id="checkpoints"></div></section>
<section><h2>Restarts</h2><div id="restarts"></div></section>
<section><h2>NaN / Inf flags</h2><div id="flags"></div></section>
<section><h2>Hangs</h2><div id="hangs"></div></section>
<section><h2>Config</h2><pre id="config"></pre><h2>Run</h2><pre id="jobinfo"></pre></section>
</main>
{data}
<script>{script}</script>
</body></html>
"""
