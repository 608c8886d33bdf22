"""Writes the course notebooks, English (en/) and Chinese (zh/), from one source: the code cells are
the same in both languages (only the first cell's `use_language` differs), so the pair cannot drift.

    python notebooks/course/make_course.py      # after editing the chapters below

The notebooks are written without outputs; tests/test_notebooks.py runs every one and checks the
pairs match this file."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import List

import nbformat

HERE = Path(__file__).resolve().parent
LANGS = ("en", "zh")
sys.path.insert(0, str(HERE))
from chapters import CHAPTERS, Cell  # noqa: E402  (the content: chapters.py beside this file)


def SETUP(lang: str) -> str:
    """The first code cell: the only one that differs between the languages."""
    return ('import sys; sys.path.insert(0, "..")   # coursework.py sits in notebooks/course/\n'
            "import pandas as pd\n"
            "import coursework as cw\n"
            f'cw.use_language("{lang}")\n'
            'pd.set_option("display.max_colwidth", 90)')


def notebook(cells: List[Cell], lang: str) -> nbformat.NotebookNode:
    """One chapter in one language: its title, the set-up cell, then the chapter's cells."""
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"display_name": "Python 3", "language": "python",
                                  "name": "python3"},
                   "language_info": {"name": "python"}, "course": {"language": lang}}
    (kind, title), rest = cells[0], cells[1:]
    assert kind == "md", "a chapter starts with its title"
    out = [nbformat.v4.new_markdown_cell(title[lang]),
           nbformat.v4.new_code_cell(SETUP(lang), metadata={"tags": ["setup"]})]
    for kind, body in rest:
        if kind == "md":
            out.append(nbformat.v4.new_markdown_cell(body[lang]))
        elif kind == "code":
            out.append(nbformat.v4.new_code_cell(body))
        else:
            out.append(nbformat.v4.new_code_cell(body, metadata={"tags": [kind]}))
    for i, c in enumerate(out):
        c.id = f"c{i:02d}"
    nb.cells = out
    return nb


def render() -> dict:
    """{relative path: notebook} for every chapter and language."""
    return {f"{lang}/{name}.ipynb": notebook(cells, lang)
            for name, cells in CHAPTERS for lang in LANGS}


def main() -> int:
    for rel, nb in render().items():
        path = HERE / rel
        path.parent.mkdir(exist_ok=True)
        nbformat.write(nb, str(path))
        print("wrote", path.relative_to(HERE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
