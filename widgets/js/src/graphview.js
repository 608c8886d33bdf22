// The graph view of trt-workbench: draws the layout computed in Python (workbench.graphs.layout) as
// boxes on a 2D canvas (op type as title, weights folded in, edges with bends and, zoomed in,
// dtype/shape labels). Python owns the state (layout, expand/collapse, search, colours,
// highlight); this file draws it and reports interactions back (selection, toggles, search).
// Renderer: one <canvas> per view, redrawn on demand (requestAnimationFrame): boxes batched per
// colour, everything outside the viewport culled, text only where it fits inside its box (boxes
// never overlap, so labels never do). The first frame does only what it shows: edge points are
// made when a frame first needs them, the element store fills on first use, the minimap follows a
// frame later. benchmarks/graph_render.py measures a cell's execution start -> first frame in
// JupyterLab at 20k nodes, and frame times at 5k-20k nodes, in headless chromium.
// Test hooks: the root element carries data-* attributes with the drawn state and
// window.__wbGraphViews lists live views with helpers (node client coordinates, drawn labels).
import { CATEGORY_COLORS, categoryOf } from "./categories.js";
import { Camera } from "./camera.js";
import { Elements } from "./elements.js";
import "./graphview.css"; // bundled to widgets/static/graphview.css (anywidget's _css)

const moduleLoaded = Date.now();
const KIND = ["node", "group", "input", "output"];
const FLAG_NAMES = { 1: "cycle", 2: "dangling input", 4: "duplicate name", 8: "tensor produced twice" };
const BASE_COLOR = { node: "#5b7db1", group: "#8e6bb8", input: "#3f9b57", output: "#c07a2c" };
const FLAG_COLOR = "#d62728";
const DIM_COLOR = "#e4e4e4";
const FADE = 0.6;  // share of white mixed into a dimmed overlay colour
function fade(hex) {
  // "#rrggbb" mixed with white (FADE of it)
  const c = [1, 3, 5].map((k) => parseInt(hex.slice(k, k + 2), 16));
  if (hex.length !== 7 || c.some((v) => Number.isNaN(v))) return DIM_COLOR;
  return "#" + c.map((v) => Math.round(v + (255 - v) * FADE).toString(16).padStart(2, "0")).join("");
}
const NO_DATA_FILL = "#ffffff";
const UNIT = 100;            // px per layout x unit at zoom 1
const TITLE_H = 20, LINE_H = 13, PAD = 4, RANK_GAP = 34, GROUP_H = 30, IO_H = 22;
const TITLE_FONT = 11, LINE_FONT = 9.5, EDGE_FONT = 8.5;
const MIN_FONT_PX = 6.5;     // text smaller than this on screen is not drawn
const READABLE_TITLE_PX = 9; // the opening view keeps titles at least this large

function el(tag, attrs = {}, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function typed(dv, T) {
  // a binary buffer from Python (DataView) as a typed array (copied: alignment)
  if (!dv) return new T(0);
  const bytes = new Uint8Array(dv.buffer, dv.byteOffset, dv.byteLength).slice();
  return new T(bytes.buffer);
}

function decode(w) {
  const split = (s) => (Array.isArray(s) ? s : !s ? [] : s.split("\x1f"));
  const n = w.n;
  const pad = (xs, k) => { while (xs.length < k) xs.push(""); return xs; };
  const d = {
    n, ids: n ? split(w.ids) : [], labels: n ? split(w.labels) : [], ops: w.ops,
    op: typed(w.op, Int32Array), kind: typed(w.kind, Uint8Array), x: typed(w.x, Float32Array),
    rank: typed(w.y, Float32Array), size: typed(w.size, Int32Array), flags: typed(w.flags, Int32Array),
    scope: typed(w.scope, Int32Array), edges: typed(w.edges, Int32Array), scopes: split(w.scopes),
    scopeParent: typed(w.scope_parent, Int32Array), expanded: w.expanded, total_nodes: w.total_nodes,
    findings: w.findings, focus: w.focus, width: typed(w.width, Float32Array),
    bendStart: typed(w.bend_start, Int32Array), bendCount: typed(w.bend_count, Int32Array),
    bendX: typed(w.bend_x, Float32Array),
  };
  d.opFill = (w.ops || []).map((o) => CATEGORY_COLORS[categoryOf(o)]);
  d.info = n ? pad(w.info === undefined ? [] : split(w.info), n) : [];
  d.edgeLabels = pad(w.edge_labels === undefined ? [] : split(w.edge_labels), d.edges.length / 2);
  if (d.width.length !== n) d.width = new Float32Array(n).fill(1);
  return d;
}

const NO_LINES = Object.freeze([]);

function lineCount(s) {
  // lines of a box's text ("" has none), without splitting it
  if (!s) return 0;
  let k = 1;
  for (let j = s.indexOf("\n"); j >= 0; j = s.indexOf("\n", j + 1)) k += 1;
  return k;
}

// scene geometry: world coordinates of every box (px at zoom 1) and every edge's polyline
function buildScene(d) {
  const n = d.n;
  const X = new Float32Array(n), Y = new Float32Array(n), W = new Float32Array(n), H = new Float32Array(n);
  const lines = new Array(n).fill(null);  // a box's weight lines, split when first drawn
  let maxRank = 0;
  for (let i = 0; i < n; i++) maxRank = Math.max(maxRank, d.rank[i]);
  const rankH = new Float32Array(maxRank + 1).fill(IO_H);
  for (let i = 0; i < n; i++) {
    const k = d.kind[i];
    const nl = lineCount(d.info[i]);
    H[i] = k === 1 ? GROUP_H : k === 0 ? TITLE_H + LINE_H * nl + (nl ? PAD : 0) : IO_H;
    W[i] = d.width[i] * UNIT;
    if (H[i] > rankH[d.rank[i]]) rankH[d.rank[i]] = H[i];
  }
  const rankY = new Float32Array(maxRank + 1);  // centre line of each rank
  let y = 0;
  for (let r = 0; r <= maxRank; r++) { rankY[r] = y + rankH[r] / 2; y += rankH[r] + RANK_GAP; }
  for (let i = 0; i < n; i++) { X[i] = d.x[i] * UNIT; Y[i] = rankY[d.rank[i]]; }
  // edges: from the upper box's bottom through one bend per rank to the lower box's top. The
  // long edges of one source share a trunk (their bends are prefixes of the longest one's):
  // the trunk is drawn once, with the longest edge, and every other edge only from where it
  // leaves the trunk, so a mask read by every layer costs its depth in points, not more.
  const E = d.edges.length / 2;
  const ePtr = new Int32Array(E + 1);
  const eBox = new Float32Array(E * 4);
  const upOf = new Int32Array(E), nb = new Int32Array(E);
  const longest = new Int32Array(n).fill(-1);  // upper element -> edge with the most bends
  for (let e = 0; e < E; e++) {
    const s = d.edges[2 * e], t = d.edges[2 * e + 1];
    upOf[e] = d.rank[s] <= d.rank[t] ? s : t;
    nb[e] = d.bendCount.length ? d.bendCount[e] : 0;
    const cur = longest[upOf[e]];
    if (nb[e] > 0 && (cur < 0 || nb[e] > nb[cur])) longest[upOf[e]] = e;
  }
  // a whole edge has its two ends and two points per bend; a branch off a trunk, its last
  // bend's lower point and its end. Points and boxes are made per edge on first use
  // (`edge(e)`): a first frame zoomed in on the top of a 20k-node graph needs few of them.
  const whole = new Uint8Array(E), made = new Uint8Array(E);
  for (let e = 0; e < E; e++) {
    whole[e] = nb[e] === 0 || longest[upOf[e]] === e ? 1 : 0;
    ePtr[e + 1] = ePtr[e] + (whole[e] ? 4 + 4 * nb[e] : 4);
  }
  const pts = new Float32Array(ePtr[E]);
  function edge(e) {
    if (made[e]) return;
    made[e] = 1;
    const s = d.edges[2 * e], t = d.edges[2 * e + 1];
    const up = upOf[e], lo = up === s ? t : s;
    const b0 = nb[e] ? d.bendStart[e] : 0, b1 = b0 + nb[e];  // a trunk's bends are shared
    const w = whole[e];
    let j = ePtr[e];
    if (w) { pts[j++] = X[up]; pts[j++] = Y[up] + H[up] / 2; }
    for (let b = w ? b0 : b1 - 1; b < b1; b++) {
      const r = d.rank[up] + 1 + (b - b0);
      const bx = d.bendX[b] * UNIT;
      if (w) { pts[j++] = bx; pts[j++] = rankY[r] - rankH[r] / 2; }
      pts[j++] = bx; pts[j++] = rankY[r] + rankH[r] / 2;
    }
    pts[j++] = X[lo]; pts[j++] = Y[lo] - H[lo] / 2;
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    for (let k = ePtr[e]; k < j; k += 2) {
      const px = pts[k], py = pts[k + 1];
      if (px < x0) x0 = px; if (px > x1) x1 = px; if (py < y0) y0 = py; if (py > y1) y1 = py;
    }
    eBox[4 * e] = x0; eBox[4 * e + 1] = y0; eBox[4 * e + 2] = x1; eBox[4 * e + 3] = y1;
  }
  // whether edge e may cross the rows y0..y1 (its ends' ranks bound it): edges outside are
  // culled before their points are made
  function edgeMayCross(e, y0, y1) {
    if (made[e]) return !(eBox[4 * e + 3] < y0 || eBox[4 * e + 1] > y1);
    const a = Y[d.edges[2 * e]], b = Y[d.edges[2 * e + 1]];
    return !(Math.max(a, b) + GROUP_H < y0 || Math.min(a, b) - GROUP_H > y1);
  }
  let bx0 = Infinity, bx1 = -Infinity, by0 = Infinity, by1 = -Infinity;
  for (let i = 0; i < n; i++) {
    bx0 = Math.min(bx0, X[i] - W[i] / 2); bx1 = Math.max(bx1, X[i] + W[i] / 2);
    by0 = Math.min(by0, Y[i] - H[i] / 2); by1 = Math.max(by1, Y[i] + H[i] / 2);
  }
  if (!n) { bx0 = by0 = 0; bx1 = by1 = 1; }
  const linesOf = (i) => {
    let ls = lines[i];
    if (ls === null) ls = lines[i] = d.info[i] ? d.info[i].split("\n") : NO_LINES;
    return ls;
  };
  return { X, Y, W, H, linesOf, ePtr, pts, eBox, E, edge, edgeMayCross,
    bounds: { x0: bx0, y0: by0, x1: bx1, y1: by1 } };
}

const textWidthCache = new Map();
function textWidth(ctx, font, s) {
  const key = font + "\x00" + s;
  let w = textWidthCache.get(key);
  if (w === undefined) {
    ctx.font = font;
    w = ctx.measureText(s).width;
    if (textWidthCache.size > 50000) textWidthCache.clear();
    textWidthCache.set(key, w);
  }
  return w;
}

// the longest prefix of s (with an ellipsis) that fits in maxW px at base font size
function fitText(ctx, font, s, maxW) {
  if (textWidth(ctx, font, s) <= maxW) return s;
  let lo = 0, hi = s.length;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (textWidth(ctx, font, s.slice(0, mid) + "…") <= maxW) lo = mid; else hi = mid - 1;
  }
  return lo >= 3 ? s.slice(0, lo) + "…" : null;
}

const rgbaCache = new Map();
function rgba32(hex) {
  // a CSS #rrggbb colour as a little-endian RGBA pixel (ImageData's Uint32 view)
  let v = rgbaCache.get(hex);
  if (v === undefined) {
    const r = parseInt(hex.slice(1, 3), 16) || 0, g = parseInt(hex.slice(3, 5), 16) || 0, b = parseInt(hex.slice(5, 7), 16) || 0;
    v = ((255 << 24) | (b << 16) | (g << 8) | r) >>> 0;
    rgbaCache.set(hex, v);
  }
  return v;
}

function render({ model, el: host }) {
  const renderStart = Date.now();
  const root = el("div", { class: "wb-graph" });
  root.dataset.renderStart = String(renderStart);
  const bar = el("div", { class: "wb-bar" });
  const search = el("input", { type: "search", placeholder: "search name or op", class: "wb-search" });
  const btnPrev = el("button", { class: "wb-prev", title: "Previous match (Shift+Enter)" }, "◀");
  const btnNext = el("button", { class: "wb-next", title: "Next match (Enter)" }, "▶");
  const btnFit = el("button", { class: "wb-fit", title: "Show the whole graph (F)" }, "Fit");
  const btnFitSel = el("button", { class: "wb-fit-sel", title: "Zoom to the selection (S)" }, "Fit selection");
  const btnCollapse = el("button", { class: "wb-collapse", title: "Collapse the scope of the selection" }, "Collapse");
  const btnReset = el("button", { class: "wb-reset", title: "Back to the default collapsed view" }, "Reset");
  const status = el("span", { class: "wb-status" });
  bar.append(search, btnPrev, btnNext, btnFit, btnFitSel, btnCollapse, btnReset, status);
  const crumbs = el("div", { class: "wb-crumbs" });
  const stage = el("div", { class: "wb-stage", tabindex: "0" });
  const canvas = el("canvas", { class: "wb-main" });
  const minimap = el("canvas", { class: "wb-minimap", width: "150", height: "110" });
  const tip = el("div", { class: "wb-tip" });
  const legend = el("div", { class: "wb-legend" });
  legend.style.display = "none";
  stage.append(canvas, minimap, tip, legend);
  root.append(bar, crumbs, stage);
  host.appendChild(root);
  stage.style.height = `${model.get("height")}px`;
  const ctx = canvas.getContext("2d");
  const mctx = minimap.getContext("2d");

  const graph = new Elements();
  const camera = new Camera(() => schedule());
  let data = null, scene = null;
  let colors = null;        // per visible element colour (or null) from Python
  let legendOf = [];
  let selected = new Set(), highlighted = new Set();
  let selIdx = new Set(), hiIdx = new Set();
  let hovered = null;
  let painted = false;
  let drawnLabels = [];     // [{id, text, x0, y0, x1, y1}] in CSS px of the canvas, last frame
  let matchCursor = -1;
  let frameReq = 0;
  let pixelBuf = null;
  let pendingFit = null;
  let loadTimes = {}, loadDone = 0;
  let lastView = null;      // the world rectangle of the last frame (the minimap's red box)
  const frameTimes = [];

  const indexOf = (id) => { const i = graph.index.get(id); return i === undefined ? -1 : i; };

  function styleOf(i) {
    // fill colour of element i as drawn (same rules as the old WebGL view, plus no-data outline)
    const kind = KIND[data.kind[i]];
    const dim = hiIdx.size > 0 && !hiIdx.has(i) && !selIdx.has(i);
    let fill;
    if (colors) fill = colors[i] || (data.flags[i] ? FLAG_COLOR : NO_DATA_FILL);
    else if (data.flags[i]) fill = FLAG_COLOR;
    else if (kind === "node") fill = data.opFill[data.op[i]];
    else fill = BASE_COLOR[kind];
    // dimmed beside a highlight: flat grey, but a data overlay (time, error) is only faded,
    // so its levels stay readable around what is highlighted
    if (dim) fill = colors && colors[i] ? fade(colors[i]) : DIM_COLOR;
    return fill;
  }

  function nodeInfo(id) {
    const a = graph.getNodeAttributes(id);
    const i = a.index;
    const name = a.kind === "group" ? id.slice("scope:".length) : id;
    const lines = [name, a.kind === "group" ? "scope (collapsed)" : `op: ${data.ops[data.op[i]]}`];
    if (a.kind === "group") lines.push(`${data.size[i]} nodes (click to expand)`);
    if (data.info[i]) lines.push(data.info[i]);
    const f = [];
    for (const [bit, nm] of Object.entries(FLAG_NAMES)) if (a.flags & Number(bit)) f.push(nm);
    if (f.length) lines.push(`problem: ${f.join(", ")}`);
    if (colors && legendOf[i]) lines.push(legendOf[i]);
    return lines.join("\n");
  }

  function updateDom() {
    root.dataset.nodes = String(graph.order);
    root.dataset.edges = String(graph.size);
    root.dataset.selected = JSON.stringify([...selected]);
    root.dataset.highlighted = JSON.stringify([...highlighted]);
    root.dataset.expanded = JSON.stringify(data ? data.expanded : []);
    root.dataset.colored = String(colors ? colors.filter((c) => c).length : 0);
    let flagged = 0;
    if (data) for (let i = 0; i < data.n; i++) if (data.flags[i]) flagged += 1;
    root.dataset.flagged = String(flagged);
    const total = data ? data.total_nodes : 0;
    status.textContent = `${graph.order} shown · ${total} nodes` +
      (selected.size ? ` · ${selected.size} selected` : "") +
      (highlighted.size ? ` · ${highlighted.size} highlighted` : "");
    updateCrumbs();
  }

  function updateCrumbs() {
    // breadcrumbs: the scopes enclosing the (first) selected element; a click collapses there
    crumbs.replaceChildren();
    const id = [...selected][0];
    const i = id === undefined ? -1 : indexOf(id);
    if (i < 0) { crumbs.textContent = "graph"; return; }
    const path = [];
    let s = data.scope[i];
    while (s >= 0) { path.push(s); s = data.scopeParent.length ? data.scopeParent[s] : -1; }
    crumbs.append(el("span", {}, "graph"));
    for (const k of path.reverse()) {
      const scope = data.scopes[k];
      const a = el("a", { "data-scope": scope, title: `collapse ${scope}` }, scope.split("/").pop() || scope);
      a.addEventListener("click", () => model.send({ type: "collapse_scope", scope }));
      crumbs.append(el("span", {}, " › "), a);
    }
    crumbs.append(el("span", {}, ` › ${data.labels[i]}`));
  }

  function loadGraph(w) {
    const q0 = performance.now();
    const d = decode(w);
    const q1 = performance.now();
    data = d;
    scene = buildScene(d);
    loadTimes = { decode_ms: q1 - q0, scene_ms: performance.now() - q1 };
    tip.style.display = "none";
    hovered = null;
    const sc = scene;
    graph.load(d.ids, (i) => ({ x: sc.X[i], y: sc.Y[i], label: d.labels[i], index: i,
      kind: KIND[d.kind[i]], flags: d.flags[i] }), d.edges);
    selected = new Set([...selected].filter((id) => graph.hasNode(id)));
    camera.setBounds(scene.bounds, stage.clientWidth || 600, stage.clientHeight || 400);
  }

  function legendRow(color, label) {
    const row = el("div");
    const sw = el("span", { class: "sw" });
    sw.style.background = color;
    row.append(sw, el("span", {}, label));
    legend.append(row);
  }

  function applyColors() {
    const c = model.get("colors");
    colors = c && data && c.length === data.n ? c : null;
    const leg = model.get("legend") || [];
    const scale = model.get("scale") || {};
    legend.replaceChildren();
    const byColor = new Map(leg.map(([label, col]) => [col, label]));
    legendOf = colors ? colors.map((x) => (x ? byColor.get(x) || null : null)) : [];
    if (colors && scale.stops && scale.stops.length) {
      // a continuous scale: gradient bar, ticks, and the no-data swatch
      legend.append(el("div", { class: "wb-scale-title" }, scale.title || "value"));
      const g = el("div", { class: "wb-scale" });
      g.style.background = `linear-gradient(to right, ${scale.stops.map((s) => s[1]).join(", ")})`;
      const ticks = el("div", { class: "wb-ticks" });
      for (const t of scale.ticks || []) ticks.append(el("span", {}, t));
      legend.append(g, ticks);
      legendRow(NO_DATA_FILL, scale.no_data || "no data (outlined)");
      legend.style.display = "block";
    } else if (colors && leg.length) {
      for (const [label, col] of leg) legendRow(col, label);
      legend.style.display = "block";
    } else if (data && data.n) {
      // default: colours by op category, only the categories present
      // nodes per op, then per category (listed by count, ties in order of first appearance)
      const perOp = new Int32Array(data.ops.length), firstOf = new Int32Array(data.ops.length).fill(data.n);
      for (let i = 0; i < data.n; i++) {
        if (data.kind[i] !== 0) continue;
        const o = data.op[i];
        if (perOp[o]++ === 0) firstOf[o] = i;
      }
      const seen = new Map();  // category -> [count, first element]
      for (let o = 0; o < perOp.length; o++) {
        if (!perOp[o]) continue;
        const c = categoryOf(data.ops[o]), got = seen.get(c);
        if (got) { got[0] += perOp[o]; got[1] = Math.min(got[1], firstOf[o]); } else seen.set(c, [perOp[o], firstOf[o]]);
      }
      const cats = [...seen.entries()].sort((a, b) => a[1][1] - b[1][1]).sort((a, b) => b[1][0] - a[1][0]);
      for (const [cat, [cnt]] of cats) {
        legendRow(CATEGORY_COLORS[cat], `${cat} (${cnt})`);
      }
      for (const [label, col] of [["scope (click to open)", BASE_COLOR.group], ["input", BASE_COLOR.input], ["output", BASE_COLOR.output]]) {
        legendRow(col, label);
      }
      legend.style.display = "block";
    } else legend.style.display = "none";
  }

  // -- drawing ------------------------------------------------------------------------------
  function resizeCanvas() {
    const w = stage.clientWidth, h = stage.clientHeight;
    const dpr = window.devicePixelRatio || 1;
    if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
      canvas.width = Math.round(w * dpr);
      canvas.height = Math.round(h * dpr);
      canvas.style.width = `${w}px`;
      canvas.style.height = `${h}px`;
    }
    camera.viewport(w, h);
    return dpr;
  }

  function schedule(dirtyMini) {
    if (dirtyMini) miniDirty();
    if (!frameReq) frameReq = requestAnimationFrame(draw);
  }

  function boxPath(c, k, x, y, w, h) {
    if (k === 2) { // input: a pill
      const r = h / 2;
      c.moveTo(x + r, y); c.lineTo(x + w - r, y); c.arc(x + w - r, y + r, r, -Math.PI / 2, Math.PI / 2);
      c.lineTo(x + r, y + h); c.arc(x + r, y + r, r, Math.PI / 2, 1.5 * Math.PI);
    } else if (k === 3) { // output: a hexagon-ended box
      const r = Math.min(h / 2, w / 4);
      c.moveTo(x + r, y); c.lineTo(x + w - r, y); c.lineTo(x + w, y + h / 2); c.lineTo(x + w - r, y + h);
      c.lineTo(x + r, y + h); c.lineTo(x, y + h / 2); c.closePath();
    } else c.rect(x, y, w, h);
  }

  function draw() {
    frameReq = 0;
    if (!data || stage.clientWidth === 0 || stage.clientHeight === 0) return;
    const t0 = performance.now();
    const dpr = resizeCanvas();
    const W = stage.clientWidth, H = stage.clientHeight;
    camera.step();
    const s = camera.scale, ox = camera.offsetX(), oy = camera.offsetY();
    const vx0 = -ox / s, vy0 = -oy / s, vx1 = (W - ox) / s, vy1 = (H - oy) / s;
    const { X, Y, W: BW, H: BH, ePtr, pts, eBox, E, edge, edgeMayCross } = scene;
    // boxes under 3 px on screen are written as pixels into one image (zoomed out, thousands
    // of them cost one putImageData instead of thousands of path rectangles)
    const tiny = [];
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    if (s * 20 < 3 * 1.0) {
      const cw = canvas.width, ch = canvas.height;
      if (!pixelBuf || pixelBuf.width !== cw || pixelBuf.height !== ch) pixelBuf = ctx.createImageData(cw, ch);
      const px = new Uint32Array(pixelBuf.data.buffer);
      px.fill(0xffffffff);
      for (let i = 0; i < data.n; i++) {
        const x = X[i] * s + ox, y = Y[i] * s + oy;
        if (x < -2 || y < -2 || x > W + 2 || y > H + 2) continue;
        if (BW[i] * s >= 3 || BH[i] * s >= 3) continue;
        tiny.push(i);
        const c = rgba32(styleOf(i));
        const hw = Math.max(1, BW[i] * s * dpr), hh = Math.max(1, BH[i] * s * dpr);
        const x0 = Math.max(0, Math.round(x * dpr - hw / 2)), y0 = Math.max(0, Math.round(y * dpr - hh / 2));
        const x1 = Math.min(cw, x0 + Math.max(1, Math.round(hw))), y1 = Math.min(ch, y0 + Math.max(1, Math.round(hh)));
        for (let yy = y0; yy < y1; yy++) px.fill(c, yy * cw + x0, yy * cw + x1);
      }
      ctx.putImageData(pixelBuf, 0, 0);
    } else {
      ctx.fillStyle = "#ffffff";
      ctx.fillRect(0, 0, canvas.width, canvas.height);
    }
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    // edges: one path for plain edges, one for lit ones
    const lit = selIdx.size > 0 || hiIdx.size > 0;
    const plain = new Path2D(), on = new Path2D();
    const arrows = s > 0.35;
    const arrowPlain = new Path2D(), arrowOn = new Path2D();
    for (let e = 0; e < E; e++) {
      if (!edgeMayCross(e, vy0, vy1)) continue;
      edge(e);
      if (eBox[4 * e + 2] < vx0 || eBox[4 * e] > vx1 || eBox[4 * e + 3] < vy0 || eBox[4 * e + 1] > vy1) continue;
      if ((eBox[4 * e + 2] - eBox[4 * e]) * s < 1 && (eBox[4 * e + 3] - eBox[4 * e + 1]) * s < 2) continue;  // under a pixel
      const a = data.edges[2 * e], b = data.edges[2 * e + 1];
      const isOn = lit && (selIdx.has(a) || selIdx.has(b) || (hiIdx.has(a) && hiIdx.has(b)));
      const p = isOn ? on : plain;
      const j0 = ePtr[e], j1 = ePtr[e + 1];
      p.moveTo(pts[j0] * s + ox, pts[j0 + 1] * s + oy);
      for (let j = j0 + 2; j < j1; j += 2) p.lineTo(pts[j] * s + ox, pts[j + 1] * s + oy);
      if (arrows) {
        // arrowhead at the consumer's end
        // arrowhead at the lower end (edges run downwards; a reversed back-edge points up there)
        const down = data.rank[a] <= data.rank[b];
        const hx = pts[j1 - 2] * s + ox, hy = pts[j1 - 1] * s + oy;
        const dir = down ? 1 : -1, z = Math.min(6, 4 * s + 1);
        const ap = isOn ? arrowOn : arrowPlain;
        const by = down ? hy - z : hy;
        ap.moveTo(hx, down ? hy : hy - z); ap.lineTo(hx - z * 0.6, by + (down ? 0 : z)); ap.lineTo(hx + z * 0.6, by + (down ? 0 : z)); ap.closePath();
        void dir;
      }
    }
    ctx.lineWidth = Math.max(0.6, Math.min(1.5, 1.2 * s));
    ctx.strokeStyle = lit ? "#dddddd" : "#9a9a9a";
    ctx.stroke(plain);
    ctx.fillStyle = ctx.strokeStyle;
    if (arrows) ctx.fill(arrowPlain);
    if (lit) {
      ctx.strokeStyle = "#444"; ctx.lineWidth = Math.max(1, 1.6 * Math.min(1, s));
      ctx.stroke(on); ctx.fillStyle = "#444"; if (arrows) ctx.fill(arrowOn);
    }
    // boxes, batched per fill colour
    const visible = [];
    const byFill = new Map();
    for (let i = 0; i < data.n; i++) {
      const hw = BW[i] / 2, hh = BH[i] / 2;
      if (X[i] + hw < vx0 || X[i] - hw > vx1 || Y[i] + hh < vy0 || Y[i] - hh > vy1) continue;
      visible.push(i);
      if (tiny.length && BW[i] * s < 3 && BH[i] * s < 3) continue;  // drawn as pixels
      const f = styleOf(i);
      let p = byFill.get(f);
      if (!p) { p = new Path2D(); byFill.set(f, p); }
      const w = Math.max(1, BW[i] * s), h = Math.max(1, BH[i] * s);
      const x = (X[i] - hw) * s + ox, y = (Y[i] - hh) * s + oy;
      if (w < 4) p.rect(x, y, w, h); else boxPath(p, data.kind[i], x, y, w, h);
    }
    const outline = new Path2D(), groupLine = new Path2D();
    for (const [f, p] of byFill) { ctx.fillStyle = f; ctx.fill(p); }
    if (s * 20 > 6) {
      for (const i of visible) {
        const w = BW[i] * s, h = BH[i] * s;
        const x = (X[i] - BW[i] / 2) * s + ox, y = (Y[i] - BH[i] / 2) * s + oy;
        boxPath(data.kind[i] === 1 ? groupLine : outline, data.kind[i], x, y, w, h);
      }
      ctx.lineWidth = 1; ctx.strokeStyle = "rgba(0,0,0,0.45)"; ctx.stroke(outline);
      ctx.setLineDash([4, 3]); ctx.strokeStyle = "#5a3d85"; ctx.lineWidth = 1.5; ctx.stroke(groupLine);
      ctx.setLineDash([]);
    }
    // selection / highlight rings
    if (lit) {
      const ring = new Path2D(), hring = new Path2D();
      for (const i of visible) {
        if (!selIdx.has(i) && !hiIdx.has(i)) continue;
        const w = BW[i] * s + 6, h = BH[i] * s + 6;
        (selIdx.has(i) ? ring : hring).rect((X[i] - BW[i] / 2) * s + ox - 3, (Y[i] - BH[i] / 2) * s + oy - 3, Math.max(w, 6), Math.max(h, 6));
      }
      ctx.lineWidth = 2; ctx.strokeStyle = "#ff8c00"; ctx.stroke(hring);
      ctx.lineWidth = 2.5; ctx.strokeStyle = "#111"; ctx.stroke(ring);
    }
    // text: only inside boxes and only where it fits (boxes never overlap, so labels never do)
    drawnLabels = [];
    const titlePx = TITLE_FONT * s;
    if (titlePx >= MIN_FONT_PX) {
      ctx.textBaseline = "middle";
      ctx.textAlign = "center";
      const base = `600 ${TITLE_FONT}px system-ui, sans-serif`;
      const small = `${LINE_FONT}px ui-monospace, monospace`;
      for (const i of visible) {
        const k = data.kind[i];
        const title = k === 0 ? data.ops[data.op[i]] : data.labels[i];
        const boxW = BW[i] - 8;
        const t = fitText(ctx, base, (data.flags[i] ? "⚠ " : "") + title, boxW);
        if (t === null) continue;
        const cx = X[i] * s + ox;
        const top = (Y[i] - BH[i] / 2) * s + oy;
        const ty = k === 0 ? top + (TITLE_H / 2) * s : Y[i] * s + oy;
        const fill = styleOf(i);
        ctx.fillStyle = textColorOn(fill);
        ctx.font = `600 ${titlePx}px system-ui, sans-serif`;
        ctx.fillText(t, cx, ty);
        const tw = textWidth(ctx, base, t) * s;
        drawnLabels.push({ id: data.ids[i], text: t, x0: cx - tw / 2, y0: ty - titlePx / 2, x1: cx + tw / 2, y1: ty + titlePx / 2 });
        const ls = scene.linesOf(i);
        if (ls.length && LINE_FONT * s >= MIN_FONT_PX) {
          ctx.font = `${LINE_FONT * s}px ui-monospace, monospace`;
          for (let j = 0; j < ls.length; j++) {
            const lt = fitText(ctx, small, ls[j], boxW);
            if (lt === null) continue;
            const ly = top + (TITLE_H + LINE_H * j + LINE_H / 2) * s;
            ctx.fillText(lt, cx, ly);
            const lw = textWidth(ctx, small, lt) * s;
            drawnLabels.push({ id: data.ids[i], text: lt, x0: cx - lw / 2, y0: ly - LINE_FONT * s / 2, x1: cx + lw / 2, y1: ly + LINE_FONT * s / 2 });
          }
        }
      }
      // zoomed in: node names above the boxes, edge labels beside the edges (never overlapping)
      if (s >= 1.3) drawNamesAndEdgeLabels(visible, s, ox, oy, vx0, vx1, vy0, vy1);
    }
    // the minimap waits for the frame after the first (its 20k dots are not what one waits for)
    lastView = [vx0, vy0, vx1, vy1];
    if (painted) drawMinimap(vx0, vy0, vx1, vy1);
    const dt = performance.now() - t0;
    frameTimes.push(dt);
    if (frameTimes.length > 600) frameTimes.shift();
    root.dataset.lastFrameMs = dt.toFixed(2);
    root.dataset.labels = String(drawnLabels.length);
    if (camera.isAnimated()) schedule();
    if (!painted) {
      painted = true;
      const t = Date.now();
      root.dataset.firstPaint = String(t);
      root.dataset.firstPaintMs = String(t - renderStart);
      const tm = JSON.parse(root.dataset.timings || "{}");
      tm.module_to_render_ms = renderStart - moduleLoaded;
      tm.wait_ms = loadDone ? Math.round(t - dt - loadDone) : null;  // load done -> first draw
      tm.first_frame_ms = Math.round(dt);
      root.dataset.timings = JSON.stringify(tm);
      model.send({ type: "painted", ms: t - renderStart, nodes: graph.order });
      // the next animation frame: the first one is on screen (firstFrame, the figure one
      // waits for); then the minimap
      requestAnimationFrame(() => {
        root.dataset.firstFrame = String(Date.now());
        if (lastView && !frameReq) drawMinimap(...lastView);
        else miniDirty();
      });
    }
  }

  function overlaps(boxes, b) {
    for (const o of boxes) if (b.x0 < o.x1 && b.x1 > o.x0 && b.y0 < o.y1 && b.y1 > o.y0) return true;
    return false;
  }

  function drawNamesAndEdgeLabels(visible, s, ox, oy, vx0, vx1, vy0, vy1) {
    const { X, Y, W: BW, H: BH, ePtr, pts, eBox, E, edge, edgeMayCross } = scene;
    const taken = visible.map((i) => ({ x0: (X[i] - BW[i] / 2) * s + ox, y0: (Y[i] - BH[i] / 2) * s + oy,
      x1: (X[i] + BW[i] / 2) * s + ox, y1: (Y[i] + BH[i] / 2) * s + oy }));
    const placed = drawnLabels.map((l) => l);
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    const fpx = EDGE_FONT * s * 0.8;
    if (fpx < MIN_FONT_PX) return;
    // node names just above their boxes (leaf name), where free
    ctx.font = `${fpx}px system-ui, sans-serif`;
    ctx.fillStyle = "#555";
    for (const i of visible) {
      if (data.kind[i] !== 0) continue;
      const name = data.labels[i];
      if (!name || name === data.ops[data.op[i]]) continue;
      const w = ctx.measureText(name).width;
      const cx = X[i] * s + ox, cy = (Y[i] - BH[i] / 2) * s + oy - fpx * 0.8;
      const b = { x0: cx - w / 2, y0: cy - fpx / 2, x1: cx + w / 2, y1: cy + fpx / 2 };
      if (overlaps(taken, b) || overlaps(placed, b)) continue;
      ctx.fillText(name, cx, cy);
      placed.push({ ...b, id: data.ids[i], text: name });
    }
    // edge labels: dtype and shape just below the producer, left-aligned beside the line
    ctx.textAlign = "left";
    ctx.fillStyle = "#2b5c8a";
    for (let e = 0; e < E; e++) {
      const lab = data.edgeLabels[e];
      if (!lab || !edgeMayCross(e, vy0, vy1)) continue;
      edge(e);
      if (eBox[4 * e + 2] < vx0 || eBox[4 * e] > vx1 || eBox[4 * e + 3] < vy0 || eBox[4 * e + 1] > vy1) continue;
      const j0 = ePtr[e];
      const x = pts[j0] * s + ox + 3, y = (pts[j0 + 1] + RANK_GAP * 0.35) * s + oy;
      const w = ctx.measureText(lab).width;
      const b = { x0: x, y0: y - fpx / 2, x1: x + w, y1: y + fpx / 2 };
      if (overlaps(taken, b) || overlaps(placed, b)) continue;
      ctx.fillText(lab, x, y);
      placed.push({ ...b, id: `edge:${e}`, text: lab });
    }
    drawnLabels = placed;
  }

  let miniCache = null;   // the minimap's nodes, drawn once per graph/colour/highlight change
  function drawMinimap(vx0, vy0, vx1, vy1) {
    const mw = minimap.width, mh = minimap.height;
    const b = scene.bounds;
    const sc = Math.min((mw - 8) / Math.max(1, b.x1 - b.x0), (mh - 8) / Math.max(1, b.y1 - b.y0));
    const ox = 4 - b.x0 * sc + ((mw - 8) - (b.x1 - b.x0) * sc) / 2, oy = 4 - b.y0 * sc;
    mctx.clearRect(0, 0, mw, mh);
    if (!miniCache) { miniCache = document.createElement("canvas"); miniCache.width = mw; miniCache.height = mh; miniCache.dirty = true; }
    if (miniCache.dirty) { drawMiniNodes(miniCache.getContext("2d"), mw, mh, sc, ox, oy); miniCache.dirty = false; }
    mctx.drawImage(miniCache, 0, 0);
    mctx.strokeStyle = "#d33";
    mctx.lineWidth = 1.5;
    mctx.strokeRect(vx0 * sc + ox, vy0 * sc + oy, (vx1 - vx0) * sc, (vy1 - vy0) * sc);
    minimap._map = { sc, ox, oy };
  }

  function drawMiniNodes(mctx, mw, mh, sc, ox, oy) {
    mctx.clearRect(0, 0, mw, mh);
    const byFill = new Map();
    const { X, Y } = scene;
    for (let i = 0; i < data.n; i++) {
      const f = styleOf(i);
      let p = byFill.get(f);
      if (!p) { p = new Path2D(); byFill.set(f, p); }
      p.rect(X[i] * sc + ox - 1, Y[i] * sc + oy - 1, 2, 2);
    }
    for (const [f, p] of byFill) { mctx.fillStyle = f === NO_DATA_FILL ? "#999" : f; mctx.fill(p); }
  }
  const miniDirty = () => { if (miniCache) miniCache.dirty = true; };

  function textColorOn(hex) {
    if (!hex || hex[0] !== "#" || hex.length < 7) return "#111";
    const r = parseInt(hex.slice(1, 3), 16), g = parseInt(hex.slice(3, 5), 16), b = parseInt(hex.slice(5, 7), 16);
    return 0.299 * r + 0.587 * g + 0.114 * b > 150 ? "#111" : "#fff";
  }

  // -- interaction ----------------------------------------------------------------------------
  function hit(cx, cy) {
    // the element under canvas point (cx, cy), boxes grown to 6 px when tiny
    if (!scene) return -1;
    const s = camera.scale;
    const wx = (cx - camera.offsetX()) / s, wy = (cy - camera.offsetY()) / s;
    const slack = 3 / s;
    let best = -1, bd = Infinity;
    for (let i = 0; i < data.n; i++) {
      const dx = Math.abs(wx - scene.X[i]) - scene.W[i] / 2, dy = Math.abs(wy - scene.Y[i]) - scene.H[i] / 2;
      if (dx <= slack && dy <= slack) {
        const d = Math.max(dx, dy);
        if (d < bd) { bd = d; best = i; }
      }
    }
    return best;
  }

  function fitTo(ids, animate = true) {
    const idx = ids.map(indexOf).filter((i) => i >= 0);
    if (!idx.length) { camera.fit(scene ? scene.bounds : null, animate); return; }
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    for (const i of idx) {
      x0 = Math.min(x0, scene.X[i] - scene.W[i] / 2); x1 = Math.max(x1, scene.X[i] + scene.W[i] / 2);
      y0 = Math.min(y0, scene.Y[i] - scene.H[i] / 2); y1 = Math.max(y1, scene.Y[i] + scene.H[i] / 2);
    }
    // never zoom in further than about 5 boxes across and 6 ranks down: a node shown on its
    // own keeps its neighbours in view (3 ranks filled a short panel with two boxes)
    const padX = Math.max(0, (5 * UNIT - (x1 - x0)) / 2), padY = Math.max(0, (6 * (TITLE_H + RANK_GAP) - (y1 - y0)) / 2);
    camera.fit({ x0: x0 - padX, x1: x1 + padX, y0: y0 - padY, y1: y1 + padY }, animate);
  }

  // the opening view on a focus (a diff's added nodes): all of it when its titles stay
  // readable, else its top-most nodes as far down as a readable view reaches (a change spread
  // over a 300-node chain opened as specks; the search's arrows step on to the rest)
  function fitFocus(ids) {
    const minScale = READABLE_TITLE_PX / TITLE_FONT;
    const idx = ids.map(indexOf).filter((i) => i >= 0).sort((a, b) => scene.Y[a] - scene.Y[b]);
    if (!idx.length) { camera.fitReadable(minScale); return; }
    const top = scene.Y[idx[0]] - scene.H[idx[0]] / 2;
    const reach = Math.max(1, (stage.clientHeight || 400) - 24) / minScale;  // world px
    const first = idx.filter((i) => scene.Y[i] + scene.H[i] / 2 <= top + reach);
    fitTo((first.length ? first : idx.slice(0, 1)).map((i) => data.ids[i]), false);
    if (camera.scale < minScale) {  // (wide rather than tall) the first one, readable
      camera.setState({ x: scene.X[idx[0]], y: scene.Y[idx[0]], scale: minScale });
    }
  }

  let drag = null;
  canvas.addEventListener("pointerdown", (ev) => {
    drag = { x: ev.clientX, y: ev.clientY, moved: false };
    canvas.setPointerCapture && canvas.setPointerCapture(ev.pointerId);
  });
  canvas.addEventListener("pointermove", (ev) => {
    const r = canvas.getBoundingClientRect();
    if (drag) {
      const dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
      if (drag.moved || Math.abs(dx) + Math.abs(dy) > 3) {
        drag.moved = true;
        camera.panBy(dx, dy);
        drag.x = ev.clientX; drag.y = ev.clientY;
        tip.style.display = "none";
        return;
      }
    }
    const i = hit(ev.clientX - r.left, ev.clientY - r.top);
    const id = i >= 0 ? data.ids[i] : null;
    if (id !== hovered) {
      hovered = id;
      root.dataset.hovered = id || "";
      if (id) {
        tip.textContent = nodeInfo(id);
        tip.style.left = `${ev.clientX - r.left + 12}px`;
        tip.style.top = `${ev.clientY - r.top + 12}px`;
        tip.style.display = "block";
      } else tip.style.display = "none";
    }
  });
  canvas.addEventListener("pointerleave", () => { hovered = null; tip.style.display = "none"; root.dataset.hovered = ""; });
  canvas.addEventListener("pointerup", (ev) => {
    const wasDrag = drag && drag.moved;
    drag = null;
    if (wasDrag) return;
    const r = canvas.getBoundingClientRect();
    const i = hit(ev.clientX - r.left, ev.clientY - r.top);
    const multi = ev.shiftKey || ev.ctrlKey || ev.metaKey;
    if (i < 0) { if (selected.size) { selected = new Set(); pushSelection(); } return; }
    const node = data.ids[i];
    if (data.kind[i] === 1 && !multi) { model.send({ type: "toggle", id: node }); return; }
    if (multi) { selected.has(node) ? selected.delete(node) : selected.add(node); }
    else selected = new Set([node]);
    pushSelection();
  });
  canvas.addEventListener("wheel", (ev) => {
    ev.preventDefault();
    const r = canvas.getBoundingClientRect();
    camera.zoomAt(ev.clientX - r.left, ev.clientY - r.top, Math.exp(-ev.deltaY * 0.0015));
  }, { passive: false });
  minimap.addEventListener("click", (ev) => {
    const m = minimap._map;
    if (!m) return;
    const r = minimap.getBoundingClientRect();
    camera.centerOn((ev.clientX - r.left - m.ox) / m.sc, (ev.clientY - r.top - m.oy) / m.sc, true);
  });
  stage.addEventListener("keydown", (ev) => {
    const k = ev.key;
    let used = true;
    if (k === "+" || k === "=") camera.zoomAt(stage.clientWidth / 2, stage.clientHeight / 2, 1.25);
    else if (k === "-") camera.zoomAt(stage.clientWidth / 2, stage.clientHeight / 2, 0.8);
    else if (k === "ArrowLeft") camera.panBy(60, 0);
    else if (k === "ArrowRight") camera.panBy(-60, 0);
    else if (k === "ArrowUp") camera.panBy(0, 60);
    else if (k === "ArrowDown") camera.panBy(0, -60);
    else if (k === "f" || k === "F") fitTo([], true);
    else if (k === "s" || k === "S") fitTo([...selected], true);
    else if (k === "n") stepMatch(1);
    else if (k === "N" || k === "p") stepMatch(-1);
    else if (k === "Escape") { selected = new Set(); pushSelection(); }
    else used = false;
    if (used) { ev.preventDefault(); ev.stopPropagation(); }
  });

  function pushSelection() {
    selIdx = new Set([...selected].map(indexOf).filter((i) => i >= 0));
    model.set("selected", [...selected]);
    model.save_changes();
    updateDom();
    schedule(true);
  }

  function stepMatch(dir) {
    // next/previous highlighted element in reading order (rank, then x); zooms onto it
    const order = [...hiIdx].sort((a, b) => (data.rank[a] - data.rank[b]) || (data.x[a] - data.x[b]));
    if (!order.length) return null;
    matchCursor = (matchCursor + dir + order.length) % order.length;
    const id = data.ids[order[matchCursor]];
    selected = new Set([id]);
    pushSelection();
    fitTo([id], true);
    root.dataset.matchCursor = String(matchCursor);
    return id;
  }

  function setHighlight() {
    highlighted = new Set((model.get("highlighted") || []).filter((id) => graph.hasNode(id)));
    hiIdx = new Set([...highlighted].map(indexOf));
    matchCursor = -1;
  }

  function redrawFromModel(fit) {
    const t0 = performance.now();
    loadGraph(model.get("graph"));
    applyColors();
    setHighlight();
    selIdx = new Set([...selected].map(indexOf).filter((i) => i >= 0));
    const t1 = performance.now();
    if (!painted) {
      const r = (x) => Math.round(x * 10) / 10;
      root.dataset.timings = JSON.stringify({ load_ms: r(t1 - t0), decode_ms: r(loadTimes.decode_ms),
        scene_ms: r(loadTimes.scene_ms) });
      loadDone = Date.now();
    }
    updateDom();
    if (fit) {
      const focus = (data.focus || []).filter((id) => graph.hasNode(id));
      if (focus.length) fitFocus(focus);
      else camera.fitReadable(READABLE_TITLE_PX / TITLE_FONT);
      // not attached yet (JupyterLab renders first): fit again once the stage has a size
      pendingFit = stage.clientWidth === 0 || stage.clientHeight === 0 ? focus : null;
    }
    schedule(true);
  }

  // Python -> JS
  const onGraph = () => redrawFromModel(true);
  const onColors = () => { applyColors(); updateDom(); schedule(true); };
  let pendingStep = 0;  // Enter pressed before the typed search reached Python: step on its answer
  const onHighlight = () => {
    setHighlight(); updateDom(); schedule(true);
    if (pendingStep) { const d = pendingStep; pendingStep = 0; stepMatch(d); }
  };
  const onSelected = () => {
    const s = new Set((model.get("selected") || []).filter((id) => graph.hasNode(id)));
    if (s.size === selected.size && [...s].every((x) => selected.has(x))) return;
    selected = s;
    selIdx = new Set([...selected].map(indexOf));
    updateDom();
    schedule();
  };
  const onMsg = (msg) => {
    if (msg.type === "fit") fitTo(msg.ids && msg.ids.length ? msg.ids : [], true);
  };
  const listeners = [
    ["change:graph", onGraph], ["change:colors", onColors], ["change:legend", onColors],
    ["change:scale", onColors], ["change:highlighted", onHighlight],
    ["change:selected", onSelected], ["msg:custom", onMsg],
  ];
  for (const [event, fn] of listeners) model.on(event, fn);

  // toolbar
  let searchTimer = null;
  search.value = model.get("search") || "";
  search.addEventListener("input", () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => { model.set("search", search.value); model.save_changes(); }, 150);
  });
  search.addEventListener("keydown", (ev) => {
    ev.stopPropagation(); // keep JupyterLab shortcuts out of the search box
    if (ev.key !== "Enter") return;
    const dir = ev.shiftKey ? -1 : 1;
    if (search.value !== (model.get("search") || "")) {  // still in the debounce: send it now
      clearTimeout(searchTimer);
      pendingStep = dir;
      model.set("search", search.value); model.save_changes();
    } else {
      pendingStep = 0;
      stepMatch(dir);
    }
  });
  btnPrev.addEventListener("click", () => stepMatch(-1));
  btnNext.addEventListener("click", () => stepMatch(1));
  btnFit.addEventListener("click", () => fitTo([], true));
  btnFitSel.addEventListener("click", () => fitTo([...selected], true));
  btnCollapse.addEventListener("click", () => {
    if (selected.size) model.send({ type: "collapse", ids: [...selected] });
  });
  btnReset.addEventListener("click", () => model.send({ type: "reset" }));

  const resizer = new ResizeObserver(() => {
    if (stage.clientWidth > 0 && stage.clientHeight > 0) {
      camera.viewport(stage.clientWidth, stage.clientHeight);
      if (pendingFit) {
        const f = pendingFit;
        pendingFit = null;
        if (f.length) fitFocus(f); else camera.fitReadable(READABLE_TITLE_PX / TITLE_FONT);
      }
      schedule();
    }
  });
  resizer.observe(stage);

  // test hook
  const handle = {
    root, graph, camera,
    // the old WebGL view's camera accessor, kept for callers and tests
    sigma: { getCamera: () => camera, refresh: () => schedule() },
    nodeClientXY(id) {
      const i = indexOf(id);
      const r = canvas.getBoundingClientRect();
      return { x: r.left + scene.X[i] * camera.scale + camera.offsetX(), y: r.top + scene.Y[i] * camera.scale + camera.offsetY() };
    },
    nodeClientBox(id) {
      const i = indexOf(id);
      const r = canvas.getBoundingClientRect(), s = camera.scale;
      return { x0: r.left + (scene.X[i] - scene.W[i] / 2) * s + camera.offsetX(), y0: r.top + (scene.Y[i] - scene.H[i] / 2) * s + camera.offsetY(),
        x1: r.left + (scene.X[i] + scene.W[i] / 2) * s + camera.offsetX(), y1: r.top + (scene.Y[i] + scene.H[i] / 2) * s + camera.offsetY() };
    },
    displayedColor(id) { return styleOf(indexOf(id)); },
    worldXY(id) { const i = indexOf(id); return i < 0 ? null : { x: scene.X[i], y: scene.Y[i] }; },
    drawnLabels() { return drawnLabels.map((l) => ({ ...l })); },
    visibleIds() {
      const s = camera.scale, ox = camera.offsetX(), oy = camera.offsetY();
      const W = stage.clientWidth, H = stage.clientHeight;
      const out = [];
      for (let i = 0; i < data.n; i++) {
        const x = scene.X[i] * s + ox, y = scene.Y[i] * s + oy;
        if (x >= 0 && x <= W && y >= 0 && y <= H) out.push(data.ids[i]);
      }
      return out;
    },
    frameTimes() { return frameTimes.slice(); },
    drawNow() { if (frameReq) { cancelAnimationFrame(frameReq); frameReq = 0; } draw(); return performance.now(); },
    stepMatch, fitTo, fitFocus,
    cameraScale() { return camera.scale; },
    titlePx() { return camera.scale * TITLE_FONT; },
  };
  window.__wbGraphViews = window.__wbGraphViews || [];
  window.__wbGraphViews.push(handle);

  redrawFromModel(true);

  return () => {
    for (const [event, fn] of listeners) model.off(event, fn);
    const i = window.__wbGraphViews.indexOf(handle);
    if (i >= 0) window.__wbGraphViews.splice(i, 1);
    resizer.disconnect();
    if (frameReq) cancelAnimationFrame(frameReq);
  };
}

export default { render };
