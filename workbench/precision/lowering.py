"""Float lowering (FP32 -> FP16 or BF16) that keeps the model valid, subgraphs included.

    out = lower(proto, "fp16", exclude_nodes=[...], keep_io_types=True)
    out.proto, out.kept (node -> why it stayed FP32), out.casts

Why not onnxconverter-common's `convert_float_to_float16`: it places Casts by walking node
lists, so Casts meant for an If/Loop/Scan body land after their users ("Nodes in a graph must
be topologically sorted"), it trips over graph lists ("'list' object has no attribute
'input'"), and it converts operands one by one, so an op whose inputs are bound to one type
parameter T can end up with FP16 and FP32 (Conv with an FP32 bias: "Type parameter (T) of
Optype (Conv) bound to different types"). Here, per graph and scope:
- types come from onnx shape inference, run per body with the outer-scope values it reads;
- a node is lowered per type parameter of its schema at the model's opset: every FLOAT operand
  bound to a lowered T becomes low together (Conv X/W/B, Where/Concat/Clip/Pad operands), inputs
  fixed to float by the spec (Resize roi/scales) stay FP32;
- control flow, dtype-producing ops and the user's exclusions stay FP32; a body's nodes are
  lowered inside the body and its inputs/outputs keep their FP32 types, so the If/Loop/Scan
  interface never changes;
- each graph gets its own Casts, placed right before the first reader (outer-scope values are
  cast inside the body), so the node order stays topological without a re-sort;
- initializers / Constants read only by lowered nodes of their own graph are converted in place
  (finite values beyond the type's range saturate).
`validate` then runs onnx's full checker and loads the model in onnxruntime (FP16); a node
onnxruntime has no kernel for is kept FP32 and the pass repeats; anything else is a one-line
WorkbenchError naming the node.
"""
from __future__ import annotations

import re
from collections import ChainMap
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, MutableMapping, Optional, Sequence, Set

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.model import ModelLike

FLOAT = 1  # onnx.TensorProto.FLOAT


def _low_row(low: str) -> Any:
    """The float-cast row of the precision table for `low`; WorkbenchError otherwise."""
    from workbench.precision import table

    row = table.find(low)
    if row is None or not row.low_float or row.onnx_dtype is None:
        floats = [n for n in table.names() if table.get(n).low_float]
        raise WorkbenchError(f"unknown float type '{low}'", field="low",
                             hint=" or ".join(floats))
    return row


def type_str(elem_type: int) -> str:
    """onnx's operator-schema spelling of an element type: 10 -> 'tensor(float16)'."""
    import onnx

    return f"tensor({onnx.helper.tensor_dtype_to_np_dtype(elem_type).name})"
# ops that stay FP32: control flow (their bodies are lowered instead), ops whose output type is
# an attribute, index/sampling ops whose float operands are coordinates or counts
BLOCK_OPS = frozenset({
    "Cast", "CastLike", "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
    "ConstantOfShape", "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
    "EyeLike", "Range", "Loop", "If", "Scan", "NonMaxSuppression", "RoiAlign", "TopK",
    "Multinomial", "Bernoulli", "Constant", "Shape", "Size", "CumSum",
})
TYPE_AGNOSTIC_OPS = frozenset({"Shape", "Size"})  # read only the shape: take any version
# (op, input index) the ONNX spec or TensorRT wants in float32 whatever T is
FP32_ONLY_INPUTS = {("Resize", 1), ("Resize", 2), ("Upsample", 1)}
_NO_KERNEL = re.compile(r"Could not find an implementation for (\w+)\((\d+)\) node with name "
                        r"'([^']*)'")
# how onnx's checker / inference and onnxruntime name a node in their messages
_NODE_IN_MSG = re.compile(r"node name: ([^)\s,]+)|Name: (\S+) OpType|node with name '([^']+)'|"
                          r"[Nn]ode \(([^)\s]+)\)|[Nn]ode '([^']+)'")


@dataclass
class Lowered:
    """The lowered model and what stayed FP32 (node name -> reason)."""

    proto: Any
    low: str
    kept: Dict[str, str] = field(default_factory=dict)
    casts: int = 0
    rounds: int = 1


# --------------------------------------------------------------------------- types per scope
def _graph_attrs(node: Any) -> List[Any]:
    out = []
    for a in node.attribute:
        if a.type == 5:  # GRAPH
            out.append(a.g)
        elif a.type == 10:  # GRAPHS
            out.extend(a.graphs)
    return out


def _graph_attrs_keyed(node: Any) -> List[Any]:
    """(attribute key, body) per body of a node: 'then_branch', 'body', 'graphs:0'..."""
    out = []
    for a in node.attribute:
        if a.type == 5:
            out.append((a.name, a.g))
        elif a.type == 10:
            out.extend((f"{a.name}:{k}", g) for k, g in enumerate(a.graphs))
    return out


def _sub_path(path: str, idx: int, key: str) -> str:
    return f"{path}/{idx}/{key}" if path else f"{idx}/{key}"


def free_names(graph: Any) -> Set[str]:
    """Names a graph reads that it does not define (outer-scope values), bodies included."""
    defined = {vi.name for vi in graph.input} | {t.name for t in graph.initializer} | {""}
    used: Set[str] = set()
    for n in graph.node:
        used.update(x for x in n.input if x not in defined)
        for sub in _graph_attrs(n):
            used.update(x for x in free_names(sub) if x not in defined)
        defined.update(n.output)
    used.update(o.name for o in graph.output if o.name not in defined)
    return used


def _light_init(t: Any) -> Any:
    import onnx

    if t.data_location == onnx.TensorProto.EXTERNAL or t.ByteSize() > 4096:
        nt = onnx.TensorProto()
        nt.name, nt.data_type = t.name, t.data_type
        nt.dims.extend(t.dims)
        return nt
    return t


def scoped_types(model: ModelLike) -> Dict[str, Mapping[str, int]]:
    """graph path ("" main, "3/then_branch" a body, nested "3/body/0/else_branch") -> name -> elem type (0 unknown) for the main graph and every body.

    onnx's inference leaves bodies' value_info empty, so each body is inferred as a model of
    its own whose inputs are its formal inputs plus the outer-scope values it reads."""
    import onnx
    from onnx import helper

    out: Dict[str, Mapping[str, int]] = {}

    def visit(graph: Any, outer: Mapping[str, int], path: str) -> None:
        local: Dict[str, int] = {}
        ins = list(graph.input)
        for name in sorted(free_names(graph)):
            if outer.get(name):
                ins.append(helper.make_tensor_value_info(name, outer[name], None))
        g = helper.make_graph(list(graph.node), graph.name or "g", ins, list(graph.output),
                              [_light_init(t) for t in graph.initializer])
        m = helper.make_model(g, opset_imports=list(model.opset_import))
        m.ir_version = max(model.ir_version, 4)
        m.functions.extend(model.functions)
        try:
            inf = onnx.shape_inference.infer_shapes(m, strict_mode=False)
        except Exception:
            inf = m
        for vi in list(inf.graph.value_info) + list(graph.input) + list(graph.output) + \
                list(graph.value_info):
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
                local[vi.name] = vi.type.tensor_type.elem_type
        for t in graph.initializer:
            local[t.name] = t.data_type
        for n in graph.node:
            if n.op_type == "Constant" and n.output:
                for a in n.attribute:
                    if a.name == "value" and a.type == 4:
                        local[n.output[0]] = a.t.data_type
                    elif a.name in ("value_float", "value_floats"):
                        local[n.output[0]] = FLOAT
        scope = ChainMap(local, outer)  # type: ignore[arg-type]
        out[path] = scope
        for i, n in enumerate(graph.node):
            for key, sub in _graph_attrs_keyed(n):
                visit(sub, scope, _sub_path(path, i, key))

    visit(model.graph, {}, "")
    return out


# --------------------------------------------------------------------------- the plan
def _schema(op: str, opset: int, domain: str = "") -> Any:
    import onnx

    try:
        return onnx.defs.get_schema(op, opset, domain)
    except Exception:
        return None


def _bindings(schema: Any, n_actual: int, formals: Sequence[Any]) -> List[Optional[str]]:
    """Type string (a type parameter like 'T', or a fixed 'tensor(float)') per actual slot."""
    out: List[Optional[str]] = []
    for k in range(n_actual):
        if k < len(formals):
            out.append(formals[k].type_str)
        elif formals and formals[-1].option == formals[-1].option.Variadic:
            out.append(formals[-1].type_str)
        else:
            out.append(None)
    return out


class _NodePlan:
    __slots__ = ("lowered", "low_in", "low_out", "why")

    def __init__(self) -> None:
        self.lowered = False
        self.low_in: Set[int] = set()
        self.low_out: Set[int] = set()
        self.why = ""


def plan_node(node: Any, types: Mapping[str, int], opset: int, low: str, blocked: Set[str],
              excluded: Set[str]) -> _NodePlan:
    """Which operands of `node` become low: those bound to a type parameter that is FLOAT here
    and allows the low type at `opset` (all of them or none, so T stays one type)."""
    p = _NodePlan()
    if node.domain not in ("", "ai.onnx"):
        p.why = f"custom domain '{node.domain}'"
        return p
    if node.name in excluded:
        p.why = "excluded"
        return p
    if _graph_attrs(node):
        p.why = "control flow: its inputs and outputs stay FP32, its body is lowered"
        return p
    if node.op_type in blocked:
        p.why = "stays FP32 by default (type or index op)"
        return p
    schema = _schema(node.op_type, opset)
    if schema is None:
        p.why = f"no schema for {node.op_type} at opset {opset}"
        return p
    ins = _bindings(schema, len(node.input), schema.inputs)
    outs = _bindings(schema, len(node.output), schema.outputs)
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    operands = [(t, x) for t, x in list(zip(ins, node.input)) + list(zip(outs, node.output))
                if x and t]
    # a type parameter that also admits sequences/optionals (Identity's V since opset 16): only
    # an operand that is no plain tensor here (no element type known) keeps the node FP32
    if any(types.get(x, 0) == 0 and any(a.startswith(("seq(", "optional(", "map("))
                                        for a in allowed.get(t, ()))
           for t, x in operands):
        p.why = "sequence/optional operands stay FP32"
        return p
    want = type_str(_low_row(low).onnx_dtype)
    float_params = set()
    bad_params = set()
    for k, name in enumerate(node.input):
        t = ins[k]
        if not name or t not in allowed or (node.op_type, k) in FP32_ONLY_INPUTS:
            continue
        ty = types.get(name, 0)
        if ty == FLOAT:
            float_params.add(t)
        elif ty == 0:
            bad_params.add(t)  # unknown type bound to T: do not guess
    for j, name in enumerate(node.output):
        t = outs[j]
        if name and t in allowed:
            ty = types.get(name, 0)
            if ty == FLOAT:
                float_params.add(t)
            elif ty == 0:
                bad_params.add(t)
    if not float_params:
        return p
    lowerable = {t for t in float_params if want in allowed[t] and t not in bad_params}
    if not lowerable:
        p.why = (f"{node.op_type} takes no {low.upper()} at opset {opset}"
                 if any(want not in allowed[t] for t in float_params)
                 else "an operand's type is unknown")
        return p
    for k, name in enumerate(node.input):
        if name and ins[k] in lowerable and (node.op_type, k) not in FP32_ONLY_INPUTS \
                and types.get(name, 0) == FLOAT:
            p.low_in.add(k)
    for j, name in enumerate(node.output):
        if name and outs[j] in lowerable and types.get(name, 0) == FLOAT:
            p.low_out.add(j)
    p.lowered = bool(p.low_out or p.low_in)
    return p


# --------------------------------------------------------------------------- the rewrite
class _Rewriter:
    def __init__(self, model: Any, low: str, blocked: Set[str], excluded: Set[str],
                 keep_io_types: bool) -> None:
        import ml_dtypes

        self.m, self.low, self.blocked, self.excluded = model, low, blocked, excluded
        self.keep_io = keep_io_types
        import onnx

        self.low_type = _low_row(low).onnx_dtype
        self.low_np = onnx.helper.tensor_dtype_to_np_dtype(self.low_type)
        self.limit = float(ml_dtypes.finfo(self.low_np).max)
        self.opset = next((o.version for o in model.opset_import
                           if o.domain in ("", "ai.onnx")), 0)
        self.types = scoped_types(model)
        self.taken = _all_names(model.graph)
        self.kept: Dict[str, str] = {}
        self.casts = 0

    def fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.taken:
            name, k = f"{base}_{k}", k + 1
        self.taken.add(name)
        return name

    def _to_low(self, arr: np.ndarray) -> np.ndarray:
        a = arr.astype(np.float32)
        a = np.where(np.isfinite(a), np.clip(a, -self.limit, self.limit), a)
        return a.astype(self.low_np)

    def run(self) -> None:
        self.graph(self.m.graph, {}, "")

    def graph(self, g: Any, parent: MutableMapping[str, Dict[int, str]], path: str) -> None:
        from onnx import helper, numpy_helper

        from workbench.precision.streaming import retype_external

        main = path == ""
        types = self.types[path]
        nodes = list(g.node)
        plans = [plan_node(n, types, self.opset, self.low, self.blocked, self.excluded)
                 for n in nodes]
        for n, pl in zip(nodes, plans):
            if not pl.lowered and pl.why and n.op_type not in ("Cast", "Constant", "Shape",
                                                                "Size") and \
                    any(types.get(x) == FLOAT for x in list(n.input) + list(n.output) if x):
                self.kept[n.name or n.output[0]] = pl.why
        # which versions local readers want (for in-place conversion of constants)
        wants: Dict[str, Set[int]] = {}
        for n, pl in zip(nodes, plans):
            for k, x in enumerate(n.input):
                if x and n.op_type not in TYPE_AGNOSTIC_OPS:
                    wants.setdefault(x, set()).add(self.low_type if k in pl.low_in else FLOAT)
            for sub in _graph_attrs(n):
                for x in free_names(sub):
                    wants.setdefault(x, set()).add(FLOAT)  # read in a body: cast there
        outputs = {o.name for o in g.output}
        io_low = main and not self.keep_io
        avail: MutableMapping[str, Dict[int, str]] = ChainMap({}, parent)  # type: ignore
        for vi in g.input:
            if types.get(vi.name) == FLOAT:
                if io_low:
                    vi.type.tensor_type.elem_type = self.low_type
                    avail[vi.name] = {self.low_type: vi.name}
                else:
                    avail[vi.name] = {FLOAT: vi.name}
        inputs = {vi.name for vi in g.input}
        for t in g.initializer:
            if t.data_type != FLOAT or t.name in inputs:
                continue
            if wants.get(t.name) == {self.low_type} and t.name not in outputs:
                if t.data_location == 1:  # external: converted as it is written (streaming)
                    retype_external(t, self.low_type)
                else:
                    t.CopyFrom(numpy_helper.from_array(self._to_low(numpy_helper.to_array(t)),
                                                       t.name))
                avail[t.name] = {self.low_type: t.name}
            else:
                avail[t.name] = {FLOAT: t.name}
        new: List[Any] = []

        def get(name: str, want: int) -> str:
            st = avail.get(name)
            if st is None or want in st:
                return name if st is None else st[want]
            src = next(iter(st.values()))
            suffix = "fp32" if want == FLOAT else self.low
            out = self.fresh(f"{name}__{suffix}")
            new.append(helper.make_node("Cast", [src], [out], name=self.fresh(f"{out}__cast"),
                                        to=want))
            self.casts += 1
            avail[name] = {**st, want: out}
            return out

        for i, (n, pl) in enumerate(zip(nodes, plans)):
            for key, sub in _graph_attrs_keyed(n):
                self.graph(sub, avail, _sub_path(path, i, key))
            if n.op_type == "Constant" and n.output and types.get(n.output[0]) == FLOAT:
                o = n.output[0]
                if wants.get(o) == {self.low_type} and o not in outputs:
                    self._constant_to_low(n)
                    new.append(n)
                    avail[o] = {self.low_type: o}
                    continue
            for k, x in enumerate(n.input):
                if not x or types.get(x) != FLOAT or x not in avail:
                    continue
                if n.op_type in TYPE_AGNOSTIC_OPS:
                    n.input[k] = next(iter(avail[x].values()))
                    continue
                n.input[k] = get(x, self.low_type if k in pl.low_in else FLOAT)
            new.append(n)
            for j, o in enumerate(n.output):
                if not o or types.get(o, 0) != FLOAT:
                    continue
                made = self.low_type if j in pl.low_out else FLOAT
                wanted = (self.low_type if io_low else FLOAT) if o in outputs else made
                if made == wanted:
                    avail[o] = {made: o}
                    continue
                inner = self.fresh(f"{o}__{self.low if made != FLOAT else 'fp32'}")
                n.output[j] = inner
                new.append(helper.make_node("Cast", [inner], [o],
                                            name=self.fresh(f"{o}__cast"), to=wanted))
                self.casts += 1
                avail[o] = {made: inner, wanted: o}
        # graph outputs that no node of this graph produces (inputs, constants, outer values)
        for vo in g.output:
            st = avail.get(vo.name)
            if st is None or types.get(vo.name) != FLOAT:
                continue
            wanted = self.low_type if io_low else FLOAT
            if wanted in st:
                if st[wanted] != vo.name and not main:
                    vo.name = st[wanted]
                continue
            if main:
                vo.type.tensor_type.elem_type = next(iter(st))
                continue
            vo.name = get(vo.name, wanted)
        if io_low:
            for vo in g.output:
                if types.get(vo.name) == FLOAT and vo.name in avail and \
                        self.low_type in avail[vo.name] and avail[vo.name][self.low_type] == vo.name:
                    vo.type.tensor_type.elem_type = self.low_type
        del g.node[:]
        g.node.extend(new)
        del g.value_info[:]  # stale types; consumers re-infer

    def _constant_to_low(self, n: Any) -> None:
        from onnx import helper, numpy_helper

        arr = None
        for a in n.attribute:
            if a.name == "value":
                arr = numpy_helper.to_array(a.t)
            elif a.name == "value_float":
                arr = np.array(a.f, np.float32)
            elif a.name == "value_floats":
                arr = np.array(list(a.floats), np.float32)
        if arr is None:  # pragma: no cover - typed FLOAT only through these attributes
            return
        del n.attribute[:]
        n.attribute.append(helper.make_attribute("value",
                                                 numpy_helper.from_array(self._to_low(arr))))


def _all_names(g: Any) -> Set[str]:
    s: Set[str] = {n.name for n in g.node}
    s.update(vi.name for vi in list(g.input) + list(g.output) + list(g.value_info))
    s.update(t.name for t in g.initializer)
    for n in g.node:
        s.update(n.input)
        s.update(n.output)
        for sub in _graph_attrs(n):
            s.update(_all_names(sub))
    return s


# --------------------------------------------------------------------------- entry point
def lower(proto: Any, low: str = "fp16", *, exclude_nodes: Iterable[str] = (),
          exclude_ops: Iterable[str] = (), keep_io_types: bool = True,
          block_ops: Iterable[str] = BLOCK_OPS, validate: bool = True,
          max_rounds: int = 8) -> Lowered:
    """Return a copy of `proto` with float computation lowered to `low` ("fp16" or "bf16").

    With `validate`, the result passes onnx's full checker and (FP16) loads in onnxruntime; a
    node onnxruntime has no kernel for is kept FP32 and the pass repeats (`max_rounds`).
    Raises WorkbenchError naming the node otherwise."""
    import copy

    row = _low_row(low)
    excluded = set(exclude_nodes)
    blocked = set(block_ops) | set(exclude_ops)
    kernel_kept: Dict[str, str] = {}
    for rnd in range(1, max_rounds + 1):
        m = copy.deepcopy(proto)
        rw = _Rewriter(m, low, blocked, excluded, keep_io_types)
        rw.run()
        kept = dict(rw.kept)
        kept.update(kernel_kept)
        if not validate:
            return Lowered(m, low, kept, rw.casts, rnd)
        check_lowered(m, proto, low)
        if not row.ort_kernels:  # onnxruntime cannot load it to name a missing kernel
            return Lowered(m, low, kept, rw.casts, rnd)
        missing = ort_missing_kernel(m, proto, skip=excluded)
        if missing is None:
            return Lowered(m, low, kept, rw.casts, rnd)
        op, node = missing
        if not node or node in excluded:
            raise WorkbenchError(f"onnxruntime has no FP16 kernel for {op} node '{node}' even "
                                 "after keeping it FP32", node=node or None,
                                 hint=f"exclude its op: --exclude-op {op}")
        excluded.add(node)
        kernel_kept[node] = f"onnxruntime has no FP16 {op} kernel (or refuses its FP16 form)"
    raise WorkbenchError(f"the {low.upper()} model still does not load in onnxruntime after "
                         f"{max_rounds} rounds", hint="exclude the nodes named in "
                         "`kept_fp32` by op type (--exclude-op OP) and report the model")


def check_lowered(m: Any, original: Any, low: str) -> None:
    """onnx's full checker (strict shape inference) on the lowered model; a model whose FP32
    original already fails strict inference gets the structural check only."""
    import onnx

    try:
        onnx.checker.check_model(_checkable(m), full_check=True)
        return
    except Exception as e:
        err = " ".join(str(e).split())
    try:
        onnx.checker.check_model(_checkable(original), full_check=True)
    except Exception:  # then only the structural check, which the original may fail too
        err = structural_error(m)
        if not err or err == structural_error(original):
            return  # (failing the same way as the FP32 original is not the lowering's doing)
    node = _node_of(err, m)
    raise WorkbenchError(f"the {low.upper()} lowering made invalid ONNX"
                         + (f" at node '{node}'" if node else "") + f": {err[:240]}",
                         node=node, hint=(f"keep it FP32 (--exclude {node}) and report the model"
                                          if node else "report the model"))


def structural_error(m: Any) -> str:
    """onnx's structural checker's complaint about `m`, one line ('' when it passes); a model
    too big to serialise is checked without its weight bytes."""
    import onnx

    try:
        onnx.checker.check_model(_checkable(m))
        return ""
    except Exception as e:
        return " ".join(str(e).split())


def _checkable(m: Any) -> Any:
    """The model itself, or (weights held outside it, or too big to serialise) a copy whose
    external or large initializers are typed graph inputs: what onnx's checker and
    onnxruntime's kernel assignment look at stays, no weight is read."""
    big = m.ByteSize() >= (1 << 31) - (1 << 26)
    heavy = {t.name for t in m.graph.initializer
             if t.data_location == 1 or (big and t.ByteSize() > 4096)}
    if not heavy:
        return m
    import copy

    from onnx import helper

    if big:  # (a copy without the heavy tensors' bytes, never a > 2 GB message)
        from workbench.core.model import model_skeleton

        light = model_skeleton(m)
        light.metadata_props.extend(m.metadata_props)
        light.graph.sparse_initializer.extend(m.graph.sparse_initializer)
        light.graph.initializer.extend(copy.deepcopy(t) for t in m.graph.initializer
                                       if t.name not in heavy)
    else:
        light = copy.deepcopy(m)
        keep = [t for t in light.graph.initializer if t.name not in heavy]
        del light.graph.initializer[:]
        light.graph.initializer.extend(keep)
    declared = {vi.name for vi in light.graph.input}
    light.graph.input.extend(
        helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
        for t in m.graph.initializer if t.name in heavy and t.name not in declared)
    if light.ir_version < 4:
        light.ir_version = 4
    return light


def _node_names(g: Any) -> Set[str]:
    out = {n.name for n in g.node if n.name}
    for n in g.node:
        for sub in _graph_attrs(n):
            out |= _node_names(sub)
    return out


def _node_of(msg: str, m: Any) -> Optional[str]:
    names = _node_names(m.graph)
    for groups in _NODE_IN_MSG.findall(msg):
        hit = next((g for g in groups if g), "")
        if hit in names:
            return hit
    for name in sorted(names, key=len, reverse=True):
        if f"'{name}'" in msg or f"({name})" in msg:
            return name
    return None


def _ort_load_error(m: Any) -> Optional[str]:
    """None when onnxruntime CPU loads the model, else its message on one line."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 4  # (its refusal is returned, not printed on stderr)
    # kernels are assigned without optimisations too; constant folding of generated weights
    # (ConstantOfShape) would cost seconds
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        ort.InferenceSession(_checkable(m).SerializeToString(), so,
                             providers=["CPUExecutionProvider"])
        return None
    except Exception as e:
        return " ".join(str(e).split())


def _function_node(m: Any, skip: Any = ()) -> Optional[tuple]:
    """(op, node) of the first node of the main graph (not in `skip`) whose standard op is
    defined by a function body (onnxruntime expands it), or None."""
    import onnx

    version = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), None)
    for n in m.graph.node:
        if n.domain not in ("", "ai.onnx") or not n.name or n.name in skip:
            continue
        try:
            schema = onnx.defs.get_schema(n.op_type, version) if version else \
                onnx.defs.get_schema(n.op_type)
        except Exception:
            continue
        if getattr(schema, "has_function", False) or \
                getattr(schema, "has_context_dependent_function", False):
            return n.op_type, n.name
    return None


def ort_missing_kernel(m: Any, original: Any = None, skip: Any = ()) -> Optional[tuple]:
    """None when onnxruntime CPU loads the model (or cannot load the FP32 `original` either:
    custom ops, plugins); (op, node) when a node lacks a kernel. Other load failures are a
    WorkbenchError naming the node where the message does."""
    msg = _ort_load_error(m)
    if msg is None or "2GB" in msg or "protobuf" in msg.lower():
        return None  # loaded, or too big to load from bytes: the checker's word stands
    if original is not None and _ort_load_error(original) is not None:
        return None  # the FP32 model does not load either: nothing the lowering broke
    hit = _NO_KERNEL.search(msg)
    if hit:
        return hit.group(1), hit.group(3)
    node = _node_of(msg, m)
    if node is None and re.search(r"Type Error|bound to different types", msg):
        # a type clash inside the body onnxruntime expands a function op into (e.g.
        # MeanVarianceNormalization: its float constants meet FP16 tensors): keep that op FP32
        fn = _function_node(m, skip)
        if fn is not None:
            return fn
    raise WorkbenchError("onnxruntime cannot load the lowered model"
                         + (f" (node '{node}')" if node else "") + f": {msg[:240]}",
                         node=node, hint=(f"keep it FP32 (--exclude {node})" if node
                                          else "report the model"))
