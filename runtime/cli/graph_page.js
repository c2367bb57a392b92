// graph_page.js - the script of the page `stepgraph graph --format html` writes.
// Written for stepgraph; no library. It reads the JSON in <script id="sg-data">
// and works on the two inline Graphviz SVGs (#svg-folded, #svg-full): pan and
// zoom, search, fold and unfold, node details, the critical path, and, with a
// trace, a timeline linked to the graph both ways. The URL hash accepts
// search=TEXT, select=NODE-NAME and view=full|folded (used by the tests).
"use strict";
(function () {
  const raw = JSON.parse(document.getElementById("sg-data").textContent);
  const nodes = raw.graph.nodes.map((n, i) => Object.assign({}, n, {
    unit: n.layer, group: raw.group_of[i], preds: [], succs: [], where: raw.where[i],
    color: (raw.places[raw.where[i]] || {}).color || "#ccc",
  }));
  raw.graph.edges.forEach(([a, b]) => { nodes[a].succs.push(b); nodes[b].preds.push(a); });
  if (raw.times)
    nodes.forEach((n, i) => {
      if (raw.times.end[i] < 0) return;
      n.start_us = raw.times.start[i];
      n.end_us = raw.times.end[i];
      n.lane_index = raw.times.lane[i];
      n.lane = raw.times.lanes[n.lane_index];
    });
  const data = { nodes: nodes, groups: raw.groups, critical: raw.critical, lanes: raw.times ? raw.times.lanes : [] };
  const byName = new Map(data.nodes.map((n) => [n.name, n]));
  const views = { folded: document.getElementById("svg-folded"), full: document.getElementById("svg-full") };
  let view = "folded";
  const $ = (id) => document.getElementById(id);

  // ---- pan and zoom: the SVG's viewBox follows the wheel and drags
  function svgOf(v) { return views[v].querySelector("svg"); }
  const home = {};
  for (const v of Object.keys(views)) {
    const s = svgOf(v);
    if (!s) continue;
    const vb = s.viewBox.baseVal;
    home[v] = [vb.x, vb.y, vb.width, vb.height];
    s.removeAttribute("width");
    s.removeAttribute("height");
    s.style.width = "100%";
    s.style.height = "100%";
    installPanZoom(s);
  }
  function setBox(s, b) { s.setAttribute("viewBox", b.map((x) => x.toFixed(2)).join(" ")); }
  function box(s) { const vb = s.viewBox.baseVal; return [vb.x, vb.y, vb.width, vb.height]; }
  function installPanZoom(s) {
    s.addEventListener("wheel", (e) => {
      e.preventDefault();
      const b = box(s), r = s.getBoundingClientRect();
      const fx = (e.clientX - r.left) / r.width, fy = (e.clientY - r.top) / r.height;
      const k = e.deltaY < 0 ? 0.8 : 1.25;
      const w = b[2] * k, h = b[3] * k;
      setBox(s, [b[0] + (b[2] - w) * fx, b[1] + (b[3] - h) * fy, w, h]);
    }, { passive: false });
    let drag = null;
    s.addEventListener("mousedown", (e) => { drag = { x: e.clientX, y: e.clientY, b: box(s) }; });
    window.addEventListener("mouseup", () => { drag = null; });
    window.addEventListener("mousemove", (e) => {
      if (!drag) return;
      const r = s.getBoundingClientRect();
      const dx = (e.clientX - drag.x) * drag.b[2] / r.width, dy = (e.clientY - drag.y) * drag.b[3] / r.height;
      setBox(s, [drag.b[0] - dx, drag.b[1] - dy, drag.b[2], drag.b[3]]);
    });
  }
  function centerOn(el) {
    const s = svgOf(view), bb = el.getBBox(), b = box(s);
    const w = Math.min(b[2], Math.max(bb.width * 6, 400)), h = w * b[3] / b[2];
    // Graphviz puts the drawing under a translated group: use screen geometry
    const m = el.getCTM(), sm = s.getCTM();
    const cx = (bb.x + bb.width / 2) * m.a + m.e, cy = (bb.y + bb.height / 2) * m.d + m.f;
    const x = (cx - sm.e) / sm.a, y = (cy - sm.f) / sm.d;
    setBox(s, [x - w / 2, y - h / 2, w, h]);
  }

  // ---- the graph's elements
  function nodeEl(v, id) { return views[v].querySelector("#n" + id); }
  function groupEl(v, g) { return views[v].querySelector("#f" + g); }
  function elFor(v, n) { return nodeEl(v, n.id) || (n.group >= 0 ? groupEl(v, n.group) : null); }
  function clear(cls) { document.querySelectorAll("." + cls).forEach((e) => e.classList.remove(cls)); }

  function show(v) {
    view = v;
    views.folded.hidden = v !== "folded";
    views.full.hidden = v !== "full";
    $("fold").textContent = v === "folded" ? "Unfold all units" : "Fold repeated units";
  }
  const hasFull = !!svgOf("full");
  if (!hasFull) { $("fold").disabled = true; $("fold").title = "too many tasks to draw unfolded"; }
  $("fold").addEventListener("click", () => show(view === "folded" && hasFull ? "full" : "folded"));
  $("reset").addEventListener("click", () => { const s = svgOf(view); setBox(s, home[view]); });

  // ---- critical path
  const crit = new Set(data.critical.nodes);
  function markCritical(on) {
    clear("sg-crit");
    if (!on) return;
    for (const id of crit) {
      const n = data.nodes[id];
      for (const v of Object.keys(views)) { const e = elFor(v, n); if (e) e.classList.add("sg-crit"); }
      const bar = document.getElementById("bar" + id);
      if (bar) bar.classList.add("sg-crit");
    }
  }
  $("crit").addEventListener("change", (e) => markCritical(e.target.checked));

  // ---- search
  function search(q) {
    clear("sg-hit");
    q = q.trim().toLowerCase();
    if (!q) { $("hits").textContent = ""; return []; }
    const hits = data.nodes.filter((n) => n.name.toLowerCase().includes(q) || n.kind === q);
    const folded = new Set();
    for (const n of hits)
      for (const v of Object.keys(views)) {
        const e = elFor(v, n);
        if (e) { e.classList.add("sg-hit"); if (v === "folded" && n.group >= 0) folded.add(n.group); }
      }
    $("hits").textContent = hits.length + " match" + (hits.length === 1 ? "" : "es") +
      (folded.size ? " (" + folded.size + " folded group" + (folded.size > 1 ? "s" : "") + ")" : "");
    return hits;
  }
  $("search").addEventListener("input", (e) => search(e.target.value));
  $("search").addEventListener("keydown", (e) => {
    if (e.key !== "Enter") return;
    const hits = search(e.target.value);
    if (hits.length) select(hits[0], true);
  });

  // ---- details
  const fmt = (x, unit) => {
    if (x === null || x === undefined) return "-";
    const k = ["", "k", "M", "G", "T", "P"];
    let i = 0;
    while (Math.abs(x) >= 1000 && i < k.length - 1) { x /= 1000; i++; }
    return x.toFixed(x < 10 && i ? 2 : 0) + " " + k[i] + unit;
  };
  function link(id) {
    const n = data.nodes[id];
    return '<a href="#" data-node="' + id + '">' + n.name + "</a>";
  }
  function select(n, center) {
    clear("sg-sel");
    for (const v of Object.keys(views)) { const e = elFor(v, n); if (e) e.classList.add("sg-sel"); }
    const bar = document.getElementById("bar" + n.id);
    if (bar) bar.classList.add("sg-sel");
    const d = $("details");
    let h = "<h2>" + n.name + "</h2><table>" +
      "<tr><th>kind</th><td>" + n.kind + "</td></tr>" +
      "<tr><th>device</th><td>" + n.device + (n.link ? " (" + n.link + ")" : "") + "</td></tr>" +
      "<tr><th>" + (n.end_us !== undefined ? "ran on" : "runs on") + "</th><td>" + raw.places[n.where].label + "</td></tr>" +
      "<tr><th>unit</th><td>" + (n.unit === null ? "-" : n.unit) + "</td></tr>" +
      "<tr><th>FLOPs</th><td>" + fmt(n.flops, "FLOP") + "</td></tr>" +
      "<tr><th>bytes</th><td>" + fmt(n.bytes, "B") + (n.link_bytes ? ", " + fmt(n.link_bytes, "B") + " on the link" : "") + "</td></tr>";
    if (n.end_us !== undefined)
      h += "<tr><th>ran</th><td>" + n.start_us.toFixed(1) + " - " + n.end_us.toFixed(1) + " us on " + n.lane + "</td></tr>";
    if (crit.has(n.id)) h += '<tr><th>critical</th><td>on the ' + data.critical.kind + " critical path</td></tr>";
    if (n.group >= 0) h += "<tr><th>folded</th><td>" + data.groups[n.group] + "</td></tr>";
    h += "</table><h3>accesses</h3><ul>" + n.buffers.map((b) => "<li>" + b.mode + " " + b.name + " (" + fmt(b.bytes, "B") + ", " + b.space + ")</li>").join("") + "</ul>";
    h += "<h3>after</h3><p>" + (n.preds.map(link).join(", ") || "nothing") + "</p>";
    h += "<h3>before</h3><p>" + (n.succs.map(link).join(", ") || "nothing") + "</p>";
    d.innerHTML = h;
    d.querySelectorAll("a[data-node]").forEach((a) => a.addEventListener("click", (e) => {
      e.preventDefault();
      select(data.nodes[+a.dataset.node], true);
    }));
    if (center) { const e = elFor(view, n); if (e) centerOn(e); }
  }
  for (const v of Object.keys(views)) {
    views[v].addEventListener("click", (e) => {
      const g = e.target.closest("g.node");
      if (!g) return;
      if (g.id.startsWith("n")) { select(data.nodes[+g.id.slice(1)], false); return; }
      if (g.id.startsWith("f") && hasFull) {
        // a folded group: show everything, its members found
        const gi = +g.id.slice(1);
        show("full");
        clear("sg-hit");
        data.nodes.filter((n) => n.group === gi).forEach((n) => { const el = nodeEl("full", n.id); if (el) el.classList.add("sg-hit"); });
        $("hits").textContent = data.groups[gi];
      }
    });
  }

  // ---- timeline: a lane per worker and link, bars linked to the graph
  function timeline() {
    const tl = $("timeline");
    const ran = data.nodes.filter((n) => n.end_us !== undefined);
    if (!ran.length) { tl.hidden = true; return; }
    const lanes = data.lanes, t0 = Math.min(...ran.map((n) => n.start_us));
    const t1 = Math.max(...ran.map((n) => n.end_us)), W = 1200, L = 22, left = 110;
    const sx = (t) => left + (t - t0) / Math.max(t1 - t0, 1e-9) * (W - left - 10);
    let s = '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ' + W + " " + (lanes.length * L + 30) + '" id="timeline-svg">';
    lanes.forEach((name, i) => {
      s += '<text x="4" y="' + (i * L + 15) + '" font-size="11">' + name + "</text>";
      s += '<line x1="' + left + '" x2="' + W + '" y1="' + (i * L + L) + '" y2="' + (i * L + L) + '" stroke="#eee"/>';
    });
    for (const n of ran) {
      const x = sx(n.start_us), w = Math.max(sx(n.end_us) - x, 1);
      s += '<rect class="bar" id="bar' + n.id + '" data-node="' + n.id + '" x="' + x.toFixed(1) + '" y="' + (n.lane_index * L + 3) +
        '" width="' + w.toFixed(1) + '" height="' + (L - 6) + '" fill="' + n.color + '"><title>' + n.name + " " +
        (n.end_us - n.start_us).toFixed(1) + " us</title></rect>";
    }
    const ms = (t1 - t0) / 1000;
    s += '<text x="' + left + '" y="' + (lanes.length * L + 22) + '" font-size="11">0</text>';
    s += '<text x="' + (W - 10) + '" y="' + (lanes.length * L + 22) + '" font-size="11" text-anchor="end">' + ms.toFixed(2) + " ms</text></svg>";
    tl.innerHTML = "<h2>Timeline of the step (" + ms.toFixed(2) + " ms)</h2>" + s;
    tl.querySelectorAll("rect.bar").forEach((r) => r.addEventListener("click", () => select(data.nodes[+r.dataset.node], true)));
  }

  timeline();
  markCritical(true);
  // ---- the state in the URL hash: view=, search=, select=
  const params = new URLSearchParams(location.hash.slice(1));
  show(params.get("view") === "full" && hasFull ? "full" : "folded");
  if (params.get("search")) { $("search").value = params.get("search"); search(params.get("search")); }
  if (params.get("select") && byName.has(params.get("select"))) select(byName.get(params.get("select")), true);
  document.body.dataset.ready = "1";
})();
