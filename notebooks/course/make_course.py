"""Writes the course notebooks, English (en/) and Chinese (zh/), from one source: the code cells are
the same in both languages, so the pair cannot drift. Only the words differ: the first cell's
`use_language`, the comments (written `# English ‖ 中文` in chapters.py, each notebook keeps its
own half) and what the code prints (`cw.tr(en, zh)`, chosen when the cell runs).

    python notebooks/course/make_course.py      # after editing the chapters below
    python notebooks/course/make_course.py --solutions DIR   # the teacher's copy, answers in

The notebooks are written without outputs and with each exercise's answer left as `...` (the
check after it says so until the student fills it in); `--solutions DIR` writes DIR/en and DIR/zh
with the reference answers in place. tests/test_notebooks.py runs every chapter with its answers,
and checks the pairs match this file."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import List

import nbformat

HERE = Path(__file__).resolve().parent
LANGS = ("en", "zh")
sys.path.insert(0, str(HERE))
from chapters import CHAPTERS, Cell  # noqa: E402  (the content: chapters.py beside this file)


SETUP_COMMENT = {"en": "coursework.py sits in notebooks/course/",
                 "zh": "coursework.py 在 notebooks/course/ 里"}


def SETUP(lang: str, course: str = "..") -> str:
    """The first code cell: it chooses the language of everything the chapter prints."""
    return (f"import sys; sys.path.insert(0, {json.dumps(course)})   # {SETUP_COMMENT[lang]}\n"
            "import pandas as pd\n"
            "import coursework as cw\n"
            f'cw.use_language("{lang}")\n'
            'pd.set_option("display.max_colwidth", 90)')


ANSWER = re.compile(r"^(\w+) = (.+?)(\s+# your answer ‖ 你的答案)$")
BILINGUAL = re.compile(r"#\s*([^#‖]*?)\s*‖\s*(.*?)\s*$")


def words(src: str, lang: str) -> str:
    """A code cell in one language: each comment written `# English ‖ 中文` keeps its half."""
    i = LANGS.index(lang)
    return "\n".join(BILINGUAL.sub(lambda m: "# " + m.group(i + 1), line)
                     for line in src.splitlines())


def blank(src: str) -> str:
    """An exercise cell as the student gets it: the answer line's value replaced by `...`."""
    lines = src.splitlines()
    m = ANSWER.match(lines[-1])
    assert m, f"an exercise ends with 'name = <answer>   # your answer ‖ 你的答案': {lines[-1]!r}"
    lines[-1] = f"{m.group(1)} = ...{m.group(3)}"
    return "\n".join(lines)


def notebook(cells: List[Cell], lang: str, solutions: bool = False,
             course: str = "..") -> nbformat.NotebookNode:
    """One chapter in one language: its title, the set-up cell, then the chapter's cells
    (exercises blank unless `solutions`)."""
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"display_name": "Python 3", "language": "python",
                                  "name": "python3"},
                   "language_info": {"name": "python"}, "course": {"language": lang}}
    (kind, title), rest = cells[0], cells[1:]
    assert kind == "md", "a chapter starts with its title"
    out = [nbformat.v4.new_markdown_cell(title[lang]),
           nbformat.v4.new_code_cell(SETUP(lang, course), metadata={"tags": ["setup"]})]
    for kind, body in rest:
        if kind == "md":
            out.append(nbformat.v4.new_markdown_cell(body[lang]))
        elif kind == "code":
            out.append(nbformat.v4.new_code_cell(words(body, lang)))
        else:
            src = body if kind != "exercise" or solutions else blank(body)
            out.append(nbformat.v4.new_code_cell(words(src, lang), metadata={"tags": [kind]}))
    for i, c in enumerate(out):
        c.id = f"c{i:02d}"
    nb.cells = out
    return nb


def render(solutions: bool = False, course: str = "..") -> dict:
    """{relative path: notebook} for every chapter and language (`course`: where the setup
    cell finds coursework.py, relative to the notebook's folder or absolute)."""
    return {f"{lang}/{name}.ipynb": notebook(cells, lang, solutions, course)
            for name, cells in CHAPTERS for lang in LANGS}


def main(argv: List[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="Write the course notebooks (en/ and zh/) from "
                                 "chapters.py: without outputs, exercises left as `...`.")
    ap.add_argument("--solutions", metavar="DIR",
                    help="write the teacher's copy, answers in place, to DIR/en and DIR/zh "
                         "(a folder other than the course's own)")
    args = ap.parse_args(argv)
    solutions = args.solutions is not None
    root = Path(args.solutions).resolve() if solutions else HERE
    if solutions and root == HERE:
        ap.error("--solutions DIR: a folder other than the course's own")
    course = str(HERE) if solutions else ".."  # a copy elsewhere finds coursework.py here
    for rel, nb in render(solutions, course).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, str(path))
        print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
