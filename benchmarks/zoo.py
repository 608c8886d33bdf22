"""The zoo, first try: every model of tests/data/zoo through the workbench as a new user would.

Per model (materialized with tests/zoo_models.py, seed 0) and backend (TensorRT-RTX here):
`inspect`, `check`, `fix --auto`, `precision --to fp16` (valid: onnx checker + onnxruntime
load; accurate, strict: max |FP16 - FP32| / max |FP32| over the float outputs on the fixed
seeded input, budget 1%; accurate, selection-aware: `workbench.compare.selection` — after a
data-dependent selection (NMS, TopK, NonZero) the tensors feeding it within the budget and the
selected rows differing only among near-tied candidates), and a first-try `build --precision
fp16` with no hand-written profile (the default profile; ahead of time for sm89, opt level 0,
time-limited): an engine alone, or an engine + ONNX tail when the parser refuses a tail the
split recipe cuts (`split` in the table). Each step runs the
real CLI in a child process with a time limit and records exit code, last message and
seconds. Prints one table row per model as it goes, then the table, then one JSON object.

    python benchmarks/zoo.py [--models a,b | --small] [--build-timeout 240]
                             [--step-timeout 300] [--jsonl results.jsonl [--resume]]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import numpy as np  # noqa: E402

from zoo_models import SMALL, manifest, materialize, names, sample_inputs  # noqa: E402

BUDGET = 0.01  # max relative error of FP16 vs FP32 (normalised by the FP32 output's max)
STEPS = ("inspect", "check", "fix", "fp16", "build")


def _cli(args: List[str], timeout: float, env: Dict[str, str]) -> Dict[str, Any]:
    t0 = time.monotonic()
    try:
        r = subprocess.run([sys.executable, "-m", "workbench.cli", *args], capture_output=True,
                           text=True, timeout=timeout, env=env)
        rc, out, err = r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired as e:
        rc, out = "timeout", (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else ""
        err = f"step time limit {timeout:g} s"
    lines = [ln for ln in (err or "").splitlines() if ln.strip() and not ln.startswith(" ")]
    return {"rc": rc, "seconds": round(time.monotonic() - t0, 2), "stdout": out,
            "message": (lines[-1] if lines else "")[:300]}


def _unsupported(items: List[Dict[str, Any]]) -> str:
    """'op at node (+N more)' for a check/fix report's unsupported list."""
    if not items:
        return ""
    u = items[0]
    more = f" (+{len(items) - 1} more)" if len(items) > 1 else ""
    return f"{u.get('op')} at {u.get('node')}: {str(u.get('reason') or '')[:80]}{more}"


def _ort(path: Path, feeds: Dict[str, Any]) -> Dict[str, Any]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds)))


def rel_error(ref: List[Any], got: List[Any]) -> Optional[float]:
    """max |got - ref| / max |ref| over the float outputs of equal shape (None: none)."""
    worst: Optional[float] = None
    for a, b in zip(ref, got):
        if a.dtype.kind != "f" or a.shape != b.shape or a.size == 0:
            continue
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        scale = float(np.abs(a64).max())
        if not np.isfinite(b64).all():
            return float("inf")
        err = float(np.abs(a64 - b64).max()) / (scale if scale > 0 else 1.0)
        worst = err if worst is None else max(worst, err)
    return worst


def run_model(name: str, work: Path, *, build_timeout: float = 240,
              step_timeout: float = 300, backend: str = "tensorrt-rtx") -> Dict[str, Any]:
    """All steps for one model; returns the row (per step: ok, rc, seconds, message)."""
    import onnx

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    env.setdefault("WORKBENCH_HOME", str(work / "home"))
    row: Dict[str, Any] = {"model": name, "category": manifest()[name]["category"],
                           "backend": backend}
    t0 = time.monotonic()
    model = materialize(name, 0, work / "models")
    row["make_seconds"] = round(time.monotonic() - t0, 2)
    r = _cli(["inspect", str(model), "--json"], step_timeout, env)
    row["inspect"] = dict(ok=r["rc"] == 0, rc=r["rc"], seconds=r["seconds"], message=r["message"])
    r = _cli(["check", str(model), "--backend", backend, "--json"], step_timeout, env)
    supported = None
    if r["rc"] in (0, 1):
        try:
            d = json.loads(r["stdout"])
            supported = bool(d.get("supported"))
            if not supported:
                r["message"] = _unsupported(d.get("unsupported") or []) or r["message"]
        except (ValueError, AttributeError):
            supported = r["rc"] == 0
    row["check"] = dict(ok=r["rc"] in (0, 1), rc=r["rc"], seconds=r["seconds"],
                        supported=supported, message=r["message"])
    fixed = work / "models" / f"{name}-fixed.onnx"
    r = _cli(["fix", str(model), "--auto", "--backend", backend, "-o", str(fixed), "--json"],
             step_timeout, env)
    try:
        left = json.loads(r["stdout"]).get("remaining") or []
        if left:
            r["message"] = "still unsupported: " + _unsupported(left)
    except (ValueError, AttributeError):
        pass
    row["fix"] = dict(ok=r["rc"] == 0, rc=r["rc"], seconds=r["seconds"], message=r["message"],
                      wrote=fixed.is_file())
    src = fixed if fixed.is_file() else model
    fp16 = work / "models" / f"{name}-fp16.onnx"
    r = _cli(["precision", str(src), "--to", "fp16", "-o", str(fp16)], step_timeout, env)
    step: Dict[str, Any] = dict(rc=r["rc"], seconds=r["seconds"], message=r["message"])
    step["valid"] = False
    if r["rc"] == 0 and fp16.is_file():
        try:
            onnx.checker.check_model(str(fp16))
            feeds = sample_inputs(name, batch=1, seed=0)
            ref = _ort(model, feeds)
            got = _ort(fp16, feeds)
            step["valid"] = True
            err = rel_error(list(ref.values()), [got[k] for k in ref])
            step["rel_error"] = err
            step["ref_scale"] = max((float(np.abs(a).max()) for a in ref.values()
                                     if a.dtype.kind == "f" and a.size), default=None)
            step["accurate"] = err is not None and err <= BUDGET
            from workbench.compare.selection import selection_aware

            sel = selection_aware(str(model), str(fp16), feeds, tol=BUDGET,
                                  ref_outputs=ref, cand_outputs=got)
            step["accurate_selection"] = sel.passed
            step["selection"] = dict(sel.to_dict(), summary=sel.summary())
        except Exception as e:  # noqa: BLE001 - the table says what broke
            step["message"] = f"{type(e).__name__}: {str(e).splitlines()[0][:250]}"
    step["ok"] = bool(step["valid"] and step.get("accurate"))
    step["ok_selection"] = bool(step["valid"] and step.get("accurate_selection"))
    row["fp16"] = step
    engine = work / "engines" / f"{name}.engine"
    r = _cli(["build", str(src), "--precision", "fp16", "--backend", backend, "--target",
              "sm89", "--opt-level", "0", "--timeout", str(build_timeout), "-o", str(engine),
              "--mkdir", "--json"], build_timeout + 60, env)
    b: Dict[str, Any] = dict(ok=r["rc"] == 0, rc=r["rc"], seconds=r["seconds"],
                             message=r["message"], model=src.name)
    try:
        d = json.loads(r["stdout"])
        if r["rc"] != 0:
            b["message"] = (d.get("error") or b["message"])[:300]
            b["node"] = d.get("node")
        split = d.get("split") or None
        b["split"] = bool(split)
        if split:
            b["engine_nodes"] = split.get("engine_nodes")
            b["onnxruntime_nodes"] = split.get("onnxruntime_nodes")
            b["refused"] = [f"{r.get('op')} at {r.get('node')}" for r in
                            split.get("refused") or []][:3]
        b["profile"] = next((f.get("extra", {}).get("flag") for f in d.get("findings", [])
                             if f.get("code") == "default-profile"), None)
    except (ValueError, AttributeError):
        pass
    row["build"] = b
    row["seconds"] = round(time.monotonic() - t0, 2)
    for p in (fp16, fixed, engine):  # keep the disk small: the zoo's FP32 models stay cached
        if p.exists():
            p.unlink()
    return row


def _cell(step: Dict[str, Any]) -> str:
    mark = "ok" if step.get("ok") else ("TIME" if step.get("rc") == "timeout" else "FAIL")
    if step.get("ok") and step.get("split"):
        mark = "split"
    return f"{mark} {step.get('seconds', 0):.0f}s"


def table(rows: List[Dict[str, Any]]) -> str:
    """fp16: valid and accurate (strict, elementwise); sel.: accurate, selection-aware;
    build: ok = an engine alone, split = engine + ONNX tail."""
    head = f"{'model':38s} {'category':14s} " + " ".join(f"{s:>9s}" for s in STEPS) + \
        f" {'sel.':>5s}  fp16 rel.err  note"
    out = [head, "-" * len(head)]
    for r in rows:
        f = r["fp16"]
        err = f.get("rel_error")
        notes = []
        if not r["fix"]["ok"]:
            notes.append(f"fix: {r['fix']['message'][:70] or 'exit ' + str(r['fix']['rc'])}")
        if not r["build"]["ok"]:
            notes.append(f"build: {r['build']['message'][:80]}")
        elif r["build"].get("split"):
            notes.append(f"build: engine {r['build'].get('engine_nodes')} nodes + onnxruntime "
                         f"tail {r['build'].get('onnxruntime_nodes')}")
        if not f.get("valid"):
            notes.append(f"fp16: {f.get('message', '')[:60]}")
        elif not f.get("ok"):
            notes.append(f"FP32 output max {f.get('ref_scale') or 0:.2g}")
        if f.get("valid") and (f.get("selection") or {}).get("selection_nodes"):
            notes.append(f"sel.: {f.get('selection', {}).get('summary', '')[:150]}")
        note = "; ".join(notes)
        sel = "ok" if f.get("ok_selection") else "FAIL"
        out.append(f"{r['model']:38s} {r['category']:14s} " +
                   " ".join(f"{_cell(r[s]):>9s}" for s in STEPS) + f" {sel:>5s}"
                   f"  {'-' if err is None else f'{err:.2e}':>12s}  {note}")
    return "\n".join(out)


def summary(rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    n = len(rows)

    def rate(pred: Any) -> float:
        return round(sum(1 for r in rows if pred(r)) / n, 3) if n else 0.0

    return {"benchmark": "zoo", "models": n,
            "inspect": rate(lambda r: r["inspect"]["ok"]),
            "check": rate(lambda r: r["check"]["ok"]),
            "supported": rate(lambda r: r["check"].get("supported")),
            "fix": rate(lambda r: r["fix"]["ok"]),
            "fp16_valid": rate(lambda r: r["fp16"]["valid"]),
            "fp16_accurate": rate(lambda r: r["fp16"].get("accurate")),
            "fp16_accurate_selection_aware": rate(lambda r: r["fp16"].get("ok_selection")),
            "first_try_build": rate(lambda r: r["build"]["ok"]),
            "first_try_build_engine_only": rate(lambda r: r["build"]["ok"] and
                                                not r["build"].get("split")),
            "first_try_build_split": rate(lambda r: r["build"]["ok"] and
                                          bool(r["build"].get("split"))),
            "exit3": sum(1 for r in rows for s in STEPS if r[s].get("rc") == 3),
            "seconds": round(sum(r["seconds"] for r in rows), 1)}


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", help="comma-separated zoo names (default: all)")
    ap.add_argument("--small", action="store_true", help="only the small CI models")
    ap.add_argument("--build-timeout", type=float, default=240)
    ap.add_argument("--step-timeout", type=float, default=300)
    ap.add_argument("--jsonl", help="append each model's row here as it finishes")
    ap.add_argument("--work", help="work folder (default: a temporary one)")
    ap.add_argument("--resume", action="store_true",
                    help="models already in --jsonl are not run again: their rows count")
    a = ap.parse_args(argv)
    chosen = list(SMALL) if a.small else (a.models.split(",") if a.models else
                                          sorted(names(), key=lambda n: manifest()[n]["params"]))
    work = Path(a.work or tempfile.mkdtemp(prefix="wb-zoo-bench-"))
    rows = []
    done: Dict[str, Dict[str, Any]] = {}
    if a.resume and a.jsonl and os.path.isfile(a.jsonl):
        with open(a.jsonl) as fh:
            done = {r["model"]: r for r in map(json.loads, filter(str.strip, fh))}
    for name in chosen:
        if name in done:
            rows.append(done[name])
            continue
        row = run_model(name, work, build_timeout=a.build_timeout, step_timeout=a.step_timeout)
        rows.append(row)
        print(table([row]).splitlines()[-1], flush=True)
        if a.jsonl:
            with open(a.jsonl, "a") as fh:
                fh.write(json.dumps(row) + "\n")
    print()
    print(table(rows))
    print(json.dumps(summary(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
