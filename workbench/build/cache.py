"""The engine cache: content hashes (memoised by path, size and mtime, so large models and
calibration sets are hashed once), cache keys, reading a cached build back and publishing one.

A build holds its key's own lock while it runs (`Workspace.build_lock_path`): a second build
of the same key waits, then reads the first one's engine from the cache; builds of other keys
run side by side. Only the publish (engine rename + its card) and the lookup run under the
workspace lock, so a reader always sees an engine together with the card that describes it.
The first complete engine published under a key stays; only a build asked not to use the cache
(it does not wait either) replaces it.

The key is sha256(model bytes incl. external data + config + calibration data + backend
name/version + target); fields that do not change the engine are left out.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
import types
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

from workbench.build.result import BuildResult
from workbench.build.spec import BuildConfig
from workbench.errors import Finding, WorkbenchError
from workbench.fsutil import atomic_write_json
from workbench.model import Model, ModelLike

CACHE_SCHEMA = 1
# Fields that do not change the engine (they are left out of the cache key).
_NOT_IN_KEY = ("timing_cache",)
# Calibration-only fields: in the key only for targets that calibrate.
_CALIBRATION_FIELDS = ("calibrate_method", "allow_random_calibration", "per_channel")

_memo_lock = threading.Lock()
_hash_memo: Dict[Tuple[str, int, int], Dict[str, Any]] = {}


def _stat_key(p: Path) -> Tuple[str, int, int]:
    st = p.stat()
    return (str(p.resolve()), st.st_size, st.st_mtime_ns)


def _memo_file() -> Path:
    from workbench.workspace import workbench_home

    return workbench_home() / "hash-memo.json"


def _memo_lock_path() -> Path:
    return _memo_file().with_name(".hash-memo.lock")


def _memo_lookup(p: Path) -> Optional[str]:
    key = _stat_key(p)
    with _memo_lock:
        rec = _hash_memo.get(key)
    if rec is None:
        try:
            disk = json.loads(_memo_file().read_text())
            rec = disk.get("|".join(map(str, key))) if isinstance(disk, dict) else None
        except (OSError, ValueError, RecursionError):
            rec = None
    # a memo that is not what we write (edited, corrupt, hostile) is no memo: hash again
    if not (isinstance(rec, dict) and isinstance(rec.get("hash"), str)
            and isinstance(rec.get("external", []), list)):
        return None
    for ext in rec.get("external", []):
        try:
            if list(_stat_key(Path(ext[0]))) != list(ext):
                return None
        except (OSError, TypeError, ValueError, IndexError, KeyError):
            return None
    with _memo_lock:
        _hash_memo[key] = rec
    return rec["hash"]


def _memo_store(p: Path, h: str, external: Sequence[Path]) -> None:
    from workbench.fsutil import locked

    key = _stat_key(p)
    rec = {"hash": h, "external": [list(_stat_key(Path(e))) for e in external]}
    with _memo_lock:
        _hash_memo[key] = rec
        try:
            f = _memo_file()
            with locked(_memo_lock_path()):  # processes sharing the home merge, not overwrite
                try:
                    disk = json.loads(f.read_text())
                except (OSError, ValueError, RecursionError):
                    disk = {}
                if not isinstance(disk, dict):
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


class ModelRef:
    """A model given as path / Model / ModelProto, with its content hash and lazy opening."""

    def __init__(self, model_or_path: ModelLike) -> None:
        from workbench.model import as_model

        self._model: Optional[Model] = None
        self.path: Optional[Path] = None
        if isinstance(model_or_path, (str, os.PathLike)):  # opened only when needed
            self.path = Path(model_or_path).resolve()
            if not self.path.is_file():
                raise WorkbenchError("file not found" if not self.path.exists() else
                                     "not a file", file=str(self.path), hint="check the path")
        else:
            self._model = as_model(model_or_path)
            self.path = self._model.path
        self._hash: Optional[str] = None

    @property
    def model(self) -> "Model":
        if self._model is None:
            from workbench.model import as_model

            self._model = as_model(self.path)
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


def hash_calibration(source: Optional[str]) -> Optional[str]:
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


def reads_calibration(config: BuildConfig) -> bool:
    """Does the build read its calibration data? INT8/FP8 take their scales from it; FP16 and
    BF16 check the FP32 activations on it against their range (findings that are part of
    the cached card, so other data, or none, is another key)."""
    entry = config.entry
    return entry.needs_calibration or (entry.kind == "float" and config.calibration is not None)


def cache_key(model_hash: str, config: BuildConfig, route: str, backend: str, version: str,
              calib_hash: Optional[str]) -> Tuple[str, Dict[str, Any]]:
    cfg = {k: v for k, v in config.to_dict().items() if k not in _NOT_IN_KEY}
    uses_calib = reads_calibration(config)
    cfg["calibration"] = calib_hash if uses_calib else None
    if not config.entry.needs_calibration:  # (how scales are computed: no scales, no say)
        for k in _CALIBRATION_FIELDS:
            cfg.pop(k, None)
    doc = {"schema": CACHE_SCHEMA, "model": model_hash, "config": cfg, "route": route,
           "backend": backend, "backend_version": version, "target": config.target}
    if config.effective_tf32 is not None:  # (absent: the keys of builds before it hold)
        doc["tf32"] = config.effective_tf32
    key = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
    return key, doc


def load_cached(engine: Path, meta_path: Path, key: str, ws: Any = None
                ) -> Optional[Dict[str, Any]]:
    """The cached build's meta (its engine card) when it belongs to `key` and reads back as
    a BuildResult, under `ws`'s lock when given; a card that does not (corrupt, edited, an
    older schema) is a cache miss, so the build runs again and writes a good one."""
    if ws is not None:
        with ws.lock():
            return load_cached(engine, meta_path, key)
    if not (engine.is_file() and meta_path.is_file()):
        return None
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(meta, dict) or meta.get("key") != key or \
            meta.get("size_bytes") != engine.stat().st_size:
        return None
    try:
        result_from_meta(meta, engine, 0.0, cache_hit=True).to_dict()
    except Exception:  # (a wrong type or a missing field anywhere in the card)
        return None
    return meta


def publish_engine(ws: Any, tmp: Path, engine: Path, meta_path: Path, meta: Dict[str, Any],
                   *, replace: bool = False) -> Dict[str, Any]:
    """Move the complete engine `tmp` into the cache with its card, as one step under the
    workspace lock; when another process published this key first, its engine and card stay
    (a reader holding that path never sees it change) and `tmp` is removed, unless `replace`
    (a build that was asked not to use the cache). Returns the card now in the cache."""
    with ws.lock():
        existing = None if replace else load_cached(engine, meta_path, meta["key"])
        if existing is not None:
            tmp.unlink(missing_ok=True)
            return existing
        from workbench.build.card import card_from_meta, write_card

        write_card(engine, card_from_meta(meta, engine))  # the card first: never a stale one
        os.replace(tmp, engine)
        atomic_write_json(meta_path, meta, indent=None)  # cache internals: compact, fast
    return meta


def result_from_meta(meta: Dict[str, Any], engine: Path, seconds: float, cache_hit: bool
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


