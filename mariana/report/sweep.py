"""``mariana report SWEEP``: one self-contained HTML page comparing a sweep's trials.

Trials ranked by the metric with their parameters, status and time used; a parallel-coordinates
plot of the parameters against the metric; every trial's learning curve overlaid (the stopped
ones dashed, ending in a cross); the time each trial used. Made from the sweep directory alone
(``sweep.json``, ``trials/*/trial.json`` and their ``metrics.jsonl``), so it works while the
sweep still runs and on any fsspec URL. ``mariana ui SWEEP`` serves the same page, made again
on every load (it refreshes itself every few seconds while trials run).
"""

from __future__ import annotations

import html
import json
import math
import time
from typing import Any

from ..errors import MarianaError, UsageError
from ..storage import RunDir, write_text
from .figures import _base_layout, _fig, plotly_js, require_plotly
from .page import json_for_script

__all__ = ["collect_sweep", "sweep_figures", "sweep_html", "write_sweep_report"]

STATUS_COLORS = {"completed": "#4c78a8", "stopped": "#e45756", "failed": "#7f7f7f", "running": "#54a24b",
                 "paused": "#f58518", "continue": "#f58518", "pending": "#bab0ac"}


def _finite(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def collect_sweep(url: str) -> dict[str, Any]:
    """A JSON-safe snapshot of the sweep at ``url``: spec, trials ranked, each trial's curve."""
    from ..sweep.driver import Trial, ranking
    from ..sweep.trial import metric_reports

    try:
        root = RunDir(url, create=False)
        spec = root.read_json("sweep.json")
    except MarianaError as exc:
        raise UsageError(f"{url}: not a sweep directory ({exc})") from None
    trials = []
    for i in range(spec["size"]):
        name = f"trials/{i:04d}"
        if root.exists(f"{name}/trial.json"):
            trials.append(Trial.from_json(root.read_json(f"{name}/trial.json")))
    curves: dict[int, list[float | None]] = {}
    for t in trials:
        run = f"{t.name}/metrics.jsonl"
        lines = root.read_jsonl(run) if root.exists(run) else []
        curves[t.index] = [_finite(v) for v in metric_reports(lines, spec["metric"])]
        if t.status in ("running", "pending", "continue", "paused") and curves[t.index]:
            t.last = curves[t.index][-1]  # live: the newest report, before the segment has settled
            t.reports = len(curves[t.index])
    ranked = ranking(trials, spec["mode"])
    rows = []
    for rank, t in enumerate(ranked, 1):
        d = t.to_json()
        d.pop("config", None)
        rows.append({"rank": rank, **d, "last": _finite(t.last), "curve": curves.get(t.index, [])})
    counts: dict[str, int] = {}
    for t in trials:
        counts[t.status] = counts.get(t.status, 0) + 1
    keys = [d["key"] for d in spec["space"]]
    return {"url": url, "spec": {k: v for k, v in spec.items() if k != "config"}, "config": spec.get("config", {}),
            "params": keys, "trials": rows, "counts": counts,
            "time_s": round(sum(t.time_s for t in trials), 3),
            "best": rows[0] if rows and rows[0]["last"] is not None else None}


def _axis(values: list[Any], label: str, log: bool) -> dict[str, Any]:
    """A parallel-coordinates dimension: numbers as they are (log10 for log-uniform keys), anything
    else (words, lists) as categories."""
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        if log and all(v > 0 for v in values):
            return {"label": f"log10({label})", "values": [math.log10(v) for v in values]}
        return {"label": label, "values": values}
    cats = sorted({json.dumps(v) for v in values})
    return {"label": label, "values": [cats.index(json.dumps(v)) for v in values],
            "tickvals": list(range(len(cats))), "ticktext": [c.strip('"') for c in cats]}


def sweep_figures(snap: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Parallel coordinates, overlaid learning curves, time per trial."""
    go = require_plotly()
    metric, out = snap["spec"]["metric"], {}
    logs = {d["key"] for d in snap["spec"]["space"] if d["kind"] == "loguniform"}
    scored = [t for t in snap["trials"] if t["last"] is not None]
    if scored:
        dims = [_axis([t["params"].get(k) for t in scored], k, k in logs) for k in snap["params"]]
        dims.append({"label": metric, "values": [t["last"] for t in scored]})
        out["fig-parcoords"] = _fig(go, [go.Parcoords(
            line={"color": [t["last"] for t in scored], "colorscale": "Viridis", "showscale": True,
                  "reversescale": snap["spec"]["mode"] == "min"}, dimensions=dims)],
            {"title": {"text": f"Parameters vs {metric} (one line per trial)"}, "height": 420,
             "margin": {"l": 80, "r": 80, "t": 80, "b": 40}})
    traces = []
    for t in sorted(snap["trials"], key=lambda t: t["index"]):
        ys = t["curve"]
        if not ys:
            continue
        stopped = t["status"] == "stopped"
        traces.append(go.Scatter(
            x=list(range(1, len(ys) + 1)), y=ys, name=f"trial {t['index']} ({t['status']})",
            mode="lines+markers", line={"dash": "dash" if stopped else "solid", "width": 1 if stopped else 2},
            marker={"symbol": ["circle"] * (len(ys) - 1) + ["x" if stopped else "circle"],
                    "size": [4] * (len(ys) - 1) + [10 if stopped else 4]},
            hovertemplate=f"trial {t['index']}<br>report %{{x}}<br>{metric} %{{y:.4g}}<extra></extra>"))
    if traces:
        out["fig-curves"] = _fig(go, traces, _base_layout(
            f"Learning curves ({metric}; stopped trials dashed, ending in a cross)", "report (epoch)", metric,
            height=420, legend={"orientation": "v", "x": 1.02, "y": 1}))
    bars = sorted(snap["trials"], key=lambda t: t["index"])
    if bars:
        out["fig-time"] = _fig(go, [go.Bar(
            x=[f"trial {t['index']}" for t in bars], y=[t["time_s"] for t in bars],
            marker={"color": [STATUS_COLORS.get(t["status"], "#bab0ac") for t in bars]},
            customdata=[t["status"] for t in bars],
            hovertemplate="%{x}: %{y:.2f} s (%{customdata})<extra></extra>")],
            _base_layout("Time used by each trial (colour: status)", "", "seconds"))
    return out


def _table(snap: dict[str, Any]) -> str:
    metric = snap["spec"]["metric"]
    head = ["rank", "trial", metric, "status", "reports", "time (s)", *snap["params"], "error"]
    rows = []
    for t in snap["trials"]:
        value = f"{t['last']:.6g}" if t["last"] is not None else "-"
        cells = [t["rank"], t["index"], value, t["status"], t["reports"], f"{t['time_s']:.2f}",
                 *(json.dumps(t["params"].get(k)) if not isinstance(t["params"].get(k), (int, float))
                   else f"{t['params'][k]:.6g}" for k in snap["params"]),
                 (t.get("error") or "").splitlines()[0] if t.get("error") else ""]
        cls = f' class="{html.escape(t["status"])}"'
        rows.append(f"<tr{cls}>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    return ("<table><thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>")


_CSS = """body{font-family:system-ui,sans-serif;margin:1.5rem;color:#222}table{border-collapse:collapse;font-size:13px}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}th{background:#f4f4f4}tr.stopped{color:#b33}
tr.failed{color:#777}.muted{color:#777}pre{background:#f7f7f7;padding:.5rem;overflow:auto}.fig{margin:1rem 0}"""


def sweep_html(url: str, *, plotly_src: str | None = None, refresh_s: int | None = None) -> tuple[str, dict[str, Any]]:
    """The page of the sweep at ``url`` and its snapshot; plotly.js inline unless ``plotly_src``."""
    snap = collect_sweep(url)
    figs = sweep_figures(snap)
    spec = snap["spec"]
    lib = (f'<script src="{html.escape(plotly_src)}"></script>' if plotly_src
           else "<script>" + plotly_js().replace("</script", "<\\/script") + "</script>")
    meta = f'<meta http-equiv="refresh" content="{int(refresh_s)}">' if refresh_s else ""
    counts = ", ".join(f"{n} {s}" for s, n in sorted(snap["counts"].items()))
    best = snap["best"]
    best_text = (f"best: trial {best['index']}, {spec['metric']} = {best['last']:.6g} "
                 f"({', '.join(f'{k}={v}' for k, v in best['params'].items())})" if best else "no trial has reported yet")
    space = ", ".join(f"{d['key']}={d['kind']}({', '.join(map(str, d['args']))})" for d in spec["space"])
    title = f"mariana sweep: {spec['job']}, {len(snap['trials'])} trials ({spec['scheduler']})"
    divs = "".join(f'<div class="fig" id="{k}"></div>' for k in ("fig-parcoords", "fig-curves", "fig-time") if k in figs)
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">{meta}<title>{html.escape(title)}</title><style>{_CSS}</style>{lib}</head>
<body><h1>{html.escape(title)}</h1>
<p>{html.escape(best_text)}</p>
<p class="muted">{html.escape(counts)}; {snap['time_s']:.1f} s of trial time; {spec['metric']} ({spec['mode']});
space: {html.escape(space)}; seed {spec['seed']}; status: {html.escape(str(spec.get('status')))}</p>
<h2>Trials, best first</h2>{_table(snap)}
<h2>Plots</h2>{divs or '<p class="muted">nothing to plot yet</p>'}
<h2>Base config</h2><pre>{html.escape(json.dumps(snap['config'], indent=1, sort_keys=True))}</pre>
<script type="application/json" id="figs">{json_for_script(figs)}</script>
<script>const figs=JSON.parse(document.getElementById("figs").textContent);
for (const [id, f] of Object.entries(figs)) Plotly.newPlot(id, f.data, f.layout, {{responsive: true}});</script>
</body></html>
"""
    return page, {**snap, "figures": sorted(figs)}


def write_sweep_report(url: str, out: str) -> dict[str, Any]:
    """Write the sweep's page to ``out``; returns what ``--json`` prints (the ranking included)."""
    page, snap = sweep_html(url)
    write_text(out, page)
    return {"sweep": url, "out": out, "bytes": len(page.encode()), "status": snap["spec"].get("status"),
            "metric": snap["spec"]["metric"], "mode": snap["spec"]["mode"], "figures": snap["figures"],
            "generated": time.time(),
            "trials": [{k: v for k, v in t.items() if k != "curve"} for t in snap["trials"]]}


class SweepServer:
    """``mariana ui SWEEP``: the sweep's page on a loopback port (by default), made again on
    every load; while trials run it refreshes itself every ``refresh_s`` seconds. GET only."""

    def __init__(self, url: str, address: str = "127.0.0.1:0", refresh_s: int = 3) -> None:
        from .live import parse_address

        collect_sweep(url)  # not a sweep: one line, exit 2, before anything is served
        self.url, self.refresh_s = url, refresh_s
        self.host, self.port = parse_address(address)
        self.server: Any = None

    def start(self) -> str:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, fmt: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                path = self.path.split("?")[0]
                try:
                    if path == "/":
                        status = collect_sweep(owner.url)["spec"].get("status")
                        page, _ = sweep_html(owner.url, plotly_src="/static/plotly.min.js",
                                             refresh_s=owner.refresh_s if status == "running" else None)
                        body, ctype = page.encode(), "text/html; charset=utf-8"
                    elif path == "/api/sweep":
                        body, ctype = json.dumps(collect_sweep(owner.url), default=str).encode(), "application/json"
                    elif path == "/static/plotly.min.js":
                        body, ctype = plotly_js().encode(), "application/javascript"
                    else:
                        self.send_error(404)
                        return
                except MarianaError as exc:
                    body, ctype = f"cannot read the sweep: {exc}".encode(), "text/plain; charset=utf-8"
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer((self.host, self.port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, name="mariana-sweep-ui", daemon=True).start()
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.server.server_address[1]}/"

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
