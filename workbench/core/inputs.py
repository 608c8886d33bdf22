"""A model's real inputs (graph inputs that are not initializers): name, element type, dims.

Kept apart from `calibration` so that profile checks and the build path read them without
importing numpy or the onnx package (the protobuf classes are enough; see `onnx_light`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, List, Optional, Sequence, Tuple, Union

from workbench.core.model import ModelLike, as_model

# ONNX TensorProto elem type -> numpy dtype name (only types a model input can sensibly have)
ONNX_TO_NP_NAME = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
                   7: "int64", 9: "bool", 10: "float16", 11: "float64", 12: "uint32",
                   13: "uint64"}


@dataclass
class InputSpec:
    """One model input: name, ONNX element type, dims (int, or str symbol, or None)."""

    name: str
    elem_type: int
    dims: List[Union[int, str, None]]

    @property
    def dtype(self) -> Any:
        """The numpy dtype (None if exotic: strings, complex, 8-bit floats, ...)."""
        name = ONNX_TO_NP_NAME.get(self.elem_type)
        if name is None:
            return None
        import numpy as np

        return np.dtype(name)

    @property
    def dynamic_axes(self) -> List[int]:
        return [i for i, d in enumerate(self.dims) if not isinstance(d, int)]

    def shape_str(self) -> str:
        return "[" + ", ".join("?" if d is None else str(d) for d in self.dims) + "]"


def model_inputs(model: ModelLike) -> List[InputSpec]:
    """The real inputs of the model (graph inputs that are not initializers)."""
    proto = as_model(model).proto
    inits = {i.name for i in proto.graph.initializer}
    specs = []
    for vi in proto.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dims: List[Union[int, str, None]] = []
        if tt.HasField("shape"):
            for d in tt.shape.dim:
                if d.HasField("dim_value") and d.dim_value > 0:
                    dims.append(int(d.dim_value))
                elif d.HasField("dim_param") and d.dim_param:
                    dims.append(d.dim_param)
                else:
                    dims.append(None)
        specs.append(InputSpec(vi.name, tt.elem_type, dims))
    return specs


def zero_size_axes(model: ModelLike) -> List[Tuple[str, int, str]]:
    """(input, axis, how) for input axes TensorRT's parser reads as a FIXED size 0 while the
    model means them as unknown: a dim_param set to "" or a dim_value of 0 (an absent dim
    and a negative dim_value are dynamic to both)."""
    proto = as_model(model).proto
    inits = {i.name for i in proto.graph.initializer}
    out = []
    for vi in proto.graph.input:
        tt = vi.type.tensor_type
        if vi.name in inits or not tt.HasField("shape"):
            continue
        for axis, d in enumerate(tt.shape.dim):
            which = d.WhichOneof("value")
            if which == "dim_param" and not d.dim_param:
                out.append((vi.name, axis, "has an empty dim_param '', which TensorRT's "
                            "parser reads as a fixed size 0"))
            elif which == "dim_value" and d.dim_value == 0:
                out.append((vi.name, axis, "has size 0: TensorRT would build for empty "
                            "tensors only"))
    return out


def shape_text(model: ModelLike, name: str) -> str:
    """The input's shape as a set_input_shapes value (AxBxC): unknown axes become N (axis 0)
    or d<axis>, so every axis has a size or a name."""
    for s in model_inputs(model):
        if s.name == name:
            return "x".join(str(d) if d is not None else ("N" if i == 0 else f"d{i}")
                            for i, d in enumerate(s.dims))
    return "N"


# ----------------------------------------------------------------------------- leading axes
# Is axis 0 of an input a batch (one entry per sample: a file may be cut into samples along
# it) or a count of items that one sample holds (points of a cloud, boxes of an image)? Every
# caller that splits, stacks, counts or defaults along axis 0 asks `leading_axes`, so the
# compare, precision, profiles, calibration and build paths cannot disagree.
_BATCH_DIMS = {"batch", "batchsize", "bs", "b", "n", "nb", "nbatch", "batches"}
_COUNT_FIRST = {"num", "n", "nb", "number", "count", "cnt", "total", "max"}
_COUNT_LAST = {"count", "cnt", "num", "number", "total"}
_ITEM_WORDS = {
    "point", "points", "roi", "rois", "box", "boxes", "bbox", "bboxes", "detection",
    "detections", "det", "dets", "anchor", "anchors", "proposal", "proposals", "pillar",
    "pillars", "voxel", "voxels", "node", "nodes", "edge", "edges", "token", "tokens",
    "object", "objects", "instance", "instances", "keypoint", "keypoints", "vertex",
    "vertices", "verts", "face", "faces", "item", "items", "particle", "particles", "atom",
    "atoms", "query", "queries", "element", "elements", "nnz", "indices", "pairs"}
SEQUENCE_WORDS = {"seq", "sequence", "len", "length", "time", "times", "frame", "frames",
                   "step", "steps", "timesteps"}


def dim_words(dim: str) -> List[str]:
    """A dim name's lowercase words: `num_points` -> [num, points], `numRois` -> [num, rois]."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", dim)
    return [w for w in re.split(r"[^a-z0-9]+", spaced.lower()) if w]


def dim_kind(dim: Any) -> str:
    """What a dim's name says it is: "batch" (batch, batch_size, N, bs ...), "count" (a count
    of items one sample holds: num_points, n_rois, boxes, box_count, tokens, seq_len ...) or
    "generic" (no name, or a symbol that says nothing: s0, unk__12, dim_0)."""
    if not isinstance(dim, str) or not dim:
        return "generic"
    words = dim_words(dim)
    if not words:
        return "generic"
    if dim.lower() in _BATCH_DIMS or any("batch" in w for w in words):
        return "batch"
    if len(words) > 1 and (words[0] in _COUNT_FIRST or words[-1] in _COUNT_LAST):
        return "count"
    items = _ITEM_WORDS | SEQUENCE_WORDS
    if any(w in items for w in words) or any(
            w[:1] == "n" and w[1:] in items or w[:3] == "num" and w[3:] in items for w in words):
        return "count"
    return "generic"


_TOKEN_WORDS = {"token", "tokens", "word", "words", "subword", "subwords", "char", "chars",
                "ids", "vocab"}


def is_item_count(dim: Any) -> bool:
    """A dim named as a count of items that are not tokens or time steps (num_edges, n_nodes,
    box_count, num_points): `dim_kind` says "count" and no word is a token or sequence word.
    Such an axis is a range of sizes, and calling it a token axis would be wrong."""
    if dim_kind(dim) != "count":
        return False
    words = dim_words(str(dim))
    return not any(w in _TOKEN_WORDS or w in SEQUENCE_WORDS or
                   w[:1] == "n" and w[1:] in _TOKEN_WORDS | SEQUENCE_WORDS or
                   w[:3] == "num" and w[3:] in _TOKEN_WORDS | SEQUENCE_WORDS for w in words)


def _output_dims(model: Any) -> List[List[Union[int, str, None]]]:
    """The declared dims of the graph outputs ([] for an output without a shape)."""
    out = []
    for vi in as_model(model).proto.graph.output:
        tt = vi.type.tensor_type
        dims: List[Union[int, str, None]] = []
        if tt.HasField("shape"):
            for d in tt.shape.dim:
                dims.append(int(d.dim_value) if d.HasField("dim_value") and d.dim_value > 0
                            else (d.dim_param or None))
        out.append(dims)
    return out


def is_batch_axis(spec: InputSpec, axis: int, specs: Sequence[InputSpec],
                  outputs: Optional[Sequence[Sequence[Any]]] = None) -> bool:
    """Is `axis` of input `spec` a batch (among the model's inputs `specs` and its outputs'
    declared dims `outputs`)? Only a dynamic axis 0 can be. Its name decides first (batch,
    batch_size, N, bs: yes; num_points, n_rois, boxes, box_count, tokens, seq_len: no); for a
    name that says nothing (s0, unk__3, none) the model's structure: not a batch when another
    input's axis 0 is named a batch under another name (rois [k, 4] beside image [batch, ...]),
    a batch when an output carries the same dim at axis 0, not one when every output has a
    fixed axis 0 (a batch would reach them); else a batch, as trtexec assumes."""
    if axis != 0 or not spec.dims or isinstance(spec.dims[0], int):
        return False
    dim = spec.dims[0]
    kind = dim_kind(dim)
    if kind != "generic":
        return kind == "batch"
    named = {s.dims[0] for s in specs if s.dims and dim_kind(s.dims[0]) == "batch"}
    if isinstance(dim, str) and named and dim not in named:
        return False
    outs = [d for d in (outputs or []) if d]
    if isinstance(dim, str) and any(d[0] == dim for d in outs):
        return True
    if outs and len(outs) == len(outputs or []) and all(isinstance(d[0], int) for d in outs):
        return False
    return True


@dataclass(frozen=True)
class LeadingAxes:
    """Per model: the inputs whose axis 0 is a batch, and those whose dynamic axis 0 is not
    (input -> its dim label). With any of the latter a data file is ONE sample: it is never
    cut along axis 0 (that would cut a point cloud into points), counted by its axis 0 or
    split into batches; with none, a file's axis 0 counts its samples."""

    batch: FrozenSet[str]
    items: Tuple[Tuple[str, str], ...] = ()

    @property
    def splits(self) -> bool:
        """May a file be cut into samples along axis 0 of the `batch` inputs?"""
        return not self.items

    def note(self) -> Optional[str]:
        """The sentence users get once (None when every dynamic axis 0 is a batch)."""
        if not self.items:
            return None
        by_dim: dict = {}
        for n, d in self.items:
            by_dim.setdefault(d, []).append(f"'{n}'")
        said = "; ".join(", ".join(ns) + (f" ({d})" if d else "") for d, ns in by_dim.items())
        return (f"axis 0 of {said} is not a batch but a count of items in one sample: each "
                "file (or feed) is one sample, never cut into samples along it")


def leading_axes(model: ModelLike) -> LeadingAxes:
    """`LeadingAxes` of a model (a path, Model or ModelProto): `is_batch_axis` on each input."""
    specs = model_inputs(model)
    outputs = _output_dims(model)
    batch, items = set(), []
    for s in specs:
        if not s.dims or isinstance(s.dims[0], int):
            continue
        if is_batch_axis(s, 0, specs, outputs):
            batch.add(s.name)
        else:
            items.append((s.name, s.dims[0] if isinstance(s.dims[0], str) else ""))
    return LeadingAxes(frozenset(batch), tuple(items))


def not_batch_finding(model: ModelLike, source: str = "inputs") -> Any:
    """The info finding users get once where samples are counted or cut (compare, precision,
    profiles) when some input's axis 0 is not a batch; None otherwise."""
    note = leading_axes(model).note()
    if note is None:
        return None
    from workbench.core.findings import Finding

    names = [n for n, _ in leading_axes(model).items]
    return Finding("info", "not-a-batch", note, tensors=names, source=source,
                   hint="a folder of files (one .npz per sample) gives several samples; "
                        "--samples counts files")


# ----------------------------------------------------------------------------- decoders
# A decoder with a KV cache is called with related sizes: the cache holds `past` positions,
# `new` tokens come in, and an attention mask (and the present outputs) are `past + new` long;
# position ids count on from the cache. Drawn independently the sizes do not fit together
# (onnxruntime: "Attempting to broadcast an axis by a dimension other than 1. 8 by 16").
_CACHE_DIM_HINTS = ("past", "cache", "history", "kv_len", "kv_seq", "memory_len")
_CACHE_INPUT = re.compile(r"^(past|cache)|past_key|past_value|key_cache|value_cache|kv_cache|"
                          r"(^|[._])past([._]|$)")
_TOTAL_DIM = re.compile(r"total|all_seq|kv_seq_len_total|\+")
_FLOATS = (1, 10, 11, 16)


def dim_key(spec: InputSpec, axis: int) -> Any:
    """What identifies a dynamic axis across inputs: its dim name (inputs that share it share
    the size), else (input name, axis)."""
    d = spec.dims[axis]
    return d if isinstance(d, str) and d else (spec.name, axis)


def is_cache_axis(spec: InputSpec, axis: int) -> bool:
    """A KV-cache length axis: a dynamic non-batch axis named like past_sequence_length /
    past_len / cache_len, or the dynamic non-batch axis of a float input of rank >= 3 named
    past_key_values.* / past_key.* / past* / *cache*. Its length is 0 on the first decode
    step, not the export's trace value."""
    if axis == 0 or axis >= len(spec.dims) or isinstance(spec.dims[axis], int):
        return False
    dim = str(spec.dims[axis] or "").lower()
    if any(h in dim for h in _CACHE_DIM_HINTS) and not _TOTAL_DIM.search(dim):
        return True
    return spec.elem_type in _FLOATS and len(spec.dims) >= 3 and \
        bool(_CACHE_INPUT.search(spec.name.lower()))


def graph_cache_axes(proto: Any, specs: Sequence[InputSpec]) -> List[Tuple[InputSpec, int]]:
    """(input, axis) of float graph inputs that a Concat joins to new values along a dynamic
    axis: a cache the graph extends, whatever its name (the present = past + new)."""
    by_name = {s.name: s for s in specs if s.elem_type in _FLOATS and len(s.dims) >= 3}
    out: List[Tuple[InputSpec, int]] = []
    for n in proto.graph.node:
        if n.op_type != "Concat" or len(n.input) < 2:
            continue
        axis = next((a.i for a in n.attribute if a.name == "axis"), 0)
        for x in n.input:
            s = by_name.get(x)
            if s is None:
                continue
            ax = axis % len(s.dims)
            if ax and not isinstance(s.dims[ax], int) and (s, ax) not in out:
                out.append((s, ax))
    return out


@dataclass(frozen=True)
class DecoderDims:
    """How a KV-cache decoder's input sizes relate (`decoder_dims`): the token ids, every
    cache-length axis (all hold `past`), the axes as long as past + new (attention masks) and
    the position-id inputs (values past .. past + new - 1, `new` long)."""

    ids: InputSpec
    cache: Tuple[Tuple[InputSpec, int], ...]
    total: Tuple[Tuple[InputSpec, int], ...]
    positions: Tuple[InputSpec, ...] = ()

    @property
    def new_key(self) -> Any:
        return dim_key(self.ids, 1)

    @property
    def cache_keys(self) -> set:
        return {dim_key(s, a) for s, a in self.cache}

    @property
    def total_keys(self) -> set:
        return {dim_key(s, a) for s, a in self.total}

    def sizes(self, new: int, past: int) -> Dict[Tuple[str, int], int]:
        """(input, axis) -> size for a call with `past` cached positions and `new` tokens."""
        out: Dict[Tuple[str, int], int] = {}
        if not isinstance(self.ids.dims[1], int):
            out[(self.ids.name, 1)] = new
        for p in self.positions:
            if len(p.dims) >= 2 and not isinstance(p.dims[-1], int):
                out[(p.name, len(p.dims) - 1)] = new
        for s, a in self.cache:
            out[(s.name, a)] = past
        for s, a in self.total:
            out[(s.name, a)] = past + new
        return out

    def values(self, shapes: Dict[str, Sequence[int]], past: int) -> Dict[str, Any]:
        """Input values the relations fix: position ids counting on from the cache, masks
        that keep every position (for inputs of these `shapes`)."""
        import numpy as np

        out: Dict[str, Any] = {}
        for p in self.positions:
            if p.name in shapes and p.dtype is not None:
                shp = tuple(int(d) for d in shapes[p.name])
                n = shp[-1] if shp else 1
                out[p.name] = np.broadcast_to(np.arange(past, past + n), shp).astype(p.dtype)
        for s, _ in self.total:  # (a *padding* mask marks padding with 1: all zeros)
            if s.name in shapes and s.dtype is not None:
                fill = np.zeros if "padding" in s.name.lower() else np.ones
                out[s.name] = fill(tuple(int(d) for d in shapes[s.name]), s.dtype)
        return out


def with_cache_names(proto: Any, specs: Sequence[InputSpec]) -> List[InputSpec]:
    """`specs` with each cache axis only the graph reveals (`graph_cache_axes`: a Concat of
    the input and new values) named as a cache length (`past_<dim>`, the same name for a dim
    shared across inputs), so name-reading rules (`is_cache_axis`) see it too."""
    found = [(s, a) for s, a in graph_cache_axes(proto, specs) if not is_cache_axis(s, a)]
    if not found:
        return list(specs)
    rename = {(s.name, a): "past_" + (s.dims[a] if isinstance(s.dims[a], str) and s.dims[a]
                                      else f"{s.name}_{a}") for s, a in found}
    by_dim = {s.dims[a]: rename[(s.name, a)] for s, a in found
              if isinstance(s.dims[a], str) and s.dims[a]}
    out = []
    for s in specs:
        dims = [rename.get((s.name, a)) or (by_dim.get(d) if isinstance(d, str) else None) or d
                for a, d in enumerate(s.dims)]
        out.append(InputSpec(s.name, s.elem_type, dims))
    return out


def _is_mask(spec: InputSpec) -> bool:
    return "mask" in spec.name.lower()


def _is_positions(spec: InputSpec) -> bool:
    n = spec.name.lower()
    return "position" in n or n in ("pos", "pos_ids", "positions")


def decoder_dims(model: ModelLike, specs: Optional[Sequence[InputSpec]] = None
                 ) -> Optional[DecoderDims]:
    """The related sizes of a decoder with a KV cache: token ids (an integer [batch, L] input
    that is not a mask or positions), its cache axes (`is_cache_axis`, or a float input a
    Concat joins to new values along a dynamic axis) and its past + new axes (an integer or
    boolean [batch, L] mask whose L is neither the ids' length nor a cache length, or a dim
    named total_* / `past + 1`); None for a model that is not such a decoder. `specs`: the
    inputs to consider (default: the model's). The one place that knows how these dims relate
    (random inputs, default and serving profiles read it)."""
    proto = as_model(model).proto if model is not None else None
    if specs is None:
        specs = model_inputs(proto)
    specs = list(specs)
    ints = [s for s in specs if s.elem_type in (6, 7) and len(s.dims) == 2 and
            1 in s.dynamic_axes]
    ids = [s for s in ints if not _is_mask(s) and not _is_positions(s)]
    caches = [(s, a) for s in specs for a in s.dynamic_axes if is_cache_axis(s, a)]
    if proto is not None:
        caches += [c for c in graph_cache_axes(proto, specs) if c not in caches]
    if not ids or not caches:
        return None
    tok = dim_key(ids[0], 1)
    skip = {tok} | {dim_key(s, a) for s, a in caches}
    total = [(s, 1) for s in specs if s.elem_type in (6, 7, 9, 1) and len(s.dims) == 2
             and _is_mask(s) and 1 in s.dynamic_axes and dim_key(s, 1) not in skip]
    total += [(s, a) for s in specs for a in s.dynamic_axes
              if isinstance(s.dims[a], str) and _TOTAL_DIM.search(s.dims[a].lower())
              and (s, a) not in total and dim_key(s, a) not in skip]
    positions = tuple(s for s in specs if s.elem_type in (6, 7) and _is_positions(s)
                      and s.dims and not isinstance(s.dims[-1], int))
    return DecoderDims(ids[0], tuple(caches), tuple(total), positions)


def relate_decoder_shapes(proto: Any, shapes: Dict[str, List[int]], guessed: set
                          ) -> Dict[str, Any]:
    """A KV-cache decoder's related sizes (`decoder_dims`), set in `shapes` (input -> dims)
    in place on the axes `guessed` (sized by no model or caller): every cache axis as long as
    the first one, masks as long as past + new, position ids as long as the new tokens.
    Returns the values the relations fix (positions counting on from the cache, masks keeping
    every position); {} for other models."""
    d = decoder_dims(proto)
    if d is None or d.ids.name not in shapes:
        return {}
    new = shapes[d.ids.name][1]
    # the past length: a mask's or a cache's that a caller (or the model) fixed, else the guess
    past = next((shapes[s.name][a] - new for s, a in d.total
                 if s.name in shapes and (s.name, a) not in guessed), None)
    if past is None:
        past = next((shapes[s.name][a] for s, a in d.cache
                     if s.name in shapes and (s.name, a) not in guessed), None)
    if past is None:
        s0, a0 = d.cache[0]
        past = shapes[s0.name][a0] if s0.name in shapes else 8
    past = max(0, int(past))
    related = dict(d.sizes(new, past))
    batch = shapes[d.ids.name][0] if shapes[d.ids.name] else None
    for s in [s for s, _ in d.cache + d.total] + list(d.positions):
        if batch is not None and s.dims and (s.name, 0) in guessed:
            related[(s.name, 0)] = batch  # (one batch for the ids, caches and masks)
    for (name, axis), size in related.items():
        if (name, axis) in guessed:
            shapes[name][axis] = size
    return d.values({n: shapes[n] for n in shapes}, past)
