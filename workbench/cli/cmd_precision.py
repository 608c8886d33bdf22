"""`workbench precision MODEL --to fp16|bf16|int8|fp8 -o OUT.onnx`: precision as an ONNX transform.

The targets and calibration methods are the precision table's (`workbench.precision.table`);
the arguments become one `PrecisionSpec`."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional, Tuple

from workbench.core.errors import WorkbenchError
from workbench.precision import table

NAME = "precision"
HELP = ("convert an FP32 ONNX model to FP16/BF16 (Casts) or INT8/FP8 (Q/DQ, calibrated), "
        "keeping named nodes / op types in FP32")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from workbench.cli.common import add_fp32_model_argument

    add_fp32_model_argument(p)
    p.add_argument("--to", required=True, dest="target",
                   choices=list(table.names()), help="target precision")
    from workbench.precision.options import PRECISION_OPTIONS, add_arguments

    add_arguments(p, PRECISION_OPTIONS)
    p.add_argument("--auto-exclude", action="store_true",
                   help="FP16/BF16: also keep the nodes that overflow on the calibration data in FP32")
    p.add_argument("--route", default="onnx", choices=["onnx", "modelopt"],
                   help="onnx (default) or nvidia-modelopt when installed")
    p.add_argument("-o", "--output", required=True, metavar="OUT.onnx", help="output ONNX path")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    from workbench.cli.common import add_mkdir_argument

    add_mkdir_argument(p)


def needs_weights(args: argparse.Namespace) -> Optional[str]:
    """What the model's weights are needed for (main() refuses weightless or sparse models
    before any work): a conversion rewrites them."""
    return "a precision conversion"


def model_paths(args: argparse.Namespace) -> List[Tuple[Optional[str], str]]:
    """The model file main() checks before the options (workbench/cli/__init__.py)."""
    return [(args.model, "onnx")]


def run(args: argparse.Namespace) -> int:
    from workbench.core.nextstep import pasteable
    from workbench.cli.common import print_json
    from workbench.precision.spec import PrecisionSpec
    from workbench.precision.transform import auto_exclusions, convert

    src, out = Path(args.model), Path(args.output)
    if out.exists() and src.exists() and out.resolve() == src.resolve():
        raise WorkbenchError("refusing to overwrite the original model", file=str(out),
                             hint="choose another output path (-o)")
    from workbench.cli.common import output_path

    output_path(args.output, "-o", mkdir=args.mkdir)
    spec = PrecisionSpec.from_args(args)
    if args.auto_exclude:
        floats = [n for n in table.names() if table.get(n).kind == "float"]
        if spec.target not in floats:
            raise WorkbenchError(f"--auto-exclude applies to {'/'.join(floats)}",
                                 field="--auto-exclude")
        if not args.calib and not args.allow_random:
            raise WorkbenchError("--auto-exclude needs --calib PATH", field="--auto-exclude")
        extra, _ = auto_exclusions(src, args.calib, target=spec.target,
                                   allow_random=args.allow_random)
        spec.exclude_nodes += [n for n in extra if n not in spec.exclude_nodes]
    res = convert(src, spec.target, route=args.route, output=out, **spec.convert_kwargs())
    path = res.save(out, source=src)
    doc = {"output": str(path), **res.to_dict()}
    if args.json:
        from workbench.core.nextstep import json_steps

        print_json(json_steps(doc, model=args.model, data=args.calib, candidate=str(path)))
    else:
        from workbench.runtime.comparison import class_scores

        w = sys.stdout.write
        w(f"wrote {path} ({res.target}): {doc['casts_inserted']} Cast(s) inserted, "
          f"{doc['qdq_pairs']} Q/DQ pair(s)\n")
        for key, label in (("error", "onnxruntime CPU"),
                           ("error_reference", "low-precision storage, as on a GPU")):
            for name, s in (doc.get(key) or {}).items():
                if s.get("shape_change"):
                    w(f"  {name} vs FP32 ({label}): shape {s['shape_change']} (a data-dependent "
                      "selection kept another number of elements)\n")
                    continue
                top1 = (f", top-1 agreement {s['top1_agreement']:.3f}"  # (along the class axis)
                        if s.get("top1_agreement") is not None and
                        class_scores(s.get("shape") or (), name) else "")
                v = s.get("verdict") or {}
                said = (f"; {'within' if v['passed'] else 'BEYOND'} budget ({v['words']})"
                        if v else "")  # (the verdict compare gives)
                w(f"  {name} vs FP32 ({label}): max abs {s['max_abs_err']:.3g}, rel "
                  f"{s['rel_err']:.3g}, cosine {s['cosine']:.6f}{top1}{said}\n")
        from workbench.core.nextstep import finding_text

        seen: set = set()
        for f in res.findings:
            text = finding_text(f, "  ", seen, model=args.model, data=args.calib,
                                candidate=str(path))
            w(pasteable(text, args.model, args.calib, str(path)) + "\n")
    return 1 if any(f.severity == "error" for f in res.findings) else 0
