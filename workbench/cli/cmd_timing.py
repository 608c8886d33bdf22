"""`workbench timing`: where the time goes in an engine, mapped to ONNX nodes; FP32 vs FP16."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from workbench.core.errors import WorkbenchError

NAME = "timing"
HELP = ("summarise engine layer timings (trtexec/IProfiler/inspector JSON), map them to ONNX "
        "nodes, compare two engines, write an offline HTML report")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from workbench.cli.common import add_html_argument, add_onnx_argument

    p.add_argument("layers", metavar="LAYERS.json",
                   help="engine layer information (trtexec --exportLayerInfo / IEngineInspector); "
                        "a per-layer profile alone also works (names only): trtexec "
                        "--exportProfile, an IProfiler list, or timing-capture's profile.json")
    p.add_argument("--profile", metavar="PROFILE.json",
                   help="per-layer times (trtexec --exportProfile, IProfiler capture)")
    p.add_argument("--times", metavar="TIMES.json",
                   help="end-to-end latencies (trtexec --exportTimes) for P50/P90/P99")
    add_onnx_argument(p)
    p.add_argument("--vs", metavar="OTHER_LAYERS.json",
                   help="a baseline engine to compare with (e.g. the FP32 build)")
    p.add_argument("--vs-profile", metavar="P", help="per-layer times of the --vs engine")
    p.add_argument("--stat", choices=("median", "mean"), default="median",
                   help="per-layer statistic (default median; mean when the profile has none)")
    p.add_argument("--top", type=int, default=10, help="how many top layers to list")
    p.add_argument("--profile-id", type=int, default=None,
                   help="optimization profile whose layers to use (engines with several)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_html_argument(p)
    p.add_argument("--analyze-data", metavar="OUT.json",
                   help="write the analysis as NVIDIA trt-perf-analysis analyze-data.json "
                        "(schema 1.0: scored issues, evidence, next check), which their HTML "
                        "report opens; LAYERS.json may itself be such a file")
    from workbench.cli.common import add_mkdir_argument

    add_mkdir_argument(p)


def model_paths(args: argparse.Namespace) -> List[Tuple[Optional[str], str]]:
    """The model file main() checks before the options (workbench/cli/__init__.py)."""
    return [(args.onnx, "onnx")]


def _table(layers: str, profile: Optional[str], onnx: Any, stat: str, profile_id: Optional[int],
           times: Optional[str] = None) -> Any:
    from workbench.timing import LayerTable, load_profile

    prof = load_profile(profile) if profile else None
    if prof is None and _looks_like_profile(layers):  # `workbench timing PROFILE.json`
        prof, layers = load_profile(layers), None
    if times:
        tr = load_profile(times)
        if tr.latency_ms is None:
            raise WorkbenchError("no end-to-end latencies in this file", file=times,
                                 field="latencyMs", hint="pass trtexec --exportTimes output")
        if prof is None:
            prof = tr
        else:
            prof.latency_ms = tr.latency_ms
    return LayerTable.build(layers, prof, onnx=onnx, stat=stat, profile_id=profile_id)


def _not_an_input(out: Optional[str], inputs: List[Optional[str]]) -> None:
    """An output that names one of the inputs would overwrite the user's file: refuse."""
    if not out:
        return
    target = Path(out).resolve()
    for src in inputs:
        if src and Path(src).resolve() == target:
            raise WorkbenchError("--analyze-data names an input file; it would be overwritten",
                                 file=out, field="--analyze-data",
                                 hint="write the analysis to a new file")


def _looks_like_profile(path: str) -> bool:
    """A per-layer profile passed where layer information was expected (trtexec users often
    have only --exportProfile; timing-capture writes profile.json beside layers.json): peek at
    the first bytes."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096).decode("utf-8", "replace")
    except OSError:
        return False
    start = head.lstrip()[:1]
    if start == "{":  # the workbench's own capture: {"format": "workbench-profile", ...}
        import re

        return re.search(r'"format"\s*:\s*"workbench-profile"', head) is not None
    return start == "[" and ('"averageMs"' in head or '"count"' in head) and '"LayerType"' not in head


def run(args: argparse.Namespace) -> int:
    from workbench.cli.common import print_json
    from workbench.timing import compare, summarize

    if args.vs_profile and not args.vs:
        raise WorkbenchError("--vs-profile needs --vs", field="--vs-profile",
                             hint="pass the other engine's layer information with --vs")
    if args.top < 1:
        raise WorkbenchError("--top must be >= 1", field="--top")
    from workbench.cli.common import output_path

    output_path(args.html, "--html", mkdir=args.mkdir)
    output_path(args.analyze_data, "--analyze-data", mkdir=args.mkdir)
    _not_an_input(args.analyze_data, [args.layers, args.profile, args.times, args.vs,
                                      args.vs_profile])
    onnx = None
    if args.onnx:
        from workbench.core.model import open_model

        onnx = open_model(args.onnx)
    t = _table(args.layers, args.profile, onnx, args.stat, args.profile_id, args.times)
    out: Dict[str, Any] = summarize(t, top=args.top)
    vs = None
    if args.vs:
        vs = _table(args.vs, args.vs_profile, onnx, args.stat, args.profile_id)
        a, b = _name(args.vs), _name(args.layers)
        if a == b:
            a, b = "baseline", "engine"
        out["comparison"] = compare(vs, t, (a, b))
    if args.html:
        from workbench.render.timing_report import write_report

        names = (_name(args.layers), _name(args.vs) if args.vs else "baseline")
        if names[0] == names[1]:
            names = ("engine", "baseline")
        out["html"] = str(write_report(args.html, t, vs=vs, names=names))
    if args.analyze_data:
        from workbench.timing.analysis import write_analyze_data

        model = Path(args.onnx).stem if args.onnx else None
        a, b = _name(args.layers), (_name(args.vs) if vs is not None else "")
        if a == b:
            a, b = "engine", "baseline"
        out["analyze_data"] = str(write_analyze_data(
            args.analyze_data, t, label=a, model_name=model,
            others=[(b, vs)] if vs is not None else []))
    if args.json:
        print_json(out)
    else:
        _print_text(out)
    return 0


def _name(path: str) -> str:
    n = Path(path).name
    for suf in (".layers.json", ".engine.graph.json", ".graph.json", ".json"):
        if n.endswith(suf):
            return n[: -len(suf)]
    return n


def _print_text(s: Dict[str, Any]) -> None:
    w = print
    total = "n/a (no profile)" if s["total_ms"] is None else f"{s['total_ms']:.4f} ms ({s['statistic']})"
    w(f"{s['source']}: {s['layers']} layers, total {total}")
    if s.get("latency"):
        la = s["latency"]
        w(f"  latency P50 {la['p50_ms']:.4f}  P90 {la['p90_ms']:.4f}  P99 {la['p99_ms']:.4f} ms "
          f"({la['n']} runs)")
    cov = s["onnx_mapping"]
    if cov["mapped_pct"] is not None:
        w(f"  mapped to ONNX nodes: {cov['mapped_pct']:.1f}% of time "
          f"({cov['attributed_pct']:.1f}% with reformats attributed)")
    if s["total_ms"]:
        w("  by type:      " + ", ".join(f"{r['type']} {r['time_ms']:.3f}" for r in s["by_type"][:6]))
        w("  by precision: " + ", ".join(f"{r['precision']} {r['time_ms']:.3f}"
                                         for r in s["by_precision"]))
        ro = s["reformat"]
        w(f"  reformat/copy: {ro['layers']} layers, {ro['time_ms']:.4f} ms")
        w("  top layers:")
        for r in s["top_layers"]:
            w(f"    {r['time_ms']:.4f} ms  {r['type']:<20} {r['name'][:90]}")
    c = s.get("comparison")
    if c:
        na, nb = c["names"]
        from workbench.timing.summary import speed_words

        sp = c["speedup"]
        w(f"  {nb} vs {na}: {c[f'{nb}_total_ms']:.4f} vs {c[f'{na}_total_ms']:.4f} ms"
          + (f" ({nb} is {speed_words(sp)})" if sp else ""))
        for r in c["by_type"]:
            if r["speedup"]:
                w(f"    {r['type']:<22} {speed_words(r['speedup'])}")
    theirs = [f for f in s.get("warnings", []) if f.get("source") == "trt-perf-analysis"]
    for f in s["findings"] + theirs:  # (an analyze-data.json brings its own scored issues)
        w(f"  {f['severity'].upper()} {f['code']}: {f['message']}")
    if s.get("html"):
        w(f"  report: {s['html']}")
    if s.get("analyze_data"):
        w(f"  analyze-data (trt-perf-analysis schema 1.0): {s['analyze_data']}")
