"""Overhead of building through the workbench vs a minimal direct TensorRT-RTX script.

For each sample (resnet_tiny, bert_tiny; FP32, same profile, sm89 ahead of time, same
optimization level), plus a synthetic deeper CNN (deep_cnn*, reported apart) to show how the
fixed cost amortises, runs `repeats` pairs side by side, alternating which goes first:
  baseline  `python direct_build.py ...`: parse + config + build_serialized_network + write
            (a fresh interpreter, as a user's own script would run)
  cli       `workbench build MODEL -o ENGINE --target sm89 --profile ...` with a fresh
            WORKBENCH_HOME each time (no engine cache, no hash memo; worker start included),
            run through the console script installed beside this interpreter
  api       `build_engine(...)` in one process with a warm worker and use_cache=False (the
            notebook case: the TensorRT process is already up)
The CLI's overhead is the median of the paired differences (cli run minus the baseline run
beside it); cli_overhead_pct = that, summed over the samples, over the summed baseline medians.
The same build varies by +-15% from run to run on a 2-core VM, hence 31 pairs by default; the
JSON also gives the quartiles of the differences and the overhead between the best runs.
Target: under 10%. Before timing, the package is byte-compiled as a pip install does
(with PYTHONDONTWRITEBYTECODE set, as on our machines, an editable install would otherwise
recompile every module of ours on each CLI call, which the one-file baseline never pays).
Last line: one JSON object with the figures.

    python benchmarks/build_overhead.py [--repeats 31] [--opt-level 3] [--samples-only]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_models"
PROFILES = {
    "resnet_tiny": {"input": [[1, 3, 32, 32], [4, 3, 32, 32], [32, 3, 32, 32]]},
    "bert_tiny": {"input_ids": [[1, 8], [4, 32], [64, 32]],
                  "attention_mask": [[1, 8], [4, 32], [64, 32]]},
}

DIRECT = r'''
import json, sys
try:
    import tensorrt_rtx as trt
except ImportError:
    import tensorrt_rtx_bindings as trt
onnx_path, engine_path, level, profile = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
logger = trt.Logger(trt.Logger.WARNING)
builder = trt.Builder(logger)
network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
parser = trt.OnnxParser(network, logger)
assert parser.parse_from_file(onnx_path)
config = builder.create_builder_config()
config.builder_optimization_level = level
config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
config.num_compute_capabilities = 1
config.set_compute_capability(trt.ComputeCapability.SM89, 0)
p = builder.create_optimization_profile()
for name, (mn, opt, mx) in profile.items():
    p.set_shape(name, mn, opt, mx)
config.add_optimization_profile(p)
plan = builder.build_serialized_network(network, config)
assert plan is not None
with open(engine_path, "wb") as f:
    f.write(plan)
'''


def make_deep_cnn(path: Path, blocks: int = 24, ch: int = 64) -> None:
    """A deeper synthetic CNN (seeded; not a sample) whose build takes seconds, to show how the
    fixed overhead amortises."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "input"
    cin = 3
    for i in range(blocks):
        w = numpy_helper.from_array((rng.standard_normal((ch, cin, 3, 3)) * 0.05)
                                    .astype(np.float32), f"w{i}")
        b = numpy_helper.from_array(np.zeros(ch, np.float32), f"b{i}")
        inits += [w, b]
        nodes.append(helper.make_node("Conv", [x, w.name, b.name], [f"c{i}"], name=f"/b{i}/Conv",
                                      pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"/b{i}/Relu"))
        x, cin = f"r{i}", ch
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["output"], name="/pool"))
    g = helper.make_graph(nodes, "deep_cnn", [helper.make_tensor_value_info(
        "input", TensorProto.FLOAT, ["batch", 3, 64, 64])], [helper.make_tensor_value_info(
            "output", TensorProto.FLOAT, ["batch", ch, 1, 1])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))


def _timed(cmd, env=None) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"command failed ({r.returncode}): {' '.join(map(str, cmd))}\n{r.stderr[-2000:]}")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=31)
    ap.add_argument("--opt-level", type=int, default=3)
    ap.add_argument("--samples-only", action="store_true",
                    help="skip the synthetic deeper CNN (deep_cnn*, not a sample)")
    args = ap.parse_args()

    import compileall

    import workbench
    from workbench.engines.engine import BuildConfig, build_engine

    compileall.compile_dir(os.path.dirname(workbench.__file__), quiet=1)
    from workbench.worker.client import WorkerClient

    tmp = Path(tempfile.mkdtemp(prefix="wb-bench-"))
    direct = tmp / "direct_build.py"
    direct.write_text(DIRECT)
    os.environ["WORKBENCH_HOME"] = str(tmp / "api-home")
    client = WorkerClient()
    client.call("ping", timeout=60)  # the API case measures a warm worker
    # the console script pip installed beside this interpreter (what a venv user runs; a
    # version-manager shim found first on PATH would add its own start-up to every call)
    script = Path(sys.executable).parent / "workbench"
    exe = [str(script)] if script.is_file() else [
        sys.executable, "-c", "import sys; from workbench.cli import main; sys.exit(main())"]
    rows = {}
    models = {m: SAMPLES / f"{m}.onnx" for m in PROFILES}
    profiles = dict(PROFILES)
    if not args.samples_only:
        make_deep_cnn(tmp / "deep_cnn.onnx")
        models["deep_cnn*"] = tmp / "deep_cnn.onnx"
        profiles["deep_cnn*"] = {"input": [[1, 3, 64, 64], [8, 3, 64, 64], [16, 3, 64, 64]]}
    for model, onnx_path in models.items():
        prof = profiles[model]
        times = {"baseline": [], "cli": [], "api": []}
        prof_args = []
        for name, (mn, opt, mx) in prof.items():
            prof_args += ["--profile", f"{name}:" + ":".join("x".join(map(str, s))
                                                            for s in (mn, opt, mx))]
        diffs = []
        for i in range(args.repeats):
            env = dict(os.environ, WORKBENCH_HOME=str(tmp / f"cli-home-{model}-{i}"))
            run_base = lambda: _timed(  # noqa: E731
                [sys.executable, str(direct), str(onnx_path), str(tmp / f"d-{model}.engine"),
                 str(args.opt_level), json.dumps(prof)])
            run_cli = lambda: _timed(  # noqa: E731
                exe + ["build", str(onnx_path), "-o", str(tmp / f"c-{model}.engine"),
                       "--target", "sm89", "--opt-level", str(args.opt_level), "--json"]
                + prof_args, env=env)
            if i % 2 == 0:  # alternate who goes first: drifts in machine load cancel out
                b, c = run_base(), run_cli()
            else:
                c, b = run_cli(), run_base()
            times["baseline"].append(b)
            times["cli"].append(c)
            diffs.append(c - b)
            cfg = BuildConfig(profiles=[prof], target="sm89",
                              builder_optimization_level=args.opt_level)
            t0 = time.perf_counter()
            build_engine(onnx_path, cfg, client=client, use_cache=False)
            times["api"].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) for k, v in times.items()}
        rows[model] = {k: round(v, 3) for k, v in med.items()}
        # overhead: the median of the paired differences (each CLI run against the baseline
        # run beside it), which is steadier on a noisy machine than a difference of medians
        over = statistics.median(diffs)
        rows[model]["cli_overhead_s"] = round(over, 4)
        q = statistics.quantiles(diffs, n=4) if len(diffs) > 1 else [over, over, over]
        rows[model]["cli_overhead_iqr_s"] = [round(q[0], 4), round(q[2], 4)]
        rows[model]["cli_ratio"] = round(1 + over / med["baseline"], 3)
        rows[model]["cli_ratio_of_medians"] = round(med["cli"] / med["baseline"], 3)
        # best of each arm: what is left when the machine's noise (which only ever adds
        # time; the same build varies by +-15% here) is taken out of both
        rows[model]["cli_overhead_min_s"] = round(min(times["cli"]) - min(times["baseline"]), 4)
        rows[model]["baseline_min"] = round(min(times["baseline"]), 4)
        rows[model]["api_ratio"] = round(med["api"] / med["baseline"], 3)
    client.close()

    print(f"TensorRT-RTX AOT build (sm89, opt level {args.opt_level}), median of "
          f"{args.repeats}, seconds; baseline = minimal direct script in a fresh interpreter")
    print(f"{'model':<12} {'baseline':>9} {'cli':>9} {'api(warm)':>10} {'cli/base':>9} "
          f"{'api/base':>9} {'cli-base s':>11}")
    for model, r in rows.items():
        print(f"{model:<12} {r['baseline']:>9.3f} {r['cli']:>9.3f} {r['api']:>10.3f} "
              f"{r['cli_ratio']:>9.3f} {r['api_ratio']:>9.3f} {r['cli_overhead_s']:>11.3f}")
    print("totals and *_pct are over the samples; deep_cnn* is synthetic (24 conv blocks)")
    print("cli-base s: median of the paired differences, the CLI's extra seconds (its own "
          "interpreter start, the fork of its worker, hashing, cache and report writing); "
          "cli/base = 1 + that / baseline")
    samples = {m: r for m, r in rows.items() if not m.endswith("*")}
    tot = {k: sum(r[k] for r in samples.values()) for k in ("baseline", "cli", "api")}
    tot_over = sum(r["cli_overhead_s"] for r in samples.values())
    summary = {
        "benchmark": "build_overhead", "baseline": "direct tensorrt_rtx script (fresh python)",
        "opt_level": args.opt_level, "repeats": args.repeats, "models": rows,
        "total_baseline_s": round(tot["baseline"], 3), "total_cli_s": round(tot["cli"], 3),
        "total_api_s": round(tot["api"], 3),
        "cli_overhead_pct": round(100 * tot_over / tot["baseline"], 1),
        "cli_overhead_pct_of_medians": round(100 * (tot["cli"] / tot["baseline"] - 1), 1),
        "cli_overhead_pct_of_minimums": round(
            100 * sum(r["cli_overhead_min_s"] for r in samples.values())
            / sum(r["baseline_min"] for r in samples.values()), 1),
        "cli_overhead_pct_deep_cnn": (round(100 * (rows["deep_cnn*"]["cli_ratio"] - 1), 1)
                                      if "deep_cnn*" in rows else None),
        "api_overhead_pct": round(100 * (tot["api"] / tot["baseline"] - 1), 1),
        "target_overhead_pct": 10.0,
        "load_average_1min": round(os.getloadavg()[0], 2),
    }
    summary["cli_within_target"] = summary["cli_overhead_pct"] < 10.0
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
