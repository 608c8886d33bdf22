"""KV-cache decoders in the naming styles exporters use, made from benchmarks/large_model.py's
tiny decoder (Optimum's names): `past_key.N` / `past_value.N` with unnamed dims, cache inputs
whose names say nothing (only the graph's Concat of past and new tells), and decoders without
a `position_ids` input (positions computed from the mask and the ids)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

REPO = Path(__file__).resolve().parents[1]
STYLES = ("optimum", "past_key", "opaque")


def large_model():
    """benchmarks/large_model.py as a module."""
    if "large_model" in sys.modules:
        return sys.modules["large_model"]
    spec = importlib.util.spec_from_file_location("large_model", REPO / "benchmarks" /
                                                  "large_model.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["large_model"] = mod   # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def _rename(m: onnx.ModelProto, names: dict) -> None:
    for vi in list(m.graph.input) + list(m.graph.output):
        if vi.name in names:
            vi.name = names[vi.name]
    for n in m.graph.node:
        for i, x in enumerate(n.input):
            if x in names:
                n.input[i] = names[x]


def _clear_dims(m: onnx.ModelProto, which: set) -> None:
    """Unname the dims in `which` (an export that did not name its dynamic axes)."""
    for vi in list(m.graph.input) + list(m.graph.output):
        for d in vi.type.tensor_type.shape.dim:
            if d.dim_param in which:
                d.Clear()


def _computed_positions(m: onnx.ModelProto) -> None:
    """Drop the position_ids input: positions past .. total-1 from the mask's and the ids'
    lengths, [1, seq] (broadcast over the batch), under the same tensor name."""
    keep = [vi for vi in m.graph.input if vi.name != "position_ids"]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    c = lambda n, v: helper.make_node("Constant", [], [n], name=n,  # noqa: E731
                                      value=numpy_helper.from_array(np.array(v, np.int64)))
    nodes = [c("pos/one", 1), c("pos/ax0", [0]),
             helper.make_node("Shape", ["attention_mask"], ["pos/ms"], name="pos/Shape"),
             helper.make_node("Shape", ["input_ids"], ["pos/is"], name="pos/Shape_1"),
             helper.make_node("Gather", ["pos/ms", "pos/one"], ["pos/total"], name="pos/G",
                              axis=0),
             helper.make_node("Gather", ["pos/is", "pos/one"], ["pos/seq"], name="pos/G1",
                              axis=0),
             helper.make_node("Sub", ["pos/total", "pos/seq"], ["pos/past"], name="pos/Sub"),
             helper.make_node("Range", ["pos/past", "pos/total", "pos/one"], ["pos/r"],
                              name="pos/Range"),
             helper.make_node("Unsqueeze", ["pos/r", "pos/ax0"], ["position_ids"],
                              name="pos/Unsqueeze")]
    rest = list(m.graph.node)
    del m.graph.node[:]
    m.graph.node.extend(nodes + rest)


def make_decoder(folder: Path, style: str = "optimum", positions: bool = True,
                 config=None) -> Path:
    """A tiny decoder in `folder` (model.onnx + model.onnx_data) named in `style`."""
    lm = large_model()
    cfg = config or lm.tiny_decoder_config()
    path = lm.build_decoder(Path(folder), cfg)
    m = onnx.load(str(path), load_external_data=False)
    if style == "past_key":
        _rename(m, {f"past_key_values.{i}.{k}": f"past_{k}.{i}"
                    for i in range(cfg.layers) for k in ("key", "value")})
        _clear_dims(m, {"past_sequence_length", "total_sequence_length"})
    elif style == "opaque":
        _rename(m, {f"past_key_values.{i}.{k}": f"l{i}_{k[0]}"
                    for i in range(cfg.layers) for k in ("key", "value")})
        _clear_dims(m, {"past_sequence_length", "total_sequence_length"})
    elif style != "optimum":
        raise ValueError(style)
    if not positions:
        _computed_positions(m)
    onnx.save(m, str(path))
    return path
