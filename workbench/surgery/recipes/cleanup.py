"""Structural recipes: fold constants, cleanup + toposort, infer shapes, input shapes / dynamic
batch, remove a node, rename duplicate names, extract a subgraph, insert a Cast."""
from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from workbench.core.errors import WorkbenchError
from workbench.core.model import ModelLike, as_model
from workbench.support import codes
from workbench.surgery.recipes.base import (Param, Precondition, Proposal, Recipe, all_names,
                                            constant_value, find_node_index, fix_step,
                                            gs_export, gs_import, infer_structure_shapes,
                                            infer_types, label, light_copy, node_ids, register,
                                            tensor_types, unique_name)

if TYPE_CHECKING:  # annotations only
    import onnx

NONDETERMINISTIC = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
                    "Bernoulli", "Multinomial"}
# ops whose outputs are sequences/maps/optionals: never a Constant, so never folded (their value
# from onnxruntime is a list, a dict or None; graphsurgeon would crash storing it)
NON_TENSOR_OPS = {"SequenceEmpty", "SequenceConstruct", "SequenceInsert", "SequenceErase",
                  "SplitToSequence", "SequenceMap", "Optional", "ZipMap"}
DTYPE_SIZE = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 16: 2}
MiB = 1 << 20


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)  # pragma: no cover


def non_tensor_values(inferred: "onnx.ModelProto") -> set:  # noqa: F821
    """Names of the values shape inference typed as a sequence, map, optional or sparse tensor
    (in the graph and every subgraph): values a Constant cannot hold."""
    out: set = set()

    def walk(g: Any) -> None:
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            if vi.type.WhichOneof("value") not in (None, "tensor_type"):
                out.add(vi.name)
        for n in g.node:
            for a in n.attribute:
                for sub in ([a.g] if a.type == 5 else list(a.graphs) if a.type == 10 else []):
                    walk(sub)

    walk(inferred.graph)
    return out


def folds_to_constant(op: str, outputs: Sequence[str], non_tensor: set) -> bool:
    """Whether a node's value may become a Constant: deterministic, and every output a tensor."""
    return op not in NONDETERMINISTIC and op not in NON_TENSOR_OPS and \
        not any(o in non_tensor for o in outputs)


# Q/DQ stay in the graph: TensorRT runs INT8/FP8 from them (graphsurgeon never folds them
# either), except a DequantizeLinear of a constant whose element type TensorRT refuses as a
# Q/DQ input (onnxruntime's quantize_static writes int32 biases): that one can only go, and
# folding it is exact (its value is what onnxruntime computes)
QDQ_OPS = ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear")
TRT_DQ_INPUT_TYPES = {2, 3, 17, 21, 22, 23}  # uint8, int8, float8e4m3fn, uint4, int4, float4e2m1


def refused_dequantize(proto: "onnx.ModelProto") -> List[int]:  # noqa: F821
    """Indices of the DequantizeLinear nodes that dequantize an initializer of an element type
    TensorRT does not take (int32, int16, ...), with a constant scale and zero point."""
    g = proto.graph
    inits = {t.name: t.data_type for t in g.initializer}
    out = []
    for i, n in enumerate(g.node):
        if n.op_type != "DequantizeLinear" or not n.input or n.input[0] not in inits:
            continue
        if inits[n.input[0]] in TRT_DQ_INPUT_TYPES:
            continue
        if all(x in inits for x in n.input[1:] if x) and \
                all(a.name == "axis" for a in n.attribute):  # (block_size etc.: left as is)
            out.append(i)
    return out


def _fold_refused_dequantize(proto: Any) -> Any:
    """`proto` with each `refused_dequantize` node replaced by a float initializer holding
    (x - zero_point) * scale, computed as onnxruntime does (the integer difference, then one
    float multiply in the scale's type); the input is not modified."""
    from onnx import numpy_helper

    from workbench.surgery.recipes.qdq import dequantize_constant, read_names

    idx = refused_dequantize(proto)
    if not idx:
        return proto
    out = copy.deepcopy(proto)
    g = out.graph
    vals = {t.name: t for t in g.initializer}
    drop = set()
    for i in idx:
        n = g.node[i]
        zp = (numpy_helper.to_array(vals[n.input[2]]) if len(n.input) > 2 and n.input[2]
              else None)
        axis = next((a.i for a in n.attribute if a.name == "axis"), 1)
        y = dequantize_constant(numpy_helper.to_array(vals[n.input[0]]),
                                numpy_helper.to_array(vals[n.input[1]]), zp, axis)
        g.initializer.append(numpy_helper.from_array(y, n.output[0]))
        drop.add(i)
    freed = {x for i in idx for x in g.node[i].input}
    keep = [nd for k, nd in enumerate(g.node) if k not in drop]
    del g.node[:]
    g.node.extend(keep)
    used = read_names(g) | {o.name for o in g.output}
    left = [t for t in g.initializer if t.name not in freed or t.name in used]
    del g.initializer[:]
    g.initializer.extend(left)
    return out


def foldable_nodes(proto: "onnx.ModelProto",  # noqa: F821
                   types: Optional[Dict[str, Any]] = None,
                   non_tensor: Optional[set] = None) -> List[Dict[str, Any]]:
    """Nodes whose every input is constant (or a Shape of a static-shaped tensor) and whose
    outputs are tensors, in order, with their output size in bytes where shape inference knows
    it. `types` / `non_tensor`: `tensor_types(...)` / `non_tensor_values(...)` of
    `infer_types(proto)` when the caller already has them."""
    if types is None or non_tensor is None:
        inferred = infer_types(proto)
        types = tensor_types(inferred) if types is None else types
        non_tensor = non_tensor_values(inferred) if non_tensor is None else non_tensor
    g = proto.graph
    const = {t.name for t in g.initializer} | {""}
    ids = node_ids(proto)
    out = []
    refused = set(refused_dequantize(proto))
    for i, n in enumerate(g.node):
        if not folds_to_constant(n.op_type, n.output, non_tensor) or \
                any(a.type in (5, 10) for a in n.attribute):  # GRAPH(S)
            continue
        if n.op_type in QDQ_OPS and i not in refused:
            continue
        if n.op_type == "Constant":
            const.update(n.output)
            continue
        ok = all(x in const for x in n.input)
        if not ok and n.op_type == "Shape" and n.input:
            shp = types.get(n.input[0], (0, None))[1]
            ok = shp is not None and all(isinstance(d, int) and d > 0 for d in shp)
        if not ok:
            continue
        const.update(n.output)
        size = 0
        known = True
        for o in n.output:
            dt, shp = types.get(o, (0, None))
            if shp is None or not all(isinstance(d, int) for d in shp) or dt not in DTYPE_SIZE:
                known = False
                continue
            v = DTYPE_SIZE[dt]
            for d in shp:
                v *= d
            size += v
        out.append({"node": ids[i], "op": n.op_type, "bytes": size if known else None})
    return out


@register
class FoldConstants(Recipe):
    name = "fold_constants"
    summary = ("evaluate subgraphs whose inputs are all constant (onnxruntime) and store the "
               "result; tensors over size_threshold stay unfolded so the model cannot bloat")
    params = (Param("size_threshold", "int", 1 * MiB,
                    "largest folded tensor in bytes (0 = no limit)"),
              Param("passes", "int", 3, "fold+cleanup passes until nothing changes"))
    preserves_semantics = True
    mutates_input = False
    fixes = (codes.ANY_NODE,)  # a node with only constant inputs goes, whatever was wrong
    priority = 20

    def propose(self, finding: Any, ctx: Any) -> List[Proposal]:
        idx = ctx.node_index(finding)
        if idx is None:
            return []
        nid, n = ctx.ids[idx], ctx.proto.graph.node[idx]
        fold = ctx.cached("foldable", lambda: {f["node"] for f in foldable_nodes(ctx.proto)})
        if nid not in fold:
            return []
        pre = ctx.cached("fold_constants.pre", lambda: self.precondition(ctx.proto))
        if not (pre.applies and nid in pre.nodes):
            return []
        return [Proposal(nid, n.op_type, self.name, {},
                         f"node {nid} has only constant inputs: folding replaces it by its value",
                         code=finding.code)]

    def next_step(self, finding: Any, ctx: Any) -> Any:
        """The fold step for a node `fix --auto` would fold (so `check` advises what the
        fix then does)."""
        if not self.propose(finding, ctx):
            return None
        return fix_step("fold_constants", "replaces it by its value (all its inputs are "
                        "constant)")

    def precondition(self, model: ModelLike, size_threshold: int = MiB, passes: int = 3) -> Precondition:
        proto = as_model(model).with_weights()
        cands = foldable_nodes(proto)
        if not cands:
            return Precondition(False, "nothing to fold: no node has only constant inputs", [])
        limit = size_threshold or None
        big = [c for c in cands if limit is not None and c["bytes"] is not None
               and c["bytes"] > limit]
        small = [c for c in cands if c not in big]
        if not small:
            c = big[0]
            return Precondition(False, f"folding would bloat the model: node {c['node']} ({c['op']})"
                                f" would become a {_fmt_bytes(c['bytes'])} constant, over "
                                f"size_threshold {_fmt_bytes(limit)}; raise size_threshold to "
                                "fold it anyway", [c["node"] for c in big])
        names = [c["node"] for c in small]
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        reason = f"applies to {len(names)} node(s) ({shown}) because all their inputs are constant"
        if big:
            reason += (f"; {len(big)} node(s) stay unfolded (output over "
                       f"{_fmt_bytes(limit)}): {', '.join(c['node'] for c in big[:5])}")
        return Precondition(True, reason, names)

    def _apply(self, proto: Any, size_threshold: int = MiB, passes: int = 3) -> Any:
        return fold_constants(proto, size_threshold=size_threshold or None, passes=passes)


def fold_constants(proto: "onnx.ModelProto", size_threshold: Optional[int] = MiB,  # noqa: F821
                   passes: int = 3) -> "onnx.ModelProto":  # noqa: F821
    """Fold with graphsurgeon + onnxruntime; shapes are inferred first so the size threshold is
    applied *before* evaluation (a bloater's huge tensor is never even computed). Q/DQ nodes
    stay (TensorRT's INT8/FP8), but a DequantizeLinear of a constant TensorRT refuses (an int32
    bias) is folded first (`refused_dequantize`). The input is not modified; the result is a
    new ModelProto."""
    import onnx_graphsurgeon as gs

    log = gs.logger.G_LOGGER
    old_severity = log.severity
    log.severity = max(old_severity, log.ERROR)  # its per-tensor folding chatter is not ours
    try:
        return _fold_passes(_fold_refused_dequantize(proto), size_threshold, passes)
    finally:
        log.severity = old_severity


def _fold_passes(proto: Any, size_threshold: Optional[int], passes: int) -> Any:
    cur = proto
    for _ in range(max(1, int(passes))):
        before = len(cur.graph.node)
        g, non_tensor = _gs_with_types(cur)
        g.fold_constants(size_threshold=size_threshold, error_ok=True,
                         **_exclusion(g, non_tensor)).cleanup().toposort()
        cur = gs_export(g, proto)
        if len(cur.graph.node) == before or not _could_fold_more(cur, size_threshold):
            break
    return cur


def _exclusion(graph: Any, non_tensor: set) -> Dict[str, Any]:
    """graphsurgeon's `should_exclude_node` for the nodes that must not fold (random values;
    sequence/map/optional outputs). Without that argument (an old graphsurgeon) a graph that
    has such a node cannot be folded safely: refused, naming the node."""
    import inspect

    def exclude(node: Any) -> bool:
        return not folds_to_constant(node.op, [t.name for t in node.outputs], non_tensor)

    if "should_exclude_node" in inspect.signature(graph.fold_constants).parameters:
        return {"should_exclude_node": exclude}
    for node in graph.nodes:
        if exclude(node):
            raise WorkbenchError(f"this onnx-graphsurgeon cannot keep {node.op} out of constant "
                                 "folding", node=node.name or node.op,
                                 hint="pip install -U onnx-graphsurgeon")
    return {}


def _gs_with_types(proto: Any) -> Any:
    """graphsurgeon graph of `proto` with dtypes/shapes from shape inference on a light copy
    (so the size threshold can skip a tensor before computing it), leaving `proto` untouched;
    with the names of the values that are not tensors (sequences, maps, optionals)."""
    import onnx_graphsurgeon as gs
    from onnx import helper

    inferred = infer_types(proto)
    types = tensor_types(inferred)
    g = gs_import(proto)
    for name, t in g.tensors().items():
        if not isinstance(t, gs.Variable) or name not in types:
            continue
        dt, shp = types[name]
        if t.dtype is None and dt:
            try:
                t.dtype = helper.tensor_dtype_to_np_dtype(dt)
            except (KeyError, ValueError):
                pass
        if t.shape is None and shp is not None:
            t.shape = [d if d is not None else None for d in shp]
    return g, non_tensor_values(inferred)


def _could_fold_more(proto: Any, size_threshold: Optional[int]) -> bool:
    """Cheap check before another (full-copy) pass: constant-input nodes under the threshold
    left, or a Shape whose input has a static dim (graphsurgeon folds Shape->Gather/Slice)."""
    inferred = infer_types(proto)  # one shape inference for both checks
    types = tensor_types(inferred)
    for f in foldable_nodes(proto, types, non_tensor_values(inferred)):
        if size_threshold is None or f["bytes"] is None or f["bytes"] <= size_threshold:
            return True
    for n in proto.graph.node:
        if n.op_type == "Shape" and n.input:
            shp = types.get(n.input[0], (0, None))[1]
            if shp and any(isinstance(d, int) for d in shp):
                return True
    return False


@register
class Cleanup(Recipe):
    name = "cleanup"
    summary = "remove nodes and initializers nothing depends on, then sort nodes topologically"
    params = ()
    preserves_semantics = True

    def precondition(self, model: ModelLike) -> Precondition:
        proto = as_model(model).with_weights()
        g = proto.graph
        needed = {o.name for o in g.output}
        live = set()
        for i in reversed(range(len(g.node))):
            n = g.node[i]
            if any(o in needed for o in n.output):
                live.add(i)
                needed.update(n.input)
        ids = node_ids(proto)
        dead = [ids[i] for i in range(len(g.node)) if i not in live]
        unused_init = [t.name for t in g.initializer if t.name not in needed]
        produced = {i.name for i in g.input} | {t.name for t in g.initializer} | {""}
        unsorted = []
        for i, n in enumerate(g.node):
            if any(x not in produced for x in n.input if x):
                unsorted.append(ids[i])
            produced.update(n.output)
        if not dead and not unused_init and not unsorted:
            return Precondition(False, "nothing to clean: every node and initializer feeds an "
                                "output and the nodes are already in topological order", [])
        parts = []
        if dead:
            parts.append(f"{len(dead)} node(s) feed no output ({', '.join(dead[:5])})")
        if unused_init:
            parts.append(f"{len(unused_init)} unused initializer(s)")
        if unsorted:
            parts.append(f"node(s) out of topological order ({', '.join(unsorted[:3])})")
        return Precondition(True, "applies because " + "; ".join(parts), dead + unsorted)

    def _apply(self, proto: Any) -> Any:
        g = gs_import(proto)
        g.cleanup(remove_unused_graph_inputs=False).toposort()
        return gs_export(g, proto)


@register
class InferShapes(Recipe):
    name = "infer_shapes"
    summary = "run ONNX shape inference (with data propagation) and store shapes as value_info"
    params = ()
    preserves_semantics = True

    def precondition(self, model: ModelLike) -> Precondition:
        proto = as_model(model).with_weights()
        g = proto.graph
        stale = _stale_value_info(proto)
        if stale:
            return Precondition(True, f"applies because the declared shape of {len(stale)} "
                                "tensor(s) contradicts shape inference (stale value_info: "
                                f"{', '.join(sorted(stale)[:5])})", [])
        known = {v.name for v in g.value_info} | {o.name for o in g.output if o.type.tensor_type.elem_type}
        missing = [o for n in g.node for o in n.output if o and o not in known]
        if not missing:
            return Precondition(False, "every intermediate tensor already has a type/shape", [])
        inferred = infer_types(proto)
        got = {v.name for v in inferred.graph.value_info}
        new = [m for m in missing if m in got]
        if not new:
            return Precondition(False, f"{len(missing)} tensor(s) lack shapes but ONNX shape "
                                "inference cannot infer any of them", [])
        return Precondition(True, f"applies because {len(missing)} tensor(s) have no stored shape "
                            f"and inference finds {len(new)} ({', '.join(new[:5])})", [])

    def _apply(self, proto: Any) -> Any:
        stale = _stale_value_info(proto)
        if stale:  # inference keeps a declared shape it contradicts: drop those first
            keep = [vi for vi in proto.graph.value_info if vi.name not in stale]
            del proto.graph.value_info[:]
            proto.graph.value_info.extend(keep)
        return infer_structure_shapes(proto, inplace=True)


def _stale_value_info(proto: Any) -> set:
    """Names of value_info entries whose declared shape contradicts ONNX shape inference
    (outputs of the nodes a strict inference names; graph outputs are not value_info)."""
    from workbench.core.onnx_light import declared_conflicts
    from workbench.core.onnx_light import infer_shapes as onnx_infer

    try:
        onnx_infer(light_copy(proto), data_prop=True, strict=True)
        return set()
    except Exception as e:  # (read for its conflicts; any other failure is not ours here)
        nodes = {n for n, _, _ in declared_conflicts(e) if n}
    if not nodes:
        return set()
    declared = {vi.name for vi in proto.graph.value_info}
    return {o for n in proto.graph.node if n.name in nodes for o in n.output if o in declared}


def parse_shape(text: Any) -> List[Any]:
    """'1x3x224x224' / 'batchx3x224x224' / [1,3,'N'] -> list of int|str."""
    if isinstance(text, (list, tuple)):
        items = list(text)
    else:
        items = [s for s in str(text).replace(",", "x").split("x") if s != ""]
    out: List[Any] = []
    for s in items:
        if isinstance(s, int):
            out.append(s)
            continue
        s = str(s).strip()
        out.append(int(s) if s.lstrip("-").isdigit() else s)
    return out


@register
class SetInputShapes(Recipe):
    name = "set_input_shapes"
    summary = ("override graph input shapes, or make the batch (first) dim dynamic; Reshape "
               "constants that bake the old batch size in are rewritten to copy it (0)")
    params = (Param("shapes", "dict", None, "input name -> shape, e.g. input=Nx3x224x224"),
              Param("batch", "str", None, "set dim 0 of every input to this (int or a name like N)"))
    preserves_semantics = True

    def _targets(self, proto: Any, shapes: Optional[Dict[str, Any]], batch: Any) -> Dict[str, List[Any]]:
        inits = {t.name for t in proto.graph.initializer}
        inputs = {i.name: i for i in proto.graph.input if i.name not in inits}
        out: Dict[str, List[Any]] = {}
        if shapes:
            for name, shp in shapes.items():
                if name not in inputs:
                    raise WorkbenchError(f"no graph input named '{name}'", field="shapes",
                                         hint=f"inputs: {', '.join(inputs)}")
                new = parse_shape(shp)
                old = inputs[name].type.tensor_type.shape.dim
                if len(old) and len(new) != len(old):
                    raise WorkbenchError(f"input '{name}' has rank {len(old)}, got a shape of "
                                         f"rank {len(new)}", field="shapes")
                out[name] = new
        if batch is not None:
            b = int(batch) if str(batch).isdigit() else str(batch)
            for name, vi in inputs.items():
                dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                        for d in vi.type.tensor_type.shape.dim]
                if dims:
                    out[name] = [b] + dims[1:] if name not in out else out[name]
        return out

    def precondition(self, model: ModelLike, shapes: Optional[Dict[str, Any]] = None,
                     batch: Any = None) -> Precondition:
        proto = as_model(model).with_weights()
        if not shapes and batch is None:
            return Precondition(False, "give `shapes` (input=shape) or `batch` (e.g. N)", [])
        changed = {k: (a, b) for k, (a, b) in self._new_dims(proto, shapes, batch).items()
                   if a != b}
        if not changed:
            return Precondition(False, "the inputs already have these shapes", [])
        fixes = self._reshape_fixes(proto, changed, batch)
        reason = "applies because " + "; ".join(
            f"input '{k}' changes {a} -> {b}" for k, (a, b) in changed.items())
        if fixes:
            reason += f"; Reshape node(s) {', '.join(fixes)} bake the batch size in and get 0 (copy)"
        return Precondition(True, reason, fixes)

    def _new_dims(self, proto: Any, shapes: Optional[Dict[str, Any]],
                  batch: Any) -> Dict[str, Tuple[List[Any], List[Any]]]:
        """(declared dims, new dims) of each graph input the arguments name ('?' for a dim
        with neither value nor name)."""
        targets = self._targets(proto, shapes, batch)
        out = {}
        for vi in proto.graph.input:
            if vi.name in targets:
                dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                        for d in vi.type.tensor_type.shape.dim]
                out[vi.name] = (dims, targets[vi.name])
        return out

    def _reshape_fixes(self, proto: Any, changed: Dict[str, Any], batch: Any) -> List[str]:
        """Reshapes whose constant target shape starts with the old static batch size while
        their data input's dim 0 is that batch: [B, ...] -> [0, ...] keeps them batch-agnostic."""
        if batch is None:
            return []
        old_batches = {a[0] for a, _ in changed.values() if a and isinstance(a[0], int)}
        if not old_batches:
            return []
        inferred = infer_types(proto)
        types = tensor_types(inferred)
        ids = node_ids(proto)
        out = []
        for i, n in enumerate(proto.graph.node):
            if n.op_type != "Reshape" or len(n.input) < 2:
                continue
            if any(a.name == "allowzero" and a.i for a in n.attribute):
                continue
            val = constant_value(proto, n.input[1])
            if val is None or val.ndim != 1 or not len(val) or int(val[0]) not in old_batches:
                continue
            shp = types.get(n.input[0], (0, None))[1]
            if shp and shp[0] == int(val[0]):
                out.append(ids[i])
        return out

    def _apply(self, proto: Any, shapes: Optional[Dict[str, Any]] = None, batch: Any = None) -> Any:
        changed = self._new_dims(proto, shapes, batch)
        fixes = set(self._reshape_fixes(proto, changed, batch))
        import numpy as np
        from onnx import numpy_helper

        ids = node_ids(proto)
        taken = all_names(proto)
        for i, n in enumerate(proto.graph.node):
            if ids[i] in fixes:
                val = constant_value(proto, n.input[1]).copy()
                val[0] = 0
                name = unique_name(taken, n.input[1] + "_batch_agnostic")
                proto.graph.initializer.append(numpy_helper.from_array(val.astype(np.int64), name))
                n.input[1] = name
        for vi in proto.graph.input:
            if vi.name in changed:
                shp = vi.type.tensor_type.shape
                del shp.dim[:]
                for d in changed[vi.name][1]:
                    dim = shp.dim.add()
                    if isinstance(d, int) and d >= 0:
                        dim.dim_value = d
                    elif isinstance(d, str) and d not in ("?", "-1"):
                        dim.dim_param = d
        # stale intermediate/output shapes would contradict the new input shapes: re-infer them
        del proto.graph.value_info[:]
        for o in proto.graph.output:
            o.type.tensor_type.ClearField("shape")
        g = gs_import(proto)
        g.cleanup(remove_unused_graph_inputs=False)
        return infer_structure_shapes(gs_export(g, proto), inplace=True)


IDENTITY_LIKE = {"Identity", "Dropout"}


@register
class RemoveNode(Recipe):
    name = "remove_node"
    summary = ("remove one node and connect its consumers to its input (exact for Identity / "
               "inference Dropout; otherwise it changes what the model computes)")
    params = (Param("node", "str", None, "node name or id", required=True),
              Param("input_index", "int", None, "which input carries through (when several)"))
    preserves_semantics = False

    def semantics_preserved(self, proto: Any, node: str, input_index: Optional[int] = None) -> bool:
        n = proto.graph.node[find_node_index(proto, node)]
        return n.op_type in IDENTITY_LIKE

    def _data_inputs(self, proto: Any, idx: int) -> List[int]:
        n = proto.graph.node[idx]
        inits = {t.name for t in proto.graph.initializer}
        return [k for k, x in enumerate(n.input) if x and x not in inits
                and constant_value(proto, x) is None]

    def precondition(self, model: ModelLike, node: str = "", input_index: Optional[int] = None) -> Precondition:
        proto = as_model(model).with_weights()
        idx = find_node_index(proto, node)
        n = proto.graph.node[idx]
        nid = label(proto, idx)
        used_outputs = [o for o in n.output[1:] if o and (any(o in m.input for m in proto.graph.node)
                                                          or o in {x.name for x in proto.graph.output})]
        if used_outputs:
            return Precondition(False, f"node {nid} ({n.op_type}) has extra used outputs "
                                f"({', '.join(used_outputs)}): nothing can stand in for them", [nid])
        data = self._data_inputs(proto, idx)
        if input_index is None:
            if len(data) != 1:
                return Precondition(False, f"node {nid} ({n.op_type}) has {len(data)} non-constant "
                                    "inputs; say which one carries through with input_index", [nid])
            input_index = data[0]
        if input_index >= len(n.input) or not n.input[input_index]:
            return Precondition(False, f"node {nid} has no input {input_index}", [nid])
        types = tensor_types(infer_types(proto))
        a = types.get(n.input[input_index], (0, None))
        b = types.get(n.output[0], (0, None))
        if a[0] and b[0] and a[0] != b[0]:
            return Precondition(False, f"node {nid} ({n.op_type}) changes the dtype of its input; "
                                "removing it would feed consumers the wrong type", [nid])
        exact = n.op_type in IDENTITY_LIKE
        return Precondition(True, f"applies to node {nid} ({n.op_type}): consumers of "
                            f"'{n.output[0]}' will read '{n.input[input_index]}'"
                            + ("; exact, the op passes data through" if exact else
                               "; this changes what the model computes"), [nid])

    def _apply(self, proto: Any, node: str = "", input_index: Optional[int] = None) -> Any:
        idx = find_node_index(proto, node)
        n = proto.graph.node[idx]
        if input_index is None:
            input_index = self._data_inputs(proto, idx)[0]
        src, dst = n.input[input_index], n.output[0]
        outs = [o.name for o in proto.graph.output]
        g = proto.graph
        if dst in outs:
            # keep the graph output's name: rename the source tensor to it, when we can
            producer_outputs = {o for m in g.node for o in m.output}
            if src in producer_outputs and src not in outs:
                for m in g.node:
                    m.output[:] = [dst if o == src else o for o in m.output]
                    if m is not n:
                        m.input[:] = [dst if x == src else x for x in m.input]
                for vi in g.value_info:
                    if vi.name == src:
                        vi.name = dst
            else:
                for o in g.output:
                    if o.name == dst:
                        o.name = src
        else:
            for m in g.node:
                m.input[:] = [src if x == dst else x for x in m.input]
        del g.node[idx]
        out = gs_import(proto)
        out.cleanup(remove_unused_graph_inputs=False)
        return gs_export(out, proto)


@register
class RenameDuplicates(Recipe):
    name = "rename_duplicates"
    summary = ("make node and tensor names unique: drop repeated graph input/output/value_info "
               "declarations, suffix repeated node names, rename re-produced tensors")
    params = ()
    preserves_semantics = True
    fixes = (codes.DUPLICATE_TENSOR_NAME,)
    priority = 10

    def propose(self, finding: Any, ctx: Any) -> List[Proposal]:
        pre = self.precondition(ctx.proto)
        if not pre.applies:
            return []
        return [Proposal(finding.nodes[0] if finding.nodes else "", finding.op or "", self.name,
                         {}, pre.reason, code=finding.code)]

    def _scan(self, proto: Any) -> Dict[str, List[str]]:
        g = proto.graph
        found: Dict[str, List[str]] = {"inputs": [], "outputs": [], "value_info": [],
                                       "initializers": [], "nodes": [], "tensors": []}
        for key, items in (("inputs", g.input), ("outputs", g.output),
                           ("value_info", g.value_info), ("initializers", g.initializer)):
            seen = set()
            for it in items:
                if it.name in seen:
                    found[key].append(it.name)
                seen.add(it.name)
        seen = set()
        for n in g.node:
            if n.name and n.name in seen:
                found["nodes"].append(n.name)
            seen.add(n.name)
        produced = {i.name for i in g.input} | {t.name for t in g.initializer}
        for n in g.node:
            for o in n.output:
                if o and o in produced:
                    found["tensors"].append(o)
                produced.add(o)
        return found

    def precondition(self, model: ModelLike) -> Precondition:
        proto = as_model(model).with_weights()
        found = self._scan(proto)
        parts = [f"{k}: {', '.join(sorted(set(v))[:5])}" for k, v in found.items() if v]
        if not parts:
            return Precondition(False, "no duplicate node or tensor names", [])
        return Precondition(True, "applies because names repeat (" + "; ".join(parts) + ")",
                            sorted(set(found["nodes"])))

    def _apply(self, proto: Any) -> Any:
        g = proto.graph
        for field in ("input", "output", "value_info", "initializer"):
            items = getattr(g, field)
            keep, seen = [], set()
            for it in items:
                if it.name in seen:
                    continue
                seen.add(it.name)
                keep.append(copy.deepcopy(it))
            del items[:]
            items.extend(keep)
        taken = all_names(proto)
        seen = set()
        for n in g.node:
            if n.name and n.name in seen:
                n.name = unique_name(taken, n.name)
            seen.add(n.name)
        produced = {i.name for i in g.input} | {t.name for t in g.initializer}
        for i, n in enumerate(g.node):
            for k, o in enumerate(n.output):
                if o and o in produced:
                    new = unique_name(taken, o)
                    n.output[k] = new
                    # later readers (until the name is produced again) see the new tensor
                    for m in g.node[i + 1:]:
                        m.input[:] = [new if x == o else x for x in m.input]
                        if o in m.output:
                            break
                    for out in g.output:
                        if out.name == o:
                            pass  # graph outputs keep the first producer's tensor
                produced.add(n.output[k])
        return proto


def _collect_types(proto: Any) -> Dict[str, Any]:
    return tensor_types(infer_types(proto))


@register
class ExtractSubgraph(Recipe):
    name = "extract_subgraph"
    summary = "keep only the part of the graph between the given input and output tensors"
    params = (Param("inputs", "list[str]", None, "tensor names that become graph inputs", required=True),
              Param("outputs", "list[str]", None, "tensor names that become graph outputs", required=True))
    preserves_semantics = False

    def precondition(self, model: ModelLike, inputs: Sequence[str] = (), outputs: Sequence[str] = ()) -> Precondition:
        proto = as_model(model).with_weights()
        inputs, outputs = _as_list(inputs), _as_list(outputs)
        names = all_names(proto)
        missing = [t for t in list(inputs) + list(outputs) if t not in names]
        if missing:
            return Precondition(False, f"no tensor(s) named {', '.join(missing)}", [])
        types = _collect_types(proto)
        untyped = [t for t in inputs if not types.get(t, (0, None))[0]]
        if untyped:
            return Precondition(False, f"the dtype of {', '.join(untyped)} is unknown; run "
                                "infer_shapes first", [])
        g = proto.graph
        producer = {o: i for i, n in enumerate(g.node) for o in n.output}
        consts = {t.name for t in g.initializer}
        stop = set(inputs)
        need, stack, seen = [], list(outputs), set()
        leaks = set()
        while stack:
            t = stack.pop()
            if t in seen or t in stop or t in consts or not t:
                continue
            seen.add(t)
            if t in producer:
                i = producer[t]
                if i not in need:
                    need.append(i)
                stack.extend(g.node[i].input)
            else:
                leaks.add(t)
        if leaks:
            return Precondition(False, f"the outputs also depend on {', '.join(sorted(leaks))}, "
                                "which is not among the given inputs; add it to inputs", [])
        ids = node_ids(proto)
        kept = [ids[i] for i in sorted(need)]
        return Precondition(True, f"applies: {len(kept)} node(s) lie between "
                            f"{', '.join(inputs)} and {', '.join(outputs)}", kept)

    def _apply(self, proto: Any, inputs: Sequence[str] = (), outputs: Sequence[str] = ()) -> Any:
        import onnx_graphsurgeon as gs

        inputs, outputs = _as_list(inputs), _as_list(outputs)
        types = _collect_types(proto)
        g = gs_import(proto)
        tmap = g.tensors()
        from onnx import helper

        def typed(name: str) -> Any:
            t = tmap[name]
            dt, shp = types.get(name, (0, None))
            if isinstance(t, gs.Variable):
                if t.dtype is None and dt:
                    t.dtype = helper.tensor_dtype_to_np_dtype(dt)
                if t.shape is None and shp is not None:
                    t.shape = [d if d is not None else "?" for d in shp]
            return t

        new_inputs = []
        for name in inputs:
            t = typed(name)
            t.inputs.clear()  # cut the producer off
            new_inputs.append(t)
        g.inputs = new_inputs
        g.outputs = [typed(n) for n in outputs]
        g.cleanup(remove_unused_graph_inputs=False).toposort()
        return gs_export(g, proto)


def _as_list(v: Any) -> List[str]:
    if v is None:
        return []
    if isinstance(v, str):
        return [s for s in v.replace(";", ",").split(",") if s]
    return list(v)


DTYPES = {"float32": 1, "float": 1, "fp32": 1, "uint8": 2, "int8": 3, "int32": 6, "int64": 7,
          "bool": 9, "float16": 10, "fp16": 10, "half": 10, "double": 11, "float64": 11,
          "bfloat16": 16, "bf16": 16}


def dtype_code(name: Any) -> int:
    if isinstance(name, int):
        return name
    key = str(name).lower()
    if key not in DTYPES:
        raise WorkbenchError(f"unknown dtype '{name}'", field="to",
                             hint=f"use one of {', '.join(sorted(DTYPES))}")
    return DTYPES[key]


@register
class InsertCast(Recipe):
    name = "insert_cast"
    summary = ("insert a Cast on a tensor for its consumers (round_trip: cast and cast back, "
               "e.g. to emulate FP16 storage); changes values, so it is verified but not gated")
    params = (Param("tensor", "str", None, "tensor to cast", required=True),
              Param("to", "str", None, "target dtype (float16, int32, ...)", required=True),
              Param("consumers", "list[str]", None, "only these consumer nodes (default all)"),
              Param("round_trip", "bool", False, "cast back to the original dtype afterwards"))
    preserves_semantics = False

    def precondition(self, model: ModelLike, tensor: str = "", to: Any = None,
                     consumers: Any = None, round_trip: bool = False) -> Precondition:
        proto = as_model(model).with_weights()
        code = dtype_code(to)
        if tensor not in all_names(proto):
            return Precondition(False, f"no tensor named '{tensor}'", [])
        types = _collect_types(proto)
        cur = types.get(tensor, (0, None))[0]
        if not cur:
            return Precondition(False, f"the dtype of '{tensor}' is unknown; run infer_shapes first", [])
        if cur == code:
            return Precondition(False, f"'{tensor}' is already {to}: a Cast would do nothing", [])
        ids = node_ids(proto)
        users = [ids[i] for i, n in enumerate(proto.graph.node) if tensor in n.input]
        if consumers:
            wanted = _as_list(consumers)
            bad = [c for c in wanted if c not in users]
            if bad:
                return Precondition(False, f"{', '.join(bad)} do(es) not read '{tensor}'", bad)
            users = wanted
        if not users:
            return Precondition(False, f"'{tensor}' has no consumer nodes", [])
        return Precondition(True, f"applies: {', '.join(users[:5])} will read '{tensor}' cast to "
                            f"{to}" + (" and back" if round_trip else ""), users)

    def _apply(self, proto: Any, tensor: str = "", to: Any = None, consumers: Any = None,
               round_trip: bool = False) -> Any:
        from onnx import helper

        code = dtype_code(to)
        cur = _collect_types(proto).get(tensor, (0, None))[0]
        ids = node_ids(proto)
        wanted = set(_as_list(consumers)) if consumers else None
        taken = all_names(proto)
        cast_out = unique_name(taken, f"{tensor}_cast_{to}")
        new_nodes = [helper.make_node("Cast", [tensor], [cast_out], to=code,
                                      name=unique_name(taken, f"Cast_{tensor}_{to}"))]
        final = cast_out
        if round_trip:
            final = unique_name(taken, f"{tensor}_roundtrip")
            new_nodes.append(helper.make_node("Cast", [cast_out], [final], to=cur,
                                              name=unique_name(taken, f"CastBack_{tensor}")))
        g = proto.graph
        first = None
        for i, n in enumerate(g.node):
            if tensor in n.input and (wanted is None or ids[i] in wanted):
                n.input[:] = [final if x == tensor else x for x in n.input]
                first = i if first is None else first
        nodes = list(g.node)
        pos = first if first is not None else len(nodes)
        nodes[pos:pos] = new_nodes
        del g.node[:]
        g.node.extend(nodes)
        return proto


@register
class DensifySparse(Recipe):
    name = "densify_sparse"
    summary = ("store every sparse initializer (graph.sparse_initializer) as a dense one: "
               "TensorRT's parser and the graph tools read dense initializers only")
    params = ()
    preserves_semantics = True
    fixes = ("sparse-weights",)
    priority = 5

    def precondition(self, model: ModelLike) -> Precondition:
        proto = as_model(model).with_weights()
        names = [sp.values.name for sp in proto.graph.sparse_initializer]
        if not names:
            return Precondition(False, "the model has no sparse initializers", [])
        return Precondition(True, "applies because weights are stored sparse ("
                            + ", ".join(names[:5]) + ")", [])

    def _apply(self, proto: Any) -> Any:
        import numpy as np
        from onnx import numpy_helper

        g = proto.graph
        for sp in g.sparse_initializer:
            values = numpy_helper.to_array(sp.values)
            idx = numpy_helper.to_array(sp.indices).astype(np.int64)
            dims = [int(d) for d in sp.dims]
            dense = np.zeros(dims, dtype=values.dtype)
            if idx.ndim == 2:  # [NNZ, rank] coordinates
                dense[tuple(idx.T)] = values
            else:  # [NNZ] linear indices
                dense.reshape(-1)[idx] = values
            g.initializer.append(numpy_helper.from_array(dense, sp.values.name))
        del g.sparse_initializer[:]
        return proto
