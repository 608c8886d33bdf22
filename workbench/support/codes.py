"""The Finding codes a support report uses for what TensorRT rejects, as named constants.

Static rule ids (`workbench.support.rules`) are codes too; the ones below are what the checker
itself assigns. Parser failures get theirs from the parser's structured record (error code, op,
node) and the model (is the op a standard ONNX op, did a static rule predict the failure),
never from the message wording, so recipes can declare which codes they fix
(`workbench.surgery.recipes.base.Recipe.fixes`) and `propose` can route on them.
"""
from __future__ import annotations

from typing import Tuple

# an op TensorRT has no importer for
UNSUPPORTED_OP = "unsupported-op"
# the parser routes the op to a plugin, and none of that name is registered
PLUGIN_MISSING = "plugin-missing"
# the parser's importer has the plugin, but it cannot be created here: no usable GPU
PLUGIN_NEEDS_GPU = "plugin-needs-gpu"
# a node of a non-standard domain (static rules)
CUSTOM_OP = "custom-op"
# an op name ONNX does not know (static rules)
UNKNOWN_OP = "unknown-op"
# two graph inputs/outputs/value_infos share a name (static graph rule id as well)
DUPLICATE_TENSOR_NAME = "duplicate-tensor-name"
# Q/DQ with a non-zero zero point (static rule id as well)
QDQ_ZERO_POINT = "qdq-zero-point"
QDQ_ZERO_POINT_RUNTIME = "qdq-zero-point-runtime"
UNSUPPORTED_DTYPE = "unsupported-dtype"
# two nodes share a name: TensorRT takes it, onnxruntime refuses it, name lookups are ambiguous
DUPLICATE_NODE_NAME = "duplicate-node-name"
# an input axis TensorRT reads as a fixed size 0 (dim_param "" or dim_value 0)
ZERO_SIZE_AXIS = "zero-size-input-axis"
# the parser's own error codes, when nothing more specific is known
UNSUPPORTED_ATTRIBUTE = "unsupported-attribute"
UNSUPPORTED_NODE = "unsupported-node"
INVALID_NODE = "invalid-node"
INVALID_GRAPH = "invalid-graph"
PARSER_ERROR = "parser-error"
BUILD_FAILED = "build-failed"

# TensorRT ErrorCode names -> the code used when no static rule explains the failure better
PARSER_ERROR_CODES = {"UNSUPPORTED_NODE_ATTR": UNSUPPORTED_ATTRIBUTE,
                      "UNSUPPORTED_NODE": UNSUPPORTED_NODE, "INVALID_NODE": INVALID_NODE,
                      "INVALID_GRAPH": INVALID_GRAPH}
# codes that only say "the parser failed here": a static rule that predicted the same failure
# on the same node names the cause better
GENERIC_PARSER_CODES: Tuple[str, ...] = (UNSUPPORTED_ATTRIBUTE, UNSUPPORTED_NODE, INVALID_NODE,
                                         INVALID_GRAPH, PARSER_ERROR)
# "this op is not taken at all" (whatever its attributes)
OP_REJECTED: Tuple[str, ...] = (UNSUPPORTED_OP, PLUGIN_MISSING, PLUGIN_NEEDS_GPU, CUSTOM_OP,
                                UNKNOWN_OP)
# the static rules' codes for a scatter whose reduction TensorRT refuses (decompose takes
# reduction='add' along axis 0)
SCATTER_REDUCTION: Tuple[str, ...] = ("scatternd-reduction", "scatterelements-reduction")
# a recipe declaring ANY_NODE can fix any failure that names a node (e.g. constant folding)
ANY_NODE = "*"

__all__ = [n for n in dir() if n.isupper()]
