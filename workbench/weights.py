"""Weights by reference: a model's structure without its weight bytes, each large weight named
by the file, offset and length it lies at, read as a numpy memmap only by the run that needs it.

    ref = by_reference("model.onnx")         # structure; external weights as references
    refs = weight_refs(ref)                  # name -> WeightRef (file, offset, dtype, shape)
    seg = as_inputs(segment_model, refs)     # the weights a segment reads become its inputs
    feed.update({n: refs[n].array() for n in seg_weights})   # memmaps, nothing read yet

Why: a model over protobuf's 2 GB keeps its weights as external data, and serializing it with
its weights fails (`EncodeError`); copying them into every segment or candidate model costs
their size each time. onnxruntime refuses external-data locations outside the model's folder
(absolute paths, `..`, symlinks out), so a segment model written elsewhere cannot point at the
original file; fed as inputs from memmaps, the weights are neither copied (onnxruntime reads a
contiguous input where it lies) nor held after the run (the mapping goes with the arrays).
A reference keeps its absolute `location` in memory only: such a proto is never saved as is
(`as_inputs` / `restore` move the references in and out of the graph's inputs).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from workbench.errors import WorkbenchError
from workbench.model import ModelLike

EXTERNAL = 1  # TensorProto.EXTERNAL
# weights at least this large are kept as references (smaller ones, shapes and scalars, are
# read into the structure: ops such as Reshape and Slice want them as constants)
INLINE_BYTES = 64 << 10
STREAM_ENV = "WORKBENCH_STREAM_WEIGHTS_MB"
# models with more external weights than this run by reference: measured on a 0.23 GB decoder,
# `compare --to fp16` took 16 s at 0.33 GB peak by reference, 70 s at 1.9 GB in memory
STREAM_DEFAULT_MB = 64.0
PROTOBUF_SAFE_MB = 1536.0  # below this a model may still be loaded whole (a 2 GB protobuf cap)


@dataclass(frozen=True)
class WeightRef:
    """Where one weight lies: an absolute file, offset and length, element type and dims."""

    name: str
    file: str
    offset: int
    length: int
    elem_type: int
    dims: tuple

    @property
    def nbytes(self) -> int:
        return self.length

    def array(self) -> np.ndarray:
        """The weight as a read-only memmap (nothing is read until a run touches it)."""
        from onnx import helper

        dt = np.dtype(helper.tensor_dtype_to_np_dtype(self.elem_type))
        if not self.dims or int(np.prod(self.dims)) == 0:
            return np.zeros(self.dims, dt)
        return np.memmap(self.file, dtype=dt, mode="r", offset=self.offset,
                         shape=tuple(self.dims))


def _external(proto: Any) -> Iterator[Tuple[Any, str, int, int]]:
    """(initializer, location, offset, length) of each weight kept outside the model (the
    external-data keys; a missing offset or length reads 0)."""
    for t in proto.graph.initializer:
        if t.data_location == EXTERNAL:
            kv = {e.key: e.value for e in t.external_data}
            yield (t, kv.get("location", ""), int(kv.get("offset") or 0),
                   int(kv.get("length") or 0))


def external_bytes(path: Any) -> int:
    """Bytes of external weights a model file references (its structure is read, no data)."""
    import onnx

    m = onnx.load(str(path), load_external_data=False)
    return sum(length for _, _, _, length in _external(m))


def stream_threshold_bytes(threshold_mb: Optional[float] = None) -> int:
    """Models with more external weight bytes than this run by reference: `threshold_mb`,
    else $WORKBENCH_STREAM_WEIGHTS_MB, else STREAM_DEFAULT_MB."""
    if threshold_mb is None:
        threshold_mb = float(os.environ.get(STREAM_ENV) or STREAM_DEFAULT_MB)
    return int(float(threshold_mb) * 2 ** 20)


def streams(model: ModelLike, threshold_mb: Optional[float] = None) -> bool:
    """Should `model` (a path) run by reference: more external weights than the threshold?
    In-memory models hold their weights already: no."""
    if not isinstance(model, (str, os.PathLike)):
        return False
    return external_bytes(model) > stream_threshold_bytes(threshold_mb)


def by_reference(path: Any, inline_bytes: int = INLINE_BYTES) -> Any:
    """The model's structure with its external weights as references (absolute `location`,
    in memory only); external weights under `inline_bytes` are read in. Missing or short data
    files are a WorkbenchError naming the file and the weight."""
    import onnx
    from onnx import external_data_helper

    path = Path(path)
    m = onnx.load(str(path), load_external_data=False)
    base = path.resolve().parent
    sizes: Dict[str, int] = {}
    for t, loc, offset, length in _external(m):
        f = (base / loc).resolve()
        if not f.is_file():
            raise WorkbenchError(f"the external data file '{loc}' of weight '{t.name}' is missing",
                                 file=str(path), hint="keep the data file beside the model")
        if not length:
            length = sizes.setdefault(str(f), f.stat().st_size) - offset
        if offset + length > sizes.setdefault(str(f), f.stat().st_size):
            raise WorkbenchError(f"weight '{t.name}' lies beyond the end of '{loc}'",
                                 file=str(path), hint="the data file is truncated: re-export")
        if length < inline_bytes:
            external_data_helper.load_external_data_for_tensor(t, str(base))
            t.data_location = onnx.TensorProto.DEFAULT
            del t.external_data[:]
            continue
        del t.external_data[:]
        for k, v in (("location", str(f)), ("offset", str(offset)), ("length", str(length))):
            e = t.external_data.add()
            e.key, e.value = k, v
    return m


def weight_refs(proto: Any) -> Dict[str, WeightRef]:
    """The references (`by_reference`) among the graph's initializers, by name."""
    out: Dict[str, WeightRef] = {}
    for t, loc, offset, length in _external(proto):
        if os.path.isabs(loc):  # (relative to a folder we do not know: not a reference of ours)
            out[t.name] = WeightRef(t.name, loc, offset, length, int(t.data_type), tuple(t.dims))
    return out


def holds_references(proto: Any) -> bool:
    """Does the graph hold weights by reference (`by_reference`)?"""
    return any(os.path.isabs(loc) for _, loc, _, _ in _external(proto))


def as_inputs(proto: Any, names: Optional[Iterable[str]] = None) -> Any:
    """`proto` (changed in place, returned) with its referenced weights (or those of `names`
    among them) declared as graph inputs instead of initializers: a model onnxruntime loads
    from anywhere, the weights fed as memmaps (`feeds_for`)."""
    from onnx import helper

    refs = weight_refs(proto)
    want = set(refs) if names is None else set(names) & set(refs)
    if not want:
        return proto
    g = proto.graph
    keep = [t for t in g.initializer if t.name not in want]
    del g.initializer[:]
    g.initializer.extend(keep)
    declared = {vi.name for vi in g.input}
    for n in [n for n in refs if n in want]:  # (in the graph's order)
        if n not in declared:
            r = refs[n]
            g.input.append(helper.make_tensor_value_info(n, r.elem_type, list(r.dims)))
    return proto


def restore(proto: Any, refs: Dict[str, WeightRef]) -> Any:
    """Undo `as_inputs`: the graph inputs named in `refs` become referenced initializers
    again (changed in place, returned)."""
    import onnx

    g = proto.graph
    keep = [vi for vi in g.input if vi.name not in refs]
    back = [vi.name for vi in g.input if vi.name in refs]
    del g.input[:]
    g.input.extend(keep)
    for n in back:
        r = refs[n]
        t = onnx.TensorProto(name=n, data_type=r.elem_type, dims=list(r.dims),
                             data_location=onnx.TensorProto.EXTERNAL)
        for k, v in (("location", r.file), ("offset", str(r.offset)),
                     ("length", str(r.length))):
            e = t.external_data.add()
            e.key, e.value = k, v
        g.initializer.append(t)
    return proto


def feeds_for(refs: Dict[str, WeightRef], names: Sequence[str]) -> Dict[str, np.ndarray]:
    """Memmaps of the weights `names` (those that are references)."""
    return {n: refs[n].array() for n in names if n in refs}


def node_weight_bytes(proto: Any) -> List[int]:
    """Per node of the main graph: bytes of referenced weights it reads (each weight counted
    at its first reader only: the segment that runs it maps it)."""
    refs = weight_refs(proto)
    seen: set = set()
    out: List[int] = []
    for n in proto.graph.node:
        b = 0
        for x in n.input:
            if x in refs and x not in seen:
                seen.add(x)
                b += refs[x].nbytes
        out.append(b)
    return out
