"""Weights by reference: a model's structure without its weight bytes, each large weight named
by the file, offset and length it lies at, read as a numpy memmap only by the run that needs it.

    ref = by_reference(model)                # structure; external weights as references
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
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.model import ModelLike, WeightRef, as_model

__all__ = ["WeightRef", "by_reference", "weight_refs", "streams", "external_bytes", "as_inputs",
           "restore", "feeds_for", "node_weight_bytes", "holds_references"]

EXTERNAL = 1  # TensorProto.EXTERNAL
# weights at least this large are kept as references (smaller ones, shapes and scalars, are
# read into the structure: ops such as Reshape and Slice want them as constants)
INLINE_BYTES = 64 << 10
STREAM_ENV = "WORKBENCH_STREAM_WEIGHTS_MB"
# models with more external weights than this run by reference: measured on a 0.23 GB decoder,
# `compare --to fp16` took 16 s at 0.33 GB peak by reference, 70 s at 1.9 GB in memory
STREAM_DEFAULT_MB = 64.0
PROTOBUF_SAFE_MB = 1536.0  # below this a model may still be loaded whole (a 2 GB protobuf cap)


def _external(proto: Any) -> Iterator[Tuple[Any, str, int, int]]:
    """(initializer, location, offset, length) of each weight kept outside the model (the
    external-data keys; a missing offset or length reads 0)."""
    for t in proto.graph.initializer:
        if t.data_location == EXTERNAL:
            kv = {e.key: e.value for e in t.external_data}
            yield (t, kv.get("location", ""), int(kv.get("offset") or 0),
                   int(kv.get("length") or 0))


def external_bytes(model: ModelLike) -> int:
    """Bytes of external weights a model references (its structure is read, no data)."""
    return as_model(model).external_bytes


def stream_threshold_bytes(threshold_mb: Optional[float] = None) -> int:
    """Models with more external weight bytes than this run by reference: `threshold_mb`,
    else $WORKBENCH_STREAM_WEIGHTS_MB, else STREAM_DEFAULT_MB."""
    if threshold_mb is None:
        threshold_mb = float(os.environ.get(STREAM_ENV) or STREAM_DEFAULT_MB)
    return int(float(threshold_mb) * 2 ** 20)


def streams(model: ModelLike, threshold_mb: Optional[float] = None) -> bool:
    """Should `model` run by reference: more external weights than the threshold? A model
    built in memory holds its weights already: no."""
    m = as_model(model)
    if m.path is None or not m.external_files:
        return False
    return m.external_bytes > stream_threshold_bytes(threshold_mb)


def by_reference(model: ModelLike, inline_bytes: int = INLINE_BYTES) -> Any:
    """A copy of the handle's structure with its external weights as references (absolute
    `location`, in memory only: `Model.weight_locations`); external weights under
    `inline_bytes` are read in. Missing or short data files are a WorkbenchError naming the
    file and the weight."""
    import onnx
    from onnx import external_data_helper

    m = as_model(model)
    label = str(m.path) if m.path else m.name
    if m.missing_external:
        raise WorkbenchError(f"the external data file(s) {', '.join(sorted(set(m.missing_external)))}"
                             " are missing", file=label, hint="keep the data file beside the model")
    if m.truncated_external:
        raise WorkbenchError(f"weight {m.truncated_external[0]} lies beyond the end of its data "
                             "file", file=label, hint="the data file is truncated: re-export")
    locs = m.weight_locations
    out = onnx.ModelProto()
    out.CopyFrom(m.proto)  # (the structure: external weights are not in it)
    for t in out.graph.initializer:
        r = locs.get(t.name)
        if t.data_location != EXTERNAL or r is None:
            continue
        if r.length < inline_bytes:  # (onnx's reader: one way weights are read in)
            external_data_helper.load_external_data_for_tensor(t, str(m.base_dir))
            t.data_location = onnx.TensorProto.DEFAULT
            del t.external_data[:]
            continue
        del t.external_data[:]
        for k, v in (("location", r.file), ("offset", str(r.offset)), ("length", str(r.length))):
            e = t.external_data.add()
            e.key, e.value = k, v
    return out


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


SEGMENT_WEIGHTS_MB = 256.0  # weights one segment of a bounded run maps (`segment_groups`)


def segment_groups(proto: Any, names: Sequence[str], budget_mb: float = SEGMENT_WEIGHTS_MB,
                   ) -> List[List[str]]:
    """`names` (tensors the graph makes) in topological order, cut into groups so that the
    nodes up to each group's last tensor read at most about `budget_mb` of referenced weights
    beyond the previous group's: streamed a group at a time (`workbench.runtime.segments`), a run of
    a model held by reference maps that much, whatever the model's size. One node's weights
    are never split: a weight larger than the budget makes a group of its own."""
    from workbench.core.graphindex import GraphIndex

    per_node = node_weight_bytes(proto)
    made = GraphIndex.of(proto).producer
    order = sorted((made[x], x) for x in dict.fromkeys(names) if x in made)
    budget = budget_mb * 2 ** 20
    groups: List[List[str]] = []
    cur: List[str] = []
    acc, last = 0, -1
    for i, x in order:
        step = sum(per_node[last + 1:i + 1])
        if cur and acc + step > budget:
            groups.append(cur)
            cur, acc = [], 0
        cur.append(x)
        acc += step
        last = max(last, i)
    if cur:
        groups.append(cur)
    return groups

