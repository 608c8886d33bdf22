"""The model zoo (tests/data/zoo): real torch/timm/transformers exports kept as structure + weight
statistics, re-made into runnable ONNX models here (no torch, no workbench).

    from zoo_models import names, materialize, sample_inputs
    path = materialize("resnet50", seed=0, out_dir=tmp)      # -> tmp/resnet50-s0.onnx
    feeds = sample_inputs("resnet50", batch=1, seed=0)

Each big float initializer is drawn from a normal distribution with the exported tensor's mean
and std, clipped to its [min, max] (so BatchNorm's running_var stays positive, LayerNorm's
all-ones weight stays all ones); integer tensors and small float tensors were kept exactly;
arange / constant / triangular-mask tensors are re-made exactly. Deterministic per (name, seed).
"""
from __future__ import annotations

import json
import os
import zlib
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import numpy as np

ZOO = Path(__file__).resolve().parent / "data" / "zoo"
# the sizes the export used for its example input (zoo.json's symbolic dims)
EXAMPLE_DIMS = {"sequence": 16, "samples": 16000}
# small models for CI (under ~5 M parameters, a few seconds each)
SMALL = ("squeezenet1_1", "mobilenet_v3_small", "llama_tiny")


def manifest() -> Dict[str, Any]:
    """zoo.json: per model category, source, exporter, opset, inputs, ops, export attempts."""
    return json.loads((ZOO / "zoo.json").read_text())


def names() -> List[str]:
    return sorted(manifest())


def structure_path(name: str) -> Path:
    return ZOO / f"{name}.structure.onnx"


def _tensors(graph: Any) -> Iterator[Any]:
    import onnx

    for t in graph.initializer:
        yield t
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                yield a.t
            elif a.type == onnx.AttributeProto.GRAPH:
                yield from _tensors(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    yield from _tensors(g)


def _fill(st: Dict[str, Any], rng: np.random.Generator) -> np.ndarray:
    shape = tuple(st["shape"])
    dtype = np.dtype(st["dtype"])
    pattern = st.get("pattern")
    if pattern in ("tril", "triu"):
        n = shape[-1]
        tri = np.tril if pattern == "tril" else np.triu
        mask = np.broadcast_to(tri(np.ones((n, n), bool)), shape)
        inside, outside = st["values"]
        return np.where(mask, inside, outside).astype(dtype)
    if pattern == "arange":
        return np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)
    if pattern == "constant" or st["std"] == 0.0:
        return np.full(shape, st["mean"], dtype=dtype)
    if dtype.kind == "f":
        a = rng.normal(st["mean"], st["std"], size=shape)
        return np.clip(a, st["min"], st["max"]).astype(dtype)
    if dtype.kind == "b":
        return rng.random(size=shape) < st["mean"]
    lo, hi = int(st["min"]), int(st["max"])
    return rng.integers(lo, hi + 1, size=shape).astype(dtype)


def materialize(name: str, seed: int = 0, out_dir: Optional[os.PathLike] = None) -> Path:
    """Write a runnable ONNX model of zoo model `name` (weights drawn with `seed`); reused when
    the file is there already. Default folder: $ZOO_CACHE or the system temp dir."""
    import tempfile

    import onnx
    from onnx import numpy_helper

    out = Path(out_dir or os.environ.get("ZOO_CACHE") or Path(tempfile.gettempdir()) / "wb-zoo")
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}-s{seed}.onnx"
    if path.exists():
        return path
    stats = json.loads((ZOO / f"{name}.stats.json").read_text())
    model = onnx.load(str(structure_path(name)), load_external_data=False)
    # one generator per tensor (seeded by name): the values do not depend on tensor order
    for t in _tensors(model.graph):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        st = stats.get(t.name)
        if st is None:
            raise KeyError(f"{name}: no statistics for stripped tensor '{t.name}'")
        rng = np.random.default_rng([seed, zlib.crc32(t.name.encode())])
        filled = numpy_helper.from_array(_fill(st, rng), t.name)
        del t.external_data[:]
        t.data_location = onnx.TensorProto.DEFAULT
        t.raw_data = filled.raw_data
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    onnx.save(model, str(tmp))
    os.replace(tmp, path)
    return path


def input_shapes(name: str, batch: int = 1) -> Dict[str, List[int]]:
    """Concrete input shapes: `batch` on axis 0, the export's example size on the other dims."""
    shapes = {}
    for inp, dims in manifest()[name]["inputs"]:
        shapes[inp] = [batch if k == 0 and not isinstance(d, int) else
                       (d if isinstance(d, int) else EXAMPLE_DIMS.get(d, 16))
                       for k, d in enumerate(dims)]
    return shapes


def sample_inputs(name: str, batch: int = 1, seed: int = 0) -> Dict[str, np.ndarray]:
    """A fixed seeded input: images/audio uniform [0, 1), token ids in [0, 1000), masks all 1."""
    import onnx

    rng = np.random.default_rng(seed)
    model = onnx.load(str(structure_path(name)), load_external_data=False)
    types = {i.name: i.type.tensor_type.elem_type for i in model.graph.input}
    feeds = {}
    for inp, shape in input_shapes(name, batch).items():
        if types[inp] == onnx.TensorProto.INT64:
            feeds[inp] = (np.ones(shape, np.int64) if "mask" in inp
                          else rng.integers(0, 1000, size=shape).astype(np.int64))
        else:
            feeds[inp] = rng.random(size=shape).astype(np.float32)
    return feeds
