"""Static support rules, as data: which ONNX ops and attribute values each TensorRT takes.

The starting point is the onnx-tensorrt operator matrix (TensorRT 10.15, opset 9-24). The real
parsers disagree with it in places, so every backend has its own table; the `tensorrt-rtx`
table records what TensorRT-RTX 1.7's parser and CPU ahead-of-time builder actually did on
single-op models (tests/test_support.py re-asks the real parser and is the judge).

A rule is a dict: `id`, `op`, `check` (a predicate name from `workbench.support.checker.CHECKS`) with
its parameters, `reason`, `hint` (the next step in users' terms) and `stage` ("parse" or
"build": when TensorRT rejects it). Backends pick rules by id and may override fields.
"""
from __future__ import annotations

import copy
from typing import Any, Dict, List, Optional

MATRIX_VERSION = "10.15"  # the TensorRT release of the operator matrix the rules are compiled from
MATRIX_SOURCE = f"onnx-tensorrt docs/operators.md (TensorRT {MATRIX_VERSION}, opset 9-24)"

# Ops the matrix marks "N". Value: the next step users can take.
MATRIX_UNSUPPORTED: Dict[str, str] = {
    "AffineGrid": "decompose into MatMul + Reshape on a constant base grid",
    "Bernoulli": "sample outside the engine, or replace with RandomUniform + Less",
    "BitShift": "replace with Mul/Div by powers of two on INT32",
    "BitwiseAnd": "cast to BOOL and use And where the values are masks",
    "BitwiseNot": "cast to BOOL and use Not where the values are masks",
    "BitwiseOr": "cast to BOOL and use Or where the values are masks",
    "BitwiseXor": "cast to BOOL and use Xor where the values are masks",
    "CenterCropPad": "replace with Slice + Pad",
    "Col2Im": "replace with a plugin, or restructure (ConvTranspose with one-hot weights)",
    "Compress": "replace with NonZero + Gather where shapes allow, or move it out of the engine",
    "ConcatFromSequence": "unroll the sequence into a plain Concat",
    "ConvInteger": "quantize with Q/DQ (QuantizeLinear/DequantizeLinear around Conv) instead",
    "DFT": "use STFT (supported) or a plugin",
    "Det": "compute outside the engine or with a plugin",
    "DynamicQuantizeLinear": "use static Q/DQ with calibrated scales (workbench precision int8)",
    "ImageDecoder": "decode images before the engine",
    "MatMulInteger": "quantize with Q/DQ around MatMul instead",
    "MaxRoiPool": "use RoiAlign or a plugin",
    "MaxUnpool": "replace with ScatterElements on a zero tensor",
    "MelWeightMatrix": "precompute the matrix and store it as an initializer (constant folding)",
    "Multinomial": "sample outside the engine",
    "NegativeLogLikelihoodLoss": "training-only op: export the model in eval mode without the loss",
    "Optional": "export without optional values (fixed inputs)",
    "OptionalGetElement": "export without optional values (fixed inputs)",
    "OptionalHasElement": "export without optional values (fixed inputs)",
    "QLinearConv": "re-quantize in QDQ format (QuantizeLinear/DequantizeLinear around Conv)",
    "QLinearMatMul": "re-quantize in QDQ format (QuantizeLinear/DequantizeLinear around MatMul)",
    "RegexFullMatch": "string ops run outside the engine",
    "SequenceAt": "unroll the sequence into plain tensors",
    "SequenceConstruct": "unroll the sequence into plain tensors",
    "SequenceEmpty": "unroll the sequence into plain tensors",
    "SequenceErase": "unroll the sequence into plain tensors",
    "SequenceInsert": "unroll the sequence into plain tensors",
    "SequenceLength": "unroll the sequence into plain tensors",
    "SequenceMap": "unroll the sequence into plain tensors",
    "SoftmaxCrossEntropyLoss": "training-only op: export the model in eval mode without the loss",
    "SplitToSequence": "use Split (supported) instead",
    "StringConcat": "string ops run outside the engine",
    "StringNormalizer": "string ops run outside the engine",
    "StringSplit": "string ops run outside the engine",
    "TfIdfVectorizer": "run text vectorization outside the engine",
    "Unique": "move it out of the engine or use a plugin",
}

# Every op the matrix lists as supported ("Y"); ops in neither list are unknown to it.
MATRIX_SUPPORTED = frozenset("""
Abs Acos Acosh Add And ArgMax ArgMin Asin Asinh Atan Atanh Attention AveragePool
BatchNormalization BlackmanWindow Cast CastLike Ceil Celu Clip Concat Constant ConstantOfShape
Conv ConvTranspose Cos Cosh CumSum DeformConv DepthToSpace DequantizeLinear Div Dropout Einsum
Elu Equal Erf Exp Expand EyeLike Flatten Floor Gather GatherElements GatherND Gelu Gemm
GlobalAveragePool GlobalLpPool GlobalMaxPool Greater GreaterOrEqual GridSample
GroupNormalization GRU HammingWindow HannWindow HardSigmoid HardSwish Hardmax Identity If
ImageScaler InstanceNormalization IsInf IsNaN LayerNormalization LeakyRelu Less LessOrEqual Log
LogSoftmax Loop LRN LSTM LpNormalization LpPool MatMul Max MaxPool Mean
MeanVarianceNormalization Min Mish Mod Mul Neg NonMaxSuppression NonZero Not OneHot Or Pad
ParametricSoftplus Pow PRelu QuantizeLinear RandomNormal RandomNormalLike RandomUniform
RandomUniformLike Range Reciprocal ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceMax
ReduceMean ReduceMin ReduceProd ReduceSum ReduceSumSquare Relu Reshape Resize ReverseSequence
RMSNormalization RNN RoiAlign RotaryEmbedding Round STFT ScaledTanh Scan Scatter
ScatterElements ScatterND Selu Shape Shrink Sigmoid Sign Sin Sinh Size Slice Softmax Softplus
Softsign SpaceToDepth Split Sqrt Squeeze Sub Sum Tan Tanh TensorScatter ThresholdedRelu Tile
TopK Transpose Trilu Unsqueeze Upsample Where Xor
""".split())

# The data types the matrix lists (FP8 = FLOAT8E4M3FN, FP4 = FLOAT4E2M1).
MATRIX_DTYPES = ["DOUBLE", "FLOAT", "FLOAT16", "BFLOAT16", "FLOAT8E4M3FN", "FLOAT4E2M1", "INT32",
                 "INT64", "INT8", "INT4", "UINT8", "BOOL"]

PLUGIN_HINT = ("needs a TensorRT plugin: load its library with --plugin LIB (plugins=[...] "
               "in Python); to map the node onto a plugin by another name: `workbench fix "
               "{model} --recipe replace_with_plugin:nodes={node},plugin=NAME`")

# a plugin the backend has, created only where a GPU is usable (`gpu_plugins`)
GPU_PLUGIN_HINT = ("check it where the engine will run: on a machine with an NVIDIA GPU the "
                   "plugin loads and the parser may take the node (`workbench check {model}` "
                   "there)")


def _only_default(op: str, attr: str, default: Any, reason: str, hint: str) -> Dict[str, Any]:
    """A rule for an attribute TensorRT takes only at its ONNX default: any other value is
    refused (`reason` may name it as {value})."""
    return {"op": op, "check": "attr_not_in", "attr": attr, "default": default,
            "allowed": [default], "reason": reason, "hint": hint}


# Attribute/input restrictions. `check` names a predicate in workbench.support.checker.CHECKS.
RULES: Dict[str, Dict[str, Any]] = {
    "resize-mode": {
        "op": "Resize", "check": "attr_not_in", "attr": "mode", "default": "nearest",
        "allowed": ["nearest", "linear"],
        "reason": "Resize mode '{value}' is not supported (nearest, linear only)",
        "hint": "re-export with mode='linear' (or 'nearest')"},
    "resize-antialias": _only_default("Resize", "antialias", 0,
        "Resize antialias={value} is not supported",
        "export with antialias=False"),
    "resize-coordinate-mode": {
        "op": "Resize", "check": "attr_not_in", "attr": "coordinate_transformation_mode",
        "default": "half_pixel",
        "allowed": ["half_pixel", "pytorch_half_pixel", "tf_half_pixel_for_nn", "asymmetric",
                    "align_corners"],
        "reason": "Resize coordinate_transformation_mode '{value}' is not supported",
        "hint": "use half_pixel or align_corners (crop first with Slice for tf_crop_and_resize)"},
    "resize-aspect-policy": _only_default("Resize", "keep_aspect_ratio_policy", "stretch",
        "Resize keep_aspect_ratio_policy '{value}' is not supported (stretch only)",
        "compute the target size outside and pass explicit sizes with the stretch policy"),
    "topk-k-limit": {
        "op": "TopK", "check": "const_input_gt", "input": 1, "limit": 3839,
        "reason": "TopK K={value} exceeds TensorRT's limit (K must be < 3840)",
        "hint": "split into chunks of at most {limit} and merge, or reduce K", "stage": "build"},
    "topk-k-runtime": {
        "op": "TopK", "check": "input_not_const", "input": 1, "severity": "warning",
        "reason": "TopK K is computed at run time; TensorRT rejects K above its limit at build "
                  "time",
        "hint": "make K a constant: `workbench fix {model} --recipe fold_constants`"},
    "topk-sorted": _only_default("TopK", "sorted", 1,
        "TopK sorted={value} is not supported (sorted must be 1)",
        "export with sorted=True"),
    "scatternd-reduction": _only_default("ScatterND", "reduction", "none",
        "ScatterND reduction '{value}' is not supported",
        "replace with ScatterND(reduction=none) on gathered+reduced updates, or a plugin"),
    "maxpool-indices": {
        "op": "MaxPool", "check": "output_count_gt", "count": 1,
        "reason": "MaxPool's Indices output is not supported",
        "hint": "drop the Indices output (export without return_indices) or use a plugin"},
    "pool-dilations": {
        "op": ["MaxPool", "AveragePool", "LpPool"], "check": "attr_not_all", "attr": "dilations",
        "value": 1, "reason": "{op} dilations {value} are not supported (must be all ones)",
        "hint": "export the pooling without dilation"},
    "pool-rank": {
        "op": ["AveragePool", "MaxPool"], "check": "input_rank_not_in", "input": 0,
        "ranks": [4, 5], "reason": "{op} supports 2D or 3D pooling only (input rank {value})",
        "hint": "reshape to 2D pooling (Unsqueeze a spatial dim, pool, Squeeze)"},
    "gridsample-rank": {
        "op": "GridSample", "check": "input_rank_not_in", "input": 0, "ranks": [4],
        "reason": "GridSample input must be 4D (rank {value})",
        "hint": "fold the extra dimension into the batch with Reshape"},
    "cast-dtype": {
        "op": "Cast", "check": "dtype_attr_not_in", "attr": "to", "allowed": MATRIX_DTYPES,
        "reason": "Cast to {value} is not supported", "hint": "cast to a supported type "
        "({allowed}); do exotic conversions outside the engine"},
    "attention-outputs": {
        "op": "Attention", "check": "output_count_gt", "count": 1,
        "reason": "Attention's present_key/present_value/qk_matmul_output outputs are not "
                  "supported", "hint": "export without KV-cache outputs"},
    "attention-kv-inputs": {
        "op": "Attention", "check": "inputs_present", "inputs": [4, 5, 6],
        "reason": "Attention past_key/past_value/nonpad_kv_seqlen inputs are not supported",
        "hint": "export without the KV cache inputs"},
    "attention-softcap": _only_default("Attention", "softcap", 0.0,
        "Attention softcap={value} is not supported",
        "export without softcap"),
    "attention-attrs": {
        "op": "Attention", "check": "attr_present",
        "attrs": ["qk_matmul_output_mode", "softmax_precision"],
        "reason": "Attention {value} is not supported", "hint": "export without it"},
    "batchnorm-training": {
        "op": "BatchNormalization", "check": "output_count_gt", "count": 1,
        "reason": "BatchNormalization in training mode (running mean/var outputs) is not "
                  "supported", "hint": "export in eval mode (model.eval())"},
    "lppool-p": {
        "op": "LpPool", "check": "attr_not_in", "attr": "p", "default": 2, "allowed": [1, 2],
        "reason": "LpPool p={value} is not supported (L1 and L2 only)",
        "hint": "use p=1 or p=2, or compose Pow + AveragePool + Pow"},
    "stft-frame-step": {
        "op": "STFT", "check": "input_not_const", "input": 1,
        "reason": "STFT frame_step must be an initializer",
        "hint": "make it a constant: `workbench fix {model} --recipe fold_constants`"},
    "tensorscatter-mode": _only_default("TensorScatter", "mode", "linear",
        "TensorScatter mode '{value}' is not supported",
        "use mode='linear'"),
    "tensorscatter-rank": {
        "op": "TensorScatter", "check": "input_rank_not_in", "input": 0, "ranks": [4],
        "reason": "TensorScatter past_cache must be 4D (rank {value})",
        "hint": "reshape the cache to 4D (batch, heads, seq, dim)"},
    "resize-runtime-scales": {
        "op": "Resize", "check": "input_not_const", "input": 2, "unless_dtype": ["INT32",
                                                                               "INT64"],
        "reason": "Resize scales '{tensor}' are computed at run time; TensorRT needs them "
                  "constant (or integer sizes)",
        "hint": "make the scales a constant (`workbench fix {model} --recipe fold_constants`) "
                "or pass output sizes instead"},
    "squeeze-axes-runtime": {
        "op": ["Squeeze", "Unsqueeze"], "check": "input_not_const", "input": 1,
        "reason": "{op} axes must resolve to a constant",
        "hint": "make axes an initializer (computed axes fold with `workbench fix {model} "
                "--recipe fold_constants`)"},
    "scatterelements-reduction": _only_default("ScatterElements", "reduction", "none",
        "ScatterElements reduction '{value}' is not supported",
        "gather, reduce and scatter with reduction=none, or use a plugin"),
    "mod-fmod0-types": {
        "op": "Mod", "check": "input_dtype_not_in", "input": 0, "allowed": ["INT32", "INT64"],
        "when_attr": {"fmod": [0, 0]},
        "reason": "Mod with fmod=0 on {value} is not supported (integer Mod needs INT32/INT64)",
        "hint": "use fmod=1 for floating point, or cast to INT32 first"},
    "clip-types": {
        "op": "Clip", "check": "input_dtype_not_in", "input": 0,
        "allowed": ["FLOAT", "FLOAT16", "BFLOAT16", "INT32", "INT64", "DOUBLE"],
        "reason": "Clip on {value} is not supported (floating point, INT32 or INT64 only)",
        "hint": "cast to FLOAT or INT32 around the Clip"},
    "range-types": {
        "op": "Range", "check": "input_dtype_not_in", "input": 0,
        "allowed": ["INT32", "INT64", "FLOAT", "DOUBLE"],
        "reason": "Range on {value} is not supported (INT32, INT64 or FLOAT only)",
        "hint": "compute the Range in FLOAT and Cast the result"},
    "uint8-compute": {
        "op": "*", "except": ["Cast", "Identity", "Equal"], "check": "input_dtype_not_in",
        "input": 0,
        "blocked": ["UINT8"],
        "reason": "{op} consumes UINT8 tensor '{tensor}'; TensorRT takes UINT8 only at the "
                  "network boundary", "hint": "insert a Cast to FLOAT (or INT32) right after "
                  "the input (`workbench fix {model} --recipe insert_cast:tensor={tensor},"
                  "to=float32`)"},
    "cast-uint8-intermediate": {
        "op": "Cast", "check": "uint8_intermediate",
        "reason": "Cast produces UINT8 tensor '{tensor}' inside the network; TensorRT allows "
                  "UINT8 only as a network input or output",
        "hint": "keep intermediate values in INT32/FLOAT; cast to UINT8 only at the output"},
    "layernorm-extra-outputs": {
        "op": "LayerNormalization", "check": "output_count_gt", "count": 1,
        "reason": "LayerNormalization's Mean/InvStdDev outputs are not supported",
        "hint": "export for inference (only output Y is used)"},
    "qdq-zero-point": {
        "op": ["QuantizeLinear", "DequantizeLinear"], "check": "nonzero_const_input", "input": 2,
        "reason": "{op} has a non-zero zero point ({value}); TensorRT supports symmetric "
                  "quantization only",
        "hint": "`workbench fix {model} --recipe symmetric_qdq:node={node}` (applies only "
                "where exact), or re-quantize symmetrically with `workbench precision` "
                "(zero point 0)"},
    "qdq-zero-point-runtime": {
        "op": ["QuantizeLinear", "DequantizeLinear"], "check": "input_not_const", "input": 2,
        "reason": "{op} zero point is computed at run time; it must be a constant 0",
        "hint": "use constant scales and a zero point of 0", "stage": "build",
        "unless_dtype": ["FLOAT8E4M3FN"]},  # measured: an FP8 zero-point input builds
    "cumsum-axis-runtime": {
        "op": "CumSum", "check": "input_not_const", "input": 1,
        "reason": "CumSum axis is a run-time value; it must be a build-time constant",
        "hint": "make the axis a constant: `workbench fix {model} --recipe fold_constants`",
        "stage": "build"},
    "dropout-training": {
        "op": "Dropout", "check": "input_not_const", "input": 2,
        "reason": "Dropout training_mode must be an initializer that is False",
        "hint": "export in eval mode (model.eval()), or `workbench fix {model} --recipe "
                "remove_node:node={node}` (exact for inference)"},
    "lstm-input-forget": _only_default("LSTM", "input_forget", 0,
        "LSTM input_forget={value} (coupled gates) is not supported",
        "export without coupled input/forget gates"),
    "lstm-layout": _only_default("LSTM", "layout", 0,
        "LSTM layout={value} (batch-first) is not supported",
        "export with batch_first=False or add Transposes around the LSTM"),
    "constant-strings": {
        "op": "Constant", "check": "attr_present",
        "attrs": ["sparse_value", "value_string", "value_strings"],
        "reason": "Constant with {value} is not supported",
        "hint": "remove string/sparse constants from the engine graph"},
    "onehot-depth-runtime": {
        "op": "OneHot", "check": "input_not_const", "input": 1,
        "reason": "OneHot depth must be a build-time constant",
        "hint": "make depth a constant: `workbench fix {model} --recipe fold_constants`",
        "stage": "build"},
    "reduce-axes-runtime": {
        "op": ["ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax",
               "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare"],
        "check": "input_not_const", "input": 1,
        "reason": "{op} axes must be an initializer",
        "hint": "make axes a constant: `workbench fix {model} --recipe fold_constants`"},
}

# Graph-level checks (not tied to one op): predicate names in workbench.support.checker.GRAPH_CHECKS.
GRAPH_RULES: Dict[str, Dict[str, Any]] = {
    "duplicate-tensor-name": {
        "check": "duplicate_tensor_names",
        "reason": "ONNX graph has duplicate tensor name: {value}",
        "hint": "`workbench fix {model} --recipe rename_duplicates` (drops repeated "
                "declarations, renames re-produced tensors) or re-export"},
    "loop-unbounded-counter": {
        "check": "loop_unbounded_counter",
        "reason": "Loop '{loop}' has no trip limit (max trip count {value}) and its body reads "
                  "the iteration counter '{tensor}'; TensorRT does not register the counter "
                  "then ('Node input was not registered')",
        "hint": "give the Loop a finite max trip count (an initializer), or stop reading the "
                "iteration counter in the body"},
    "old-opset": {
        "check": "opset_below", "min": 7,
        # the ops whose pre-7 `broadcast` semantics the parser refuses (others import fine)
        "ops": ["Add", "Sub", "Mul", "Div", "Pow", "Gemm", "PRelu", "And", "Or", "Xor",
                "Equal", "Greater", "Less", "Max", "Min", "Sum", "Mean"],
        "reason": "opset {value} is older than 7: TensorRT's parser refuses pre-opset-7 "
                  "broadcasting ({ops}) for the model as a whole",
        "hint": "re-export the model with opset >= 13"},
    "unsupported-io-dtype": {
        "check": "io_dtypes", "allowed": MATRIX_DTYPES,
        "reason": "{where} '{tensor}' has type {value}, which TensorRT does not support",
        "hint": "convert it to a supported type ({allowed}) outside the engine"},
}

_BASE_RULE_IDS = list(RULES)

# Per-backend tables. `unsupported_ops`: op -> hint; `plugin_ops`: ops the parser routes to a
# plugin that is not registered; `rules`: rule id -> overrides (None disables the rule).
BACKENDS: Dict[str, Dict[str, Any]] = {
    # `label`: what the rules are, compiled from what (headings, notes, `workbench check
    # --list-rules`); `short`: the backend they speak for, inside a finding ("X is not supported
    # by {short}"), naming the matrix release where the matrix is all they know
    "tensorrt": {
        "label": f"TensorRT rules from the published onnx-tensorrt operator matrix of TensorRT "
                 f"{MATRIX_VERSION}",
        "short": f"TensorRT (per its {MATRIX_VERSION} operator matrix)",
        "source": MATRIX_SOURCE,
        "opset_range": [9, 24],
        "unsupported_ops": dict(MATRIX_UNSUPPORTED),
        "plugin_ops": {},
        "rules": {rid: {} for rid in _BASE_RULE_IDS},
        "graph_rules": {rid: {} for rid in GRAPH_RULES},
        "unknown_op_severity": "warning",
    },
    "tensorrt-rtx": {
        "label": f"TensorRT-RTX 1.7 rules: the TensorRT {MATRIX_VERSION} operator matrix with "
                 "the differences measured with TensorRT-RTX 1.7's parser and CPU ahead-of-time "
                 "builder",
        "short": "TensorRT-RTX 1.7",
        # TensorRT's plugin library (EfficientNMS_TRT, ...) is not part of TensorRT-RTX
        "ships_plugins": False,
        "source": "measured on single-op models with the real TensorRT-RTX 1.7 parser; "
                  "the tensorrt-rtx backend asks it about your model",
        "opset_range": [9, 24],
        "unsupported_ops": dict(MATRIX_UNSUPPORTED, **{
            # newer than the matrix; the RTX parser has no importer for them
            "BitCast": "replace with a Cast where the value, not the bits, matters",
            "CumProd": "replace with Exp(CumSum(Log(x))) for positive inputs, or a plugin",
            "SwiGLU": "decompose into Split + Sigmoid + Mul + Mul",
        }),
        # the matrix says "Y" but TensorRT-RTX routes these to plugins it does not ship
        "plugin_ops": {
            "NonZero": "TensorRT-RTX routes NonZero to a plugin it does not ship: use a "
                       "static-shape formulation (e.g. a mask multiply), or load a NonZero "
                       "plugin with --plugin LIB",
            "DeformConv": PLUGIN_HINT,
            "RoiAlign": GPU_PLUGIN_HINT,
            # newer than the matrix: the RTX parser looks for plugins of these names
            "LinearAttention": PLUGIN_HINT,
            "CausalConvWithState": PLUGIN_HINT,
        },
        # plugin ops whose plugin TensorRT-RTX has but creates only with a usable GPU (measured
        # on a CPU machine: "Cuda Error in ROIAlignV3: 35", then "ROIAlign plugin was not found")
        "gpu_plugins": {"RoiAlign": "ROIAlign"},
        "rules": dict({rid: {} for rid in _BASE_RULE_IDS}, **{
            "resize-mode": {"allowed": ["nearest", "linear", "cubic"],
                            "reason": "Resize mode '{value}' is not supported "
                                      "(nearest, linear, cubic only)"},
            # measured: K=3840 builds, K=3841 fails at build time
            "topk-k-limit": {"limit": 3840, "reason": "TopK K={value} exceeds TensorRT-RTX's "
                             "build-time limit (K <= 3840)"},
            "topk-sorted": None,        # sorted=0 parses and builds
            # nonpad_kv_seqlen is accepted; past_key/past_value are not
            "attention-kv-inputs": {"inputs": [4, 5],
                                    "reason": "Attention past_key/past_value inputs are not "
                                              "supported"},
            "lstm-layout": None,        # layout=1 parses and builds
            # measured: 1D MaxPool/AveragePool build; 1D LpPool is rejected (addPoolingNd)
            "pool-rank": {"op": ["LpPool"], "reason": "{op} supports 2D or 3D pooling only "
                          "(input rank {value})"},
            "gridsample-rank": None,    # 5D input builds
        }),
        "graph_rules": {rid: {} for rid in GRAPH_RULES},
        "unknown_op_severity": "error",
    },
}
BACKEND_ALIASES = {"static": "tensorrt", "auto": "tensorrt"}

# Where the measured TensorRT-RTX behaviour departs from the published matrix (shown to users).
DISAGREEMENTS: List[Dict[str, str]] = [
    {"op": "Resize", "matrix": "modes nearest, linear only", "tensorrt-rtx": "cubic accepted"},
    {"op": "NonZero", "matrix": "supported",
     "tensorrt-rtx": "rejected at parse time: NonZero plugin creator missing"},
    {"op": "DeformConv", "matrix": "supported", "tensorrt-rtx": "rejected: plugin not found"},
    {"op": "RoiAlign", "matrix": "supported",
     "tensorrt-rtx": "rejected without a usable GPU: its ROIAlign plugin is not created (CUDA "
                     "error) on a CPU machine; on a GPU it may parse"},
    {"op": "TopK", "matrix": "K must be < 3840",
     "tensorrt-rtx": "K=3840 builds; K > 3840 parses but fails at build time"},
    {"op": "TopK", "matrix": "sorted must be 1", "tensorrt-rtx": "sorted=0 parses and builds"},
    {"op": "LSTM", "matrix": "layout must be 0", "tensorrt-rtx": "layout=1 parses and builds"},
    {"op": "CumSum, OneHot", "matrix": "axis / depth must be a build-time constant",
     "tensorrt-rtx": "agrees, but only the build fails: a runtime axis/depth parses"},
    {"op": "MaxPool, AveragePool", "matrix": "2D or 3D pooling only",
     "tensorrt-rtx": "1D pooling parses and builds"},
    {"op": "LpPool", "matrix": "no rank restriction listed",
     "tensorrt-rtx": "1D LpPool rejected at parse time (addPoolingNd: 2D or 3D only)"},
    {"op": "GridSample", "matrix": "input must be 4D", "tensorrt-rtx": "5D input builds"},
    {"op": "BitCast, CumProd, SwiGLU", "matrix": "not listed (newer than opset 24)",
     "tensorrt-rtx": "rejected (no importer)"},
    {"op": "Swish", "matrix": "not listed", "tensorrt-rtx": "opset-24 Swish parses and builds"},
    {"op": "LinearAttention, CausalConvWithState", "matrix": "not listed (opset 27)",
     "tensorrt-rtx": "routed to plugins it does not ship"},
    {"op": "ScatterElements", "matrix": "no restriction listed",
     "tensorrt-rtx": "reduction add/mul/min/max rejected ('Unsupported reduction type', no node "
                     "named)"},
    {"op": "Attention", "matrix": "nonpad_kv_seqlen input unsupported",
     "tensorrt-rtx": "nonpad_kv_seqlen accepted"},
    {"op": "Mod, Clip, Range", "matrix": "types listed per op",
     "tensorrt-rtx": "Mod fmod=0 needs INT32/INT64; Clip rejects INT8; Range rejects FLOAT16/"
                     "BFLOAT16"},
    {"op": "Resize", "matrix": "scales may be a tensor input",
     "tensorrt-rtx": "run-time FLOAT scales rejected (a shape tensor must be INT32/INT64)"},
]


def _overridden(rules: Dict[str, Dict[str, Any]],
                overrides: Dict[str, Optional[Dict[str, Any]]]) -> List[Dict[str, Any]]:
    """The rules a backend names, each with its overrides and its id (None: left out)."""
    return [{**copy.deepcopy(rules[rid]), **override, "id": rid}
            for rid, override in overrides.items() if override is not None]


def backend_table(name: str) -> Dict[str, Any]:
    """The resolved rule table for a backend: rules merged with its overrides."""
    key = BACKEND_ALIASES.get(name, name)
    if key not in BACKENDS:
        from workbench.core.errors import WorkbenchError

        raise WorkbenchError(f"no static rules for backend '{name}'", field="rules",
                             hint="use one of: " + ", ".join(sorted(BACKENDS)))
    table = copy.deepcopy(BACKENDS[key])
    table["name"] = key
    table["rules"] = _overridden(RULES, table["rules"])
    table["graph_rules"] = _overridden(GRAPH_RULES, table["graph_rules"])
    return table
