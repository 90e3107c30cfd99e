// genmesh console: polls /console/status about once a second and draws it. Data goes into the page
// only as text (textContent) or SVG attributes set one by one, never as HTML.
"use strict";
(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const CHARTS = [
    ["queue_depth", "queue depth", (v) => fmt(v, 0)],
    ["tokens_per_s", "tokens/s", (v) => fmt(v, 1)],
    ["ttft_p50_s", "TTFT p50", (v) => fmt(v, 2), "ttft_p99_s", "p99 s"],
    ["rate_429", "429/s", (v) => fmt(v, 2), "rate_5xx", "5xx/s"],
  ];
  let failures = 0;

  function fmt(v, digits) { return v === null || v === undefined ? "–" : Number(v).toFixed(digits); }
  function secs(v) { return v === null || v === undefined ? "–" : Number(v).toFixed(v < 10 ? 2 : 0) + " s"; }
  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }
  function meter(used, cap, label) {
    const td = el("td", null, "num");
    const m = el("span", null, "meter");
    const ratio = cap ? Math.min(1, (used || 0) / cap) : 0;
    if (ratio >= 0.9) m.classList.add("hot");
    const fill = el("span");
    fill.style.width = (ratio * 100).toFixed(0) + "%";
    m.appendChild(fill);
    td.appendChild(m);
    td.appendChild(document.createTextNode(label));
    return td;
  }
  function rows(id, items, render, empty) {
    const body = document.querySelector("#" + id + " tbody");
    const out = items.map((item) => { const tr = el("tr"); render(item).forEach((c) => tr.appendChild(c)); return tr; });
    if (!out.length) {
      const tr = el("tr");
      const td = el("td", empty, "empty");
      td.colSpan = document.querySelectorAll("#" + id + " th").length;
      tr.appendChild(td);
      out.push(tr);
    }
    body.replaceChildren(...out);
  }
  function limit(used, cap) { return cap ? meter(used, cap, used + " / " + cap) : el("td", used + " (no limit)", "num"); }

  function line(svg, points, t0, t1, max, cls) {
    if (points.length < 2) return;
    const d = points.filter((p) => p[1] !== null).map((p, i) => {
      const x = ((p[0] - t0) / (t1 - t0)) * 300, y = 58 - (p[1] / max) * 54;
      return (i ? "L" : "M") + x.toFixed(1) + " " + y.toFixed(1);
    }).join(" ");
    const path = document.createElementNS(SVG, "path");
    path.setAttribute("d", d);
    path.setAttribute("fill", "none");
    path.setAttribute("stroke", cls === "second" ? "#cf222e" : "#0969da");
    path.setAttribute("stroke-width", "1.5");
    svg.appendChild(path);
  }
  function charts(status) {
    const box = document.getElementById("charts");
    // the last 15 minutes, or less while the history is younger (then the axis starts at its first sample)
    const t1 = status.computed_at, first = (status.history.queue_depth[0] || [t1 - 60])[0];
    const t0 = Math.max(t1 - 900, Math.min(first, t1 - 60));
    box.replaceChildren(...CHARTS.map(([key, title, f, key2, title2]) => {
      const a = (status.history[key] || []).filter((p) => p[0] >= t0);
      const b = key2 ? (status.history[key2] || []).filter((p) => p[0] >= t0) : [];
      const max = Math.max(1e-9, ...a.concat(b).map((p) => p[1] || 0)) * 1.1;
      const div = el("div", null, "chart");
      const head = el("div", null, "title");
      const last = (s) => (s.length ? s[s.length - 1][1] : null);
      head.appendChild(el("span", title + (key2 ? " / " + title2 : "") + " · " + Math.round((t1 - t0) / 60) + " min"));
      head.appendChild(el("span", f(last(a)) + (key2 ? " / " + f(last(b)) : "") + " · max " + f(max / 1.1), "now"));
      const svg = document.createElementNS(SVG, "svg");
      svg.setAttribute("viewBox", "0 0 300 60");
      svg.setAttribute("preserveAspectRatio", "none");
      line(svg, a, t0, t1, max, "first");
      line(svg, b, t0, t1, max, "second");
      div.appendChild(head);
      div.appendChild(svg);
      return div;
    }));
  }

  function render(s) {
    const banner = document.getElementById("banner");
    banner.hidden = s.redis.ok;
    if (!s.redis.ok) banner.textContent = "Redis is unreachable (" + s.redis.error + "): queues, keys and charts are stale or missing; upstream health is this gateway's own view.";
    const waiting = s.models.reduce((n, m) => n + m.waiting, 0);
    const healthy = s.upstreams.filter((u) => u.healthy).length;
    document.getElementById("summary").textContent = s.models.length + " model(s) · " + waiting + " waiting · " +
      healthy + "/" + s.upstreams.length + " upstreams healthy · " + s.replicas + " gateway replica(s)";
    document.getElementById("updated").textContent = "updated " + new Date(s.computed_at * 1000).toLocaleTimeString();
    charts(s);
    rows("models", s.models, (m) => [
      el("td", m.model), el("td", m.waiting, "num" + (m.waiting ? " warn" : "")),
      el("td", Object.entries(m.waiting_by_priority).map(([p, n]) => "p" + p + ": " + n).join("  ") || "–"),
      el("td", secs(m.oldest_wait_s), "num"),
      el("td", m.running.map((r) => r.upstream + " " + (r.running === null ? "?" : r.running) + "/" + r.capacity).join("  "), "num"),
      el("td", fmt(m.tokens_per_s, 1), "num"),
      el("td", secs(m.queue_wait_p50_s) + " / " + secs(m.queue_wait_p99_s), "num"),
      el("td", secs(m.ttft_p50_s) + " / " + secs(m.ttft_p99_s), "num"),
    ], "no models");
    const tenants = s.models.flatMap((m) => m.waiting_by_tenant.map((t) => [m.model, t]));
    rows("tenants", tenants, ([model, t]) => [el("td", model), el("td", t.tenant), el("td", t.waiting, "num"), el("td", secs(t.oldest_wait_s), "num")],
      "nobody is waiting");
    rows("upstreams", s.upstreams, (u) => {
      const e = u.engine;
      return [
        el("td", u.model), el("td", u.upstream),
        // the model's own state at its engine: a model that failed to load is skipped while the others serve
        e.model_state === "failed" ? el("td", "model failed to load (engine /v1/config says why)", "bad") :
          e.model_state === "not serving" && u.healthy ? el("td", "model not serving", "bad") :
          el("td", u.healthy ? "healthy" : "unhealthy", u.healthy ? "ok" : "bad"),
        el("td", u.circuit + (u.circuit_cause ? " · " + u.circuit_cause.replace("_", " ") : ""), u.circuit === "closed" ? "ok" : "bad"),
        meter(u.in_flight, u.capacity, (u.in_flight === null ? "?" : u.in_flight) + " / " + u.capacity),
        e.kv_cache_usage === null ? el("td", e.reachable ? "–" : "no engine metrics", "muted") :
          meter(e.kv_cache_usage, 1, (e.kv_cache_usage * 100).toFixed(e.kv_cache_usage < 0.1 ? 1 : 0) + "%"),
        el("td", e.running === null ? "–" : e.running + " / " + e.waiting, "num"),
        el("td", (e.restarts === null ? "–" : e.restarts) + " core · " + u.circuit_opened + " circuit", "num"),
        el("td", e.draft_accepted_per_step === null ? "–" : fmt(e.draft_accepted_per_step, 2) + " / step" +
          (e.draft_acceptance === null ? "" : " · " + (e.draft_acceptance * 100).toFixed(0) + "%"), "num"),
      ];
    }, "no upstreams");
    rows("keys", s.keys, (k) => [
      el("td", k.tenant + (k.revoked ? " (revoked)" : "")), el("td", k.key_id + (k.name ? " · " + k.name : "")),
      limit(k.requests, k.rpm), limit(k.tokens, k.tpm), limit(k.concurrent, k.max_concurrent),
    ], s.auth_required ? "no API keys" : "no API keys (auth is off)");
    rows("batches", s.batches, (b) => [
      el("td", b.id), el("td", b.tenant || b.owner || "anonymous"), el("td", b.endpoint),
      el("td", b.status, b.status === "failed" || b.status === "expired" ? "bad" : b.status === "completed" ? "ok" : ""),
      meter(b.completed + b.failed, b.total, b.total ? Math.round((100 * (b.completed + b.failed)) / b.total) + "%" : "–"),
      el("td", b.completed + " / " + b.failed + " / " + b.total, "num"),
    ], "no batches");
  }

  async function poll() {
    try {
      const r = await fetch("/console/status", { credentials: "same-origin", cache: "no-store" });
      if (r.status === 401) { window.location.assign("/console/login"); return; }
      if (!r.ok) throw new Error("HTTP " + r.status);
      render(await r.json());
      failures = 0;
    } catch (err) {
      failures += 1;
      const banner = document.getElementById("banner");
      banner.hidden = false;
      banner.textContent = "The gateway is not answering (" + String(err.message || err) + "); retrying…";
    }
    setTimeout(poll, failures ? Math.min(5000, 1000 * failures) : 1000);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", poll); else poll();
})();
