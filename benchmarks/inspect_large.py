"""Inspecting a BERT-base-sized model: `workbench inspect --json` vs Polygraphy, side by side.

Generates a 12-layer, hidden-768, vocab-30522 BERT encoder (weights ~440 MB as external data) in a
temporary folder, then runs, as separate processes, alternating and `--repeat` times each:

  workbench inspect --json MODEL
  polygraphy inspect model MODEL --show layers        (the named baseline)

and reports the median wall time and the peak resident memory (ru_maxrss from wait4, taken by
a tiny runner process so that this script's own memory does not leak into the figure). Targets: workbench at most half of Polygraphy's time, peak memory below 300 MB.
The last line of output is one JSON object with the figures and ratios.

    python benchmarks/inspect_large.py [--repeat 3] [--keep DIR]
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parents[1]
BERT_BASE = dict(vocab=30522, hidden=768, heads=12, inter=3072, layers=12, max_pos=512)
TARGET_TIME_RATIO = 0.5
TARGET_PEAK_MB = 300.0


def generate(folder: Path) -> Path:
    """Write bert_base.onnx + bert_base.onnx.data (weights streamed to disk)."""
    sys.path.insert(0, str(REPO / "sample_models"))
    from make_samples import ExternalWriter, make_bert  # noqa: E402

    model_path = folder / "bert_base.onnx"
    writer = ExternalWriter(folder / "bert_base.onnx.data")
    try:
        proto = make_bert(BERT_BASE, name="bert_base", seed=7, external=writer)
    finally:
        writer.close()
    model_path.write_bytes(proto.SerializeToString())
    return model_path


# A tiny fork/exec runner: ru_maxrss survives fork+exec, so a child forked straight from this
# (big) process would report *our* RSS as its peak. The runner is a bare interpreter (~10 MB)
# that forks the command, waits for it with wait4 and reports its exit code, peak RSS and time.
_RUNNER = """import os, sys, time
t = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
_, st, ru = os.wait4(pid, 0)
sys.stderr.write("\\n@@BENCH %d %d %.6f\\n" % (os.waitstatus_to_exitcode(st), ru.ru_maxrss,
                                                time.perf_counter() - t))
"""


def measure(cmd: List[str]) -> Dict[str, float]:
    """Wall seconds and peak RSS (MB) of one command run as a child of the tiny runner."""
    p = subprocess.run([sys.executable, "-I", "-S", "-c", _RUNNER, *cmd], capture_output=True)
    err = p.stderr.decode(errors="replace")
    tail = [ln for ln in err.splitlines() if ln.startswith("@@BENCH ")]
    if p.returncode != 0 or not tail:
        raise SystemExit(f"runner failed ({p.returncode}): {' '.join(cmd)}\n{err[-2000:]}")
    rc, maxrss_kb, wall = tail[-1].split()[1:]
    if int(rc) != 0:
        raise SystemExit(f"command failed ({rc}): {' '.join(cmd)}\n{err[-2000:]}")
    return {"wall_s": float(wall), "peak_mb": int(maxrss_kb) / 1024.0,
            "stdout_bytes": len(p.stdout)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="generate into (and keep) this folder")
    args = ap.parse_args()

    tmp = args.keep or Path(tempfile.mkdtemp(prefix="wb-inspect-large-"))
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        t0 = time.perf_counter()
        model = tmp / "bert_base.onnx"
        if not (model.exists() and (tmp / "bert_base.onnx.data").exists()):
            model = generate(tmp)
        data_mb = (tmp / "bert_base.onnx.data").stat().st_size / 1e6
        print(f"model: {model} ({model.stat().st_size / 1e3:.0f} KB graph + {data_mb:.0f} MB "
              f"external data), generated in {time.perf_counter() - t0:.1f} s")
        if data_mb <= 400:
            raise SystemExit(f"generated weights are {data_mb:.0f} MB, expected > 400 MB")

        bindir = Path(sys.executable).parent
        wb = shutil.which("workbench", path=str(bindir)) or "workbench"
        pg = shutil.which("polygraphy", path=str(bindir)) or "polygraphy"
        cmds = {"workbench": [wb, "inspect", "--json", str(model)],
                "polygraphy": [pg, "inspect", "model", str(model), "--show", "layers"]}
        # warm the page cache and the import caches once for each
        for c in cmds.values():
            measure(c)
        runs: Dict[str, List[Dict[str, float]]] = {k: [] for k in cmds}
        for _ in range(args.repeat):
            for k, c in cmds.items():
                runs[k].append(measure(c))
        res = {k: {"wall_s": statistics.median(r["wall_s"] for r in v),
                   "peak_mb": max(r["peak_mb"] for r in v),
                   "stdout_kb": v[0]["stdout_bytes"] / 1e3} for k, v in runs.items()}
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)

    w, p = res["workbench"], res["polygraphy"]
    time_ratio = w["wall_s"] / p["wall_s"]
    mem_ratio = w["peak_mb"] / p["peak_mb"]
    print(f"\n{'':<34}{'workbench inspect --json':>26}{'polygraphy --show layers':>26}"
          f"{'ratio':>8}")
    print(f"{'wall time, median of ' + str(args.repeat) + ' (s)':<34}{w['wall_s']:>26.2f}"
          f"{p['wall_s']:>26.2f}{time_ratio:>8.2f}")
    print(f"{'peak RSS (MB)':<34}{w['peak_mb']:>26.1f}{p['peak_mb']:>26.1f}{mem_ratio:>8.2f}")
    print(f"{'output (KB)':<34}{w['stdout_kb']:>26.0f}{p['stdout_kb']:>26.0f}")
    ok_time = time_ratio <= TARGET_TIME_RATIO
    ok_mem = w["peak_mb"] < TARGET_PEAK_MB
    print(f"\ntargets: time ratio <= {TARGET_TIME_RATIO}: {'met' if ok_time else 'MISSED'}; "
          f"peak < {TARGET_PEAK_MB:.0f} MB: {'met' if ok_mem else 'MISSED'}")
    print(json.dumps({
        "benchmark": "inspect_large", "model": "bert-base 12x768, vocab 30522, external data",
        "external_data_mb": round(data_mb, 1), "repeat": args.repeat,
        "workbench_wall_s": round(w["wall_s"], 3), "polygraphy_wall_s": round(p["wall_s"], 3),
        "workbench_peak_mb": round(w["peak_mb"], 1), "polygraphy_peak_mb": round(p["peak_mb"], 1),
        "time_ratio": round(time_ratio, 3), "peak_ratio": round(mem_ratio, 3),
        "target_time_ratio": TARGET_TIME_RATIO, "target_peak_mb": TARGET_PEAK_MB,
        "time_target_met": ok_time, "peak_target_met": ok_mem}))


if __name__ == "__main__":
    main()
