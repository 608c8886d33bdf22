// The graph view of trt-workbench: draws the layout computed in Python (workbench.graph) with
// sigma.js + graphology (WebGL). Python owns the state (layout, expand/collapse, search, colours,
// highlight); this file draws it and reports interactions back (selection, toggles, search text).
// Test hooks: the root element carries data-* attributes with the drawn state and
// window.__wbGraphViews lists live views with helpers to map node ids to client coordinates.
import Graph from "graphology";
import Sigma from "sigma";

const moduleLoaded = Date.now();
const KIND = ["node", "group", "input", "output"];
const FLAG_NAMES = { 1: "cycle", 2: "dangling input", 4: "duplicate name", 8: "tensor produced twice" };
const BASE_COLOR = { node: "#5b7db1", group: "#8e6bb8", input: "#3f9b57", output: "#c07a2c" };
const FLAG_COLOR = "#d62728";
const DIM_COLOR = "#e4e4e4";
const X_SCALE = 3.0;

const CSS = `
.wb-graph { position: relative; font: 12px system-ui, sans-serif; border: 1px solid #ddd; }
.wb-graph .wb-bar { display: flex; gap: 4px; align-items: center; padding: 4px; background: #f7f7f7;
  border-bottom: 1px solid #ddd; flex-wrap: wrap; }
.wb-graph .wb-bar input { width: 180px; padding: 2px 4px; }
.wb-graph .wb-bar button { padding: 1px 8px; cursor: pointer; }
.wb-graph .wb-status { color: #555; margin-left: auto; white-space: nowrap; }
.wb-graph .wb-stage { position: relative; width: 100%; }
.wb-graph .wb-tip { position: absolute; pointer-events: none; background: rgba(30,30,30,.92);
  color: #fff; padding: 4px 6px; border-radius: 3px; max-width: 360px; z-index: 10;
  white-space: pre-wrap; display: none; font-size: 11px; }
.wb-graph .wb-legend { position: absolute; right: 6px; top: 6px; background: rgba(255,255,255,.9);
  border: 1px solid #ddd; padding: 4px 6px; z-index: 5; max-height: 60%; overflow: auto; }
.wb-graph .wb-legend div { display: flex; align-items: center; gap: 4px; }
.wb-graph .wb-legend span.sw { width: 10px; height: 10px; display: inline-block; border-radius: 50%; }
`;

function injectCss() {
  if (document.getElementById("wb-graph-css")) return;
  const s = document.createElement("style");
  s.id = "wb-graph-css";
  s.textContent = CSS;
  document.head.appendChild(s);
}

function el(tag, attrs = {}, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function render({ model, el: host }) {
  injectCss();
  const renderStart = Date.now();
  const root = el("div", { class: "wb-graph" });
  root.dataset.renderStart = String(renderStart);
  const bar = el("div", { class: "wb-bar" });
  const search = el("input", { type: "search", placeholder: "search name or op", class: "wb-search" });
  const btnFit = el("button", { class: "wb-fit", title: "Show the whole graph" }, "Fit");
  const btnFitSel = el("button", { class: "wb-fit-sel", title: "Zoom to the selection" }, "Fit selection");
  const btnCollapse = el("button", { class: "wb-collapse", title: "Collapse the scope of the selection" }, "Collapse");
  const btnReset = el("button", { class: "wb-reset", title: "Back to the default collapsed view" }, "Reset");
  const status = el("span", { class: "wb-status" });
  bar.append(search, btnFit, btnFitSel, btnCollapse, btnReset, status);
  const stage = el("div", { class: "wb-stage" });
  const tip = el("div", { class: "wb-tip" });
  const legend = el("div", { class: "wb-legend" });
  legend.style.display = "none";
  stage.append(tip, legend);
  root.append(bar, stage);
  host.appendChild(root);
  stage.style.height = `${model.get("height")}px`;

  const graph = new Graph({ multi: false, type: "directed" });
  let data = null;          // the payload from Python
  let colors = null;        // per visible element colour (or null)
  let legendOf = [];        // per visible element legend label
  let selected = new Set();
  let highlighted = new Set();
  let hovered = null;
  let sigma = null;
  let painted = false;
  let resizer = null;

  function nodeInfo(id) {
    const a = graph.getNodeAttributes(id);
    const i = a.index;
    const name = a.kind === "group" ? id.slice("scope:".length) : id;
    const lines = [name, a.kind === "group" ? "scope (collapsed)" : `op: ${data.ops[data.op[i]]}`];
    if (a.kind === "group") lines.push(`${data.size[i]} nodes (click to expand)`);
    const f = [];
    for (const [bit, name] of Object.entries(FLAG_NAMES)) if (a.flags & Number(bit)) f.push(name);
    if (f.length) lines.push(`problem: ${f.join(", ")}`);
    if (colors && legendOf[i]) lines.push(legendOf[i]);
    return lines.join("\n");
  }

  function nodeReducer(id, a) {
    const res = { x: a.x, y: a.y, size: a.size, label: a.label, zIndex: 1 };
    const dim = highlighted.size > 0 && !highlighted.has(id) && !selected.has(id);
    let color = BASE_COLOR[a.kind];
    if (colors && colors[a.index]) color = colors[a.index];
    else if (a.flags) color = FLAG_COLOR;
    res.color = dim ? DIM_COLOR : color;
    if (a.flags) { res.forceLabel = true; res.label = `⚠ ${a.label}`; }
    if (highlighted.has(id)) { res.highlighted = true; res.forceLabel = true; res.zIndex = 2; }
    if (selected.has(id)) { res.highlighted = true; res.forceLabel = true; res.zIndex = 3; res.size = a.size * 1.4; }
    if (dim) { res.label = ""; res.zIndex = 0; }
    return res;
  }

  function edgeReducer(id, a) {
    if (highlighted.size === 0 && selected.size === 0) return a;
    const [s, t] = graph.extremities(id);
    const on = selected.has(s) || selected.has(t) || (highlighted.has(s) && highlighted.has(t));
    return { ...a, color: on ? "#555" : "#eee", zIndex: on ? 1 : 0 };
  }

  function updateDom() {
    root.dataset.nodes = String(graph.order);
    root.dataset.edges = String(graph.size);
    root.dataset.selected = JSON.stringify([...selected]);
    root.dataset.highlighted = JSON.stringify([...highlighted]);
    root.dataset.expanded = JSON.stringify(data ? data.expanded : []);
    root.dataset.colored = String(colors ? colors.filter((c) => c).length : 0);
    let flagged = 0;
    graph.forEachNode((n, a) => { if (a.flags) flagged += 1; });
    root.dataset.flagged = String(flagged);
    const total = data ? data.total_nodes : 0;
    status.textContent = `${graph.order} shown · ${total} nodes` +
      (selected.size ? ` · ${selected.size} selected` : "") +
      (highlighted.size ? ` · ${highlighted.size} highlighted` : "");
  }

  function typed(dv, T) {
    // a binary buffer from Python (DataView) as a typed array (copied: alignment)
    const bytes = new Uint8Array(dv.buffer, dv.byteOffset, dv.byteLength).slice();
    return new T(bytes.buffer);
  }

  function decode(w) {
    const split = (s) => (Array.isArray(s) ? s : s === "" ? [] : s.split("\x1f"));
    return {
      ids: w.n ? split(w.ids) : [], labels: w.n ? split(w.labels) : [], ops: w.ops,
      op: typed(w.op, Int32Array), kind: typed(w.kind, Uint8Array), x: typed(w.x, Float32Array),
      y: typed(w.y, Float32Array), size: typed(w.size, Int32Array), flags: typed(w.flags, Int32Array),
      edges: typed(w.edges, Int32Array), scopes: split(w.scopes), expanded: w.expanded,
      total_nodes: w.total_nodes, findings: w.findings, focus: w.focus,
    };
  }

  function loadGraph(w) {
    const d = decode(w);
    data = d;
    extentCache = null;
    tip.style.display = "none";
    hovered = null;
    graph.clear();
    const n = d.ids.length;
    const maxSize = d.size.reduce((m, v) => Math.max(m, v), 1);
    for (let i = 0; i < n; i++) {
      const kind = KIND[d.kind[i]];
      const size = kind === "group" ? 5 + 3 * Math.log(d.size[i]) / Math.log(maxSize + 1)
        : kind === "node" ? 4 : 3;
      graph.addNode(d.ids[i], { x: d.x[i] * X_SCALE, y: -d.y[i], size, label: d.labels[i], index: i, kind, flags: d.flags[i] });
    }
    const e = d.edges;
    const arrows = e.length / 2 < 4000;
    for (let k = 0; k < e.length; k += 2) {
      const s = d.ids[e[k]], t = d.ids[e[k + 1]];
      if (!graph.hasEdge(s, t)) graph.addEdge(s, t, { size: 1, color: "#b5b5b5", type: arrows ? "arrow" : "line" });
    }
    selected = new Set([...selected].filter((id) => graph.hasNode(id)));
  }

  function applyColors() {
    const c = model.get("colors");
    colors = c && c.length === graph.order ? c : null;
    const leg = model.get("legend") || [];
    legend.replaceChildren();
    const byColor = new Map(leg.map(([label, col]) => [col, label]));
    legendOf = colors ? colors.map((c) => (c ? byColor.get(c) || null : null)) : [];
    if (colors && leg.length) {
      for (const [label, col] of leg) {
        const row = el("div");
        const sw = el("span", { class: "sw" });
        sw.style.background = col;
        row.append(sw, el("span", {}, label));
        legend.append(row);
      }
      legend.style.display = "block";
    } else legend.style.display = "none";
  }

  let extentCache = null;
  function sizeRatio0() {
    return Math.max(100, stage.clientHeight || 500) / (extent() * 14);
  }

  function extent() {
    if (extentCache !== null) return extentCache;
    // the layout's largest side in graph units: sigma normalises it to 1
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    graph.forEachNode((n, a) => { x0 = Math.min(x0, a.x); x1 = Math.max(x1, a.x); y0 = Math.min(y0, a.y); y1 = Math.max(y1, a.y); });
    extentCache = Math.max(16, x1 - x0, y1 - y0);
    return extentCache;
  }

  function fitTo(ids, animate = true) {
    if (!sigma) return;
    const cam = sigma.getCamera();
    const pts = ids.map((id) => sigma.getNodeDisplayData(id)).filter((p) => p);
    if (!pts.length) { animate ? cam.animatedReset() : cam.setState({ x: 0.5, y: 0.5, ratio: 1, angle: 0 }); return; }
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    for (const p of pts) { x0 = Math.min(x0, p.x); x1 = Math.max(x1, p.x); y0 = Math.min(y0, p.y); y1 = Math.max(y1, p.y); }
    // never zoom in further than about 16 layout units (ranks) across
    const state = { x: (x0 + x1) / 2, y: (y0 + y1) / 2,
      ratio: Math.max(16 / extent(), Math.max(x1 - x0, y1 - y0) * 1.3), angle: 0 };
    animate ? cam.animate(state, { duration: 300 }) : cam.setState(state);
  }

  function startSigma() {
    sigma = new Sigma(graph, stage, {
      nodeReducer, edgeReducer, zIndex: true, renderEdgeLabels: false,
      labelRenderedSizeThreshold: 6, labelDensity: 0.5, hideEdgesOnMove: graph.size > 20000,
      defaultEdgeType: "line", minCameraRatio: Math.min(0.005, 2 / extent()), maxCameraRatio: 4, stagePadding: 20,
      allowInvalidContainer: true,
      // sizes grow with the zoom once ranks are ~14 px apart, so nodes never swallow neighbours
      zoomToSizeRatioFunction: (ratio) => Math.min(1, ratio / Math.max(1e-9, sizeRatio0())),
    });
    // JupyterLab may render before the element is attached: redraw when it gets a size
    resizer = new ResizeObserver(() => { if (stage.clientWidth > 0) { sigma.resize(); sigma.refresh(); } });
    resizer.observe(stage);
    sigma.on("afterRender", () => {
      if (painted || stage.clientWidth === 0 || stage.clientHeight === 0) return;
      painted = true;
      const t = Date.now();
      root.dataset.firstPaint = String(t);
      root.dataset.firstPaintMs = String(t - renderStart);
      const tm = JSON.parse(root.dataset.timings || "{}");
      tm.module_to_render_ms = renderStart - moduleLoaded;
      root.dataset.timings = JSON.stringify(tm);
      model.send({ type: "painted", ms: t - renderStart, nodes: graph.order });
    });
    sigma.on("enterNode", ({ node }) => {
      hovered = node;
      tip.textContent = nodeInfo(node);
      const p = sigma.graphToViewport(graph.getNodeAttributes(node));
      tip.style.left = `${p.x + 12}px`;
      tip.style.top = `${p.y + 12}px`;
      tip.style.display = "block";
      root.dataset.hovered = node;
    });
    sigma.on("leaveNode", () => { hovered = null; tip.style.display = "none"; root.dataset.hovered = ""; });
    sigma.on("clickNode", ({ node, event }) => {
      const a = graph.getNodeAttributes(node);
      const multi = event.original && (event.original.shiftKey || event.original.ctrlKey || event.original.metaKey);
      if (a.kind === "group" && !multi) {
        model.send({ type: "toggle", id: node });
        return;
      }
      if (multi) { selected.has(node) ? selected.delete(node) : selected.add(node); }
      else selected = new Set([node]);
      pushSelection();
    });
    sigma.on("clickStage", () => { if (selected.size) { selected = new Set(); pushSelection(); } });
  }

  function pushSelection() {
    model.set("selected", [...selected]);
    model.save_changes();
    updateDom();
    sigma && sigma.refresh({ skipIndexation: true });
  }

  function redrawFromModel(fit) {
    const t0 = performance.now();
    loadGraph(model.get("graph"));
    applyColors();
    highlighted = new Set((model.get("highlighted") || []).filter((id) => graph.hasNode(id)));
    const t1 = performance.now();
    if (!painted) root.dataset.timings = JSON.stringify({ load_ms: Math.round(t1 - t0) });
    if (!sigma) startSigma();
    else { sigma.setSetting("minCameraRatio", Math.min(0.005, 2 / extent())); sigma.refresh(); }
    updateDom();
    if (fit) {
      const focus = (data.focus || []).filter((id) => graph.hasNode(id));
      fitTo(focus, false);
    }
  }

  // Python -> JS
  const onGraph = () => redrawFromModel(true);
  const onColors = () => { applyColors(); updateDom(); sigma && sigma.refresh({ skipIndexation: true }); };
  const onHighlight = () => {
    highlighted = new Set((model.get("highlighted") || []).filter((id) => graph.hasNode(id)));
    updateDom();
    sigma && sigma.refresh({ skipIndexation: true });
  };
  const onSelected = () => {
    const s = new Set((model.get("selected") || []).filter((id) => graph.hasNode(id)));
    if (s.size === selected.size && [...s].every((x) => selected.has(x))) return;
    selected = s;
    updateDom();
    sigma && sigma.refresh({ skipIndexation: true });
  };
  const onMsg = (msg) => {
    if (msg.type === "fit") fitTo(msg.ids && msg.ids.length ? msg.ids : [], true);
  };
  model.on("change:graph", onGraph);
  model.on("change:colors", onColors);
  model.on("change:legend", onColors);
  model.on("change:highlighted", onHighlight);
  model.on("change:selected", onSelected);
  model.on("msg:custom", onMsg);

  // toolbar
  let searchTimer = null;
  search.value = model.get("search") || "";
  search.addEventListener("input", () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => { model.set("search", search.value); model.save_changes(); }, 150);
  });
  search.addEventListener("keydown", (ev) => {
    ev.stopPropagation(); // keep JupyterLab shortcuts out of the search box
    if (ev.key === "Enter") fitTo([...highlighted], true);
  });
  btnFit.addEventListener("click", () => fitTo([], true));
  btnFitSel.addEventListener("click", () => fitTo([...selected], true));
  btnCollapse.addEventListener("click", () => {
    if (selected.size) model.send({ type: "collapse", ids: [...selected] });
  });
  btnReset.addEventListener("click", () => model.send({ type: "reset" }));

  // test hook
  const handle = {
    root, graph,
    get sigma() { return sigma; },
    nodeClientXY(id) {
      const a = graph.getNodeAttributes(id);
      const p = sigma.graphToViewport(a);
      const r = stage.getBoundingClientRect();
      return { x: r.left + p.x, y: r.top + p.y };
    },
    displayedColor(id) { return nodeReducer(id, graph.getNodeAttributes(id)).color; },
    fitTo,
  };
  window.__wbGraphViews = window.__wbGraphViews || [];
  window.__wbGraphViews.push(handle);

  // first draw once the element is attached and has a size
  redrawFromModel(true);

  return () => {
    model.off("change:graph", onGraph);
    model.off("change:colors", onColors);
    model.off("change:legend", onColors);
    model.off("change:highlighted", onHighlight);
    model.off("change:selected", onSelected);
    model.off("msg:custom", onMsg);
    const i = window.__wbGraphViews.indexOf(handle);
    if (i >= 0) window.__wbGraphViews.splice(i, 1);
    if (resizer) resizer.disconnect();
    if (sigma) sigma.kill();
  };
}

export default { render };
