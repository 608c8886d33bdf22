"""`workbench plan MODEL --data SAMPLES.npz --budget 1% --metric top1`: the fastest precision
plan within an accuracy budget on held-back samples (`workbench.planner.search.plan`), printed
as ONNX node lists, the `workbench precision` line that makes it, AutoCast's nodes_to_exclude
and per-layer flags where the TensorRT here has them."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional, Tuple

from workbench.core.errors import WorkbenchError

NAME = "plan"
HELP = ("plan the fastest precision (FP16/BF16/INT8 with regions kept in FP32) within an "
        "accuracy budget on held-back samples")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from workbench.cli.common import (add_fp32_model_argument, add_latency_profiles_argument,
                                      add_verdict_arguments)
    from workbench.precision import table
    from workbench.precision.options import PRECISION_OPTIONS, add_arguments

    add_fp32_model_argument(p)
    p.add_argument("--data", required=True, metavar="SAMPLES.npz",
                   help="samples to measure accuracy on (axis 0 is the sample); a share is "
                        "held back and the budget is checked on it only")
    add_verdict_arguments(
        p, elementwise=False, budget_default="1%", metric_default="top1 for class scores, else "
                                                                   "cosine",
        budget_help="the loss the metric may reach on held-back samples (default 1%%)")
    p.add_argument("--to", dest="target", default="fp16", choices=list(table.lowered()),
                   help="the low precision (default fp16); INT8/FP8 calibrate on --data "
                        "unless --calib")
    # --calib and --fallback, as `precision` takes them
    add_arguments(p, PRECISION_OPTIONS, ("calibration", "fallback"))
    add_latency_profiles_argument(p, "regions from the engine's fused layers, latency "
                                     "predicted from them")
    p.add_argument("--max-builds", type=int, default=40, metavar="N",
                   help="at most N candidate evaluations in all (default 40)")
    p.add_argument("--holdout", type=float, default=0.25, metavar="SHARE",
                   help="share of the samples held back (default 0.25)")
    p.add_argument("--samples", type=int, default=64, help="at most this many samples")
    p.add_argument("-o", "--output", metavar="OUT.onnx", help="write the planned model")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    from workbench.cli.common import add_mkdir_argument

    add_mkdir_argument(p)


def model_paths(args: argparse.Namespace) -> List[Tuple[Optional[str], str]]:
    """The model file main() checks before the options (workbench/cli/__init__.py)."""
    return [(args.model, "onnx")]


def run(args: argparse.Namespace) -> int:
    from workbench.cli.common import output_path, print_json
    from workbench.planner.search import plan

    if args.max_builds < 3:
        raise WorkbenchError("--max-builds must be at least 3 (sensitivity, search and "
                             "verification)", field="--max-builds")
    if not 0 < args.holdout < 1:
        raise WorkbenchError("--holdout is a share between 0 and 1", field="--holdout")
    if not Path(args.data).is_file():
        raise WorkbenchError("samples not found", file=args.data, field="--data")
    if args.output:
        src, out = Path(args.model), Path(args.output)
        if out.exists() and out.resolve() == src.resolve():
            raise WorkbenchError("refusing to overwrite the original model", file=str(out),
                                 hint="choose another output path (-o)")
        output_path(args.output, "-o", mkdir=args.mkdir)
    quiet = args.json
    p = plan(args.model, args.data, budget=args.budget, metric=args.metric, target=args.target,
             latency_profiles=args.latency_profiles, max_builds=args.max_builds,
             holdout=args.holdout, samples=args.samples, output=args.output,
             calibration=args.calib, fallback=args.fallback,
             on_step=None if quiet else (lambda s: print(s, file=sys.stderr, flush=True)))
    if args.json:
        print_json(p.to_dict())
        return 0 if p.passed else 1
    w = sys.stdout.write
    held = len(p.samples["held_back"])
    w(f"plan for {p.model}: {p.target.upper()}"
      f"{' + ' + p.fallback.upper() + ' fallback' if p.fallback else ''} with {len(p.kept_regions)} of {len(p.regions)} "
      f"region(s) ({p.region_source}) kept in FP32; {p.metric} loss {p.held_loss:.4g} on "
      f"{held} held-back sample(s) (budget {p.budget:g}): "
      f"{'within budget' if p.passed else 'NOT within budget'}\n")
    if p.latency_ms is not None:
        w(f"latency {p.latency_ms:.3f} ms (predicted; {p.latency_note})\n")
    else:
        w(f"latency: {p.latency_note}\n")
    w(f"evaluations: {p.evaluations} of at most {p.max_builds} (search set "
      f"{len(p.samples['search'])} sample(s), held back {held})\n")
    w(f"{p.target} nodes: {', '.join(p.low_nodes) or '(none)'}\n")
    if p.fallback:
        w(f"{p.fallback} nodes (the fallback): {', '.join(p.fallback_nodes) or '(none)'}\n")
    w(f"fp32 nodes: {', '.join(p.fp32_nodes) or '(none)'}\n")
    for k, v in p.commands.items():
        w(f"{k}: {v}\n")
    for n in p.notes:
        w(f"note: {n}\n")
    if p.output:
        w(f"wrote {p.output}\n")
    return 0 if p.passed else 1
