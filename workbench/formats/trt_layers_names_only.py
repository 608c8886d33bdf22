"""Engine layer information at ProfilingVerbosity LAYER_NAMES_ONLY: `Layers` is a list of names.

Any TensorRT version writes this when the engine was built without DETAILED verbosity (the
default of many deployments): no types, formats or tactics; the reader guesses Reformat /
Myelin / shape-copy layers from their names and warns what is missing.
"""
from __future__ import annotations

from typing import Any

from workbench.formats.layerinfo import read_layers
from workbench.formats.registry import Reader, register


def accepts(data: Any) -> bool:
    layers = data.get("Layers") if isinstance(data, dict) else None
    return isinstance(layers, list) and bool(layers) and all(isinstance(x, str) for x in layers)


READER = register(Reader(
    name="tensorrt-layers-names-only", kind="layers", accepts=accepts, read=read_layers,
    reads="layer information written at LAYER_NAMES_ONLY verbosity ({Layers: [names]})",
    returns="EngineLayers"))
