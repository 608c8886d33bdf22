"""No function in workbench/ runs over MAX_LINES lines (def to last line, decorators aside):
a longer one is split into named steps, each with a docstring of what it does and why."""
from __future__ import annotations

import ast
from pathlib import Path
from typing import List, Tuple

from conftest import REPO

MAX_LINES = 120


def long_functions(source: str, limit: int = MAX_LINES) -> List[Tuple[str, int, int]]:
    """(qualified name, first line, length) of every function or method in `source` longer
    than `limit` lines, nested ones included."""
    out: List[Tuple[str, int, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    length = child.end_lineno - child.lineno + 1
                    if length > limit:
                        out.append((name, child.lineno, length))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return out


def test_the_checker_finds_a_long_method_and_passes_a_short_one():
    body = "\n".join(f"        x{i} = {i}" for i in range(MAX_LINES))
    source = f"class A:\n    def long(self):\n{body}\n\n    def short(self):\n        return 1\n"
    assert long_functions(source) == [("A.long", 2, MAX_LINES + 1)]
    assert long_functions(source, limit=MAX_LINES + 1) == []


def test_no_function_in_workbench_is_over_the_limit():
    files = sorted((REPO / "workbench").rglob("*.py"))
    assert len(files) > 50  # (the package is there: an empty glob would pass)
    over = [f"{Path(f).relative_to(REPO)}:{line} {name} is {length} lines"
            for f in files for name, line, length in long_functions(f.read_text(encoding="utf-8"))]
    assert not over, (f"functions over {MAX_LINES} lines (split each into named steps):\n"
                      + "\n".join(over))
