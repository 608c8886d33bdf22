"""INT8 / FP8 Q/DQ insertion on a model's structure, its weights streamed tensor by tensor.

For a model whose weights live in external data. The same Q/DQ as `quantize` gets from
onnxruntime's quantizer, configured as it is there: symmetric, zero point 0, pairs on the
inputs of the quantized ops only (never their outputs), weights per channel (Conv: axis 0,
ConvTranspose: 1, MatMul: its last, Gemm: 0 with transB else 1), biases left FP32, excluded
nodes reading the FP32 tensors. What differs is where the bytes go:
- activation ranges come from onnxruntime runs of the model held by reference
  (`workbench.core.weights`: weights memory-mapped from their file, never copied), through
  onnxruntime's own collectors (the same histograms and thresholds `calibrate` uses);
- each weight is only marked in the structure (`QUANT_AXIS_KEY`, `QUANT_SCALE_KEY` beside its
  source bytes) and `workbench.precision.streaming.write_streamed` computes its scales and
  INT8/FP8 values as it writes the model, a block of whole rows at a time.
No protobuf ever holds a weight: the model can be larger than memory and than 2 GB.
"""
from __future__ import annotations

import contextlib
import io
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from workbench.precision.streaming import (FP8_E4M3FN, INT8, QMAX, QUANT_AXIS_KEY,
                                           QUANT_SCALE_KEY, SOURCE_TYPE_KEY, channel_amax,
                                           quantize_block, scales)
from workbench.core.qdq import FP8_TYPES, QUANT_OPS

if TYPE_CHECKING:  # pragma: no cover
    import onnx

    from workbench.core.model import Model

FLOAT = 1
_COMPUTE = ("Conv", "ConvTranspose", "MatMul", "Gemm")


def _slots(node: "onnx.NodeProto") -> Tuple[int, ...]:
    """The inputs of a quantized node that get Q/DQ: A and B, X and W, or the pooled X."""
    return (0, 1) if node.op_type in _COMPUTE else (0,)


def weight_axis(node: "onnx.NodeProto", rank: int) -> int:
    """The per-channel axis of a quantized node's weight (input 1), as onnxruntime takes it."""
    if node.op_type == "ConvTranspose":
        return 1
    if node.op_type == "Gemm":
        trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
        return 0 if trans_b else 1
    if node.op_type == "MatMul":
        return max(rank - 1, 0)
    return 0


def plan(proto: "onnx.ModelProto", ops: Sequence[str], skip: Sequence[str], per_channel: bool
         ) -> Tuple[List[int], List[str], Dict[str, Optional[int]]]:
    """(indices of the nodes to quantize, activations they read, {weight: axis or None}) in
    the main graph: float activations and FP32 initializers at the inputs onnxruntime's
    quantizer puts pairs on (A and B of MatMul / Gemm, X and W of Conv, X of pooling)."""
    inits = {t.name: t for t in proto.graph.initializer}
    from workbench.core.graphindex import GraphIndex

    declared = GraphIndex.of(proto).values  # (an undeclared type counts as float)
    want, skipped = set(ops), set(skip)
    nodes: List[int] = []
    acts: List[str] = []
    wts: Dict[str, Optional[int]] = {}
    for i, n in enumerate(proto.graph.node):
        if n.op_type not in want or n.name in skipped:
            continue
        nodes.append(i)
        for k in _slots(n):
            if k >= len(n.input) or not n.input[k]:
                continue
            x = n.input[k]
            t = inits.get(x)
            if t is not None:
                if t.data_type == FLOAT and x not in wts:
                    wts[x] = weight_axis(n, len(t.dims)) if per_channel and k == 1 and \
                        len(t.dims) > 1 else None
            elif (declared[x].dtype if x in declared else 0) in (0, FLOAT) and x not in acts:
                acts.append(x)
    return nodes, acts, wts


def activation_amax(source: "Model", names: Sequence[str], batches: List[Dict[str, np.ndarray]],
                    method: str) -> Dict[str, float]:
    """Max |value| each of `names` is calibrated to (entropy / percentile thresholds or the
    plain max), from onnxruntime runs of `source` with its weights held by reference, a
    segment at a time (`workbench.runtime.runners.run_bounded`)."""
    from onnxruntime.quantization.calibrate import HistogramCollector

    from workbench.core import weights
    from workbench.runtime.runners import run_bounded

    if not names:
        return {}
    held = weights.by_reference(source)
    hist = None
    if method in ("entropy", "percentile"):
        hist = HistogramCollector(method, True, 512 if method == "entropy" else 2048, 128,
                                  99.999, "same")
    amax: Dict[str, float] = {}
    for group in same_shape_runs(batches):
        outs = run_bounded(held, group, names)  # (a segment's weights mapped at a time)
        if hist is None:
            for o in outs:
                for n in names:
                    a = np.asarray(o[n])
                    m = float(np.nanmax(np.abs(a))) if a.size else 0.0
                    amax[n] = max(amax.get(n, 0.0), m)
        else:
            with contextlib.redirect_stdout(io.StringIO()):  # (its progress prints)
                hist.collect({n: [np.asarray(o[n], np.float32) for o in outs] for n in names})
    if hist is not None:
        with contextlib.redirect_stdout(io.StringIO()):
            found = hist.compute_collection_result()
        amax = {n: max(abs(float(v[0])), abs(float(v[1]))) for n, v in found.items()}
    return amax


def same_shape_runs(batches: List[Dict[str, np.ndarray]]) -> List[List[Dict[str, np.ndarray]]]:
    """Consecutive batches grouped while every input keeps its shape."""
    out: List[List[Dict[str, np.ndarray]]] = []
    last = None
    for b in batches:
        key = tuple(sorted((k, tuple(np.shape(v))) for k, v in b.items()))
        if out and key == last:
            out[-1].append(b)
        else:
            out.append([b])
        last = key
    return out


def _scalar(name: str, value: Any, elem: int) -> "onnx.TensorProto":
    from onnx import helper

    return helper.make_tensor(name, elem, [], [value])


def _zero_point(name: str, qtype: int, dims: Sequence[int]) -> "onnx.TensorProto":
    import onnx

    t = onnx.TensorProto(name=name, data_type=qtype, dims=list(dims))
    t.raw_data = bytes(int(np.prod(dims)) if dims else 1)  # int8 0 and E4M3FN +0 are 0x00
    return t


def insert(proto: "onnx.ModelProto", nodes: Sequence[int], acts: Dict[str, float],
           wts: Dict[str, Optional[int]], qtype: int) -> Dict[str, Any]:
    """Put the Q/DQ pairs into `proto` (changed in place): each activation through one
    QuantizeLinear/DequantizeLinear pair read by the quantized nodes, each weight as a
    `<name>_quantized` tensor (external ones marked for `write_streamed`, inline ones
    quantized here) behind a DequantizeLinear. Names are onnxruntime's."""
    import onnx
    from onnx import helper, numpy_helper

    g = proto.graph
    qmax = QMAX[qtype]
    inits = {t.name: t for t in g.initializer}
    new_inits: List[onnx.TensorProto] = []
    head: List[onnx.NodeProto] = []  # weight DequantizeLinear nodes: no inputs to wait for
    pairs: Dict[str, List[onnx.NodeProto]] = {}
    for x, amax in acts.items():
        scale = np.float32(amax / qmax) if amax > 0 else np.float32(1.0)
        new_inits += [_scalar(f"{x}_scale", float(scale), FLOAT), _zero_point(f"{x}_zero_point",
                                                                               qtype, [])]
        pairs[x] = [
            helper.make_node("QuantizeLinear", [x, f"{x}_scale", f"{x}_zero_point"],
                             [f"{x}_QuantizeLinear_Output"], name=f"{x}_QuantizeLinear"),
            helper.make_node("DequantizeLinear", [f"{x}_QuantizeLinear_Output", f"{x}_scale",
                                                  f"{x}_zero_point"],
                             [f"{x}_DequantizeLinear_Output"], name=f"{x}_DequantizeLinear")]
    for w, axis in wts.items():
        t = inits[w]
        dims = list(t.dims)
        sdims = [dims[axis]] if axis is not None else []
        q = onnx.TensorProto(name=f"{w}_quantized", data_type=qtype, dims=dims)
        scale = onnx.TensorProto(name=f"{w}_scale", data_type=FLOAT, dims=sdims)
        if t.data_location == onnx.TensorProto.EXTERNAL:
            q.data_location = onnx.TensorProto.EXTERNAL
            for kv in t.external_data:
                e = q.external_data.add()
                e.key, e.value = kv.key, kv.value
            for k, v in ((SOURCE_TYPE_KEY, str(FLOAT)), (QUANT_AXIS_KEY, "" if axis is None
                                                         else str(axis)),
                         (QUANT_SCALE_KEY, scale.name)):
                e = q.external_data.add()
                e.key, e.value = k, v
            scale.raw_data = bytes(4 * (sdims[0] if sdims else 1))  # filled as it streams
        else:
            vals, s = quantize_block(numpy_helper.to_array(t).astype(np.float32), axis, qtype,
                                     channel_amax(numpy_helper.to_array(t), axis))
            q.raw_data = vals.tobytes()
            scale.raw_data = s.astype(np.float32).tobytes()
        new_inits += [q, scale, _zero_point(f"{w}_zero_point", qtype, sdims)]
        attrs = {"axis": axis} if axis is not None else {}
        head.append(helper.make_node("DequantizeLinear", [q.name, scale.name,
                                                          f"{w}_zero_point"],
                                     [f"{w}_DequantizeLinear_Output"],
                                     name=f"{w}_DequantizeLinear", **attrs))
    quantized = set(nodes)
    out: List[onnx.NodeProto] = list(head)
    placed: Set[str] = set()
    for i, n in enumerate(g.node):
        if i in quantized:
            for k, x in enumerate(n.input):
                if k not in _slots(n):
                    continue
                if x in pairs:
                    if x not in placed:
                        out += pairs[x]
                        placed.add(x)
                    n.input[k] = f"{x}_DequantizeLinear_Output"
                elif x in wts:
                    n.input[k] = f"{x}_DequantizeLinear_Output"
        out.append(n)
    del g.node[:]
    g.node.extend(out)
    still = {x for n in out for x in n.input} | {o.name for o in g.output}
    kept = [t for t in g.initializer if t.name not in wts or t.name in still]
    del g.initializer[:]
    g.initializer.extend(kept + new_inits)
    return {"activations": len(pairs), "weights": len(wts)}


def qtype_of(onnx_dtype: Optional[int]) -> Optional[int]:
    """The Q/DQ element type streamed for a table row's type: INT8, FP8 E4M3FN, or None."""
    if onnx_dtype == INT8:
        return INT8
    if onnx_dtype in FP8_TYPES:
        return FP8_E4M3FN if onnx_dtype == FP8_E4M3FN else None
    return None


def can_stream(proto: "onnx.ModelProto", onnx_dtype: Optional[int]) -> bool:
    """Is the streamed route open: a streamable Q/DQ type and no Q/DQ in the model already
    (a quantized model is turned back into float first, which needs its weights)?"""
    return qtype_of(onnx_dtype) is not None and not any(
        n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in proto.graph.node)


__all__ = ["QUANT_AXIS_KEY", "QUANT_SCALE_KEY", "QUANT_OPS", "plan", "activation_amax",
           "insert", "channel_amax", "scales", "quantize_block", "qtype_of", "can_stream",
           "weight_axis", "same_shape_runs"]
