"""`workbench fix MODEL -o OUT [--recipe NAME[:k=v,...]]... [--auto] [--split [--build]] [--resume] [--json]`.

Starts from MODEL as it is on disk; when an earlier session left changes for the same content
(a notebook, an earlier `fix`, a copy of the file), it says so, and --resume continues from them.

Applies recipes (in the order given), then with --auto keeps asking the real TensorRT parser and
applying proposed recipes until the model is supported. Every kept change is a version in the
model's workspace history; OUT gets the final model (never MODEL itself). Exit 0 when the result
is supported (or no check was asked), 1 when still unsupported or a change was not equivalent,
2 on bad input. With --split, OUT is a folder: what the backend still refuses (and everything
after it) stays ONNX for onnxruntime (tail.onnx), the rest is the engine's ONNX (prefix.onnx),
split.json wires them (`workbench.runtime.chain.ChainedRunner`); exit 0 when the backend takes the
prefix and prefix-then-tail equals the model.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

NAME = "fix"
HELP = ("fix what TensorRT cannot parse with graphsurgeon recipes (verified with onnxruntime, "
        "recorded with undo history)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from workbench.support.checker import BACKEND_CHOICES  # the backends `check` takes too

    parser.add_argument("model", metavar="MODEL", nargs="?", help="path to an .onnx file")
    parser.add_argument("-o", "--output", metavar="OUT", help="where to write the fixed model")
    parser.add_argument("--recipe", action="append", default=[], metavar="NAME[:k=v,...]",
                        help="apply a recipe (repeatable; lists inside a value use ';', dicts "
                        "'name/value', e.g. set_input_shapes:shapes=input/Nx3x32x32)")
    parser.add_argument("--auto", action="store_true",
                        help="propose and apply recipes for every node the parser rejects, "
                        "re-checking after each, until supported")
    parser.add_argument("--check", action="store_true",
                        help="check support before and after even without --auto")
    parser.add_argument("--backend", default="tensorrt-rtx", choices=BACKEND_CHOICES,
                        help="whose parser judges support (default tensorrt-rtx)")
    parser.add_argument("--inputs", metavar="NPZ",
                        help="verify on these inputs (.npz keyed by input name, loaded with "
                        "allow_pickle=False) instead of generated ones")
    parser.add_argument("--force", action="store_true",
                        help="keep a semantics-preserving change even if outputs differ")
    parser.add_argument("--split", action="store_true",
                        help="then split off what the backend still refuses: OUT is a folder "
                        "that gets prefix.onnx (for the engine), tail.onnx (onnxruntime) and "
                        "split.json")
    parser.add_argument("--build", action="store_true",
                        help="with --split: the prefix must also build (TensorRT-RTX builds "
                        "ahead of time without a GPU)")
    parser.add_argument("--list-recipes", action="store_true", help="list recipes and exit")
    parser.add_argument("--json", action="store_true", help="print a JSON report on stdout")
    from workbench.cli.common import add_mkdir_argument

    add_mkdir_argument(parser)
    parser.add_argument("--all-history", action="store_true",
                        help="also list the changes earlier sessions made to this model")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the changes an earlier session left for this "
                        "model's content (default: start from MODEL as it is on disk, and say "
                        "when such changes exist)")


def _load_inputs(path: str) -> Dict[str, Any]:
    """Sample inputs from an .npz (never pickle); the first axis is not special here."""
    import numpy as np

    from workbench.core.errors import WorkbenchError

    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except FileNotFoundError:
        raise WorkbenchError("inputs file not found", file=path, field="inputs") from None
    except Exception as e:
        raise WorkbenchError(f"cannot read inputs ({type(e).__name__}: {e})", file=path,
                             field="inputs", hint="save arrays with numpy.savez(path, name=array)") from None


def _strip(change: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in change.items() if k != "proto"}


def _says_the_same(change: Any) -> bool:
    """A change kept unverified notes the verification's own reason: printed once is enough."""
    v = change.verification
    return v is not None and getattr(v, "status", None) == "unverified" and \
        change.note == f"kept unverified: {v.reason}"


def _num(x: Any) -> str:
    return f"{x:.3g}" if isinstance(x, (int, float)) else str(x)


def remaining_line(r: Dict[str, Any]) -> str:
    """One unsupported entry after --auto: node and op (or 'the model as a whole' for a
    graph-level refusal), the reason, and the next step."""
    where = (f"{r['node']} ({r['op'] or 'unknown op'})" if r.get("node")
             else f"the model as a whole{' (' + r['op'] + ')' if r.get('op') else ''}")
    hint = r.get("hint") or ""
    return f"{where}: {r.get('reason') or 'refused'}" + (f" - next: {hint}" if hint else "")


def step_line(step: Dict[str, Any], backend: str) -> str:
    """One --auto step for the log: the change, whether it was kept, and what the parser says
    of the whole model afterwards (the model, not the step: a kept step is never 'unsupported')."""
    p = step["proposal"]
    if "repeat_of_step" in step:
        return f"{p['recipe']} on {p['node'] or 'the model'}: not applied again ({step['why']})"
    line = f"{p['recipe']} on {p['node'] or 'the model'}: " \
        f"{'kept' if step.get('kept') else 'NOT kept'}"
    v = step.get("verification") or {}
    if v.get("max_abs_diff") is not None:
        line += f", max abs diff {v['max_abs_diff']:.3g}"
    if step.get("error"):
        line += f" ({step['error']})"
    from workbench.surgery.recipes import recipe_cost

    cost = recipe_cost(p["recipe"]) if step.get("kept") else None
    if cost:  # what it costs, every time
        line += f"; {cost}"
    if "supported_after" in step:
        left = step.get("unsupported_after") or []
        if step["supported_after"]:
            line += f"; the model now parses with {backend}"
        else:
            names = ", ".join(u.get("node") or "(graph)" for u in left[:3])
            more = f" and {len(left) - 3} more" if len(left) > 3 else ""
            line += f"; {len(left)} node(s) still to fix: {names}{more}"
    return line


def _history_json(view: Dict[str, Any]) -> Dict[str, Any]:
    """The history view without the bulky per-entry diffs and verifications."""
    def slim(v: Dict[str, Any]) -> Dict[str, Any]:
        return {k: v.get(k) for k in ("version", "parent", "recipe", "params", "session",
                                      "mine", "time")}
    return {"session": view["session"], "changes": view["changes"],
            "steps": [slim(v) for v in view["steps"]],
            "earlier": [{"id": s["id"], "pid": s["pid"], "start": s["start"],
                         "entries": [slim(v) for v in s["entries"]]} for s in view["earlier"]]}


def needs_weights(args: argparse.Namespace) -> Optional[str]:
    """What the model's weights are needed for (main() refuses weightless or sparse models
    before any work): --auto and --split run the TensorRT parser, recipes read weights;
    densify_sparse alone is the way out of sparse weights."""
    if args.auto or args.split:
        return "--auto/--split (the TensorRT parser)"
    names = {str(r).split(":", 1)[0] for r in (args.recipe or [])}
    return None if not names or names == {"densify_sparse"} else "a recipe"


def model_paths(args: argparse.Namespace) -> List[Tuple[Optional[str], str]]:
    """The model file main() checks before the options (workbench/cli/__init__.py); none
    for --list-recipes, which reads no model."""
    return [] if args.list_recipes else [(args.model, "onnx")]


def _list_recipes(json_out: bool) -> int:
    """--list-recipes: each recipe's name, whether it keeps semantics, its params and summary."""
    from workbench.cli.common import print_json
    from workbench.surgery.recipes import list_recipes

    recipes = list_recipes()
    if json_out:
        print_json(recipes)
    else:
        for r in recipes:
            ps = ", ".join(p["name"] for p in r["params"]) or "-"
            print(f"{r['name']:20s} {'exact ' if r['preserves_semantics'] else 'changes'}  "
                  f"params: {ps}\n    {r['summary']}")
    return 0


def _check_args(args: argparse.Namespace) -> None:
    """Refuse a missing model or output, writing over the model, nothing to do, and option
    combinations that cannot work, before any work (exit 2)."""
    from workbench.core.errors import WorkbenchError

    if not args.model:
        raise WorkbenchError("MODEL is required", hint="workbench fix MODEL -o OUT --auto")
    if not args.output:
        raise WorkbenchError("-o OUT is required", hint="the original model is never overwritten")
    if Path(args.output).resolve() == Path(args.model).resolve():
        raise WorkbenchError("refusing to write over the original model", file=args.output,
                             hint="choose another output path (-o)")
    from workbench.cli.common import output_path

    output_path(args.output, "-o", mkdir=args.mkdir, folder=args.split)
    if not args.recipe and not args.auto and not args.split and not args.resume:
        raise WorkbenchError("nothing to do: give --recipe NAME[:k=v,...], --auto, --split "
                             "and/or --resume", hint="see `workbench fix --list-recipes`")
    if (args.auto or args.split) and args.backend == "static":
        raise WorkbenchError(f"{'--auto' if args.auto else '--split'} needs a real parser",
                             field="backend", hint="use --backend tensorrt-rtx (or tensorrt)")
    if args.build and not args.split:
        raise WorkbenchError("--build goes with --split", field="build",
                             hint="`workbench check --build` builds a whole model")


def _apply_recipes(session: Any, recipes: List[Tuple[str, Dict[str, Any]]],
                   report: Dict[str, Any], log: Any) -> bool:
    """Apply the --recipe changes in order, logging each (kept or not, its diff, verification,
    the nodes a node-less recipe left); True when one was not kept."""
    problem = False
    for name, params in recipes:
        change = session.apply(name, params, recheck=False)
        d = _strip(change.to_dict())
        (report["applied"] if change.kept else report["not_kept"]).append(d)
        log(f"{name}: {'kept' if change.kept else 'NOT kept'} - {change.diff['summary']}; "
            f"{change.verification or 'not verified'}"
            + (f" ({change.note})" if change.note and not _says_the_same(change) else ""))
        left = (change.precondition or {}).get("reason", "").partition("; left as they are: ")[2]
        if change.kept and left:  # a recipe given no node: the nodes it did not change, and why
            log(f"  left as they are: {left}")
        problem = problem or not change.kept
    return problem


def _auto_or_check(args: argparse.Namespace, session: Any, report: Dict[str, Any],
                   log: Any, checking: bool) -> None:
    """--auto's fix loop (its steps, stop reason and what remains), or with --check a plain
    check after; where still unsupported, the report gets the proposals."""
    if args.auto:
        res = session.auto_fix(on_step=lambda s: log(step_line(s, args.backend)))
        for s in res.steps:
            (report["applied"] if s.get("kept") else report["not_kept"]).append(_strip(s))
        report["stop_reason"] = res.stop_reason
        report["repeats"] = [_strip(r) for r in res.repeats]
        report["support_after"] = res.support_after.to_dict()
        report["supported"] = res.supported
        report["remaining"] = res.remaining
    elif checking:
        after = session.check()
        report["support_after"] = after.to_dict()
        report["supported"] = after.supported
    if checking and not report["supported"]:
        report["proposals"] = [p.to_dict() for p in session.proposals]


def _record_history(args: argparse.Namespace, session: Any, report: Dict[str, Any],
                    earlier: Optional[Dict[str, Any]]) -> None:
    """The end-to-end verification, the versions, workspace and history, and the earlier
    session's changes, into the report."""
    hist = session.history
    v = session.end_to_end(report["applied"])
    report["verification"] = v.to_dict() if v is not None else None
    report["versions"] = hist.lineage()
    report["workspace"] = str(hist.ws.dir)
    report["history"] = _history_json(hist.view())
    report["resumed"] = bool(args.resume)
    report["earlier"] = None if earlier is None else {
        "changes": earlier["changes"], "version": earlier["version"],
        "session": earlier["session"], "time": earlier["time"],
        "recipes": [s.get("recipe") for s in earlier["steps"]]}


def _summary_line(args: argparse.Namespace, report: Dict[str, Any],
                  earlier: Optional[Dict[str, Any]], unchanged: bool, checking: bool) -> str:
    """The one-line outcome: written or not, changes kept and not, end-to-end and support."""
    v = report["verification"]
    return (f"{'nothing written to' if unchanged else 'wrote'} {args.output}: "
            f"{len(report['applied'])} change(s) kept, "
            f"{len(report['not_kept'])} not kept"
            + (f" (on top of {earlier['changes']} earlier change(s), --resume)"
               if args.resume and earlier else "")
            + (f"; end-to-end {v['status']}" + (
                f", max abs diff {_num(v['max_abs_diff'])}" if v.get("max_abs_diff") is not None
                else "") if v else "")  # (an unverified change says why on its own line)
            + (f"; supported by {args.backend}: {report['supported']}" if checking else ""))


def _print_unchanged(args: argparse.Namespace, report: Dict[str, Any]) -> None:
    """Why no file was written; where no recipe makes the model parse whole, the next steps
    (split it)."""
    from workbench.core.nextstep import lines as step_lines
    from workbench.core.findings import step

    whole = report["supported"] is False
    print("  (no change was kept, so no file was written: it would be the model as "
          "it was)" + ("; no recipe makes it parse whole" if whole else ""))
    if whole:
        for line in step_lines([
                step("fix", "{model}", split=True, o="{stem}_split", why="keeps what "
                     "the backend takes as an engine and the rest for onnxruntime"),
                step("build", "{model}", o="{stem}.engine", why="splits so by itself")],
                "    ", model=args.model):
            print(line)


def _print_report(args: argparse.Namespace, report: Dict[str, Any], hist: Any,
                  earlier: Optional[Dict[str, Any]], unchanged: bool, checking: bool) -> None:
    """The human report: the summary, what is still unsupported, the history, and an offer to
    --resume an earlier session's changes this run did not start from."""
    print(_summary_line(args, report, earlier, unchanged, checking))
    for r in report.get("remaining") or []:
        print("  still unsupported: " + remaining_line(r))
    if unchanged:
        _print_unchanged(args, report)
    from workbench.surgery.history import history_lines

    for line in history_lines(hist.view(), show_earlier=args.all_history,
                              show_hint="--all-history"):
        print(line)
    if earlier is not None and not args.resume and earlier["version"] not in hist.lineage():
        import shlex

        from workbench.surgery.history import earlier_offer

        print(f"  {earlier_offer(earlier)}; this run started from "
              f"{args.model} as it is: `workbench fix {shlex.quote(str(args.model))} -o "
              f"{shlex.quote(str(args.output))} --resume` continues from them")


def run(args: argparse.Namespace) -> int:
    """Apply the recipes, then --auto / --check, write OUT (or --split it); the exit code says
    whether the result is supported and every change was kept."""
    from workbench.cli.common import print_json
    from workbench.core.errors import WorkbenchError

    if args.list_recipes:
        return _list_recipes(args.json)
    _check_args(args)
    from workbench.surgery.changes import parse_recipe_arg
    from workbench.surgery.session import FixSession

    recipes = [parse_recipe_arg(r) for r in args.recipe]  # bad syntax -> exit 2 before any work
    inputs = _load_inputs(args.inputs) if args.inputs else None
    # the CLI starts from the file as it is (a session of its own: nothing is written) and
    # says when earlier changes exist; --resume continues from them
    # (hints about the fixed model name the -o file the CLI writes)
    session = FixSession(args.model, backend=args.backend, inputs=inputs, force=args.force,
                         start="original", output=args.output)
    hist = session.history
    earlier = session.earlier()
    if args.resume:
        if earlier is None:
            raise WorkbenchError("nothing to resume: no earlier session left a change to this "
                                 "model", file=str(args.model), field="resume",
                                 hint="drop --resume (and give --auto or --recipe)")
        session.resume()
    log = (lambda m: None) if args.json else (lambda m: print(m, file=sys.stderr))
    checking = args.auto or args.check
    report: Dict[str, Any] = {"model": str(args.model), "output": str(args.output),
                              "applied": [], "not_kept": [], "support_before": None,
                              "support_after": None, "supported": None}
    if checking:
        report["support_before"] = session.check().to_dict()
    problem = _apply_recipes(session, recipes, report, log)
    _auto_or_check(args, session, report, log, checking)
    _record_history(args, session, report, earlier)
    if args.split:
        return _split(args, hist, report, log)
    # nothing kept: the output would be a copy of the input a user may take for a fixed model
    unchanged = hist.current == hist.original
    report["written"] = not unchanged
    if not unchanged:
        hist.export(args.output)
    if args.json:
        from workbench.core.nextstep import json_steps

        print_json(json_steps(report, model=args.model))
    else:
        _print_report(args, report, hist, earlier, unchanged, checking)
    if checking and not report["supported"]:
        return 1
    return 1 if problem else 0


def _split(args: argparse.Namespace, hist: Any, report: Dict[str, Any], log: Any) -> int:
    """Split the current version into the folder OUT; the report gets the manifest."""
    from workbench.cli.common import print_json
    from workbench.core.errors import WorkbenchError
    from workbench.surgery.split import split_model

    inputs = _load_inputs(args.inputs) if args.inputs else None
    try:
        res = split_model(hist.current_path(), backend=args.backend, build=args.build,
                          inputs=inputs)
    except WorkbenchError as e:  # named by the user's model, not the workspace version's hash
        raise WorkbenchError(e.message, file=str(args.model), node=e.node, field=e.field,
                             hint=e.hint) from None
    res.manifest["model"] = str(args.model)
    paths = res.save(args.output)
    report["split"] = dict(res.to_dict(), files=paths)
    v = res.verification
    ok = res.supported and v is not None and v.status == "equivalent"
    if args.json:
        print_json(report)
    else:
        tail = res.manifest.get("tail")
        print(f"wrote {args.output}: prefix.onnx ({res.manifest['prefix']['nodes']} nodes, "
              f"{'builds' if args.build else 'parses'} with {args.backend}: {res.supported})"
              + (f", tail.onnx ({len(tail['nodes'])} nodes for onnxruntime, from "
                 f"{tail['nodes'][0]})" if tail else ", no tail (the backend takes it all)")
              + f"; prefix then tail {v or 'not verified'}")
        if tail:
            print(f"  tensors crossing the cut: {', '.join(res.manifest['cut'])}")
        for o in res.manifest.get("options") or []:
            if o.get("backend_has_plugin", True):
                print(f"  option (not exact): `--recipe {o['recipe']}:node={o['node']}` uses "
                      "TensorRT's EfficientNMS_TRT plugin; differences in split.json "
                      "'options'")
            else:
                print(f"  (on TensorRT, `--recipe {o['recipe']}:node={o['node']}` could run "
                      f"{o['node']} in the engine as its EfficientNMS_TRT plugin, not exact; "
                      f"{args.backend} ships no TensorRT plugins, so here it stays in the tail)")
    return 0 if ok else 1
