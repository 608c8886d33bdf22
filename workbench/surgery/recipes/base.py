"""What a recipe is: a named, parameterised graph edit with a precondition that explains itself.

A recipe works on an in-memory `onnx.ModelProto` with weights. `precondition(model, **params)`
returns a `Precondition` (unpacks as `applies, reason, nodes`) saying *why* it applies to which
nodes, or why not; `apply(model, **params)` returns a new ModelProto and never mutates its input.
`preserves_semantics` says whether the result must compute the same outputs (then the caller
verifies it with onnxruntime and refuses to keep a change that differs).

A recipe also describes what it is for: `fixes` lists the Finding codes
(`workbench.support.codes` constants or static rule ids) it can address, `ops` narrows that to
nodes of those op types, and `propose(finding, ctx)` returns the `Proposal`s it makes for one
finding (with parameters), so `workbench.surgery.propose` routes on codes and knows no recipe
by name. Recipes register themselves with `@register` in any module of this package.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import (TYPE_CHECKING, Any, Callable, Dict, List, NamedTuple, Optional,
                    Sequence, Tuple)

from workbench.core.errors import WorkbenchError
from workbench.core.model import ModelLike, as_model

if TYPE_CHECKING:  # annotations only: onnx and friends load when a recipe runs
    from workbench.core.findings import NextStep
    import numpy as np
    import onnx
    import onnx_graphsurgeon as gs


class Precondition(NamedTuple):
    """Does a recipe apply? `reason` reads "applies to node X because ..." or why it refuses."""

    applies: bool
    reason: str
    nodes: List[str]

    def to_dict(self) -> Dict[str, Any]:
        return {"applies": self.applies, "reason": self.reason, "nodes": list(self.nodes)}


@dataclass
class Param:
    """One recipe parameter: its type (for CLI parsing), default and a one-line meaning."""

    name: str
    type: str  # "str" | "int" | "float" | "bool" | "list[str]" | "shape" | "dict"
    default: Any = None
    help: str = ""
    required: bool = False


@dataclass
class Proposal:
    """A recipe suggested for a failing node; `auto` proposals are safe to apply unattended."""

    node: str
    op: str
    recipe: str
    params: Dict[str, Any]
    reason: str
    auto: bool = True
    code: str = ""  # the Finding code it answers

    def to_dict(self) -> Dict[str, Any]:
        return {"node": self.node, "op": self.op, "recipe": self.recipe, "params": self.params,
                "reason": self.reason, "auto": self.auto, "code": self.code}

    @property
    def key(self) -> str:
        return f"{self.recipe}:{sorted(self.params.items())}"


class ProposeContext:
    """What recipes look at while proposing for one model: the proto, its node ids, the node a
    finding names, and a per-model cache for analyses several findings share."""

    def __init__(self, proto: Any) -> None:
        self.proto = proto
        self.ids = node_ids(proto)
        self.cache: Dict[str, Any] = {}

    def node_index(self, finding: Any) -> Optional[int]:
        """Index of the finding's node (by id or name; else the only node of its op)."""
        node = finding.nodes[0] if finding.nodes else ""
        if node:
            from workbench.core.graphindex import GraphIndex

            hits = GraphIndex.of(self.proto).find(node)
            if len(hits) == 1:
                return hits[0]
            if hits:  # a name several nodes share names none of them (never a guess)
                return None
        if finding.op:
            hits = [i for i, n in enumerate(self.proto.graph.node) if n.op_type == finding.op]
            if len(hits) == 1:
                return hits[0]
        return None

    def cached(self, key: str, make: Callable[[], Any]) -> Any:
        if key not in self.cache:
            self.cache[key] = make()
        return self.cache[key]


class Recipe:
    """Base class; subclasses set name/summary/params/preserves_semantics and implement
    `precondition` and `_apply`; recipes that can fix findings set `fixes` (and `ops`) and
    implement `propose`."""

    name: str = ""
    summary: str = ""
    params: Sequence[Param] = ()
    preserves_semantics: bool = True
    mutates_input: bool = True  # False: _apply builds a new proto, so no defensive deep copy
    fixes: Tuple[str, ...] = ()   # Finding codes it can fix (codes.ANY_NODE: any node's)
    ops: Tuple[str, ...] = ()     # only findings on nodes of these op types (empty: any)
    priority: int = 50            # proposals of lower numbers are tried first
    # what a kept change costs, said wherever it is applied (CLI --auto log, FixPanel)
    cost: Optional[str] = None

    def can_fix(self, finding: Any, ctx: "ProposeContext") -> bool:
        """Whether this recipe is one to ask about `finding` (by code, then op)."""
        if finding.code not in self.fixes and not ("*" in self.fixes and finding.nodes):
            return False
        if not self.ops:
            return True
        idx = ctx.node_index(finding)
        return idx is not None and ctx.proto.graph.node[idx].op_type in self.ops

    def propose(self, finding: Any, ctx: "ProposeContext") -> List["Proposal"]:
        """Proposals for one finding (an auto one ends the search for it); none by default."""
        return []

    def next_step(self, finding: Any, ctx: "ProposeContext") -> Optional["NextStep"]:
        """The finding's next step (a NextStep record, mostly `fix_step`), if this recipe has
        one to offer whatever its precondition says (see `workbench.surgery.propose.advise`)."""
        return None

    def retracts(self, finding: Any, ctx: "ProposeContext") -> Optional[Tuple[str, str]]:
        """(the words of the backend's hint that advise this recipe's rewrite, why it does not
        apply to the finding's node) where it does not: `advise` drops the words and says why,
        so no next step names a rewrite that fails when run. None by default."""
        return None

    # (model, **the recipe's own parameters): each recipe declares the parameters it takes
    def precondition(self, *args: Any, **params: Any) -> Precondition:  # pragma: no cover
        raise NotImplementedError

    def _apply(self, *args: Any, **params: Any) -> "onnx.ModelProto":
        raise NotImplementedError  # pragma: no cover

    def apply(self, model: ModelLike, **params: Any) -> "onnx.ModelProto":  # noqa: F821
        """Check the precondition, then return the edited copy (the input is left untouched)."""
        proto = as_model(model).with_weights()
        p = self.bind(params)
        pre = self.precondition(proto, **p)
        if not pre.applies:
            raise WorkbenchError(f"recipe '{self.name}' does not apply: {pre.reason}",
                                 node=(pre.nodes[0] if pre.nodes else None),
                                 hint="`workbench check MODEL` names the fixes that apply to "
                                 "each failing node")
        out = self._apply(copy.deepcopy(proto) if self.mutates_input else proto, **p)
        _pause_hook("apply", self.name)
        return out

    def bind(self, params: Dict[str, Any]) -> Dict[str, Any]:
        """Fill defaults, reject unknown or missing parameters with a clear error."""
        known = {p.name: p for p in self.params}
        unknown = sorted(set(params) - set(known))
        if unknown:
            raise WorkbenchError(f"recipe '{self.name}' has no parameter(s) {', '.join(unknown)}",
                                 field=unknown[0],
                                 hint=f"parameters: {', '.join(known) or '(none)'}")
        out = {}
        for name, p in known.items():
            if name in params and params[name] is not None:
                out[name] = params[name]
            elif p.required:
                raise WorkbenchError(f"recipe '{self.name}' needs parameter '{name}' ({p.help})",
                                     field=name, hint=f"e.g. --recipe {self.name}:{name}=...")
            else:
                out[name] = p.default
        return out

    def describe(self) -> Dict[str, Any]:
        return {"name": self.name, "summary": self.summary,
                "preserves_semantics": self.preserves_semantics, "fixes": list(self.fixes),
                "params": [{"name": p.name, "type": p.type, "default": p.default, "help": p.help,
                            "required": p.required} for p in self.params]}


def _pause_hook(point: str, recipe: str) -> None:
    """Test hook: WORKBENCH_SURGERY_PAUSE="<point>:<seconds>" sleeps at a named point so a test
    can kill the process mid-recipe. Prints a marker line to stderr first."""
    import os
    import sys
    import time

    spec = os.environ.get("WORKBENCH_SURGERY_PAUSE", "")
    if not spec:
        return
    want, _, secs = spec.partition(":")
    if want == point:
        sys.stderr.write(f"WORKBENCH_SURGERY_PAUSED {point} {recipe}\n")
        sys.stderr.flush()
        time.sleep(float(secs or 60))


# ---------------------------------------------------------------------------- model helpers

def fix_step(recipe: str, why: str) -> "NextStep":
    """The next step that applies `recipe` (NAME or NAME:k=v,...) to the finding's model: with
    the -o fix requires ({stem}.fixed.onnx beside it, never over the original)."""
    from workbench.core.findings import step

    return step("fix", "{model}", o="{fixed}", recipe=recipe, why=why)


def node_ids(proto: "onnx.ModelProto") -> List[str]:  # noqa: F821
    """Stable node ids of the main graph (`workbench.core.graphindex.stable_node_ids`)."""
    from workbench.core.graphindex import stable_node_ids

    return stable_node_ids(proto.graph)


def find_node_index(proto: "onnx.ModelProto", node: str) -> int:  # noqa: F821
    """Index in graph.node of a node given by stable id or by a name only it has; an ambiguous
    or unknown name is a clear error naming the candidates (`GraphIndex.node_index`)."""
    from workbench.core.graphindex import GraphIndex

    return GraphIndex.of(proto).node_index(node)


def label(proto: "onnx.ModelProto", idx: int) -> str:  # noqa: F821
    return node_ids(proto)[idx]


def gs_import(proto: "onnx.ModelProto") -> "gs.Graph":  # noqa: F821
    import onnx_graphsurgeon as gs

    return gs.import_onnx(proto)


def gs_export(graph: Any, like: "onnx.ModelProto") -> "onnx.ModelProto":  # noqa: F821
    """Export a gs graph keeping the original model's IR version, opsets and metadata."""
    import onnx_graphsurgeon as gs

    out = gs.export_onnx(graph, do_type_check=False)
    out.ir_version = like.ir_version
    out.producer_name = like.producer_name
    out.producer_version = like.producer_version
    out.model_version = like.model_version
    del out.metadata_props[:]
    out.metadata_props.extend(like.metadata_props)
    have = {o.domain: o.version for o in out.opset_import}
    for o in like.opset_import:
        if o.domain not in have:
            out.opset_import.append(o)
    # keep function definitions the original carried
    if len(like.functions) and not len(out.functions):
        out.functions.extend(like.functions)
    return out


def opset_of(proto: "onnx.ModelProto", domain: str = "") -> int:  # noqa: F821
    for o in proto.opset_import:
        if o.domain in (domain, "ai.onnx" if domain == "" else domain):
            return int(o.version)
    return 0


def constant_value(proto_or_graph: Any, name: str) -> Optional["np.ndarray"]:  # noqa: F821
    """The value of an initializer or Constant-node output, else None."""
    import onnx
    from onnx import numpy_helper

    g = proto_or_graph.graph if isinstance(proto_or_graph, onnx.ModelProto) else proto_or_graph
    for t in g.initializer:
        if t.name == name:
            return numpy_helper.to_array(t)
    for n in g.node:
        if n.op_type == "Constant" and n.output and n.output[0] == name:
            for a in n.attribute:
                if a.name == "value":
                    return numpy_helper.to_array(a.t)
                if a.name == "value_float":
                    import numpy as np
                    return np.array(a.f, dtype=np.float32)
                if a.name == "value_int":
                    import numpy as np
                    return np.array(a.i, dtype=np.int64)
                if a.name == "value_ints":
                    import numpy as np
                    return np.array(list(a.ints), dtype=np.int64)
                if a.name == "value_floats":
                    import numpy as np
                    return np.array(list(a.floats), dtype=np.float32)
    return None


def consumers(proto: "onnx.ModelProto", tensor: str) -> List[int]:  # noqa: F821
    """Indices of the nodes reading `tensor`, in graph order (from the graph index)."""
    from workbench.core.graphindex import GraphIndex

    return GraphIndex.of(proto).consumers_of(tensor)


def tensor_types(proto: "onnx.ModelProto") -> Dict[str, Tuple[int, Optional[List[Any]]]]:  # noqa: F821
    """name -> (elem_type, shape as list of int|str|None, or None when unknown)."""
    out: Dict[str, Tuple[int, Optional[List[Any]]]] = {}
    g = proto.graph
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        tt = vi.type.tensor_type
        shape = None
        if tt.HasField("shape"):
            shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                     for d in tt.shape.dim]
        out[vi.name] = (tt.elem_type, shape)
    for t in g.initializer:
        out[t.name] = (t.data_type, list(t.dims))
    return out


def unique_name(taken: set, base: str) -> str:
    if base not in taken:
        taken.add(base)
        return base
    k = 1
    while f"{base}_{k}" in taken:
        k += 1
    taken.add(f"{base}_{k}")
    return f"{base}_{k}"


def all_names(proto: "onnx.ModelProto") -> set:  # noqa: F821
    g = proto.graph
    s = {n.name for n in g.node}
    for n in g.node:
        s.update(n.input)
        s.update(n.output)
    s.update(i.name for i in g.input)
    s.update(i.name for i in g.initializer)
    return s


def light_copy(proto: "onnx.ModelProto", max_bytes: int = 4096) -> "onnx.ModelProto":  # noqa: F821
    """A copy of the model without large initializer bytes (dims and dtypes kept; small ones
    kept whole for shape data propagation). Never copies the big weights."""
    import onnx

    from workbench.core.model import model_skeleton

    light = model_skeleton(proto)
    g, lg = proto.graph, light.graph
    for t in g.initializer:
        if _nbytes(t) <= max_bytes and t.data_location != onnx.TensorProto.EXTERNAL:
            lg.initializer.append(t)
        else:
            nt = lg.initializer.add()
            nt.name, nt.data_type = t.name, t.data_type
            nt.dims.extend(t.dims)
    return light


def infer_types(proto: "onnx.ModelProto", data_prop: bool = True) -> "onnx.ModelProto":  # noqa: F821
    """ONNX shape inference on a light copy; returns that light model (value_info filled)."""
    import onnx

    light = light_copy(proto)
    try:
        return onnx.shape_inference.infer_shapes(light, strict_mode=False, data_prop=data_prop)
    except Exception:
        return light


def infer_structure_shapes(proto: "onnx.ModelProto", data_prop: bool = True,  # noqa: F821
                           inplace: bool = False) -> "onnx.ModelProto":  # noqa: F821
    """The model with value_info (and unknown output types) filled in by shape inference, run on
    a light copy so big weights are never serialised for it. A copy unless `inplace`."""
    inferred = infer_types(proto, data_prop)
    out = proto if inplace else copy.deepcopy(proto)
    del out.graph.value_info[:]
    out.graph.value_info.extend(inferred.graph.value_info)
    inferred_out = {o.name: o for o in inferred.graph.output}
    for o in out.graph.output:
        tt = o.type.tensor_type
        if (not tt.elem_type or not tt.HasField("shape")) and o.name in inferred_out:
            o.CopyFrom(inferred_out[o.name])
    return out


def _nbytes(t: Any) -> int:
    n = 1
    for d in t.dims:
        n *= int(d)
    return n * 4


def _dom(d: str) -> str:
    return "" if d in ("", "ai.onnx") else d


REGISTRY: Dict[str, Recipe] = {}


def register(cls: type) -> type:
    """Class decorator: make the recipe known by its name (a module defining one needs no
    import anywhere else: `workbench.surgery.recipes` imports every module of the package)."""
    inst = cls()
    REGISTRY[inst.name] = inst
    return cls
