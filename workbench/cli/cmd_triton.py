"""`workbench triton ENGINE... -o REPO`: a Triton model repository (config.pbtxt, version
folder with model.plan, README per model) from engines the workbench built (their cards hold
the real I/O and profiles). Exit 0 written, 2 bad input (no card, unknown dtype, ...)."""
from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Tuple

if TYPE_CHECKING:  # pragma: no cover
    import argparse

NAME = "triton"
HELP = "export engines as a Triton model repository (config.pbtxt, version folders, README)"


def add_arguments(p: "argparse.ArgumentParser") -> None:
    p.add_argument("engines", nargs="+", metavar="ENGINE", help="engine files with their cards")
    p.add_argument("-o", "--output", metavar="REPO", required=True,
                   help="model repository folder (made if missing; its parent must exist)")
    p.add_argument("--name", action="append", default=None, metavar="NAME",
                   help="model name, one per engine (default: the engine's file name)")
    p.add_argument("--version", type=int, default=1, help="model version folder (default 1)")
    p.add_argument("--gpus", metavar="0,1", help="GPU ids of the instance group")
    p.add_argument("--instances", type=int, default=1, help="instances per GPU (default 1)")
    p.add_argument("--max-batch", type=int, metavar="N",
                   help="max_batch_size (default: the profiles' largest common batch)")
    p.add_argument("--no-dynamic-batching", action="store_true",
                   help="leave dynamic_batching out of the config")
    p.add_argument("--json", action="store_true", help="print the exported models as JSON")


def model_paths(args: "argparse.Namespace") -> List[Tuple[Optional[str], str]]:
    """The engine files main() checks before the options (workbench/cli/__init__.py)."""
    return [(e, "engine") for e in args.engines or []]


def run(args: "argparse.Namespace") -> int:
    from workbench.engines.triton import export_triton
    from workbench.cli.common import output_path, print_json
    from workbench.core.errors import WorkbenchError

    output_path(args.output, "-o", folder=True)
    gpus = None
    if args.gpus:
        try:
            gpus = [int(g) for g in args.gpus.split(",") if g.strip()]
        except ValueError:
            raise WorkbenchError(f"bad --gpus '{args.gpus}'", field="--gpus",
                                 hint="GPU ids as Triton numbers them, e.g. 0,1") from None
    models = export_triton(args.engines, args.output, names=args.name, version=args.version,
                           gpus=gpus, instances=args.instances, max_batch_size=args.max_batch,
                           dynamic_batching=not args.no_dynamic_batching)
    if args.json:
        print_json({"repository": args.output, "models": [m.to_dict() for m in models]})
        return 0
    for m in models:
        batch = f"max_batch_size {m.max_batch_size}" if m.max_batch_size else "no batch dim"
        print(f"{m.path}: config.pbtxt, {args.version}/model.plan, README.md ({batch})")
        for n in m.notes:
            print(f"  note: {n}")
    print(f"serve: tritonserver --model-repository {args.output}")
    return 0
