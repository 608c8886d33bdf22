"""NMS: recognise non-maximum suppression (the ONNX NonMaxSuppression op, and torchvision's
batched_nms class-offset trick around it) and offer TensorRT's EfficientNMS_TRT plugin.

It is an option, never an exact rewrite: the plugin returns padded, score-sorted boxes, scores
and classes (not selected indices), caps detections per image (not per class), and lives in
TensorRT's standard plugin library, which TensorRT-RTX does not ship. Every offer states these
differences (`DIFFERENCES`); the exact default stays the split (`workbench fix --split`).

    offers(proto)                              # Proposals for every NMS found (auto=False)
    workbench fix M -o OUT --recipe efficient_nms:node=/post/nms,max_output_boxes=100
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Set

from workbench.support import codes
from workbench.surgery.recipes.base import (Param, Precondition, Proposal, Recipe, all_names,
                                            constant_value, infer_types, node_ids, register,
                                            tensor_types, unique_name)
from workbench.surgery.recipes.split import tail_of
from workbench.core.model import ModelLike, as_model

PLUGIN = "EfficientNMS_TRT"
DOMAIN = "trt.plugins"
NMS_CODE = "nms-pattern"  # the code of an offer made for an NMS that is not a failure
PASS_THROUGH = ("Unsqueeze", "Reshape", "Identity", "Squeeze", "Cast", "Flatten")


def differences(p: "NmsPattern", max_boxes: int) -> str:
    """The semantic differences between the ONNX NMS found and EfficientNMS_TRT, in words."""
    per_class = p.max_per_class if p.max_per_class is not None else "its"
    coding = ("center_point_box=1 ([xc, yc, w, h]) -> box_coding=1; the plugin returns "
              "corners" if p.center_point_box else
              "center_point_box=0 ([y1, x1, y2, x2] corners) -> box_coding=0 (IoU does not "
              "depend on which axis comes first; boxes come back in the input's order)")
    text = (f"{PLUGIN} is not an exact rewrite: (1) fixed max detections: max_output_boxes="
            f"{max_boxes} per image over all classes, where ONNX keeps up to {per_class} per "
            "class; (2) padded outputs: num_detections [B,1] and detection_boxes [B,K,4], "
            "detection_scores [B,K], detection_classes [B,K] zero-padded past num_detections, "
            "instead of selected_indices [n,3] (batch, class, box), so the nodes reading the "
            "indices go; (3) score threshold: onnxruntime keeps score > threshold, the plugin's "
            "boundary can differ at ties, and it can apply a sigmoid first (score_activation="
            "0 here); (4) class handling: per-class NMS (class_agnostic=0, background_class=-1) "
            "as in ONNX, but results are sorted by score across classes and cut to K; (5) box "
            f"encoding: {coding}; (6) it needs TensorRT's standard plugin library "
            "(libnvinfer_plugin, loaded by the worker for TensorRT); TensorRT-RTX ships no "
            "plugins, so there the split stays the way (TensorRT's own NMS layer, which "
            "the ONNX op maps to, keeps ONNX semantics)")
    if p.kind == "batched":
        text += ("; this NMS is torchvision's batched_nms (class offsets added to the boxes so "
                 f"one NMS keeps classes apart): {PLUGIN} does per-class NMS itself from "
                 "[B,N,C] scores and the boxes without offsets, so the rewrite needs the "
                 "per-class scores the graph does not have: offered, not applied")
    return text


@dataclass
class NmsPattern:
    """One NMS found: the node, its kind ("onnx" or "batched"), inputs and constants."""

    index: int
    node: str
    kind: str
    boxes: str
    scores: str
    center_point_box: int
    max_per_class: Optional[int]
    iou: Optional[float]
    score_threshold: Optional[float]
    classes: Optional[int]
    downstream: int

    def default_max_boxes(self) -> int:
        if self.max_per_class and self.classes:
            return int(min(self.max_per_class * self.classes, 4096))
        return int(min(self.max_per_class or 100, 4096))


def _scalar(proto: Any, name: str, kind: Any) -> Any:
    if not name:
        return None
    v = constant_value(proto, name)
    if v is None or v.size != 1:
        return None
    return kind(v.reshape(()))


def _class_offset(proto: Any, boxes: str) -> bool:
    """torchvision's batched_nms: boxes + class_index * (max(boxes) + 1) before the NMS."""
    from workbench.core.graphindex import GraphIndex

    idx = GraphIndex.of(proto)
    g = proto.graph
    name = boxes
    for _ in range(8):  # through reshapes to the Add
        p = idx.producer_of(name)
        if p is None:
            return False
        n = g.node[p]
        if n.op_type in PASS_THROUGH and n.input:
            name = n.input[0]
            continue
        if n.op_type != "Add":
            return False
        return any({"ReduceMax", "Mul"} <= _ops_upstream(idx, g, other) for other in n.input)
    return False


def _ops_upstream(idx: Any, g: Any, name: str, steps: int = 12) -> Set[str]:
    """Op types among the first `steps` producers upstream of `name`."""
    ops = set()
    todo = [name]
    while todo and steps > 0:
        steps -= 1
        q = idx.producer_of(todo.pop())
        if q is None:
            continue
        ops.add(g.node[q].op_type)
        todo.extend(x for x in g.node[q].input if x)
    return ops


def find_nms(proto: Any) -> List[NmsPattern]:
    """Every NonMaxSuppression of the main graph, with what the offer needs to know."""
    g = proto.graph
    ids = node_ids(proto)
    types = None
    out = []
    for i, n in enumerate(g.node):
        if n.op_type != "NonMaxSuppression" or n.domain not in ("", "ai.onnx"):
            continue
        if types is None:
            types = tensor_types(infer_types(proto))
        args = list(n.input) + [""] * 5
        cpb = 0
        for a in n.attribute:
            if a.name == "center_point_box":
                cpb = int(a.i)
        shp = types.get(args[1], (0, None))[1]
        classes = shp[1] if shp and len(shp) == 3 and isinstance(shp[1], int) else None
        out.append(NmsPattern(
            i, ids[i], "batched" if _class_offset(proto, args[0]) else "onnx", args[0],
            args[1], cpb, _scalar(proto, args[2], int), _scalar(proto, args[3], float),
            _scalar(proto, args[4], float), classes, len(tail_of(proto, [i])) - 1))
    return out


def offers(proto: Any) -> List[Proposal]:
    """A manual EfficientNMS_TRT proposal for every NMS found (whatever the parser says)."""
    out = []
    for p in find_nms(as_model(proto).with_weights()):
        k = p.default_max_boxes()
        out.append(Proposal(p.node, "NonMaxSuppression", EfficientNms.name,
                            {"node": p.node, "max_output_boxes": k},
                            differences(p, k), auto=False, code=NMS_CODE))
    return out


@register
class EfficientNms(Recipe):
    name = "efficient_nms"
    summary = (f"replace a NonMaxSuppression and what reads its indices with TensorRT's "
               f"{PLUGIN} plugin (padded boxes/scores/classes; NOT exact: see the proposal)")
    params = (Param("node", "str", None, "the NonMaxSuppression (default: the only one)"),
              Param("max_output_boxes", "int", None, "detections per image (default: "
                    "max_output_boxes_per_class x classes)"),
              Param("score_threshold", "float", None, "default: the node's"),
              Param("iou_threshold", "float", None, "default: the node's"))
    preserves_semantics = False
    fixes = codes.OP_REJECTED + codes.GENERIC_PARSER_CODES + (codes.BUILD_FAILED, NMS_CODE)
    priority = 92

    def can_fix(self, finding: Any, ctx: Any) -> bool:
        """A failure of an NMS, or of a node after one (what reads its indices)."""
        if finding.code not in self.fixes:
            return False
        idx = ctx.node_index(finding)
        if idx is None:
            return False
        found = ctx.cached("nms", lambda: find_nms(ctx.proto))
        return any(idx == p.index or idx in tail_of(ctx.proto, [p.index]) for p in found)

    def propose(self, finding: Any, ctx: Any) -> List[Proposal]:
        idx = ctx.node_index(finding)
        out = []
        for p in ctx.cached("nms", lambda: find_nms(ctx.proto)):
            if idx == p.index or idx in tail_of(ctx.proto, [p.index]):
                k = p.default_max_boxes()
                out.append(Proposal(p.node, "NonMaxSuppression", self.name,
                                    {"node": p.node, "max_output_boxes": k},
                                    differences(p, k), auto=False, code=finding.code))
        return out

    def _pattern(self, proto: Any, node: Optional[str]) -> Any:
        found = find_nms(proto)
        if node:
            hits = [p for p in found if node in (p.node, proto.graph.node[p.index].name)]
        else:
            hits = found
        if len(hits) != 1:
            return None, ("no NonMaxSuppression" + (f" named {node}" if node else "")
                          if not hits else f"{len(hits)} NonMaxSuppression nodes: name one "
                          f"with node= ({', '.join(p.node for p in hits[:4])})")
        return hits[0], ""

    def precondition(self, model: ModelLike, node: Optional[str] = None,
                     max_output_boxes: Optional[int] = None,
                     score_threshold: Optional[float] = None,
                     iou_threshold: Optional[float] = None) -> Precondition:
        proto = as_model(model).with_weights()
        p, why = self._pattern(proto, node)
        if p is None:
            return Precondition(False, why, [])
        k = int(max_output_boxes or p.default_max_boxes())
        if p.kind == "batched":
            return Precondition(False, f"{p.node}: " + differences(p, k), [p.node])
        shp = tensor_types(infer_types(proto)).get(p.boxes, (0, None))[1]
        if shp is not None and len(shp) != 3:
            return Precondition(False, f"{p.node}: boxes '{p.boxes}' are not [B, N, 4]",
                                [p.node])
        return Precondition(True, f"applies to {p.node} ({p.downstream} node(s) read its "
                            f"indices and go); " + differences(p, k), [p.node])

    def _apply(self, proto: Any, node: Optional[str] = None,
               max_output_boxes: Optional[int] = None, score_threshold: Optional[float] = None,
               iou_threshold: Optional[float] = None) -> Any:
        from onnx import TensorProto, helper

        p, _ = self._pattern(proto, node)
        g = proto.graph
        gone = tail_of(proto, [p.index])
        removed_outputs = {o for i in gone for o in g.node[i].output}
        taken = all_names(proto)
        base = g.node[p.index].name or p.node
        scores_t = unique_name(taken, f"{base}/scores_bnc")
        outs = [unique_name(taken, s) for s in ("num_detections", "detection_boxes",
                                                "detection_scores", "detection_classes")]
        k = int(max_output_boxes or p.default_max_boxes())
        attrs: Dict[str, Any] = dict(
            plugin_version="1", plugin_namespace="", max_output_boxes=k,
            score_threshold=float(score_threshold if score_threshold is not None
                                  else (p.score_threshold or 0.0)),
            iou_threshold=float(iou_threshold if iou_threshold is not None
                                else (p.iou if p.iou is not None else 0.0)),
            background_class=-1, score_activation=0, class_agnostic=0,
            box_coding=int(p.center_point_box))
        new = [helper.make_node("Transpose", [p.scores], [scores_t], perm=[0, 2, 1],
                                name=unique_name(taken, f"{base}/to_bnc")),
               helper.make_node(PLUGIN, [p.boxes, scores_t], outs, domain=DOMAIN,
                                name=unique_name(taken, f"{base}/{PLUGIN}"), **attrs)]
        kept = [n for i, n in enumerate(g.node) if i not in gone]
        at = sum(1 for i in range(p.index) if i not in gone)
        nodes = kept[:at] + new + kept[at:]
        del g.node[:]
        g.node.extend(nodes)
        outputs = [o for o in g.output if o.name not in removed_outputs]
        del g.output[:]
        g.output.extend(outputs)
        batch = "B"
        g.output.extend([
            helper.make_tensor_value_info(outs[0], TensorProto.INT32, [batch, 1]),
            helper.make_tensor_value_info(outs[1], TensorProto.FLOAT, [batch, k, 4]),
            helper.make_tensor_value_info(outs[2], TensorProto.FLOAT, [batch, k]),
            helper.make_tensor_value_info(outs[3], TensorProto.INT32, [batch, k])])
        used = {x for n in g.node for x in n.input}
        keep = [t for t in g.initializer if t.name in used]
        del g.initializer[:]
        g.initializer.extend(keep)
        made = {o for n in g.node for o in n.output}
        vis = [v for v in g.value_info if v.name in made]
        del g.value_info[:]
        g.value_info.extend(vis)
        if not any(o.domain == DOMAIN for o in proto.opset_import):
            proto.opset_import.append(helper.make_opsetid(DOMAIN, 1))
        return proto


__all__ = ["NmsPattern", "find_nms", "offers", "differences", "EfficientNms", "PLUGIN"]
