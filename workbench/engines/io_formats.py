"""I/O types and formats of an engine, in trtexec's grammar (`fp16:hwc8`, `fp16:chw16+hwc8`,
`fp32:chw,fp16:hwc8`: one entry per I/O tensor in order, or one for all), and the ONNX
transform that gives a strongly typed build (TensorRT 11, TensorRT-RTX) those types.

An engine built with FP32 linear I/O around an FP16 network runs reformat layers at its
inputs and outputs (FP32 NCHW -> FP16 channels-last and back); asking for FP16 HWC8 I/O lets
TensorRT drop them, and the caller feeds FP16 in that layout. On builder-flag TensorRT the
worker sets `ITensor.dtype`/`allowed_formats`; a strongly typed network takes its I/O types
from the ONNX, so `cast_io` gives the ONNX FP16 I/O with a Cast beside each (formats are set
by the worker either way). Integer and bool tensors (token ids, masks) keep their type.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from workbench.core.errors import WorkbenchError
from workbench.precision import table

# trtexec's I/O types: the precision table's targets and the integer/bool tensor types
TYPES = tuple(table.names()) + ("int32", "int64", "bool", "uint8")
FORMATS = ("chw", "chw2", "chw4", "chw16", "chw32", "hwc", "hwc8", "hwc16", "dhwc", "dhwc8",
           "cdhw32")
# ONNX elem types of the float I/O types (FLOAT, FLOAT16, BFLOAT16: the table's
# unquantized rows; a quantized type's I/O goes through Q/DQ instead)
_ONNX_FLOAT = {n: table.get(n).onnx_dtype for n in table.names()
               if not table.is_quantized(n) and table.get(n).onnx_dtype}
Spec = List[Tuple[str, List[str]]]


def parse(text: Optional[str], field: str = "input_io_formats") -> Optional[Spec]:
    """`fp16:hwc8,fp32:chw` -> [("fp16", ["hwc8"]), ("fp32", ["chw"])]; None/"" -> None."""
    if text is None or not str(text).strip():
        return None
    out: Spec = []
    for item in str(text).replace(" ", "").lower().split(","):
        t, sep, fmts = item.partition(":")
        if not sep or not fmts:
            raise WorkbenchError(f"I/O format '{item}' needs TYPE:FORMAT (e.g. fp16:hwc8)",
                                 field=field, hint="types: " + ", ".join(TYPES) +
                                 "; formats: " + ", ".join(FORMATS) + " (join several with +)")
        if t not in TYPES:
            raise WorkbenchError(f"unknown I/O type '{t}' in '{item}'", field=field,
                                 hint="one of " + ", ".join(TYPES))
        names = fmts.split("+")
        bad = [f for f in names if f not in FORMATS]
        if bad:
            raise WorkbenchError(f"unknown I/O format '{bad[0]}' in '{item}'", field=field,
                                 hint="one of " + ", ".join(FORMATS))
        out.append((t, names))
    return out


def text(spec: Optional[Spec]) -> Optional[str]:
    """The trtexec spelling of a parsed spec."""
    if not spec:
        return None
    return ",".join(f"{t}:{'+'.join(f)}" for t, f in spec)


def normalise(value: Any, field: str) -> Optional[str]:
    """A config field's value (text or parsed list) in its canonical trtexec spelling."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        value = ",".join(f"{t}:{'+'.join(f) if isinstance(f, (list, tuple)) else f}"
                         for t, f in value)
    return text(parse(str(value), field))


# trtexec's names -> TensorRT's (DataType attributes, TensorFormat members)
_TRT_TYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "int8": "int8",
              "fp8": "fp8", "int32": "int32", "int64": "int64", "bool": "bool",
              "uint8": "uint8"}


def _trt_format(name: str) -> str:
    return "LINEAR" if name == "chw" else name.upper()


def for_worker(value: Optional[str]) -> Optional[List[List[Any]]]:
    """The worker's form: [[DataType attribute, [TensorFormat names]], ...]."""
    spec = parse(value)
    return None if spec is None else [[_TRT_TYPES[t], [_trt_format(f) for f in fs]]
                                      for t, fs in spec]


def _per_tensor(spec: Spec, names: Sequence[str], field: str) -> Dict[str, str]:
    if len(spec) not in (1, len(names)):
        raise WorkbenchError(f"{len(spec)} I/O format entries for {len(names)} tensors "
                             f"({', '.join(names)})", field=field,
                             hint="give one TYPE:FORMAT per tensor in order, or one for all")
    return {n: (spec[0] if len(spec) == 1 else spec[k])[0] for k, n in enumerate(names)}


def cast_io(proto: Any, inputs: Optional[str], outputs: Optional[str]) -> Tuple[Any, List[str]]:
    """Give `proto` (changed in place, weights untouched) the requested float I/O types: each
    float graph input of another type becomes that type followed by a Cast to what the graph
    computes in; each float output gets a Cast to the requested type before it. Names the
    caller feeds and reads stay the same. Returns (proto, what was changed)."""
    from onnx import helper

    g = proto.graph
    init = {t.name for t in g.initializer}
    graph_inputs = [i for i in g.input if i.name not in init]
    changed: List[str] = []
    for where, spec_text, tensors in (("input", inputs, graph_inputs),
                                      ("output", outputs, list(g.output))):
        spec = parse(spec_text, f"{where}_io_formats")
        if not spec:
            continue
        want = _per_tensor(spec, [t.name for t in tensors], f"{where}_io_formats")
        for vi in tensors:
            have = vi.type.tensor_type.elem_type
            to = _ONNX_FLOAT.get(want[vi.name])
            if have not in _ONNX_FLOAT.values() or to is None or to == have:
                continue  # integer/bool tensors, int8/fp8 (quantized I/O: Q/DQ), or already so
            inner = f"{vi.name}__wb_io_{'in' if where == 'input' else 'out'}"
            if where == "input":
                for node in g.node:
                    for k, name in enumerate(node.input):
                        if name == vi.name:
                            node.input[k] = inner
                cast = helper.make_node("Cast", [vi.name], [inner], to=have,
                                        name=f"{vi.name}__wb_io_cast")
                g.node.insert(0, cast)
            else:
                for node in g.node:
                    for k, name in enumerate(node.output):
                        if name == vi.name:
                            node.output[k] = inner
                    for k, name in enumerate(node.input):  # (an output also read inside)
                        if name == vi.name:
                            node.input[k] = inner
                g.node.append(helper.make_node("Cast", [inner], [vi.name], to=to,
                                               name=f"{vi.name}__wb_io_cast"))
            vi.type.tensor_type.elem_type = to
            changed.append(f"{where} '{vi.name}': {_name(have)} -> {want[vi.name]}")
    return proto, changed


def _name(elem: int) -> str:
    return {v: k for k, v in _ONNX_FLOAT.items()}.get(elem, str(elem))
