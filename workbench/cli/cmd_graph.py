"""`workbench graph MODEL [--all | --expand SCOPE ...] [-o layout.json] [--json]`: the graph
view's layered layout as data, plus the structural problems it found (cycles, dangling inputs,
duplicate names). Exit status 1 when there are error findings (useful in CI)."""
from __future__ import annotations

import argparse
from typing import List, Optional, Tuple

NAME = "graph"
HELP = "lay out the graph (scopes collapsed) and report cycles, dangling inputs, duplicate names"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL", help="path to an .onnx file")
    parser.add_argument("--all", action="store_true", help="show every node (no collapsing)")
    parser.add_argument("--expand", action="append", default=None, metavar="SCOPE",
                        help="open this name scope (repeatable), e.g. /encoder/layer.0")
    parser.add_argument("--max-visible", type=int, default=None, metavar="N",
                        help="default view: open scopes while about N elements show (default: a tenth "
                        "of the nodes, 60 to 1500)")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="write the layout (ids, x, y, ops, edges, groups, findings) as JSON")
    parser.add_argument("--json", action="store_true", help="print the layout JSON on stdout")
    from workbench.cli.common import add_mkdir_argument

    add_mkdir_argument(parser)


def model_paths(args: "argparse.Namespace") -> List[Tuple[Optional[str], str]]:
    """The model file main() checks before the options (workbench/cli/__init__.py)."""
    return [(args.model, "onnx")]


def run(args: argparse.Namespace) -> int:
    import json

    from workbench.cli.common import print_json
    from workbench.core.errors import WorkbenchError
    from workbench.core.fsutil import atomic_write_text
    from workbench.graphs.layout import GROUP, GraphStructure

    from workbench.cli.common import output_path

    output_path(args.output, "-o", mkdir=args.mkdir)
    gs = GraphStructure(args.model)
    if args.expand:
        unknown = [s for s in args.expand if s not in gs.scope_index]
        if unknown:
            raise WorkbenchError(f"no scope '{unknown[0]}' in this graph", file=args.model,
                                 field="--expand", hint="scopes are listed by `workbench graph "
                                 "MODEL` (collapsed groups) or `workbench inspect MODEL --tree`")
    if args.all:
        data = gs.view(gs.scopes)
    elif args.expand:
        data = gs.view(set(args.expand) | gs.default_expanded(args.max_visible))
    else:
        data = gs.view(None, max_visible=args.max_visible)
    d = data.to_dict()
    if args.output:
        atomic_write_text(args.output, json.dumps(d, separators=(",", ":")))
    if args.json:
        from workbench.core.nextstep import json_steps

        print_json(json_steps(d, model=getattr(args, "model", None)))
    else:
        groups = [(data.ids[i], int(data.size[i])) for i in range(len(data)) if data.kind[i] == GROUP]
        print(f"{data.total_nodes} nodes, {len(data)} shown ({len(groups)} collapsed scopes), "
              f"{data.edges.shape[0]} edges, {int(data.rank.max()) + 1 if len(data) else 0} ranks")
        for gid, n in groups[:40]:
            print(f"  {gid[len('scope:'):]:<60} {n} nodes")
        if len(groups) > 40:
            print(f"  ... {len(groups) - 40} more")
        from workbench.core.nextstep import finding_text

        for f in data.findings:
            print(finding_text(f, "", model=getattr(args, "model", None)))
        if args.output:
            print(f"layout written to {args.output}")
    return 1 if any(f.severity == "error" for f in data.findings) else 0
