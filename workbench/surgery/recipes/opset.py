"""Opset upgrade: old-opset models (public zoos are full of opset 6) to an opset the parser
and onnxruntime take, with onnx's version converter.

TensorRT's parser refuses pre-opset-7 models as a whole ("Pre-opset 7 broadcasting is
unsupported", no node named) and onnxruntime guarantees opset >= 7 only. The recipe tries
targets from MIN_TARGET (13: Split/Squeeze/Unsqueeze/Reduce* in their modern form, what
current exporters write) upward and keeps the smallest one the converter manages and onnx's
checker accepts; a model already at >= MIN_TARGET is left alone unless a target is given.
"""
from __future__ import annotations

from typing import Any, List, Optional, Tuple

from workbench.core.errors import WorkbenchError
from workbench.core.model import ModelLike, as_model
from workbench.surgery.recipes.base import (Param, Precondition, Proposal, Recipe, fix_step,
                                            opset_of, register)

MIN_OPSET = 7      # below this TensorRT's parser and onnxruntime refuse the model
MIN_TARGET = 13    # the smallest target tried
OLD_OPSET = "old-opset"  # the support code (graph rule) this recipe fixes


def _targets(have: int, target: Optional[int]) -> List[int]:
    import onnx

    top = onnx.defs.onnx_opset_version()
    if target:
        return [int(target)]
    return list(range(max(MIN_TARGET, have + 1), top + 1))


def _modernize(proto: Any) -> Any:
    """IR 3 lists initializers as graph inputs; at IR >= 4 they are weights only (what the
    parser and the exporters of today expect)."""
    inits = {t.name for t in proto.graph.initializer}
    if any(vi.name in inits for vi in proto.graph.input):
        keep = [vi for vi in proto.graph.input if vi.name not in inits]
        del proto.graph.input[:]
        proto.graph.input.extend(keep)
    return proto


def _channel_slopes(proto: Any) -> Any:
    """Opset < 7 PRelu applies a [C] slope along axis 1; from opset 7 it broadcasts numpy-style
    (trailing axes), and onnx's version converter leaves the slope as it is. Reshape such slope
    initializers to [C, 1, ...] so the upgraded model computes the same."""
    import onnx
    from onnx import numpy_helper

    g = proto.graph
    try:
        inf = onnx.shape_inference.infer_shapes(proto)
    except Exception:
        return proto
    ranks = {vi.name: len(vi.type.tensor_type.shape.dim) for vi in
             list(inf.graph.value_info) + list(g.input) + list(g.output)
             if vi.type.tensor_type.HasField("shape")}
    inits = {t.name: t for t in g.initializer}
    taken = {t.name for t in g.initializer} | {x for n in g.node for x in n.output}
    ir3 = any(vi.name in inits for vi in g.input)  # the converter wants them listed then
    for n in g.node:
        if n.op_type != "PRelu" or len(n.input) < 2 or n.input[1] not in inits:
            continue
        slope = numpy_helper.to_array(inits[n.input[1]])
        rank = ranks.get(n.input[0], 0)
        if slope.ndim != 1 or slope.size <= 1 or rank <= 2:
            continue
        name = n.input[1] + "_per_channel"
        while name in taken:
            name += "_"
        taken.add(name)
        shaped = slope.reshape((slope.size,) + (1,) * (rank - 2))
        g.initializer.append(numpy_helper.from_array(shaped, name))
        if ir3:
            g.input.append(onnx.helper.make_tensor_value_info(
                name, inits[n.input[1]].data_type, list(shaped.shape)))
        n.input[1] = name
    return proto


def _shaped_outputs(proto: Any) -> None:
    """Graph outputs declared with a type but no shape (old hand-written models) get the
    shape inference finds: onnx's checker wants one at the IR versions the upgrade writes."""
    import onnx

    bare = [o for o in proto.graph.output
            if o.type.HasField("tensor_type") and not o.type.tensor_type.HasField("shape")]
    if not bare:
        return
    try:
        inf = onnx.shape_inference.infer_shapes(proto)
    except Exception:
        return
    known = {vi.name: vi for vi in list(inf.graph.value_info) + list(inf.graph.output)
             if vi.type.tensor_type.HasField("shape")}
    for o in bare:
        if o.name in known:
            o.type.tensor_type.shape.CopyFrom(known[o.name].type.tensor_type.shape)


def upgrade_opset(proto: Any, target: Optional[int] = None) -> Tuple[Any, int]:
    """(converted copy, opset reached): the smallest target >= MIN_TARGET (or `target`) the
    version converter manages and onnx's checker accepts. WorkbenchError naming the op the
    converter stopped at when none works."""
    import copy

    import onnx

    have = opset_of(proto)
    errors: List[str] = []
    for t in _targets(have, target):
        try:  # (the converter wants IR 3's initializer inputs kept: "Input 1 is undefined")
            src = copy.deepcopy(proto)
            if have < MIN_OPSET:
                src = _channel_slopes(src)
            out = _modernize(onnx.version_converter.convert_version(src, t))
            out.ir_version = max(out.ir_version, 7 if t >= 13 else 4)
            _shaped_outputs(out)
            onnx.checker.check_model(out)
            return out, t
        except Exception as e:
            errors.append(f"{t}: {' '.join(str(e).split())[:160]}")
    raise WorkbenchError(f"onnx's version converter cannot raise opset {have} to "
                         f"{target or f'{MIN_TARGET} or later'} ({errors[0] if errors else ''})",
                         field="target", hint="re-export the model with opset >= 13, or give "
                         "another target: --recipe opset-upgrade:target=N")


@register
class OpsetUpgrade(Recipe):
    name = "opset-upgrade"
    summary = ("raise the model's opset with onnx's version converter (the smallest target >= "
               f"{MIN_TARGET} that converts and checks); TensorRT's parser and onnxruntime "
               f"refuse opset < {MIN_OPSET}")
    params = (Param("target", "int", None, f"opset to reach (default: smallest >= {MIN_TARGET} "
                    "that works)"),)
    preserves_semantics = True
    mutates_input = False
    fixes = (OLD_OPSET,)
    priority = 5  # before any per-node recipe: the parser saw nothing else yet

    def propose(self, finding: Any, ctx: Any) -> List[Proposal]:
        have = opset_of(ctx.proto)
        if not have or have >= MIN_OPSET:
            return []
        return [Proposal("", "", self.name, {},
                         f"opset {have} is below {MIN_OPSET}: the parser refuses the whole "
                         f"model; onnx's version converter raises it (to >= {MIN_TARGET})",
                         code=finding.code)]

    def next_step(self, finding: Any, ctx: Any) -> Any:
        if not self.propose(finding, ctx):
            return None
        return fix_step("opset-upgrade", "raises the opset with onnx's version converter")

    def precondition(self, model: ModelLike, target: Optional[int] = None) -> Precondition:
        proto = as_model(model).with_weights()
        have = opset_of(proto)
        if not have:
            return Precondition(False, "the model imports no default-domain opset", [])
        if target is not None and int(target) <= have:
            return Precondition(False, f"the model is at opset {have} already (target {target})",
                                [])
        if target is None and have >= MIN_TARGET:
            return Precondition(False, f"opset {have} is recent enough (>= {MIN_TARGET}); give "
                                "target=N to raise it further", [])
        return Precondition(True, f"applies to the whole model because its opset is {have}"
                            + (f" (below {MIN_OPSET}: refused by the parser)"
                               if have < MIN_OPSET else ""), [])

    def _apply(self, model: Any, target: Optional[int] = None) -> Any:
        return upgrade_opset(model, target)[0]
