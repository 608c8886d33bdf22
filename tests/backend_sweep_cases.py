"""Every model in onnx's backend test data through the verbs users run first (shared by
tests/test_backend_sweep.py and benchmarks/backend_sweep.py).

The models are the ones the `onnx` wheel ships under onnx/backend/test/data: node (when the
wheel has it), simple, real (pointers to light models), pytorch-converted, pytorch-operator and
light. Each verb runs through the CLI's own entry point (`workbench.cli.main`) in this process,
or through the real console script (`run_console`), and the outcome must be exit 0, 1 or 2
with no traceback, and exit 2 with exactly one line on stderr: never exit 3 (internal error).
"""
from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("node", "simple", "real", "pytorch-converted", "pytorch-operator", "light")
VERBS = ("check", "fix", "precision", "build")
# the verbs tests/test_verb_sweep.py adds over the same models (no TensorRT in them)
READ_VERBS = ("inspect", "graph", "profiles", "compare")
BUILD_TIMEOUT_S = 60.0  # per model; a build past it is exit 1 ("time limit"), never a hang
BUILD_MAX_NODES_CI = 250  # see ci_selection


def data_root() -> Path:
    import onnx

    return Path(onnx.__file__).resolve().parent / "backend" / "test" / "data"


@dataclass(frozen=True)
class SweepModel:
    folder: str   # node, simple, real, ...
    name: str     # test_sequence_model1, light_resnet50, ...
    path: Path    # the .onnx file (a real/ entry points at its light/ model)

    @property
    def key(self) -> str:
        return f"{self.folder}/{self.name}"

    @property
    def nodes(self) -> int:
        """Nodes of the main graph (what a build's time grows with)."""
        return _node_count(str(self.path))


@functools.lru_cache(maxsize=None)
def _node_count(path: str) -> int:
    import onnx

    return len(onnx.load(path, load_external_data=False).graph.node)


def models(folders: Tuple[str, ...] = FOLDERS) -> List[SweepModel]:
    """Every model of the backend test data, in folder order then by name."""
    root = data_root()
    out: List[SweepModel] = []
    for folder in folders:
        base = root / folder
        if not base.is_dir():
            continue  # `node` is not in every onnx wheel
        for entry in sorted(base.iterdir()):
            if entry.is_file() and entry.suffix == ".onnx":  # light/light_*.onnx
                out.append(SweepModel(folder, entry.stem, entry))
            elif (entry / "model.onnx").is_file():
                out.append(SweepModel(folder, entry.name, entry / "model.onnx"))
            elif (entry / "data.json").is_file():  # real/: {"url": "onnx/backend/.../x.onnx"}
                url = json.loads((entry / "data.json").read_text()).get("url", "")
                target = root.parents[3] / url if url.startswith("onnx/") else None
                if target is not None and target.is_file():
                    out.append(SweepModel(folder, entry.name, target))
    return out


def generate_node_models(dest: Path) -> List[SweepModel]:
    """onnx's `node` test models (one per operator case, ~1900), which the wheels do not ship:
    made by onnx's own test-case generators (`onnx.backend.test.case.node`, what onnx's
    `backend-test-tools generate-data` writes into data/node) into `dest/node/NAME/model.onnx`,
    once (a `.complete` marker)."""
    base = dest / "node"
    if not (base / ".complete").is_file():
        import warnings

        import onnx.backend.test.case.node as node_cases

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the generators' numpy overflow warnings
            cases = node_cases.collect_testcases(None)
        for case in cases:
            folder = base / case.name
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "model.onnx").write_bytes(case.model.SerializeToString())
        (base / ".complete").write_text(str(len(cases)))
    return [SweepModel("node", d.name, d / "model.onnx") for d in sorted(base.iterdir())
            if (d / "model.onnx").is_file()]


# the node models CI sweeps: values that are not plain tensors (sequences, optionals) and
# control flow, the kind that once crashed constant folding (~45 of the ~1900)
NODE_CI = re.compile(r"seq|optional|loop|_if|scan", re.I)


def node_ci_sample(node_models: List[SweepModel]) -> List[SweepModel]:
    return [m for m in node_models if NODE_CI.search(m.name)]


def argv_for(verb: str, model: Path, out_dir: Path,
             build_timeout: float = BUILD_TIMEOUT_S) -> List[str]:
    """The command line a user would type first for this verb."""
    m = str(model)
    if verb == "check":
        return ["check", m, "--backend", "tensorrt-rtx"]
    if verb == "fix":
        return ["fix", m, "-o", str(out_dir / "fixed.onnx"), "--auto"]
    if verb == "precision":
        return ["precision", m, "--to", "fp16", "-o", str(out_dir / "fp16.onnx")]
    if verb == "build":
        # (the cache stays on: real/ names the light/ files, whose second build is a cache hit)
        return ["build", m, "-o", str(out_dir / "model.engine"), "--backend", "tensorrt-rtx",
                "--target", "sm89", "--timeout", f"{build_timeout:g}"]
    if verb == "compare":
        return ["compare", m, "--to", "fp16", "--allow-random"]
    if verb in ("inspect", "graph", "profiles"):
        return [verb, m]
    raise KeyError(verb)


@dataclass
class Outcome:
    model: str
    verb: str
    rc: int
    seconds: float
    message: str      # the line a user reads first (stderr's last line, else stdout's first)
    stderr: str
    via: str = "in-process"

    @property
    def problems(self) -> List[str]:
        """What breaks the contract: exit 3 (or any other code), a traceback, an exit 2 whose
        message is not one line, `workbench VERB: error: ...`, at the end of stderr (a build
        prints its progress and TensorRT's error lines before it, one line each)."""
        bad = []
        if self.rc not in (0, 1, 2):
            bad.append(f"exit {self.rc}")
        if "Traceback (most recent call last)" in self.stderr:
            bad.append("traceback on stderr")
        lines = [ln for ln in self.stderr.splitlines() if ln.strip()]
        if self.rc == 2:
            rest = [ln for ln in lines if not (self.verb == "build" and is_progress_line(ln))]
            if len(rest) != 1 or not rest[0].startswith(f"workbench {self.verb}: error: ") \
                    or rest[0] != lines[-1]:
                bad.append(f"exit 2 with {len(rest)} message line(s) on stderr")
        return bad

    def row(self) -> Dict[str, object]:
        return {"model": self.model, "verb": self.verb, "rc": self.rc, "via": self.via,
                "seconds": round(self.seconds, 2), "message": self.message[:300]}


PROGRESS = re.compile(r"^ *(\d{1,3}\.\d%|\.\.\.) +\S")  # `workbench build`'s progress lines


def is_progress_line(line: str) -> bool:
    """A build's progress line (` 80.0% building: ...`) or a TensorRT error it passes on."""
    return bool(PROGRESS.match(line)) or line.startswith("[TRT ")


def _message(verb: str, rc: int, out: str, err: str) -> str:
    """The line that says what happened: the verb's own `workbench VERB: ...` line on stderr,
    else the first line of its report (what was written, what is still unsupported)."""
    err_lines = [ln.strip() for ln in err.splitlines() if ln.strip() and not PROGRESS.match(ln)]
    out_lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    own = [ln for ln in err_lines if ln.startswith(f"workbench {verb}:")]
    if own:
        return own[-1]
    if rc == 0:
        return (out_lines or err_lines or [""])[0]
    told = [ln for ln in out_lines if ln.startswith(("NOT SUPPORTED", "still unsupported"))]
    return (told or err_lines or out_lines or [""])[0]


def run_inprocess(argv: List[str]) -> Tuple[int, str, str]:
    """(exit code, stdout, stderr) of `workbench ARGV` run through `workbench.cli.main`."""
    from workbench.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            rc = main(argv)
        except SystemExit as e:  # argparse
            rc = e.code if isinstance(e.code, int) else 2
    return rc, out.getvalue(), err.getvalue()


def console_script() -> List[str]:
    """The installed `workbench` console script (what users get), else `python -m
    workbench.cli` (same entry point: `workbench.cli.run`)."""
    exe = shutil.which("workbench")
    return [exe] if exe else [sys.executable, "-m", "workbench.cli"]


def run_console(argv: List[str], timeout: float = 300.0,
                home: Optional[Path] = None) -> Tuple[int, str, str]:
    """(exit code, stdout, stderr) of the real console script; `home`: its WORKBENCH_HOME (a
    fresh one makes its build a real build, not a hit in the in-process runs' cache)."""
    env = dict(os.environ)
    env.pop("WORKBENCH_DEBUG", None)
    if home is not None:
        env["WORKBENCH_HOME"] = str(home)
    p = subprocess.run(console_script() + argv, capture_output=True, text=True,
                       timeout=timeout, env=env)
    return p.returncode, p.stdout, p.stderr


def run_one(model: SweepModel, verb: str, work: Path, *, console: bool = False,
            build_timeout: float = BUILD_TIMEOUT_S) -> Outcome:
    """One verb on one model in a fresh folder under `work` (removed afterwards)."""
    out_dir = work / f"{model.folder}-{model.name}-{verb}"
    out_dir.mkdir(parents=True, exist_ok=True)
    argv = argv_for(verb, model.path, out_dir, build_timeout)
    t = time.monotonic()
    if console:
        rc, out, err = run_console(argv, home=work / "console-home")
    else:
        rc, out, err = run_inprocess(argv)
    dt = time.monotonic() - t
    shutil.rmtree(out_dir, ignore_errors=True)
    return Outcome(model.key, verb, rc, dt, _message(verb, rc, out, err), err,
                   "console" if console else "in-process")


def ci_selection(all_models: Optional[List[SweepModel]] = None,
                 build_max_nodes: Optional[int] = BUILD_MAX_NODES_CI
                 ) -> Dict[str, List[SweepModel]]:
    """What runs per verb. CI: check, fix --auto and precision on EVERY model (0.1-1 s each),
    builds of every model up to `build_max_nodes` nodes: all of simple/ and pytorch-*/ and the
    small zoo nets (AlexNet, ZFNet, VGG-19, SqueezeNet, Inception-v1). The four big nets
    (ResNet-50, ShuffleNet, Inception-v2, DenseNet-121: 400-1750 nodes) cost 5-20 s each to
    build on 2 shared cores; CI still parses them (check, fix) and the full benchmark builds
    them. None: builds of every model."""
    ms = all_models if all_models is not None else models()
    return {"check": ms, "fix": ms, "precision": ms,
            "build": [m for m in ms if build_max_nodes is None or m.nodes <= build_max_nodes]}


def console_sample(all_models: Optional[List[SweepModel]] = None) -> List[SweepModel]:
    """A few models for the real console script: one per folder (the first) plus the models
    whose in-process runs once crashed."""
    ms = all_models if all_models is not None else models()
    picked: Dict[str, SweepModel] = {}
    for m in ms:
        picked.setdefault(m.folder, m)
    for m in ms:
        if m.key in KNOWN_CRASHERS:
            picked[m.key] = m
    return list(picked.values())


# models whose sweep once ended in exit 3 (each has a regression test of its cause)
KNOWN_CRASHERS = ("simple/test_sequence_model1",)
