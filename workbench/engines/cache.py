"""The engine cache: cache keys (over the model handle's content hash and the calibration
set's, both memoised by path, size and mtime: `workbench.core.contenthash`), reading a cached
build back and publishing one.

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
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from workbench.engines.result import BuildResult
from workbench.engines.spec import BuildConfig
from workbench.core.errors import Finding, WorkbenchError
from workbench.core.fsutil import atomic_write_json
from workbench.core.contenthash import _hash_memo, _stat_key  # noqa: F401 (tests read the memo)
from workbench.core.contenthash import memo_lookup as _memo_lookup
from workbench.core.contenthash import memo_store as _memo_store

CACHE_SCHEMA = 1
# Fields that do not change the engine (they are left out of the cache key).
_NOT_IN_KEY = ("timing_cache",)
# Calibration-only fields: in the key only for targets that calibrate.
_CALIBRATION_FIELDS = ("calibrate_method", "allow_random_calibration", "per_channel")

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
        from workbench.engines.card import card_from_meta, write_card

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


