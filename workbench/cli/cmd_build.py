"""`workbench build MODEL -o ENGINE`: build (or fetch from the cache) a TensorRT engine.

Exit 0 built, 1 TensorRT refused (the node/layer is named) or the time limit hit, 2 bad input.
"""
from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from workbench.core.errors import WorkbenchError
from workbench.worker.protocol import BUILD_BACKENDS as BACKENDS  # stdlib only: no TensorRT

if TYPE_CHECKING:  # pragma: no cover
    import argparse

NAME = "build"
HELP = "build a TensorRT engine (progress, time limit, cache) and print the equivalent commands"


def start_early(argv: List[str]) -> None:
    """Fork the TensorRT worker before the rest of the CLI is even imported (called with the
    raw arguments after `build`); the worker imports the backend `--backend` names."""
    if "-h" in argv or "--help" in argv or any(a.split("=")[0] == "--gpu" for a in argv):
        return  # (a pinned worker starts in run(), with its own environment)
    backend = "auto"
    for i, a in enumerate(argv):
        if a == "--backend" and i + 1 < len(argv):
            backend = argv[i + 1]
        elif a.startswith("--backend="):
            backend = a.split("=", 1)[1]
    if backend not in BACKENDS:
        return  # argparse refuses it in a moment
    # messages between the two processes are passed on by reader threads: hand them the GIL
    # within 0.5 ms rather than Python's default 5 ms (the forked worker inherits it too)
    sys.setswitchinterval(0.0005)
    from workbench.worker.client import default_client

    default_client().warm_up(backend=backend, fork=True)


def add_arguments(p: "argparse.ArgumentParser") -> None:
    p.add_argument("model", metavar="MODEL", help="ONNX model")
    p.add_argument("-o", "--output", metavar="ENGINE", required=True, help="engine file to write")
    from workbench.precision import table  # (after the fork: plain module, no dataclasses)

    from workbench.engines import options
    from workbench.cli.common import add_gpu_argument, add_mkdir_argument, add_profile_argument
    from workbench.precision.options import (BUILD_PRECISION_FIELDS, PRECISION_OPTIONS,
                                             add_arguments)

    p.add_argument("--precision", default=table.BASE, choices=list(table.names()))
    add_arguments(p, PRECISION_OPTIONS, BUILD_PRECISION_FIELDS)
    add_profile_argument(p, ", e.g. input:1x3x32x32:8x3x32x32:32x3x32x32 (repeat per "
                         "input, or join inputs with commas: a:...,b:... is the same profile; "
                         "a leading '+' starts another profile)")
    p.add_argument("--strict-profiles", action="store_true",
                   help="a dynamic input without --profile is an error (CI); by default it "
                        "gets a default profile, printed with the flag that sets it")
    p.add_argument("--no-split", action="store_true",
                   help="a parser refusal is an error even when the refused nodes are a tail "
                        "the split recipe cuts (CI); by default the prefix becomes the engine "
                        "and the tail + a chain manifest are written beside it, with a notice")
    p.add_argument("--backend", default="auto", choices=list(BACKENDS))
    p.add_argument("--route", default="auto", choices=["auto", "strongly-typed",
                                                       "legacy-flags"])
    p.add_argument("--timeout", type=float, metavar="S", help="time limit in seconds")
    options.add_arguments(p)
    p.add_argument("--config", metavar="JSON", help="a BuildConfig JSON file (flags override)")
    p.add_argument("--no-cache", action="store_true", help="rebuild even when cached")
    p.add_argument("--export-script", metavar="PATH",
                   help="also write the standalone build-and-run Python script here")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    add_gpu_argument(p)
    add_mkdir_argument(p)


def model_paths(args: "argparse.Namespace") -> List[Tuple[Optional[str], str]]:
    """The model file main() checks before the options (workbench/cli/__init__.py)."""
    return [(args.model, "onnx")]


def parse_profiles(items: List[str]) -> List[Dict[str, List[List[int]]]]:
    """--profile args -> profiles (workbench.precision.profiles syntax: an argument starting with '+'
    starts the next profile)."""
    from workbench.precision.profiles import parse_profiles as _parse

    return [p.to_dict() for p in _parse(items)]


def _config(args: "argparse.Namespace") -> Any:
    """--config file, then the flags: the precision ones through one PrecisionSpec; with a
    file, flags left at their defaults do not override it."""
    from workbench.engines.spec import SPEC_FIELDS, BuildConfig
    from workbench.precision.spec import PrecisionSpec

    base: Dict[str, Any] = {}
    if args.config:
        from pathlib import Path

        p = Path(args.config)
        if not p.is_file():
            raise WorkbenchError("config file not found", file=str(p))
        base = BuildConfig.from_json(p.read_text()).to_dict()
    flat = {v: k for k, v in SPEC_FIELDS.items()}
    spec, default = PrecisionSpec.from_args(args, target_attr="precision"), PrecisionSpec()
    over: Dict[str, Any] = {flat[k]: v for k, v in spec.to_dict().items()
                            if not args.config or v != getattr(default, k)}
    for name, value in (("backend", args.backend), ("route", args.route)):
        if not args.config or value != "auto":
            over[name] = value
    if args.profile:
        over["profiles"] = parse_profiles(args.profile)
    from workbench.engines.options import overrides

    over.update(overrides(args))
    base.update(over)
    return BuildConfig.from_dict(base)


def fit_line(head: str, message: str, width: Optional[int]) -> str:
    """`head: message` in at most `width` characters (None: no limit). TensorRT's nested build
    phases ('Building engine / ... / Computing profile costs') lose their outer phases first,
    so the line still ends with what is happening now."""
    text = f"{head}: {message}" if message else head
    if width is None or len(text) <= width:
        return text
    parts = message.split(" / ")
    while len(parts) > 1:
        parts = parts[1:]
        text = f"{head}: ... / " + " / ".join(parts)
        if len(text) <= width:
            return text
    return text[:max(width - 3, 0)] + "..."


def _no_gpu_noise(text: str) -> bool:
    """A plugin's CUDA set-up failing for want of a usable GPU (`workbench.core.trtlog.NO_GPU_NOISE`)."""
    from workbench.core.trtlog import NO_GPU_NOISE

    return NO_GPU_NOISE.search(text) is not None


class _StderrProgress:
    """One updating line on stderr (main thread only: events arrive on the calling thread);
    on a terminal it fits the terminal's width, in a log file every line is whole."""

    def __init__(self) -> None:
        self.last = ""
        self.noticed: set = set()  # the findings already told as a notice (told once)
        self.tty = sys.stderr.isatty()
        self.last_key: Any = None
        if self.tty:
            import shutil

            self.width: Optional[int] = max(shutil.get_terminal_size((100, 24)).columns - 1, 20)
        else:
            self.width = None

    def __call__(self, ev: Dict[str, Any]) -> None:
        if ev.get("event") == "notice":  # e.g. the default profile chosen: before the build
            self._line(f"note: {ev.get('message', '')}", newline=True)
            f = ev.get("finding") or {}
            self.noticed.add((f.get("code"), f.get("message")))
            return
        if ev.get("event") == "log":
            if ev.get("level") == "error":  # one line per message (TensorRT's span lines)
                text = " ".join(str(ev.get("message", "")).split())[:300]
                if not _no_gpu_noise(text):  # (said by the finding; kept in the build log)
                    self._line(f"[TRT {ev.get('level')}] {text}", newline=True)
            return
        if ev.get("event") != "progress":
            return
        frac = ev.get("fraction")
        pct = f"{100 * frac:5.1f}%" if isinstance(frac, (int, float)) else "  ... "
        text = fit_line(f"{pct} {ev.get('phase', '')}", str(ev.get("message") or ""),
                        self.width)
        if self.tty:
            if text != self.last:
                self.last = text
                self._line(text, newline=False)
            return
        # a log file: one line per phase and per 10% of progress
        key = (ev.get("phase"), int(frac * 10) if isinstance(frac, (int, float)) else None)
        if key != self.last_key:
            self.last_key = key
            self._line(text, newline=True)

    def _line(self, text: str, newline: bool) -> None:
        if self.tty and not newline:
            sys.stderr.write("\r\x1b[K" + text)
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.tty and self.last:
            sys.stderr.write("\n")


def run(args: "argparse.Namespace") -> int:
    client = None
    if args.gpu:
        from workbench.fleet.gpus import pinned_client

        client = pinned_client(args.gpu)
    else:
        start_early(["--backend", args.backend])  # a no-op when main() did it already
    from workbench.cli.common import output_path

    output_path(args.output, "-o", mkdir=args.mkdir)  # before any work: exit 2 at once
    output_path(args.export_script, "--export-script", mkdir=args.mkdir)
    from workbench.core import onnx_light

    onnx_light.enable()  # an FP32 build reads the graph with protobuf only (no numpy, no onnx)
    from workbench.engines.engine import BuildFailed, build_engine

    config = _config(args)
    progress = None if args.json else _StderrProgress()
    import threading

    cancel = threading.Event()
    try:
        res = build_engine(args.model, config, on_event=progress, timeout=args.timeout,
                           cancel=cancel, output=args.output, use_cache=not args.no_cache,
                           client=client, strict_profiles=args.strict_profiles,
                           split_tail=not args.no_split)
    except BuildFailed as e:
        if progress:
            progress.close()
        out = {"ok": False, "error": e.message, "code": e.code, "node": e.node, "op": e.op,
               "hint": e.hint, "next_steps": [s.to_dict() for s in e.next_steps],
               "findings": [f.to_dict() for f in e.findings]}
        if args.json:
            from workbench.cli.common import print_json
            from workbench.core.nextstep import json_steps

            print_json(json_steps(out, model=args.model))
        else:
            from workbench.core.nextstep import error_text, finding_text

            where = f" at node '{e.node}'" if e.node else ""
            line = f"workbench build: build failed{where}: {e.message}" + \
                (f" ({e.hint})" if e.hint else "")
            sys.stderr.write(" ".join(line.split()) + "\n")  # (TensorRT's words span lines)
            said: set = set()
            if e.next_steps:
                sys.stderr.write(error_text(e, said, model=args.model) + "\n")
            for f in e.findings[:10]:
                sys.stderr.write(finding_text(f, seen=said, model=args.model) + "\n")
        return 1
    finally:
        if progress:
            progress.close()
    if args.export_script:
        from workbench.core.fsutil import atomic_write_text

        atomic_write_text(args.export_script, res.export.get("script", ""))
    d = res.to_dict()
    d["ok"] = True
    if args.json:
        from workbench.cli.common import print_json
        from workbench.core.nextstep import json_steps

        print_json(json_steps(d, model=args.model, data=getattr(args, "calib", None)))
        return 0
    hit = " (cache hit)" if res.cache_hit else ""
    print(f"engine: {d['engine_path']} ({res.size_bytes / 1e6:.2f} MB){hit}")
    if res.split:
        print(f"split build: engine {res.split['engine_nodes']} nodes + onnxruntime tail "
              f"{res.split['onnxruntime_nodes']} nodes: {res.split['tail']}, "
              f"{res.split['manifest']}")
    took = (f"build: {res.build_seconds:.2f} s when first built, this run {res.seconds:.2f} s "
            "(from the cache)" if res.cache_hit else
            f"build: {res.build_seconds:.2f} s  total: {res.seconds:.2f} s")
    print(f"backend: {res.backend} {res.backend_version}  route: {res.route}  {took}  "
          f"config: {res.config_hash}")
    dt = ", ".join(f"{k} {v}" for k, v in sorted(d["dtypes"].items()))
    print(f"network tensor dtypes: {dt}")
    mem = d.get("memory") or {}
    if mem:
        print("memory: " + ", ".join(f"{k.replace('_bytes', '')} {v / 2**20:.1f} MiB"
                                     for k, v in mem.items()))
    from workbench.core.nextstep import pasteable
    from workbench.core.nextstep import finding_text

    told = progress.noticed if progress is not None else set()
    seen: set = set()
    for f in res.findings:
        # a split's notice and the default profile's went to stderr before the engine line
        if f.code != "split-build" and (f.code, f.message) not in told:
            converted = None if getattr(res, "split", None) else res.export.get("onnx") or None
            print(pasteable(finding_text(f, seen=seen, model=args.model,
                                         data=getattr(args, "calib", None)),
                            args.model, getattr(args, 'calib', None), converted))
    print("trtexec:    " + res.export.get("trtexec", ""))
    print("polygraphy: " + res.export.get("polygraphy", ""))
    for note in res.export.get("notes") or []:
        print(f"  note: {note}")
    return 0
