// The job page and the report: render a run snapshot and its plotly figures (mariana/report/page.py).
// Tables use textContent only (never innerHTML): nothing in a run's config can inject markup.
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
      ["wall (s)", c.wall_s], ["messages", c.messages], ["bytes", c.bytes], ["dropped", c.dropped], ["checkpoints kept", c.checkpoints], ["checkpoints taken", c.checkpoints_taken],
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
  // What changes every superstep (title, cards, workers): drawn from every /api/state answer too.
  function renderSummary(snap) {
    const job = snap.job || {};
    document.getElementById("title").textContent = "mariana · " + (job.job || "run") + " · " + (snap.status || "unknown");
    document.getElementById("subtitle").textContent = snap.run + (job.started ? "  ·  started " + job.started : "") +
      (job.runtime ? "  ·  " + job.runtime + " runtime" : "") + (snap.live ? "  ·  live, updated " + new Date(snap.collected * 1000).toLocaleTimeString() : "");
    document.body.dataset.status = snap.status || "";
    document.body.dataset.superstep = snap.superstep === null || snap.superstep === undefined ? "" : String(snap.superstep);
    document.body.dataset.updated = snap.collected ? String(snap.collected) : "";  // the server's time of these numbers
    cards(snap);
    table("workers", [["worker", "worker"], ["host", "host"], ["pid", "pid"], ["superstep", "last superstep"], ["computed", "vertices run"], ["active", "active"], ["peak_mb", "peak MB"]], snap.workers, "no workers yet");
  }
  function checkpointNote(snap) {
    const c = snap.counters || {}, keep = ((snap.job || {}).config || {}).keep_checkpoints, box = document.getElementById("checkpoints");
    if (!c.checkpoints_taken) return;
    const older = c.checkpoints_taken - (snap.checkpoints || []).filter(r => r.valid).length;
    box.insertBefore(el("p", "the checkpoints the run directory holds (the plots' ckpt lines); " + fmt(c.checkpoints_taken) + " taken in all" +
      (older > 0 ? ", the " + fmt(older) + " older ones deleted" + (keep ? " (keep_checkpoints = " + keep + ")" : "") : ""), "muted"), box.firstChild);
  }
  window.marianaRender = function (snap, figs) {
    const job = snap.job || {};
    renderSummary(snap);
    table("stragglers", [["worker", "worker"], ["count", "times last"], ["lag_mean_s", "mean lag (s)"], ["lag_max_s", "max lag (s)"], ["compute_vs_median", "compute / median"]],
      (snap.stragglers || []).filter(r => r.count > 0), "no straggler (or no trace)");
    table("checkpoints", [["superstep", "superstep"], ["time", "time"], ["size", "bytes"], [r => r.valid ? "committed" : "INVALID: " + r.why, "status"]], snap.checkpoints, "no checkpoints");
    checkpointNote(snap);
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
  const api = document.body.dataset.api, stateApi = document.body.dataset.stateApi;
  const LIVE = ["status", "phase", "superstep", "workers", "workers_expected", "error", "collected"];
  let current = null;  // {snap, figs, seq}: what is drawn
  let busy = false, stateBusy = false;
  function say(text) { document.getElementById("error").textContent = text; }
  // lays ``live`` (the keys the job changed, stamped with the server's time ``collected``) over the
  // snapshot drawn, unless what is drawn is newer already: answers of the two polls can cross
  function newer(live) { return !current || !current.snap.collected || (live.collected || 0) >= current.snap.collected; }
  async function poll() {
    if (busy) return; busy = true;
    try {
      const r = await fetch(api + (current && current.seq !== undefined ? "?have=" + current.seq : ""), {cache: "no-store"});
      if (r.ok) {
        const d = await r.json(), live = d.live || {};
        if (d.same && current) {  // the snapshot is the one drawn: only the job's newest numbers
          if (newer(live)) { Object.assign(current.snap, live); renderSummary(current.snap); }
        } else {
          const snap = Object.assign({}, d.snapshot, live);
          if (current && !newer(live)) LIVE.forEach(k => { snap[k] = current.snap[k]; });
          current = {snap: snap, figs: d.figures, seq: d.seq};
          window.marianaRender(snap, d.figures);
        }
        document.body.dataset.ready = "1"; say("");
      } else say("job page: " + r.status + " " + (await r.text()));
    } catch (e) { say("job page unreachable (the job may have ended): " + e); }
    finally { busy = false; }
  }
  async function pollState() {
    if (stateBusy || !current) return; stateBusy = true;
    try {
      const r = await fetch(stateApi, {cache: "no-store"});
      if (r.ok) {
        // not its counters: those stay with the snapshot the plots and tables were drawn from
        const s = await r.json(), live = {collected: s.updated};
        LIVE.forEach(k => { if (k !== "collected" && k in s) live[k] = s[k]; });
        if (newer(live)) { Object.assign(current.snap, live); renderSummary(current.snap); }
      }
    } catch (e) { /* poll() says when the page is unreachable */ }
    finally { stateBusy = false; }
  }
  poll(); setInterval(poll, Number(document.body.dataset.interval || 1000));
  if (stateApi) setInterval(pollState, Number(document.body.dataset.stateInterval || 200));
})();
