"""Shared by the course notebooks: where the recorded data live, and the exercise checks.

A notebook starts with `cw.use_language("en")` (or "zh"); `check` then prints its verdict in that
language and raises `NotYet` (an AssertionError) when the answer is wrong, so "Run all" stops at
the exercise that needs another look. An exercise still holding `...` stops there too, saying it
is not answered yet (`answered`). Jupyter shows these two as their one-line verdict, not as a
traceback."""
from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "data" / "fixtures"   # real TensorRT data, with their licences
H200 = FIXTURES / "trt86-h200"                     # TensorRT 8.6 on an NVIDIA H200
A100 = FIXTURES / "trex-a100-resnet"               # trtexec exports, ResNet on an A100
TIMING = REPO / "tests" / "data" / "timing"        # the workbench's own captures on the H200
SAMPLES = REPO / "sample_models"

_LANG = "en"
_WORDS = {"en": ("Correct, well done.", "Not yet"), "zh": ("回答正确，做得好。", "还不对")}
_BLANK = {"en": "not answered yet: replace the ... in the cell above with your answer, then run "
                "it and this cell again",
          "zh": "还没有作答：把上一格里的 ... 换成你的答案，再运行那一格和这一格"}


class NotYet(AssertionError):
    """A wrong or missing answer: stops "Run all" here; Jupyter shows the verdict line only."""

    def _render_traceback_(self) -> list:  # IPython's hook: the lines to show for this error
        return [str(self)]


def use_language(lang: str) -> None:
    """Choose the language of the verdicts: 'en' or 'zh'."""
    global _LANG
    if lang not in _WORDS:
        raise ValueError(f"language {lang!r}: choose one of {', '.join(_WORDS)}")
    _LANG = lang


def check(ok: bool, *, en: str, zh: str) -> None:
    """Print the verdict of one exercise; `en`/`zh`: the hint shown when the answer is wrong."""
    good, bad = _WORDS[_LANG]
    text = en if _LANG == "en" else zh
    if ok:
        print(f"✅ {good}")
        return
    raise NotYet(f"❌ {bad}: {text}")  # (shown once: Jupyter prints its one line)


def answered(*answers: object) -> None:
    """First line of a check cell: an exercise left as `...` stops here with a note (in the
    chosen language) instead of an error deep inside the check."""
    if any(a is Ellipsis for a in answers):
        raise NotYet(f"✏️ {_BLANK[_LANG]}")  # (shown once: Jupyter prints its one line)


def close(a: float, b: float, rel: float = 0.01) -> bool:
    """True when a and b agree within `rel` (relative), for answers that are floats."""
    try:
        return abs(float(a) - float(b)) <= rel * max(abs(float(b)), 1e-12)
    except (TypeError, ValueError):
        return False


def tr(en: str, zh: str) -> str:
    """The text in the chapter's language (`use_language`): what the course's code prints and
    the column names it makes. What the tools print stays in their own words."""
    return zh if _LANG == "zh" else en
