"""TensorRT 11.x engine layer information: `{"Layers": [...], "I/O Tensors": [...]}`.

11.x renamed `Bindings` (binding indices are gone since 10.0) to `I/O Tensors`, writes tensors
with split `Format` / `Datatype` / `Dimensions` / `StrideOrder` / `Strides` fields, adds
`Constants` and `StreamId` per layer, and names fused generated kernels `LayerType: "kgen"`
(their fused ops: `workbench.formats.kgen.kgen_ops`).
"""
from __future__ import annotations

from typing import Any

from workbench.formats.layerinfo import read_layers
from workbench.formats.registry import Reader, register


def accepts(data: Any) -> bool:
    return (isinstance(data, dict) and isinstance(data.get("Layers"), list)
            and "I/O Tensors" in data
            and not (data["Layers"] and all(isinstance(x, str) for x in data["Layers"])))


READER = register(Reader(
    name="tensorrt-layers-io-tensors", kind="layers", accepts=accepts, read=read_layers,
    reads="TensorRT 11.x layer information ({Layers, I/O Tensors}, split Format/Datatype, kgen)",
    returns="EngineLayers"))
