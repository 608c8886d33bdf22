"""Apply recipes with verification and diff: one `Change` per recipe run.

    from workbench.surgery.changes import apply_recipe, apply_in_history
    change = apply_recipe("model.onnx", "fold_constants")        # -> Change (not saved)
    change = apply_in_history(history, "decompose", {"node": "/act/FastGelu"})  # a version

`apply_recipe` checks the recipe's precondition, applies it, runs before/after with onnxruntime
(recipes that preserve semantics must stay within 1e-5, else the change is not kept unless
`force=True`), and diffs the graphs. `apply_in_history` does the same on a History's current
version and stores a kept change as its new version. `verify_models` is the one place that
compares two models' outputs (checking, proposing and the whole loop are
`workbench.surgery.session.FixSession`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

from workbench.runtime.equivalence import Verification, verify
from workbench.core.errors import WorkbenchError
from workbench.core.findings import step
from workbench.core.model import ModelLike, as_model
from workbench.surgery.recipes import Precondition, Proposal, get_recipe, list_recipes  # noqa: F401
from workbench.surgery.recipes.base import infer_types, node_ids, tensor_types

__all__ = ["Change", "Proposal", "apply_recipe", "apply_in_history", "prepare_change", "judge",
           "verify_models", "diff_models", "list_recipes", "get_recipe", "parse_recipe_arg"]


def verify_models(before: Any, after: Any, inputs: Optional[Dict[str, Any]] = None, *,
                  paths: Optional[tuple] = None, seed: int = 0,
                  tol: float = 1e-5) -> Verification:
    """Run both models (onnxruntime) on the same inputs and compare their outputs: every
    verification of surgery goes through here."""
    return verify(before, after, inputs, seed=seed, tol=tol, paths=paths)


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


def apply_recipe(model: ModelLike, name: str, params: Optional[Dict[str, Any]] = None, *,
                 verify_outputs: bool = True, inputs: Optional[Dict[str, Any]] = None,
                 force: bool = False, seed: int = 0, tol: float = 1e-5) -> Change:
    """Apply recipe `name` to `model` (path, Model or ModelProto); the input is never modified.

    The change is `kept` unless the recipe should preserve semantics and onnxruntime shows the
    outputs differ beyond `tol` (then only `force=True` keeps it)."""
    proto = as_model(model).with_weights()
    change = prepare_change(proto, name, params)
    if verify_outputs:
        judge(change, verify_models(proto, change.proto, inputs, seed=seed, tol=tol), force)
    return change


def apply_in_history(history: Any, name: str, params: Optional[Dict[str, Any]] = None, *,
                     force: bool = False, inputs: Optional[Dict[str, Any]] = None,
                     verify_outputs: bool = True) -> Change:
    """Apply a recipe to the history's current version; a kept change becomes the new current
    version. The new model is serialised once: staged as its version file, then onnxruntime
    loads both versions from disk to verify; a change that is not kept leaves no file."""
    before = history.current
    change = prepare_change(history.current_proto(), name, params)
    vid = history.stage(change.proto)
    if verify_outputs:
        judge(change, verify_models(history.proto(before), change.proto, inputs,
                                    paths=(history.version_path(before),
                                           history.ws.version_path(vid))), force)
    if not change.kept:
        history.discard(vid)
        change.parent = before
        return change
    history.record(change, vid)
    return change


def prepare_change(proto: Any, name: str, params: Optional[Dict[str, Any]] = None) -> Change:
    """Precondition, apply and diff (no verification yet): a kept, unverified Change."""
    recipe = get_recipe(name)
    p = recipe.bind(dict(params or {}))
    pre = recipe.precondition(proto, **p)
    if not pre.applies:
        raise WorkbenchError(f"recipe '{name}' does not apply: {pre.reason}",
                             node=pre.nodes[0] if pre.nodes else None,
                             hint="pick another recipe: check names the fixes that apply to "
                             "each failing node, fix --auto applies them",
                             next_steps=[step("check", "{model}", why="names the fixes that "
                                              "apply to each failing node"),
                                         step("fix", "{model}", o="{fixed}", auto=True,
                                              why="applies them")])
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
