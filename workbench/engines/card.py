"""Engine cards: what an engine is and where it runs, as JSON beside it (`ENGINE.card.json`).

Every engine the workbench writes (the cache's, `workbench build -o`, copies) gets one, written
atomically before the engine itself, so a reader never sees an engine with another's card:

    card = read_card("model.engine")      # None when the engine has no card
    card["backend"], card["tensorrt_version"], card["targets"], card["compute_capability"],
    card["hardware_compatibility"], card["profiles"], card["precision"], card["onnx_sha256"],
    card["io"]["inputs"], card["built_on"]          # {"name", "uuid", "compute_capability"}
    check_engine("model.engine", "tensorrt", "10.3.0", "9.0")   # WorkbenchError when refused

The portability guard itself (`mismatch`, `guard`) lives in workbench.worker.card: the worker
runs it before every deserialization (profiling, inspection), where the runtime is known; this
module writes cards and lets Python callers check one (the variant matrix, Triton export).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Dict, Optional

from workbench.core.errors import WorkbenchError
from workbench.core.fsutil import atomic_write_json
from workbench.worker.card import (CARD_KIND, CARD_SCHEMA, CARD_SUFFIX, built_for, card_path,
                                   mismatch)
from workbench.worker.registry import OpError

__all__ = ["CARD_SUFFIX", "built_for", "card_from_meta", "card_path", "check_engine",
           "copy_card", "mismatch", "read_card", "write_card"]


def card_from_meta(meta: Dict[str, Any], engine_path: Any) -> Dict[str, Any]:
    """The card of an engine from its cache record (workbench.engines.engine's `meta`)."""
    from workbench.engines.spec import SPEC_FIELDS

    config = meta.get("config") or {}
    built_on = meta.get("built_on") or None
    return {
        "kind": CARD_KIND, "schema": CARD_SCHEMA, "engine": Path(engine_path).name,
        "size_bytes": meta.get("size_bytes"), "backend": meta.get("backend"),
        "tensorrt_version": meta.get("backend_version"),
        "targets": list(meta.get("targets") or []),
        "compute_capability": (built_on or {}).get("compute_capability")
        if not meta.get("targets") else None,
        "hardware_compatibility": meta.get("hardware_compatibility"),
        "version_compatible": bool(meta.get("version_compatible")),
        "route": meta.get("route"), "profiles": config.get("profiles", []),
        "precision": {k: config.get(k) for k in SPEC_FIELDS if k in config},
        "onnx_sha256": (meta.get("key_doc") or {}).get("model"),
        "model_path": meta.get("model_path"), "onnx_path": meta.get("onnx_path"),
        "io": meta.get("io") or {"inputs": [], "outputs": []},
        "built_on": built_on, "cache_key": meta.get("key"),
        "config_hash": meta.get("config_hash"),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(meta.get("created")
                                                                  or time.time())),
    }


def write_card(engine_path: Any, card: Dict[str, Any]) -> Path:
    """Write `card` beside `engine_path` (atomic); returns the card's path."""
    card = dict(card, engine=Path(engine_path).name)
    out = Path(card_path(str(engine_path)))
    atomic_write_json(out, card)
    return out


def read_card(engine_path: Any) -> Optional[Dict[str, Any]]:
    """The card beside `engine_path` (None when it has none); WorkbenchError naming the card
    when the file there is not one."""
    from workbench.worker.card import read_card as _read

    try:
        return _read(str(engine_path))
    except OpError as e:
        raise WorkbenchError(e.message, hint=e.hint) from None


def copy_card(src_engine: Any, dst_engine: Any, meta: Optional[Dict[str, Any]] = None
              ) -> Optional[Path]:
    """Give the copy `dst_engine` the card of `src_engine` (made from `meta` when the source has
    none, e.g. a cache entry from before cards); call it before the engine is copied."""
    src = Path(card_path(str(src_engine)))
    if src.is_file():
        try:
            card = read_card(src_engine)
        except WorkbenchError:
            card = None
        if card is not None:
            return write_card(dst_engine, card)
    if meta is not None:
        return write_card(dst_engine, card_from_meta(meta, dst_engine))
    dst = Path(card_path(str(dst_engine)))
    if dst.exists():  # a stale card of an older engine at that path must not describe this one
        dst.unlink()
    return None


def check_engine(engine_path: Any, backend: str, version: str,
                 compute_capability: Optional[str] = None) -> Optional[Dict[str, Any]]:
    """The engine's card when it runs on `backend` `version` (and a GPU of
    `compute_capability`, when given); WorkbenchError with the guard's one line when not.
    An engine without a card passes (None): TensorRT's own check then speaks."""
    card = read_card(engine_path)
    if card is None:
        return None
    why = mismatch(card, backend, version, compute_capability)
    if why is not None:
        raise WorkbenchError(why, file=str(engine_path))
    return card

