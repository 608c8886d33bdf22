"""Graph-view drawing speed in headless chromium: first paint and pan/zoom frame times.

The widget's real bundle (widgets/static/graphview.js) is loaded into a blank page served from
localhost, with a stand-in for the anywidget model holding the real wire payload
(`widgets.graphview.wire_payload` of `workbench.graph` layouts, every node shown) of BERT-like
graphs of 5k, 10k and 20k nodes (benchmarks/graph_layout.py's generator). Measured in the page:
first paint (render() called -> first frame drawn), then a pan/zoom sequence driven by
requestAnimationFrame: the interval between frames and the draw time of each. Chromium runs as
in CI (Debian chromium, --disable-gpu: software rendering). Goals at 20k nodes: first paint
< 3 s, frame p95 < 33 ms. Last line: one JSON object.

    python benchmarks/graph_render.py [--sizes 5000,10000,20000] [--frames 90]

`StaticPage` is also the harness of tests/browser/test_graph_canvas.py (no JupyterLab needed).
"""
from __future__ import annotations

import argparse
import base64
import http.server
import importlib.util
import json
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
GOALS = {"first_paint_s": 3.0, "frame_p95_ms": 33.0}
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]

PAGE = """<!doctype html><html><head><meta charset="utf-8"></head>
<body style="margin:0"><div id="host" style="width:%(width)dpx"></div>
<script type="module">import gv from './graphview.js'; window.__gv = gv; window.__ready = true;</script>
</body></html>"""

OPEN_JS = """(p) => {
  const b64 = (s) => { const bin = atob(s); const u = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) u[i] = bin.charCodeAt(i); return new DataView(u.buffer); };
  const g = Object.assign({}, p.graph);
  for (const k of p.binary) g[k] = b64(g[k]);
  const state = {graph: g, colors: p.colors || [], legend: p.legend || [], scale: p.scale || {},
    highlighted: p.highlighted || [], selected: p.selected || [], search: "", height: p.height || 600};
  const handlers = {};
  window.__sent = [];
  const model = { get: (k) => state[k], set: (k, v) => { state[k] = v; }, save_changes() {},
    send(m) { window.__sent.push(m); }, on(ev, f) { (handlers[ev] = handlers[ev] || []).push(f); }, off() {} };
  window.__model = { state, set(k, v) { state[k] = v; (handlers['change:' + k] || []).forEach((f) => f()); } };
  const host = document.getElementById('host');
  host.replaceChildren();
  window.__wbGraphViews = [];
  window.__gv.render({ model, el: host });
  return true;
}"""

FRAMES_JS = """(n) => new Promise((resolve) => {
  const h = window.__wbGraphViews[window.__wbGraphViews.length - 1];
  const cam = h.camera;
  const st0 = cam.getState();
  const draws = [], gaps = [];
  let last = performance.now(), k = 0;
  function tick(now) {
    gaps.push(now - last); last = now;
    // a pan/zoom path: zoom in to 8x around the middle and back, panning sideways
    const t = k / n, z = Math.exp(Math.sin(Math.PI * t) * Math.log(8));
    cam.setState({ x: st0.x + Math.sin(2 * Math.PI * t) * 300 / st0.scale, y: st0.y, scale: st0.scale * z });
    const t0 = performance.now();
    h.drawNow();
    draws.push(performance.now() - t0);
    k += 1;
    if (k < n) requestAnimationFrame(tick); else resolve({ draws, gaps: gaps.slice(1) });
  }
  requestAnimationFrame(tick);
})"""


def _bench():
    spec = importlib.util.spec_from_file_location("graph_layout_bench", REPO / "benchmarks" / "graph_layout.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def page_payload(data: Any, **extra: Any) -> Dict[str, Any]:
    """A wire payload with its binary buffers as base64 (for page.evaluate)."""
    from widgets.graphview import wire_payload

    w = wire_payload(data)
    binary = [k for k, v in w.items() if isinstance(v, (bytes, bytearray))]
    for k in binary:
        w[k] = base64.b64encode(w[k]).decode()
    return {"graph": w, "binary": binary, **extra}


class StaticPage:
    """A localhost page with the bundle loaded; `open(data)` renders a view of a GraphData."""

    def __init__(self, page: Any, width: int = 1200):
        self.page = page
        self.dir = Path(tempfile.mkdtemp(prefix="wb-graph-page-"))
        shutil.copy(REPO / "widgets" / "static" / "graphview.js", self.dir / "graphview.js")
        (self.dir / "index.html").write_text(PAGE % {"width": width}, encoding="utf-8")
        root = str(self.dir)

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *a: Any, **k: Any):
                super().__init__(*a, directory=root, **k)

            def log_message(self, *a: Any) -> None:  # quiet
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        page.goto(f"http://127.0.0.1:{self.server.server_address[1]}/index.html")
        page.wait_for_function("() => window.__ready === true", timeout=30000)

    def open(self, data: Any, timeout: float = 60000, **extra: Any) -> Dict[str, Any]:
        """Render `data`; wait for the first paint; return the root's dataset."""
        self.page.evaluate(OPEN_JS, page_payload(data, **extra))
        self.page.wait_for_function(
            "() => window.__wbGraphViews.length && window.__wbGraphViews[0].root.dataset.firstPaint",
            timeout=timeout)
        return self.state()

    def state(self) -> Dict[str, str]:
        return self.page.evaluate("() => ({...window.__wbGraphViews[0].root.dataset})")

    def js(self, expr: str, arg: Any = None) -> Any:
        """Evaluate `expr` with `h` bound to the view's test handle."""
        return self.page.evaluate(f"(arg) => {{ const h = window.__wbGraphViews[0]; return ({expr}); }}", arg)

    def close(self) -> None:
        self.server.shutdown()
        shutil.rmtree(self.dir, ignore_errors=True)


def launch(playwright: Any) -> Any:
    if not Path(CHROMIUM).exists():
        raise RuntimeError(f"{CHROMIUM} is missing: install Debian's chromium (scripts/setup.sh does)")
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


def pct(xs: List[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q)) if xs else float("nan")


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="5000,10000,20000")
    ap.add_argument("--frames", type=int, default=90)
    args = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright

    from workbench.graph import GraphStructure
    from workbench.model import model_from_proto

    bench = _bench()
    rows = []
    print(f"{'nodes':>7} {'layout s':>8} {'first paint s':>13} {'draw p50':>8} {'draw p95':>8} "
          f"{'frame p50':>9} {'frame p95':>9}")
    with sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        sp = StaticPage(page)
        try:
            for size in [int(s) for s in args.sizes.split(",") if s]:
                model = model_from_proto(bench.transformer_like(size))
                t0 = time.perf_counter()
                gs = GraphStructure(model)
                data = gs.view(gs.scopes)
                layout_s = time.perf_counter() - t0
                st = sp.open(data, height=700)
                first = int(st["firstPaintMs"]) / 1000
                fr = page.evaluate(FRAMES_JS, args.frames)
                row = {"nodes": len(model.graph.node), "elements": len(data), "layout_s": round(layout_s, 3),
                       "first_paint_s": round(first, 3),
                       "draw_ms_p50": round(pct(fr["draws"], 50), 2), "draw_ms_p95": round(pct(fr["draws"], 95), 2),
                       "frame_ms_p50": round(pct(fr["gaps"], 50), 2), "frame_ms_p95": round(pct(fr["gaps"], 95), 2),
                       "timings": json.loads(st.get("timings", "{}"))}
                rows.append(row)
                print(f"{row['nodes']:>7} {layout_s:>8.3f} {first:>13.3f} {row['draw_ms_p50']:>8} "
                      f"{row['draw_ms_p95']:>8} {row['frame_ms_p50']:>9} {row['frame_ms_p95']:>9}")
        finally:
            sp.close()
            browser.close()
    big = [r for r in rows if r["nodes"] >= 19000]
    ok = bool(big) and all(r["first_paint_s"] < GOALS["first_paint_s"] and
                           r["frame_ms_p95"] < GOALS["frame_p95_ms"] for r in big)
    print(json.dumps({"benchmark": "graph_render", "renderer": "canvas2d (culling, per-colour batches)",
                      "chromium": "headless, --disable-gpu", "goals_at_20k": GOALS, "results": rows,
                      "meets_goals": ok}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
