"""What running onnxruntime in a child process costs, against running it in this process.

For each sample (resnet_tiny, bert_tiny; the first 8 samples of its calibration data), medians of
`repeats` runs of:
  first       a new runner's first call: in process = session creation + run (onnxruntime
              already imported); child = a fresh child (interpreter, onnxruntime import),
              model load and run, i.e. what the first comparison of a session pays
  warm        one runner, its next calls (session kept in both cases)
  new_runner  a new runner on the same model for each call, the pattern of verify() and of
              every recipe check: in process a new session each time; in the child the
              session cached by model hash is reused
  mark_all    warm calls with every node output returned (layer-wise compare: many arrays
              cross the process boundary as .npy files)
overhead_ms = child minus in-process, per pattern. Last line: one JSON object.

    python benchmarks/ort_containment.py [--repeats 15]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SAMPLES = REPO / "sample_models"

from workbench.runtime import ortchild, runners  # noqa: E402


def _feed(name: str) -> dict:
    data = np.load(SAMPLES / "calib" / f"{name}.npz")
    return {k: data[k][:8] for k in data.files}


def _median(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _fresh_child() -> None:
    """The next isolated call starts a new child (what a new kernel's first call pays)."""
    ortchild.default_child().close()


def measure(name: str, repeats: int) -> dict:
    path = str(SAMPLES / f"{name}.onnx")
    feed = _feed(name)
    out = {}
    for isolated, where in ((False, "in_process"), (True, "child")):
        def first() -> None:
            if isolated:
                _fresh_child()
            runners.OnnxRuntimeRunner(path, isolated=isolated).infer(feed)

        r = runners.OnnxRuntimeRunner(path, isolated=isolated)
        r.infer(feed)
        marked = runners.OnnxRuntimeRunner(path, isolated=isolated, mark_all=True)
        n_marked = len(marked.infer(feed))
        out[where] = {
            "first_s": _median(first, max(3, repeats // 3)),
            "warm_s": _median(lambda: r.infer(feed), repeats),
            "new_runner_s": _median(
                lambda: runners.OnnxRuntimeRunner(path, isolated=isolated).infer(feed), repeats),
            "mark_all_s": _median(lambda: marked.infer(feed), repeats),
        }
        out["marked_outputs"] = n_marked
    for k in ("first_s", "warm_s", "new_runner_s", "mark_all_s"):
        out[k.replace("_s", "_overhead_ms")] = round(
            1000 * (out["child"][k] - out["in_process"][k]), 2)
    for where in ("in_process", "child"):
        out[where] = {k: round(v, 5) for k, v in out[where].items()}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=15)
    a = ap.parse_args()
    rows = {name: measure(name, a.repeats) for name in ("resnet_tiny", "bert_tiny")}
    for name, r in rows.items():
        print(f"{name:12s} " + "  ".join(
            f"{k}: {r['in_process'][k] * 1000:.1f} -> {r['child'][k] * 1000:.1f} ms"
            for k in ("first_s", "warm_s", "new_runner_s", "mark_all_s")))
    t0 = time.perf_counter()
    _fresh_child()
    ortchild.default_child()._start()
    start_s = time.perf_counter() - t0
    summary = {
        "benchmark": "ort_containment", "repeats": a.repeats, "samples": rows,
        "child_start_s": round(start_s, 4),
        "max_warm_overhead_ms": max(r["warm_overhead_ms"] for r in rows.values()),
        "max_new_runner_overhead_ms": max(r["new_runner_overhead_ms"] for r in rows.values()),
        "load_average_1min": round(os.getloadavg()[0], 2),
    }
    ortchild.default_child().close()
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
