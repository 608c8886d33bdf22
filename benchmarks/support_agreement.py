"""How well do the static rules predict the real TensorRT-RTX parser and builder?

Generates ONNX's own operator test suite (`onnx.backend.test.case.node`: ~1900 single-op models
with many attribute and type variants, made in memory, no downloads), parses every model with
the real TensorRT-RTX parser in ONE worker request, and scores two static rule tables side by
side against it:
  baseline  `tensorrt`: rules written from the published onnx-tensorrt operator matrix
  measured  `tensorrt-rtx`: the same rules corrected where TensorRT-RTX was measured to differ
Per table: parser rejections the rules caught / missed, false alarms (a parse-stage rule fired
on a model the parser took), and build-stage rules confirmed / refuted by a real ahead-of-time
build. Last line: one JSON object with the figures.

    python benchmarks/support_agreement.py [--limit N] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Dict, List

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def make_cases(out: Path, limit: int = 0) -> List[Path]:
    """Write ONNX's node test models to `out` (one .onnx per case)."""
    import numpy as np
    import onnx
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    paths = []
    for c in cases[:limit or None]:
        p = out / f"{c.name}.onnx"
        onnx.save(c.model, str(p))
        paths.append(p)
    return paths


def score(paths: List[Path], table: str, reports: List[Any], client: Any) -> Dict[str, Any]:
    """Compare one static table with the parser's reports (and builds where rules say so)."""
    from workbench.support.checker import check, static_check

    caught = missed = false_alarm = agree_ok = build_ok = build_wrong = 0
    alarms: List[str] = []
    for p, real in zip(paths, reports):
        entries, _ = static_check(p, table)
        at_parse = [e for e in entries if e["stage"] == "parse"]
        at_build = [e for e in entries if e["stage"] == "build"]
        if not real.supported:
            caught += bool(at_parse)
            missed += not at_parse
        elif at_parse:
            false_alarm += 1
            alarms.append(f"{p.stem}: {sorted({e['code'] for e in at_parse})}")
        else:
            agree_ok += 1
        if real.supported and at_build:
            built = check(p, backend="tensorrt-rtx", build=True, client=client, rules=table)
            build_ok += not built.supported
            build_wrong += built.supported
    rejected = caught + missed
    return {"table": table, "cases": len(paths), "parser_rejected": rejected,
            "caught": caught, "missed": missed, "false_alarms": false_alarm,
            "accepted_and_quiet": agree_ok, "build_rules_confirmed": build_ok,
            "build_rules_refuted": build_wrong,
            "recall": round(caught / rejected, 4) if rejected else None,
            "false_alarm_examples": alarms[:10]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=int, default=0, help="only the first N cases")
    ap.add_argument("--out", default=None, help="keep the generated models here")
    args = ap.parse_args()
    from workbench.support.checker import check_files
    from workbench.worker.client import WorkerClient

    tmp = tempfile.TemporaryDirectory(prefix="wb-support-agreement-")
    out = Path(args.out or tmp.name)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    paths = make_cases(out, args.limit)
    t_make = time.monotonic() - t0
    with WorkerClient() as w:
        t1 = time.monotonic()
        reports = check_files(paths, "tensorrt-rtx", client=w, timeout=1800)
        t_parse = time.monotonic() - t1
        rows = [score(paths, table, reports, w) for table in ("tensorrt", "tensorrt-rtx")]
    print(f"{len(paths)} ONNX node test models; generated in {t_make:.1f} s, parsed by "
          f"TensorRT-RTX {reports[0].backend_version} in {t_parse:.1f} s (one worker request)")
    print(f"{'':28}{'baseline: matrix':>20}{'measured: rtx':>18}")
    for key in ("parser_rejected", "caught", "missed", "recall", "false_alarms",
                "build_rules_confirmed", "build_rules_refuted"):
        print(f"{key:28}{str(rows[0][key]):>20}{str(rows[1][key]):>18}")
    for row in rows:
        for a in row["false_alarm_examples"]:
            print(f"  false alarm ({row['table']}): {a}")
    print(json.dumps({"benchmark": "support_agreement", "cases": len(paths),
                      "parse_seconds": round(t_parse, 2), "baseline": rows[0],
                      "measured": rows[1]}))
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
