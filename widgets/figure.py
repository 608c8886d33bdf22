"""Figure: plotly's FigureWidget with a front end that survives a slow page.

plotly 6/7's FigureWidget is an anywidget whose ES module is plotly's whole 4.9 MB bundle, sent
and evaluated once per figure. anywidget (0.9-0.11) gives a model 2 s to load its module and run
`initialize`, then rejects it for good ("[anywidget] Failed to initialize model."): on a loaded
machine, or with several figures arriving at once (the Timing panel has four), a figure then stays
an empty placeholder forever. Here the module anywidget loads is a small loader that returns from
`initialize` at once; plotly's bundle travels as a trait, is evaluated once per page and shared by
every figure, and plotly's own `initialize`/`render` run when it is ready. State changes that
arrive meanwhile (`_widget_data`, `_py2js_*` deltas) are recorded and replayed in order, so no
update is lost. Python-side it is a FigureWidget (same API, same events).
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import List

import pandas  # noqa: F401  (see below)
import plotly.graph_objects as go
import traitlets

# plotly's validators look pandas up in sys.modules without importing it (`get_module("pandas",
# should_load=False)`, then `pd.Series`). When a panel's thread fills a figure while another
# thread is still importing pandas, that lookup finds the half-initialised module and the update
# fails ("partially initialized module 'pandas' has no attribute 'Series'"), leaving the chart
# empty. Importing it here, on the thread that imports the widgets, closes that window.

_LOADER = r"""
const KEY = Symbol.for("trt-workbench.plotly-widget-module");
// what happened on this page, for tests and for a curious user: plotly module loads, replayed changes
const STATS = (globalThis.__trtWorkbenchFigures = globalThis.__trtWorkbenchFigures || { loads: 0, replayed: 0, superseded: 0 });

function plotlyModule(model) {
  let p = globalThis[KEY];
  if (!p) {
    STATS.loads += 1;
    const url = URL.createObjectURL(new Blob([model.get("_plotly_esm")], { type: "text/javascript" }));
    p = import(/* webpackIgnore: true */ /* @vite-ignore */ url).finally(() => URL.revokeObjectURL(url));
    p.catch(() => { if (globalThis[KEY] === p) delete globalThis[KEY]; });
    globalThis[KEY] = p;
  }
  return p;
}

// A model whose `on` is remembered (to replay recorded changes through plotly's own handlers)
// and whose `get` answers a replayed value while that change is being replayed.
function replayable(model, handlers, override) {
  return new Proxy(model, {
    get(target, prop) {
      if (prop === "get") return (k) => (override.has(k) ? override.get(k) : target.get(k));
      if (prop === "on") return (ev, cb, ctx) => {
        (handlers[ev] = handlers[ev] || []).push([cb, ctx]);
        return target.on(ev, cb, ctx);
      };
      const v = Reflect.get(target, prop);
      return typeof v === "function" ? v.bind(target) : v;
    },
  });
}

// Deltas already contained in a later full state (_widget_data / _widget_layout, which plotly
// reads when it starts) must not be applied again: drop them, and the full states themselves.
const TOUCHES = {
  _py2js_restyle: "d", _py2js_addTraces: "d", _py2js_deleteTraces: "d", _py2js_moveTraces: "d",
  _py2js_removeTraceProps: "d", _py2js_relayout: "l", _py2js_removeLayoutProps: "l",
  _py2js_update: "dl", _py2js_animate: "dl",
};
function superseded(queue) {
  const last = { d: -1, l: -1 };
  queue.forEach(([name], i) => {
    if (name === "_widget_data") last.d = i;
    if (name === "_widget_layout") last.l = i;
  });
  const kept = queue.filter(([name], i) => {
    if (name === "_widget_data" || name === "_widget_layout") return false;
    const t = TOUCHES[name];
    return !t || [...t].some((k) => i > last[k]);
  });
  if (typeof STATS !== "undefined") STATS.superseded += queue.length - kept.length;
  return kept;
}

export default () => {
  let ready = null;
  let widget = null;
  let proxy = null;
  return {
    initialize(ctx) {
      const { model } = ctx;
      const queue = [];
      let recording = true;
      for (const name of model.get("_replay_names") || []) {
        model.on("change:" + name, () => { if (recording) queue.push([name, model.get(name)]); });
      }
      ready = plotlyModule(model).then(async (mod) => {
        const def = mod.default;
        widget = typeof def === "function" ? await def() : def;
        const handlers = {};
        const override = new Map();
        proxy = replayable(model, handlers, override);
        recording = false;
        if (widget.initialize) await widget.initialize({ ...ctx, model: proxy });
        for (const [name, value] of superseded(queue)) {
          override.set(name, value);
          STATS.replayed += 1;
          try {
            for (const [cb, c] of handlers["change:" + name] || []) cb.call(c, proxy, value);
          } finally {
            override.delete(name);
          }
        }
      });
      ready.catch((e) => console.error("[trt-workbench] plotly's widget bundle did not load:", e));
      // nothing awaited here: anywidget's 2 s initialize window only covers this loader
    },
    async render(ctx) {
      try {
        await ready;
      } catch (e) {
        ctx.el.textContent = "plotly's figure code did not load in this page: " + e;
        return;
      }
      return widget.render({ ...ctx, model: proxy });
    },
  };
};
"""


@lru_cache(maxsize=1)
def _plotly_bundle() -> str:
    """plotly's own FigureWidget ES module (shipped in the plotly wheel), read once."""
    esm = go.FigureWidget._esm  # a path, a string, or anywidget's FileContents (str() is the text)
    if isinstance(esm, Path) or (isinstance(esm, str) and "\n" not in esm and Path(esm).is_file()):
        return Path(esm).read_text(encoding="utf-8")
    return str(esm)


def _replay_names() -> List[str]:
    return sorted(n for n in go.FigureWidget.class_trait_names(sync=True)
                  if n.startswith(("_py2js_", "_widget_")))


class Figure(go.FigureWidget):
    """A plotly FigureWidget whose front end loads plotly once per page, off anywidget's clock."""

    _esm = _LOADER
    _plotly_esm = traitlets.Unicode("").tag(sync=True)
    _replay_names = traitlets.List(traitlets.Unicode()).tag(sync=True)

    @traitlets.default("_plotly_esm")
    def _default_plotly_esm(self) -> str:
        return _plotly_bundle()

    @traitlets.default("_replay_names")
    def _default_replay_names(self) -> List[str]:
        return _replay_names()
