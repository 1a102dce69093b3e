"""The plots of a run, built with plotly from a snapshot (``data.collect``).

Both the HTML report and the live page draw these same figures with plotly.js: ``figures(snap)``
returns ``{div_id: {"title", "data", "layout"}}`` as plain JSON, which the page hands to
``Plotly.react``. plotly is the optional extra ``mariana-bsp[report]``; without it the report
and the live page refuse with one line saying what to install.
"""

from __future__ import annotations

import json
import logging
from functools import lru_cache
from typing import Any

from ..errors import UsageError

log = logging.getLogger(__name__)

__all__ = ["figures", "plotly_js", "require_plotly", "PHASE_COLORS"]

PHASE_COLORS = {"compute": "#4c78a8", "exchange": "#f58518", "wait": "#e45756", "barrier": "#bab0ac"}
_INSTALL = "pip install 'mariana-bsp[report]'"


def require_plotly() -> Any:
    """The plotly module, or a ``UsageError`` saying how to install it."""
    try:
        import plotly.graph_objects as go
    except ImportError:
        raise UsageError(f"reports and the job page need plotly: {_INSTALL}") from None
    return go


@lru_cache(maxsize=1)
def plotly_js() -> str:
    """The plotly.js bundle shipped inside the plotly package (no network needed)."""
    require_plotly()
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


#: The legend: one row (or more) under the x axis title, left-aligned. Above the plot, beside the
#: title, a legend of long names (the memory plot's) wraps into the title and over it.
LEGEND = {"orientation": "h", "x": 0, "xanchor": "left", "y": 0, "yref": "container", "yanchor": "bottom"}


def _base_layout(title: str, xtitle: str, ytitle: str, **extra: Any) -> dict[str, Any]:
    # the title sits left, clear of the plot toolbar (top right)
    layout = {"title": {"text": title, "x": 0.01, "xanchor": "left"},
              "xaxis": {"title": {"text": xtitle}, "automargin": True}, "yaxis": {"title": {"text": ytitle}},
              "margin": {"l": 60, "r": 20, "t": 50, "b": 50}, "height": 340, "template": "plotly_white",
              "legend": dict(LEGEND)}
    layout.update(extra)
    return layout


#: Marks closer than this fraction of the superstep axis share one label (their lines are all drawn).
LABEL_GAP = 0.04


def _marks(snap: dict[str, Any]) -> tuple[list[dict], list[dict]]:
    """Vertical lines (shapes) and their labels for checkpoints, restarts and NaN flags.

    The checkpoint lines are the checkpoints the run directory holds (``snap["checkpoints"]``, as
    many as the Checkpoints table and the "checkpoints kept" card), not every one the job
    committed: older ones are deleted (``keep_checkpoints``) and cannot be resumed from."""
    shapes: list[dict] = []
    notes: list[dict] = []
    span = max([snap.get("superstep") or 0] + [c.get("superstep") or 0 for c in snap.get("checkpoints") or []]) or 1

    def vline(x: Any, color: str, dash: str, text: str, name: str) -> None:
        shapes.append({"type": "line", "name": name, "xref": "x", "yref": "paper", "x0": x, "x1": x, "y0": 0, "y1": 1,
                       "line": {"color": color, "width": 1, "dash": dash}})
        notes.append({"x": x, "xref": "x", "yref": "paper", "y": 1, "yanchor": "bottom", "text": text,
                      "showarrow": False, "font": {"size": 9, "color": color}})

    def label_groups(marks: list[dict], text: str) -> None:
        """One label per run of marks closer together than LABEL_GAP of the axis, on its newest."""
        group: list[dict] = []
        for m in marks + [{}]:
            if group and (not m or m["x"] - group[-1]["x"] > LABEL_GAP * span):
                n = len(group)
                notes.append({"x": group[-1]["x"], "xref": "x", "yref": "paper", "y": 1, "yanchor": "bottom",
                              "text": text if n == 1 else f"{n} {text}s", "showarrow": False,
                              "font": {"size": 9, "color": group[-1]["color"]}})
                group = []
            if m:
                group.append(m)

    kept = sorted((c for c in snap.get("checkpoints") or [] if isinstance(c.get("superstep"), int)),
                  key=lambda c: c["superstep"])
    for c in kept:
        color = "#54a24b" if c.get("valid") else "#f58518"
        shapes.append({"type": "line", "name": f"checkpoint {c['superstep']}", "xref": "x", "yref": "paper",
                       "x0": c["superstep"], "x1": c["superstep"], "y0": 0, "y1": 1,
                       "line": {"color": color, "width": 1, "dash": "dot" if c.get("valid") else "dash"}})
    label_groups([{"x": c["superstep"], "color": "#54a24b"} for c in kept if c.get("valid")], "ckpt")
    label_groups([{"x": c["superstep"], "color": "#f58518"} for c in kept if not c.get("valid")], "bad ckpt")
    for e in snap.get("restarts") or []:
        if isinstance(e.get("superstep"), int):
            vline(e["superstep"], "#d62728", "dash", f"restart {e.get('restart', '')}".strip(), "restart")
    first_nan = sorted({f["superstep"] for f in (snap.get("flags") or []) + (snap.get("nan_metrics") or [])
                        if isinstance(f.get("superstep"), int)})
    for ss in first_nan[:20]:
        vline(ss, "#9467bd", "solid", "NaN", "nan")
    return shapes, notes


def _fig(go: Any, traces: list, layout: dict[str, Any]) -> dict[str, Any]:
    fig = go.Figure(data=traces, layout=layout)
    return json.loads(fig.to_json())  # validated by plotly, plain JSON for the page


#: Metrics with a plot of their own (or none: counts the timeline and counters show).
SHOWN_ELSEWHERE = frozenset(("loss", "test_loss", "test_accuracy", "wall_s", "active", "messages", "computed",
                             "delivered", "bytes", "dropped"))
#: At most this many other metrics are drawn (names starting with "_" are a job's internal aggregators).
MAX_OTHER = 8


def _line_or_points(y: list[Any]) -> dict[str, Any]:
    """Plot options: a line, or points where the values keep swinging up and down (a training step
    that spans several supersteps): drawn as a line, hundreds of such swings fill a solid block."""
    v = [x for x in y if isinstance(x, (int, float))]
    signs = [d > 0 for d in (b - a for a, b in zip(v, v[1:])) if d != 0]
    turns = sum(1 for a, b in zip(signs, signs[1:]) if a != b)
    if len(v) > 30 and turns > len(v) / 20:
        return {"mode": "markers", "marker": {"size": 3}}
    return {"mode": "lines"}


def _small_multiples(go: Any, title: str, series: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """One panel per metric, stacked on a shared superstep axis, each with its own labelled scale."""
    n = len(names)
    gap = 0.06 if n > 1 else 0.0
    height = (1.0 - gap * (n - 1)) / n
    traces, axes = [], {}
    for i, name in enumerate(names):
        axis = "y" if i == 0 else f"y{i + 1}"
        top = 1.0 - i * (height + gap)
        traces.append(go.Scatter(x=series[name]["x"], y=series[name]["y"], name=name, yaxis=axis, showlegend=False,
                                 **_line_or_points(series[name]["y"])))
        axes["yaxis" if i == 0 else f"yaxis{i + 1}"] = {"domain": [max(0.0, top - height), top],
                                                        "title": {"text": name, "font": {"size": 10}}}
    layout = _base_layout(title, "superstep", "", height=max(240, 80 + 130 * n), **axes)
    layout["yaxis"] = axes["yaxis"]
    return _fig(go, traces, layout)


def figures(snap: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every plot for ``snap``: training curves, throughput, superstep time, memory, timeline, stragglers."""
    go = require_plotly()
    series = snap.get("series") or {}
    shapes, notes = _marks(snap)
    out: dict[str, dict[str, Any]] = {}

    losses = [k for k in ("loss", "test_loss") if k in series]
    if losses:
        traces = [go.Scatter(x=series[k]["x"], y=series[k]["y"], name=k, mode="lines+markers" if k == "test_loss"
                             else "lines", connectgaps=False) for k in losses]
        out["fig-loss"] = _fig(go, traces, _base_layout("Loss", "superstep", "loss", shapes=shapes, annotations=notes))
    if "test_accuracy" in series:
        s = series["test_accuracy"]
        out["fig-accuracy"] = _fig(go, [go.Scatter(x=s["x"], y=s["y"], name="test_accuracy", mode="lines+markers")],
                                   _base_layout("Test accuracy", "superstep", "accuracy", shapes=shapes,
                                                annotations=notes))
    samples = snap.get("samples_per_s") or {}
    if samples.get("x"):
        out["fig-samples"] = _fig(go, [go.Scatter(x=samples["x"], y=samples["y"], name="samples/s", mode="lines")],
                                  _base_layout("Throughput", "superstep", "samples/s"))
    if "wall_s" in series:
        s = series["wall_s"]
        out["fig-wall"] = _fig(go, [go.Scatter(x=s["x"], y=s["y"], name="wall_s", mode="lines")],
                               _base_layout("Superstep wall time", "superstep", "seconds", shapes=shapes,
                                            annotations=notes))
    progress = [k for k in ("active", "messages") if k in series]
    if progress:
        # active and messages have their own axes; a series that swings every superstep (a training
        # step that spans several supersteps) is drawn as points, which a line would fill solid
        traces = [go.Scatter(x=series[k]["x"], y=series[k]["y"], name=k, yaxis="y2" if k == "messages" else "y",
                             **_line_or_points(series[k]["y"])) for k in progress]
        out["fig-progress"] = _fig(go, traces, _base_layout(
            "Active vertices and messages", "superstep", "active vertices",
            yaxis2={"title": {"text": "messages"}, "overlaying": "y", "side": "right", "rangemode": "tozero"}))
    others = sorted(k for k in series if k not in SHOWN_ELSEWHERE and not k.startswith("_"))[:MAX_OTHER]
    if others:
        out["fig-other"] = _small_multiples(go, "Other metrics", series, others)

    rows = (snap.get("timeline") or {}).get("rows") or []
    if rows:
        workers = sorted({r["worker"] for r in rows})
        traces = []
        for phase in ("compute", "exchange", "wait", "barrier"):
            offset = {"compute": lambda r: 0.0, "exchange": lambda r: r["compute"],
                      "wait": lambda r: r["compute"] + r["exchange"],
                      "barrier": lambda r: r["compute"] + r["exchange"] + r["wait"]}[phase]
            traces.append(go.Bar(
                x=[r[phase] for r in rows], base=[r["start"] + offset(r) for r in rows],
                y=[f"worker {r['worker']}" for r in rows], orientation="h", name=phase,
                marker={"color": PHASE_COLORS[phase]}, customdata=[r["superstep"] for r in rows],
                hovertemplate=f"superstep %{{customdata}}<br>{phase} %{{x:.6f}} s<extra>%{{y}}</extra>"))
        truncated = (snap.get("timeline") or {}).get("truncated") or 0
        shown = len({r["superstep"] for r in rows})
        resumed = (snap.get("timeline") or {}).get("resumed_at")
        title = "Superstep timeline per worker" + (f" (newest {shown} supersteps)" if truncated else "")
        title += f", since the resume at superstep {resumed}" if resumed is not None else ""
        out["fig-timeline"] = _fig(go, traces, _base_layout(
            title, "seconds since the first superstep" + (" of this session" if resumed is not None else ""), "",
            barmode="overlay", bargap=0.3,
            height=max(240, 90 + 60 * len(workers)),
            yaxis={"categoryorder": "array", "categoryarray": [f"worker {k}" for k in reversed(workers)]}))

    memory = snap.get("memory") or []
    if memory:  # LocalRuntime: every worker's line is the one process's
        traces = []
        for m in memory:
            traces.append(go.Scatter(x=m["x"], y=m["rss_mb"], name=f"worker {m['worker']} resident", mode="lines"))
            traces.append(go.Scatter(x=m["x"], y=m["peak_mb"], name=f"worker {m['worker']} peak so far",
                                     mode="lines", line={"dash": "dot"}))
        out["fig-memory"] = _fig(go, traces, _base_layout("Resident memory per worker process", "superstep", "MB",
                                                          shapes=shapes, annotations=notes))

    lags = snap.get("lags") or []
    if lags and len({x.get("straggler") for x in lags}) >= 1 and len(snap.get("workers") or []) > 1:
        by_worker: dict[Any, list[dict]] = {}
        for x in lags:
            by_worker.setdefault(x.get("straggler"), []).append(x)
        traces = [go.Scatter(x=[x["superstep"] for x in xs], y=[x["lag_s"] for x in xs], mode="markers",
                             name=f"worker {k} last") for k, xs in sorted(by_worker.items(), key=lambda kv: str(kv[0]))]
        out["fig-stragglers"] = _fig(go, traces, _base_layout(
            "Straggler lag behind the median arrival", "superstep", "lag (s)"))
    return out
