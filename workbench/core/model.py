"""Open and save ONNX models safely.

`open_model(path)` reads the graph *without* weight bytes (external data stays on disk), checks
external-data references stay inside the model's folder, gives every node a stable id, and turns
every way a file can be wrong (missing, empty, truncated, not ONNX, escaping paths) into a
WorkbenchError that names the file. Weights are loaded only by work that needs them
(`Model.load_weights()`), which fails clearly when an external-data file is missing.
`Model.index` is the model's one `GraphIndex` (workbench.core.graphindex), built on first use and
cached: node ids, lookups, producers/consumers, scopes and declared types all come from it.
"""
from __future__ import annotations

import copy
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Dict, Iterator, List, Optional, Tuple, Union

from workbench.core.errors import Finding, WorkbenchError
from workbench.core.findings import step
from workbench.core.fsutil import atomic_write_bytes
from workbench.core.graphindex import GraphIndex, stable_node_ids  # noqa: F401 (re-export)
from workbench.core.onnx_light import onnx_proto

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import onnx

    from workbench.core.workspace import ModelWorkspace

PathLike = Union[str, "os.PathLike[str]"]
# What every capability accepts at its front door; `as_model` turns it into the one handle.
ModelLike = Union[str, "os.PathLike[str]", "Model", "onnx.ModelProto"]
_TEXT_FORMATS = (".onnxtxt", ".textproto", ".txtpb", ".json", ".onnxjson")


def _iter_graphs(graph: "onnx.GraphProto") -> Iterator["onnx.GraphProto"]:
    """The graph and every subgraph (If/Loop/Scan bodies), depth first."""
    onnx = onnx_proto()

    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _iter_graphs(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _iter_graphs(g)


def iter_tensors_with_data(model: "onnx.ModelProto") -> Iterator["onnx.TensorProto"]:
    """Initializers of all graphs plus Constant-node tensors."""
    onnx = onnx_proto()

    for g in _iter_graphs(model.graph):
        yield from g.initializer
        for node in g.node:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.TENSOR:
                    yield attr.t


def external_location(tensor: "onnx.TensorProto") -> Optional[str]:
    onnx = onnx_proto()

    if tensor.data_location != onnx.TensorProto.EXTERNAL:
        return None
    for kv in tensor.external_data:
        if kv.key == "location":
            return kv.value
    return ""


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

    def array(self) -> "np.ndarray":
        """The weight as a read-only memmap (nothing is read until a run touches it)."""
        import numpy as np
        from onnx import helper

        dt = np.dtype(helper.tensor_dtype_to_np_dtype(self.elem_type))
        if not self.dims or int(np.prod(self.dims)) == 0:
            return np.zeros(self.dims, dt)
        return np.memmap(self.file, dtype=dt, mode="r", offset=self.offset,
                         shape=tuple(self.dims))


# What opening the file gives a handle; a handle made from a path alone (`as_model(path,
# opened=False)`) reads the file the first time one of these is asked for.
_OPENED = ("proto", "size_bytes", "external_files", "missing_external", "truncated_external",
           "absent_weights", "sparse_weights", "warnings")


class Model:
    """The one handle of an ONNX model: the graph without weight bytes, where each weight lives
    (`weight_locations`), its content hash (memoised by path, size and mtime) and graph index,
    built once each; the weights are loaded at most once (`with_weights`).

    A handle made from a path alone (`as_model(path, opened=False)`) has only its path and
    hash until something reads its structure: a cached build looks its engine up without
    parsing the model (or importing onnx)."""

    proto: "onnx.ModelProto"
    size_bytes: int
    external_files: List[Path]
    missing_external: List[str]
    truncated_external: List[str]
    # initializers that declare a shape but store no data (a weightless export)
    absent_weights: List[str]
    # weights stored as sparse tensors (graph.sparse_initializer)
    sparse_weights: List[str]
    warnings: List[Finding]

    def __init__(self, proto: "onnx.ModelProto", path: Optional[Path] = None,
                 size_bytes: int = 0) -> None:
        self.path = path
        self.proto = proto
        self.size_bytes = size_bytes
        self.external_files, self.missing_external, self.truncated_external = [], [], []
        self.absent_weights, self.sparse_weights, self.warnings = [], [], []
        self._reset()

    def _reset(self) -> None:
        self._hash: Optional[str] = None
        self._index: Optional[GraphIndex] = None
        self._weighted: Optional["onnx.ModelProto"] = None
        self._locations: Optional[Dict[str, WeightRef]] = None

    @classmethod
    def unopened(cls, path: PathLike) -> "Model":
        """A handle of the file at `path` (which must exist) that opens it on first use."""
        p = Path(path)
        if not p.is_file():
            raise WorkbenchError("file not found" if not p.exists() else "not a file",
                                 file=str(p), hint="check the path")
        m = cls.__new__(cls)
        m.path = p
        m._reset()
        return m

    @property
    def opened(self) -> bool:
        """Has the structure been read (always, for a handle not made by `unopened`)?"""
        return "proto" in self.__dict__

    if not TYPE_CHECKING:
        def __getattr__(self, name: str):
            # only reached for attributes not set: those of an unopened handle
            d = self.__dict__
            if name in _OPENED and "path" in d and "proto" not in d:
                opened = open_model(d["path"])
                for k in _OPENED:
                    d[k] = opened.__dict__[k]
                return d[name]
            raise AttributeError(name)

    def __repr__(self) -> str:
        state = f"{len(self.proto.graph.node)} nodes" if self.opened else "not opened"
        return f"Model(path={str(self.path)!r}, {state})"

    @property
    def graph(self) -> "onnx.GraphProto":
        return self.proto.graph

    @property
    def name(self) -> str:
        return self.path.name if self.path else (self.proto.graph.name or "model")

    @property
    def base_dir(self) -> Optional[Path]:
        return self.path.parent if self.path else None

    @property
    def weights_available(self) -> bool:
        return not self.missing_external and not self.absent_weights

    def require_weights(self, what: str = "this") -> None:
        """Raise the one-line WorkbenchError (category "weights") when the model's weights are
        not all stored where runtimes read them: none stored (a weightless export), or stored
        as sparse tensors, which TensorRT's parser does not read (densify them first)."""
        from workbench.core import blame

        label = str(self.path) if self.path else self.name
        bound = str(self.path) if self.path else None  # (steps keep {model} without a path)
        if self.absent_weights:
            n, total = len(self.absent_weights), len(self.graph.initializer)
            raise WorkbenchError(
                f"the model stores no weights: {n} of {total} initializer(s) declare a shape "
                f"but hold no data ({blame.names(self.absent_weights)}); {what} needs them",
                file=label, category=blame.WEIGHTS, hint=blame.absent_weights_hint(),
                next_steps=[st.bound(model=bound) for st in blame.absent_weights_steps()])
        if self.sparse_weights:
            raise WorkbenchError(
                f"the model stores weights as sparse tensors ({blame.names(self.sparse_weights)})"
                f", which TensorRT and the graph tools do not read; {what} needs them dense",
                file=label, category=blame.WEIGHTS, hint="write a dense copy",
                next_steps=[step("fix", "{model}", recipe="densify_sparse",
                                 o=_dense_name(label) if self.path else "{stem}.dense.onnx",
                                 why="stores each sparse weight as a dense tensor")
                            .bound(model=bound)])

    @property
    def index(self) -> GraphIndex:
        """The model's graph index (ids, producers/consumers, scopes, types), built once."""
        if self._index is None:
            self._index = GraphIndex.of(self.proto, label=self.name)
        return self._index

    @property
    def node_ids(self) -> List[str]:
        return self.index.ids

    def node_index(self, node_id: str) -> int:
        """Index in graph.node of a node given by stable id or by a name only it has
        (`GraphIndex.node_index`: an ambiguous or unknown name raises naming candidates)."""
        return self.index.node_index(node_id)

    def node_by_id(self, node_id: str) -> "onnx.NodeProto":
        return self.proto.graph.node[self.node_index(node_id)]

    @property
    def content_hash(self) -> str:
        """sha256 over the model file and every external-data file (streamed), memoised by
        path, size and mtime (`workbench.core.contenthash`): a file that cannot reference external
        data is hashed without being opened. An in-memory model: over its serialized proto."""
        if self._hash is None:
            from workbench.core import contenthash

            p = self.path
            if p is not None and p.is_file():
                h = contenthash.memo_lookup(p)
                if h is None:
                    h = None if self.opened else contenthash.hash_if_self_contained(p)
                    if h is None:
                        h = self._hash_with_external()
                    contenthash.memo_store(p, h, self.external_files if self.opened else [])
                self._hash = h
            else:
                self._hash = self._hash_with_external()
        return self._hash

    def _hash_with_external(self) -> str:
        from workbench.core.contenthash import hash_file

        h = hashlib.sha256()
        if self.path is not None and self.path.is_file():
            hash_file(h, self.path)
        else:
            h.update(self.proto.SerializeToString())
        for f in sorted(self.external_files):
            if f.exists():
                h.update(f.name.encode())
                hash_file(h, f)
        return h.hexdigest()

    def workspace(self, home: Optional[PathLike] = None) -> "ModelWorkspace":
        """The model's workspace (engines, calibration, history), keyed by its content hash."""
        from workbench.core.workspace import workspace_for

        return workspace_for(self, home)

    @property
    def weight_locations(self) -> Dict[str, "WeightRef"]:
        """Where each external weight of the main graph lies: absolute file, offset, length
        (a length the model leaves out is the rest of the file), element type and dims, by
        name; computed once. Weights in a data file that is missing are left out
        (`missing_external` names them)."""
        if self._locations is None:
            out: Dict[str, WeightRef] = {}
            base = self.base_dir.resolve() if self.base_dir is not None else None
            sizes: Dict[Path, int] = {}
            for t in self.proto.graph.initializer:
                loc = external_location(t)
                if not loc or base is None:
                    continue
                f = (base / loc).resolve()
                if not f.is_file():
                    continue
                kv = {e.key: e.value for e in t.external_data}
                offset, length = int(kv.get("offset") or 0), int(kv.get("length") or 0)
                if not length:
                    length = sizes.setdefault(f, f.stat().st_size) - offset
                out[t.name] = WeightRef(t.name, str(f), offset, length, int(t.data_type),
                                        tuple(t.dims))
            self._locations = out
        return self._locations

    @property
    def external_bytes(self) -> int:
        """Bytes of the weights stored in external-data files."""
        return sum(r.length for r in self.weight_locations.values())

    def load_weights(self) -> "onnx.ModelProto":
        """A copy of the model with every external tensor loaded into memory."""
        if self.missing_external:
            raise WorkbenchError(
                f"external-data file(s) missing: {', '.join(sorted(set(self.missing_external)))}",
                file=str(self.path), hint="this work needs the weights: put the data file(s) "
                "next to the model, or re-export the model with weights embedded", category="weights")
        if self.truncated_external:
            raise WorkbenchError(
                f"external-data file too short for {self.truncated_external[0]}",
                file=str(self.path), hint="the data file is truncated or belongs to another "
                "export; re-export the model", category="weights")
        proto = copy.deepcopy(self.proto)
        if self.external_files and self.base_dir is not None:
            from onnx.external_data_helper import load_external_data_for_model

            try:
                load_external_data_for_model(proto, str(self.base_dir))
            except Exception as e:  # truncated data file etc.
                raise WorkbenchError(f"could not read external data: {e}", file=str(self.path),
                                     hint="check the external-data file is complete") from None
        return proto

    def with_weights(self) -> "onnx.ModelProto":
        """The model with every weight in memory, loaded at most once per Model and shared:
        read it, never change it (`load_weights()` gives a private copy to change). A model
        whose weights are in memory already, or one built from a ModelProto (its external
        references, e.g. weights held by reference, are the caller's), is returned as it is."""
        if self._weighted is None:
            if self.path is None or (not self.external_files and not self.missing_external):
                self._weighted = self.proto
            else:
                self._weighted = self.load_weights()
        return self._weighted

    def save(self, path: PathLike, proto: Optional["onnx.ModelProto"] = None) -> Path:
        """Save (this model or `proto`) to a *new* file atomically; never over the source."""
        return save_model(proto if proto is not None else self.load_weights(), path,
                          source=self.path)


def model_skeleton(proto: "onnx.ModelProto") -> "onnx.ModelProto":
    """A new ModelProto of the same class with everything but the initializers: metadata,
    opsets, functions, nodes, inputs, outputs, value_info. Callers decide what becomes of the
    weights (kept when small, dims-only placeholders, typed inputs, ...)."""
    m = type(proto)()
    for fname in ("ir_version", "producer_name", "producer_version", "domain", "model_version"):
        setattr(m, fname, getattr(proto, fname))
    m.opset_import.extend(proto.opset_import)
    m.functions.extend(proto.functions)
    src, g = proto.graph, m.graph
    g.name = src.name
    g.node.extend(src.node)
    g.input.extend(src.input)
    g.output.extend(src.output)
    g.value_info.extend(src.value_info)
    return m


def open_model(path: PathLike) -> Model:
    """Open an ONNX file for inspection (no weight bytes). Raises WorkbenchError on bad input,
    blamed on the model's weights (external data) or its structure (`workbench.core.blame`)."""
    try:
        return _open_model(path)
    except WorkbenchError as e:
        if e.category is None and Path(path).is_file():
            e.category = "weights" if "external" in f"{e.field} {e.message}" else "structure"
        raise


def _open_model(path: PathLike) -> Model:
    onnx = onnx_proto()

    p = Path(path)
    if not p.exists():
        raise WorkbenchError("file not found", file=str(p), hint="check the path")
    if p.is_dir():
        raise WorkbenchError("is a folder, not an ONNX file", file=str(p),
                             hint="pass the .onnx file inside it")
    size = p.stat().st_size
    if size == 0:
        raise WorkbenchError("file is empty (0 bytes)", file=str(p),
                             hint="re-export the model; the write may have failed")
    bad_text = False
    try:
        if p.suffix.lower() in _TEXT_FORMATS:  # onnx picks the text parser by extension
            import onnx as full_onnx

            proto = full_onnx.load(str(p), load_external_data=False)
        else:  # binary protobuf, read once (no weight bytes: external data stays on disk)
            with open(p, "rb") as f:
                data = f.read()
            bad_text = not _valid_text(data)
            proto = onnx.ModelProto.FromString(data)
            del data
    except Exception as e:
        kind = type(e).__name__
        if "MaxDepth" in str(e):  # protobuf's recursion limit: also what bounds our walkers
            raise WorkbenchError("not a readable ONNX model: messages nest deeper than protobuf "
                                 "reads (100 levels; subgraphs inside subgraphs...)", file=str(p),
                                 hint="the file is corrupt or hostile; re-export it") from None
        raise WorkbenchError(f"not a readable ONNX model ({kind}: {str(e)[:120]})", file=str(p),
                             hint="the file is corrupt, truncated or not ONNX; re-export it") from None
    if bad_text:
        node, where = _first_bytes_field(proto)
        raise WorkbenchError("holds text that is not valid UTF-8 (a name, op type or key)",
                             file=str(p), node=node, field=where,
                             hint="the file is corrupt; re-export it")
    return _checked(proto, p, size)


def _valid_text(data: bytes) -> bool:
    """False when a string field of the serialized model is not valid UTF-8 (protobuf would
    hand it back as bytes and every reader after this one expects str). Checked by the C
    parser with onnx's schema in strict form (onnx_light.strict_model_class); any other
    parse problem is left to onnx's own parse, which reports it."""
    from workbench.core.onnx_light import strict_model_class

    cls = strict_model_class()
    if cls is None:
        return True
    try:
        cls.FromString(data)
    except Exception as e:
        return "utf-8" not in str(e).lower()
    return True


def _first_bytes_field(msg: object, path: str = "") -> Tuple[Optional[str], str]:
    """(node name, field path) of the first string field protobuf handed back as bytes, e.g.
    ('/conv1/Conv', 'graph.node[3].op_type'). A generic walk: only run on a file known bad."""
    node: Optional[str] = None
    for fd, val in msg.ListFields():  # type: ignore[attr-defined]
        many = getattr(fd, "is_repeated", None)
        if many is None:
            many = fd.label == fd.LABEL_REPEATED
        for i, v in enumerate(val if many else [val]):
            where = f"{path}{fd.name}" + (f"[{i}]" if many else "")
            if fd.type == fd.TYPE_STRING:
                if not isinstance(v, str):
                    return node, where
            elif fd.message_type is not None:
                if fd.message_type.name == "NodeProto":
                    name = getattr(v, "name", "")
                    node = name if isinstance(name, str) else name.decode("utf-8", "replace")
                inner, found = _first_bytes_field(v, where + ".")
                if found:
                    return inner or node, found
                node = None
    return None, ""


def as_model(model: ModelLike, *, opened: bool = True) -> Model:
    """The one handle for a model given as a path, a workbench Model or a ModelProto: a path
    is opened without its weight bytes (`opened=False`: on first use, the path resolved), a
    Model is returned as it is, a ModelProto wrapped."""
    if isinstance(model, Model):
        return model
    if isinstance(model, (str, os.PathLike)):
        return open_model(model) if opened else Model.unopened(Path(model).resolve())
    if isinstance(model, onnx_proto().ModelProto) or type(model).__name__ == "ModelProto":
        return model_from_proto(model)
    raise WorkbenchError(f"cannot use a {type(model).__name__} as a model",
                         hint="pass a path to an .onnx file, a workbench Model or a ModelProto")


def model_from_proto(proto: "onnx.ModelProto", path: Optional[PathLike] = None) -> Model:
    """Wrap an in-memory ModelProto (weights in memory, or external relative to `path`)."""
    p = Path(path) if path is not None else None
    return _checked(proto, p, proto.ByteSize())


def _checked(proto: "onnx.ModelProto", p: Optional[Path], size: int) -> Model:
    label = str(p) if p else "<in-memory model>"
    if not proto.HasField("graph") or proto.ir_version <= 0:
        raise WorkbenchError("not an ONNX model (no graph or IR version)", file=label,
                             hint="the file is corrupt, truncated or not ONNX; re-export it")
    if proto.ir_version >= 3 and len(proto.opset_import) == 0:
        raise WorkbenchError("the model declares no opset (opset_import is empty)", file=label,
                             field="opset_import", hint="the file is probably truncated; "
                             "re-export it")
    if len(proto.graph.node) == 0 and len(proto.graph.output) == 0:
        raise WorkbenchError("the graph is empty (no nodes, no outputs)", file=label,
                             hint="the file is probably truncated or not an ONNX model")
    m = Model(proto=proto, path=p, size_bytes=size)
    base = p.parent.resolve() if p else None
    files = set()
    short: List[str] = []
    for t in iter_tensors_with_data(proto):
        loc = external_location(t)
        if loc is None:
            continue
        if not loc:
            raise WorkbenchError(f"tensor '{t.name}' is marked external but has no location",
                                 file=label, field="external_data.location")
        if base is None:
            m.missing_external.append(loc)
            continue
        if os.path.isabs(loc) or ".." in Path(loc).parts:
            raise WorkbenchError(
                f"tensor '{t.name}' points its external data outside the model folder: '{loc}'",
                file=label, field="external_data.location",
                hint="refusing untrusted path; keep data files next to the model")
        try:  # (a NUL byte, a name too long for the file system, a loop of symlinks...)
            target = (base / loc).resolve()
            is_file = target.is_file()
            file_size = target.stat().st_size if is_file else 0
        except (OSError, ValueError, RuntimeError) as e:
            raise WorkbenchError(
                f"tensor '{t.name}' external-data location is not a usable path "
                f"({type(e).__name__}): '{loc[:80]}'", file=label,
                field="external_data.location", hint="the file is corrupt; re-export it"
                ) from None
        try:
            target.relative_to(base)
        except ValueError:
            raise WorkbenchError(
                f"tensor '{t.name}' external data resolves outside the model folder: '{loc}'",
                file=label, field="external_data.location",
                hint="refusing untrusted path (symlink?); keep data files next to the model") from None
        if is_file:
            files.add(target)
            end = _external_end(t)
            if end is None:
                short.append(f"{t.name} ({loc}: offset/length are not byte counts)")
            elif end > file_size:
                short.append(f"{t.name} ({loc}: needs {end} bytes, file has {file_size})")
        else:
            m.missing_external.append(loc)
    m.external_files = sorted(files)
    if m.missing_external:
        missing = sorted(set(m.missing_external))
        m.warnings.append(Finding(
            "warning", "external-data-missing",
            f"external-data file(s) not found: {', '.join(missing)}; the structure is "
            "inspectable, work that needs weights will fail",
            hint="put the data file(s) next to the model to run, fix or build it",
            source="model"))
    m.truncated_external = short
    m.absent_weights = [t.name for t in proto.graph.initializer if _holds_no_data(t)]
    m.sparse_weights = [sp.values.name or sp.indices.name
                        for sp in proto.graph.sparse_initializer]
    if m.absent_weights:
        m.warnings.append(Finding(
            "warning", "weights-absent",
            f"the weights are absent: {len(m.absent_weights)} of {len(proto.graph.initializer)}"
            f" initializer(s) declare a shape but hold no data (e.g. '{m.absent_weights[0]}'); "
            "the structure is inspectable, work that needs weights will fail",
            tensors=m.absent_weights[:20], source="model", category="weights",
            hint="re-export the model with its weights (torch.onnx.export(..., "
                 "export_params=True))"))
    if m.sparse_weights:
        m.warnings.append(Finding(
            "warning", "sparse-weights",
            f"{len(m.sparse_weights)} weight(s) are stored as sparse tensors (e.g. "
            f"'{m.sparse_weights[0]}'): TensorRT's parser does not read them",
            tensors=m.sparse_weights[:20], source="model", category="weights",
            hint="write a dense copy",
            next_steps=[step("fix", "{model}", recipe="densify_sparse",
                             o=_dense_name(str(p)) if p else "{stem}.dense.onnx",
                             why="stores each sparse weight as a dense tensor")
                        .bound(model=str(p) if p else None)]))
    if short:
        m.warnings.append(Finding(
            "warning", "external-data-truncated",
            f"{len(short)} tensor(s) point past the end of their external-data file (or give "
            f"no usable offset/length), e.g. "
            f"{short[0]}; loading the weights will fail",
            hint="the data file is truncated or belongs to another export; re-export the model",
            source="model"))
    return m


_DATA_FIELDS = ("float_data", "int32_data", "string_data", "int64_data", "double_data",
                "uint64_data")


def _holds_no_data(t: "onnx.TensorProto") -> bool:
    """An initializer that declares a non-empty shape but stores no data in any field (and is
    not external): what exporters write when weights are left out."""
    if t.data_location == 1:  # EXTERNAL
        return False
    n = 1
    for d in t.dims:
        n *= d
    if n == 0:
        return False
    if t.HasField("raw_data"):  # (its length without copying the bytes when it is large)
        return t.ByteSize() < 4096 and len(t.raw_data) == 0
    return not any(len(getattr(t, f)) for f in _DATA_FIELDS)


def _dense_name(label: str) -> str:
    """The default name of a densified copy: model.onnx -> model.dense.onnx."""
    stem, dot, ext = label.rpartition(".")
    return f"{stem}.dense.{ext}" if dot and "/" not in ext else f"{label}.dense.onnx"


def _external_end(t: "onnx.TensorProto") -> Optional[int]:
    """offset + length of an external tensor (0 + 0 for keys not recorded: the loader reads
    to the end of the file then), or None when either is not a non-negative byte count
    ('-1', 'abc', '1e9'): checked before anything is read or allocated."""
    kv = {e.key: e.value for e in t.external_data}
    try:
        offset, length = int(kv.get("offset") or 0), int(kv.get("length") or 0)
    except ValueError:
        return None
    if offset < 0 or length < 0:
        return None
    return offset + length


def save_model(proto: "onnx.ModelProto", path: PathLike, *, source: Optional[PathLike] = None,
               external_data: Optional[bool] = None) -> Path:
    """Write `proto` to `path` atomically. Refuses to overwrite `source` (the user's original).

    Models over 1.8 GB (or with external_data=True) get their weights in `<name>.data` beside them.
    """
    import onnx

    out = Path(path)
    if source is not None and out.resolve() == Path(source).resolve():
        raise WorkbenchError("refusing to overwrite the original model", file=str(out),
                             hint="choose another output path (-o)")
    out.parent.mkdir(parents=True, exist_ok=True)
    big = proto.ByteSize() > 1_800_000_000 if external_data is None else external_data
    if not big:
        atomic_write_bytes(out, proto.SerializeToString())
        return out
    from onnx.external_data_helper import (convert_model_to_external_data,
                                           write_external_data_tensors)

    data_name = out.name + ".data"
    if source is not None and Path(source).is_file():
        src = Path(source)
        theirs = {(src.parent / (external_location(t) or "")).resolve()
                  for t in iter_tensors_with_data(onnx.load(str(src), load_external_data=False))
                  if external_location(t)}
        if out.with_name(data_name).resolve() in theirs:
            raise WorkbenchError(f"refusing to overwrite the original model's data file "
                                 f"'{data_name}'", file=str(out),
                                 hint="choose another output name or folder (-o)")
    data_tmp = out.with_name(f".{data_name}.tmp")
    data_tmp.unlink(missing_ok=True)  # onnx appends to an existing data file
    m = onnx.ModelProto()
    m.CopyFrom(proto)  # onnx's external-data helpers mutate the proto: never the caller's
    convert_model_to_external_data(m, all_tensors_to_one_file=True, location=data_tmp.name,
                                   size_threshold=1024)
    try:
        write_external_data_tensors(m, str(out.parent))
        for t in iter_tensors_with_data(m):
            for kv in t.external_data:
                if kv.key == "location" and kv.value == data_tmp.name:
                    kv.value = data_name
        with open(data_tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(data_tmp, out.with_name(data_name))
    except BaseException:
        data_tmp.unlink(missing_ok=True)
        raise
    atomic_write_bytes(out, m.SerializeToString())
    return out
