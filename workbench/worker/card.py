"""The engine card's file and the portability guard: both ends of the worker read them.

An engine only runs on the TensorRT release (backend and version) that built it and on the GPU
architecture it was built for: the builder's GPU, the TensorRT-RTX ahead-of-time targets, or,
with a hardware-compatibility level, every Ampere-or-later GPU. The card (`ENGINE.card.json`,
written beside every engine the workbench writes: workbench.engines.card) records that, and
`guard` compares it with the runtime *before* the engine is deserialized, so a mismatch is one
line saying what it was built for, what this is, and what to do, not a TensorRT crash or a
"Serialization assertion" deep in a log. An engine without a card (built elsewhere) is let
through: TensorRT's own check then speaks.

Stdlib only (the worker's Python 3.9 imports it); the client side re-exports it.
"""
from __future__ import annotations

import json
import os
import re
from typing import Any, Dict, List, Optional

from workbench.worker.registry import OpError

CARD_SUFFIX = ".card.json"
CARD_SCHEMA = 1
CARD_KIND = "trt-workbench engine card"
INCOMPATIBLE = "incompatible-engine"


def card_path(engine_path: str) -> str:
    """Where the card of `engine_path` lives: beside it, `NAME.engine.card.json`."""
    return str(engine_path) + CARD_SUFFIX


def read_card(engine_path: str) -> Optional[Dict[str, Any]]:
    """The card beside `engine_path`, None when there is none; OpError when one is there but
    is not a card (unreadable, not JSON, another schema): a guard must not guess."""
    path = card_path(engine_path)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, "r", encoding="utf-8") as f:
            card = json.load(f)
    except (OSError, ValueError, RecursionError) as e:
        raise OpError("%s: engine card unreadable (%s)" % (path, e), code=INCOMPATIBLE,
                      hint="rebuild the engine with `workbench build`, "
                           "which writes a new card") from None
    if not isinstance(card, dict) or card.get("kind") != CARD_KIND or \
            card.get("schema") != CARD_SCHEMA:
        raise OpError("%s: not a trt-workbench engine card of schema %d" % (path, CARD_SCHEMA),
                      code=INCOMPATIBLE,
                      hint="rebuild the engine with `workbench build`, which writes a new card")
    return card


def _release(version: Any) -> List[int]:
    """"10.3.0.26" -> [10, 3, 0]: the part of a version an engine is tied to."""
    nums = [int(n) for n in re.findall(r"\d+", str(version))]
    return nums[:3]


def _sm(cc: Any) -> str:
    """"8.9" / "sm89" / "SM89" -> "sm89"."""
    text = str(cc).strip().lower()
    if text.startswith("sm"):
        return text
    return "sm" + text.replace(".", "")


def _cc_number(cc: Any) -> Optional[float]:
    digits = _sm(cc)[2:]
    if not digits.isdigit() or len(digits) < 2:
        return None
    return int(digits[:-1]) + int(digits[-1]) / 10.0


def built_for(card: Dict[str, Any]) -> str:
    """What the engine was built for, as a person reads it: "tensorrt-rtx 1.7.1.116 for sm89"."""
    text = "%s %s" % (card.get("backend"), card.get("tensorrt_version"))
    targets = [t for t in card.get("targets") or [] if t != "current"]
    hw = str(card.get("hardware_compatibility") or "NONE").upper()
    if hw == "AMPERE_PLUS":
        text += " for any Ampere-or-later GPU (hardware compatibility AMPERE_PLUS)"
    elif targets:
        text += " for " + ",".join(targets)
    elif card.get("compute_capability"):
        text += " for %s" % _sm(card["compute_capability"])
    elif card.get("backend") == "tensorrt-rtx":  # no target set: the library's default
        text += " for TensorRT-RTX's default targets (Ampere and later; Turing needs sm75)"
    gpu = (card.get("built_on") or {}).get("name")
    if gpu:
        text += " (built on %s)" % gpu
    return text


def mismatch(card: Dict[str, Any], backend: str, version: str,
             compute_capability: Optional[str] = None) -> Optional[str]:
    """Why an engine with `card` does not run on this runtime (`backend` `version`, GPU of
    `compute_capability` when known), or None when it does. One line, ending in what to do."""
    what = []
    fix = []
    if card.get("backend") and card["backend"] != backend:
        what.append("the %s backend" % backend)
        fix.append("load it with --backend %s" % card["backend"])
    want, have = _release(card.get("tensorrt_version")), _release(version)
    if want and have and want != have:
        if not (card.get("version_compatible") and want[:1] == have[:1] and have >= want):
            what.append("%s %s" % (backend, version))
            fix.append("rebuild it with this TensorRT, or build with --flag "
                       "VERSION_COMPATIBLE (TensorRT >= 8.6) to run on later releases")
    if compute_capability:
        here = _sm(compute_capability)
        hw = str(card.get("hardware_compatibility") or "NONE").upper()
        targets = [_sm(t) for t in card.get("targets") or [] if t != "current"]
        ok = True
        if hw == "AMPERE_PLUS":
            n = _cc_number(here)
            ok = n is None or n >= 8.0
        elif targets:
            ok = here in targets
        elif card.get("compute_capability"):
            ok = _sm(card["compute_capability"]) == here
        if not ok:
            what.append("a %s GPU" % here)
            fix.append("rebuild it here (`workbench build MODEL --target %s` for TensorRT-RTX), "
                       "or build with --hardware-compat ampere_plus (TensorRT >= 8.6) to run "
                       "on every Ampere-or-later GPU" % here)
    if not what:
        return None
    return "engine built for %s; this is %s: %s" % (built_for(card), " on ".join(what),
                                                   "; or ".join(fix))


def guard(engine_path: str, backend: str, version: str,
          compute_capability: Optional[str] = None) -> Optional[Dict[str, Any]]:
    """Refuse `engine_path` (OpError code "incompatible-engine") when its card says it does not
    run here; call it before deserializing. Returns the card (None when there is none)."""
    card = read_card(engine_path)
    if card is None:
        return None
    why = mismatch(card, backend, version, compute_capability)
    if why is not None:
        raise OpError("%s: %s" % (engine_path, why), code=INCOMPATIBLE,
                      details={"card": card_path(engine_path), "built_for": built_for(card)})
    return card


def device_info() -> Optional[Dict[str, Any]]:
    """The GPU this worker builds on (device 0 of what CUDA_VISIBLE_DEVICES shows): name, UUID
    and compute capability, None without one. Read through libcudart's cudaGetDeviceProperties
    (`name` is its first field, the 16-byte `uuid` the next: stable since CUDA 10)."""
    import ctypes

    try:
        from workbench.worker.cuda import Cuda

        cuda = Cuda("reading the GPU for the engine card")
    except Exception:  # no GPU, no CUDA runtime: the card says nothing about a GPU
        return None
    out: Dict[str, Any] = {"compute_capability": cuda.compute_capability()}
    try:
        buf = ctypes.create_string_buffer(16384)  # larger than any cudaDeviceProp so far
        fn = getattr(cuda.lib, "cudaGetDeviceProperties_v2", None) or \
            cuda.lib.cudaGetDeviceProperties
        if fn(buf, 0) == 0:
            raw = buf.raw
            out["name"] = raw[:256].split(b"\0", 1)[0].decode("utf-8", "replace")
            u = raw[256:272].hex()
            out["uuid"] = "GPU-%s-%s-%s-%s-%s" % (u[:8], u[8:12], u[12:16], u[16:20], u[20:])
    except Exception:
        pass
    return out
