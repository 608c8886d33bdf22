"""The long fuzz run: >= 10,000 hostile inputs through every reader users feed files to.

Cases come from tests/fuzz_cases.py (the same generators the CI tests draw from, here with many
more seeds): byte-level corruptions and structure-aware hostile values for ONNX
(`inspect`/`check --backend static`/`graph`), layer-info/profile/times JSON (`timing`),
calibration npz/npy (`profiles --calib`), RunResults JSON (compare's load_run_results), the
engine cache card and hash memo, and `fix --recipe` arguments. Each runs in this process
(`workbench.cli.main`); the outcome must be exit 0/1/2 with one line. Prints the count per reader
and outcome, the slowest case, the peak RSS of this process, and the exit-3 / multi-line cases
found (with their seed, to replay); the last line is one JSON object.

    python benchmarks/fuzz.py [--cases 10000] [--seed 0] [--only onnx,calib]
"""
from __future__ import annotations

import argparse
import collections
import json
import random
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

import fuzz_cases as fc  # noqa: E402

# share of the cases per reader (the ONNX readers see the most; timing cases cost the most)
MIX = {"onnx": 0.40, "calib": 0.16, "timing": 0.10, "run_results": 0.12, "engine_meta": 0.12,
       "recipe": 0.10}
GENERATORS = {"onnx": fc.onnx_cases, "calib": fc.calib_cases, "timing": fc.timing_cases,
              "run_results": fc.run_results_cases, "engine_meta": fc.engine_meta_cases,
              "recipe": fc.recipe_cases}
PER_CASE_LIMIT_S = 20.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default="", help="comma-separated readers (default: all)")
    args = ap.parse_args()
    readers = [r for r in MIX if not args.only or r in args.only.split(",")]
    total_share = sum(MIX[r] for r in readers)
    counts: dict = collections.Counter()
    kinds: dict = collections.Counter()
    bad, slowest = [], (0.0, "")
    home = Path(tempfile.mkdtemp(prefix="wb-fuzz-home-"))
    import os

    os.environ["WORKBENCH_HOME"] = str(home)  # workspaces of this run stay out of the user's
    t0 = time.monotonic()
    per_reader_s: dict = collections.Counter()
    for r in readers:
        n = max(1, round(args.cases * MIX[r] / total_share))
        for i in range(n):
            seed = args.seed * 1_000_003 + list(MIX).index(r) * 100_003 + i
            [case] = list(GENERATORS[r](random.Random(seed), 1))
            folder = Path(tempfile.mkdtemp(prefix="case-", dir=home))
            t = time.monotonic()
            rc, err = fc.run_case(case, folder)
            dt = time.monotonic() - t
            per_reader_s[r] += dt
            shutil.rmtree(folder, ignore_errors=True)
            lines = [ln for ln in err.splitlines() if ln.strip()]
            ok = rc in (0, 1, 2) and "Traceback" not in err and (rc != 2 or len(lines) == 1) \
                and dt < PER_CASE_LIMIT_S
            outcome = f"exit {rc}" if ok else f"BAD exit {rc}"
            counts[(r, outcome)] += 1
            kinds[(r, case.kind.split(":")[0])] += 1
            if dt > slowest[0]:
                slowest = (dt, f"{r}/{case.kind} {' '.join(case.argv)[:80]}")
            if not ok:
                bad.append({"reader": r, "seed": seed, "kind": case.kind, "exit": rc,
                            "seconds": round(dt, 2), "stderr": err.strip()[:300]})
                print(f"BAD {r} seed {seed} {case.kind}: exit {rc}: {err.strip()[:200]}",
                      flush=True)
        print(f"{r:12s} {n:6d} cases in {per_reader_s[r]:6.1f} s: " + ", ".join(
            f"{o} {c}" for (rr, o), c in sorted(counts.items()) if rr == r), flush=True)
    shutil.rmtree(home, ignore_errors=True)
    wall = time.monotonic() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    n_total = sum(counts.values())
    print(f"{n_total} cases in {wall:.1f} s; slowest {slowest[0]:.2f} s ({slowest[1]}); "
          f"peak RSS {peak_mb:.0f} MB; internal errors / multi-line / slow: {len(bad)}")
    summary = {
        "benchmark": "fuzz", "cases": n_total, "seconds": round(wall, 1),
        "per_reader": {r: {o: c for (rr, o), c in counts.items() if rr == r} for r in readers},
        "kinds": {f"{r}/{k}": c for (r, k), c in sorted(kinds.items())},
        "bad": len(bad), "bad_cases": bad[:20], "exit3": sum(1 for b in bad if b["exit"] == 3),
        "slowest_s": round(slowest[0], 2), "peak_rss_mb": round(peak_mb),
    }
    print(json.dumps(summary, sort_keys=True))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
