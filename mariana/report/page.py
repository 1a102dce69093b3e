"""The one page that shows a run: used whole by the HTML report and served by the live job page.

The page is static HTML plus a small script that renders a snapshot (``data.collect``) and its
figures (``figures.figures``): tables with the DOM's ``textContent`` (never ``innerHTML``, so
nothing in a run's config can inject markup) and plots with ``Plotly.react``. The report embeds
one snapshot; the live page fetches ``/api/run`` every second and renders it again.
"""

from __future__ import annotations

import html
import json
from typing import Any

__all__ = ["render_page", "json_for_script"]

FIGURE_ORDER = ("fig-loss", "fig-accuracy", "fig-samples", "fig-wall", "fig-progress", "fig-other",
                "fig-timeline", "fig-stragglers")

_CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, Roboto, sans-serif; margin: 0; color: #222; background: #fafafa; }
header { background: #1f3b57; color: #fff; padding: 12px 20px; }
header h1 { margin: 0; font-size: 20px; }
header .sub { font-size: 13px; opacity: .85; margin-top: 4px; word-break: break-all; }
main { padding: 12px 20px; }
section { background: #fff; border: 1px solid #e3e3e3; border-radius: 6px; margin: 12px 0; padding: 10px 14px; }
h2 { font-size: 16px; margin: 4px 0 8px; }
table { border-collapse: collapse; font-size: 13px; }
td, th { border-bottom: 1px solid #eee; padding: 3px 10px 3px 0; text-align: left; vertical-align: top; }
th { color: #555; font-weight: 600; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; }
.card { border: 1px solid #e3e3e3; border-radius: 6px; padding: 6px 12px; min-width: 110px; background: #fff; }
.card .k { font-size: 11px; color: #666; text-transform: uppercase; }
.card .v { font-size: 18px; font-weight: 600; }
.status-running { color: #f0ad4e; } .status-finished { color: #5cb85c; } .status-failed { color: #d9534f; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(480px, 1fr)); gap: 12px; }
.fig { min-height: 240px; }
pre { font-size: 12px; background: #f5f5f5; padding: 8px; overflow: auto; max-height: 320px; }
.muted { color: #888; font-size: 13px; }
.bad { color: #d9534f; font-weight: 600; }
"""

_SCRIPT = r"""
(function () {
  "use strict";
  const ORDER = __ORDER__;
  function el(tag, text, cls) { const e = document.createElement(tag); if (text !== undefined && text !== null) e.textContent = String(text); if (cls) e.className = cls; return e; }
  function fmt(v) {
    if (v === null || v === undefined) return "-";
    if (typeof v === "number") { if (Number.isInteger(v)) return v.toLocaleString("en-US"); return Math.abs(v) >= 1000 ? v.toFixed(0) : v.toPrecision(4); }
    if (typeof v === "object") return JSON.stringify(v);
    return String(v);
  }
  function table(id, cols, rows, empty) {
    const box = document.getElementById(id); if (!box) return;
    box.replaceChildren();
    if (!rows || !rows.length) { box.appendChild(el("p", empty || "none", "muted")); return; }
    const t = el("table"), head = el("tr");
    cols.forEach(c => head.appendChild(el("th", c[1]))); t.appendChild(head);
    rows.forEach(r => { const tr = el("tr"); cols.forEach(c => tr.appendChild(el("td", fmt(typeof c[0] === "function" ? c[0](r) : r[c[0]])))); t.appendChild(tr); });
    box.appendChild(t);
  }
  function cards(snap) {
    const c = snap.counters || {}, box = document.getElementById("counters"); box.replaceChildren();
    const items = [["status", snap.status], ["superstep", snap.superstep], ["workers", (snap.workers || []).length],
      ["loss", c.loss], ["test_loss", c.test_loss], ["test_accuracy", c.test_accuracy], ["samples/s", c.samples_per_s],
      ["wall (s)", c.wall_s], ["messages", c.messages], ["bytes", c.bytes], ["dropped", c.dropped], ["checkpoints", c.checkpoints],
      ["restarts", c.restarts], ["NaN/Inf flags", c.nan_flags], ["hangs", c.hangs]];
    items.forEach(([k, v]) => {
      if (v === undefined) return;
      const d = el("div", null, "card"); d.dataset.counter = k;
      d.appendChild(el("div", k, "k"));
      const val = el("div", fmt(v), "v"); if (k === "status") val.classList.add("status-" + v);
      if ((k === "NaN/Inf flags" || k === "restarts" || k === "hangs") && v > 0) val.classList.add("bad");
      d.appendChild(val); box.appendChild(d);
    });
  }
  window.marianaRender = function (snap, figs) {
    const job = snap.job || {};
    document.getElementById("title").textContent = "mariana · " + (job.job || "run") + " · " + (snap.status || "unknown");
    document.getElementById("subtitle").textContent = snap.run + (job.started ? "  ·  started " + job.started : "") +
      (job.runtime ? "  ·  " + job.runtime + " runtime" : "") + (snap.live ? "  ·  live, updated " + new Date(snap.collected * 1000).toLocaleTimeString() : "");
    document.body.dataset.status = snap.status || "";
    document.body.dataset.superstep = snap.superstep === null || snap.superstep === undefined ? "" : String(snap.superstep);
    cards(snap);
    table("workers", [["worker", "worker"], ["host", "host"], ["pid", "pid"], ["superstep", "last superstep"], ["computed", "vertices run"], ["active", "active"]], snap.workers, "no workers yet");
    table("stragglers", [["worker", "worker"], ["count", "times last"], ["lag_mean_s", "mean lag (s)"], ["lag_max_s", "max lag (s)"], ["compute_vs_median", "compute / median"]],
      (snap.stragglers || []).filter(r => r.count > 0), "no straggler (or no trace)");
    table("checkpoints", [["superstep", "superstep"], ["time", "time"], ["size", "bytes"], [r => r.valid ? "committed" : "INVALID: " + r.why, "status"]], snap.checkpoints, "no checkpoints");
    table("restarts", [["superstep", "superstep"], ["lost", "lost worker"], ["rollback_to", "rolled back to"], ["restart", "restart"]], snap.restarts, "no restarts");
    table("flags", [["superstep", "superstep"], ["worker", "worker"], ["flag", "flag"], ["vertex", "vertex"], ["where", "where"], ["key", "key"]],
      (snap.flags || []).concat((snap.nan_metrics || []).map(m => ({superstep: m.superstep, flag: m.value, where: "metrics", key: m.key}))), "no NaN/Inf seen");
    table("hangs", [["superstep", "superstep"], ["elapsed_s", "after (s)"], [r => (r.missing || []).map(m => "worker " + m.worker + " (" + m.host + ") " + m.state).join("; "), "missing"]], snap.hangs, "no hangs");
    document.getElementById("config").textContent = JSON.stringify(job.config || {}, null, 2);
    const more = Object.assign({}, job); delete more.config;
    document.getElementById("jobinfo").textContent = JSON.stringify(more, null, 2);
    const grid = document.getElementById("figures");
    if (typeof Plotly === "undefined") { grid.replaceChildren(el("p", "plotly.js is not available: no plots", "muted")); return; }
    const shown = ORDER.filter(id => figs[id]);
    ORDER.forEach(id => { const div = document.getElementById(id); if (div && !figs[id]) div.remove(); });
    shown.forEach(id => {  // every box first, in order, so that each plot gets its final width
      if (document.getElementById(id)) return;
      const div = el("div", null, "fig"); div.id = id;
      const next = ORDER.slice(ORDER.indexOf(id) + 1).map(x => document.getElementById(x)).find(x => x);
      grid.insertBefore(div, next || null);
    });
    shown.forEach(id => Plotly.react(document.getElementById(id), figs[id].data, figs[id].layout, {responsive: true, displaylogo: false}));
    const note = document.getElementById("nofigs");
    if (note) note.style.display = Object.keys(figs).length ? "none" : "";
  };
  const embedded = document.getElementById("run-data");
  if (embedded) { const d = JSON.parse(embedded.textContent); window.marianaRender(d.snapshot, d.figures); document.body.dataset.ready = "1"; return; }
  const api = document.body.dataset.api;
  let busy = false;
  async function poll() {
    if (busy) return; busy = true;
    try {
      const r = await fetch(api, {cache: "no-store"});
      if (r.ok) { const d = await r.json(); window.marianaRender(Object.assign({}, d.snapshot, d.live || {}), d.figures); document.body.dataset.ready = "1"; document.getElementById("error").textContent = ""; }
      else document.getElementById("error").textContent = "job page: " + r.status + " " + (await r.text());
    } catch (e) { document.getElementById("error").textContent = "job page unreachable (the job may have ended): " + e; }
    finally { busy = false; }
  }
  poll(); setInterval(poll, Number(document.body.dataset.interval || 1000));
})();
"""


def json_for_script(obj: Any) -> str:
    """JSON that is safe inside ``<script>``: ``<``, ``>`` and ``&`` as unicode escapes."""
    text = json.dumps(obj, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_page(title: str, *, plotly_js: str | None = None, plotly_src: str | None = None,
                embedded: dict[str, Any] | None = None, api: str | None = None, interval_ms: int = 1000) -> str:
    """The page: plotly.js inline (``plotly_js``, for a self-contained report) or by URL
    (``plotly_src``, for the live page); data embedded (``embedded``) or polled from ``api``."""
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
    script = _SCRIPT.replace("__ORDER__", json.dumps(list(FIGURE_ORDER)))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title><style>{_CSS}</style>{lib}</head>
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
