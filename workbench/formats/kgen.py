"""TensorRT 10.x/11.x fused `kgen` layers: which operations one fused kernel runs.

Newer TensorRT fuses pointwise/reduction chains into generated kernels whose layer type is
`kgen` and whose name or tactic spells the fused ops (`__myl_AddMulMeanSubMul_myl0_3`,
`_gemm_mha_v2_0x5c1d...`). `kgen_ops` turns that signature into op names (`Add`, `Mul`, `Mean`,
...) so a timing view can say what the time is spent on; the token spelling follows NVIDIA's
trt-perf-analysis (`layer_info.py::kgen_details`).
"""
from __future__ import annotations

import re
from typing import Any, Dict, List

_TOKENS = {"and": "And", "add": "Add", "cast": "Cast", "div": "Div", "erf": "Erf",
           "gath": "Gather", "gemm": "Gemm", "mean": "Mean", "mha": "MHA", "move": "Move",
           "mul": "Mul", "resh": "Reshape", "sele": "Select", "slic": "Slice", "sqrt": "Sqrt",
           "sub": "Sub", "tanh": "Tanh", "tran": "Transpose"}


def is_kgen(layer_type: str) -> bool:
    return str(layer_type).lower() == "kgen"


def kgen_signature(text: str) -> str:
    """'__myl_AddMulMean_myl0_3' -> 'AddMulMean' (tactic hex ids and Myelin suffixes dropped)."""
    text = re.sub(r"_0x[0-9A-Fa-f]+$", "", str(text))
    text = re.sub(r"_myl\d+(?:_\d+)?$", "", text)
    text = re.sub(r"^__?myl_", "", text)
    return text.strip("_")


def _token(tok: str) -> str:
    low = tok.lower()
    if low in _TOKENS:
        return _TOKENS[low]
    if low.startswith("v") and low[1:].isdigit():
        return low.upper()
    return tok[:1].upper() + tok[1:]


def kgen_ops(raw_layer: Dict[str, Any]) -> List[str]:
    """The fused operations of a `kgen` layer (from its TacticName, else its Name); [] when
    neither spells any."""
    for text in (raw_layer.get("TacticName") or "", raw_layer.get("Name") or ""):
        sig = kgen_signature(str(text))
        if not sig:
            continue
        parts = ([p for p in sig.split("_") if p] if "_" in sig
                 else re.findall(r"[A-Z][a-z0-9]*|[a-z0-9]+", sig))
        if parts:
            return [_token(p) for p in parts]
    return []
