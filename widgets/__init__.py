"""Notebook views over `workbench` (ipywidgets + plotly figures (`Figure`), one anywidget graph view).

Dependencies point one way: widgets import workbench, never the reverse. Panels are imported
lazily so that `import widgets` stays cheap:

    from widgets import Inspector
    Inspector("model.onnx")
"""
from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "Inspector": "widgets.inspector",
    "GraphView": "widgets.graphview",
    "SplitView": "widgets.splitview",
    "FixPanel": "widgets.fix",
    "PrecisionPanel": "widgets.precision",
    "BuildPanel": "widgets.build",
    "TimingPanel": "widgets.timing",
    "ComparePanel": "widgets.compare",
    "MatrixPanel": "widgets.matrix",
    "PlanPanel": "widgets.plan",
    "Figure": "widgets.figure",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'widgets' has no attribute {name!r}")
