"""Never exit 3: `check`, `fix --auto`, `precision --to fp16` and `build` (TensorRT-RTX, ahead
of time for sm89, time-limited) over every model in onnx's backend test data.

Every outcome must be exit 0, 1 or 2 with no traceback on stderr (exit 2: one line). The verbs
run in this process through the CLI's entry point (`workbench.cli.main`; the TensorRT worker is
started once and reused), and a sample through the real console script. Prints one row per
model and verb (model, verb, rc, seconds, message), the contract breaks, and as the last line
one JSON object with the counts. Exit 1 when any outcome breaks the contract.

    python benchmarks/backend_sweep.py            # everything: the light nets' builds, and the
                                                  # ~1900 `node` models generated (~15 min)
    python benchmarks/backend_sweep.py --ci       # the CI selection (tests/test_backend_sweep.py):
                                                  # builds only of models up to 250 nodes
    python benchmarks/backend_sweep.py --only simple --verbs fix,check
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

import backend_sweep_cases as bs  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ci", action="store_true",
                    help="the CI selection (builds only of models up to --build-max-nodes)")
    ap.add_argument("--build-max-nodes", type=int, default=bs.BUILD_MAX_NODES_CI)
    ap.add_argument("--build-timeout", type=float, default=bs.BUILD_TIMEOUT_S,
                    help="per-model build time limit, seconds")
    ap.add_argument("--only", default="", help="comma-separated folders (default: all)")
    ap.add_argument("--verbs", default=",".join(bs.VERBS))
    ap.add_argument("--no-console", action="store_true",
                    help="skip the console-script sample")
    ap.add_argument("--no-node", action="store_true",
                    help="skip onnx's `node` models (the wheel does not ship them; without "
                    "this flag and without --ci they are generated, ~1900 models)")
    ap.add_argument("--node-cache", metavar="DIR",
                    help="keep the generated node models here (default: a temporary folder)")
    args = ap.parse_args()
    folders = tuple(f for f in bs.FOLDERS if not args.only or f in args.only.split(","))
    verbs = [v for v in bs.VERBS if v in args.verbs.split(",")]
    work = Path(tempfile.mkdtemp(prefix="wb-sweep-"))
    ms = bs.models(folders)
    if "node" in folders and not args.ci and not args.no_node and \
            not any(m.folder == "node" for m in ms):
        t = time.monotonic()
        node = bs.generate_node_models(Path(args.node_cache) if args.node_cache else work)
        print(f"generated {len(node)} node models with onnx.backend.test.case.node in "
              f"{time.monotonic() - t:.0f} s")
        ms = node + ms
    plan = bs.ci_selection(ms, args.build_max_nodes if args.ci else None)
    os.environ["WORKBENCH_HOME"] = str(work / "home")  # workspaces stay out of the user's
    present = sorted({m.folder for m in ms})
    print(f"onnx backend test data: {bs.data_root()}")
    print(f"{len(ms)} models in {', '.join(present)}; verbs {', '.join(verbs)}"
          + (f"; builds of {len(plan['build'])} models <= {args.build_max_nodes} nodes"
             if args.ci and "build" in verbs else ""))
    print(f"{'model':58s} {'verb':9s} {'rc':>2s} {'via':10s} {'s':>6s}  message")
    outcomes = []
    t0 = time.monotonic()

    def report(o: bs.Outcome) -> None:
        outcomes.append(o)
        flag = "  <-- " + "; ".join(o.problems) if o.problems else ""
        print(f"{o.model:58s} {o.verb:9s} {o.rc:2d} {o.via:10s} {o.seconds:6.2f}  "
              f"{o.message[:160]}{flag}", flush=True)

    for verb in verbs:
        for m in plan[verb]:
            report(bs.run_one(m, verb, work, build_timeout=args.build_timeout))
    if not args.no_console:
        for m in bs.console_sample(ms):
            for verb in verbs:
                report(bs.run_one(m, verb, work, console=True,
                                  build_timeout=args.build_timeout))
    wall = time.monotonic() - t0
    import shutil

    shutil.rmtree(work, ignore_errors=True)
    bad = [o for o in outcomes if o.problems]
    for o in bad:
        print(f"BROKEN {o.model} {o.verb} ({o.via}): {'; '.join(o.problems)}: "
              f"{o.stderr.strip()[-400:]}")
    per_verb = {v: dict(sorted(collections.Counter(
        f"exit{o.rc}" for o in outcomes if o.verb == v).items())) for v in verbs}
    slowest = max(outcomes, key=lambda o: o.seconds, default=None)
    summary = {
        "benchmark": "backend_sweep", "models": len(ms), "folders": present,
        "runs": len(outcomes), "console_runs": sum(o.via == "console" for o in outcomes),
        "seconds": round(wall, 1), "per_verb": per_verb,
        "exit3": sum(o.rc == 3 for o in outcomes), "broken": len(bad),
        "broken_cases": [f"{o.model} {o.verb}: {'; '.join(o.problems)}" for o in bad][:20],
        "slowest": f"{slowest.model} {slowest.verb} {slowest.seconds:.1f} s" if slowest else None,
        "selection": "ci" if args.ci else "full",
    }
    print(json.dumps(summary, sort_keys=True))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
