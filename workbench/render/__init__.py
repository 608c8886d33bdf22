"""Static HTML/plotly rendering of workbench results (the one core package that may import plotly).

Public names resolve lazily (PEP 562): importing the package costs nothing until a name is
used, which keeps CLI start-up lean."""
from __future__ import annotations

from typing import Dict

from workbench.lazy import lazy_exports

_EXPORTS: Dict[str, str] = {
    'PALETTE': 'workbench.render.timing_figures',
    'PRECISION_COLORS': 'workbench.render.timing_figures',
    'color_map': 'workbench.render.timing_figures',
    'layer_bar_data': 'workbench.render.timing_figures',
    'layer_bars': 'workbench.render.timing_figures',
    'breakdown': 'workbench.render.timing_figures',
    'treemap_data': 'workbench.render.timing_figures',
    'scope_treemap': 'workbench.render.timing_figures',
    'compare_types': 'workbench.render.timing_figures',
    'compare_nodes': 'workbench.render.timing_figures',
    'latency_figure': 'workbench.render.timing_figures',
    'bisect_figure': 'workbench.render.bisect_figures',
    'report_html': 'workbench.render.timing_report',
    'write_report': 'workbench.render.timing_report',
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
