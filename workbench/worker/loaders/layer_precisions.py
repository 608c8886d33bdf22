"""Layer precisions on weakly typed networks (TensorRT <= 10; Polygraphy's
SetLayerPrecisions): which layers a precision can be put on, the plan, and the builder flag
that makes TensorRT obey or prefer it."""
from __future__ import annotations

import re
from typing import Any, Dict, List, Tuple

from workbench.worker.registry import OpError

_ONNX_LAYER = re.compile(r"\[ONNX Layer: ([^\]]+)\]")
_SUFFIX = re.compile(r"^(.*)_\d+$")
# what `precision_constraints` asks of the builder: the flags to try, strongest first
CONSTRAINT_FLAGS = {"obey": ("OBEY_PRECISION_CONSTRAINTS", "STRICT_TYPES"),
                    "prefer": ("PREFER_PRECISION_CONSTRAINTS",)}


def _float_types(trt: Any) -> List[Any]:
    return [getattr(trt, n) for n in ("float32", "float16", "bfloat16") if hasattr(trt, n)]


def _layer_nodes(layer: Any, wanted: Any) -> List[str]:
    """The wanted ONNX node names `layer` belongs to: its name, its '[ONNX Layer: NAME]'
    metadata, or (no metadata) NAME_<k>, the parser's name for a node's further layers."""
    meta = str(getattr(layer, "metadata", "") or "")
    hits = [n for n in _ONNX_LAYER.findall(meta) if n in wanted]
    if layer.name in wanted:
        hits.insert(0, layer.name)
    elif not hits and not meta:
        m = _SUFFIX.match(layer.name)
        if m and m.group(1) in wanted:
            hits.append(m.group(1))
    return list(dict.fromkeys(hits))


def _computes_in_float(trt: Any, layer: Any) -> bool:
    """Polygraphy's rule for layers a precision can be put on: no constant, every output a
    float execution tensor (shape computations and integer outputs keep their type)."""
    const = getattr(getattr(trt, "LayerType", None), "CONSTANT", None)
    if const is not None and layer.type == const:
        return False
    floats = _float_types(trt)
    for j in range(layer.num_outputs):
        t = layer.get_output(j)
        if not getattr(t, "is_execution_tensor", True) or t.dtype not in floats:
            return False
    return True


def plan_layer_precisions(trt: Any, network: Any, precisions: Dict[str, str]
                          ) -> Tuple[List[Tuple[int, str]], List[str]]:
    """([(layer index, DataType attribute name)], names no layer matched) for `precisions`:
    ONNX node name -> a `trt` DataType attribute ("float32"...), "*" for every other layer
    that computes in float. Read-only: works on any parsed network."""
    for name, dt in precisions.items():
        if not isinstance(getattr(trt, str(dt), None), type(getattr(trt, "float32", None))):
            raise OpError("layer_precisions['%s']: '%s' is not a DataType of this TensorRT"
                          % (name, dt), code="bad-args", details={"field": "layer_precisions"})
    default = precisions.get("*")
    wanted = {n: dt for n, dt in precisions.items() if n != "*"}
    found: set = set()
    plan: List[Tuple[int, str]] = []
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        nodes = _layer_nodes(layer, wanted)
        found.update(nodes)
        dt = wanted[nodes[0]] if nodes else default
        if dt is not None and _computes_in_float(trt, layer):
            plan.append((i, str(dt)))
    return plan, sorted(set(wanted) - found)


def set_layer_precisions(trt: Any, config: Any, network: Any, precisions: Dict[str, str],
                         constraints: str = "obey") -> Tuple[List[str], List[str]]:
    """Put layers in the DataTypes `precisions` names (see plan_layer_precisions): the layer
    precision and the type of each float output that is not a network output, then the
    builder flag that makes TensorRT obey (or prefer) them. Returns (unmatched names, notes).
    The weakly typed networks of TensorRT <= 10 have layer precision; strongly typed ones
    (TensorRT-RTX, 11) do not: an OpError says to keep nodes in FP32 with Casts instead."""
    if constraints not in CONSTRAINT_FLAGS:
        raise OpError("unknown precision constraints '%s'" % constraints, code="bad-args",
                      details={"field": "precision_constraints"},
                      hint="one of: %s" % ", ".join(CONSTRAINT_FLAGS))
    plan, unmatched = plan_layer_precisions(trt, network, precisions)
    if plan and not hasattr(network.get_layer(plan[0][0]), "precision"):
        raise OpError("this TensorRT has no layer precision (its networks are strongly "
                      "typed)", code="no-flag",
                      hint="keep nodes in FP32 with Casts in the ONNX: the strongly typed route")
    floats = _float_types(trt)
    for i, dt_name in plan:
        layer, dt = network.get_layer(i), getattr(trt, dt_name)
        layer.precision = dt
        for j in range(layer.num_outputs):
            t = layer.get_output(j)
            if t.dtype in floats and not getattr(t, "is_network_output", False):
                layer.set_output_type(j, dt)
    notes: List[str] = []
    bf = getattr(trt, "BuilderFlag", None)
    names = CONSTRAINT_FLAGS[constraints] + tuple(
        n for k, v in CONSTRAINT_FLAGS.items() if k != constraints for n in v)
    flag = next((n for n in names if getattr(bf, n, None) is not None), None)
    if flag is None:
        raise OpError("this TensorRT has no precision-constraint builder flag", code="no-flag",
                      hint="use the strongly typed route (Casts in the ONNX)")
    if flag not in CONSTRAINT_FLAGS[constraints]:
        notes.append("no BuilderFlag for '%s' precision constraints: %s used" % (constraints,
                                                                                 flag))
    config.set_flag(getattr(bf, flag))
    counts: Dict[str, int] = {}
    for _i, dt_name in plan:
        counts[dt_name] = counts.get(dt_name, 0) + 1
    notes.append("layer precision (%s): %s of %d layers" % (
        flag, ", ".join("%d %s" % (c, n) for n, c in sorted(counts.items())),
        network.num_layers))
    return unmatched, notes
