"""widgets.figure.Figure: the FigureWidget the panels use (browser behaviour: tests/browser/test_figure_load.py)."""
from __future__ import annotations

import re
from pathlib import Path

import plotly
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
