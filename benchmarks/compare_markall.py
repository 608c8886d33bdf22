"""Layer-wise FP16 comparison on the CPU: the workbench vs Polygraphy's mark-all run, side by side.

The job: every intermediate tensor of onnx's `light_resnet50` in FP32 (onnxruntime) against its
FP16 transform, on one input. Each contender runs as a fresh process, as a user would start it;
wall time and the peak resident memory of its whole process tree (the workbench's onnxruntime
child included) are sampled every 10 ms.

- baseline `polygraphy run REF --onnxrt --onnx-outputs mark all` (the issue's named baseline):
  one onnxruntime run of the FP32 model only, with every node output marked and held at once,
  under Polygraphy's defaults (onnxruntime's full graph optimisations, spinning threads). It
  does half of the job - no FP16 run, no comparison - so the goal asks the workbench to do
  twice the inference in the same time;
- `polygraphy-pair`: Polygraphy's Python API doing the whole job - OnnxrtRunner with every
  output marked on the FP32 and on the FP16 model, Comparator.run + compare_accuracy;
- `workbench compare REF CAND --inputs IN.npz --json`: the same whole job - onnxruntime FP32
  and the FP16 model emulated on onnxruntime (FP16 storage, FP32 arithmetic), both graphs as
  written (no graph optimisations), run a segment at a time (every node once; the default 32 MB
  budget of tensors held), the next segment running while this one is compared; per-tensor
  figures for every shared activation (constant weights are not compared), culprits, findings,
  the JSON report on stdout. The console script runs it in a forked worker with onnxruntime
  in-process, watching it (`workbench.cli.supervise`);
- `workbench-isolated` (for information, not a goal): the same command with
  WORKBENCH_CLI_FORK=0, every onnxruntime run in the onnxruntime child process (the route a
  notebook takes), its tensors crossing through shared-memory files.
Also the hopeless-FP16 answer: `workbench compare light_inception_v1 --to fp16`.

Bytecode: Polygraphy, onnx and numpy run from site-packages, compiled to .pyc when they were
installed; the checkout's modules are compiled the same way once before the runs (`compileall`
into their __pycache__, git-ignored), as an installed workbench would be. Where
PYTHONDONTWRITEBYTECODE is set (this machine) they would otherwise be compiled from source in
every run (~0.1 s of the parent's start-up); `--no-compile` measures that.

Goals (a debugging tool that costs no more than the baseline): workbench time <= 1.0x and peak
memory <= 0.5x the baseline's.
Last line: one JSON object with the figures.

    python benchmarks/compare_markall.py [--model light_resnet50] [--repeat 3]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import onnx
import psutil

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
REPO = Path(__file__).resolve().parents[1]

PAIR = r"""
import sys
from polygraphy.backend.onnx import OnnxFromPath, ModifyOutputs, BytesFromOnnx
from polygraphy.backend.onnxrt import OnnxrtRunner, SessionFromOnnx
from polygraphy.comparator import Comparator, CompareFunc
from polygraphy import constants
ref, cand = sys.argv[1], sys.argv[2]
runners = [OnnxrtRunner(SessionFromOnnx(BytesFromOnnx(ModifyOutputs(OnnxFromPath(p),
                                                                    outputs=constants.MARK_ALL))),
                        name=n) for p, n in ((ref, "fp32"), (cand, "fp16"))]
results = Comparator.run(runners)
ok = Comparator.compare_accuracy(results, compare_func=CompareFunc.simple(atol=1e-2, rtol=1e-2))
"""


def measure(cmd: List[str], env: Dict[str, str]) -> Tuple[float, float, int]:
    """(wall seconds, peak RSS MB of the process tree, return code)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    root = psutil.Process(p.pid)
    peak = 0
    while p.poll() is None:
        try:
            procs = [root] + root.children(recursive=True)
            rss = 0
            for q in procs:
                try:
                    rss += q.memory_info().rss
                except psutil.Error:
                    pass
            peak = max(peak, rss)
        except psutil.Error:
            pass
        time.sleep(0.01)
    wall = time.perf_counter() - t0
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    if p.returncode not in (0, 1):
        print(f"  {' '.join(cmd[:4])} ... exit {p.returncode}: {err[-400:]}")
    return wall, peak / 2 ** 20, p.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="light_resnet50")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-compile", action="store_true",
                    help="leave the checkout's modules uncompiled (see the module docstring)")
    args = ap.parse_args()
    if not args.no_compile:
        import compileall

        compileall.compile_dir(str(REPO / "workbench"), quiet=1)
    ref = LIGHT / f"{args.model}.onnx"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    tmp = Path(tempfile.mkdtemp(prefix="wb-markall-"))
    cand = tmp / f"{args.model}.fp16.onnx"
    sys.path.insert(0, str(REPO))
    from workbench.runtime.equivalence import make_inputs
    from workbench.precision.transform import convert

    m = onnx.load(str(ref))
    onnx.save(convert(m, "fp16", measure=False).proto, str(cand))
    np.savez(tmp / "in.npz", **make_inputs(m, seed=0))
    script = Path(sys.executable).parent / "polygraphy"
    script = str(script) if script.exists() else (shutil.which("polygraphy") or "polygraphy")
    poly = [sys.executable, script, "run", str(ref), "--onnxrt", "--onnx-outputs", "mark", "all"]
    pair = [sys.executable, "-c", PAIR, str(ref), str(cand)]
    wb = [sys.executable, "-m", "workbench.cli", "compare", str(ref), str(cand), "--inputs",
          str(tmp / "in.npz"), "--json"]
    hopeless = [sys.executable, "-m", "workbench.cli", "compare",
                str(LIGHT / "light_inception_v1.onnx"), "--to", "fp16", "--allow-random"]
    iso_env = dict(env, WORKBENCH_CLI_FORK="0")
    runs: Dict[str, List[Tuple[float, float, int]]] = {
        k: [] for k in ("polygraphy", "pair", "workbench", "isolated")}
    for i in range(args.repeat):  # interleaved, so load on the machine hits all alike
        for name, cmd, e in (("polygraphy", poly, env), ("pair", pair, env),
                             ("workbench", wb, env), ("isolated", wb, iso_env)):
            runs[name].append(measure(cmd, e))
    hop = measure(hopeless, env)

    def fig(name: str) -> Tuple[float, float]:
        return (statistics.median(r[0] for r in runs[name]), max(r[1] for r in runs[name]))

    (pt, pm), (qt, qm), (wt, wm) = fig("polygraphy"), fig("pair"), fig("workbench")
    it, im = fig("isolated")
    print(f"{args.model}: FP32 vs FP16, every tensor, 1 input, {args.repeat} runs each (median "
          "wall, max peak RSS of the process tree; checkout "
          f"{'not compiled' if args.no_compile else 'compiled to .pyc like site-packages'})")
    print(f"  {'polygraphy run --onnxrt --onnx-outputs mark all (FP32 only)':64} {pt:6.2f} s "
          f"{pm:7.0f} MB")
    print(f"  {'polygraphy API, both models marked + compare_accuracy':64} {qt:6.2f} s "
          f"{qm:7.0f} MB")
    print(f"  {'workbench compare REF CAND (both models, per-tensor figures)':64} {wt:6.2f} s "
          f"{wm:7.0f} MB")
    print(f"  {'the same, onnxruntime in its child (WORKBENCH_CLI_FORK=0)':64} "
          f"{it:6.2f} s {im:7.0f} MB")
    print(f"  workbench / polygraphy mark-all: time {wt / pt:.2f}x (goal <= 1.0), memory "
          f"{wm / pm:.2f}x (goal <= 0.5); vs the same job in Polygraphy: time {wt / qt:.2f}x, "
          f"memory {wm / qm:.2f}x")
    print(f"  hopeless FP16 (light_inception_v1 --to fp16): {hop[0]:.2f} s, exit {hop[2]} "
          "(goal < 10 s with the range finding)")
    print(json.dumps({
        "model": args.model, "repeat": args.repeat, "compiled": not args.no_compile,
        "polygraphy_markall_s": round(pt, 3), "polygraphy_markall_rss_mb": round(pm, 1),
        "polygraphy_pair_s": round(qt, 3), "polygraphy_pair_rss_mb": round(qm, 1),
        "workbench_s": round(wt, 3), "workbench_rss_mb": round(wm, 1),
        "workbench_isolated_s": round(it, 3), "workbench_isolated_rss_mb": round(im, 1),
        "time_ratio": round(wt / pt, 3), "memory_ratio": round(wm / pm, 3),
        "time_ratio_vs_pair": round(wt / qt, 3), "memory_ratio_vs_pair": round(wm / qm, 3),
        "goal_time": wt / pt <= 1.0, "goal_memory": wm / pm <= 0.5,
        "hopeless_fp16_s": round(hop[0], 3), "hopeless_exit": hop[2],
    }))


if __name__ == "__main__":
    main()
