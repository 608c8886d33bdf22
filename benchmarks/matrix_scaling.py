"""Wall time of a variant matrix with 1 Ray worker vs N, on this machine.

CPU mode (default): the 12-variant TensorRT-RTX ahead-of-time matrix of the two bundled
samples (resnet_tiny, bert_tiny) x {fp32, fp16, int8} x {sm89, sm120}, accuracy on 4 samples
of their calibration data, each configuration with a fresh WORKBENCH_HOME (no engine cache)
and a fresh local Ray instance of 1 or N CPUs (Ray's start-up is timed apart: it is paid once
per session, not per matrix). `--gpus`: GPU variants (built and timed on the GPU each task is
given; targets = the GPU itself) with 1 GPU vs all of them, for the given --models.

    python benchmarks/matrix_scaling.py [--workers N] [--repeats 1]
    python benchmarks/matrix_scaling.py --gpus [--models a.onnx b.onnx] [--precision fp32,fp16]

Last line: one JSON object with the figures.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SAMPLES = REPO / "sample_models"
PROFILE = {"input": [[1, 3, 32, 32], [8, 3, 32, 32], [32, 3, 32, 32]],
           "input_ids": [[1, 8], [16, 32], [64, 32]],
           "attention_mask": [[1, 8], [16, 32], [64, 32]]}


def _plan(args: argparse.Namespace):
    from workbench.matrix.plan import plan_matrix

    models = args.models or [str(SAMPLES / "resnet_tiny.onnx"), str(SAMPLES / "bert_tiny.onnx")]
    calib = {Path(m).stem: str(SAMPLES / "calib" / f"{Path(m).stem}.npz") for m in models
             if (SAMPLES / "calib" / f"{Path(m).stem}.npz").is_file()}
    precisions = args.precision.split(",")
    targets = [None] if args.gpus else ["sm89", "sm120"]
    profiles = {"p0": [json.loads(args.profile)]} if args.profile else {"p0": [PROFILE]}
    return plan_matrix(models, precisions, targets, profiles=profiles, calibration=calib,
                       opt_levels=[args.opt_level])


def _one(args: argparse.Namespace, n: int) -> dict:
    import ray

    from workbench.matrix.run import run_matrix, start_ray

    with tempfile.TemporaryDirectory(prefix="wb-matrix-bench-") as tmp:
        os.environ["WORKBENCH_HOME"] = str(Path(tmp) / "home")
        variants = _plan(args)
        t0 = time.monotonic()
        if args.gpus:
            start_ray(workers=max(n, 1) * 2, gpus=n)
        else:
            start_ray(workers=n)
        ray_s = time.monotonic() - t0
        t1 = time.monotonic()
        try:
            res = run_matrix(variants, Path(tmp) / "out", gpu=args.gpus, samples=args.samples,
                             report=False)
        finally:
            ray.shutdown()
        wall = time.monotonic() - t1
    s = res.summary
    if s["ok"] != len(variants):
        bad = [r for r in res.results if r["status"] != "ok"]
        raise SystemExit(f"{s['failed']} variant(s) failed, e.g. {bad[0]['id']}: "
                         f"{bad[0].get('error')}")
    per_gpu: dict = {}
    for r in res.results:
        for g in r.get("gpus") or []:
            per_gpu.setdefault(g, []).append(r["seconds"])
    return {"workers": n, "wall_s": round(wall, 2), "ray_start_s": round(ray_s, 2),
            "variants": len(variants), "built": s["built"],
            "task_s_sum": round(sum(r.get("seconds", 0) for r in res.results), 2),
            "busy_s_per_gpu": {g: round(sum(v), 2) for g, v in per_gpu.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=None,
                    help="N (default: CPUs, or GPUs with --gpus)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--gpus", action="store_true", help="GPU variants: 1 GPU vs all")
    ap.add_argument("--models", nargs="*", help="ONNX models (default: the two samples)")
    ap.add_argument("--precision", default="fp32,fp16,int8")
    ap.add_argument("--profile", help="one profile as JSON {input: [min, opt, max]}")
    ap.add_argument("--opt-level", type=int, default=0)
    ap.add_argument("--samples", type=int, default=4)
    args = ap.parse_args()
    if args.gpus and args.precision == "fp32,fp16,int8":
        args.precision = "fp32,fp16"
    if args.workers is None:
        if args.gpus:
            from workbench.worker.client import WorkerClient

            w = WorkerClient()
            try:
                args.workers = int(w.call("cuda_info", timeout=120).get("device_count") or 1)
            finally:
                w.close()
        else:
            args.workers = os.cpu_count() or 1
    runs = {1: [], args.workers: []}
    for _ in range(args.repeats):
        for n in runs:
            r = _one(args, n)
            runs[n].append(r)
            print(f"{n} {'GPU' if args.gpus else 'worker'}(s): {r['variants']} variants in "
                  f"{r['wall_s']:.1f} s (Ray start {r['ray_start_s']:.1f} s, task time "
                  f"{r['task_s_sum']:.1f} s)", flush=True)
    one = statistics.median(r["wall_s"] for r in runs[1])
    many = statistics.median(r["wall_s"] for r in runs[args.workers])
    speedup = one / many if many else None
    print(f"speed-up with {args.workers} vs 1: {speedup:.2f}x")
    print(json.dumps({"benchmark": "matrix_scaling", "mode": "gpu" if args.gpus else "cpu",
                      "variants": runs[1][0]["variants"], "workers": args.workers,
                      "wall_s_1": one, f"wall_s_{args.workers}": many,
                      "speedup": round(speedup, 3) if speedup else None,
                      "cpus": os.cpu_count(), "runs": runs}))


if __name__ == "__main__":
    main()
