"""Precision decisions read the precision table's rows, never a target's name.

A comparison or membership test against a precision name ("int8", "fp16", an alias like
"half") outside `workbench/precision/table.py` means a new target would have to touch that
file too. The scan works on the syntax tree, so it sees through the easy rewrites: a tuple
or set of names bound to a variable first, `frozenset(...)`/`set(...)` of literals, either
side of the comparison, `match` cases, `.startswith(...)`, `.get()`/`[...]` on a literal
dict keyed by precision names. String data that is not compared (help texts, CLI choices
generated from the table, dtype names in a dict's values) is not flagged.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set

from workbench.precision import table

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "workbench" / "precision" / "table.py"


DTYPE_WORDS = {"float", "float16", "float32", "float64", "bfloat16", "double", "half_float"}


def precision_names() -> Set[str]:
    """The targets' names and aliases; aliases that are also element-type words ("float",
    "bfloat16": numpy/ONNX spell tensors' dtypes that way) are left to the dtype code."""
    rows = [table.get(n) for n in table.names()]
    return {r.name for r in rows} | {a for r in rows for a in r.aliases if a not in DTYPE_WORDS}


def _strings(node: Optional[ast.AST], bound: Dict[str, List[ast.AST]],
             depth: int = 0) -> Iterator[str]:
    """The string literals a comparison operand stands for: itself, the elements of a literal
    tuple/list/set/dict's keys, `set(...)`/`frozenset(...)`/`tuple(...)` of those, a
    `.lower()`/`.upper()` of one, or a name bound to any of them in the same module."""
    if node is None or depth > 4:
        return
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value
    elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        for e in node.elts:
            yield from _strings(e, bound, depth + 1)
    elif isinstance(node, ast.Dict):
        keys = [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
        # a dict keyed by targets (not a dtype table that also spells "int8")
        if keys and all(k in _NAMES for k in keys):
            yield from keys
    elif isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Name) and f.id in ("set", "frozenset", "tuple", "list", "dict") \
                and node.args:
            yield from _strings(node.args[0], bound, depth + 1)
        elif isinstance(f, ast.Attribute) and f.attr in ("lower", "upper", "strip"):
            yield from _strings(f.value, bound, depth + 1)
    elif isinstance(node, ast.Name) and node.id in bound and all(map(_static, bound[node.id])):
        for value in bound[node.id]:  # a name that only ever holds literals: a constant
            yield from _strings(value, bound, depth + 1)


def _static(value: ast.AST) -> bool:
    """A literal value: a string, a tuple/list/set/dict display, or set()/frozenset()/tuple()
    of one (a variable also bound to a computed value is not resolved)."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        return value.func.id in ("set", "frozenset", "tuple", "list", "dict") and \
            all(_static(a) for a in value.args)
    return isinstance(value, (ast.Constant, ast.Tuple, ast.List, ast.Set, ast.Dict))


_NAMES: Set[str] = set()


def _bindings(tree: ast.AST) -> Dict[str, List[ast.AST]]:
    """Every value bound by `NAME = <value>` / `NAME: T = <value>` in the module (any scope;
    a name bound several times keeps them all)."""
    out: Dict[str, List[ast.AST]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    out.setdefault(t.id, []).append(node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and node.value is not None:
            out.setdefault(node.target.id, []).append(node.value)
    return out


def name_comparisons(source: str, names: Set[str]) -> List[str]:
    """`line: code` of every decision on a precision name in `source`."""
    global _NAMES
    _NAMES = names
    tree = ast.parse(source)
    bound = _bindings(tree)
    hits: List[ast.AST] = []

    def named(*nodes: Optional[ast.AST], fold: bool = False) -> bool:
        return any((s.lower() if fold else s) in names for n in nodes for s in _strings(n, bound))

    def case_folded(*nodes: ast.AST) -> bool:
        """An operand put in upper/lower case first (`p.upper() in ("INT8", "FP8")`): its
        literals are target names whatever their case. Elsewhere upper-case words are
        TensorRT's own layer-precision vocabulary ("FP32" in a layer table)."""
        return any(isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                   and c.func.attr in ("upper", "lower", "casefold")
                   for n in nodes for c in ast.walk(n))

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            ops = (ast.Eq, ast.NotEq, ast.In, ast.NotIn, ast.Is, ast.IsNot)
            sides = (node.left, *node.comparators)
            if any(isinstance(o, ops) for o in node.ops) and \
                    named(*sides, fold=case_folded(*sides) or any(
                        isinstance(n, ast.Name) and case_folded(*bound.get(n.id, []))
                        for n in sides)):
                hits.append(node)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            f = node.func
            if f.attr in ("startswith", "endswith") and named(*node.args):
                hits.append(node)
            elif f.attr in ("get", "pop") and isinstance(f.value, (ast.Dict, ast.Name)) \
                    and named(f.value):
                hits.append(node)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) \
                and isinstance(node.value, (ast.Dict, ast.Name)) and named(node.value) \
                and not isinstance(node.slice, ast.Constant):
            hits.append(node)  # {"fp16": ..., "bf16": ...}[target]
        elif isinstance(node, ast.match_case) and named(getattr(node.pattern, "value", None)):
            hits.append(node.pattern)
    lines = source.splitlines()
    return sorted({f"{h.lineno}: {lines[h.lineno - 1].strip()}" for h in hits},
                  key=lambda s: int(s.split(":")[0]))


def test_the_scan_sees_through_rewrites() -> None:
    names = {"int8", "fp8", "fp16", "bf16", "fp32", "half"}
    flagged = [
        'if t == "fp16": pass',
        'if "int8" != t: pass',
        'if t in ("int8", "fp8"): pass',
        'if t not in {"fp16", "bf16"}: pass',
        'Q = ("int8", "fp8")\nif t in Q: pass',
        'Q = frozenset(["int8"])\nif t in Q: pass',
        'if t.lower() in ["half"]: pass',
        'if t.upper() in ("INT8", "FP8"): pass',
        'p = str(t).upper()\nif p in ("INT8", "FP8"): pass\np = 3',
        'if "FP16" == t.upper(): pass',
        'if t.startswith("fp1"): pass\nif t.startswith(("fp16", "x")): pass',
        'x = {"fp16": 10, "bf16": 16}[t]',
        'M = {"fp16": 10}\nx = M.get(t)',
        'match t:\n    case "fp8":\n        pass',
    ]
    for src in flagged:
        assert name_comparisons(src, names), src
    kept = [
        'choices = ("fp32", "fp16")',
        'help = "build in fp16"',
        'if t in table.names(): pass',
        'D = {1: "float32", 3: "int8"}\nx = D[k]',
        'x = {"fp16": 10}["fp16"]',
        'if t == "entropy": pass',
        'if a.dtype.name == "bfloat16": pass',
        'T = {"int8": 3, "uint8": 2}\nx = T[k]',
        'if p == "INT8": pass',  # TensorRT's own layer-precision words
    ]
    for src in kept:
        assert not name_comparisons(src, names), src


def test_no_precision_name_is_compared_outside_the_table() -> None:
    names = precision_names()
    assert {"int8", "fp8", "fp16", "bf16", "fp32"} <= names
    found = []
    for sub in ("workbench", "widgets"):
        for path in sorted((ROOT / sub).rglob("*.py")):
            if path == TABLE:
                continue
            for hit in name_comparisons(path.read_text(encoding="utf-8"), names):
                found.append(f"{path.relative_to(ROOT)}:{hit}")
    assert not found, ("decide by the table row (table.get(name).quantized, .low_float, ...), "
                       "not by name:\n" + "\n".join(found))
