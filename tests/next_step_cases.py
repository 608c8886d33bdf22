"""Every next step the verbs print, pasted into a shell: the corpus, the verbs, how steps are
collected from text and --json, and what counts as a step that does not run (shared by
tests/test_next_steps_run.py).

A pasted step FAILS when:
- it does not split into shell words (`shlex.split` raises: an unbalanced quote);
- it exits 3 (an internal error) or is killed;
- it exits 2 for a usage reason: argparse refused it (the CLI's one line ends
  "(see 'workbench VERB --help')": a missing required flag, an unknown option, a bad choice),
  or the verb refused its command line (a required flag it checks itself: "... is required";
  a field that is a flag: "field '--...'"), or a word of the step is a placeholder no one
  filled in (MODEL, OUT.onnx, FOLDER, CANDIDATE) and the verb said it is not there.
Any other exit 2 (the model itself is refused, with its reason) is the step running as meant.
A step that names DATA (the user's own input data, which only they can give) is run with the
corpus model's data when there is some, else only parsed (argparse, in this process).
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_models"

# the verbs users run first, with the outputs a user would name (relative: the steps they
# print must run in a folder holding only the model)
# ({name}: the model's file stem; every model's outputs sit beside it in one folder)
VERB_ARGS: Dict[str, List[str]] = {
    "inspect": [],
    "check": ["--backend", "tensorrt-rtx"],
    "fix": ["-o", "{name}.out.onnx", "--auto"],
    "build": ["-o", "{name}.engine", "--target", "sm89", "--timeout", "60"],
    "precision": ["--to", "fp16", "-o", "{name}.fp16.onnx"],
    "profiles": [],
    "compare": ["--to", "fp16", "--allow-random", "--samples", "2"],
}
OUTPUTS = ("{name}.out.onnx", "{name}.engine", "{name}.fp16.onnx")

SAMPLE_MODELS = ("needs_fixing", "resnet_tiny", "bert_tiny", "fp16_overflow")
ODD_MODELS = ("dup_node_names", "custom_domain", "wrong_value_info", "bf16_initializers",
              "shared_symbolic", "unnamed_nodes", "int64_input")
BACKEND_MODELS = ("simple/test_sequence_model1", "pytorch-operator/test_operator_add_broadcast",
                  "pytorch-converted/test_PReLU_1d")

_USAGE = re.compile(r"\(see 'workbench [\w-]+ --help'\)|\bis required\b|field '--?[\w-]+'")
PLACEHOLDER_WORDS = ("MODEL", "OUT", "OUT.onnx", "FOLDER", "CANDIDATE", "FIXED.onnx", "OUT.engine",
                     "ENGINE", "NAME")
_STEP_TEXT = re.compile(r"(?:^|\s)\$ (workbench .*?)(?:  # .*)?$")
_BACKTICKED = re.compile(r"`(workbench [^`]+)`")


def corpus(folder: Path) -> Dict[str, Tuple[Path, Optional[Path]]]:
    """{name: (model path, its calibration data or None)} under `folder`."""
    import onnx

    from tests.odd_models import MAKERS

    out: Dict[str, Tuple[Path, Optional[Path]]] = {}
    for name in SAMPLE_MODELS:
        calib = SAMPLES / "calib" / f"{name}.npz"
        out[name] = (SAMPLES / f"{name}.onnx", calib if calib.is_file() else None)
    for name in ODD_MODELS:
        out[name] = (MAKERS[name](folder / "odd" / name), None)
    root = Path(onnx.__file__).resolve().parent / "backend" / "test" / "data"
    for key in BACKEND_MODELS:
        path = root / key / "model.onnx"
        if path.is_file():
            out[key.replace("/", "-")] = (path, None)
    return out


def run_verb(verb: str, model: str, cwd: Path, as_json: bool) -> Tuple[int, str, str]:
    """`workbench VERB MODEL ...` in `cwd` (in this process: the corpus runs share its
    TensorRT worker and its imports; so every model sits in the one folder `cwd`, the
    worker's working folder too)."""
    from tests.backend_sweep_cases import run_inprocess

    name = model[:-5] if model.endswith(".onnx") else model
    argv = [verb, model, *(a.format(name=name) for a in VERB_ARGS[verb])] + \
        (["--json"] if as_json else [])
    old = os.getcwd()
    os.chdir(cwd)
    try:
        return run_inprocess(argv)
    finally:
        os.chdir(old)


def _is_step(command: str) -> bool:
    """A backticked `workbench VERB` alone names the verb in prose ("`workbench build` splits
    so by itself"): a step has at least one argument."""
    return len(command.split()) > 2


def steps_in_text(text: str) -> List[str]:
    """The commands a human reads: `$ workbench ...` lines, and `workbench ...` in backticks."""
    out = []
    for line in text.splitlines():
        m = _STEP_TEXT.search(line)
        if m:
            out.append(m.group(1).strip())
        out += [c.strip() for c in _BACKTICKED.findall(line) if _is_step(c)]
    return out


def steps_in_json(doc: Any) -> List[str]:
    """The commands a script reads: every next_steps record's command (rendered from the
    record when it has none), and `workbench ...` in backticks in any string."""
    from workbench.core.nextstep import command

    out: List[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                if k == "next_steps" and isinstance(x, list):
                    out.extend(r.get("command") or command(r) for r in x if isinstance(r, dict))
                else:
                    walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
        elif isinstance(v, str):
            out.extend(c.strip() for c in _BACKTICKED.findall(v) if _is_step(c))

    walk(doc)
    return out


def json_docs(stdout: str) -> List[Any]:
    """The JSON document(s) a --json run printed (one, or one per line)."""
    try:
        return [json.loads(stdout)]
    except ValueError:
        docs = []
        for line in stdout.splitlines():
            try:
                docs.append(json.loads(line))
            except ValueError:
                pass
        return docs


@dataclass
class Pasted:
    step: str
    origin: str       # "MODEL verb (text|json)"
    rc: Optional[int]
    stderr: str
    parsed_only: bool = False

    def problem(self) -> Optional[str]:
        if self.rc is None:
            return self.stderr
        if self.rc not in (0, 1, 2):
            return f"exit {self.rc}: {self.stderr.strip()[-400:]}"
        if self.rc == 2:
            last = [ln for ln in self.stderr.splitlines() if "error" in ln][-1:] or [""]
            if _USAGE.search(last[0]):
                return f"usage error: {last[0][:400]}"
            words = set(shlex.split(self.step))
            if any(w in words for w in PLACEHOLDER_WORDS) and "not found" in last[0]:
                return f"an unfilled placeholder: {last[0][:400]}"
        return None


def paste(step: str, model: Path, data: Optional[Path], work: Path, origin: str) -> Pasted:
    """Run `step` in a shell in a new empty folder under `work` holding a copy of `model`
    (under its own name) and of what the verbs wrote beside it (OUTPUTS: a step may be about
    the fixed model or the engine the run wrote), as a user pastes it."""
    try:
        words = shlex.split(step)
    except ValueError as e:
        return Pasted(step, origin, None, f"does not split into shell words: {e}")
    if "DATA" in words or any(w.endswith("=DATA") for w in words):
        if data is None:
            return _parse_only(step, words, origin)
        step = " ".join(shlex.quote(str(data)) if w == "DATA" else shlex.quote(w)
                        for w in words)
    folder = work / f"paste{len(list(work.iterdir())):04d}"
    folder.mkdir()
    shutil.copy2(model, folder / model.name)
    for out in OUTPUTS:
        made = model.with_name(out.format(name=model.stem))
        if made.is_file():
            shutil.copy2(made, folder / made.name)
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.pop("WORKBENCH_DEBUG", None)
    try:
        p = subprocess.run(["bash", "-c", step], cwd=folder, capture_output=True, text=True,
                           timeout=300, env=env)
    except subprocess.TimeoutExpired:
        return Pasted(step, origin, None, "ran past 300 s")
    return Pasted(step, origin, p.returncode, p.stderr)


def _parse_only(step: str, words: List[str], origin: str) -> Pasted:
    """argparse's verdict on the step (DATA standing for the user's data)."""
    import contextlib
    import io

    from workbench.cli import build_parser

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            args, extra = build_parser(words[1]).parse_known_args(words[1:])
            rc = 2 if extra else 0
            if extra:
                err.write(f"workbench: error: unrecognized arguments: {extra} "
                          f"(see 'workbench {words[1]} --help')\n")
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 2
            line = getattr(e, "line", "")
            err.write(line + "\n")
    return Pasted(step, origin, rc, err.getvalue(), parsed_only=True)


def unique(steps: Iterable[Tuple[str, str, str]]) -> List[Tuple[str, str, str]]:
    """(step, model name, origin) once per step text and model."""
    seen, out = set(), []
    for s, m, o in steps:
        if (s, m) not in seen:
            seen.add((s, m))
            out.append((s, m, o))
    return out


def collect(folder: Path, names: Iterable[str], verbs: Iterable[str] = tuple(VERB_ARGS)
            ) -> List[Tuple[str, str, str]]:
    """(step, model name, origin) for every next step every verb printed, text and --json,
    on the models `folder/NAME.onnx`."""
    found: List[Tuple[str, str, str]] = []
    for name in names:
        for verb in verbs:
            for as_json in (False, True):
                rc, out, err = run_verb(verb, f"{name}.onnx", folder, as_json)
                how = "json" if as_json else "text"
                if as_json:
                    steps = [s for d in json_docs(out) for s in steps_in_json(d)]
                    steps += steps_in_text(err)  # (progress and notes go to stderr)
                else:
                    steps = steps_in_text(out + "\n" + err)
                found += [(s, name, f"{verb} ({how}, exit {rc})") for s in steps]
    return unique(found)


def advice_text(entry: Dict[str, Any]) -> str:
    """An unsupported entry's advice as the CLI reads it out: each next step's command in
    backticks then why, then the hint, joined by '; or ' (what tests of the advice read)."""
    from workbench.core.nextstep import command

    parts = [f"`{command(s)}` {s.get('why', '')}".strip() for s in entry.get("next_steps") or []]
    return "; or ".join(parts + ([entry["hint"]] if entry.get("hint") else []))
