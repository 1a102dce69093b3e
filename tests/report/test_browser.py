"""The report and the live job page in a real headless Chromium (Debian's package, driven by playwright):
the curves are drawn with the run's numbers, nothing is fetched from the network, a screenshot is taken.
Skipped, saying why, where no Chromium or playwright can be had (.ci/run installs both)."""

from __future__ import annotations

import logging
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from report_helpers import get_json, losses, mariana, metrics, page_url, reap, run_cli, screenshot, wait_for

log = logging.getLogger(__name__)
LOSS_TRACE = "document.getElementById('fig-loss').data.find(t => t.name === 'loss')"


def open_page(browser: Any, url: str) -> tuple[Any, list[str], list[str]]:
    """A new tab at ``url``; returns it, the page's errors, and every request that left file:// and loopback."""
    page = browser.new_page()
    errors: list[str] = []
    outside: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)

    def guard(route: Any) -> None:
        req = route.request.url
        if req.startswith(("file://", "http://127.0.0.1:", "data:", "blob:")):
            route.continue_()
        else:
            outside.append(req)
            route.abort()

    page.route("**/*", guard)
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)
    return page, errors, outside


def drawn_points(page: Any, fig: str) -> int:
    """How many vertices the SVG lines of figure ``fig`` have: plotly.js really drew them."""
    return page.evaluate(f"""() => Array.from(document.querySelectorAll('#{fig} .scatterlayer path.js-line'))
        .map(p => (p.getAttribute('d') || '').split(/[ML]/).filter(Boolean).length).reduce((a, b) => a + b, 0)""")


def drawn_width(page: Any, fig: str) -> float:
    """The width of the widest line of figure ``fig`` over the width of its plot area."""
    return page.evaluate(f"""() => {{
        const area = document.querySelector('#{fig} .nsewdrag').getBoundingClientRect().width;
        const lines = Array.from(document.querySelectorAll('#{fig} .scatterlayer path.js-line'));
        return Math.max(0, ...lines.map(p => p.getBoundingClientRect().width)) / area; }}""")


def card(page: Any, name: str) -> str:
    return page.inner_text(f"[data-counter='{name}'] .v")


def overlaps(page: Any) -> list[str]:
    """Every figure whose drawn title, legend and x axis title boxes intersect, as "fig: a/b"."""
    return page.evaluate("""() => {
        const box = (f, sel) => Array.from(f.querySelectorAll(sel)).map(e => [sel, e.getBoundingClientRect()])
            .filter(([, r]) => r.width > 0 && r.height > 0);
        const meet = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
        const out = [];
        document.querySelectorAll('.fig').forEach(f => {
            const boxes = [...box(f, '.gtitle'), ...box(f, '.legend'), ...box(f, '.g-xtitle')];
            boxes.forEach(([a, ra], i) => boxes.slice(i + 1).forEach(([b, rb]) => {
                if (meet(ra, rb)) out.push(f.id + ': ' + a + '/' + b); }));
        });
        return out; }""")


def checkpoint_view(page: Any) -> dict[str, Any]:
    """At one moment: the loss plot's checkpoint lines (in its layout and drawn), the kept and taken
    cards and the rows of the Checkpoints table."""
    return page.evaluate("""() => {
        const gd = document.getElementById('fig-loss'), shapes = gd.layout.shapes || [];
        const card = k => (document.querySelector(`[data-counter='${k}'] .v`) || {}).textContent;
        return {lines: shapes.filter(s => (s.name || '').startsWith('checkpoint')).map(s => s.x0),
                shapes: shapes.length, drawn: gd.querySelectorAll('.shapelayer path').length,
                kept: card('checkpoints kept'), taken: card('checkpoints taken'),
                rows: document.querySelectorAll('#checkpoints tr').length - 1}; }""")


def superstep_view(page: Any) -> dict[str, Any]:
    """At one moment: the superstep the page shows, the server's time of it, the card, and the
    newest "last superstep" of the workers table."""
    return page.evaluate("""() => {
        const cells = Array.from(document.querySelectorAll('#workers tr')).slice(1).map(tr => tr.children[3].textContent);
        return {superstep: Number(document.body.dataset.superstep), updated: Number(document.body.dataset.updated || 0),
                card: document.querySelector("[data-counter='superstep'] .v").textContent,
                workers: Math.max(...cells.map(c => Number(c.replace(/,/g, ''))))}; }""")


@pytest.mark.timeout(180)
def test_report_in_a_browser(browser, dnn_run: Path, tmp_path: Path):
    out = tmp_path / "report.html"
    assert run_cli("report", str(dnn_run), "--out", str(out)) == 0
    page, errors, outside = open_page(browser, out.as_uri())
    try:
        xs, ys = losses(dnn_run)
        assert page.evaluate(f"Array.from({LOSS_TRACE}.y)") == ys
        assert page.evaluate(f"Array.from({LOSS_TRACE}.x)") == xs
        # plotly.js drew it: SVG lines with many vertices (it drops collinear ones) across the plot
        assert drawn_points(page, "fig-loss") >= min(len(ys), 20) and drawn_width(page, "fig-loss") > 0.9
        lines = metrics(dnn_run)
        acc = [m["test_accuracy"] for m in lines if "test_accuracy" in m]
        assert page.evaluate("Array.from(document.getElementById('fig-accuracy').data[0].y)") == acc
        bars = page.evaluate("document.querySelectorAll('#fig-timeline .barlayer path').length")
        assert bars >= len(lines)  # at least one bar (compute) per superstep
        assert card(page, "superstep") == f"{lines[-1]['superstep']:,}"
        assert card(page, "status") == "finished"
        kept = sorted(int(p.name.split("-")[1]) for p in (dnn_run / "checkpoints").iterdir())
        assert page.inner_text("#checkpoints").count("committed") == len(kept)
        assert '"epochs": 2' in page.inner_text("#config")
        screenshot(page, "report", tmp_path)
        # what the screenshot shows: one line per kept checkpoint, drawn; no title under a legend
        view = checkpoint_view(page)
        assert view["lines"] == kept and view["kept"] == str(len(kept)) and view["rows"] == len(kept)
        assert view["drawn"] == view["shapes"]
        assert overlaps(page) == []
        assert errors == [] and outside == []
    finally:
        page.close()


@pytest.mark.timeout(240)
def test_live_page_in_a_browser_updates_while_the_job_runs(browser, tmp_path: Path):
    run = tmp_path / "live"
    proc = mariana("run", "dnn-dp", "--workers", "2", "--run-dir", str(run), "--set", "epochs=10000",
                   "--set", "checkpoint_every=20", "--set", "keep_checkpoints=3", "--ui", "127.0.0.1:0")
    page = None
    try:
        url = page_url(proc)
        wait_for(lambda: get_json(url + "api/state")["counters"].get("loss") is not None, 120, "a loss on the page")
        page, errors, outside = open_page(browser, url)
        wait_for(lambda: page.evaluate("!!document.getElementById('fig-loss')"), 60, "the loss plot")
        first = int(page.evaluate("document.body.dataset.superstep"))
        y = page.evaluate(f"Array.from({LOSS_TRACE}.y)")
        x = page.evaluate(f"Array.from({LOSS_TRACE}.x)")
        xs, ys = losses(run)  # the file has at least what the page shows
        assert y and x == xs[:len(x)] and y == ys[:len(y)]
        # drawn across the plot: polled, since a redraw with new points can be under way at any
        # one moment (a CI run read 0.897 of the width once)
        wait_for(lambda: drawn_points(page, "fig-loss") >= min(len(y), 10) and drawn_width(page, "fig-loss") > 0.9,
                 30, "the loss line drawn across the plot")
        assert card(page, "status") == "running"
        assert page.inner_text("#workers").count("\n") >= 2  # a header and two workers
        # the page redraws by itself: the superstep and the loss curve grow
        wait_for(lambda: int(page.evaluate("document.body.dataset.superstep")) > first + 10, 120, "the page to update")
        wait_for(lambda: page.evaluate(f"{LOSS_TRACE}.y.length") > len(y), 120, "the curve to grow")
        # past the third checkpoint: the older ones are deleted from now on
        wait_for(lambda: int(checkpoint_view(page)["taken"] or 0) > 3, 120, "more checkpoints taken than kept")
        shot = screenshot(page, "live", tmp_path)
        # what the screenshot shows: as many checkpoint lines as checkpoints kept (the table's
        # rows), all of them drawn, fewer than were taken; no title under a legend
        view = checkpoint_view(page)
        assert view["lines"] and len(view["lines"]) == int(view["kept"]) == view["rows"], (view, shot)
        assert int(view["taken"].replace(",", "")) > len(view["lines"]), view
        wait_for(lambda: (v := checkpoint_view(page))["drawn"] == v["shapes"], 30, "the checkpoint lines drawn")
        assert overlaps(page) == [], shot
        # the superstep shown keeps up with the run: once the page shows numbers the server had
        # after the metrics file was read, they are at least the file's newest superstep, and the
        # workers table says the last one they all passed (the card: the one the master runs now)
        for _ in range(5):
            asked = time.time()
            newest = metrics(run)[-1]["superstep"]
            seen = wait_for(lambda: (v := superstep_view(page))["updated"] > asked + 0.05 and v, 30,
                            "the page to show numbers newer than the metrics file read")
            log.info("page at superstep %d, %.2f s after the file said %d", seen["superstep"], time.time() - asked,
                     newest)
            assert seen["superstep"] >= newest, (seen, newest)
            assert seen["card"] == f"{seen['superstep']:,}" and seen["superstep"] - 1 <= seen["workers"], seen
            assert newest <= seen["workers"] <= seen["superstep"], (seen, newest)
        assert errors == [] and outside == []
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    finally:
        if page is not None:
            page.close()
        reap(proc)
