"""TensorRT 8.6 / 10.x engine layer information: `{"Layers": [{...}], "Bindings": [names]}`.

Written by `IEngineInspector.get_engine_information(LayerInformationFormat.JSON)` and trtexec
`--exportLayerInfo` with ProfilingVerbosity DETAILED. Tensors carry `Format/Datatype` (8.x,
e.g. "Row major linear FP32") or split `Format` + `Datatype` fields (10.x).
"""
from __future__ import annotations

from typing import Any

from workbench.formats.layerinfo import read_layers
from workbench.formats.registry import Reader, register


def accepts(data: Any) -> bool:
    if isinstance(data, list):  # a bare Layers list
        return bool(data) and all(isinstance(x, dict) and "Name" in x
                                  and ("LayerType" in x or "Inputs" in x) for x in data[:3])
    return (isinstance(data, dict) and isinstance(data.get("Layers"), list)
            and "I/O Tensors" not in data
            and not (data["Layers"] and all(isinstance(x, str) for x in data["Layers"])))


READER = register(Reader(
    name="tensorrt-layers-bindings", kind="layers", accepts=accepts, read=read_layers,
    reads="TensorRT 8.6/10.x layer information ({Layers, Bindings}; trtexec --exportLayerInfo, "
          "IEngineInspector JSON)", returns="EngineLayers"))
