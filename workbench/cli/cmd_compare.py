"""`workbench compare`: layer-by-layer comparison against onnxruntime FP32, and the search for
the nodes that must stay in higher precision."""
from __future__ import annotations

import argparse
import math
import shlex
import sys
from typing import Any, List, Optional, Tuple

from workbench.cli.common import add_verdict_arguments, print_json
from workbench.core.errors import WorkbenchError
from workbench.core.model import as_model

NAME = "compare"
# the console script runs this verb in a forked worker with onnxruntime in-process
# (`workbench.cli.supervise`: a crash is still one line, naming the model and node)
RUNS_ONNXRUNTIME = True
REWIND_OPTIONS = ("--stats",)  # appended to as it runs: cut back if the worker's run is redone
HELP = ("compare a candidate model (FP16/INT8/fixed) with the FP32 reference tensor by tensor, "
        "or find which nodes must stay FP32 for a target precision (--to)")


def start_early(argv: List[str]) -> None:
    """Start the onnxruntime child before argparse and the verb's imports (called with the
    raw arguments after `compare`): every route runs the reference on onnxruntime, and the
    child's interpreter and onnxruntime import overlap all of this process's start-up."""
    if "-h" in argv or "--help" in argv:
        return
    from workbench.runtime.ortchild import default_child, isolated_by_default

    if isolated_by_default():
        default_child().warm()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("reference", help="the FP32 reference ONNX model")
    p.add_argument("candidate", nargs="?", help="the candidate ONNX model, or a TensorRT engine "
                   "file (.engine/.plan/.trt) built from the reference (omit with --to)")
    from workbench.precision import table

    p.add_argument("--to", choices=list(table.lowered()),
                   help="convert the reference to this precision and search for the nodes to "
                        "keep in FP32 until the outputs are within budget (the verdict: "
                        "--metric/--budget, else --atol/--rtol, else by output kind)")
    p.add_argument("--inputs", "--calib", dest="inputs", metavar="PATH",
                   help="representative inputs: .npz (keys = input names), .npy, or a folder "
                        "(--calib is the same: the name precision, profiles and build use)")
    p.add_argument("--allow-random", action="store_true",
                   help="compare on random inputs when no --inputs (a warning is reported)")
    p.add_argument("--atol", type=float, default=None,
                   help="absolute tolerance (default: the precision's, the candidate's read from "
                        "its graph or --to's: 1e-2 for fp16/bf16/int8/fp8, 1e-3 for fp32)")
    p.add_argument("--rtol", type=float, default=None,
                   help="relative tolerance (default: the precision's, as --atol)")
    add_verdict_arguments(
        p, elementwise=True, budget_default=None,
        metric_default="by output kind (class scores: top-1 and scale-relative error, "
                       "embeddings: cosine, boxes: IoU, masks: pixel agreement); --atol/--rtol "
                       "alone: elementwise",
        budget_help="the loss --metric may reach (default 1%%), or the default verdict's main "
                    "figure")
    p.add_argument("--runner", choices=["auto", "onnxruntime", "emulate", "reference"],
                   default="auto",
                   help="how to run the candidate: emulate = onnxruntime in FP32 with every "
                        "FP16/BF16 tensor rounded and saturated as stored (FP16 storage, FP32 "
                        "accumulation, like a GPU; auto picks it for FP16/BF16 models), "
                        "reference = onnx's numpy evaluator computing in float16 (slow)")
    p.add_argument("--memory-budget", type=float, default=None, metavar="MB",
                   help="hold at most this many MB of marked tensors at once (both sides, all "
                        "samples): more, smaller segments (CPU) or builds (engine) when they do not fit "
                        "(CPU default 32: each chunk is one segment of the graph, every node "
                        "runs once; 256 with --runner reference, which re-runs per chunk)")
    p.add_argument("--max-memory", type=float, default=None, metavar="MB",
                   help="a model held by reference (external weights over "
                        "$WORKBENCH_STREAM_WEIGHTS_MB, default 64) runs a segment at a time, "
                        "each mapping at most (MB - 512) / 4 of weights: the peak stays near MB "
                        "whatever the model's size (default: 256 MB of weights a segment)")
    p.add_argument("--stats", metavar="STATS.jsonl",
                   help="stream each tensor's figures here as they are computed (JSON lines)")
    p.add_argument("--samples", type=int, default=8, help="at most this many samples (default 8)")
    p.add_argument("--save-results", metavar="RUN.json",
                   help="save both runs' outputs as Polygraphy RunResults JSON")
    p.add_argument("--top", type=int, default=10, help="rows of the per-tensor table (default 10)")
    p.add_argument("--selection-aware", action="store_true",
                   help="exit status from the selection-aware verdict (after NMS / TopK / "
                        "NonZero: the tensors feeding the selection within --rtol, selected "
                        "rows differing only among near-tied scores; "
                        "workbench.compare.selection); it is reported beside the strict one "
                        "whenever the reference selects")
    p.add_argument("--score", metavar="TENSOR",
                   help="the score that pairs the selected rows (an output, or any tensor "
                        "of the model, e.g. TopK's values); default: the first selected "
                        "output with one float per row, else the score read inside the "
                        "selection")
    p.add_argument("--json", action="store_true", help="print JSON to stdout")
    from workbench.cli.common import (add_mkdir_argument, add_profile_argument,
                                      add_profile_index_argument)

    e = p.add_argument_group("engine side (TensorRT through the worker)")
    e.add_argument("--engine-from-build", action="store_true",
                   help="build the reference with --precision and compare the engine itself")
    e.add_argument("--precision", default=None,
                   help="engine precision (default: an engine file's, from its card; "
                        "else the --build-config's; else fp16)")
    e.add_argument("--backend", default="auto", help="auto | tensorrt | tensorrt-rtx")
    e.add_argument("--target", metavar="SM", help="TensorRT-RTX ahead-of-time target, e.g. sm89")
    add_profile_argument(e, " (default: the inputs' shapes)")
    e.add_argument("--opt-level", type=int, metavar="N", help="builder optimization level")
    e.add_argument("--build-config", metavar="JSON", help="a BuildConfig JSON file")
    e.add_argument("--mark", default="boundaries", metavar="boundaries|all|T1,T2",
                   help="tensors to compare: engine layer boundaries of an unmarked build "
                        "(default, keeps fusions), all (breaks fusions: a warning), or names")
    e.add_argument("--keep", action="append", default=[], metavar="TENSOR",
                   help="also save this tensor whole (both sides, .npy in --keep-dir)")
    e.add_argument("--keep-dir", metavar="DIR", help="where --keep writes")
    e.add_argument("--candidate-results", metavar="RUN.json",
                   help="compare a recorded run (Polygraphy RunResults JSON, e.g. `polygraphy run "
                        "--trt --trt-outputs mark all --save-outputs RUN.json`) on the same "
                        "--inputs, tensor by tensor")
    e.add_argument("--results-runner", metavar="NAME",
                   help="which runner of --candidate-results (default: the first not onnxrt)")
    e.add_argument("--bisect", action="store_true",
                   help="rebuild with suspects in FP32 to find the fewest that keep the "
                        "outputs within budget (the verdict, as --metric/--budget); report "
                        "each one's latency cost")
    add_profile_index_argument(e)
    add_mkdir_argument(p)


ENGINE_SUFFIXES = (".engine", ".plan", ".trt")


def needs_weights(args: argparse.Namespace) -> Optional[str]:
    """What the models' weights are needed for (main() refuses weightless or sparse models
    before any work): every comparison runs them."""
    return "a comparison"


def model_paths(args: argparse.Namespace) -> List[Tuple[Optional[str], str]]:
    """The model files main() checks before the options (workbench/cli/__init__.py): the
    reference, and the candidate as an ONNX model or (.engine/.plan/.trt) an engine."""
    cand = args.candidate
    kind = "engine" if cand and cand.lower().endswith(ENGINE_SUFFIXES) else "onnx"
    return [(args.reference, "onnx"), (cand, kind)]


def _engine_config(args: argparse.Namespace, engine: "str | None" = None) -> Any:
    """The BuildConfig of the engine to compare (the marked builds use it too): the flags
    given, then the fields the --build-config file sets, then, for an engine file, what its
    card says it was built with (precision, profiles, backend), then the defaults (fp16).
    A config file's unset fields never override: BuildConfig.to_dict fills every field, so a
    file naming only tactic sources would otherwise make the engine FP32."""
    import json
    from pathlib import Path

    from workbench.engines.spec import SPEC_FIELDS, BuildConfig

    base: dict = {}
    card = None
    if engine:
        from workbench.engines.card import read_card

        card = read_card(engine)
    if card:
        base.update({k: v for k, v in (card.get("precision") or {}).items()
                     if k in SPEC_FIELDS and v is not None})
        if card.get("profiles"):
            base["profiles"] = card["profiles"]
        if card.get("backend"):
            base["backend"] = card["backend"]
    if args.build_config:
        p = Path(args.build_config)
        if not p.is_file():
            raise WorkbenchError("build config file not found", file=str(p),
                                 field="--build-config")
        text = p.read_text()
        given = BuildConfig.from_json(text).to_dict()  # validates the file
        base.update({k: v for k, v in given.items() if k in json.loads(text)})
    if args.precision is not None:
        base["precision"] = args.precision
    base.setdefault("precision", "fp16")
    if args.backend != "auto" or "backend" not in base:
        base["backend"] = args.backend
    if args.target:
        base["target"] = args.target
    if args.opt_level is not None:
        base["builder_optimization_level"] = args.opt_level
    if args.profile:
        from workbench.cli.cmd_build import parse_profiles

        base["profiles"] = parse_profiles(args.profile)
    cfg = BuildConfig.from_dict(base)
    built = (card or {}).get("precision", {}).get("precision")
    if built and built != cfg.precision and not getattr(args, "json", False):
        print(f"note: {engine} was built as {built} (its card); the marked builds use "
              f"{cfg.precision} as asked: their figures describe another engine",
              file=sys.stderr)
    return cfg


def _run_engine(args: argparse.Namespace, engine: "str | None") -> int:
    from workbench.measure import enginedebug
    from workbench.compare import sample_feeds
    from workbench.runtime.runners import batched_inputs, limit_samples

    from workbench.precision.profiles import profile_index

    cfg = _engine_config(args, engine)
    args.profile_k = profile_index(getattr(args, "profile_index", None), cfg.profiles)
    feeds = limit_samples(sample_feeds(args.reference, calibration=args.inputs,
                                       allow_random=args.allow_random), args.samples,
                          batched_inputs(args.reference))
    mark = args.mark if args.mark in ("boundaries", "all") else \
        [m for m in args.mark.split(",") if m]
    split = _split_of(engine)
    if split is not None:  # the engine is a split build's prefix: its layers against the
        # prefix ONNX beside it, the model's outputs through the chain (engine + tail)
        chain = _chain_outputs(args, engine, cfg, feeds, split)
        prefix_inputs = set(split["manifest"].get("prefix", {}).get("inputs") or [])
        feeds = [{k: v for k, v in f.items() if not prefix_inputs or k in prefix_inputs}
                 for f in feeds]
        report = enginedebug.compare_engine(
            str(split["prefix"]), cfg, feeds, engine=engine, mark=mark,
            memory_budget_mb=args.memory_budget, stats_path=args.stats, keep=args.keep,
            keep_dir=args.keep_dir, atol=args.atol, rtol=args.rtol, metric=args.metric,
            budget=args.budget,
            profile_index=args.profile_k)
        rc = _report_engine(args, report, engine, None, cfg.precision, chain=chain,
                            prefix=str(split["prefix"]))
        return rc if chain["passed"] else 1
    report = enginedebug.compare_engine(
        args.reference, cfg, feeds, engine=engine, mark=mark,
        memory_budget_mb=args.memory_budget, stats_path=args.stats, keep=args.keep,
        keep_dir=args.keep_dir, atol=args.atol, rtol=args.rtol, metric=args.metric,
            budget=args.budget, profile_index=args.profile_k,
        on_chunk=None if args.json else
        (lambda k, n: print(f"build {k + 1}/{n} (marked)", file=sys.stderr, flush=True)))
    search = None
    if args.bisect and not _outputs_pass(report, args):
        search = enginedebug.bisect_engine(args.reference, cfg, feeds, atol=args.atol,
                                           rtol=args.rtol, report=report, metric=args.metric,
                                           budget=args.budget)
    return _report_engine(args, report, engine or "built", search, cfg.precision)


def _split_of(engine: "str | None") -> "Optional[dict]":
    """The split build beside `engine` (its manifest names this engine, the prefix and tail
    files exist): {"manifest", "prefix", "tail"}; None for a whole-model engine."""
    if not engine:
        return None
    from workbench.engines.tail import split_manifest, split_paths

    man = split_manifest(engine)
    paths = split_paths(engine)
    if man is None or not paths["prefix"].is_file():
        return None
    return {"manifest": man, "manifest_path": paths["manifest"], "prefix": paths["prefix"],
            "tail": paths["tail"]}


def _chain_outputs(args: argparse.Namespace, engine: str, cfg: Any, feeds: list,
                   split: dict) -> dict:
    """The model's outputs through the chain (the engine, then the onnxruntime tail) against
    onnxruntime FP32 on the whole model: the verdict a split engine is judged by."""
    from workbench.runtime.chain import ChainedRunner
    from workbench.runtime.comparison import compare_outputs
    from workbench.precision.table import tolerances
    from workbench.runtime.runners import OnnxRuntimeRunner
    from workbench.runtime.trtrunner import TensorRTRunner

    atol, rtol = tolerances(cfg.precision, args.atol, args.rtol)
    ref = OnnxRuntimeRunner(args.reference).infer_all(feeds)
    chain = ChainedRunner.from_folder(
        split["manifest_path"], prefix=TensorRTRunner(engine, model=str(split["prefix"]),
                                                      backend=cfg.backend,
                                                      profile_index=getattr(args, "profile_k",
                                                                            -1)))
    got = chain.infer_all(feeds)
    c = compare_outputs(ref, got, atol, rtol)
    outs = [{"tensor": n, "max_abs": t.max_abs, "rel": t.rel, "cosine": t.cosine,
             "passed": t.passed} for n, t in c.outputs.items()]
    return {"passed": bool(c.passed), "reason": c.reason, "outputs": outs, "atol": atol,
            "rtol": rtol,
            "tail": str(split["tail"]), "tail_nodes": len(split["manifest"].get("tail", {})
                                                        .get("nodes") or [])}


def _run_recorded(args: argparse.Namespace) -> int:
    """--candidate-results: a recorded run (Polygraphy's or ours) vs onnxruntime FP32."""
    from workbench.compare import load_run_results, sample_feeds
    from workbench.compare.engine_compare import (compare_tensors, engine_layerwise,
                                                  recorded_candidate)
    from workbench.runtime.runners import limit_samples

    runs = load_run_results(args.candidate_results)
    name = args.results_runner or next((n for n in runs if not n.startswith("onnxrt")),
                                       next(iter(runs), None))
    if name not in runs:
        raise WorkbenchError(f"no runner '{name}' in the results", file=args.candidate_results,
                             field="--results-runner", hint="runners: " + ", ".join(runs))
    iters = runs[name]
    feeds = limit_samples(sample_feeds(args.reference, calibration=args.inputs,
                                       allow_random=args.allow_random), 1 << 30)
    have = set(iters[0]) if iters else set()
    tensors = [t for t in compare_tensors(args.reference) if t in have]
    report = engine_layerwise(args.reference, recorded_candidate(iters, name), feeds,
                              tensors=tensors, marking="recorded", atol=args.atol,
                              rtol=args.rtol, precision=args.precision or "fp16",
                              candidate_name=name, stats_path=args.stats, observer=False,
                              metric=args.metric, budget=args.budget)
    return _report_engine(args, report, f"{args.candidate_results}[{name}]", None,
                          args.precision or "fp16")


def _report_engine(args: argparse.Namespace, report: Any, label: str, search: Any,
                   precision: str, chain: "Optional[dict]" = None,
                   prefix: "Optional[str]" = None) -> int:
    if args.save_results:
        from workbench.compare import save_run_results

        save_run_results(args.save_results, {"onnxruntime-fp32": report.runs["reference"],
                                             report.candidate_runner: report.runs["candidate"]})
    if args.json:
        d = report.to_dict()
        if search is not None:
            d["bisect"] = search.to_dict()
        if chain is not None:
            d["chain"] = chain
            d["prefix"] = prefix
        d["verdict"] = output_verdict(report, args).to_dict()
        print_json(_pasteable_findings(d, args.reference, args.inputs))
    else:
        if chain is not None:
            said = ", ".join(f"{o['tensor']} max abs {_fmt(o['max_abs'])} rel {_fmt(o['rel'])} "
                             f"cos {o['cosine']:.6f} {'PASS' if o['passed'] else 'FAIL'}"
                             for o in chain["outputs"])
            print(f"split engine: {label} holds the prefix ({prefix}); onnxruntime runs the "
                  f"tail ({chain['tail']})")
            print(f"model outputs through the chain (engine + tail) vs {args.reference} "
                  f"(onnxruntime FP32): {said}")
            print("the engine's layers, against the prefix ONNX:")
        print(f"reference: {prefix or args.reference} (onnxruntime FP32)  candidate: "
              f"{label} ({report.candidate_runner})  samples: {report.samples}  "
              f"atol {report.atol:g} rtol {report.rtol:g}")
        print(f"marking: {report.marking}, {len(report.tensors)} tensors compared in "
              f"{len(report.chunks)} build(s), {report.unmatched} not in the engine; peak RSS "
              f"{report.peak_rss_mb:.0f} MB" + (f" (budget {report.budget_mb:g} MB)"
                                                if report.budget_mb else ""))
        if report.observer:
            print("observer check: " + ("MARKING CHANGED THE ANSWER" if
                                        report.marking_changed_outputs else "marked builds give "
                                        "the unmarked engine's answer"))
        _print_tensors(report, args.top, args.reference, args.inputs, args)
        if search is not None:
            print(f"\nbisection ({search.route}): {search.message}")
            print(search.table())
            if search.excluded:
                print("  workbench build " + args.reference + f" --precision {precision} " +
                      " ".join(f"--exclude {n}" for n in search.excluded) + " -o OUT.engine")
    if search is not None:
        return 0 if search.passed else 1
    return 0 if _outputs_pass(report, args) and not report.marking_changed_outputs else 1


def _print_tensors(report: Any, top: int, model: Optional[str] = None,
                   data: Optional[str] = None,
                   args: Optional[argparse.Namespace] = None) -> None:
    """The text view shared by the CPU and engine reports: outputs, the `top` tensors with the
    largest relative error, the findings (their MODEL / DATA as `model` / `data`)."""
    from workbench.core.nextstep import pasteable

    v = output_verdict(report, args)
    print(f"verdict ({v.rule}; the elementwise atol/rtol rule is a diagnostic): "
          + ("PASS" if v.passed else "FAIL"))

    def said(t: Any) -> str:
        ov = v.outputs.get(t.tensor)
        verdict = ("PASS" if ov.passed else "FAIL") if ov is not None else \
            ("PASS" if t.passed else "FAIL")
        if getattr(t, "shape_change", None):
            return f"{t.tensor} shape {t.shape_change} {verdict}"
        if str(t.dtype).split(" ")[-1].startswith(("int", "uint", "bool")):
            # (labels, ids; after a data-dependent selection, element by element: rows the
            # selection ordered differently count as differing, --selection-aware pairs them)
            sel = t.node in getattr(report, "selection_nodes", ())
            return (f"{t.tensor} {t.mismatches} of {t.size} differ" +
                    (" element by element (rows the selection orders differently count; "
                     "--selection-aware pairs rows)" if sel and t.mismatches else "")
                    + f" {verdict}")
        diag = "elementwise " + ("pass" if t.passed else
                                 f"{t.mismatches} of {t.size} beyond atol/rtol")
        return (f"{t.tensor} max abs {_fmt(t.max_abs)} rel {_fmt(t.rel)} cos {t.cosine:.6f} "
                f"{verdict}" + (f" ({ov.kind}: {ov.words}; {diag})" if ov is not None else ""))

    print("outputs: " + ", ".join(said(t) for t in report.outputs))
    worst = sorted(report.tensors, key=lambda t: -t.rel if math.isfinite(t.rel) else -1e300)
    w_op = max([14] + [len(t.op) for t in worst[:top]])  # (GlobalAveragePool, whole)
    if worst:  # (no intermediate tensor compared: the findings say why, no empty table)
        print(f"\n{'tensor':48} {'op':{w_op}} {'max abs':>10} {'rel':>10} {'added':>10}")
    for t in worst[:top]:
        print(f"{t.tensor[:48]:48} {t.op:{w_op}} {_fmt(t.max_abs):>10} {_fmt(t.rel):>10} "
              f"{_fmt(t.added):>10}")
    from workbench.core.nextstep import finding_text

    seen: set = set()
    for f in report.findings:
        text = finding_text(f, "", seen, model=model, data=data)
        print(pasteable(text, model, data) if model else text)


def output_verdict(report: Any, args: Optional[argparse.Namespace] = None) -> Any:
    """The verdict (`workbench.runtime.verdict`) of a layer-wise report's outputs: the --metric within
    --budget; else, with --atol/--rtol given, the elementwise rule they ask for; else by
    output kind at the candidate's precision, from the per-sample runs the report kept."""
    from workbench.runtime.verdict import judge_tensors, verdict_metric

    metric = verdict_metric(getattr(args, "metric", None), getattr(args, "atol", None),
                            getattr(args, "rtol", None))
    return judge_tensors(report.outputs, getattr(report, "precision", "fp32") or "fp32",
                         getattr(report, "runs", None), metric=metric,
                         budget=getattr(args, "budget", None), atol=report.atol,
                         rtol=report.rtol)


def _outputs_pass(report: Any, args: Optional[argparse.Namespace] = None) -> bool:
    return bool(output_verdict(report, args).passed)


def _pasteable_findings(d: dict, model: Optional[str], data: Optional[str]) -> dict:
    """`d` (a report's JSON form) with its findings' MODEL / DATA as this run's paths, as the
    text output prints them: the commands in `hint` run as they are."""
    from workbench.core.nextstep import pasteable

    from workbench.core.nextstep import json_steps

    if model:
        for f in d.get("findings") or []:
            for k in ("message", "hint"):
                if isinstance(f.get(k), str):
                    f[k] = pasteable(f[k], model, data)
    return json_steps(d, model=model, data=data)


def _fmt(x: float) -> str:
    return "inf" if not math.isfinite(x) else f"{x:.3g}"


def _check_recorded(args: argparse.Namespace) -> None:
    """--candidate-results is the candidate: no other candidate, inputs required, and the
    output paths checked before any run."""
    if args.candidate or args.to or args.engine_from_build:
        raise WorkbenchError("--candidate-results is the candidate: give no candidate "
                             "model, engine or --to", field="--candidate-results")
    if args.inputs is None:
        raise WorkbenchError("a recorded run needs the inputs it ran on", field="--inputs",
                             hint="pass them with --inputs PATH (.npz)")
    from workbench.cli.common import output_path

    output_path(args.save_results, "--save-results", mkdir=args.mkdir)
    output_path(args.stats, "--stats", mkdir=args.mkdir)


def _check_engine(args: argparse.Namespace, engine: Optional[str]) -> None:
    """An engine (a file or --engine-from-build) is the candidate: no model or --to beside
    it, output paths checked, inputs (or --allow-random) given, the engine file there."""
    if args.to or (args.candidate and not engine):
        raise WorkbenchError("--engine-from-build compares the reference's own engine: give "
                             "no candidate model and no --to", field="--engine-from-build")
    from workbench.cli.common import output_path

    output_path(args.save_results, "--save-results", mkdir=args.mkdir)
    output_path(args.stats, "--stats", mkdir=args.mkdir)
    if args.inputs is None and not args.allow_random:
        raise WorkbenchError("no inputs to compare on", field="--inputs",
                             hint="pass representative inputs with --inputs PATH, or "
                                  "--allow-random to accept random data")
    if engine:
        from pathlib import Path

        if not Path(engine).is_file():
            raise WorkbenchError("engine file not found", file=engine,
                                 hint="build it with `workbench build`, or use "
                                      "--engine-from-build")


def _print_rounds(args: argparse.Namespace, search: Any, calib: Any) -> None:
    """The findings worth a line (range, masks, random inputs...) and one line per round:
    nodes kept, the worst output error, PASS or how many elements are beyond tolerance."""
    from workbench.core.nextstep import finding_text

    for f in search.findings:  # the range finding, masks, a warning of random inputs
        if f.code.endswith(("-range", "-saturated-mask")) or \
                f.code in ("random-inputs", "not-a-batch", "over-memory"):
            print(finding_text(f, "", model=args.reference, data=calib))
    for r in search.rounds:
        print(_round_line(r))


def _round_line(r: dict) -> str:
    """One round: nodes kept, the worst judged relative error, the verdict's words and PASS
    or FAIL, and the elementwise atol/rtol rule beside it as a diagnostic."""
    rel = r['worst_output_rel']
    beyond = r.get("elements_beyond", 0)
    words = _verdict_words(r.get("verdict") or {}) or r.get("verdict_words") or ""
    diag = ("elementwise atol/rtol: " + ("pass" if r.get("elementwise_passed", True) else
                                          f"{beyond} element(s) beyond"))
    if (r.get("verdict") or {}).get("rule", "").startswith("elementwise"):
        diag = ""  # (the verdict is the elementwise rule: its words say the count)
    return (f"round {r['round']}: {len(r['excluded'])} node(s) in FP32, worst output "
            f"relative error {rel if isinstance(rel, str) else _fmt(rel)}"
            + (f"; {words}" if words else "")
            + ("  PASS" if r['outputs_pass'] else "  FAIL")
            + (f" ({diag})" if diag else ""))


def _verdict_words(v: dict, shown: int = 3) -> str:
    """A round's verdict in a line: the failing outputs first, at most `shown` of them, and
    how many more (a decoder judges dozens of KV-cache outputs)."""
    outs = sorted((v.get("outputs") or {}).items(), key=lambda kv: bool(kv[1].get("passed")))
    said = "; ".join(f"{k}: {o.get('words', '')}" for k, o in outs[:shown])
    more = len(outs) - shown
    return said + (f"; {more} more output(s) {'pass' if v.get('passed') else 'judged'}"
                   if more > 0 else "")


def _print_verdict(args: argparse.Namespace, search: Any) -> None:
    """The search's verdict, the samples it judged, and how a selecting model was judged."""
    rule = f" ({search.rule})" if search.rule else ""
    verdict = f"within budget{rule}" if search.passed else f"NOT within budget{rule}"
    fin = search.final
    on = ""
    if fin is not None and fin.samples_available > fin.samples:  # (say it: 8 of 64)
        on = (f" on {fin.samples} of {fin.samples_available} samples "
              f"(--samples {fin.samples_available} judges them all)")
    elif fin is not None and fin.samples:
        on = f" on {fin.samples} sample(s)"
    print(f"{args.to}: {verdict} with {len(search.excluded)} node(s) kept in FP32{on}")
    if search.selected:
        shown = ", ".join(search.selected[:4]) + (" ..." if len(search.selected) > 4
                                                  else "")
        print(f"  the outputs after the model's data-dependent selection ({shown}) are "
              "judged by the tensors that feed it (near-tied rows swap, or their count "
              "changes, under any rounding); `workbench compare REF CANDIDATE "
              "--selection-aware` also judges the rows it selects")


def _print_closest(args: argparse.Namespace, search: Any, calib: Any, line: str) -> None:
    """A search that did not pass: why it stopped, and the closest round's command (said to
    be beyond tolerance, and whether later rounds were worse)."""
    print("  " + search.why_stopped(args.reference, calib if isinstance(calib, str) else None))
    at = next((r["round"] for r in search.rounds if r.get("best")), None)
    where = ""
    if at is not None:
        best = search.rounds[at]["worst_output_rel"]
        later = [r["worst_output_rel"] for r in search.rounds[at + 1:]]
        worse = bool(later) and all(x > best for x in later)
        where = (f" (round {at}; later rounds were "
                 f"{'worse' if worse else 'no better'})" if later else
                 f" (round {at})")
    if search.excluded:
        print(f"  the closest it got{where}, still beyond "
              f"{'tolerance' if search.elementwise else 'budget'}: " + line)
    elif at is not None:
        print(f"  the closest it got{where} keeps no node in FP32: the model "
              f"converted as it is")


def _print_search(args: argparse.Namespace, search: Any, calib: Any) -> None:
    """The human report of a --to search: rounds, verdict, then the `workbench precision`
    command to use (or the closest one and why it stopped)."""
    _print_rounds(args, search, calib)
    _print_verdict(args, search)
    line = ("workbench precision " + shlex.quote(args.reference) + f" --to {args.to} "
            + " ".join(f"--exclude {shlex.quote(n)}" for n in search.excluded)
            + (f" --calib {shlex.quote(calib)}" if isinstance(calib, str) else "")
            + " -o OUT.onnx")
    if search.passed and search.excluded:
        print("  " + line)
        if search.quantized_left == 0:
            what = "tolerance" if search.elementwise else "budget"
            print(f"  but nothing is left in {args.to.upper()}: every node it quantizes "
                  f"is kept in FP32, so the model computes in FP32 (at this {what} "
                  f"{args.to.upper()} gains nothing; build it in FP16, or "
                  f"{search.relax_words()})")
    elif not search.passed:
        _print_closest(args, search, calib, line)


def _run_search(args: argparse.Namespace, calib: Any) -> int:
    """--to: search the nodes to keep in FP32 (`find_exclusions`) and report it; exit 0 when
    the outputs end within budget (the verdict `compare REF CAND` gives: --metric within
    --budget, --atol/--rtol alone the elementwise rule, else the default per output kind)."""
    from workbench import compare

    search = compare.find_exclusions(args.reference, args.to, calibration=calib,
                                     atol=args.atol, rtol=args.rtol,
                                     allow_random=args.allow_random,
                                     max_samples=args.samples,
                                     max_memory_mb=args.max_memory,
                                     metric=args.metric, budget=args.budget)
    if args.json:
        print_json(_pasteable_findings(search.to_dict(), args.reference, calib))
    elif search.hopeless:
        from workbench.core.nextstep import finding_text

        for f in search.findings:
            print(finding_text(f, "", model=args.reference, data=calib))
        return 1
    else:
        _print_search(args, search, calib)
    return 0 if search.passed else 1


def _print_selection(report: Any, sel: Any) -> None:
    """The selection-aware verdict: batches that pass, the worst one, and the strict
    (unpaired) relative error beside it."""
    ok = sum(c.passed for c in sel)
    worst = next((c for c in sel if not c.passed), sel[0])
    strict = worst.strict_rel
    n = getattr(sel, "samples", None)
    batches = (f"{n} sample(s) in {len(sel)} batch(es), {ok} pass" if n else
               f"{ok} of {len(sel)} batch(es) pass")
    print(f"selection-aware (budget rel {report.rtol:g}, candidate run by "
          f"'{getattr(sel, 'runner', 'onnxruntime')}'): "
          f"{'PASS' if ok == len(sel) else 'FAIL'} ({batches}): "
          f"{worst.summary()}; without pairing rows, relative to each output's range "
          f"(max abs error / max |reference|): rel "
          f"{'-' if strict is None else _fmt(strict)} "
          f"{'PASS' if all(c.strict_passed for c in sel) else 'FAIL'}")


def _run_layerwise(args: argparse.Namespace, calib: Any) -> int:
    """A candidate model: compare it layer by layer (and selection-aware where the model
    selects); exit 0 when the outputs (or, asked, the selection-aware check) pass."""
    from workbench import compare

    report = compare.layerwise(args.reference, args.candidate, calibration=calib,
                               atol=args.atol, rtol=args.rtol, candidate_runner=args.runner,
                               max_samples=args.samples,
                               allow_random=args.allow_random,
                               memory_budget_mb=args.memory_budget, stats_path=args.stats,
                               max_memory_mb=args.max_memory, metric=args.metric,
                               budget=args.budget)
    if args.save_results:
        runs = {"onnxruntime-fp32": report.runs["reference"],
                f"{report.candidate_runner}-candidate": report.runs["candidate"]}
        compare.save_run_results(args.save_results, runs)
    sel = _selection_checks(args, calib, report.rtol)
    if args.json:
        d = report.to_dict()
        d["selection_aware"] = [c.to_dict() for c in sel] if sel is not None else None
        d["verdict"] = output_verdict(report, args).to_dict()
        print_json(_pasteable_findings(d, args.reference, args.inputs))
    else:
        print(f"reference: {args.reference} (onnxruntime)  candidate: {args.candidate} "
              f"({report.candidate_runner}, {report.precision})  samples: {report.samples}"
              + (f" of {report.samples_available} (--samples {report.samples_available} "
                 "compares all)" if report.samples_available > report.samples else "") + "  "
              f"atol {report.atol:g} rtol {report.rtol:g}")
        print(f"{len(report.tensors)} tensors compared, {report.unmatched} only in one model")
        _print_tensors(report, args.top, args.reference, args.inputs, args)
        if sel is not None:
            _print_selection(report, sel)
    if args.selection_aware and sel is not None:
        return 0 if all(c.passed for c in sel) else 1
    return 0 if _outputs_pass(report, args) else 1


def run(args: argparse.Namespace) -> int:
    """Route to the recorded run, the engine compare, the --to search or the layer-wise
    compare of a candidate model; the exit code is that route's verdict."""
    from workbench.runtime.ortchild import default_child, isolated_by_default

    if isolated_by_default():  # every route runs the reference on onnxruntime: its child's
        default_child().warm()  # interpreter starts while this one imports and loads
    from workbench.precision import table
    from workbench.runtime.verdict import parse_budget, resolve_metric

    resolve_metric(args.metric)  # (a bad metric or budget is said before any run)
    parse_budget(args.budget)
    if args.candidate_results:
        _check_recorded(args)
        return _run_recorded(args)
    engine = args.candidate if args.candidate and \
        args.candidate.lower().endswith(ENGINE_SUFFIXES) else None
    if engine or args.engine_from_build:
        _check_engine(args, engine)
        return _run_engine(args, engine)
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
        return _run_search(args, calib)
    return _run_layerwise(args, calib)


def _selection_checks(args: argparse.Namespace, calib: Any, tol: float) -> Any:
    """The selection-aware verdict per sample (at most --samples), None when the reference
    selects nothing data-dependently."""
    from workbench.compare import sample_feeds
    from workbench.compare.selection import selection_aware, selection_nodes

    if not selection_nodes(as_model(args.reference).proto):  # (the graph only: no weights)
        return None
    ref = as_model(args.reference).with_weights()
    from workbench.runtime.runners import batched_inputs, limit_samples, samples_in

    batched = batched_inputs(ref)  # the samples the layer-wise compare judged, no others
    feeds = limit_samples(sample_feeds(ref, args.candidate, calibration=calib,
                                       allow_random=args.allow_random),
                          max(1, args.samples), batched)
    cand = as_model(args.candidate).with_weights()
    score = getattr(args, "score", None)
    if score is not None:
        made = {o for n in ref.graph.node for o in n.output} | {i.name for i in ref.graph.input}
        if score not in made:
            from workbench.core.errors import WorkbenchError

            raise WorkbenchError(f"the model makes no tensor named '{score}'",
                                 file=args.reference, field="--score",
                                 hint="name a graph output or a node's output, e.g. the "
                                      "first output of the TopK that selects the rows")
    # the candidate runs on the runner the layer-wise compare used (the FP16 emulation:
    # onnxruntime's CPU provider computes many FP16 ops in FP32 and would hide flips)
    from workbench.runtime.runners import low_float_runner

    kind = args.runner if getattr(args, "runner", "auto") not in (None, "auto") else \
        low_float_runner(cand)
    return _Checks([selection_aware(ref, cand, f, tol=tol, score=score, candidate_runner=kind)
                    for f in feeds], sum(samples_in(f, batched) for f in feeds), kind)


class _Checks(list):
    """The selection-aware checks, one per batch, and the samples they hold."""

    def __init__(self, checks: "list", samples: int, runner: str = "onnxruntime") -> None:
        super().__init__(checks)
        self.samples = samples
        self.runner = runner  # what ran the candidate
