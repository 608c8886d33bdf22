"""Load and analyse a synthetic 20k-layer engine (layer info + IProfiler profile + ONNX model).

The engine JSON imitates TensorRT 8.6 `get_engine_information(JSON)` output: fused
Conv+BN+ReLU layers with `Metadata` using raw \\x1e separators, reformat layers, Myelin
`{ForeignNode[a...b]}` layers, constants, `Format/Datatype` strings and tactics; the profile is
the IProfiler capture `[{"name","averageMs","medianMs","count"}]`; the ONNX model has the nodes the
metadata names (no weights). Measured (best of --repeat runs, each from the files on disk):
  - ours: load_layers + load_profile + open ONNX + LayerTable.build + summarize + lint
  - ours-no-onnx: the same without the ONNX model
  - baseline "json+pandas": json.loads(strict=False) of both files + pandas.DataFrame of the
    layer records merged with the profile on name, the least any analysis has to do
Target (a 20k-layer engine's timing opens while the user waits): ours < 2 s at 20k layers on
this machine. The machine is shared by several
jobs (2 cores), so wall and CPU (process) seconds are both printed; the target is judged on the
smaller. Last line: one JSON object.

    python benchmarks/timing_load.py [--layers 20000] [--repeat 3]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TARGET_S = 2.0


def _tensor(name, dims, fmt):
    return {"Name": name, "Location": "Device", "Dimensions": dims, "Format/Datatype": fmt}


def make_engine(n_layers: int, out: Path, seed: int = 0):
    """Write <out>/synth.layers.json, synth.profile.json, synth.onnx; return their paths."""
    import onnx
    from onnx import TensorProto, helper

    rng = np.random.default_rng(seed)
    layers, prof, nodes = [], [], []
    prev = "input"
    fp16 = "Channel major FP16 format where channel % 8 == 0"
    i = 0
    while len(layers) < n_layers:
        kind = rng.random()
        scope = f"/stage{i // 400}/block{i // 20}/unit{i}"
        if kind < 0.05:  # a constant (weights), no time
            name = f"onnx::Conv_{i}"
            layers.append({"Name": name, "LayerType": "Constant", "Inputs": [],
                           "Outputs": [_tensor(f"(Unnamed Layer* {i}) [Constant]_output", [64], fp16)],
                           "TacticValue": "0x0", "Metadata": ""})
            prof.append(0.0)
        elif kind < 0.25:  # a reformat in front of the next layer
            tgt = f"{scope}/conv/Conv + {scope}/relu/Relu"
            out_t = f"Reformatted Input Tensor 0 to {tgt}"
            layers.append({"Name": f"Reformatting CopyNode for Input Tensor 0 to {tgt}",
                           "LayerType": "Reformat", "Origin": "REFORMAT",
                           "Inputs": [_tensor(prev, [8, 64, 56, 56], "Row major linear FP32")],
                           "Outputs": [_tensor(out_t, [8, 64, 56, 56], fp16)],
                           "TacticValue": "0x00000000000003e8", "Metadata": ""})
            prof.append(float(rng.uniform(0.001, 0.01)))
            prev = out_t
        elif kind < 0.28:  # a Myelin subgraph over the next three ONNX nodes
            names = [f"{scope}/attn/MatMul", f"{scope}/attn/Softmax", f"{scope}/attn/MatMul_1"]
            x = prev
            for j, nm in enumerate(names):
                op = "Softmax" if j == 1 else "MatMul"
                ins = [x] if op == "Softmax" else [x, x]
                nodes.append(helper.make_node(op, ins, [nm + "_out"], name=nm))
                x = nm + "_out"
            layers.append({"Name": f"{{ForeignNode[{names[0]}...{names[-1]}]}}",
                           "LayerType": "Myelin", "Inputs": [_tensor(prev, [8, 128, 256], fp16)],
                           "Outputs": [_tensor(x, [8, 128, 256], fp16)], "TacticValue": "0x0",
                           "Metadata": ""})
            prof.append(float(rng.uniform(0.02, 0.2)))
            prev = x
        else:  # Conv + BN + ReLU fused, Metadata with raw separators
            names = [f"{scope}/conv/Conv", f"{scope}/bn/BatchNormalization", f"{scope}/relu/Relu"]
            x = prev
            for nm, op in zip(names, ("Relu", "Identity", "Relu")):  # weightless stand-ins
                nodes.append(helper.make_node(op, [x], [nm + "_out"], name=nm))
                x = nm + "_out"
            layers.append({"Name": " + ".join(names), "LayerType": "CaskConvolution",
                           "Inputs": [_tensor(prev, [8, 64, 56, 56], fp16)],
                           "Outputs": [_tensor(x, [8, 64, 56, 56], fp16)],
                           "ParameterType": "Convolution", "Kernel": [3, 3], "OutMaps": 64,
                           "TacticName": "sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc",
                           "TacticValue": "0x%016x" % int(rng.integers(1 << 62)),
                           "Metadata": "\x1e".join(f"[ONNX Layer: {n}]" for n in names)})
            prof.append(float(rng.uniform(0.003, 0.05)))
            prev = x
        i += 1
    g = helper.make_graph(nodes, "synth", [helper.make_tensor_value_info("input", TensorProto.FLOAT, None)],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    lp, pp, op = out / "synth.layers.json", out / "synth.profile.json", out / "synth.onnx"
    # json.dumps escapes \x1e; write it raw like TensorRT does
    lp.write_text(json.dumps({"Layers": layers, "Bindings": ["input", prev]}).replace("\\u001e", "\x1e"))
    pp.write_text(json.dumps([{"name": lay["Name"], "averageMs": t * 1.02, "medianMs": t, "count": 50}
                              for lay, t in zip(layers, prof)]))
    onnx.save(model, str(op))
    return lp, pp, op, float(sum(prof))


def ours(lp, pp, op):
    from workbench.timing import LayerTable, lint, load_layers, load_profile, summarize

    t = LayerTable.build(load_layers(lp), load_profile(pp), onnx=op)
    s = summarize(t)
    lint(t)
    return t, s


def ours_no_onnx(lp, pp):
    from workbench.timing import LayerTable, summarize

    t = LayerTable.build(lp, pp)
    return t, summarize(t)


def baseline(lp, pp):
    import pandas as pd

    layers = json.loads(Path(lp).read_text(), strict=False)["Layers"]
    prof = json.loads(Path(pp).read_text())
    df = pd.DataFrame(layers).merge(pd.DataFrame(prof), left_on="Name", right_on="name", how="left")
    return df


def best(fn, repeat):
    """Best wall-clock and best CPU (process) seconds over `repeat` runs. The machine is shared
    (2 cores, other jobs): CPU seconds are what this code costs, wall seconds include waiting."""
    wall, cpu, res = [], [], None
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        res = fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return min(wall), min(cpu), res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        lp, pp, op, total = make_engine(a.layers, Path(d))
        gen_s = time.perf_counter() - t0
        sizes = {p.name: p.stat().st_size for p in (lp, pp, op)}
        import pandas  # noqa: F401  (import cost outside the timings, as in a notebook)
        import onnx  # noqa: F401

        ours(lp, pp, op)  # warm imports (plotly-free path)
        w_ours, c_ours, (t, summ) = best(lambda: ours(lp, pp, op), a.repeat)
        w_noonnx, c_noonnx, _ = best(lambda: ours_no_onnx(lp, pp), a.repeat)
        w_base, c_base, _ = best(lambda: baseline(lp, pp), a.repeat)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    cov = summ["onnx_mapping"]
    correct = abs(summ["total_ms"] - total) < 1e-6 * max(total, 1)
    ok = correct and min(w_ours, c_ours) < TARGET_S
    print(f"synthetic engine: {len(t)} layers, files {sizes} (generated in {gen_s:.1f} s); "
          f"load average {load:.1f} on {os.cpu_count()} CPUs")
    print(f"{'best of ' + str(a.repeat):28}{'wall s':>9}{'cpu s':>9}{'x baseline (cpu)':>18}")
    for label, w, c in (("baseline json+pandas merge", w_base, c_base),
                        ("ours without ONNX", w_noonnx, c_noonnx),
                        ("ours with ONNX mapping", w_ours, c_ours)):
        print(f"{label:28}{w:>9.3f}{c:>9.3f}{c / c_base:>18.2f}")
    print(f"target: ours with ONNX < {TARGET_S} s -> {'PASS' if ok else 'FAIL'} "
          f"(CPU seconds count when the shared machine is loaded)")
    print(f"total {summ['total_ms']:.3f} ms (generated {total:.3f}), mapped {cov['mapped_pct']:.1f}% "
          f"of time, {cov['onnx_nodes_covered']}/{cov['onnx_nodes_total']} ONNX nodes covered")
    print(json.dumps({"benchmark": "timing_load", "layers": len(t), "ours_wall_s": round(w_ours, 4),
                      "ours_cpu_s": round(c_ours, 4), "ours_no_onnx_cpu_s": round(c_noonnx, 4),
                      "baseline_json_pandas_cpu_s": round(c_base, 4),
                      "ratio_vs_baseline_cpu": round(c_ours / c_base, 2), "target_s": TARGET_S,
                      "load_avg": None if load is None else round(load, 2),
                      "mapped_pct": round(cov["mapped_pct"], 2), "correct_total": bool(correct),
                      "pass": bool(ok)}))


if __name__ == "__main__":
    main()
