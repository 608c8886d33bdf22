"""A model's real inputs (graph inputs that are not initializers): name, element type, dims.

Kept apart from `calibration` so that profile checks and the build path read them without
importing numpy or the onnx package (the protobuf classes are enough; see `onnx_light`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Tuple, Union

# ONNX TensorProto elem type -> numpy dtype name (only types a model input can sensibly have)
ONNX_TO_NP_NAME = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
                   7: "int64", 9: "bool", 10: "float16", 11: "float64", 12: "uint32",
                   13: "uint64"}


@dataclass
class InputSpec:
    """One model input: name, ONNX element type, dims (int, or str symbol, or None)."""

    name: str
    elem_type: int
    dims: List[Union[int, str, None]]

    @property
    def dtype(self) -> Any:
        """The numpy dtype (None if exotic: strings, complex, 8-bit floats, ...)."""
        name = ONNX_TO_NP_NAME.get(self.elem_type)
        if name is None:
            return None
        import numpy as np

        return np.dtype(name)

    @property
    def dynamic_axes(self) -> List[int]:
        return [i for i, d in enumerate(self.dims) if not isinstance(d, int)]

    def shape_str(self) -> str:
        return "[" + ", ".join("?" if d is None else str(d) for d in self.dims) + "]"


def proto_of(model: Any) -> Any:
    """ModelProto from a Model, a ModelProto or a path (graph only; weights not needed)."""
    from workbench.onnx_light import onnx_proto

    if isinstance(model, onnx_proto().ModelProto):
        return model
    if hasattr(model, "proto") and hasattr(model, "node_ids"):
        return model.proto
    from workbench.model import open_model

    return open_model(model).proto


def model_inputs(model: Any) -> List[InputSpec]:
    """The real inputs of the model (graph inputs that are not initializers)."""
    proto = proto_of(model)
    inits = {i.name for i in proto.graph.initializer}
    specs = []
    for vi in proto.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dims: List[Union[int, str, None]] = []
        if tt.HasField("shape"):
            for d in tt.shape.dim:
                if d.HasField("dim_value") and d.dim_value > 0:
                    dims.append(int(d.dim_value))
                elif d.HasField("dim_param") and d.dim_param:
                    dims.append(d.dim_param)
                else:
                    dims.append(None)
        specs.append(InputSpec(vi.name, tt.elem_type, dims))
    return specs


def zero_size_axes(model: Any) -> List[Tuple[str, int, str]]:
    """(input, axis, how) for input axes TensorRT's parser reads as a FIXED size 0 while the
    model means them as unknown: a dim_param set to "" or a dim_value of 0 (an absent dim
    and a negative dim_value are dynamic to both)."""
    proto = proto_of(model)
    inits = {i.name for i in proto.graph.initializer}
    out = []
    for vi in proto.graph.input:
        tt = vi.type.tensor_type
        if vi.name in inits or not tt.HasField("shape"):
            continue
        for axis, d in enumerate(tt.shape.dim):
            which = d.WhichOneof("value")
            if which == "dim_param" and not d.dim_param:
                out.append((vi.name, axis, "has an empty dim_param '', which TensorRT's "
                            "parser reads as a fixed size 0"))
            elif which == "dim_value" and d.dim_value == 0:
                out.append((vi.name, axis, "has size 0: TensorRT would build for empty "
                            "tensors only"))
    return out


def shape_text(model: Any, name: str) -> str:
    """The input's shape as a set_input_shapes value (AxBxC): unknown axes become N (axis 0)
    or d<axis>, so every axis has a size or a name."""
    for s in model_inputs(model):
        if s.name == name:
            return "x".join(str(d) if d is not None else ("N" if i == 0 else f"d{i}")
                            for i, d in enumerate(s.dims))
    return "N"
