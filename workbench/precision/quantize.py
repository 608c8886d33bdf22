"""INT8 / FP8 quantization as Q/DQ pairs (zero point 0), for strongly typed TensorRT.

INT8: onnxruntime.quantization.quantize_static in QDQ format with symmetric activations and
weights, per-channel weights, biases left FP32 (TensorRT rejects INT32 bias DequantizeLinear),
Q/DQ on the inputs of the quantized ops only (TensorRT's placement advice), entropy / minmax /
percentile calibration on CPU. A model that computes in FP16 (a `.half()` export) is refused.
FP8 (E4M3FN): onnxruntime's float8 path only supports its "Distribution" calibrator, so we run
the INT8 pass with the requested calibrator (same Q/DQ placement, same amax per tensor) and
re-derive FP8 scales as amax / 448 (E4M3's largest finite value), re-quantizing weights from
their FP32 values. Opset is raised to 19 (float8 Q/DQ) with onnx's version converter.
A model whose weights live in external data, written to a file, gets the same pairs on its
structure instead, its weights quantized as they stream (`workbench.precision.qdq_stream`).
"""
from __future__ import annotations

import contextlib
import copy
import io
import re
import logging
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from workbench.core.errors import Finding, WorkbenchError

# Q/DQ go in front of the ops TensorRT runs in INT8/FP8 (weighted ops and pooling). Elementwise
# ops stay out: BERT's additive mask (+-3.4e38) would also break histogram calibrators.
from workbench.core.qdq import QUANT_OPS  # noqa: E402  (one list: compare reads it too)
from workbench.precision.qdq_stream import same_shape_runs as _same_shape_runs  # noqa: E402

INT8_QMAX = 127.0  # symmetric int8 range used by onnxruntime: [-127, 127]
FP8_E4M3_MAX = 448.0


@contextlib.contextmanager
def _quiet_root_logger() -> Any:
    """onnxruntime.quantization logs advice on the root logger, and onnxruntime's own logger
    prints a run it refuses in red on stderr (the error raised says it again, in the user's
    terms): keep the user's output clean."""
    import onnxruntime as ort

    root = logging.getLogger()
    old = root.level
    root.setLevel(logging.ERROR)
    ort.set_default_logger_severity(4)  # (fatal only; 2, warnings, is onnxruntime's default)
    try:
        yield
    finally:
        root.setLevel(old)
        ort.set_default_logger_severity(2)


def _opset(proto: Any) -> int:
    return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)


def ensure_opset(proto: Any, version: int) -> Any:
    """Return `proto` at default-domain opset >= version (onnx version converter)."""
    import onnx

    if _opset(proto) >= version:
        return proto
    try:
        return onnx.version_converter.convert_version(proto, version)
    except Exception as e:
        raise WorkbenchError(f"could not raise the model to opset {version} (needed for FP8 "
                             f"Q/DQ): {' '.join(str(e).split())[:200]}",
                             hint="re-export the model with opset >= 19") from None


def extra_options(method: str) -> Dict[str, Any]:
    """onnxruntime quantize_static options: symmetric, zero point 0, FP32 biases, and Q/DQ on
    the inputs of the quantized ops only, as TensorRT recommends ("quantize all inputs of
    weighted operations; by default, don't quantize their outputs"): onnxruntime also
    quantizes a Conv's output, which puts a Q/DQ pair between a Conv and the BatchNorm / Add /
    activation after it (TensorRT then cannot fold them into the convolution, and the tensor
    is rounded to INT8 once more)."""
    return {"ActivationSymmetric": True, "WeightSymmetric": True, "QuantizeBias": False,
            "OpTypesToExcludeOutputQuantization": list(QUANT_OPS)}


def calibrate(proto: Any, batches: List[Dict[str, np.ndarray]], ops: Sequence[str], method: str,
              tmp: Path, cache: Path) -> Any:
    """Activation ranges with onnxruntime's calibrators, saved as its JSON calibration cache.

    We drive the calibrator ourselves because quantize_static does not pass bin counts through:
    its entropy default of 128 histogram bins / 128 quantized bins leaves one candidate
    threshold (plain minmax). Entropy here searches 512 histogram bins down to 128 quantized
    bins (the KL search of TensorRT's entropy calibrator, which uses 2048 bins; 512 keeps the
    pure-Python search 4x cheaper); percentile uses 2048 bins at 99.999%."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod
    from onnxruntime.quantization.calibrate import create_calibrator, save_tensors_data

    from workbench.precision.calibration import ort_reader

    src = tmp / "calib_in.onnx"
    onnx.save(proto, str(src))
    methods = {"entropy": CalibrationMethod.Entropy, "minmax": CalibrationMethod.MinMax,
               "percentile": CalibrationMethod.Percentile}
    opts: Dict[str, Any] = {"symmetric": True}
    if method == "entropy":
        opts.update({"num_bins": 512, "num_quantized_bins": 128})
    elif method == "percentile":
        opts.update({"num_bins": 2048, "percentile": 99.999})
    cal = create_calibrator(src, list(ops), augmented_model_path=str(tmp / "augmented.onnx"),
                            calibrate_method=methods[method], extra_options=opts)
    # one collect per run of batches of one shape: onnxruntime's histogram calibrators stack
    # a call's batches with np.asarray, which fails on batches of other shapes (a smaller last
    # batch, variable-length audio or text); its collectors merge across calls
    for group in _same_shape_runs(batches):
        cal.collect_data(ort_reader(group))
    ranges = cal.compute_data()
    save_tensors_data(ranges, cache)
    return ranges


def _float_model_of(proto: Any, target: str) -> Tuple[Any, List[Finding]]:
    """An already quantized (Q/DQ) model, back in float before it is quantized again: its
    weights at their dequantized values, its activation pairs' rounding removed and their
    saturation kept as Clip (`strip_qdq`); said as a warning. Without this the old zero
    points (onnxruntime's asymmetric activations) would stay beside the new pairs."""
    from workbench.surgery.recipes.qdq import strip_qdq

    n_qdq = sum(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in proto.graph.node)
    out, counts = strip_qdq(proto)
    return out, [Finding(
        "warning", "requantized",
        f"the model was already quantized ({n_qdq} QuantizeLinear/DequantizeLinear): it was "
        f"turned back into float first ({counts['weights']} weight(s) at their dequantized "
        f"values, {counts['pairs']} activation pair(s) removed, their saturation kept as Clip) "
        f"and quantized again to {target.upper()} from the calibration data, symmetric as "
        "TensorRT needs", hint="to keep the model's own scales instead, fix them in place "
                               "(`workbench fix MODEL -o OUT.onnx --recipe symmetric_qdq`, where exact); "
                               "quantizing from the original FP32 model is best",
        source="precision")]


def quantize(proto: Any, target: str, batches: List[Dict[str, np.ndarray]],
             exclude_nodes: Sequence[str], exclude_ops: Sequence[str], method: str,
             per_channel: bool = True, source: Any = None
             ) -> Tuple[Any, List[Finding], Dict[str, Any]]:
    """Insert Q/DQ pairs for `target` in {"int8", "fp8"}. Returns (model, findings, report).
    `source`: the model handle whose external data `proto` (its structure) refers to: the
    pairs then go in on the structure and the weights are quantized as the model is written
    (`workbench.precision.qdq_stream`)."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, quantize_static


    from workbench.precision import table
    from workbench.core.qdq import FP8_TYPES

    row = table.get(target)
    qtype = _ort_quant_type(row)
    pre_findings = []
    if any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in proto.graph.node):
        proto, pre_findings = _float_model_of(proto, target)
    if row.min_opset:
        proto = ensure_opset(proto, row.min_opset)
    methods = {"entropy": CalibrationMethod.Entropy, "minmax": CalibrationMethod.MinMax,
               "percentile": CalibrationMethod.Percentile}
    skip = list(exclude_nodes) + [n.name for n in proto.graph.node
                                  if n.op_type in set(exclude_ops) and n.name not in exclude_nodes]
    ops = [o for o in QUANT_OPS if o not in set(exclude_ops)]
    _fp32_compute(proto, target)
    _something_to_quantize(proto, target, ops, skip)
    if source is not None:
        q = _streamed(proto, target, batches, ops, skip, method, per_channel, source)
        return _finish(q, proto, target, skip, pre_findings)
    with tempfile.TemporaryDirectory(prefix="wb-quant-") as tmp:
        out_path = Path(tmp) / "q.onnx"
        cache = Path(tmp) / "ranges.json"
        try:
            with _quiet_root_logger(), contextlib.redirect_stdout(io.StringIO()):
                calibrate(proto, batches, ops, method, Path(tmp), cache)
                # a copy: quantize_static moves the weights of a ModelProto it is given to
                # external data in a temporary file (seen with onnxruntime 1.32)
                quantize_static(
                    copy.deepcopy(proto), str(out_path), None, quant_format=QuantFormat.QDQ,
                    activation_type=qtype, weight_type=qtype,
                    per_channel=per_channel, calibrate_method=methods[method],
                    op_types_to_quantize=ops, nodes_to_exclude=skip or None,
                    extra_options=extra_options(method), calibration_cache_path=str(cache))
        except WorkbenchError:
            raise
        except Exception as e:
            from workbench.runtime.runners import user_error

            ran = user_error(e)  # the data does not go through the model (ids past a table)
            if ran is not None and "could not run" in ran.message:
                raise WorkbenchError(
                    f"{target.upper()} calibration could not run the model on the calibration "
                    f"data: {ran.message}", node=getattr(ran, "node", None),
                    hint=f"{ran.hint}; check the calibration data against the model's inputs "
                         "(`workbench profiles MODEL --calib DATA` runs it and names what "
                         "does not fit)") from None
            text = " ".join(str(e).split())[:300]
            hint = ("try --calib-method minmax" + ("; or exclude the node the message "
                    "names (--exclude NODE)" if re.search(r"node|/\w", text) else ""))
            if "bins" in text:
                hint = ("a calibrated tensor spans a huge range (e.g. +-3.4e38 mask constants): "
                        "exclude its op type (--exclude-op) or use --calib-method minmax")
            raise WorkbenchError(f"{target.upper()} quantization failed in onnxruntime: "
                                 f"{type(e).__name__}: {text}", hint=hint) from None
        q = onnx.load(str(out_path))
    _unquantize_inputs(q, skip)
    findings: List[Finding] = list(pre_findings)
    if row.onnx_dtype in FP8_TYPES:  # quantized as INT8 above, rescaled to FP8 here
        q, f8 = _int8_to_fp8(q, proto)
        findings += f8
    return _finish(q, proto, target, skip, findings)


def _streamed(proto: Any, target: str, batches: List[Dict[str, np.ndarray]],
              ops: Sequence[str], skip: Sequence[str], method: str, per_channel: bool,
              source: Any) -> Any:
    """The Q/DQ model of the structure `proto` (a copy), activation ranges measured on
    `source` held by reference, weights marked to be quantized as they are written."""
    from workbench.precision import qdq_stream, table

    qtype = qdq_stream.qtype_of(table.get(target).onnx_dtype)
    assert qtype is not None
    nodes, acts, wts = qdq_stream.plan(proto, ops, skip, per_channel)
    try:
        with _quiet_root_logger():
            amax = qdq_stream.activation_amax(source, acts, batches, method)
    except WorkbenchError:
        raise
    except Exception as e:
        from workbench.runtime.runners import user_error

        ran = user_error(e)
        raise WorkbenchError(
            f"{target.upper()} calibration could not run the model on the calibration data: "
            f"{ran.message if ran is not None else ' '.join(str(e).split())[:300]}",
            node=getattr(ran, "node", None),
            hint="check the calibration data against the model's inputs (`workbench profiles "
                 "MODEL --calib DATA` runs it and names what does not fit)") from None
    q = copy.deepcopy(proto)  # (the structure: the FP32 one stays for the findings)
    qdq_stream.insert(q, nodes, {a: amax.get(a, 0.0) for a in acts}, wts, qtype)
    return q


def _finish(q: Any, proto: Any, target: str, skip: Sequence[str], findings: List[Finding]
            ) -> Tuple[Any, List[Finding], Dict[str, Any]]:
    """The quantized model's report and findings (zero points all 0, what stayed float)."""
    findings = list(findings)
    report = _qdq_report(q, target)
    nonzero = report.pop("_nonzero_zero_points")
    if nonzero:
        raise WorkbenchError(f"quantization produced non-zero zero points: {', '.join(nonzero)}",
                             hint="TensorRT needs zero point 0; please report this model")
    findings += _quant_findings(proto, q, skip)
    if not report.get("quantized_nodes"):
        findings.append(Finding(
            "warning", "nothing-quantized",
            f"no node is quantized: the {target.upper()} model holds no Q/DQ pair, so it "
            f"computes in FP32 ({len(skip)} node(s) excluded)", nodes=list(skip)[:20],
            source="precision",
            hint=f"exclude fewer nodes, or build in FP16 if {target.upper()} cannot keep the "
                 "accuracy you need"))
    return q, findings, report


def _fp32_compute(proto: Any, target: str) -> None:
    """Refuse a model whose weighted ops compute in FP16/BF16 (a PyTorch `.half()` export):
    Q/DQ pairs carry FP32 scales and quantize FP32 tensors; onnxruntime writes FP16 scales
    for such a model (invalid ONNX: "x_scale has unsupported type tensor(float16)") and
    TensorRT cannot build it ("input and kernel must be of same type")."""
    low = {10: "FP16", 16: "BF16"}
    inits = {t.name: t.data_type for t in proto.graph.initializer}
    for n in proto.graph.node:
        if n.op_type in QUANT_OPS and len(n.input) > 1 and inits.get(n.input[1]) in low:
            held = low[inits[n.input[1]]]
            raise WorkbenchError(
                f"the model computes in {held}, not FP32 (weights of '{n.name or n.op_type}' "
                f"are {held}, as a .half() export writes them): {target.upper()} Q/DQ quantize "
                "FP32 tensors", node=n.name or None,
                hint="quantize the FP32 model it was made from (export it without .half()): "
                     f"`workbench precision model_fp32.onnx --to {target} --calib DATA -o "
                     "OUT.onnx`")


def _something_to_quantize(proto: Any, target: str, ops: Sequence[str],
                           skip: Sequence[str]) -> None:
    """WorkbenchError when no node of the main graph would get Q/DQ pairs (onnxruntime's
    quantizer does not enter If/Loop/Scan bodies): the "INT8" model would be the FP32 one,
    or calibration would fail on an empty histogram; say why, and what to do instead."""
    from workbench.core.model import _iter_graphs

    want, skipped = set(ops), set(skip)
    if any(n.op_type in want and n.name not in skipped for n in proto.graph.node):
        return
    inner = [n for g in list(_iter_graphs(proto.graph))[1:] for n in g.node if n.op_type in want]
    label = target.upper()
    if inner:
        where = ", ".join(sorted({n.op_type for n in inner}))
        from workbench.core.graphindex import GraphIndex

        gi = GraphIndex(proto.graph)
        owners = [gi.key(i) for i in range(len(gi)) if gi.has_subgraphs(i)]
        raise WorkbenchError(
            f"nothing to quantize to {label}: the model's {len(inner)} {where} node(s) are all "
            f"inside control flow ({', '.join(owners[:4])}), whose bodies onnxruntime's "
            f"quantizer does not enter; the {label} model would compute as the FP32 one",
            node=owners[0] if owners else None,
            hint="use FP16 for this model (`--to fp16` lowers If/Loop bodies too), or move the "
                 "compute out of the If/Loop when exporting")
    what = "all of them are excluded" if any(n.op_type in QUANT_OPS for n in proto.graph.node) \
        else "it has none"
    einsums = [n for n in proto.graph.node if n.op_type == "Einsum"]
    if einsums and what == "it has none":  # matrix products, written as einsum
        raise WorkbenchError(
            f"nothing to quantize to {label}: the model's matrix products are "
            f"{len(einsums)} Einsum node(s) ('{einsums[0].name or 'Einsum'}' ...), and Q/DQ "
            f"pairs go on {', '.join(ops)} nodes only (TensorRT fuses INT8 into those, not "
            "into Einsum)", node=einsums[0].name or None,
            hint="export the products with torch.matmul / @ / nn.Linear instead of "
                 "torch.einsum to quantize them, or use --to fp16 (Einsum runs in FP16)")
    raise WorkbenchError(
        f"nothing to quantize to {label}: Q/DQ pairs go on {', '.join(ops)} nodes and {what}",
        hint="quantize a model with convolutions or matrix products, keep fewer of them out "
             "(--exclude / --exclude-op), or use --to fp16")


def _unquantize_inputs(q: Any, skip: Sequence[str]) -> None:
    """Excluded nodes read the original FP32 activations, not the shared Q/DQ copy that
    onnxruntime gives every consumer of a quantized tensor (so they see no INT8 rounding and
    TensorRT has no Q/DQ to fuse into them)."""
    skip = set(skip)
    if not skip:
        return
    q_in = {n.output[0]: n.input[0] for n in q.graph.node if n.op_type == "QuantizeLinear"}
    dq_src = {n.output[0]: q_in[n.input[0]] for n in q.graph.node
              if n.op_type == "DequantizeLinear" and n.input[0] in q_in}
    for n in q.graph.node:
        if n.name in skip:
            for k, name in enumerate(n.input):
                if name in dq_src:
                    n.input[k] = dq_src[name]
    used = {i for n in q.graph.node for i in n.input} | {o.name for o in q.graph.output}
    keep = []
    for n in q.graph.node:  # drop Q/DQ pairs nobody reads any more
        if n.op_type in ("QuantizeLinear", "DequantizeLinear") and n.output[0] not in used:
            continue
        keep.append(n)
    if len(keep) != len(q.graph.node):
        used = {i for n in keep for i in n.input} | {o.name for o in q.graph.output}
        keep = [n for n in keep if not (n.op_type == "QuantizeLinear" and n.output[0] not in used)]
        del q.graph.node[:]
        q.graph.node.extend(keep)


def _qdq_report(q: Any, target: str) -> Dict[str, Any]:
    from onnx import numpy_helper

    inits = {t.name: t for t in q.graph.initializer}
    nonzero = []
    zp_type = None
    for n in q.graph.node:
        if n.op_type in ("QuantizeLinear", "DequantizeLinear") and len(n.input) > 2:
            t = inits.get(n.input[2])
            if t is None:
                continue
            zp_type = t.data_type
            a = numpy_helper.to_array(t)
            if np.any(a.astype(np.float32) != 0):
                nonzero.append(n.input[2])
    from workbench.core.qdq import quantized_nodes

    quantized = sorted(quantized_nodes(q))
    return {"zero_points_all_zero": not nonzero, "zero_point_type": zp_type,
            "quantized_nodes": quantized, "_nonzero_zero_points": sorted(set(nonzero))}


def _quant_findings(fp32: Any, q: Any, skip: Sequence[str]) -> List[Finding]:
    compute = {"Conv", "ConvTranspose", "MatMul", "Gemm"}
    consumers_of_dq = set()
    dq_outs = {o for n in q.graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    for n in q.graph.node:
        if n.op_type not in ("QuantizeLinear", "DequantizeLinear") and any(
                i in dq_outs for i in n.input):
            consumers_of_dq.add(n.name)
    float_compute = [n.name for n in fp32.graph.node
                     if n.op_type in compute and n.name not in consumers_of_dq]
    out = []
    if skip:
        out.append(Finding("info", "kept-fp32",
                           f"{len(skip)} node(s) excluded from quantization (stay in higher "
                           "precision): " + ", ".join(skip[:12]), nodes=list(skip),
                           source="precision"))
    out += _exclusions_without_effect(fp32, q, skip)
    unexpected = [n for n in float_compute if n not in skip]
    if unexpected:
        out.append(Finding("info", "not-quantized",
                           f"{len(unexpected)} Conv/MatMul/Gemm node(s) got no Q/DQ inputs and "
                           "will run in higher precision: " + ", ".join(unexpected[:12]),
                           nodes=unexpected, source="precision"))
    out += _float_only_compute(fp32)
    return out


FLOAT_ONLY_COMPUTE = ("LSTM", "GRU", "RNN", "Einsum", "Attention", "MultiHeadAttention")


def _float_only_compute(fp32: Any) -> List[Finding]:
    """Heavy ops that get no Q/DQ (recurrent cells, Einsum, fused attention): the INT8 model
    computes them in float, so an LSTM tagger's "INT8" is its head only; said, with counts."""
    from workbench.core.graphindex import walk_graphs

    seen: Dict[str, List[str]] = {}
    for g in walk_graphs(fp32.graph):
        for n in g.node:
            if n.op_type in FLOAT_ONLY_COMPUTE:
                seen.setdefault(n.op_type, []).append(n.name or n.op_type)
    if not seen:
        return []
    names = [x for v in seen.values() for x in v]
    kinds = ", ".join(f"{len(v)} {k}" for k, v in seen.items())
    return [Finding("info", "float-only-compute",
                    f"{kinds} node(s) get no Q/DQ (TensorRT quantizes Conv, MatMul and Gemm): "
                    "they compute in float in the INT8 engine, so its speed-up comes from the "
                    "rest of the model only", nodes=names[:50], source="precision",
                    hint="compare the INT8 and FP16 engines' timings (`workbench timing`) "
                         "before choosing INT8 for this model")]


def _exclusions_without_effect(fp32: Any, q: Any, skip: Sequence[str]) -> List[Finding]:
    """A warning for each excluded node whose output the quantized model still quantizes (a
    Concat, an Add: no Q/DQ pair of their own; the pair on their output is their quantized
    readers' input): the exclusion does not keep that tensor in float, excluding the readers
    does. Read off the result, not assumed per op."""
    from workbench.core.graphindex import GraphIndex

    gi, qi = GraphIndex(fp32.graph), GraphIndex(q.graph)
    nodes, qnodes = fp32.graph.node, q.graph.node
    out = []
    for name in skip:
        found = gi.find(name)
        if not found or nodes[found[0]].op_type in QUANT_OPS:
            continue
        n = nodes[found[0]]
        still = [o for o in n.output if any(qnodes[c].op_type == "QuantizeLinear"
                                            for c in qi.consumers_of(o))]
        if not still:
            continue
        readers = sorted({nodes[c].name for o in still for c in gi.consumers_of(o)
                          if nodes[c].op_type in QUANT_OPS and nodes[c].name})
        out.append(Finding(
            "warning", "exclusion-without-effect",
            f"'{name}' ({n.op_type}) is excluded, but its output '{still[0]}' is still "
            "quantized, as the INT8 input of the node(s) reading it: the exclusion does not "
            "keep that tensor in float", nodes=[name], tensors=still, op=n.op_type,
            source="precision",
            hint=("exclude its reader(s) instead: --exclude " + " --exclude ".join(readers[:4]))
            if readers else None))
    return out


def _ort_quant_type(row: Any) -> Any:
    """onnxruntime's QuantType for a quantized row's Q/DQ element type; float8 rows quantize
    as INT8 first (onnxruntime's FP8 calibration differs) and are rescaled after."""
    from onnxruntime.quantization import QuantType

    from workbench.core.qdq import FP8_TYPES

    by_dtype = {3: "QInt8", 2: "QUInt8", 5: "QInt16", 4: "QUInt16", 22: "QInt4", 21: "QUInt4"}
    if row.onnx_dtype in FP8_TYPES or row.onnx_dtype is None:
        return QuantType.QInt8
    name = by_dtype.get(row.onnx_dtype)
    if name is None or not hasattr(QuantType, name):
        raise WorkbenchError(f"onnxruntime cannot quantize to ONNX element type {row.onnx_dtype} "
                             f"({row.name})", field="precision",
                             hint="use a target with an INT8/INT4/FP8 Q/DQ type")
    return getattr(QuantType, name)


def _int8_to_fp8(q: Any, fp32: Any) -> Tuple[Any, List[Finding]]:
    """Rewrite a symmetric INT8 QDQ model as FP8 E4M3FN QDQ with amax/448 scales."""
    import ml_dtypes
    import onnx
    from onnx import numpy_helper

    q = ensure_opset(q, 19)
    inits = {t.name: t for t in q.graph.initializer}
    originals = {t.name: t for t in fp32.graph.initializer}
    ratio = INT8_QMAX / FP8_E4M3_MAX
    new: Dict[str, Any] = {}
    scaled = set()
    findings: List[Finding] = []
    approx = []

    def scale_of(name: str) -> np.ndarray:
        if name not in new:
            new[name] = (numpy_helper.to_array(inits[name]).astype(np.float32) * ratio
                         ).astype(np.float32)
        return new[name]

    for n in q.graph.node:
        if n.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        scale = scale_of(n.input[1])
        scaled.add(n.input[1])
        if len(n.input) > 2 and n.input[2] in inits and n.input[2] not in new:
            shape = tuple(inits[n.input[2]].dims)
            new[n.input[2]] = np.zeros(shape, dtype=ml_dtypes.float8_e4m3fn)
        src = n.input[0]
        if n.op_type == "DequantizeLinear" and src in inits and inits[src].data_type == 3:
            qw = numpy_helper.to_array(inits[src]).astype(np.float32)
            axis = next((a.i for a in n.attribute if a.name == "axis"), 1)
            s_int8 = numpy_helper.to_array(inits[n.input[1]]).astype(np.float32)
            bshape = [1] * qw.ndim
            if s_int8.ndim == 1 and s_int8.size > 1:
                bshape[axis % qw.ndim] = s_int8.size
            w = None
            base = src[:-len("_quantized")] if src.endswith("_quantized") else None
            if base in originals:
                cand = numpy_helper.to_array(originals[base]).astype(np.float32)
                if cand.shape == qw.shape and np.all(
                        np.abs(cand - qw * s_int8.reshape(bshape)) <=
                        0.51 * np.abs(s_int8.reshape(bshape)) + 1e-12):
                    w = cand
            if w is None:
                w = qw * s_int8.reshape(bshape)
                approx.append(src)
            s8 = scale.reshape(bshape)
            safe = np.where(s8 == 0, 1.0, s8)
            wq = np.clip(w / safe, -FP8_E4M3_MAX, FP8_E4M3_MAX).astype(ml_dtypes.float8_e4m3fn)
            new[src] = wq
    for t in list(q.graph.initializer):
        if t.name in new:
            arr = new[t.name]
            repl = numpy_helper.from_array(arr, t.name)
            t.CopyFrom(repl)
    if approx:
        findings.append(Finding("info", "fp8-weights-from-int8",
                                f"{len(approx)} weight(s) re-quantized to FP8 from their INT8 "
                                "values (FP32 original not matched): " + ", ".join(approx[:8]),
                                tensors=approx, source="precision"))
    onnx.checker.check_model(q)
    return q, findings


def convert_modelopt(proto: Any, target: str, batches: Optional[List[Dict[str, np.ndarray]]],
                     exclude_nodes: Sequence[str], exclude_ops: Sequence[str],
                     method: str) -> Any:
    """NVIDIA's recommended quantizer, only when `nvidia-modelopt[onnx]` is installed."""
    try:
        from modelopt.onnx.quantization import quantize as mo_quantize  # type: ignore
    except Exception as e:
        raise WorkbenchError(f"route 'modelopt' needs nvidia-modelopt, which is not importable "
                             f"({type(e).__name__})", field="route",
                             hint="pip install 'nvidia-modelopt[onnx]' (large: torch, cupy), or "
                             "use the default route") from None
    import onnx

    from workbench.precision import table

    if not table.is_quantized(target):
        raise WorkbenchError(f"route 'modelopt' handles the quantized targets, not {target}",
                             field="route", hint="use the default route for fp16/bf16")
    if batches is None:
        raise WorkbenchError("modelopt needs calibration data", field="calibration")
    with tempfile.TemporaryDirectory(prefix="wb-modelopt-") as tmp:
        src = Path(tmp) / "in.onnx"
        dst = Path(tmp) / "out.onnx"
        onnx.save(proto, str(src))
        calib = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
        mo_quantize(str(src), quantize_mode=target, calibration_data=calib,
                    calibration_method={"entropy": "entropy", "minmax": "max",
                                        "percentile": "max"}[method],
                    nodes_to_exclude=list(exclude_nodes) or None,
                    op_types_to_exclude=list(exclude_ops) or None, output_path=str(dst))
        return onnx.load(str(dst))
