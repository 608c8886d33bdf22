"""Will TensorRT take this graph? Static rules, the real ONNX parser, and an optional build.

    report = check("model.onnx")                       # real parser if TensorRT is there
    report = check("model.onnx", backend="static")     # rules only (workbench/support/rules.py)
    report = check("model.onnx", backend="tensorrt-rtx", build=True)

Every failing node comes back as `{node, op, reason, source}` in `report.unsupported` and as a
Finding with the next step in users' terms. The parser runs in the worker process, so a
TensorRT crash never takes the caller down; plugin libraries load only when named.
"""
from __future__ import annotations

import os
import re
import shlex
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from workbench.core.errors import Finding, WorkbenchError
from workbench.core.findings import NextStep
from workbench.support import codes
from workbench.core.graphindex import GraphIndex
from workbench.core.model import Model, ModelLike, as_model, save_model
from workbench.support.rules import (BACKENDS, GPU_PLUGIN_HINT, MATRIX_SUPPORTED, PLUGIN_HINT,
                                     backend_table)

BACKEND_CHOICES = ("auto", "static", "tensorrt", "tensorrt-rtx")
DEFAULT_DOMAINS = ("", "ai.onnx")
INT32_MAX = 2 ** 31 - 1


@dataclass
class SupportReport:
    """The answer to "will TensorRT take this?" for one model.

    `unsupported` holds one entry per failing node or graph problem: a dict with `node`, `op`,
    `reason`, `source`, `hint`, `code` (a `workbench.support.codes` constant or a rule id),
    `stage`, and where known `error_code`/`message` (the parser's) and `subgraph`."""

    backend: str                      # "static", "tensorrt" or "tensorrt-rtx"
    backend_version: Optional[str]
    supported: bool
    findings: List[Finding] = field(default_factory=list)
    unsupported: List[Dict[str, Any]] = field(default_factory=list)
    partition: Optional[Dict[str, Any]] = None
    mode: str = "static"              # "static" | "parser" | "parser+build"
    rules: Optional[str] = None       # static rule table used
    model: Optional[str] = None
    notes: List[str] = field(default_factory=list)
    build: Optional[Dict[str, Any]] = None

    @property
    def unsupported_nodes(self) -> List[str]:
        return [u["node"] for u in self.unsupported if u.get("node")]

    def to_dict(self) -> Dict[str, Any]:
        return {
            "model": self.model,
            "backend": {"name": self.backend, "version": self.backend_version,
                        "rules": self.rules},
            "mode": self.mode,
            "supported": self.supported,
            "unsupported": [dict(u) for u in self.unsupported],
            "findings": [f.to_dict() for f in self.findings],
            "partition": self.partition,
            "build": self.build,
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "SupportReport":
        """The report `to_dict` wrote (a JSON report read back, e.g. by `workbench fix`)."""
        b = d.get("backend") or {}
        return cls(backend=b.get("name"), backend_version=b.get("version"),
                   supported=bool(d.get("supported")),
                   findings=[Finding.from_dict(f) for f in d.get("findings") or []],
                   unsupported=[dict(u) for u in d.get("unsupported") or []],
                   partition=d.get("partition"), mode=d.get("mode", "static"),
                   rules=b.get("rules"), model=d.get("model"), notes=list(d.get("notes") or []),
                   build=d.get("build"))

    @property
    def problems(self) -> List[Finding]:
        """One error Finding per unsupported entry, in order: what a fix has to address."""
        return [_finding(u) for u in self.unsupported]


# --- static rules ------------------------------------------------------------------------------
class _Scope:
    """Constants visible to a graph (its initializers and Constant outputs, plus outer scopes),
    and the ranks of tensors where the model declares them."""

    def __init__(self, index: GraphIndex, outer: Optional["_Scope"] = None) -> None:
        self.outer = outer
        values = index.values
        self.ranks: Dict[str, int] = {k: v.rank for k, v in values.items() if v.rank is not None}
        self.dtypes: Dict[str, int] = {k: v.dtype for k, v in values.items()}
        self.graph_outputs = set(index.outputs)
        # name -> TensorProto, or a numpy array (value_int(s)/value_float(s)), or None (unknown)
        self.consts: Dict[str, Any] = dict(index.initializers)
        for i, node in enumerate(index.nodes):
            if node.op_type == "Constant" and node.domain in DEFAULT_DOMAINS and node.output:
                self.consts[node.output[0]] = _constant_value(node)

    def _lookup(self, table: str, name: str) -> Tuple[bool, Any]:
        """(found, value) of `name` in the scope's `table` ("consts", "dtypes", "ranks") or,
        when not there, in the scopes around it: a subgraph sees its outer graphs' names."""
        scope: Optional[_Scope] = self
        while scope is not None:
            values = getattr(scope, table)
            if name in values:
                return True, values[name]
            scope = scope.outer
        return False, None

    def const(self, name: str) -> Optional[Any]:
        """The constant's values as a numpy array, or None if not a readable constant."""
        value = self._lookup("consts", name)[1]
        if value is None or not hasattr(value, "data_type"):
            return value
        from onnx import numpy_helper

        try:
            return numpy_helper.to_array(value)
        except Exception:  # external data not loaded, odd type: treat as unknown
            return None

    def dtype(self, name: str) -> Optional[int]:
        return self._lookup("dtypes", name)[1]

    def rank(self, name: str) -> Optional[int]:
        return self._lookup("ranks", name)[1]

    def is_const(self, name: str) -> bool:
        return self._lookup("consts", name)[0]


def _constant_value(node: Any) -> Any:
    """A Constant node's value: its TensorProto, a numpy array, or None when not numeric."""
    import numpy as np

    for a in node.attribute:
        if a.name == "value":
            return a.t
        if a.name in ("value_int", "value_ints"):
            return np.array(a.i if a.name == "value_int" else list(a.ints), dtype=np.int64)
        if a.name in ("value_float", "value_floats"):
            return np.array(a.f if a.name == "value_float" else list(a.floats),
                            dtype=np.float32)
    return None


def _attr(node: Any, name: str, default: Any = None) -> Any:
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            v = helper.get_attribute_value(a)
            if isinstance(v, bytes):
                v = v.decode("utf-8", "replace")
            if isinstance(v, list):
                v = [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in v]
            return v
    return default


def _input(node: Any, i: int) -> str:
    return node.input[i] if len(node.input) > i else ""


def _short(values: Any) -> Any:
    import numpy as np

    arr = np.asarray(values).ravel()
    items = arr[:4].tolist()
    return items[0] if arr.size == 1 else (items + ["..."] if arr.size > 4 else items)


# Predicates: (rule, node, scope) -> None (passes) or a dict of values for the message.
def _attr_not_in(rule: Dict[str, Any], node: Any, scope: _Scope) -> Optional[Dict[str, Any]]:
    v = _attr(node, rule["attr"], rule.get("default"))
    return None if v in rule["allowed"] else {"value": v}


def _attr_not_all(rule: Dict[str, Any], node: Any, scope: _Scope) -> Optional[Dict[str, Any]]:
    v = _attr(node, rule["attr"], None)
    return {"value": v} if v and any(x != rule["value"] for x in v) else None


def _attr_present(rule: Dict[str, Any], node: Any, scope: _Scope) -> Optional[Dict[str, Any]]:
    present = [a.name for a in node.attribute if a.name in rule["attrs"]]
    return {"value": ", ".join(present)} if present else None


def _const_input_gt(rule: Dict[str, Any], node: Any, scope: _Scope) -> Optional[Dict[str, Any]]:
    name = _input(node, rule["input"])
    arr = scope.const(name) if name else None
    if arr is None or arr.size == 0:
        return None
    top = int(arr.max())
    return {"value": top, "limit": rule["limit"]} if top > rule["limit"] else None


def _dtype_name(code: Any) -> Optional[str]:
    """ONNX element type name (None for 0/unset); a code ONNX does not define (a corrupt or
    hostile file) reads 'UNKNOWN(999)' instead of raising."""
    import onnx

    if not code:
        return None
    try:
        return onnx.TensorProto.DataType.Name(int(code))
    except (TypeError, ValueError):
        return f"UNKNOWN({code})"


def _input_not_const(rule: Dict[str, Any], node: Any, scope: _Scope) -> Optional[Dict[str, Any]]:
    name = _input(node, rule["input"])
    if not name or scope.is_const(name):
        return None
    if _dtype_name(scope.dtype(name)) in rule.get("unless_dtype", ()):
        return None
    return {"value": name, "tensor": name}


def _input_dtype_not_in(rule: Dict[str, Any], node: Any,
                        scope: _Scope) -> Optional[Dict[str, Any]]:
    for attr, (default, value) in rule.get("when_attr", {}).items():
        if _attr(node, attr, default) != value:
            return None
    name = _input(node, rule["input"])
    dt = _dtype_name(scope.dtype(name)) if name else None
    if dt is None:
        return None
    bad = dt in rule["blocked"] if "blocked" in rule else dt not in rule["allowed"]
    return {"value": dt, "tensor": name} if bad else None


def _uint8_intermediate(rule: Dict[str, Any], node: Any, scope: _Scope) -> Optional[Dict[str, Any]]:
    if _dtype_name(_attr(node, "to", 0)) != "UINT8" or not node.output:
        return None
    out = node.output[0]
    return None if out in scope.graph_outputs else {"value": out, "tensor": out}


def _nonzero_const_input(rule: Dict[str, Any], node: Any,
                         scope: _Scope) -> Optional[Dict[str, Any]]:
    name = _input(node, rule["input"])
    arr = scope.const(name) if name else None
    if arr is None:
        return None
    return {"value": _short(arr), "tensor": name} if bool((arr != 0).any()) else None


def _input_rank_not_in(rule: Dict[str, Any], node: Any,
                       scope: _Scope) -> Optional[Dict[str, Any]]:
    name = _input(node, rule["input"])
    r = scope.rank(name) if name else None
    return {"value": r, "tensor": name} if r is not None and r not in rule["ranks"] else None


def _inputs_present(rule: Dict[str, Any], node: Any, scope: _Scope) -> Optional[Dict[str, Any]]:
    given = [_input(node, i) for i in rule["inputs"] if _input(node, i)]
    return {"value": ", ".join(given)} if given else None


def _dtype_attr_not_in(rule: Dict[str, Any], node: Any,
                       scope: _Scope) -> Optional[Dict[str, Any]]:
    v = _attr(node, rule["attr"], None)
    if v is None:
        return None
    name = _dtype_name(v) or "UNDEFINED"
    return None if name in rule["allowed"] else {"value": name,
                                                 "allowed": ", ".join(rule["allowed"])}


def _output_count_gt(rule: Dict[str, Any], node: Any, scope: _Scope) -> Optional[Dict[str, Any]]:
    n = sum(1 for o in node.output if o)
    return {"value": n} if n > rule["count"] else None


CHECKS: Dict[str, Callable[[Dict[str, Any], Any, _Scope], Optional[Dict[str, Any]]]] = {
    "attr_not_in": _attr_not_in, "attr_not_all": _attr_not_all, "attr_present": _attr_present,
    "const_input_gt": _const_input_gt, "input_not_const": _input_not_const,
    "nonzero_const_input": _nonzero_const_input, "output_count_gt": _output_count_gt,
    "input_rank_not_in": _input_rank_not_in, "inputs_present": _inputs_present,
    "dtype_attr_not_in": _dtype_attr_not_in, "input_dtype_not_in": _input_dtype_not_in,
    "uint8_intermediate": _uint8_intermediate,
}


@dataclass
class _Site:
    """Where a node sits: its id, the subgraph path, the local-function stack, its scope."""

    node: Any
    nid: str
    path: str
    scope: "_Scope"
    stack: List[str]
    graph: Optional[GraphIndex] = None  # the index of the graph the node sits in
    pos: int = -1                       # its position there


def _walk(index: GraphIndex, path: str = "", outer: Optional[_Scope] = None,
          functions: Optional[Dict[Tuple[str, str], GraphIndex]] = None,
          stack: Optional[List[str]] = None) -> Iterator[_Site]:
    """Every node: subgraph bodies (If/Loop/Scan) and model-local functions included.
    Function calls are expanded (as TensorRT inlines them) and carry the call stack in the
    parser's format, e.g. ['block1 (MyBlock)']."""
    functions = functions or {}
    stack = stack or []
    scope = _Scope(index, outer)
    for i, (node, nid) in enumerate(zip(index.nodes, index.ids)):
        fn = functions.get((node.domain, node.op_type))
        if fn is not None and len(stack) < 16:
            yield from _walk(fn, path, scope, functions,
                             stack + [f"{node.name or nid} ({node.op_type})"])
            continue
        yield _Site(node, nid, path, scope, stack, index, i)
        if index.has_subgraphs(i):
            for name, sub in index.subgraphs(i):
                yield from _walk(sub, f"{path}{nid}/{name}/", scope, functions, stack)


def _functions(model: Model) -> Dict[Tuple[str, str], GraphIndex]:
    return model.index.functions


def _entry(node: Optional[str], op: Optional[str], reason: str, source: str, *,
           hint: Optional[str] = None, code: str = "unsupported", stage: str = "parse",
           **extra: Any) -> Dict[str, Any]:
    """One unsupported entry; a command the rule table's hint names becomes a next-step
    record (`steps_from_words`), the hint keeps the words."""
    hint, steps = (hint, []) if code in _RETRACTED_WORDS else steps_from_words(hint)
    given = [NextStep.from_dict(s) for s in extra.pop("next_steps", None) or []]
    steps = steps + [s for s in given if s not in steps]
    out = {"node": node, "op": op, "reason": reason, "source": source, "hint": hint,
           "code": code, "stage": stage}
    if steps:
        out["next_steps"] = [s.to_dict() for s in steps]
    out.update({k: v for k, v in extra.items() if v is not None})
    return out


_COMMAND = re.compile(r"`(workbench [a-z-]+ [^`]+)`")
# rules whose hint a recipe reads and takes back where it does not apply to the node (the
# symmetric_qdq advice: `workbench.surgery.recipes.qdq`): their words stay as written
_RETRACTED_WORDS = ("qdq-zero-point",)


def steps_from_words(text: Optional[str]) -> "Tuple[Optional[str], List[NextStep]]":
    """(the words of `text` without the backticked `workbench VERB ...` commands in it, those
    commands as NextStep records). The rule table writes its advice as one sentence; what
    runs is a record (the CLI renders it, the panels show a short line), what explains stays
    in the hint. A command that does not split into shell words stays in the text."""
    if not text or "`workbench " not in text:
        return text, []
    steps: List[NextStep] = []

    def take(m: "re.Match[str]") -> str:
        try:
            words = shlex.split(m.group(1))
        except ValueError:
            return m.group(0)
        args: List[str] = []
        flags: List[Tuple[str, Optional[str]]] = []
        rest = words[2:]
        k = 0
        while k < len(rest):
            w = rest[k]
            if w.startswith("-") and len(w) > 1:
                value = rest[k + 1] if k + 1 < len(rest) and not rest[k + 1].startswith("-") \
                    else None
                flags.append((w, value))
                k += 2 if value is not None else 1
            else:
                args.append(w)
                k += 1
        before = m.string[:m.start()].rstrip(" :(")
        why = re.split(r"[;(]\s*", before)[-1].strip() if before else ""
        steps.append(NextStep(words[1], tuple(args), tuple(flags), why))
        return "\0"

    words = _COMMAND.sub(take, text)
    # the sentence around the commands: "make K a constant: \0" -> "make K a constant"
    words = re.sub(r"\s*\([^()]*\0[^()]*\)|:?\s*\0", "", words)
    words = re.sub(r"\(\s*\)|\s+([,;)])", r"\1", words)
    words = re.sub(r"\s{2,}", " ", words).strip(" ;,:")
    return (words or None), steps


def _hint(text: Optional[str], model: Model, node: Optional[str], op: Optional[str] = None,
          domain: str = "", **values: Any) -> Optional[str]:
    """A next step with the real model path and node filled in. (`op`/`domain` stay for the
    callers; steps that name a graph-surgery recipe are added above this layer, by
    `workbench.surgery.propose.advise`.)"""
    import shlex

    from workbench.core.fsutil import fixed_name

    path = shlex.quote(str(model.path)) if model.path else "MODEL"
    fixed = shlex.quote(fixed_name(str(model.path))) if model.path else "OUT.onnx"
    if text:  # a fix command runs as printed: with the -o the CLI requires
        text = text.replace("workbench fix {model} --recipe",
                            "workbench fix {model} -o {fixed} --recipe")
    return _fmt(text, **dict(values, model=path, fixed=fixed, node=node or "NODE")) \
        if text else text


def _fmt(text: str, **values: Any) -> str:
    try:
        return text.format(**values)
    except (KeyError, IndexError, ValueError):
        return text


def _graph_checks(model: Model, table: Dict[str, Any]) -> Iterator[Dict[str, Any]]:
    g = model.graph
    for rule in table["graph_rules"]:
        kind = rule["check"]
        if kind == "duplicate_tensor_names":
            for group in (list(g.input), list(g.output), list(g.value_info)):
                seen = set()
                for vi in group:
                    if vi.name in seen:
                        yield _entry(None, None, _fmt(rule["reason"], value=vi.name), "static",
                                     hint=_hint(rule["hint"], model, None), code=rule["id"],
                                     tensor=vi.name)
                    seen.add(vi.name)
        elif kind == "io_dtypes":
            allowed = ", ".join(rule["allowed"])
            items = [("graph input", vi) for vi in g.input] + \
                [("graph output", vi) for vi in g.output]
            for where, vi in items:
                kind_of = vi.type.WhichOneof("value")
                if kind_of != "tensor_type":
                    name = (kind_of or "untyped").replace("_type", "")
                else:
                    et = vi.type.tensor_type.elem_type
                    name = _dtype_name(et)
                    if name is None or name in rule["allowed"]:
                        continue
                yield _entry(None, None, _fmt(rule["reason"], where=where, tensor=vi.name,
                                              value=name), "static",
                             hint=_hint(rule["hint"], model, None, allowed=allowed),
                             code=rule["id"], tensor=vi.name)
            for t in g.initializer:
                name = _dtype_name(t.data_type)
                if t.data_type and name not in rule["allowed"]:
                    yield _entry(None, None, _fmt(rule["reason"], where="initializer",
                                                  tensor=t.name, value=name), "static",
                                 hint=_hint(rule["hint"], model, None, allowed=allowed),
                                 code=rule["id"], tensor=t.name)
        elif kind == "opset_below":
            ops = set(rule.get("ops") or ())
            for imp in model.proto.opset_import:
                if imp.domain in DEFAULT_DOMAINS and 0 < imp.version < rule["min"]:
                    hits = sorted({n.op_type for n in g.node if n.op_type in ops})
                    if ops and not hits:
                        continue
                    yield _entry(None, None, _fmt(rule["reason"], value=imp.version,
                                                  ops=", ".join(hits)), "static",
                                 hint=_hint(rule["hint"], model, None), code=rule["id"])
        elif kind == "loop_unbounded_counter":
            for site in _walk(model.index, functions=_functions(model)):
                node, nid, path, scope = site.node, site.nid, site.path, site.scope
                if node.op_type != "Loop" or node.domain not in DEFAULT_DOMAINS:
                    continue
                m_name = _input(node, 0)
                if m_name and not scope.is_const(m_name):
                    continue  # a run-time trip count registers the counter
                m_val = scope.const(m_name) if m_name else None
                if m_name and (m_val is None or int(m_val.max()) < INT32_MAX):
                    continue
                body = next((sub for name, sub in site.graph.subgraphs(site.pos)
                             if name == "body"), None) if site.graph is not None else None
                if body is None or not body.inputs:
                    continue
                counter = body.inputs[0]
                shown = "absent" if not m_name else _short(m_val)
                for inner in _walk(body, f"{path}{nid}/body/", scope, _functions(model),
                                   site.stack):
                    if counter in inner.node.input:
                        yield _entry(inner.nid, inner.node.op_type,
                                     _fmt(rule["reason"], loop=nid, value=shown, tensor=counter),
                                     "static", hint=_hint(rule["hint"], model, inner.nid),
                                     code=rule["id"],
                                     subgraph=inner.path.rstrip("/") or None,
                                     local_function_stack=inner.stack or None)


def static_check(model: Union[Model, str, os.PathLike], rules: str = "tensorrt"
                 ) -> Tuple[List[Dict[str, Any]], List[Finding]]:
    """Apply a backend's rule table. Returns (unsupported entries, extra findings)."""
    import onnx

    model = as_model(model)
    table = backend_table(rules)
    out: List[Dict[str, Any]] = []
    extra: List[Finding] = []
    lo, hi = table["opset_range"]
    for imp in model.proto.opset_import:
        if imp.domain in DEFAULT_DOMAINS and not lo <= imp.version <= hi:
            if imp.version < lo:
                who = shlex.quote(str(model.path)) if model.path else "MODEL"
                hint = (f"`workbench fix {who} --recipe opset-upgrade -o OUT.onnx` raises it "
                        "with onnx's version converter (verified against the original), or "
                        f"re-export with an opset in {lo}-{hi}")
            else:
                hint = (f"re-export with an opset in {lo}-{hi} (torch.onnx.export(..., "
                        f"opset_version={hi}))")
            extra.append(Finding("warning", "opset-range",
                                 f"opset {imp.version} is outside the range {lo}-{hi} of "
                                 f"{table['short']}", hint=hint, source="static"))
    for site in _walk(model.index, functions=_functions(model)):
        node, nid, scope = site.node, site.nid, site.scope
        op, sub = node.op_type, site.path.rstrip("/") or None
        stack = site.stack or None
        if node.domain not in DEFAULT_DOMAINS:
            out.append(_entry(nid, op, f"custom op '{node.domain}::{op}' is not an ONNX "
                              "standard op; TensorRT needs a plugin for it", "static",
                              hint=_hint(PLUGIN_HINT, model, nid, op, node.domain),
                              code=codes.CUSTOM_OP, subgraph=sub, local_function_stack=stack,
                              domain=node.domain))
            continue
        if op in table["unsupported_ops"]:
            out.append(_entry(nid, op, f"{op} is not supported by {table['short']}", "static",
                              hint=_hint(table["unsupported_ops"][op], model,
                                         nid, op, node.domain),
                              code=codes.UNSUPPORTED_OP, subgraph=sub, local_function_stack=stack))
            continue
        if op in table["plugin_ops"]:
            gpu = table.get("gpu_plugins", {}).get(op)
            reason = (f"{op} is implemented by {table['short']}'s {gpu} plugin, which is "
                      f"created only where a GPU is usable: without one the parser refuses {op}"
                      if gpu else
                      f"{op} is implemented by a plugin that {table['short']} does not ship")
            out.append(_entry(nid, op, reason, "static",
                              hint=_hint(table["plugin_ops"][op], model, nid, op, node.domain),
                              code=codes.PLUGIN_NEEDS_GPU if gpu else codes.PLUGIN_MISSING,
                              subgraph=sub, local_function_stack=stack))
            continue
        if op not in MATRIX_SUPPORTED and op not in table["unsupported_ops"]:
            if onnx.defs.has(op):
                extra.append(Finding("warning", "op-not-in-matrix",
                                     f"{op} is not listed in the operator matrix; the parser "
                                     "decides", nodes=[nid], op=op, source="static",
                                     hint="run `workbench check` with a TensorRT backend"))
            else:
                out.append(_entry(nid, op, f"'{op}' is not an ONNX op; TensorRT looks for a "
                                  "plugin of that name", "static",
                                  hint=_hint(PLUGIN_HINT, model, nid, op, node.domain),
                                  code=codes.UNKNOWN_OP, subgraph=sub, local_function_stack=stack))
            continue
        for rule in table["rules"]:
            ops = rule["op"] if isinstance(rule["op"], list) else [rule["op"]]
            if op not in ops and not (ops == ["*"] and op not in rule.get("except", ())):
                continue
            hit = CHECKS[rule["check"]](rule, node, scope)
            if hit is None:
                continue
            values = dict(rule, op=op, **hit)
            fill = {k: v for k, v in values.items() if k not in ("op", "node", "model")}
            if rule.get("severity") == "warning":
                extra.append(Finding("warning", rule["id"], _fmt(rule["reason"], **values),
                                     nodes=[nid], op=op,
                                     hint=_hint(rule["hint"], model, nid, **fill),
                                     source="static"))
                continue
            out.append(_entry(nid, op, _fmt(rule["reason"], **values), "static",
                              hint=_hint(rule["hint"], model, nid, **fill), code=rule["id"],
                              stage=rule.get("stage", "parse"), subgraph=sub,
                              local_function_stack=stack))
    out.extend(_graph_checks(model, table))
    extra.extend(_zero_size_axes(model))
    extra.extend(_duplicate_node_names(model))
    return out, extra


def _duplicate_node_names(model: Model) -> List[Finding]:
    """A warning per node name the main graph repeats: TensorRT parses it, but onnxruntime
    refuses to load the model (so compare and the FP16 checks cannot run) and a layer or timing
    that names the node is ambiguous; the views show such nodes as NAME#k."""
    import shlex

    index = model.index
    path = shlex.quote(str(model.path)) if model.path else "MODEL"
    out = []
    for name, where in index.by_name.items():
        count = len(where)
        if count < 2:
            continue
        ids = [index.ids[i] for i in where]
        out.append(Finding(
            "warning", codes.DUPLICATE_NODE_NAME,
            f"node name '{name}' is used by {count} nodes; onnxruntime refuses to load the "
            "model (compare cannot run) and names mapped back to it are ambiguous (shown as "
            f"{', '.join(repr(i) for i in ids)})", nodes=ids, source="static",
            hint=f"`workbench fix {path} --recipe rename_duplicates -o FIXED.onnx`"))
    return out


def _zero_size_axes(model: Model) -> List[Finding]:
    """A warning per input whose axis the parser reads as a fixed size 0 (it parses; every
    build profile is then refused)."""
    import shlex

    from workbench.core.inputs import shape_text, zero_size_axes

    path = shlex.quote(str(model.path)) if model.path else "MODEL"
    return [Finding("warning", codes.ZERO_SIZE_AXIS, f"input '{name}' axis {axis} {how}",
                    tensors=[name], source="static",
                    hint=f"`workbench fix {path} --recipe set_input_shapes:shapes="
                    f"{shlex.quote(name)}/{shape_text(model.proto, name)} -o FIXED.onnx`")
            for name, axis, how in zero_size_axes(model.proto)]


# --- the real parser (in the worker) -----------------------------------------------------------
def _build_reason(msg: str, op: Optional[str], backend: Optional[str]) -> str:
    """A build error in users' terms: "has no runners that implement it" (TensorRT's tactic
    supply assertion) says the builder has no kernel for the op on this backend, though the
    parser took it; TensorRT's own words follow, without its source location."""
    clean = _clean_message(msg)
    if re.search(r"has no runners|could not find any implementation", clean, re.IGNORECASE):
        words = re.sub(r"\s*In \w+ at \S+:\d+\)?\s*$", "", clean)
        words = re.sub(r"^\[\S+\]\s*", "", words)
        return (f"the parser took this {op or 'node'} but "
                f"{backend + chr(39) + 's' if backend else 'the'} builder has no "
                f"kernel for it on this target (TensorRT: {words})")
    return clean


def _clean_message(msg: str) -> str:
    """One line: drop the CPU-only CUDA noise TensorRT-RTX appends and assertion prefixes."""
    lines = [ln for ln in str(msg).splitlines() if "catchCudaError" not in ln]
    msg = " ".join(" ".join(lines).split())
    msg = re.sub(r"^Assertion failed:\s*", "", msg)
    msg = re.sub(r"^Invalid Node - \S+\s+", "", msg)
    return msg


def _has_importer(op: str, domain: str, table: Dict[str, Any]) -> bool:
    """Whether the parser has a built-in importer for the op: a standard ONNX op that this
    backend does not route to a plugin (TensorRT looks up a plugin for every other op)."""
    import onnx

    if (domain or "") not in DEFAULT_DOMAINS or op in table["plugin_ops"]:
        return False
    return bool(onnx.defs.has(op))


NEWER_OP_HINT = ("build with a newer TensorRT that imports it, or rewrite the node into ops "
                 "this TensorRT imports where a recipe can: `workbench fix {model} -o {fixed} "
                 "--auto`")


def _parser_reason(err: Dict[str, Any], table: Dict[str, Any],
                   domain: str = "") -> Tuple[str, str, str]:
    """(reason, code, hint) for one parser error, in users' terms. The code comes from the
    record's structure (error code, op, whether the op has an importer), not its wording."""
    op, msg, code = err.get("op") or "", err.get("message") or "", err.get("code") or ""
    clean = _clean_message(msg)
    gpu = plugin_gpu_reason(err, table["short"])
    if gpu is not None:
        return gpu[0], codes.PLUGIN_NEEDS_GPU, gpu[1]
    if op and not _has_importer(op, domain, table):
        return (f"no built-in importer for op '{op}' and no plugin of that name is registered",
                codes.PLUGIN_MISSING, table["plugin_ops"].get(op, PLUGIN_HINT))
    if op and _importer_op(err) == "FallbackPluginImporter":
        # a standard op this parser has no importer for (newer than this TensorRT release, as
        # Gelu for TensorRT 8.6): it looked for a plugin of the op's name and found none
        return (f"this TensorRT's ONNX parser has no importer for op '{op}' (an op newer than "
                f"the parser: it looked for a plugin named '{op}' and found none)",
                codes.UNSUPPORTED_OP, table["unsupported_ops"].get(op) or NEWER_OP_HINT)
    if op and code == "UNSUPPORTED_NODE" and (op in table["unsupported_ops"]
                                              or clean in ("false", "")):
        hint = table["unsupported_ops"].get(op)
        return (f"{op} is not supported by this TensorRT (no importer)", codes.UNSUPPORTED_OP,
                hint if hint else PLUGIN_HINT)
    if "convertDtype" in clean or "data type" in clean.lower():
        return ("a tensor has a data type TensorRT does not support (" + clean + ")",
                codes.UNSUPPORTED_DTYPE, "cast to a supported type before the engine boundary")
    kind = codes.PARSER_ERROR_CODES.get(code, codes.PARSER_ERROR)
    return clean, kind, ("change the node's attributes/inputs as the message says, or "
                         "replace the node via `workbench fix`")


def parser_words(err: Dict[str, Any], backend: str, domain: str = "") -> Tuple[str, str, str]:
    """(reason, code, hint) for one parser-error record in users' terms, as `check` words it
    (for errors met outside check: a failed build); TensorRT's cleaned words when the backend
    has no rule table."""
    from workbench.support.rules import backend_table

    try:
        table = backend_table(backend)
    except WorkbenchError:
        msg = _clean_message(err.get("message") or "")
        return msg, codes.PARSER_ERROR, ""
    return _parser_reason(err, table, domain)


def plugin_gpu_reason(err: Dict[str, Any], backend: str) -> Optional[Tuple[str, str]]:
    """(reason, hint) for a parser error whose importer has its plugin but could not create
    it because the worker has no usable GPU (`plugin_needs_gpu`, the CUDA runtime's words):
    TensorRT-RTX's ROIAlign on a CPU machine. None for any other error. `backend`: its name
    as findings say it (e.g. "TensorRT-RTX 1.7")."""
    why = err.get("plugin_needs_gpu")
    if not why:
        return None
    op = err.get("op") or "node"
    m = re.search(r"(\w+) plugin (?:creator )?(?:version \S+ )?was not found", str(
        err.get("message") or ""))
    plugin = m.group(1) if m else op
    return (f"{backend}'s importer for {op} uses its {plugin} plugin, which is there but cannot "
            f"be created on this machine: no usable GPU (CUDA: {why}); on a machine with an "
            "NVIDIA GPU the parser may take it",
            GPU_PLUGIN_HINT)


def _worker_call(client: Any, opname: str, args: Dict[str, Any], backend: str,
                 timeout: Optional[float], model: Optional[Model] = None) -> Dict[str, Any]:
    from workbench.worker.client import WorkerCrashed, WorkerError, default_client

    w = client or default_client()
    try:
        return w.call(opname, args, timeout=timeout)
    except WorkerCrashed as e:
        if model is not None:
            named_crash(e, model)
        raise
    except WorkerError as e:
        if e.code == "no-backend":
            raise _Unavailable(backend, getattr(w, "python", "python"), e) from None
        raise


def named_crash(e: Any, model: Model) -> Any:
    """A WorkerCrashed about `model`, in its terms: the file, the node (an unnamed node by
    the id the workbench gives it, from the parser's position) and the next step with the
    model's path."""
    from workbench.core import blame

    details = getattr(e, "details", None) or {}
    index, op = details.get("node_index"), getattr(e, "op", None)
    if not e.node and op and isinstance(index, int) and 0 <= index < len(model.graph.node) \
            and model.graph.node[index].op_type == op:
        e.node = model.node_ids[index]
    if op:
        e.hint = "the notebook is fine; " + blame.crash_hint(details.get("stage") or "parse",
                                                            e.node, op)
        e.next_steps = blame.crash_steps()
    if model.path is not None:
        e.file = str(model.path)
        e.next_steps = [st.bound(model=str(model.path))
                        for st in getattr(e, "next_steps", None) or []]
    return e


class _Unavailable(WorkbenchError):
    def __init__(self, backend: str, python: str, err: Exception) -> None:
        install = ("pip install 'trt-workbench[rtx]' (TensorRT-RTX)" if backend == "tensorrt-rtx"
                   else "install TensorRT into that interpreter (pip install tensorrt on a GPU "
                   "machine)" if backend == "tensorrt" else "install TensorRT or TensorRT-RTX")
        super().__init__(
            f"TensorRT backend '{backend}' is not importable by the worker interpreter "
            f"'{python}'",
            hint=f"{install}, or set WORKBENCH_TRT_PYTHON to a Python that has it; "
                 "or use --backend static")



def _node_label(model: Model, err: Dict[str, Any]) -> Optional[str]:
    """The failing node: the parser's name (the node's id when the name is shared and the
    error's index says which node it is), else the top-level node at the error's index (when
    the error names an op, or on TensorRT 8.x whose errors have only the index)."""
    idx = err.get("node_index", -1)
    in_range = isinstance(idx, int) and 0 <= idx < len(model.node_ids)
    if err.get("node"):
        name = err["node"]
        hits = model.index.find(name)
        if len(hits) > 1 and in_range and idx in hits:
            return model.node_ids[idx]
        return name
    by_index = err.get("op") or err.get("node_name_api") is False
    if by_index and in_range:
        return model.node_ids[idx]
    return None


def _layer_to_node(model: Model, layer: Optional[str], nodes: Sequence[str]) -> Optional[str]:
    if nodes:
        return nodes[0]
    if not layer:
        return None
    names = model.index.by_name
    if layer in names:
        return layer
    base = re.sub(r"_\d+$", "", layer)
    return base if base in names else layer


def _node_map(model: Model) -> Dict[str, "_Site"]:
    """Id and name -> where the node sits (graph, bodies, local functions). The main graph's
    ids come first; a name is a key only when it names one node (`GraphIndex.find`), so an
    ambiguous name never silently stands for one of its nodes."""
    out: Dict[str, _Site] = {}
    shared = {nm for nm, idx in model.index.by_name.items() if len(idx) > 1}
    for site in _walk(model.index, functions=_functions(model)):
        # TensorRT names layers of unnamed nodes "node_of_<first output>"
        alias = f"node_of_{site.node.output[0]}" if not site.node.name and site.node.output \
            else None
        name = site.node.name if site.node.name not in shared else None
        for key in (site.nid, name, alias):
            if key and key not in out:
                out[key] = site
    return out


def _stepped(rep: SupportReport) -> SupportReport:
    """The report with the commands its findings' hints name as next-step records (the
    entries had theirs taken out by `_entry`)."""
    for f in rep.findings:
        if f.code in _RETRACTED_WORDS:
            continue
        f.hint, steps = steps_from_words(f.hint)
        f.next_steps += [x for x in steps if x not in f.next_steps]
    return rep


def check(model_or_path: ModelLike, backend: str = "auto", build: bool = False, client: Any = None,
          target: str = "sm89", *, plugins: Sequence[Union[str, os.PathLike]] = (),
          rules: Optional[str] = None, profiles: Optional[Dict[str, Any]] = None,
          timeout: Optional[float] = 600.0) -> SupportReport:
    """Will `backend` take this model? See the module docstring; `rules` picks the static
    table (default: the backend's own, the published matrix for `static`)."""
    if backend not in BACKEND_CHOICES:
        raise WorkbenchError(f"unknown backend '{backend}'", field="backend",
                             hint="use one of: " + ", ".join(BACKEND_CHOICES))
    model = as_model(model_or_path)
    label = str(model.path) if model.path else model.name
    if backend == "static":
        if build:
            raise WorkbenchError("--build needs a TensorRT backend, not static rules",
                                 field="build", hint="use --backend tensorrt-rtx or tensorrt")
        return _stepped(_static_report(model, rules or "tensorrt", label))
    if model.missing_external:
        raise WorkbenchError(
            "external-data file(s) missing: " + ", ".join(sorted(set(model.missing_external))),
            file=label, hint="the TensorRT parser needs the weights: put the data file(s) next "
            "to the model, or use --backend static (rules need no weights)", category="weights")
    model.require_weights("the TensorRT parser")
    plugin_paths = []
    for p in plugins:
        pp = Path(p).expanduser()
        if not pp.is_file():
            raise WorkbenchError("plugin library not found", file=str(pp), field="plugin",
                                 hint="pass the path of a built plugin library")
        plugin_paths.append(str(pp.resolve()))
    with _model_file(model) as path:
        try:
            res = _worker_call(client, "parse", {"path": path, "backend": backend,
                                                 "plugins": plugin_paths}, backend, timeout,
                               model)
        except _Unavailable as e:
            if backend != "auto":
                raise
            rep = _static_report(model, rules or "tensorrt", label)
            rep.notes.insert(0, "no TensorRT module importable by the worker: static rules "
                             f"answered ({e.hint})")
            rep.findings.insert(0, Finding("info", "static-fallback", rep.notes[0],
                                           source="static"))
            return _stepped(rep)
        b = None
        if build and res["results"][0]["parsed"]:
            b = _worker_call(client, "check_build", {
                "path": path, "backend": backend, "plugins": plugin_paths, "target": target,
                "profiles": profiles}, backend, timeout, model)
    return _stepped(_parser_report(model, res, res["results"][0], rules, label, b))


def check_files(paths: Sequence[Union[str, os.PathLike]], backend: str = "tensorrt-rtx",
                client: Any = None, *, rules: Optional[str] = None,
                plugins: Sequence[str] = (), timeout: Optional[float] = 600.0
                ) -> List[SupportReport]:
    """Parse many ONNX files in ONE worker request (fast for suites and folders)."""
    if backend not in ("auto", "tensorrt", "tensorrt-rtx"):
        raise WorkbenchError(f"check_files needs a parser backend, not '{backend}'",
                             field="backend", hint="use auto, tensorrt or tensorrt-rtx")
    models = [as_model(p) for p in paths]
    res = _worker_call(client, "parse", {"paths": [str(m.path) for m in models],
                                         "backend": backend, "plugins": list(plugins)},
                       backend, timeout)
    return [_parser_report(m, res, rec, rules, str(m.path), None)
            for m, rec in zip(models, res["results"])]


def _names_a_cause(entry: Dict[str, Any]) -> bool:
    """Does a static entry name why the parser refuses the node (a zero point, a dtype, an
    attribute), not only that the op is refused?"""
    return entry["stage"] == "parse" and entry["code"] not in codes.OP_REJECTED


def _one_per_node(entries: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """One entry per failing node and code: the parser can report a node several times (a
    training-mode BatchNormalization: its mode and each extra output), which read as that many
    problems; the other messages are kept under `also`."""
    out: List[Dict[str, Any]] = []
    seen: Dict[Any, Dict[str, Any]] = {}
    for u in entries:
        key = (u.get("node"), u.get("code")) if u.get("node") else None
        if key is not None and key in seen:
            first = seen[key]
            msg = u.get("message")
            if msg and msg != first.get("message") and msg not in first.get("also", []):
                first.setdefault("also", []).append(msg)
            continue
        if key is not None:
            seen[key] = u
        out.append(u)
    return out


def in_users_terms(cause: str, parser_message: str) -> str:
    """The cause in the model's terms first, TensorRT's own words after (they name C++
    functions, assertions and DLA flags that say little to the person who exported the model)."""
    return f"{cause} (TensorRT's parser: {parser_message})"


def parse_causes(model: Union[Model, str, os.PathLike], rules: str) -> Dict[str, Dict[str, Any]]:
    """By node, the static rule entries that explain why TensorRT's parser refuses it (reason,
    code, hint): nodes where a rule names a specific cause. For errors reported outside
    `check` (a failed build)."""
    entries, _ = static_check(model, rules)
    out: Dict[str, Dict[str, Any]] = {}
    for e in entries:
        if e.get("node") and _names_a_cause(e):
            out.setdefault(e["node"], e)
    return out


def _importer_op(err: Dict[str, Any]) -> Optional[str]:
    """The op whose importer raised a parser error (its `func`, e.g. importScatterElements)."""
    m = re.fullmatch(r"import([A-Z]\w*)", str(err.get("func") or ""))
    return m.group(1) if m else None


def _attributed(model: Model, errors: List[Dict[str, Any]],
                static_entries: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The parser's errors, where one names no node given the node(s) it is about: TensorRT-RTX
    refuses a ScatterElements with reduction=max as 'Unsupported reduction type' with no node,
    from that op's importer (`func` importScatterElements); the static rules that name a cause
    on nodes of that op name them ("static-rules"), else the op's only node does ("only-node").
    An error neither explains stays graph-level."""
    out: List[Dict[str, Any]] = []
    for err in errors:
        op = _importer_op(err) if _node_label(model, err) is None else None
        if op is None:
            out.append(err)
            continue
        flagged = list(dict.fromkeys(
            e["node"] for e in static_entries if e.get("node") and e.get("op") == op
            and _names_a_cause(e)))
        if flagged:
            out.extend(dict(err, node=n, op=op, attributed="static-rules") for n in flagged)
            continue
        sites = [st for st in _walk(model.index, functions=_functions(model))
                 if st.node.op_type == op and st.node.domain in DEFAULT_DOMAINS]
        out.append(dict(err, node=sites[0].nid, op=op, attributed="only-node")
                   if len(sites) == 1 else err)
    return out


def attribute_errors(model: Union[Model, str, os.PathLike], errors: List[Dict[str, Any]],
                     rules: str) -> List[Dict[str, Any]]:
    """The parser's error records with those that name no node given the node(s) the static
    rules of `rules` (a backend name) flag for them (`_attributed`): for errors reported
    outside `check` (a failed build)."""
    model = as_model(model)
    entries, _ = static_check(model, rules)
    return _attributed(model, errors, entries)


def _parser_report(model: Model, res: Dict[str, Any], rec: Dict[str, Any], rules: Optional[str],
                   label: str, b: Optional[Dict[str, Any]]) -> SupportReport:
    """Turn the worker's parse (and build) answer into a report with users' next steps."""
    name, version = res["backend"], res["version"]
    table = backend_table(rules or name)
    static_entries, extra = static_check(model, table["name"])
    by_node = {s["node"]: s for s in static_entries if s.get("node")}
    graph_level = [s for s in static_entries if not s.get("node") and s["stage"] == "parse"]
    nodes = _node_map(model)
    unsupported: List[Dict[str, Any]] = []
    for err in _attributed(model, rec["errors"], static_entries):
        node = _node_label(model, err)
        site = nodes.get(node) if node else None
        proto_node = site.node if site is not None else None
        op = err.get("op") or (proto_node.op_type if proto_node is not None else None)
        domain = proto_node.domain if proto_node is not None else ""
        reason, code, hint = _parser_reason(dict(err, op=op), table, domain)
        hint = _hint(hint, model, node, op, domain)
        # the static rule that predicted it (same node; for an error that names no node, the
        # graph-level rule that fired) explains the cause, the code and the next step better
        known = by_node.get(node) if node else (graph_level[0] if graph_level else None)
        known_steps: List[Any] = []
        if known is not None and known["stage"] == "parse":
            if node and _names_a_cause(known) and known["reason"] not in reason:
                reason = in_users_terms(known["reason"], reason)
            if code in codes.GENERIC_PARSER_CODES or not node:
                code = known["code"]
            if not node and known["reason"] not in reason:  # the rule names the tensor
                reason = f"{known['reason']} (the parser: {reason})"
            if known.get("hint"):  # (its words and the steps taken out of them)
                hint = known["hint"]
                known_steps = known.get("next_steps") or []
        if err.get("attributed") == "only-node":  # no rule: the op's only node, said so
            reason = f"{reason} (the parser named no node; its {op} importer failed, and " \
                "this is the model's only node of that op)"
        unsupported.append(_entry(node, op, reason, "parser", hint=hint, next_steps=known_steps,
                                  tensor=None if node or known is None else known.get("tensor"),
                                  code=code, message=err.get("message"),
                                  error_code=err.get("code"), attributed=err.get("attributed"),
                                  subgraph=(site.path.rstrip("/") or None) if site else None,
                                  local_function_stack=err.get("local_function_stack") or None))
    unsupported = _one_per_node(unsupported)
    report = SupportReport(backend=name, backend_version=version, supported=rec["parsed"],
                           mode="parser", rules=table["name"], model=label)
    report.partition = _map_partition(model, rec.get("partition"))
    if rec.get("partition_error"):
        report.notes.append("partition unavailable: " + rec["partition_error"])
    if res.get("plugins"):
        report.notes.append("plugins loaded: " + ", ".join(res["plugins"]))
    if b is not None:
        report.mode = "parser+build"
        report.build = {k: b.get(k) for k in ("built", "target", "seconds", "engine_bytes",
                                              "notes", "build_errors")}
        report.notes.extend(b.get("notes") or [])
        if b.get("built"):  # built at shapes the model cannot run: said (as `build` says it)
            from workbench.core.trtlog import NameIndex, findings_from_log

            for f in findings_from_log([{"level": "warning", "message": m}
                                        for m in b.get("log") or [] if isinstance(m, str)],
                                       NameIndex.from_graph(model.graph)):
                if f.code == "profile-cannot-run":  # (its next step: a record)
                    f.next_steps = [s.bound(model=label if model.path else None)
                                    for s in f.next_steps]
                    report.findings.append(f)
        if not b.get("built"):
            errs = b.get("build_errors") or [{"layer": None, "nodes": [],
                                              "message": "the build failed without an error "
                                              "message"}]
            for be in errs:
                node = _layer_to_node(model, be.get("layer"), be.get("nodes") or [])
                node = nodes[node].nid if node in nodes else node
                known = by_node.get(node) if node else None
                op = nodes[node].node.op_type if node in nodes else None
                unsupported.append(_entry(
                    node, op, _build_reason(be["message"], op, report.backend), "build",
                    hint=(known or {}).get("hint") or "change the node as the message says, "
                    "or keep it out of the engine (`workbench fix`)",
                    code=codes.BUILD_FAILED, stage="build", layer=be.get("layer")))
    # static rules add what the parser cannot see yet (build-time limits) or stopped before
    report.findings.extend(extra)
    named = {u["node"] for u in unsupported if u.get("node")}
    for s in static_entries:
        if s.get("node") in named or (s.get("node") is None and not rec["parsed"]):
            continue
        nodes = [s["node"]] if s["node"] else []
        if s["stage"] == "build" and b is None and rec["parsed"]:
            report.findings.append(Finding(
                "warning", s["code"], s["reason"] + " (parses; fails when the engine is built)",
                nodes=nodes, op=s["op"], source="static",
                hint="run `workbench check --build` to confirm; " + (s.get("hint") or "")))
        elif not rec["parsed"]:
            report.findings.append(Finding(
                "warning", s["code"], s["reason"] + " (static rules; the parser stopped at an "
                "earlier error)", nodes=nodes, op=s["op"], source="static", hint=s.get("hint")))
    report.unsupported = unsupported
    report.supported = not unsupported
    report.findings[:0] = [_finding(u) for u in unsupported]
    return report


def _finding(u: Dict[str, Any]) -> Finding:
    extra = {k: v for k, v in u.items()
             if k not in ("node", "op", "reason", "source", "hint", "code", "next_steps")
             and v is not None}
    tensors = [u["tensor"]] if u.get("tensor") else []
    from workbench.core import blame

    category = blame.MACHINE if u.get("code") == codes.PLUGIN_NEEDS_GPU else \
        blame.parser_category(u.get("reason") or "", u.get("code") or "")
    return Finding("error", u.get("code") or "unsupported", u["reason"],
                   nodes=[u["node"]] if u.get("node") else [], tensors=tensors,
                   hint=u.get("hint"), source=u["source"], op=u.get("op"), extra=extra,
                   category=category, next_steps=u.get("next_steps") or [])


# what the parser's per-subgraph flag means (onnx-tensorrt's supportsModel: every subgraph
# starts "unknown" = False and only the last is set True, when the whole model is supported)
PARTITION_NOTE = ("subgraphs are runs of nodes the parser can import; TensorRT sets a "
                  "subgraph's 'supported' only when the whole model parses, so while any node "
                  "fails every subgraph reads false: not verified, not rejected")


def _map_partition(model: Model, part: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The parser's partition with node ids, the nodes outside every subgraph, and a `note`
    on what the per-subgraph `supported` flag means."""
    if not part:
        return None
    ids = model.node_ids
    subs = []
    covered = set()
    for s in part.get("subgraphs", []):
        idx = [i for i in s["nodes"] if 0 <= i < len(ids)]
        covered.update(idx)
        subs.append({"nodes": [ids[i] for i in idx], "supported": s.get("supported")})
    return {"api": part.get("api"), "supported": part.get("supported"), "subgraphs": subs,
            "outside": [ids[i] for i in range(len(ids)) if i not in covered],
            "note": PARTITION_NOTE}


def static_note(table: Dict[str, Any]) -> str:
    """What answered a static check: the rule table, what it was compiled from, its source."""
    return f"static rules for {table['name']}: {table['label']} ({table['source']})"


def _static_report(model: Model, rules: str, label: str) -> SupportReport:
    table = backend_table(rules)
    entries, extra = static_check(model, rules)
    return SupportReport(backend="static", backend_version=None, supported=not entries,
                         findings=[_finding(u) for u in entries] + extra + list(model.warnings),
                         unsupported=entries,
                         mode="static", rules=table["name"], model=label,
                         notes=[static_note(table)])


class _model_file:
    """A path the worker can read: the model's own file, or a temp copy of an in-memory one."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.tmp: Optional[tempfile.TemporaryDirectory] = None

    def __enter__(self) -> str:
        if self.model.path is not None and self.model.path.is_file():
            # absolute: the worker is long-lived and was started in whatever folder the
            # process was in then (a notebook or a test may have changed folder since)
            return str(self.model.path.resolve())
        self.tmp = tempfile.TemporaryDirectory(prefix="workbench-check-")
        out = Path(self.tmp.name) / "model.onnx"
        save_model(self.model.load_weights(), out)
        return str(out)

    def __exit__(self, *exc: Any) -> None:
        if self.tmp is not None:
            self.tmp.cleanup()


__all__ = ["check", "check_files", "static_check", "SupportReport", "BACKEND_CHOICES", "BACKENDS"]
