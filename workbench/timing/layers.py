"""Engine layer information (moved to `workbench.formats.layerinfo`; kept for old imports)."""
from __future__ import annotations

from workbench.formats.layerinfo import (FLOAT_ORDER, EngineLayer, EngineLayers,  # noqa: F401
                                         TensorInfo, load_layers, onnx_names_from_metadata,
                                         parse_layers, parse_precision)
