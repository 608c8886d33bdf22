"""`workbench inspect MODEL [--json]`: what is in an ONNX model (no weight bytes are read)."""
from __future__ import annotations

import argparse

NAME = "inspect"
HELP = "summarise an ONNX model: opsets, ops, inputs/outputs with dynamic dims, shapes, nodes"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL", help="path to an .onnx file")
    parser.add_argument("--json", action="store_true",
                        help="print the full report as JSON on stdout (model, ops, inputs, "
                        "outputs, parameters, nodes, tensors, scopes, warnings)")
    parser.add_argument("--top", type=int, default=15, metavar="N",
                        help="ops to list in the human summary (default 15)")


def run(args: argparse.Namespace) -> int:
    from workbench import onnx_light

    onnx_light.enable()  # protobuf + C++ shape inference only: no numpy import (startup time)
    from workbench.inspect import format_summary, inspect_model, summarize
    from workbench.model import open_model

    model = open_model(args.model)
    if args.json:
        from workbench.cli.common import print_json

        print_json(inspect_model(model))
    else:
        print(format_summary(summarize(model), top_ops=args.top))
    return 0
