"""One colour per layer type (and per precision) in every chart that shows it: the timing panel's
bars (any number of layers, either engine), the static report's per-layer bars and its by-type
breakdown. A colour used to be the type's index among the types one chart happened to show, so
"Reformat" was grey in one chart and brown in the other."""
from __future__ import annotations

from typing import Dict

import pytest

from conftest import H200
from widgets.timing import TimingPanel
from workbench.render import timing_figures as figures
from workbench.timing import LayerTable
from workbench.timing.colours import (LAYER_TYPE_COLOURS, OTHER_COLOURS, colour_map,
                                      layer_type_colour, precision_colour)

R50 = H200 / "resnet50.structure.onnx"


@pytest.fixture(scope="module")
def tables():
    return [LayerTable.build(H200 / f"resnet50_{p}.layers.json", H200 / f"resnet50_{p}.profile.json",
                             onnx=R50) for p in ("fp16", "fp32")]


def _per_trace(fig) -> Dict[str, str]:
    """{series name: colour} of a chart with one trace per type (the per-layer bars)."""
    return {tr.name: tr.marker.color for tr in fig.data}


def _per_bar(fig) -> Dict[str, str]:
    """{category: colour} of a one-trace chart coloured bar by bar (the breakdown)."""
    tr = fig.data[0]
    return dict(zip(tr.x, tr.marker.color))


def test_a_layer_type_has_one_colour_in_every_chart(tables):
    t16, t32 = tables
    charts = {
        "report bars fp16": _per_trace(figures.layer_bars(t16, "type")),
        "report bars fp32": _per_trace(figures.layer_bars(t32, "type")),
        "report by type fp16": _per_bar(figures.breakdown(t16, "type")),
        "report by type fp32": _per_bar(figures.breakdown(t32, "type")),
        "panel bars top 10": _per_trace(TimingPanel(t16, top=10).bars),
        "panel bars top 60": _per_trace(TimingPanel(t32, top=60).bars),
    }
    seen: Dict[str, Dict[str, str]] = {}
    for chart, colours in charts.items():
        for layer_type, colour in colours.items():
            seen.setdefault(layer_type, {})[chart] = colour
    assert {"Reformat", "CaskConvolution", "MyelinReformat"} <= set(seen)
    # the same type in at least two charts (the top-10 chart shows fewer types than the rest)
    assert sum(len(v) >= 2 for v in seen.values()) >= 4, seen
    for layer_type, by_chart in seen.items():
        assert set(by_chart.values()) == {layer_type_colour(layer_type)}, (layer_type, by_chart)
    # and distinct types keep distinct colours within a chart
    for chart, colours in charts.items():
        assert len(set(colours.values())) == len(colours), (chart, colours)


def test_a_precision_has_one_colour_in_every_chart(tables):
    t16, t32 = tables
    for fig in (figures.layer_bars(t16, "precision"), figures.layer_bars(t32, "precision", top=5)):
        for name, colour in _per_trace(fig).items():
            assert colour == precision_colour(name)
    by = _per_bar(figures.breakdown(t16, "precision"))
    assert by["FP16"] == precision_colour("FP16") != by["FP32"] == precision_colour("FP32")


def test_colours_depend_on_the_name_only():
    # a type the table does not list: the same colour whatever else is shown, from its own list
    alone = colour_map(["FancyNewLayer"], "type")["FancyNewLayer"]
    among = colour_map(["Reformat", "CaskConvolution", "FancyNewLayer", "Zeta"], "type")
    assert among["FancyNewLayer"] == alone == layer_type_colour("FancyNewLayer")
    assert alone in OTHER_COLOURS and alone not in LAYER_TYPE_COLOURS.values()
    assert colour_map(["Reformat"], "type") == {"Reformat": LAYER_TYPE_COLOURS["Reformat"]}
    assert layer_type_colour("") == layer_type_colour("unknown")
