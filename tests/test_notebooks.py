"""Every notebook under notebooks/ executes headlessly, top to bottom, with no error cell; so does
every chapter of the bilingual course (notebooks/course/en and zh), whose pairs must match the
source they are written from (notebooks/course/make_course.py)."""
from __future__ import annotations

import importlib.util
import io
import json
import re
import sys
import tokenize
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from conftest import REPO

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
COURSE_DIR = REPO / "notebooks" / "course"
COURSE = sorted(COURSE_DIR.glob("*/*.ipynb"))
CJK = re.compile(r"[\u4e00-\u9fff]")


def test_the_notebooks_kernel_is_the_environment_running_them():
    """Notebooks name the "python3" kernel: it must resolve to the interpreter of the environment
    Jupyter runs in (the set-up's .venv), never to another Python without the workbench."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import sys, workbench; print(sys.prefix); print(workbench.__file__)")]
    _execute(nb, REPO / "notebooks")
    prefix, module = _text(nb.cells[0]).split()
    assert Path(prefix).resolve() == Path(sys.prefix).resolve()
    assert Path(module).resolve() == (REPO / "workbench" / "__init__.py").resolve()


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 1, "notebooks/ should hold the workflow and teaching notebooks"


def _execute(nb: nbformat.NotebookNode, folder: Path) -> nbformat.NotebookNode:
    client = NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(folder)}})
    client.execute()
    return nb


def _errors(nb: nbformat.NotebookNode) -> list:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
            if o.get("output_type") == "error"]


def _text(cell: nbformat.NotebookNode) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes(path: Path, tmp_path):
    nb = _execute(nbformat.read(path, as_version=4), REPO / "notebooks")
    errors = _errors(nb)
    assert not errors, f"{path.name}: {errors[0].get('ename')}: {errors[0].get('evalue')}"
    assert any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), "no cell produced output"


# --------------------------------------------------------------------------- the course
def _make_course():
    spec = importlib.util.spec_from_file_location("make_course", COURSE_DIR / "make_course.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _coursework():
    sys.path.insert(0, str(COURSE_DIR))
    try:
        import coursework
    finally:
        sys.path.remove(str(COURSE_DIR))
    return coursework


def test_course_has_every_chapter_in_both_languages():
    en = sorted(p.name for p in COURSE_DIR.glob("en/*.ipynb"))
    zh = sorted(p.name for p in COURSE_DIR.glob("zh/*.ipynb"))
    assert en == zh, f"chapters differ between en/ and zh/: {sorted(set(en) ^ set(zh))}"
    assert [n.split("_", 1)[1] for n in en] == ["builder.ipynb", "precision.ipynb", "tactics.ipynb",
                                                 "dynamic_shapes.ipynb", "runtime.ipynb", "serving.ipynb"]


def test_course_notebooks_are_written_from_the_source_without_outputs():
    rendered = _make_course().render()
    assert sorted(rendered) == sorted(str(p.relative_to(COURSE_DIR)) for p in COURSE)
    for rel, nb in rendered.items():
        on_disk = nbformat.read(COURSE_DIR / rel, as_version=4)
        assert [(c.cell_type, c.source) for c in on_disk.cells] == \
            [(c.cell_type, c.source) for c in nb.cells], \
            f"{rel} differs from chapters.py: run python notebooks/course/make_course.py"
        assert all(not c.get("outputs") and c.get("execution_count") is None
                   for c in on_disk.cells if c.cell_type == "code"), f"{rel}: outputs are committed"


def _comments(src: str) -> list:
    """The comments of a code cell (tokenize: a '#' inside a string is not one)."""
    return [t.string for t in tokenize.generate_tokens(io.StringIO(src).readline)
            if t.type == tokenize.COMMENT]


def _without_comments(src: str) -> str:
    toks = [t for t in tokenize.generate_tokens(io.StringIO(src).readline) if t.type != tokenize.COMMENT]
    return tokenize.untokenize((t.type, t.string) for t in toks)


@pytest.mark.parametrize("name", sorted(p.name for p in COURSE_DIR.glob("en/*.ipynb")))
def test_course_pairs_share_code_and_differ_in_language(name):
    en = nbformat.read(COURSE_DIR / "en" / name, as_version=4)
    zh = nbformat.read(COURSE_DIR / "zh" / name, as_version=4)
    code = lambda nb: [_without_comments(c.source).replace('"zh"', '"en"')  # noqa: E731
                       for c in nb.cells if c.cell_type == "code"]
    assert code(en) == code(zh)
    assert 'use_language("zh")' in zh.cells[1].source and 'use_language("en")' in en.cells[1].source
    # the comments are each notebook's own language: every zh comment is Chinese, no en one is
    zh_comments = [t for c in zh.cells if c.cell_type == "code" for t in _comments(c.source)]
    en_comments = [t for c in en.cells if c.cell_type == "code" for t in _comments(c.source)]
    assert zh_comments and all(CJK.search(t) for t in zh_comments), \
        [t for t in zh_comments if not CJK.search(t)]
    assert en_comments and not any(CJK.search(t) or "‖" in t for t in en_comments), en_comments
    text = lambda nb: " ".join(c.source for c in nb.cells if c.cell_type == "markdown")  # noqa: E731
    assert not CJK.search(text(en)), f"en/{name} has Chinese text"
    assert len(CJK.findall(text(zh))) > 200, f"zh/{name} is not written in Chinese"
    tags = [c.metadata.get("tags", []) for c in en.cells]
    assert ["exercise"] in tags, f"{name} has no exercise"
    for i, t in enumerate(tags):  # every exercise is followed by its check
        if t == ["exercise"]:
            assert tags[i + 1] == ["check"], f"{name}: cell {i} (exercise) is not followed by a check"


def test_course_check_prints_a_verdict_in_the_chosen_language(capsys):
    cw = _coursework()
    try:
        cw.use_language("zh")
        cw.check(True, en="hint", zh="提示")
        assert capsys.readouterr().out.strip() == "✅ 回答正确，做得好。"
        with pytest.raises(AssertionError, match="提示") as e:
            cw.check(False, en="hint", zh="提示")
        # the verdict is said once, as the error's one line (it was printed, then raised)
        assert str(e.value) == "❌ 还不对: 提示" and capsys.readouterr().out == ""
        cw.use_language("en")
        with pytest.raises(AssertionError, match="hint"):
            cw.check(False, en="hint", zh="提示")
        with pytest.raises(ValueError, match="choose one of en, zh"):
            cw.use_language("fr")
    finally:
        cw.use_language("en")
    assert cw.close(1.0, 1.005) and not cw.close(1.0, 1.1) and not cw.close("x", 1.0)
    assert (cw.H200 / "resnet50_fp16.layers.json").is_file() and (cw.TIMING / "README.md").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("path", COURSE, ids=[f"{p.parent.name}/{p.name}" for p in COURSE])
def test_course_notebook_executes_and_every_check_passes(path: Path):
    """Each chapter with the reference answers filled in (as `make_course.py --solutions`
    writes it): every cell runs and every check says correct."""
    rel = f"{path.parent.name}/{path.name}"
    nb = _execute(_make_course().render(solutions=True)[rel], path.parent)
    errors = _errors(nb)
    assert not errors, f"{path.parent.name}/{path.name}: {errors[0].get('ename')}: {errors[0].get('evalue')}"
    checks = [c for c in nb.cells if c.metadata.get("tags") == ["check"]]
    verdict = "✅ 回答正确" if path.parent.name == "zh" else "✅ Correct"
    assert checks and all(verdict in _text(c) for c in checks), [_text(c) for c in checks]
    # what the course's own code prints (cw.tr) is in the chapter's language
    said = [_text(c) for c in nb.cells if c.cell_type == "code" and "print(cw.tr(" in c.source]
    assert said, "the chapter prints nothing of its own"
    if path.parent.name == "zh":
        assert all(CJK.search(t) for t in said), [t for t in said if not CJK.search(t)]
    else:
        assert not any(CJK.search(t) for t in said), said


@pytest.mark.slow
def test_course_check_cell_stops_at_a_wrong_answer():
    """A student's wrong answer makes the check cell print the hint and fail (Run all stops)."""
    path = COURSE_DIR / "zh" / "05_runtime.ipynb"
    nb = nbformat.read(path, as_version=4)
    first = next(i for i, c in enumerate(nb.cells) if c.metadata.get("tags") == ["exercise"])
    nb.cells[first].source = "p99 = np.percentile(samples_ms, 50)   # the median, not the P99"
    with pytest.raises(CellExecutionError):
        _execute(nb, path.parent)
    assert "还不对" not in _text(nb.cells[first + 1])  # (said once: by the error)
    (err,) = _errors(nb)
    assert err["ename"] == "NotYet"  # an AssertionError
    assert err["traceback"] == ["❌ 还不对: np.percentile(samples_ms, 99)"]  # no traceback


@pytest.mark.slow
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_course_as_shipped_stops_at_the_first_blank_exercise(lang):
    """The notebooks ship with each answer left as `...`: Run all stops at the first check,
    which says (in the chapter's language) the exercise is not answered yet; nothing above it
    fails, and the file holds no reference answer."""
    path = COURSE_DIR / lang / "05_runtime.ipynb"
    nb = nbformat.read(path, as_version=4)
    exercises = [c for c in nb.cells if c.metadata.get("tags") == ["exercise"]]
    assert exercises and all(c.source.splitlines()[-1].split("=", 1)[1].strip()
                             .startswith("...") for c in exercises)
    assert "np.percentile(samples_ms, 99)   # your answer" not in json.dumps(nb)
    with pytest.raises(CellExecutionError):
        _execute(nb, path.parent)
    first = next(i for i, c in enumerate(nb.cells) if c.metadata.get("tags") == ["check"])
    (err,) = _errors(nb)
    assert err["ename"] == "NotYet" and err in nb.cells[first].outputs  # at the first check
    want = "还没有作答" if lang == "zh" else "not answered yet"
    assert len(err["traceback"]) == 1 and want in err["traceback"][0]
    assert want not in _text(nb.cells[first])  # said once (it was printed, then raised)


@pytest.mark.slow
def test_the_teachers_copy_has_the_answers_and_runs_from_elsewhere(tmp_path):
    """`make_course.py --solutions DIR` writes DIR/en and DIR/zh with the answers in place;
    a chapter there runs (its set-up cell finds coursework.py in the repository)."""
    import subprocess

    out = subprocess.run([sys.executable, str(COURSE_DIR / "make_course.py"), "--solutions",
                          str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.glob("*/*.ipynb")) == \
        sorted(p.relative_to(COURSE_DIR).as_posix() for p in COURSE)
    nb = nbformat.read(tmp_path / "en" / "05_runtime.ipynb", as_version=4)
    assert "np.percentile(samples_ms, 99)   # your answer" in json.dumps(nb)
    nb = _execute(nb, tmp_path / "en")
    assert not _errors(nb)
    checks = [c for c in nb.cells if c.metadata.get("tags") == ["check"]]
    assert checks and all("✅ Correct" in _text(c) for c in checks)
    # the course's own folder is refused: the shipped notebooks keep their blanks
    bad = subprocess.run([sys.executable, str(COURSE_DIR / "make_course.py"), "--solutions",
                          str(COURSE_DIR)], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "a folder other than the course's own" in bad.stderr
    # --help prints its usage and writes nothing (it rewrote all twelve student notebooks)
    before = {p: p.stat().st_mtime_ns for p in COURSE}
    hlp = subprocess.run([sys.executable, str(COURSE_DIR / "make_course.py"), "--help"],
                         capture_output=True, text=True, timeout=120)
    assert hlp.returncode == 0 and "--solutions DIR" in hlp.stdout and "wrote" not in hlp.stdout
    assert {p: p.stat().st_mtime_ns for p in COURSE} == before


def test_course_serving_points_at_the_features_that_exist():
    """Course 6 said the variant matrix 'has not landed yet' after `workbench matrix` and the
    Triton export had: it now shows them, and every command, flag and Python name it shows is
    real (each flag is in that verb's --help; each name imports)."""
    import importlib
    import subprocess

    for lang in ("en", "zh"):
        nb = nbformat.read(COURSE_DIR / lang / "06_serving.ipynb", as_version=4)
        text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        for stale in ("has not landed", "尚未合入", "what comes next", "接下来会有什么", "合入后"):
            assert stale not in text, (lang, stale)
        assert "`workbench matrix`" in text and "`workbench triton`" in text, lang
        block = text.split("```bash\n", 1)[1].split("```", 1)[0].replace("\\\n", " ")
        verbs = {}
        for line in block.splitlines():
            words = line.split()
            if words[:1] == ["workbench"]:
                verbs[words[1]] = [w.split("=")[0] for w in words[2:] if w.startswith("-")]
        assert set(verbs) == {"matrix", "triton"}, (lang, verbs)
        for verb, flags in verbs.items():
            helptext = subprocess.run([sys.executable, "-m", "workbench.cli", verb, "--help"],
                                      capture_output=True, text=True, cwd=REPO, timeout=120,
                                      check=True).stdout
            for flag in flags:
                assert flag in helptext, (lang, verb, flag)
        for dotted in re.findall(r"`((?:workbench|widgets)\.[\w.]+)`", text):
            mod, _, name = dotted.rpartition(".")
            assert hasattr(importlib.import_module(mod), name), (lang, dotted)
        assert "plan_matrix" in text and "run_matrix" in text and "export_triton" in text
