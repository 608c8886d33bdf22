"""`workbench matrix MODEL... -o DIR`: build every variant (precision x target x profile x
optimization level) of one or more ONNX models as Ray tasks, with accuracy against
onnxruntime FP32, latency on a GPU, a results table (JSON/CSV) and a Pareto page.

Exit 0 every variant built, 1 some failed (each names why in the table), 2 bad input.
A killed matrix continues where it stopped when run again with the same -o.
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from workbench.core.errors import WorkbenchError
from workbench.worker.protocol import BUILD_BACKENDS

if TYPE_CHECKING:  # pragma: no cover
    import argparse

NAME = "matrix"
HELP = ("build a matrix of engine variants (precision x target x profile x opt level) on Ray, "
        "with accuracy, latency on a GPU, a table and a Pareto view")


# build options that are axes of the matrix here (their flags take lists)
AXES = ("target", "builder_optimization_level")


def _csv(text: Optional[str]) -> List[str]:
    return [t.strip() for t in (text or "").replace(";", ",").split(",") if t.strip()]


def add_arguments(p: "argparse.ArgumentParser") -> None:
    from workbench.cli.common import add_latency_profiles_argument, add_profile_argument

    p.add_argument("models", metavar="MODEL", nargs="+", help="ONNX model(s)")
    p.add_argument("-o", "--output", metavar="DIR", required=True,
                   help="results folder (made if missing, in an existing folder unless "
                        "--mkdir; re-running continues in it)")
    p.add_argument("--precision", default="fp32,fp16", metavar="LIST",
                   help="precisions, comma-separated, e.g. fp32,fp16,int8,int8+fp16 "
                        "(default fp32,fp16); TARGET+FALLBACK is a quantized target with a "
                        "float fallback: INT8 where Q/DQ sits, FP16 for every other node (as "
                        "`build --precision int8 --fallback fp16`; TensorRT <= 10's "
                        "--int8 --fp16)")
    p.add_argument("--target", default=None, metavar="LIST",
                   help="TensorRT-RTX ahead-of-time targets, e.g. sm89,sm120; 'native' = the "
                        "GPU the build runs on (default: native)")
    add_profile_argument(p, ", as `workbench build --profile`; one set may name the inputs of "
                         "several models (each keeps its own). A leading '+' starts another "
                         "point on the profile axis (another variant), not another profile of "
                         "the same engine")
    p.add_argument("--opt-level", default=None, metavar="LIST",
                   help="builder optimization levels, e.g. 0,3 (default: TensorRT's)")
    p.add_argument("--calib", action="append", default=[], metavar="[MODEL=]PATH",
                   help="calibration data for INT8 (one PATH for all models, or MODEL=PATH "
                        "per model file stem; repeatable)")
    p.add_argument("--inputs", action="append", default=[], metavar="[MODEL=]PATH",
                   help="data to measure accuracy on (default: the calibration data; random "
                        "inputs with a note where there is none)")
    p.add_argument("--samples", type=int, default=8,
                   help="at most this many samples for accuracy (0: skip; default 8)")
    add_latency_profiles_argument(p, "variants not timed on a GPU get a predicted latency "
                                     "from them")
    p.add_argument("--backend", default="auto", choices=list(BUILD_BACKENDS))
    p.add_argument("--gpus", action="store_true",
                   help="GPU variants: each task asks Ray for one GPU, builds for it, runs the "
                        "engine for accuracy and times it (latency P50/P99, throughput)")
    p.add_argument("--ray", metavar="auto|ADDRESS", default=None,
                   help="join a Ray cluster ('auto' or HOST:PORT); default: a local instance")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="local Ray instance with N CPUs (default: all); on a cluster, at "
                        "most N variants at a time")
    p.add_argument("--timeout", type=float, metavar="S", help="time limit per build in seconds")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    from workbench.engines import options
    from workbench.cli.common import add_mkdir_argument, add_profile_index_argument

    # every build option for every variant (tactic sources, I/O formats, workspace, ...);
    # the target and the optimization level are axes of the matrix (lists, above)
    options.add_arguments(p, exclude=AXES)

    add_profile_index_argument(p)
    add_mkdir_argument(p)


def model_paths(args: "argparse.Namespace") -> List[Tuple[Optional[str], str]]:
    """The model files main() checks before the options (workbench/cli/__init__.py)."""
    return [(m, "onnx") for m in args.models or []]


def _profiles(items: List[str]) -> Optional[Dict[str, List[Dict[str, List[List[int]]]]]]:
    """--profile args -> the profile axis {name: [profile]} (one profile per point)."""
    if not items:
        return None
    from workbench.precision.profiles import parse_profiles

    return {f"p{k}": [prof.to_dict()] for k, prof in enumerate(parse_profiles(items))}


def plan(args: "argparse.Namespace") -> List[Any]:
    from workbench.engines import options
    from workbench.matrix.plan import parse_data_args, plan_matrix

    levels: List[Optional[int]] = []
    for t in _csv(args.opt_level):
        try:
            levels.append(int(t))
        except ValueError:
            raise WorkbenchError(f"--opt-level '{t}' is not a number", field="--opt-level",
                                 hint="e.g. --opt-level 0,3") from None
    return plan_matrix(args.models, _csv(args.precision) or ["fp32"],
                       _csv(args.target) or [None], profiles=_profiles(args.profile),
                       opt_levels=levels or [None],
                       calibration=parse_data_args(args.calib, "--calib"),
                       backend=args.backend,
                       build=options.overrides(args, [o for o in options.OPTIONS
                                                      if not set(o.fields) & set(AXES)]))


def _line(r: Dict[str, Any]) -> str:
    if r["status"] != "ok":
        return f"  FAILED {r['id']}: {r.get('error')}"
    how = "resumed" if r.get("resumed") else "cache hit" if r.get("cache_hit") else \
        f"built {r.get('build_seconds', 0):.1f} s"
    err = r.get("error_rel")
    err_s = f"{err:.3g}" if isinstance(err, (int, float)) else str(err)
    lat = r.get("latency_p50_ms")
    lat_s = f"  p50 {lat:.3f} ms p99 {r.get('latency_p99_ms', 0):.3f} ms" if lat else ""
    acc = r.get("accuracy_passed")
    verdict = "" if acc is None else (" within budget" if acc else " ACCURACY FAIL") + \
        (f" ({r['accuracy_verdict']})" if r.get("accuracy_verdict") else "")
    return (f"  ok {r['id']}: {r.get('size_bytes', 0) / 1e6:.2f} MB ({how}), error {err_s} "
            f"({r.get('accuracy_source', '-')}){verdict}{lat_s}")


def run(args: "argparse.Namespace") -> int:
    from workbench.cli.common import output_path
    from workbench.matrix.plan import parse_data_args
    from workbench.matrix.run import run_matrix

    output_path(args.output, "-o", mkdir=args.mkdir, folder=True)  # before any work
    if args.samples < 0:
        raise WorkbenchError("--samples must be >= 0", field="--samples")
    if args.workers is not None and args.workers < 1:
        raise WorkbenchError("--workers must be >= 1", field="--workers")
    variants = plan(args)
    if args.gpus:  # before anything is printed or started: no silent wait for a GPU
        from workbench.matrix.run import check_gpus_for_ray

        check_gpus_for_ray(args.ray)
    if args.profile_index is not None:  # (checked now: each variant resolves it against its
        from workbench.precision.profiles import profile_index  # own profiles as it runs)

        for v in variants:
            if v.profiles:  # (default profiles are known once built: checked then)
                profile_index(args.profile_index, v.profiles)
    quiet = args.json
    if not quiet:
        sys.stderr.write(f"matrix: {len(variants)} variant(s) -> {args.output}\n")

    def progress(r: Dict[str, Any]) -> None:
        if not quiet:
            sys.stderr.write(_line(r) + "\n")
            sys.stderr.flush()

    res = run_matrix(variants, args.output, ray_address=args.ray, workers=args.workers,
                     gpu=args.gpus, inputs=parse_data_args(args.inputs, "--inputs"),
                     samples=args.samples, timeout=args.timeout, on_result=progress,
                     profile_index=args.profile_index,
                     on_wait=lambda line: sys.stderr.write(f"matrix: {line}\n"),
                     latency_profiles=args.latency_profiles)
    if args.json:
        from workbench.cli.common import print_json

        print_json(res.to_dict())
    else:
        s = res.summary
        print(f"{s['ok']}/{s['variants']} variants ok ({s['built']} built, {s['cache_hits']} "
              f"from the engine cache, {s['resumed']} finished earlier), {s['failed']} failed "
              f"in {res.seconds:.1f} s")
        for k, v in res.files.items():
            print(f"{k}: {v}")
        for r in res.results:
            if r.get("latency_predicted_ms") is not None:
                print(f"  {r['id']}: latency {r['latency_predicted_ms']:.3f} ms (predicted)")
        print(f"pareto: {res.pareto_note}")
    return 0 if res.summary["failed"] == 0 else 1
