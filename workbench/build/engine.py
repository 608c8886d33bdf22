"""Engine builds: `BuildConfig` (JSON), the content-addressed engine cache, and the client side
of the worker's `build` op.

    cfg = BuildConfig(precision="fp16", profiles=[{"input": [[1,3,32,32],[8,3,32,32],[32,3,32,32]]}],
                      target="sm89", builder_optimization_level=1)
    res = build_engine("model.onnx", cfg, on_event=print, timeout=600)
    res.engine_path, res.cache_hit, res.findings, res.export["trtexec"]

Strongly typed route (TensorRT 11, TensorRT-RTX; the default where the STRONGLY_TYPED flag
exists): precision is an ONNX transform first (`workbench.precision.transform.convert`), stored as a model
version in the workspace, then built as is. Legacy route (TensorRT <= 10 with BuilderFlag.FP16 /
INT8, chosen by probing): builder flags, an entropy calibrator fed from the calibration data,
and a calibration cache. The engine cache key is sha256(model bytes incl. external data +
config + calibration data + backend name/version + target); engines are renamed into the cache
only when complete, so a cancelled, failed or timed-out build leaves nothing behind.

WORKBENCH_BUILD_STEP_DELAY=S slows every TensorRT build step by S seconds (IProgressMonitor
backends): for tests and classroom demos of progress and cancel on builds that take 0.1 s.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import time
import types
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from workbench.errors import Finding, WorkbenchError
from workbench.fsutil import atomic_write_json
from workbench.worker.protocol import BAD_INPUT_CODES, BUILD_BACKENDS

PRECISIONS = ("fp32", "fp16", "bf16", "int8", "fp8")
ROUTES = ("auto", "strongly-typed", "legacy-flags")
BACKENDS = BUILD_BACKENDS
CALIBRATE_METHODS = ("entropy", "minmax", "percentile")
CACHE_SCHEMA = 1
# Fields that do not change the engine (they are left out of the cache key).
_NOT_IN_KEY = ("timing_cache",)

PathLike = Union[str, "os.PathLike[str]"]
Shape = List[int]


class BuildFailed(WorkbenchError):
    """TensorRT could not parse or build the model (CLI exit 1); names the node/layer."""

    def __init__(self, message: str, *, node: Optional[str] = None, op: Optional[str] = None,
                 hint: Optional[str] = None, code: str = "build-failed",
                 log: Optional[List[Dict[str, str]]] = None,
                 findings: Optional[List[Finding]] = None, file: Optional[str] = None) -> None:
        super().__init__(message, node=node, hint=hint, file=file)
        self.op = op
        self.code = code
        self.log = log or []
        self.findings = findings or []


class BuildCancelled(BuildFailed):
    pass


class BuildTimeout(BuildFailed):
    pass


# --------------------------------------------------------------------------------------------
# config
# --------------------------------------------------------------------------------------------
def _norm_profile(p: Any, k: int) -> Dict[str, List[Shape]]:
    if hasattr(p, "to_dict") and not isinstance(p, dict):
        p = p.to_dict()
    if not isinstance(p, dict):
        raise WorkbenchError(f"profile {k} must be a mapping input -> [min, opt, max]",
                             field=f"profiles[{k}]")
    out: Dict[str, List[Shape]] = {}
    for name, shapes in p.items():
        if isinstance(shapes, dict):
            shapes = [shapes.get("min"), shapes.get("opt"), shapes.get("max")]
        try:
            trio = [[int(d) for d in s] for s in shapes]
        except (TypeError, ValueError):
            raise WorkbenchError(f"profile {k} for '{name}' must be [min, opt, max] shapes, "
                                 f"got {shapes!r}", field=f"profiles[{k}].{name}") from None
        if len(trio) != 3:
            raise WorkbenchError(f"profile {k} for '{name}' needs exactly 3 shapes (min, opt, "
                                 f"max), got {len(trio)}", field=f"profiles[{k}].{name}")
        ranks = {len(s) for s in trio}
        if len(ranks) != 1:
            raise WorkbenchError(f"profile {k} for '{name}': min/opt/max have different ranks "
                                 f"{[len(s) for s in trio]}", field=f"profiles[{k}].{name}")
        for axis, (a, b, c) in enumerate(zip(*trio)):
            if not (0 <= a <= b <= c):
                raise WorkbenchError(
                    f"profile {k} for '{name}' axis {axis}: need min <= opt <= max, got "
                    f"{a}, {b}, {c}", field=f"profiles[{k}].{name}",
                    hint="e.g. --profile %s:1x3x32x32:8x3x32x32:32x3x32x32" % name)
        out[str(name)] = trio
    return out


@dataclass
class BuildConfig:
    """Everything that decides an engine, JSON-serialisable; `config_hash` is stable."""

    precision: str = "fp32"
    exclude_nodes: List[str] = field(default_factory=list)
    exclude_ops: List[str] = field(default_factory=list)
    keep_io_types: bool = True
    calibration: Optional[str] = None
    calibrate_method: str = "entropy"
    allow_random_calibration: bool = False
    profiles: List[Dict[str, List[Shape]]] = field(default_factory=list)
    workspace_bytes: Optional[int] = None
    builder_optimization_level: Optional[int] = None
    timing_cache: Optional[str] = None
    target: Optional[str] = None
    backend: str = "auto"
    route: str = "auto"
    plugins: List[str] = field(default_factory=list)
    extra_flags: List[str] = field(default_factory=list)
    tactic_sources: Optional[List[str]] = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> "BuildConfig":
        """Normalise and check every field; raises WorkbenchError naming the field."""
        self.precision = str(self.precision).lower()
        if self.precision not in PRECISIONS:
            raise WorkbenchError(f"unknown precision '{self.precision}'", field="precision",
                                 hint="one of " + ", ".join(PRECISIONS))
        if self.route not in ROUTES:
            raise WorkbenchError(f"unknown route '{self.route}'", field="route",
                                 hint="one of " + ", ".join(ROUTES))
        if self.backend not in BACKENDS:
            raise WorkbenchError(f"unknown backend '{self.backend}'", field="backend",
                                 hint="one of " + ", ".join(BACKENDS))
        if self.calibrate_method not in CALIBRATE_METHODS:
            raise WorkbenchError(f"unknown calibration method '{self.calibrate_method}'",
                                 field="calibrate_method",
                                 hint="one of " + ", ".join(CALIBRATE_METHODS))
        if self.workspace_bytes is not None:
            self.workspace_bytes = int(self.workspace_bytes)
            if self.workspace_bytes <= 0:
                raise WorkbenchError("workspace must be a positive number of bytes",
                                     field="workspace_bytes")
        if self.builder_optimization_level is not None:
            self.builder_optimization_level = int(self.builder_optimization_level)
            if not 0 <= self.builder_optimization_level <= 5:
                raise WorkbenchError("builder optimization level must be 0..5",
                                     field="builder_optimization_level")
        if self.target is not None:
            t = str(self.target).strip().lower()
            parts = [p.strip() for p in t.replace(";", ",").split(",") if p.strip()]
            for p in parts:
                if not (p == "current" or (p.startswith("sm") and p[2:].isdigit())):
                    raise WorkbenchError(f"target '{p}' is not a compute capability like 'sm89'",
                                         field="target", hint="e.g. --target sm89 (RTX 40xx), "
                                         "sm86, sm120; several as sm86,sm89")
            self.target = ",".join(parts) or None
        self.exclude_nodes = [str(n) for n in self.exclude_nodes]
        self.exclude_ops = [str(n) for n in self.exclude_ops]
        self.plugins = [str(p) for p in self.plugins]
        self.extra_flags = [str(f).upper() for f in self.extra_flags]
        if self.tactic_sources is not None:
            self.tactic_sources = [str(t).upper() for t in self.tactic_sources]
        if self.calibration is not None:
            self.calibration = str(self.calibration)
        if self.timing_cache is not None:
            self.timing_cache = str(self.timing_cache)
        self.profiles = [_norm_profile(p, k) for k, p in enumerate(self.profiles or [])]
        return self

    # -- JSON ---------------------------------------------------------------------------------
    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "BuildConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise WorkbenchError(f"unknown build config field(s): {', '.join(unknown)}",
                                 field=unknown[0], hint="known: " + ", ".join(sorted(known)))
        return cls(**d)

    @classmethod
    def from_json(cls, text: str) -> "BuildConfig":
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise WorkbenchError(f"build config is not valid JSON: {e}") from None
        if not isinstance(d, dict):
            raise WorkbenchError("build config JSON must be an object")
        return cls.from_dict(d)

    @property
    def config_hash(self) -> str:
        """sha256 of the canonical JSON (16 hex digits)."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]

    def replace(self, **changes: Any) -> "BuildConfig":
        d = self.to_dict()
        d.update(changes)
        return BuildConfig.from_dict(d)


# --------------------------------------------------------------------------------------------
# result
# --------------------------------------------------------------------------------------------
@dataclass
class BuildResult:
    engine_path: str
    size_bytes: int
    seconds: float
    backend: str
    backend_version: str
    config_hash: str
    cache_hit: bool
    findings: List[Finding] = field(default_factory=list)
    export: Dict[str, Any] = field(default_factory=dict)
    log: List[Dict[str, str]] = field(default_factory=list)
    key: str = ""
    route: str = ""
    onnx_path: str = ""
    output_path: Optional[str] = None
    build_seconds: float = 0.0
    targets: List[str] = field(default_factory=list)
    layers: List[Dict[str, Any]] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    config: Optional[Dict[str, Any]] = None

    @property
    def size(self) -> int:
        return self.size_bytes

    @property
    def memory(self) -> Dict[str, int]:
        """Activation / weights / scratch bytes as the build log reported them."""
        from workbench.build.log import memory_from_log

        return memory_from_log(self.log)

    def dtype_counts(self) -> Dict[str, int]:
        """How many layer outputs of the built network carry each dtype (FLOAT, HALF, INT8...)."""
        counts: Dict[str, int] = {}
        for layer in self.layers:
            for o in layer.get("outputs", []):
                counts[o["dtype"]] = counts.get(o["dtype"], 0) + 1
        return counts

    def to_dict(self, *, with_log: bool = False, with_layers: bool = False) -> Dict[str, Any]:
        d = {
            "engine_path": self.output_path or self.engine_path, "cache_path": self.engine_path,
            "size_bytes": self.size_bytes, "seconds": round(self.seconds, 4),
            "build_seconds": round(self.build_seconds, 4), "backend": self.backend,
            "backend_version": self.backend_version, "config_hash": self.config_hash,
            "cache_hit": self.cache_hit, "cache_key": self.key, "route": self.route,
            "onnx_path": self.onnx_path, "targets": self.targets,
            "dtypes": self.dtype_counts(), "memory": self.memory, "notes": self.notes,
            "findings": [f.to_dict() for f in self.findings],
            "export": {k: v for k, v in self.export.items() if k != "script"},
            "config": self.config,
        }
        if with_log:
            d["log"] = self.log
        if with_layers:
            d["layers"] = self.layers
        return d


# --------------------------------------------------------------------------------------------
# hashing (memoised by path, size and mtime: large models are hashed once)
# --------------------------------------------------------------------------------------------
_memo_lock = threading.Lock()
_hash_memo: Dict[Tuple[str, int, int], Dict[str, Any]] = {}
_backend_memo: Dict[Tuple[str, str], Dict[str, Any]] = {}


def _stat_key(p: Path) -> Tuple[str, int, int]:
    st = p.stat()
    return (str(p.resolve()), st.st_size, st.st_mtime_ns)


def _memo_file() -> Path:
    from workbench.workspace import workbench_home

    return workbench_home() / "hash-memo.json"


def _memo_lookup(p: Path) -> Optional[str]:
    key = _stat_key(p)
    with _memo_lock:
        rec = _hash_memo.get(key)
    if rec is None:
        try:
            disk = json.loads(_memo_file().read_text())
            rec = disk.get("|".join(map(str, key)))
        except (OSError, ValueError):
            rec = None
    if rec is None:
        return None
    for ext in rec.get("external", []):
        try:
            if list(_stat_key(Path(ext[0]))) != list(ext):
                return None
        except OSError:
            return None
    with _memo_lock:
        _hash_memo[key] = rec
    return rec["hash"]


def _memo_store(p: Path, h: str, external: Sequence[Path]) -> None:
    key = _stat_key(p)
    rec = {"hash": h, "external": [list(_stat_key(Path(e))) for e in external]}
    with _memo_lock:
        _hash_memo[key] = rec
        try:
            f = _memo_file()
            try:
                disk = json.loads(f.read_text())
            except (OSError, ValueError):
                disk = {}
            disk["|".join(map(str, key))] = rec
            if len(disk) > 2000:
                disk = dict(list(disk.items())[-1000:])
            atomic_write_json(f, disk)
        except OSError:
            pass


def _hash_if_self_contained(path: Path) -> Optional[str]:
    """sha256 of the file when it cannot hold external-data references (the protobuf key
    'location' never occurs in it), else None. Same value as Model.content_hash, without
    importing onnx: the CLI's cold start stays short."""
    if path.stat().st_size == 0:
        raise WorkbenchError("file is empty (0 bytes)", file=str(path),
                             hint="re-export the model; the write may have failed")
    h = hashlib.sha256()
    tail = b""
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
            if b"location" in tail + chunk:
                return None
            tail = chunk[-8:]
    return h.hexdigest()


class _ModelRef:
    """A model given as path / Model / ModelProto, with its content hash and lazy opening."""

    def __init__(self, model_or_path: Any) -> None:
        from workbench.model import Model, model_from_proto

        self._model: Optional[Model] = None
        self.path: Optional[Path] = None
        if isinstance(model_or_path, Model):
            self._model = model_or_path
            self.path = model_or_path.path
        elif isinstance(model_or_path, (str, os.PathLike)):
            self.path = Path(model_or_path).resolve()
            if not self.path.is_file():
                raise WorkbenchError("file not found" if not self.path.exists() else
                                     "not a file", file=str(self.path), hint="check the path")
        else:
            try:
                import onnx
            except ImportError:  # pragma: no cover
                onnx = None
            if onnx is not None and isinstance(model_or_path, onnx.ModelProto):
                self._model = model_from_proto(model_or_path)
            else:
                raise WorkbenchError(f"cannot build from a {type(model_or_path).__name__}",
                                     hint="pass an ONNX path, a workbench Model or a ModelProto")
        self._hash: Optional[str] = None

    @property
    def model(self) -> Any:
        if self._model is None:
            from workbench.model import open_model

            self._model = open_model(self.path)
        return self._model

    @property
    def content_hash(self) -> str:
        if self._hash is None:
            if self.path is not None and self.path.is_file() and (
                    self._model is None or self._model.path == self.path):
                h = _memo_lookup(self.path)
                if h is None:
                    h = _hash_if_self_contained(self.path)
                    if h is None:  # external data: the Model knows its files
                        h = self.model.content_hash
                    _memo_store(self.path, h, self.model.external_files if
                                self._model is not None else [])
                self._hash = h
            else:
                self._hash = self.model.content_hash
        return self._hash

    def workspace(self) -> Any:
        from workbench.workspace import workspace_for

        shim = types.SimpleNamespace(content_hash=self.content_hash, path=self.path)
        return workspace_for(shim)


def _hash_calibration(source: Optional[str]) -> Optional[str]:
    if source is None:
        return None
    p = Path(source)
    if not p.exists():
        raise WorkbenchError("calibration source not found", file=str(p), hint="check the path")
    h = hashlib.sha256()
    files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
    for f in files:
        h.update(str(f.relative_to(p) if p.is_dir() else f.name).encode())
        memo = _memo_lookup(f)
        if memo is None:
            fh = hashlib.sha256()
            with open(f, "rb") as fp:
                for chunk in iter(lambda: fp.read(1 << 20), b""):
                    fh.update(chunk)
            memo = fh.hexdigest()
            _memo_store(f, memo, [])
        h.update(memo.encode())
    return h.hexdigest()


# --------------------------------------------------------------------------------------------
# backend and route
# --------------------------------------------------------------------------------------------
def backend_info(backend: str = "auto", client: Any = None) -> Dict[str, Any]:
    """Name, version and capabilities of the worker's TensorRT (memoised per interpreter)."""
    from workbench.worker.client import WorkerError, default_client

    client = client or default_client()
    key = (client.python, backend)
    with _memo_lock:
        if key in _backend_memo:
            return _backend_memo[key]
    try:
        info = getattr(client, "preloaded_backend_info", lambda b: None)(backend) or \
            client.call("backend_info", {"backend": backend}, timeout=120)
    except WorkerError as e:
        raise WorkbenchError(str(e.message), field="backend", hint=e.hint) from None
    with _memo_lock:
        _backend_memo[key] = info
    return info


def resolve_route(config: BuildConfig, caps: Dict[str, bool]) -> str:
    """Pick the precision route by capability probing (never by version string)."""
    p = config.precision
    flag_for = {"fp16": "fp16_flag", "bf16": "bf16_flag", "int8": "int8_flag",
                "fp8": "fp8_flag"}
    if config.route == "auto":
        if caps.get("strongly_typed_flag") or p == "fp32":
            return "strongly-typed"
        if caps.get(flag_for[p]):
            return "legacy-flags"
        raise WorkbenchError(f"this TensorRT has neither strongly typed networks nor "
                             f"BuilderFlag.{p.upper()}", field="precision",
                             hint="build in FP32, or use another TensorRT")
    if config.route == "legacy-flags" and p != "fp32":
        if not caps.get(flag_for[p]):
            raise WorkbenchError(
                f"this TensorRT has no BuilderFlag.{p.upper()} (TensorRT 11 and TensorRT-RTX "
                "are strongly typed only)", field="route",
                hint="use --route strongly-typed: precision goes into the ONNX as casts / Q/DQ")
        if p == "fp8":
            raise WorkbenchError("FP8 has no builder-flag calibration route", field="route",
                                 hint="use --route strongly-typed (Q/DQ in the ONNX)")
    if config.route == "strongly-typed" and p != "fp32" and not caps.get("strongly_typed_flag"):
        raise WorkbenchError("this TensorRT has no strongly typed networks", field="route",
                             hint="use --route legacy-flags (builder flags + calibrator)")
    return config.route


# --------------------------------------------------------------------------------------------
# build
# --------------------------------------------------------------------------------------------
def cache_key(model_hash: str, config: BuildConfig, route: str, backend: str, version: str,
              calib_hash: Optional[str]) -> Tuple[str, Dict[str, Any]]:
    cfg = {k: v for k, v in config.to_dict().items() if k not in _NOT_IN_KEY}
    uses_calib = config.precision in ("int8", "fp8")
    cfg["calibration"] = calib_hash if uses_calib else None
    if not uses_calib:
        cfg.pop("calibrate_method", None)
        cfg.pop("allow_random_calibration", None)
    doc = {"schema": CACHE_SCHEMA, "model": model_hash, "config": cfg, "route": route,
           "backend": backend, "backend_version": version, "target": config.target}
    key = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
    return key, doc


def _emit(on_event: Optional[Callable[[Dict[str, Any]], None]], phase: str,
          fraction: Optional[float] = None, message: str = "") -> None:
    if on_event is not None:
        on_event({"event": "progress", "phase": phase, "fraction": fraction,
                  "message": message})


def _load_cached(engine: Path, meta_path: Path, key: str) -> Optional[Dict[str, Any]]:
    if not (engine.is_file() and meta_path.is_file()):
        return None
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        return None
    if meta.get("key") != key or meta.get("size_bytes") != engine.stat().st_size:
        return None
    return meta


def _result_from_meta(meta: Dict[str, Any], engine: Path, seconds: float, cache_hit: bool
                      ) -> BuildResult:
    return BuildResult(
        engine_path=str(engine), size_bytes=int(meta["size_bytes"]), seconds=seconds,
        backend=meta["backend"], backend_version=meta["backend_version"],
        config_hash=meta["config_hash"], cache_hit=cache_hit,
        findings=[Finding.from_dict(f) for f in meta.get("findings", [])],
        export=meta.get("export", {}), log=meta.get("log", []), key=meta["key"],
        route=meta.get("route", ""), onnx_path=meta.get("onnx_path", ""),
        build_seconds=float(meta.get("build_seconds", 0.0)), targets=meta.get("targets", []),
        layers=meta.get("layers", []), notes=meta.get("notes", []), config=meta.get("config"))


def _copy_out(src: Path, dst: PathLike, model_path: Optional[Path]) -> str:
    out = Path(dst)
    if model_path is not None and out.resolve() == model_path.resolve():
        raise WorkbenchError("refusing to write the engine over the model", file=str(out),
                             hint="choose another -o path")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return str(out)


def _transformed_onnx(ref: _ModelRef, config: BuildConfig, ws: Any, on_event: Any
                      ) -> Tuple[Path, List[Finding]]:
    """The ONNX that goes to TensorRT: the original (FP32) or the precision transform."""
    from workbench.model import save_model

    if config.precision == "fp32":
        if ref.path is not None:
            return ref.path, []
        data = ref.model.proto.SerializeToString()
        return ws.version_path(ws.add_version(data)), []
    from workbench.precision.transform import convert

    _emit(on_event, "precision", None, f"converting to {config.precision}")
    kwargs: Dict[str, Any] = dict(exclude_nodes=config.exclude_nodes,
                                  exclude_ops=config.exclude_ops,
                                  keep_io_types=config.keep_io_types,
                                  calibration=config.calibration,
                                  calibrate_method=config.calibrate_method,
                                  allow_random=config.allow_random_calibration)
    if config.profiles and config.calibration is not None:
        try:
            import workbench.precision.profiles  # noqa: F401  (calibration checks shapes against it)

            kwargs["profile"] = {k: tuple(v) for k, v in config.profiles[0].items()}
        except ImportError:
            pass
    res = convert(ref.model, config.precision, **kwargs)
    try:
        data = res.proto.SerializeToString()
    except ValueError:  # over 2 GB: external data beside it
        out = ws.dir / "transformed" / f"{ref.content_hash[:12]}-{config.config_hash}.onnx"
        return save_model(res.proto, out), list(res.findings)
    vid = ws.add_version(data)
    ws.append_history({"action": "precision", "target": config.precision, "version": vid,
                       "config_hash": config.config_hash})
    return ws.version_path(vid), list(res.findings)


def _write_calibration(ref: _ModelRef, config: BuildConfig, ws: Any, calib_hash: str,
                       backend: str, version: str) -> Tuple[str, str]:
    """Legacy INT8: validated batches -> one .npz the worker reads (keys 'b<i>:<input>')."""
    import numpy as np

    from workbench.precision.calibration import load_calibration
    from workbench.fsutil import atomic_write_bytes

    batches = load_calibration(config.calibration, ref.model)
    shapes = {n: a.shape for n, a in batches[0].items()}
    for i, b in enumerate(batches):
        for n, a in b.items():
            if a.shape != shapes[n]:
                raise WorkbenchError(
                    f"calibration batch {i} input '{n}' has shape {list(a.shape)} but batch 0 "
                    f"has {list(shapes[n])}; the builder-flag calibrator needs one shape",
                    file=config.calibration, field=n, hint="pad or bucket the batches")
    import io

    buf = io.BytesIO()
    np.savez(buf, **{f"b{i}:{n}": a for i, b in enumerate(batches) for n, a in b.items()})
    d = ws.dir / "calibration"
    npz = d / f"{calib_hash[:16]}.npz"
    if not npz.exists():
        atomic_write_bytes(npz, buf.getvalue())
    cache = d / f"{calib_hash[:16]}-{backend}-{version}-{config.calibrate_method}.cache"
    return str(npz), str(cache)


def _expand_exclude_ops(ref: _ModelRef, config: BuildConfig) -> List[str]:
    names = list(config.exclude_nodes)
    if config.exclude_ops:
        ops = set(config.exclude_ops)
        names += [n.name for n in ref.model.graph.node if n.op_type in ops and n.name]
    return names


def _node_for_index(ref: _ModelRef, idx: Any) -> Optional[str]:
    try:
        i = int(idx)
        if i < 0:  # the parser's "no node" (a graph-level error)
            return None
        node = ref.model.graph.node[i]
        return node.name or ref.model.node_ids[i]
    except (TypeError, ValueError, IndexError):
        return None


def build_engine(model_or_path: Any, config: Optional[BuildConfig] = None, *,
                 on_event: Optional[Callable[[Dict[str, Any]], None]] = None,
                 cancel: Optional[threading.Event] = None, timeout: Optional[float] = None,
                 client: Any = None, output: Optional[PathLike] = None,
                 use_cache: bool = True) -> BuildResult:
    """Build (or fetch from the cache) the engine of `model_or_path` for `config`.

    Raises WorkbenchError for bad input, BuildFailed (with node/op) when TensorRT refuses,
    BuildCancelled / BuildTimeout when stopped; none of them leaves an engine in the cache.
    """
    from workbench.worker.client import (WorkerCancelled, WorkerError, WorkerTimeout,
                                         default_client)

    t0 = time.monotonic()
    config = (config or BuildConfig()).validate()
    client = client or default_client()
    ref = _ModelRef(model_or_path)
    # start the worker (and learn its TensorRT) while this process hashes the model
    box: Dict[str, Any] = {}

    def _fetch() -> None:
        try:
            box["info"] = backend_info(config.backend, client)
        except BaseException as e:  # re-raised on the calling thread
            box["error"] = e

    with _memo_lock:
        cold = (client.python, config.backend) not in _backend_memo
    fetcher = threading.Thread(target=_fetch, daemon=True)
    fetcher.start()
    _emit(on_event, "hashing", 0.0, str(ref.path or "<in-memory model>"))
    try:
        model_hash = ref.content_hash
        if cold:
            ref.workspace()  # while TensorRT may still be importing
    finally:
        fetcher.join()
    if "error" in box:
        raise box["error"]
    info = box["info"]
    backend, version = info["backend"], info["version"]
    route = resolve_route(config, info.get("capabilities", {}))
    calib_hash = (_hash_calibration(config.calibration)
                  if config.precision in ("int8", "fp8") else None)
    if config.precision in ("int8", "fp8") and calib_hash is None and not (
            config.allow_random_calibration and route == "strongly-typed"):
        raise WorkbenchError(f"{config.precision.upper()} needs calibration data",
                             field="calibration", hint="pass --calib PATH (.npz/.npy or a "
                             "folder of representative inputs)")
    key, key_doc = cache_key(model_hash, config, route, backend, version, calib_hash)
    ws = ref.workspace()
    engine = ws.engines_dir / f"{key[:32]}.engine"
    meta_path = ws.engines_dir / f"{key[:32]}.json"

    if use_cache:
        meta = _load_cached(engine, meta_path, key)
        if meta is not None:
            res = _result_from_meta(meta, engine, time.monotonic() - t0, cache_hit=True)
            if output is not None:
                res.output_path = _copy_out(engine, output, ref.path)
            _emit(on_event, "cache-hit", 1.0, str(engine))
            ws.append_history({"action": "build", "cache_hit": True, "key": key,
                               "config_hash": config.config_hash, "engine": str(engine)})
            return res

    # The profile check needs the graph (protobuf import + parse: tens of ms on a cold CLI).
    # When TensorRT gets the user's own FP32 file, the build starts at once and the check runs
    # beside it: a failing check stops the build and is what the user sees; nothing is cached.
    speculative = (ref.path is not None and config.precision == "fp32" and
                   not config.exclude_ops)
    if not speculative:
        _validate_profiles(ref, config)
    findings: List[Finding] = []
    if route == "strongly-typed":  # precision lives in the ONNX TensorRT gets
        onnx_path, pfind = _transformed_onnx(ref, config, ws, on_event)
    else:  # legacy flags: the builder lowers precision; TensorRT gets the FP32 model
        onnx_path, pfind = _transformed_onnx(ref, config.replace(precision="fp32"), ws,
                                             on_event)
    findings += pfind
    if cancel is not None and cancel.is_set():
        raise BuildCancelled("the build was cancelled before TensorRT started", code="cancelled")

    timing_cache = config.timing_cache or str(
        ws.timing_caches_dir / f"{backend}-{version}.cache")
    args: Dict[str, Any] = dict(
        onnx_path=str(onnx_path), backend=config.backend if config.backend != "auto" else
        backend, route=route, precision=config.precision, profiles=config.profiles,
        workspace_bytes=config.workspace_bytes,
        optimization_level=config.builder_optimization_level, timing_cache=timing_cache,
        target=config.target, plugins=[str(Path(p).resolve()) for p in config.plugins],
        extra_flags=config.extra_flags, tactic_sources=config.tactic_sources,
        report_layers=True,
        test_step_delay=float(os.environ.get("WORKBENCH_BUILD_STEP_DELAY", "0") or 0))
    if route == "legacy-flags":
        args["fp32_layers"] = _expand_exclude_ops(ref, config)
        if config.precision == "int8":
            args["calib_npz"], args["calib_cache"] = _write_calibration(
                ref, config, ws, calib_hash or "", backend, version)
            args["calibrate_method"] = config.calibrate_method
    tmp = ws.engines_dir / f".{key[:32]}.{os.getpid()}.{threading.get_ident()}.partial"
    args["engine_path"] = str(tmp)
    remaining = None if timeout is None else max(0.1, timeout - (time.monotonic() - t0))
    side: Dict[str, Any] = {}  # what the thread beside the build found: names, invalid, error
    invalid = threading.Event()  # the speculative profile check failed: stop the build
    sent = threading.Event()

    def _during_build() -> None:  # graph load, profile check, name index: beside TensorRT
        # after the request is out: protobuf's import holds the GIL for ms at a time
        sent.wait(5.0)
        if speculative:
            try:
                _validate_profiles(ref, config)
            except WorkbenchError as e:
                side["invalid"] = e
                invalid.set()
                return
        try:
            import workbench.build.export  # noqa: F401  (needed as soon as the build returns)
            from workbench.build.log import NameIndex

            side["names"] = NameIndex.from_graph(_graph_of(onnx_path, ref))
        except BaseException as e:
            side["error"] = e

    def _raise_if_invalid() -> None:
        sent.set()  # (the request may never have gone out)
        prefetch.join()
        if "invalid" in side:
            raise side["invalid"]

    prefetch = threading.Thread(target=_during_build, daemon=True)
    prefetch.start()
    done = False
    try:
        out = client.call("build", args, timeout=remaining, on_event=on_event,
                          cancel=_AnyEvent(cancel, invalid), sent=sent)
        _raise_if_invalid()
        os.replace(tmp, engine)  # complete engines only ever appear under their key
        done = True
    except WorkerTimeout as e:
        _raise_if_invalid()
        _failed(ws, key, config, "timeout")
        raise BuildTimeout(f"the build exceeded its time limit of {timeout:g} s and was "
                           "stopped; nothing was cached", code="timeout", hint=e.hint,
                           log=[{"level": "info", "message": e.log_tail}]) from None
    except WorkerCancelled:
        _raise_if_invalid()
        _failed(ws, key, config, "cancelled")
        raise BuildCancelled("the build was cancelled; nothing was cached",
                             code="cancelled") from None
    except WorkerError as e:
        _raise_if_invalid()
        from workbench.build.log import NameIndex, findings_from_log

        if e.code in BAD_INPUT_CODES:  # the user's input is wrong (CLI exit 2)
            field_name = (e.details or {}).get("field")
            raise WorkbenchError(e.message, file=str(ref.path) if ref.path else None,
                                 field=field_name, node=e.node, hint=e.hint) from None
        if e.code == "parse-failed" and not e.node:
            ref.model  # a file that is not ONNX at all: WorkbenchError naming it (exit 2)
        node = e.node
        errs = (e.details or {}).get("errors") or []
        if not node and errs and errs[0].get("node_index") is not None:
            node = _node_for_index(ref, errs[0]["node_index"])
        log = (e.details or {}).get("log") or []
        found = findings_from_log(log, NameIndex.from_graph(ref.model.graph))
        for err in errs:  # every node the parser refused, not only the first
            n = err.get("node") or _node_for_index(ref, err.get("node_index"))
            plugin = "plugin" in str(err.get("message", "")).lower()
            hint = ("pass the plugin library with --plugins, or replace the node "
                    "(`workbench fix MODEL`)" if plugin else
                    "see `workbench check MODEL`; `workbench fix MODEL` proposes recipes")
            found.append(Finding(
                "error", "missing-plugin" if plugin else "parse-error",
                f"TensorRT's parser refused {err.get('op') or 'the node'}: {err.get('message')}",
                nodes=[n] if n else [], op=err.get("op") or None, source="parser", hint=hint))
        _failed(ws, key, config, e.code, node=node, message=e.message)
        raise BuildFailed(e.message, node=node, op=e.op, hint=e.hint, code=e.code, log=log,
                          findings=found,
                          file=str(ref.path) if ref.path else None) from None
    finally:
        if not done:  # the partial engine and the worker's own temp file, if any
            for stale in ws.engines_dir.glob(tmp.name + "*"):
                try:
                    stale.unlink()
                except OSError:
                    pass
    prefetch.join()
    if "error" in side:
        raise side["error"]
    from workbench.build.log import findings_from_log
    from workbench.build.export import export_for

    findings += findings_from_log(out.get("log", []), side["names"])
    for n in out.get("unmatched_fp32_layers", []):
        findings.append(Finding("warning", "exclusion-not-found",
                                f"no TensorRT layer matches excluded node '{n}'", nodes=[n],
                                source="build", hint="check the node name"))
    export = export_for(config, onnx_path=str(onnx_path), engine_path=str(output or engine),
                        backend=out["backend"], route=route,
                        calib_cache=args.get("calib_cache"))
    meta = {
        "key": key, "key_doc": key_doc, "config": config.to_dict(),
        "config_hash": config.config_hash, "size_bytes": out["size_bytes"],
        "backend": out["backend"], "backend_version": out["backend_version"], "route": route,
        "onnx_path": str(onnx_path), "build_seconds": out["build_seconds"],
        "targets": out.get("targets", []), "notes": out.get("notes", []),
        "findings": [f.to_dict() for f in findings], "export": export,
        "log": out.get("log", [])[-4000:], "layers": out.get("layers", []),
        "created": time.time(),
    }
    atomic_write_json(meta_path, meta, indent=None)  # cache internals: compact, fast
    res = _result_from_meta(meta, engine, time.monotonic() - t0, cache_hit=False)
    if output is not None:
        res.output_path = _copy_out(engine, output, ref.path)
    ws.append_history({"action": "build", "cache_hit": False, "key": key,
                       "config_hash": config.config_hash, "engine": str(engine),
                       "seconds": round(res.seconds, 3), "backend": res.backend,
                       "backend_version": res.backend_version, "precision": config.precision})
    return res


class _AnyEvent:
    """Set when any of its events is (the worker client only asks is_set())."""

    def __init__(self, *events: Optional[threading.Event]) -> None:
        self.events = [e for e in events if e is not None]

    def is_set(self) -> bool:
        return any(e.is_set() for e in self.events)


def _validate_profiles(ref: _ModelRef, config: BuildConfig) -> None:
    """Profiles against the model's inputs (symbolic dims shared between inputs included);
    the worker checks them again against the parsed network."""
    from workbench.precision.profiles import validate_profiles

    model = ref.model  # an unreadable file is reported as such, not as a profile problem
    try:
        validate_profiles(model, config.profiles)
    except WorkbenchError as e:
        raise WorkbenchError(e.message, file=str(ref.path) if ref.path else None,
                             field=f"profiles.{e.field}" if e.field else "profiles",
                             hint=e.hint) from None


def _failed(ws: Any, key: str, config: BuildConfig, code: str, **extra: Any) -> None:
    """A failed, cancelled or timed-out build is part of the model's history too."""
    try:
        ws.append_history({"action": "build", "ok": False, "code": code, "key": key,
                           "config_hash": config.config_hash, **extra})
    except OSError:
        pass


def _graph_of(onnx_path: Path, ref: _ModelRef) -> Any:
    if ref.path is not None and Path(onnx_path) == ref.path:
        return ref.model.graph
    import onnx

    return onnx.load(str(onnx_path), load_external_data=False).graph


def inspect_engine(result: BuildResult, *, client: Any = None,
                   timeout: Optional[float] = 300) -> Dict[str, Any]:
    """The engine inspector's layer JSON where this machine can deserialize the engine
    (`source` "engine-inspector", `info` = the parsed JSON); otherwise the built network's
    per-layer dtypes (`source` "network", with the `reason`), e.g. for a TensorRT-RTX engine
    built ahead of time on a machine without a suitable GPU."""
    from workbench.worker.client import WorkerError, default_client

    client = client or default_client()
    try:
        return client.call("inspect_engine", {
            "engine_path": result.engine_path, "backend": result.backend,
            "onnx_path": result.onnx_path or None,
            "strongly_typed": result.route != "legacy-flags"}, timeout=timeout)
    except WorkerError as e:
        raise WorkbenchError(e.message, file=result.engine_path, hint=e.hint) from None
