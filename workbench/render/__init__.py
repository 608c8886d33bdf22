"""Static HTML/plotly rendering of workbench results (the one core package that may import plotly)."""
from __future__ import annotations

from workbench.core import lazy

__getattr__, __dir__, __all__ = lazy.exports(__name__, {
    '.timing_figures': ('PALETTE', 'PRECISION_COLORS', 'color_map', 'layer_bar_data', 'layer_bars',
                        'breakdown', 'treemap_data', 'scope_treemap', 'compare_types',
                        'compare_nodes', 'latency_figure'),
    '.bisect_figures': ('bisect_figure',),
    '.timing_report': ('report_html', 'write_report'),
})
