"""widgets.figure.Figure: the FigureWidget the panels use (browser behaviour: tests/browser/test_figure_load.py)."""
from __future__ import annotations

import re
from pathlib import Path

import plotly
import pytest
import plotly.graph_objects as go

from widgets import Figure
from widgets.figure import _plotly_bundle


def test_figure_is_a_figurewidget_whose_module_is_a_small_loader():
    f = Figure(layout=dict(height=200))
    f.add_bar(x=["a"], y=[1])
    assert isinstance(f, go.FigureWidget)
    state = f.get_state()
    assert len(state["_esm"]) < 10_000, "anywidget must load a small module, not plotly's bundle"
    assert "export default" in state["_esm"]
    bundle = (Path(plotly.__file__).parent / "package_data" / "widgetbundle.js").read_text(encoding="utf-8")
    assert state["_plotly_esm"] == bundle == _plotly_bundle()   # plotly's own module, as shipped
    assert f.data[0].y == (1,)


def test_every_attribute_plotly_listens_to_is_replayed():
    """Changes that arrive while the page loads plotly are replayed: the list must cover every
    attribute plotly's front end listens to (checked against the installed plotly, so a plotly
    upgrade that adds one fails here)."""
    listened = set(re.findall(r'model\.on\("change:(\w+)"', _plotly_bundle()))
    assert listened, "plotly's bundle changed shape: no model.on('change:...') found"
    assert listened <= set(Figure().get_state()["_replay_names"]), listened


def test_replay_drops_deltas_a_later_full_state_already_holds():
    """The loader's replay filter, run in node: a full `_widget_data` set while plotly loads
    (Python sends one on every display) supersedes the data deltas before it, a full
    `_widget_layout` the layout deltas before it; update/animate go only when both full states
    follow; deltas after them and unknown traits stay, in order."""
    import json
    import shutil
    import subprocess

    from widgets.figure import _LOADER

    if shutil.which("node") is None:
        pytest.skip("node is not installed (scripts/setup.sh installs it with npm)")
    body = _LOADER[_LOADER.index("const TOUCHES"):_LOADER.index("export default")]
    queue = [["_py2js_restyle", 1], ["_py2js_relayout", 2], ["_py2js_update", 3],
             ["_widget_data", 4], ["_py2js_addTraces", 5], ["_py2js_update", 6],
             ["_widget_layout", 7], ["_py2js_relayout", 8], ["_some_future_trait", 9]]
    js = body + f"\nconsole.log(JSON.stringify(superseded({json.dumps(queue)})));"
    out = subprocess.run(["node", "-e", js], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == [["_py2js_addTraces", 5], ["_py2js_update", 6],
                               ["_py2js_relayout", 8], ["_some_future_trait", 9]]
