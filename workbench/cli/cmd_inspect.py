"""`workbench inspect MODEL [--json] [--node NAME] [--tree [DEPTH]]`: what is in an ONNX model
(no weight bytes are read)."""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, List, Optional, Tuple

if TYPE_CHECKING:  # pragma: no cover
    from workbench.core.model import ModelLike

NAME = "inspect"
HELP = "summarise an ONNX model: opsets, ops, inputs/outputs with dynamic dims, shapes, nodes"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL", help="path to an .onnx file")
    parser.add_argument("--json", action="store_true",
                        help="print the full report as JSON on stdout (model, ops, inputs, "
                        "outputs, parameters, nodes, tensors, scopes, warnings)")
    parser.add_argument("--node", metavar="NAME",
                        help="show one node (name or id): op, attributes, tensors with shapes")
    parser.add_argument("--tree", nargs="?", type=int, const=3, default=None, metavar="DEPTH",
                        help="show the name-scope tree (default depth 3)")
    parser.add_argument("--top", type=int, default=15, metavar="N",
                        help="ops to list in the human summary (default 15)")


def model_paths(args: "argparse.Namespace") -> List[Tuple[Optional[str], str]]:
    """The model file main() checks before the options (workbench/cli/__init__.py)."""
    return [(args.model, "onnx")]


def run(args: argparse.Namespace) -> int:
    from workbench.core import onnx_light

    onnx_light.enable()  # protobuf + C++ shape inference only: no numpy import (startup time)
    from workbench.cli.common import print_json
    from workbench.graphs.inspect import (format_summary, infer_shapes, inspect_model, node_detail,
                                   scope_tree, summarize)
    from workbench.core.model import open_model

    model = open_model(args.model)
    if args.node is not None:
        shapes, _ = infer_shapes(model)
        d = node_detail(model, args.node, shapes)
        if args.json:
            print_json(d.to_dict())
        else:
            print(f"{d.name or d.id}  op {d.op} ({d.domain})  id {d.id}"
                  + (f"  scope {d.scope}" if d.scope else ""))
            for kind, names, infos in (("in ", d.inputs, d.input_info),
                                       ("out", d.outputs, d.output_info)):
                for n, t in zip(names, infos):
                    print(f"  {kind} {n or '(none)':<48} {t.dtype if t else '?':<9} "
                          f"{t.shape_str() if t else '?'}")
            for k, v in d.attributes.items():
                print(f"  attr {k} = {v}")
        return 0
    if args.tree is not None:
        tree = scope_tree(model)
        if args.json:
            print_json(tree.to_dict())
        else:
            _print_tree(tree, args.tree)
        return 0
    if args.json:
        from workbench.core.nextstep import record

        doc = inspect_model(model)
        doc["next_steps"] = [record(s, model=args.model) for s in next_steps(model)]
        from workbench.core.nextstep import json_steps

        print_json(json_steps(doc, model=args.model))
    else:
        summary = summarize(model)
        summary_warnings = summary.warnings
        print(format_summary(summary, top_ops=args.top))
        for line in _next_steps(model, args.model, summary_warnings):
            print(line)
    return 0


def next_steps(model: "ModelLike") -> List[Any]:
    """What to run next, as records: the parser check, and for dynamic inputs the profile a
    build would default to (the flag that sets it), or a decoder's serving profiles."""
    from workbench.core.findings import step

    out = [step("check", "{model}", why="which nodes TensorRT refuses, and why")]
    try:
        from workbench.precision.profiles import default_profile, serving_profiles

        prof, _ = default_profile(model)
        decoder = bool(len(prof)) and serving_profiles(model, prof) is not None
    except Exception:  # a shape-tensor input, or a model the guess cannot read: no line
        return out
    if len(prof):
        out.append(step("profiles", "{model}", profile=",".join(prof.arg_strings()),
                        why="the profile a build takes by default: check it, or propose "
                        "one from your data with --calib"))
    if decoder:
        out.append(step("profiles", "{model}", why="a decoder with a KV cache: runs the "
                        "default and proposes prefill and decode profiles"))
    return out


def _next_steps(model: Any, path: str, warnings: Any = ()) -> List[str]:
    """The `next` lines of the summary: each step as the command it runs (the warnings' own
    steps first, each command once)."""
    from workbench.core.nextstep import command

    out, seen = [], set()
    steps = [s for w in warnings for s in getattr(w, "next_steps", [])] + next_steps(model)
    for s in steps:
        if command(s, model=path) in seen:
            continue
        seen.add(command(s, model=path))
        i = len(out)
        out.append(f"{'next' if i == 0 else '':<10} $ {command(s, model=path)}  # {s.why}")
    return out


def _print_tree(scope, max_depth: int, depth: int = 0) -> None:
    top = ", ".join(f"{op} {n}" for op, n in sorted(scope.ops.items(), key=lambda kv: -kv[1])[:4])
    print(f"{'  ' * depth}{scope.path:<48} {scope.node_count:>5} nodes  ({top})")
    if depth < max_depth:
        for child in scope.children:
            _print_tree(child, max_depth, depth + 1)
