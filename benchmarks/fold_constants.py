"""Constant folding: `workbench fix --recipe fold_constants` vs `polygraphy surgeon sanitize
--fold-constants` (the named baseline), side by side, on the same files.

Models:
  bloater   tests/data/fixtures/polygraphy-models/constant_fold_bloater.onnx when present, else a
            generated equivalent: a 1x1 constant Expanded to [2048, 2048] and Tiled to
            [4096, 4096] (64 MiB once folded) and added to the input, plus a small foldable Add;
  bert_base a generated 12-layer, hidden-768 BERT encoder (~440 MB of weights as external data,
            the generator of benchmarks/inspect_large.py).
Each command runs as a separate process (fresh WORKBENCH_HOME for workbench), alternating,
`--repeat` times; we report median wall time and peak RSS (wait4 ru_maxrss through a tiny runner)
and the size of what each wrote. Three columns: `workbench fix` (the full user command: history
versions, onnxruntime verification, diff), `workbench fold` (load, fold, save only: the same work
Polygraphy does) and Polygraphy. Targets: workbench no slower than Polygraphy, and the size
threshold keeps the bloater from growing. The last line is one JSON object.

    python benchmarks/fold_constants.py [--repeat 3] [--bert-repeat 1] [--skip-bert] [--keep DIR]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "data" / "fixtures" / "polygraphy-models" / "constant_fold_bloater.onnx"

_CORE = """import sys
import onnx
from workbench.surgery.recipes.cleanup import fold_constants
from workbench.core.model import save_model
m = onnx.load(sys.argv[1])
save_model(fold_constants(m), sys.argv[2])
"""


def _inspect_large():
    spec = importlib.util.spec_from_file_location("inspect_large", REPO / "benchmarks" / "inspect_large.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def make_bloater(path: Path, n: int = 2048) -> Path:
    """The generated bloater (see the module docstring)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("Expand", ["one", "shape"], ["big"], name="expand"),
             helper.make_node("Tile", ["big", "reps"], ["bigger"], name="tile"),
             helper.make_node("Add", ["x", "bigger"], ["y"], name="add"),
             helper.make_node("Add", ["a", "b"], ["ab"], name="small_add"),
             helper.make_node("Add", ["y", "ab"], ["out"], name="add2")]
    inits = {"one": np.ones((1, 1), np.float32), "shape": np.array([n, n], np.int64),
             "reps": np.array([2, 2], np.int64), "a": np.ones((1, 1), np.float32),
             "b": np.ones((1, 1), np.float32)}
    g = helper.make_graph(nodes, "constant_fold_bloater",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2 * n, 2 * n])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2 * n, 2 * n])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


def _size(path: Path) -> int:
    total = path.stat().st_size if path.exists() else 0
    for extra in path.parent.glob(path.name + ".data*"):
        total += extra.stat().st_size
    return total


def bench_model(name: str, model: Path, work: Path, repeat: int, measure) -> Dict[str, Dict]:
    bindir = Path(sys.executable).parent
    wb = shutil.which("workbench", path=str(bindir)) or "workbench"
    pg = shutil.which("polygraphy", path=str(bindir)) or "polygraphy"
    outs = {k: work / f"{name}.{k}.onnx" for k in ("fix", "fold", "polygraphy")}

    def cmds(i: int) -> Dict[str, List[str]]:
        home = work / f"home-{name}-{i}"
        return {"fix": ["env", f"WORKBENCH_HOME={home}", wb, "fix", str(model), "-o",
                        str(outs["fix"]), "--recipe", "fold_constants"],
                "fold": [sys.executable, "-c", _CORE, str(model), str(outs["fold"])],
                "polygraphy": [pg, "surgeon", "sanitize", str(model), "--fold-constants", "-o",
                               str(outs["polygraphy"])]}

    runs: Dict[str, List[Dict[str, float]]] = {k: [] for k in outs}
    for i in range(repeat):
        for k, c in cmds(i).items():
            runs[k].append(measure(c))
        for d in work.glob(f"home-{name}-{i}"):
            shutil.rmtree(d, ignore_errors=True)
    src = _size(model)
    res = {}
    for k, v in runs.items():
        res[k] = {"wall_s": statistics.median(r["wall_s"] for r in v),
                  "peak_mb": max(r["peak_mb"] for r in v),
                  "out_mb": _size(outs[k]) / 1e6, "growth": _size(outs[k]) / src}
    res["input_mb"] = src / 1e6
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per command on the bloater")
    ap.add_argument("--bert-repeat", type=int, default=1, help="runs per command on bert_base")
    ap.add_argument("--skip-bert", action="store_true", help="only the bloater (quick)")
    ap.add_argument("--keep", type=Path, help="work in (and keep) this folder")
    args = ap.parse_args()
    il = _inspect_large()
    work = args.keep or Path(tempfile.mkdtemp(prefix="wb-fold-"))
    work.mkdir(parents=True, exist_ok=True)
    results: Dict[str, Dict] = {}
    try:
        if FIXTURE.exists():
            bloater, origin = FIXTURE, "fixture"
        else:
            bloater, origin = make_bloater(work / "constant_fold_bloater.onnx"), "generated"
        print(f"bloater: {bloater} ({origin}, {_size(bloater) / 1e3:.1f} KB)")
        results["bloater"] = bench_model("bloater", bloater, work, args.repeat, il.measure)
        if not args.skip_bert:
            bert = work / "bert_base.onnx"
            if not (bert.exists() and (work / "bert_base.onnx.data").exists()):
                t0 = time.perf_counter()
                bert = il.generate(work)
                print(f"bert_base: generated in {time.perf_counter() - t0:.1f} s")
            print(f"bert_base: {bert} ({_size(bert) / 1e6:.0f} MB with external data)")
            results["bert_base"] = bench_model("bert", bert, work, args.bert_repeat, il.measure)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)

    print(f"\n{'':<22}{'workbench fix':>16}{'workbench fold':>16}{'polygraphy':>14}"
          f"{'fix/pg':>8}{'fold/pg':>8}")
    summary = {}
    for name, r in results.items():
        f, c, p = r["fix"], r["fold"], r["polygraphy"]
        for key, label, fmt in (("wall_s", "time (s)", "{:.2f}"), ("peak_mb", "peak RSS (MB)", "{:.0f}"),
                                ("out_mb", "output (MB)", "{:.2f}")):
            print(f"{name + ' ' + label:<22}{fmt.format(f[key]):>16}{fmt.format(c[key]):>16}"
                  f"{fmt.format(p[key]):>14}{f[key] / p[key]:>8.2f}{c[key] / p[key]:>8.2f}")
        print(f"{name + ' input (MB)':<22}{r['input_mb']:>16.2f}")
        summary[name] = {
            "input_mb": round(r["input_mb"], 3),
            **{f"{k}_{m}": round(r[k][m], 3) for k in ("fix", "fold", "polygraphy")
               for m in ("wall_s", "peak_mb", "out_mb")},
            "fix_time_ratio": round(f["wall_s"] / p["wall_s"], 3),
            "fold_time_ratio": round(c["wall_s"] / p["wall_s"], 3),
            "fix_peak_ratio": round(f["peak_mb"] / p["peak_mb"], 3),
            "fold_peak_ratio": round(c["peak_mb"] / p["peak_mb"], 3),
            "fix_growth": round(f["growth"], 3), "polygraphy_growth": round(p["growth"], 3)}
    b = summary.get("bloater", {})
    # "does not grow": the weights stay as they were (shape annotations add a few bytes)
    met_bloat = bool(b) and all(b[f"{k}_out_mb"] - b["input_mb"] < 0.016 for k in ("fix", "fold"))
    met_speed = all(s["fold_time_ratio"] <= 1.0 for s in summary.values())
    met_fix = all(s["fix_time_ratio"] <= 1.0 for s in summary.values())
    print(f"\ntargets: bloater does not grow with the threshold: {met_bloat}; no slower than "
          f"polygraphy on every model: workbench fold {met_speed}, workbench fix {met_fix}")
    print(json.dumps({"benchmark": "fold_constants", "baseline": "polygraphy surgeon sanitize "
                      "--fold-constants", "bloater_source": origin, "results": summary,
                      "target_bloater_no_growth": met_bloat, "target_no_slower": met_speed,
                      "target_no_slower_full_fix": met_fix}))


if __name__ == "__main__":
    main()
