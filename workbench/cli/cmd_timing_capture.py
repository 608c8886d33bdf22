"""`workbench timing-capture`: time an engine (or build one from ONNX) on this machine's GPU.

An ONNX is built exactly as `workbench build MODEL --precision fp16|fp32` would build it
(workbench.measure.capture.build_for_capture), then timed."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from workbench.core.errors import WorkbenchError

NAME = "timing-capture"
HELP = ("time a TensorRT engine on the GPU (per-layer IProfiler times, P50/P90/P99 latency, "
        "throughput per batch size) and write layers/profile JSON; needs an NVIDIA GPU")


# build options timing-capture does not take: it times the engine on this machine's GPU
NOT_HERE = ("target",)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from workbench.cli.common import add_gpu_argument, add_html_argument, add_onnx_argument

    p.add_argument("model", metavar="ENGINE|MODEL.onnx",
                   help="a serialized engine, or an ONNX model to build first (as `workbench "
                        "build` does)")
    add_onnx_argument(p)
    p.add_argument("--shapes", metavar="NAME:DxDxD[,NAME:...]",
                   help="input shapes to time at (default: the profile's opt shapes)")
    p.add_argument("--profile-shapes", metavar="NAME:MIN:OPT:MAX[,...]",
                   help="optimization profile when building from ONNX, e.g. input:1x3x224x224:"
                        "8x3x224x224:32x3x224x224")
    p.add_argument("--inputs", metavar="DATA.npz", help="input arrays (cast to the engine's dtypes)")
    p.add_argument("--batch-sizes", metavar="B,B,...|profile",
                   help="throughput at these batch sizes ('profile': its min, opt and max)")
    p.add_argument("--fp16", action="store_true",
                   help="(ONNX only) build at FP16 like `workbench build --precision fp16`: "
                        "FP16 in the ONNX, strongly typed where the backend is")
    p.add_argument("--iterations", type=int, default=100)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--layer-iterations", type=int, default=50)
    p.add_argument("--out", metavar="DIR", help="where to write layers.json / profile.json")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--metrics", metavar="FILE.prom", help="also write latency/throughput in "
                   "the Prometheus text format (needs the deploy extra)")
    add_gpu_argument(p)
    add_html_argument(p)
    p.add_argument("--vs", choices=["torch"], help="also time the same model in PyTorch (eager "
                   "FP32/FP16, torch.compile reduce-overhead FP16) in this process, on the same "
                   "shapes and --inputs, and show it beside the engine")
    p.add_argument("--torch-model", metavar="pkg.mod:factory|FILE.pt|FILE.pt2",
                   help="the torch model for --vs torch: a factory returning an nn.Module, a "
                        "TorchScript file or an exported program")
    from workbench.engines import options
    from workbench.cli.common import add_mkdir_argument, add_profile_index_argument

    # (ONNX only) the build options of `workbench build` (tactic sources, I/O formats,
    # workspace...); the engine is timed on this GPU, so no --target
    options.add_arguments(p, exclude=NOT_HERE)
    add_profile_index_argument(p)
    add_mkdir_argument(p)


def model_paths(args: argparse.Namespace) -> List[Tuple[Optional[str], str]]:
    """The model files main() checks before the options (workbench/cli/__init__.py): the
    engine (or the .onnx to build), and --onnx."""
    m = args.model
    return [(m, "onnx" if m and m.lower().endswith(".onnx") else "engine"),
            (args.onnx, "onnx")]


def _dims(text: str, what: str) -> List[int]:
    try:
        dims = [int(x) for x in text.lower().split("x")]
    except ValueError:
        raise WorkbenchError(f"bad shape '{text}'", field=what,
                             hint="write shapes like 8x3x224x224") from None
    if not dims or any(d <= 0 for d in dims):
        raise WorkbenchError(f"bad shape '{text}'", field=what, hint="dimensions must be > 0")
    return dims


def parse_shapes(text: Optional[str]) -> Optional[Dict[str, List[int]]]:
    """'input:8x3x224x224,mask:8x128' -> {'input': [8, 3, 224, 224], 'mask': [8, 128]}."""
    if not text:
        return None
    out = {}
    for part in text.split(","):
        name, sep, shape = part.rpartition(":")
        if not sep or not name:
            raise WorkbenchError(f"bad shape spec '{part}'", field="--shapes",
                                 hint="write NAME:8x3x224x224")
        out[name] = _dims(shape, "--shapes")
    return out


def parse_profile_shapes(text: Optional[str]) -> Optional[Dict[str, List[List[int]]]]:
    if not text:
        return None
    out = {}
    for part in text.split(","):
        bits = part.split(":")
        if len(bits) < 4:
            raise WorkbenchError(f"bad profile spec '{part}'", field="--profile-shapes",
                                 hint="write NAME:MIN:OPT:MAX, e.g. input:1x3x32x32:8x3x32x32:32x3x32x32")
        name = ":".join(bits[:-3])
        out[name] = [_dims(b, "--profile-shapes") for b in bits[-3:]]
    return out


def _profile_k(args: argparse.Namespace, profiles: list) -> int:
    """--profile-index resolved against the engine's profiles (its card's, or those built)."""
    from workbench.precision.profiles import profile_index

    return profile_index(getattr(args, "profile_index", None), profiles)


def run(args: argparse.Namespace) -> int:
    from workbench.cli.common import print_json
    from workbench.measure.capture import capture, capture_onnx
    from workbench.timing import summarize

    src = Path(args.model)
    if not src.is_file():
        raise WorkbenchError("file not found", file=str(src), hint="pass an engine or an ONNX model")
    from workbench.cli.common import output_path

    output_path(args.out, "--out", mkdir=args.mkdir, folder=True)
    output_path(args.html, "--html", mkdir=args.mkdir)
    output_path(getattr(args, "metrics", None), "--metrics", mkdir=args.mkdir)
    metrics = None
    if getattr(args, "metrics", None):  # (prometheus_client missing: said before the run)
        from workbench.fleet.metrics import Metrics

        metrics = Metrics()
    if getattr(args, "gpu", None):
        from workbench.fleet.gpus import pinned_client

        common_client = {"client": pinned_client(args.gpu)}
    else:
        common_client = {}
    shapes = parse_shapes(args.shapes)
    batches: Any = None
    if args.batch_sizes == "profile":
        batches = "profile"
    elif args.batch_sizes:
        try:
            batches = [int(b) for b in args.batch_sizes.split(",")]
        except ValueError:
            raise WorkbenchError(f"bad batch sizes '{args.batch_sizes}'", field="--batch-sizes",
                                 hint="write 1,8,32") from None
    common = dict(shapes=shapes, inputs=args.inputs, batch_sizes=batches,
                  iterations=args.iterations, warmup=args.warmup,
                  layer_iterations=args.layer_iterations, out_dir=args.out, **common_client)
    from workbench.engines import options

    build_opts = [o for o in options.OPTIONS if not set(o.fields) & set(NOT_HERE)]
    build = options.overrides(args, build_opts)
    if src.suffix.lower() == ".onnx":
        built = parse_profile_shapes(args.profile_shapes)
        res = capture_onnx(src, fp16=args.fp16, profiles=built, profile_index=_profile_k(
            args, [built] if built else []), build=build, **common)
    else:
        if args.fp16 or args.profile_shapes:
            raise WorkbenchError("--fp16/--profile-shapes only apply when building from ONNX",
                                 field="--fp16", hint="the engine's precision is fixed at build time")
        if build:
            flags = [o.flag for o in build_opts if set(o.fields) & set(build)]
            raise WorkbenchError(f"{', '.join(flags)} only apply when building from ONNX",
                                 field=flags[0], hint="the engine was built with its options; "
                                 "pass the ONNX to build it with these")
        from workbench.engines.card import read_card

        res = capture(src, onnx=args.onnx, profile_index=_profile_k(
            args, (read_card(src) or {}).get("profiles") or []), **common)
    out = summarize(res.table) if res.table is not None else {}
    out["capture"] = {"layers_json": res.layers_json, "profile_json": res.profile_json,
                      "latency": res.latency, "latency_graph": res.raw.get("latency_graph"),
                      "throughput": res.throughput, "shapes": res.raw.get("shapes")}
    if getattr(args, "vs", None) == "torch":
        out["vs_torch"] = _vs_torch(args, res, src)
    if metrics is not None:
        metrics.record_capture(res, {"model": src.stem, "gpu": args.gpu or "",
                                     "precision": "fp16" if args.fp16 else "",
                                     "backend": res.raw.get("backend") or ""})
        out["metrics"] = str(metrics.write(args.metrics))
    if args.html and res.table is not None:
        from workbench.render.timing_report import write_report

        out["html"] = str(write_report(args.html, res.table))
    if args.json:
        print_json(out)
    else:
        la = res.latency
        print(f"{src}: P50 {la.get('p50_ms', float('nan')):.4f}  P90 {la.get('p90_ms', float('nan')):.4f}"
              f"  P99 {la.get('p99_ms', float('nan')):.4f} ms; layers -> {res.layers_json}, "
              f"profile -> {res.profile_json}")
        print("  " + graph_line(res.raw.get("latency_graph"), la))
        if "vs_torch" in out:
            from workbench.timing.vs_torch import lines

            print("beside PyTorch (same process, same shapes):")
            for line in lines(out["vs_torch"]):
                print(line)
        for r in res.throughput:
            print(f"  batch {r['batch']}: {r['items_per_s']:.0f} items/s (P50 {r['p50_ms']:.4f} ms)")
        print(f"  then: workbench timing {res.layers_json} --profile {res.profile_json}")
    return 0


def graph_line(graph: Optional[Dict[str, Any]], plain: Dict[str, Any]) -> str:
    """The CUDA-graph latency beside the plain enqueue one, or why there is none."""
    if not graph:
        return "CUDA graph: not timed"
    if "p50_ms" not in graph:
        return f"CUDA graph: not captured ({graph.get('reason') or 'unknown reason'})"
    ratio = graph["p50_ms"] / plain["p50_ms"] if plain.get("p50_ms") else float("nan")
    return (f"CUDA graph: P50 {graph['p50_ms']:.4f}  P99 {graph['p99_ms']:.4f} ms "
            f"({ratio:.2f}x plain enqueue)")


def _vs_torch(args: argparse.Namespace, res: Any, src: Path) -> Dict[str, Any]:
    """The engine's timing beside torch's on the same shapes/inputs (timing.vs_torch)."""
    import platform

    from workbench.timing.vs_torch import compare, feeds_for

    onnx = src if src.suffix.lower() == ".onnx" else args.onnx
    shapes = {k: [int(d) for d in v] for k, v in (res.raw.get("shapes") or {}).items()}
    feeds = feeds_for(shapes, args.inputs, onnx)
    engine_src = {"host": platform.node(), "backend": res.raw.get("backend"),
                  "backend_version": res.raw.get("backend_version"),
                  "compute_capability": res.raw.get("compute_capability"),
                  "timer": "CUDA events (worker)"}
    return compare(res.latency, res.raw.get("latency_graph"), feeds, args.torch_model,
                   iterations=args.iterations, engine_source=engine_src)
