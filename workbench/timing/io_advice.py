"""Reformat layers at an engine's inputs and outputs, and the build change that removes them.

An engine built with FP32 linear I/O around FP16 kernels converts at the edge: a
"Reformatting CopyNode for Input Tensor" turns the FP32 NCHW input into the FP16 channels-last
layout the first convolution wants, and one per output turns FP16 back into FP32. Asking for
the engine's own type and format at the I/O (trtexec's --inputIOFormats/--outputIOFormats,
`BuildConfig.input_io_formats`) lets TensorRT drop them. `advise` reads the captured layer
table: which reformats touch an I/O tensor, their measured time (the predicted saving) and the
I/O formats to ask for; `verify` compares the captures before and after the rebuild.
"""
from __future__ import annotations

import re
from typing import Any, Dict, List, Optional

import numpy as np

from workbench.timing.table import LayerTable

# TensorRT's format descriptions (engine inspector "Format/Datatype") -> trtexec format names;
# a channels-last layout with channel % 4 (TensorRT 8.6's first-conv format for 3 channels)
# has no I/O format of its own: HWC8 is the nearest one a caller may feed
_FORMATS = ((r"channel % 8|channel % 4|channel major .*% 8", "hwc8"),
            (r"channel % 16", "hwc16"),
            (r"sixteen wide", "chw16"), (r"thirty-two wide", "chw32"),
            (r"four wide", "chw4"), (r"two wide", "chw2"),
            (r"channel major", "hwc"), (r"row major linear|linear", "chw"))
_TYPES = (("fp16", "fp16"), ("half", "fp16"), ("bf16", "bf16"), ("fp32", "fp32"),
          ("float", "fp32"), ("int8", "int8"), ("int32", "int32"), ("int64", "int64"),
          ("bool", "bool"))


def io_format_of(desc: str) -> Optional[str]:
    """`Channel major FP16 format where channel % 8 == 0` -> `fp16:hwc8`; None if unknown."""
    low = (desc or "").lower()
    t = next((name for key, name in _TYPES if key in low), None)
    f = next((name for pat, name in _FORMATS if re.search(pat, low)), None)
    return f"{t}:{f}" if t and f else None


def _spec(per_tensor: List[str]) -> str:
    return per_tensor[0] if len(set(per_tensor)) == 1 else ",".join(per_tensor)


def advise(t: LayerTable) -> Optional[Dict[str, Any]]:
    """The I/O reformats of a captured engine and the build change that removes them, or None
    when there are none (or the table has no I/O names). Keys: `layers` (name, tensor, ms),
    `time_ms`/`pct` (their measured share: the predicted saving), `input_io_formats` /
    `output_io_formats` (trtexec grammar; one entry per I/O tensor in engine order, or one
    for all), `build` (the BuildConfig fields) and `cli` (the flags)."""
    bindings = list(getattr(t.layers, "bindings", []) or [])
    if not bindings:
        return None
    times = dict(zip(t.df["name"], t.df["time_ms"]))
    ins: Dict[str, str] = {}
    outs: Dict[str, str] = {}
    layers: List[Dict[str, Any]] = []
    seen_in, seen_out = {}, {}
    for layer in t.layers.layers:
        for ti in layer.inputs:  # an input tensor read by a layer: its format as bound
            if ti.name in bindings:
                seen_in.setdefault(ti.name, ti.format)
        for to in layer.outputs:
            if to.name in bindings:
                seen_out.setdefault(to.name, to.format)
        if not layer.is_reformat:
            continue
        src = [ti for ti in layer.inputs if ti.name in bindings]
        dst = [to for to in layer.outputs if to.name in bindings]
        if src and layer.outputs:
            want = io_format_of(layer.outputs[0].format)
            if want:
                ins[src[0].name] = want
                layers.append({"name": layer.name, "tensor": src[0].name, "side": "input",
                               "from": src[0].format, "to": layer.outputs[0].format,
                               "time_ms": _ms(times.get(layer.name))})
        elif dst and layer.inputs:
            want = io_format_of(layer.inputs[0].format)
            if want:
                outs[dst[0].name] = want
                layers.append({"name": layer.name, "tensor": dst[0].name, "side": "output",
                               "from": layer.inputs[0].format, "to": dst[0].format,
                               "time_ms": _ms(times.get(layer.name))})
    if not layers:
        return None
    in_names = [b for b in bindings if b in seen_in]
    out_names = [b for b in bindings if b in seen_out and b not in seen_in]
    build: Dict[str, str] = {}
    if ins:
        build["input_io_formats"] = _spec([ins.get(n) or io_format_of(seen_in[n]) or "fp32:chw"
                                           for n in in_names])
    if outs:
        build["output_io_formats"] = _spec([outs.get(n) or io_format_of(seen_out[n]) or
                                            "fp32:chw" for n in out_names])
    ms = float(np.nansum([la["time_ms"] for la in layers]))
    total = t.total_ms
    cli = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in build.items())
    return {"layers": layers, "time_ms": ms, "pct": ms / total * 100 if total > 0 else None,
            "build": build, "cli": cli, **build,
            "note": "predicted from the captured profile: the I/O reformat layers' measured "
                    "time; the caller then feeds and reads these types and layouts (the "
                    "workbench runner converts on the host)"}


def _ms(v: Any) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return float("nan")
    return f


def verify(before: LayerTable, after: LayerTable) -> Dict[str, Any]:
    """Reformat share and I/O reformat time before and after the rebuild, measured."""
    def reformat_overhead(t: LayerTable) -> Dict[str, Any]:  # (summary's, which imports this)
        ms = float(np.nansum(t.df[t.df["is_reformat"]]["time_ms"]))
        return {"time_ms": ms, "pct": ms / t.total_ms * 100 if t.total_ms > 0 else None}

    def io_ms(t: LayerTable) -> float:
        a = advise(t)
        return float(a["time_ms"]) if a else 0.0

    rb, ra = reformat_overhead(before), reformat_overhead(after)
    ib, ia = io_ms(before), io_ms(after)
    return {"reformat_pct_before": rb["pct"], "reformat_pct_after": ra["pct"],
            "reformat_ms_before": rb["time_ms"], "reformat_ms_after": ra["time_ms"],
            "io_reformat_ms_before": ib, "io_reformat_ms_after": ia,
            "layer_sum_ms_before": before.total_ms, "layer_sum_ms_after": after.total_ms,
            "saved_ms": before.total_ms - after.total_ms}
