"""`workbench compare`: layer-by-layer comparison against onnxruntime FP32, and the search for
the nodes that must stay in higher precision."""
from __future__ import annotations

import argparse
import math
import sys

from workbench.cli.common import print_json
from workbench.errors import WorkbenchError

NAME = "compare"
HELP = ("compare a candidate model (FP16/INT8/fixed) with the FP32 reference tensor by tensor, "
        "or find which nodes must stay FP32 for a target precision (--to)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("reference", help="the FP32 reference ONNX model")
    p.add_argument("candidate", nargs="?", help="the candidate ONNX model (omit with --to)")
    from workbench.precision import table

    p.add_argument("--to", choices=list(table.lowered()),
                   help="convert the reference to this precision and search for the nodes to "
                        "keep in FP32 until the outputs are within tolerance")
    p.add_argument("--inputs", metavar="PATH",
                   help="representative inputs: .npz (keys = input names), .npy, or a folder")
    p.add_argument("--allow-random", action="store_true",
                   help="compare on random inputs when no --inputs (a warning is reported)")
    p.add_argument("--atol", type=float, default=None,
                   help="absolute tolerance (default: the precision's, the candidate's read from "
                        "its graph or --to's: 1e-2 for fp16/bf16/int8/fp8, 1e-3 for fp32)")
    p.add_argument("--rtol", type=float, default=None,
                   help="relative tolerance (default: the precision's, as --atol)")
    p.add_argument("--runner", choices=["auto", "onnxruntime", "emulate", "reference"],
                   default="auto",
                   help="how to run the candidate: emulate = onnxruntime in FP32 with every "
                        "FP16/BF16 tensor rounded and saturated as stored (FP16 storage, FP32 "
                        "accumulation, like a GPU; auto picks it for FP16/BF16 models), "
                        "reference = onnx's numpy evaluator computing in float16 (slow)")
    p.add_argument("--memory-budget", type=float, default=None, metavar="MB",
                   help="hold at most this many MB of marked tensors at once (both runs, all "
                        "samples); more runs when the model's tensors do not fit (default 256)")
    p.add_argument("--stats", metavar="STATS.jsonl",
                   help="append each tensor's figures to this file as they are computed")
    p.add_argument("--samples", type=int, default=8, help="at most this many samples (default 8)")
    p.add_argument("--save-results", metavar="RUN.json",
                   help="save both runs' outputs as Polygraphy RunResults JSON")
    p.add_argument("--top", type=int, default=10, help="rows of the per-tensor table (default 10)")
    p.add_argument("--json", action="store_true", help="print JSON to stdout")
    from workbench.cli.common import add_mkdir_argument

    add_mkdir_argument(p)


def _fmt(x: float) -> str:
    return "inf" if not math.isfinite(x) else f"{x:.3g}"


def run(args: argparse.Namespace) -> int:
    from workbench import compare
    from workbench.precision import table

    if args.to and args.candidate:
        raise WorkbenchError("give either a candidate model or --to, not both", field="--to")
    if not args.to and not args.candidate:
        raise WorkbenchError("nothing to compare with", field="candidate",
                             hint="pass a candidate model, or --to "
                             + "|".join(table.lowered()))
    from workbench.cli.common import output_path

    output_path(args.save_results, "--save-results", mkdir=args.mkdir)
    calib = args.inputs
    if calib is None and not args.allow_random:
        raise WorkbenchError("no inputs to compare on", field="--inputs",
                             hint="pass representative inputs with --inputs PATH, or "
                                  "--allow-random to accept random data")
    if args.to:
        search = compare.find_exclusions(args.reference, args.to, calibration=calib,
                                         atol=args.atol, rtol=args.rtol,
                                         allow_random=args.allow_random)
        if args.json:
            print_json(search.to_dict())
        elif search.hopeless:
            for f in search.findings:
                print(str(f))
            return 1
        else:
            for f in search.findings:
                if f.code.endswith("-range"):
                    print(str(f))
            for r in search.rounds:
                print(f"round {r['round']}: {len(r['excluded'])} node(s) in FP32, worst output "
                      f"relative error {r['worst_output_rel'] if isinstance(r['worst_output_rel'], str) else _fmt(r['worst_output_rel'])}"
                      f"{'  PASS' if r['outputs_pass'] else ''}")
            verdict = "within tolerance" if search.passed else "NOT within tolerance"
            print(f"{args.to}: {verdict} with {len(search.excluded)} node(s) kept in FP32")
            if search.excluded:
                print("  workbench precision " + args.reference + f" --to {args.to} " +
                      " ".join(f"--exclude {n}" for n in search.excluded) + " -o OUT.onnx")
        return 0 if search.passed else 1
    report = compare.layerwise(args.reference, args.candidate, calibration=calib,
                               atol=args.atol, rtol=args.rtol, candidate_runner=args.runner,
                               max_samples=args.samples,
                               allow_random=args.allow_random,
                               memory_budget_mb=args.memory_budget, stats_path=args.stats)
    if args.save_results:
        runs = {"onnxruntime-fp32": report.runs["reference"],
                f"{report.candidate_runner}-candidate": report.runs["candidate"]}
        compare.save_run_results(args.save_results, runs)
    if args.json:
        print_json(report.to_dict())
    else:
        print(f"reference: {args.reference} (onnxruntime)  candidate: {args.candidate} "
              f"({report.candidate_runner}, {report.precision})  samples: {report.samples}  "
              f"atol {report.atol:g} rtol {report.rtol:g}")
        print(f"{len(report.tensors)} tensors compared, {report.unmatched} only in one model")
        print("outputs: " + ", ".join(f"{t.tensor} max abs {_fmt(t.max_abs)} rel {_fmt(t.rel)} "
                                      f"cos {t.cosine:.6f} {'PASS' if t.passed else 'FAIL'}"
                                      for t in report.outputs))
        worst = sorted(report.tensors, key=lambda t: -t.rel if math.isfinite(t.rel) else -1e300)
        print(f"\n{'tensor':48} {'op':14} {'max abs':>10} {'rel':>10} {'added':>10}")
        for t in worst[:args.top]:
            print(f"{t.tensor[:48]:48} {t.op[:14]:14} {_fmt(t.max_abs):>10} {_fmt(t.rel):>10} "
                  f"{_fmt(t.added):>10}")
        for f in report.findings:
            print(str(f))
    return 0 if report.outputs_pass else 1
