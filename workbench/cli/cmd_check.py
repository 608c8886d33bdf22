"""`workbench check MODEL`: will TensorRT take this graph? Exit 0 yes, 1 no, 2 bad input."""
from __future__ import annotations

import argparse
import re
import sys
import textwrap
from typing import Any, Dict, List, Optional, Tuple

NAME = "check"
HELP = ("Will TensorRT take this model? Real ONNX parser (and --build) in the worker, or "
        "static rules; lists failing nodes, reasons and next steps")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from workbench.cli.common import add_profile_argument
    from workbench.support.checker import BACKEND_CHOICES

    p.add_argument("model", nargs="?", help="the ONNX file")
    p.add_argument("--backend", choices=BACKEND_CHOICES, default="auto",
                   help="auto: the real parser if the worker can import TensorRT, else static "
                        "rules (default); static: rules only; tensorrt / tensorrt-rtx: that "
                        "parser or fail")
    p.add_argument("--build", action="store_true",
                   help="also try to build an engine (ahead of time on TensorRT-RTX) to catch "
                        "build-time-only rejections")
    p.add_argument("--plugin", "--plugins", dest="plugin", action="append", default=[],
                   metavar="LIB",
                   help="load this plugin library in the worker first (repeatable); nothing "
                        "else is ever loaded")
    p.add_argument("--rules", choices=["tensorrt", "tensorrt-rtx"], default=None,
                   help="static rule table (default: the backend's own; the published "
                        "TensorRT matrix for --backend static)")
    add_profile_argument(p, " for the --build check (repeatable; default: the profile "
                         "`workbench build` defaults to, said in the report); shape-tensor "
                         "inputs take values, e.g. axis:0:0:1")
    p.add_argument("--target", default="sm89",
                   help="compute capability for TensorRT-RTX ahead-of-time builds (sm89)")
    p.add_argument("--timeout", type=float, default=600.0, help="worker time limit, seconds")
    p.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    p.add_argument("--list-rules", action="store_true",
                   help="show the static rule tables and where TensorRT-RTX departs from the "
                        "published matrix, then exit")


def _table(rows: List[List[str]], headers: List[str], widths: List[int]) -> str:
    out = []
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    out.append(line.rstrip())
    out.append("  ".join("-" * w for w in widths))
    for row in rows:
        cells = [textwrap.wrap(c or "-", w) or ["-"] for c, w in zip(row, widths)]
        for i in range(max(len(c) for c in cells)):
            out.append("  ".join((c[i] if i < len(c) else "").ljust(w)
                                 for c, w in zip(cells, widths)).rstrip())
    return "\n".join(out)


def _where(u: Dict[str, Any]) -> str:
    """The node, with the local functions / subgraph it sits in."""
    where = u.get("node") or "(graph)"
    if u.get("local_function_stack"):
        where += " in " + " > ".join(u["local_function_stack"])
    elif u.get("subgraph"):
        where += " in " + u["subgraph"]
    return where


SHOWN = 3  # nodes named in a line of grouped warnings
_QUOTED = re.compile(r"'[^'\s]*'")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def group_findings(findings: List[Dict[str, Any]]) -> List[List[Dict[str, Any]]]:
    """Findings (dicts) grouped where they say the same thing of different nodes: same
    severity, code, and message and hint once the node's name (and the numbers and quoted
    tensor names, which vary with it) are taken out; in first-seen order. A finding naming
    no node, or several, stays alone."""
    groups: Dict[Any, List[Dict[str, Any]]] = {}
    for k, f in enumerate(findings):
        nodes = f.get("nodes") or []
        if len(nodes) != 1:
            groups[("alone", k)] = [f]
            continue

        def bare(text: Any, node: str = nodes[0]) -> str:  # (values and quoted tensor names
            t = str(text or "").replace(node, "<node>")        # vary with the node)
            return _NUMBER.sub("#", _QUOTED.sub("'#'", t))

        key = (f.get("severity"), f.get("code"), bare(f.get("message")), bare(f.get("hint")))
        groups.setdefault(key, []).append(f)
    return list(groups.values())


def _human(d: Dict[str, Any]) -> str:
    b = d["backend"]
    who = (f"static rules ({b.get('rules')})" if b["name"] == "static"
           else f"{b['name']} {b.get('version') or ''} parser" +
           (" + build" if d["mode"] == "parser+build" else ""))
    lines = [f"{d['model']}: checked by {who}"]
    for n in d.get("notes") or []:
        lines.append(f"  note: {n}")
    if d["supported"] and d["mode"] == "static":
        lines.append("SUPPORTED by the static rules: no node matched a rule (the real parser "
                     "is the judge: run with a TensorRT backend to confirm)")
    elif d["supported"]:
        lines.append("SUPPORTED: every node parsed" +
                     (" and the engine built" if d["mode"] == "parser+build" else ""))
    else:
        lines.append(f"NOT SUPPORTED: {len(d['unsupported'])} problem(s)")
        rows = [[_where(u), u.get("op") or "-", u.get("source") or "", u.get("reason") or ""]
                for u in d["unsupported"]]
        lines.append(_table(rows, ["node", "op", "found by", "reason"], [28, 16, 8, 70]))
        lines.append("")
        lines.append("Next steps:")
        from workbench.core.nextstep import lines as step_lines

        for u in d["unsupported"]:
            steps = u.get("next_steps") or []
            lines.append(f"  {u.get('node') or '(graph)'}: "
                         f"{u.get('hint') or ('' if steps else '-')}".rstrip())
            lines += step_lines(steps, "      ", model=d.get("model"))
    warnings = [f for f in d["findings"] if f["severity"] != "error"]
    if warnings:
        from workbench.core.nextstep import lines as step_lines

        lines.append("")
        lines.append("Also worth knowing:")
        for group in group_findings(warnings):
            f, n = group[0], len(group)
            if n == 1:
                where = f" [{', '.join(f['nodes'])}]" if f.get("nodes") else ""
                nxt = f" -> {f['hint']}" if f.get("hint") else ""
                lines.append(f"  {f['severity']}{where}: {f['message']}{nxt}")
                lines += step_lines(f.get("next_steps") or [], "      ", model=d.get("model"))
                continue
            names = [g["nodes"][0] for g in group]
            shown = ", ".join(names[:SHOWN]) + (f" and {n - SHOWN} more" if n > SHOWN else "")
            nxt = (f" -> (for {names[0]}; the others alike, with their own values) {f['hint']}"
                   if f.get("hint") else "")
            lines.append(f"  {f['severity']} x{n} [{shown}]: {f['message']}{nxt}")
        if any(len(g) > 1 for g in group_findings(warnings)):
            lines.append("  (alike warnings grouped; `--json` lists every finding)")
    part = d.get("partition")
    if part and part.get("subgraphs") and not d["supported"]:
        lines.append("")
        lines.append(f"Parser partition ({part.get('api')}): the parts TensorRT can import "
                     "around the failing nodes")
        for i, s in enumerate(part["subgraphs"]):
            nodes = ", ".join(s["nodes"][:8]) + (" ..." if len(s["nodes"]) > 8 else "")
            state = "verified" if s.get("supported") else "importable"
            lines.append(f"  subgraph {i}: {len(s['nodes'])} node(s) {state}: {nodes}")
        if part.get("outside"):
            lines.append("  not importable (outside every subgraph): "
                         + ", ".join(part["outside"][:20]))
        lines.append("  (TensorRT verifies a subgraph only when the whole model parses: fix "
                     "the nodes above, then `workbench check` again)")
    return "\n".join(lines)


def model_paths(args: argparse.Namespace) -> List[Tuple[Optional[str], str]]:
    """The model file main() checks before the options (workbench/cli/__init__.py); none
    for --list-rules, which reads no model."""
    return [] if args.list_rules else [(args.model, "onnx")]


def run(args: argparse.Namespace) -> int:
    from workbench.cli.common import print_json
    from workbench.core.errors import WorkbenchError
    from workbench.support.checker import check

    if args.list_rules:
        return _list_rules(args.json)
    if not args.model:
        raise WorkbenchError("no MODEL given", field="model",
                             hint="usage: workbench check MODEL [--backend ...] [--json]")

    profiles = None
    if args.profile:
        if not args.build:
            raise WorkbenchError("--profile is used by the build check", field="--profile",
                                 hint="add --build")
        from workbench.core.model import open_model
        from workbench.precision.profiles import parse_profiles, validate_profiles

        [prof] = validate_profiles(open_model(args.model), parse_profiles(
            [a.lstrip("+") for a in args.profile]))[:1]
        profiles = prof.to_dict()
    defaulted = None
    if args.build and not profiles:
        # dynamic inputs at the shapes `workbench build` defaults to, not at 1 (a U-Net's skip
        # Concat fails at 1x1: a model build takes was called NOT SUPPORTED)
        from workbench.core.model import open_model
        from workbench.precision.profiles import default_profile

        try:
            profiles = defaulted = default_profile(open_model(args.model))[0].to_dict() or None
        except WorkbenchError:
            pass  # (the build check then builds each dynamic dim at 1, and says so)
    report = check(args.model, backend=args.backend, build=args.build, target=args.target,
                   plugins=args.plugin, rules=args.rules, timeout=args.timeout,
                   profiles=profiles)
    if defaulted and getattr(report, "build", None):  # (not when the parser refused first)
        from workbench.precision.profiles import profile_flag

        names = ", ".join(f"'{k}'" for k in defaulted)
        report.notes.append(f"dynamic input{'s' if len(defaulted) > 1 else ''} {names} built "
                            f"at the profile `workbench build` defaults to "
                            f"({profile_flag(defaulted)}); --profile sets your own")
        from workbench.precision.profiles import Profile, fixed_axis_findings

        report.notes += [str(f) for f in fixed_axis_findings(
            open_model(args.model), Profile.from_dict(defaulted), "the default profile")]
    if report.unsupported:  # next steps that name a recipe (e.g. decompose) come from surgery
        from workbench.surgery.propose import advise

        advise(report)
    d = report.to_dict()
    if args.json:
        from workbench.core.nextstep import json_steps

        print_json(json_steps(d, model=args.model))
    else:
        sys.stdout.write(_human(d) + "\n")
    return 0 if report.supported else 1


def _list_rules(as_json: bool) -> int:
    from workbench.cli.common import print_json
    from workbench.support.rules import BACKENDS, DISAGREEMENTS, backend_table

    tables = {name: backend_table(name) for name in BACKENDS}
    if as_json:
        print_json({"tables": tables, "disagreements": DISAGREEMENTS})
        return 0
    for name, t in tables.items():
        sys.stdout.write(f"{name}: {t['label']}\n  source: {t['source']}\n")
        sys.stdout.write("  unsupported ops: " + ", ".join(sorted(t["unsupported_ops"])) + "\n")
        if t["plugin_ops"]:
            sys.stdout.write("  need a plugin: " + ", ".join(sorted(t["plugin_ops"])) + "\n")
        for rule in t["rules"]:
            ops = rule["op"] if isinstance(rule["op"], list) else [rule["op"]]
            sys.stdout.write(f"  rule {rule['id']} ({'/'.join(ops[:3])}"
                             f"{'...' if len(ops) > 3 else ''}, {rule.get('stage', 'parse')})\n")
    sys.stdout.write("\nWhere TensorRT-RTX 1.7 departs from the published matrix (measured):\n")
    rows = [[d["op"], d["matrix"], d["tensorrt-rtx"]] for d in DISAGREEMENTS]
    sys.stdout.write(_table(rows, ["op", "matrix says", "TensorRT-RTX does"], [22, 36, 50]) + "\n")
    return 0
