"""Fix what TensorRT cannot parse: apply recipes with verification, diff and proposals.

    from workbench.surgery.changes import apply_recipe, propose, auto_fix
    change = apply_recipe("model.onnx", "fold_constants")        # -> Change (not saved)
    result = auto_fix("model.onnx", backend="tensorrt-rtx")      # every step saved in history

`apply_recipe` checks the recipe's precondition, applies it, runs before/after with onnxruntime
(recipes that preserve semantics must stay within 1e-5, else the change is not kept unless
`force=True`), and diffs the graphs. `workbench.surgery.history.History` stores kept changes as versions.
`auto_fix` asks the real parser (`workbench.support.checker.check`), proposes a recipe per failing node,
applies one at a time and re-checks after each, until the model is supported or nothing is left.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

from workbench.equivalence import Verification, verify
from workbench.errors import WorkbenchError
from workbench.surgery.recipes import Precondition, as_proto, get_recipe, list_recipes  # noqa: F401
from workbench.surgery.recipes.base import (find_node_index, infer_structure_shapes, infer_types, node_ids,
                                    tensor_types)

__all__ = ["Change", "Proposal", "AutoFixResult", "apply_recipe", "prepare_change", "judge",
           "diff_models", "propose",
           "auto_fix", "list_recipes", "get_recipe", "parse_recipe_arg"]


@dataclass
class Change:
    """One applied recipe: the new model, its diff and verdict, and whether it was kept."""

    recipe: str
    params: Dict[str, Any]
    precondition: Dict[str, Any]
    preserves_semantics: bool
    verification: Optional[Verification]
    diff: Dict[str, Any]
    kept: bool
    note: str = ""
    forced: bool = False
    proto: Any = None
    version: Optional[str] = None
    parent: Optional[str] = None

    def to_dict(self) -> Dict[str, Any]:
        return {"recipe": self.recipe, "params": self.params, "precondition": self.precondition,
                "preserves_semantics": self.preserves_semantics,
                "verification": self.verification.to_dict() if self.verification else None,
                "diff": self.diff, "kept": self.kept, "note": self.note, "forced": self.forced,
                "version": self.version, "parent": self.parent}


def _semantics(recipe: Any, proto: Any, params: Dict[str, Any]) -> bool:
    fn = getattr(recipe, "semantics_preserved", None)
    return bool(fn(proto, **params)) if fn else bool(recipe.preserves_semantics)


def apply_recipe(model: Any, name: str, params: Optional[Dict[str, Any]] = None, *,
                 verify_outputs: bool = True, inputs: Optional[Dict[str, Any]] = None,
                 force: bool = False, seed: int = 0, tol: float = 1e-5) -> Change:
    """Apply recipe `name` to `model` (path, Model or ModelProto); the input is never modified.

    The change is `kept` unless the recipe should preserve semantics and onnxruntime shows the
    outputs differ beyond `tol` (then only `force=True` keeps it)."""
    proto = as_proto(model)
    change = prepare_change(proto, name, params)
    if verify_outputs:
        judge(change, verify(proto, change.proto, inputs, seed=seed, tol=tol), force)
    return change


def prepare_change(proto: Any, name: str, params: Optional[Dict[str, Any]] = None) -> Change:
    """Precondition, apply and diff (no verification yet): a kept, unverified Change."""
    recipe = get_recipe(name)
    p = recipe.bind(dict(params or {}))
    pre = recipe.precondition(proto, **p)
    if not pre.applies:
        raise WorkbenchError(f"recipe '{name}' does not apply: {pre.reason}",
                             node=pre.nodes[0] if pre.nodes else None,
                             hint="pick another recipe, or see the proposals (`workbench fix --json`)")
    after = recipe.apply(proto, **p)
    return Change(recipe=name, params=_jsonable(p), precondition=pre.to_dict(),
                  preserves_semantics=_semantics(recipe, proto, p), verification=None,
                  diff=diff_models(proto, after), kept=True, proto=after)


def judge(change: Change, ver: Verification, force: bool = False) -> Change:
    """Record the verification and decide whether the change is kept."""
    change.verification = ver
    exact = change.preserves_semantics
    change.kept, change.note, change.forced = True, "", False
    if ver.status == "different":
        if exact and not force:
            change.kept = False
            change.note = ("not kept: the recipe should preserve the outputs but "
                           f"{ver.reason or f'they differ by {ver.max_abs_diff:.3g}'}; "
                           "use force=True (--force) to keep it anyway")
        elif exact:
            change.note, change.forced = "kept because forced, although the outputs differ", True
        else:
            change.note = "this recipe changes what the model computes (expected)"
    elif ver.status == "unverified":
        change.note = f"kept unverified: {ver.reason}"
    return change


def _jsonable(d: Dict[str, Any]) -> Dict[str, Any]:
    out = {}
    for k, v in d.items():
        if isinstance(v, tuple):
            v = list(v)
        out[k] = v
    return out


# ------------------------------------------------------------------------------------ diff

def _node_key(n: Any) -> str:
    return n.name if n.name else f"{n.op_type}->{','.join(n.output)}"


def _node_sig(n: Any) -> tuple:
    return (n.op_type, n.domain, tuple(n.input), tuple(n.output),
            tuple(sorted(a.SerializeToString() for a in n.attribute)))


def diff_models(before: Any, after: Any) -> Dict[str, Any]:
    """Nodes added/removed/changed (by stable id) and tensors whose dtype or shape changed."""
    from onnx import helper

    a, b = before.graph, after.graph
    ida, idb = node_ids(before), node_ids(after)
    ka = {_node_key(n): (i, n) for i, n in enumerate(a.node)}
    kb = {_node_key(n): (i, n) for i, n in enumerate(b.node)}
    removed = [ida[ka[k][0]] for k in ka if k not in kb]
    added = [idb[kb[k][0]] for k in kb if k not in ka]
    changed = []
    for k in ka:
        if k in kb and _node_sig(ka[k][1]) != _node_sig(kb[k][1]):
            changed.append(idb[kb[k][0]])
    ta = tensor_types(infer_types(before))
    tb = tensor_types(infer_types(after))

    def fmt(t: Any) -> Dict[str, Any]:
        dt, shp = t
        name = helper.tensor_dtype_to_np_dtype(dt).name if dt else None
        return {"dtype": name, "shape": shp}

    tensors = []
    for name in sorted(set(ta) & set(tb)):
        if ta[name] != tb[name] and tb[name][0]:
            if ta[name][1] is None and ta[name][0] in (0, tb[name][0]):
                continue  # newly inferred, not changed
            tensors.append({"tensor": name, "before": fmt(ta[name]), "after": fmt(tb[name])})
    inits_a = {t.name for t in a.initializer}
    inits_b = {t.name for t in b.initializer}
    return {"nodes_added": added, "nodes_removed": removed, "nodes_changed": changed,
            "tensors_changed": tensors,
            "initializers_added": sorted(inits_b - inits_a)[:50],
            "initializers_removed": sorted(inits_a - inits_b)[:50],
            "node_count": [len(a.node), len(b.node)],
            "inputs": [[i.name for i in a.input if i.name not in inits_a],
                       [i.name for i in b.input if i.name not in inits_b]],
            "outputs": [[o.name for o in a.output], [o.name for o in b.output]],
            "summary": f"+{len(added)} -{len(removed)} ~{len(changed)} nodes, "
                       f"{len(tensors)} tensor(s) changed type/shape"}


# ------------------------------------------------------------------------------- proposals

@dataclass
class Proposal:
    """A recipe suggested for a failing node; `auto` proposals are safe to apply unattended."""

    node: str
    op: str
    recipe: str
    params: Dict[str, Any]
    reason: str
    auto: bool = True

    def to_dict(self) -> Dict[str, Any]:
        return {"node": self.node, "op": self.op, "recipe": self.recipe, "params": self.params,
                "reason": self.reason, "auto": self.auto}

    @property
    def key(self) -> str:
        return f"{self.recipe}:{sorted(self.params.items())}"


def _unsupported(report: Any) -> List[Dict[str, Any]]:
    items = getattr(report, "unsupported", None)
    if items is None and isinstance(report, dict):
        items = report.get("unsupported", [])
    out = []
    for it in items or []:
        d = it if isinstance(it, dict) else getattr(it, "__dict__", {})
        out.append({"node": d.get("node") or "", "op": d.get("op") or "",
                    "reason": d.get("reason") or "", "source": d.get("source") or ""})
    return out


def _resolve(proto: Any, node: str, op: str) -> Optional[int]:
    """The node a report entry names (id or unique name); a name several nodes share names
    none of them (never a guess); without a name, the only node of that op."""
    if node:
        from workbench.graphindex import GraphIndex

        hits = GraphIndex.of(proto).find(node)
        if len(hits) == 1:
            return hits[0]
        if hits:
            return None
    if op:
        hits = [i for i, n in enumerate(proto.graph.node) if n.op_type == op]
        if len(hits) == 1:
            return hits[0]
    return None


def propose(report: Any, model: Any) -> List[Proposal]:
    """Recipes for each failing node of a support report, most specific first; only proposals
    whose precondition applies are returned (manual ones, like plugins, have auto=False)."""
    from workbench.surgery.recipes.cleanup import foldable_nodes
    from workbench.surgery.recipes.decompose import find_decomposition

    proto = as_proto(model)
    ids = node_ids(proto)
    fold = None
    out: List[Proposal] = []
    seen = set()

    def add(p: Proposal) -> None:
        if (p.key, p.node) not in seen:
            seen.add((p.key, p.node))
            out.append(p)

    for item in _unsupported(report):
        idx = _resolve(proto, item["node"], item["op"])
        reason_l = item["reason"].lower()
        if "duplicate" in reason_l:
            pre = get_recipe("rename_duplicates").precondition(proto)
            if pre.applies:
                add(Proposal(item["node"], item["op"], "rename_duplicates", {}, pre.reason))
            continue
        if idx is None:
            continue
        n = proto.graph.node[idx]
        nid = ids[idx]
        if n.op_type in ("QuantizeLinear", "DequantizeLinear"):
            q = n
            if n.op_type == "DequantizeLinear":
                prod = [m for m in proto.graph.node if n.input[0] in m.output]
                q = prod[0] if prod else n
            qid = ids[list(proto.graph.node).index(q)]
            pre = get_recipe("symmetric_qdq").precondition(proto, node=qid)
            add(Proposal(qid, q.op_type, "symmetric_qdq", {"node": qid}, pre.reason,
                         auto=pre.applies))
            if pre.applies:
                continue
        if fold is None:
            fold = {f["node"] for f in foldable_nodes(proto)}
        if nid in fold:
            pre = get_recipe("fold_constants").precondition(proto)
            if pre.applies and nid in pre.nodes:
                add(Proposal(nid, n.op_type, "fold_constants", {},
                             f"node {nid} has only constant inputs: folding replaces it by its value"))
                continue
        if find_decomposition(n) is not None:
            pre = get_recipe("decompose").precondition(proto, node=nid, op=None)
            if pre.applies:
                add(Proposal(nid, n.op_type, "decompose", {"node": nid}, pre.reason))
                continue
            blocked = pre.reason
            # a static-shape precondition may be met by fixing the input shapes first
            if "dynamic" in blocked:
                add(Proposal(nid, n.op_type, "set_input_shapes", {"shapes": None}, blocked,
                             auto=False))
        if "plugin" in reason_l or n.domain not in ("", "ai.onnx"):
            add(Proposal(nid, n.op_type, "replace_with_plugin",
                         {"nodes": [nid], "plugin": n.op_type, "version": "1", "namespace": ""},
                         "no exact rewrite is registered; if you have a TensorRT plugin that "
                         "implements it, replace the node and load the plugin library",
                         auto=False))
    return out


# -------------------------------------------------------------------------------- auto-fix

@dataclass
class AutoFixResult:
    """What auto_fix did: every step, the support verdict before/after, end-to-end check."""

    supported: bool
    steps: List[Dict[str, Any]] = field(default_factory=list)
    support_before: Optional[Dict[str, Any]] = None
    support_after: Optional[Dict[str, Any]] = None
    verification: Optional[Verification] = None
    remaining: List[Dict[str, Any]] = field(default_factory=list)
    version: Optional[str] = None
    stop_reason: str = ""

    def to_dict(self) -> Dict[str, Any]:
        return {"supported": self.supported, "steps": self.steps,
                "support_before": self.support_before, "support_after": self.support_after,
                "verification": self.verification.to_dict() if self.verification else None,
                "remaining": self.remaining, "version": self.version,
                "stop_reason": self.stop_reason}


def _report_dict(report: Any) -> Dict[str, Any]:
    if hasattr(report, "to_dict"):
        return report.to_dict()
    return dict(report) if isinstance(report, dict) else {"report": str(report)}


def _supported(report: Any) -> bool:
    return bool(getattr(report, "supported", None) if not isinstance(report, dict)
                else report.get("supported"))


def default_checker(backend: str = "tensorrt-rtx", client: Any = None) -> Callable[[Any], Any]:
    """`workbench.support.checker.check` with the real parser of `backend`."""
    def check(path: Any) -> Any:
        try:
            from workbench.support.checker import check as support_check
        except ImportError as e:  # the support module is part of this package
            raise WorkbenchError(f"workbench.support.checker is not available ({e})",
                                 hint="reinstall trt-workbench") from None
        return support_check(path, backend=backend, client=client)
    return check


def auto_fix(model: Any, *, backend: str = "tensorrt-rtx", history: Any = None,
             check: Optional[Callable[[Any], Any]] = None, max_steps: int = 20,
             force: bool = False, on_step: Optional[Callable[[Dict[str, Any]], None]] = None,
             client: Any = None, inputs: Optional[Dict[str, Any]] = None) -> AutoFixResult:
    """Propose, apply (one at a time), re-check with the real parser; stop when supported or
    out of proposals. Every kept step is a new version in the model's history."""
    from workbench.surgery.history import History

    hist = history if history is not None else History(model)
    checker = check or default_checker(backend, client)
    report = checker(hist.current_path())
    result = AutoFixResult(supported=_supported(report), support_before=_report_dict(report))
    tried: set = set()
    for _ in range(max_steps):
        if _supported(report):
            result.stop_reason = "supported"
            break
        props = [p for p in propose(report, hist.current_proto())
                 if p.auto and (p.key, p.node) not in tried]
        if not props:
            result.stop_reason = "no more proposals"
            break
        p = props[0]
        tried.add((p.key, p.node))
        try:
            change = hist.apply(p.recipe, p.params, force=force, inputs=inputs)
        except WorkbenchError as e:
            step = {"proposal": p.to_dict(), "kept": False, "error": e.one_line()}
            result.steps.append(step)
            if on_step:
                on_step(step)
            continue
        step = {"proposal": p.to_dict(), **change.to_dict()}
        if change.kept:
            report = checker(hist.current_path())
            step["supported_after"] = _supported(report)
            step["unsupported_after"] = _unsupported(report)
        result.steps.append(step)
        if on_step:
            on_step(step)
    else:
        result.stop_reason = "step limit reached"
    result.supported = _supported(report)
    result.support_after = _report_dict(report)
    result.remaining = _unsupported(report)
    result.version = hist.current
    kept = [s for s in result.steps if s.get("kept")]
    if len(kept) == 1 and kept[0].get("verification"):
        result.verification = Verification.from_dict(kept[0]["verification"])
    elif kept:
        result.verification = verify(hist.version_path(hist.original), hist.current_path(), inputs)
    return result


def parse_recipe_arg(text: str) -> tuple:
    """'name:k=v,k2=v2' -> (name, params). Lists use ';' or '+' inside a value (a+b), dicts
    use '/' (shapes=input/Nx3x32x32)."""
    name, _, rest = text.partition(":")
    name = name.strip()
    recipe = get_recipe(name)
    types = {p.name: p.type for p in recipe.params}
    params: Dict[str, Any] = {}
    for part in [s for s in rest.split(",") if s.strip()]:
        if "=" not in part:
            raise WorkbenchError(f"recipe parameter '{part}' is not k=v", field=name,
                                 hint=f"e.g. --recipe {name}:key=value")
        k, v = (s.strip() for s in part.split("=", 1))
        if k not in types:
            raise WorkbenchError(f"recipe '{name}' has no parameter '{k}'", field=k,
                                 hint=f"parameters: {', '.join(types) or '(none)'}")
        t = types[k]
        try:
            if t == "int":
                params[k] = int(v)
            elif t == "float":
                params[k] = float(v)
            elif t == "bool":
                params[k] = v.lower() in ("1", "true", "yes", "on")
            elif t == "list[str]":
                params[k] = [s for s in v.replace("+", ";").split(";") if s]
            elif t == "dict":
                d = params.setdefault(k, {})
                for item in v.split(";"):
                    kk, _, vv = item.partition("/")
                    if not vv:
                        raise ValueError(f"'{item}' is not key/value")
                    d[kk] = vv
            else:
                params[k] = v
        except ValueError as e:
            raise WorkbenchError(f"bad value for {name}:{k} ({e})", field=k) from None
    return name, params
