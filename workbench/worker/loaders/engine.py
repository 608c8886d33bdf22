"""Engines (Polygraphy's EngineFromNetwork / EngineBytesFromNetwork / EngineFromBytes):
build and serialize (a failure names the layer and node it blames), read an engine after
its card is checked, deserialize, the hardware-compatibility level a config holds."""
from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple

from workbench.worker.loaders.backend import version_of
from workbench.worker.loaders.config import Config
from workbench.worker.protocol import AUTO_ORDER
from workbench.worker.registry import Cancelled, Context, OpError

_LAYER_NODE = (re.compile(r"\[ONNX Layer: ([^\]]+)\]"),
               re.compile(r"(?:[Ll]ayer|[Nn]ode)[: ]+'?([^\s':,()]+)"))


def serialize_network(builder: Any, network: Any, config: Any) -> Tuple[Any, Optional[str]]:
    """(serialized engine or None, the exception text where the binding raised instead)."""
    try:
        return builder.build_serialized_network(network, config), None
    except Exception as e:  # some bindings raise instead of returning None
        return None, "%s: %s" % (type(e).__name__, e)


_LAYER_IN_MSG = re.compile(r"\((?P<cls>I[A-Z]\w*Layer) (?P<name>[^:()]+?):")
_LAYER_CLASS = re.compile(r"\b(?P<cls>I[A-Z]\w*Layer)\b")


def _norm(kind: str) -> str:
    return kind.replace("_", "").lower()


def layer_nodes(network: Any) -> Dict[str, Dict[str, Any]]:
    """Layer name -> its type and ONNX node names (from metadata where TensorRT records it)."""
    out: Dict[str, Dict[str, Any]] = {}
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        meta = str(getattr(layer, "metadata", "") or "")
        kind = getattr(getattr(layer, "type", None), "name", str(getattr(layer, "type", "")))
        out[layer.name] = {"nodes": re.findall(r"\[ONNX Layer: ([^\]]+)\]", meta),
                           "type": _norm(kind.split(".")[-1])}
    return out


def blame(msg: str, layers: Dict[str, Dict[str, Any]]) -> Tuple[Optional[str], List[str]]:
    """The layer a build error names: `(ITopKLayer TopK: ...)`, else a known layer name in the
    text, else the only layer of the class it names (`IOneHotLayer must be ...`)."""
    m = _LAYER_IN_MSG.search(msg)
    if m and m.group("name").strip() in layers:
        name = m.group("name").strip()
        return name, layers[name]["nodes"]
    for name in sorted(layers, key=len, reverse=True):
        if len(name) <= 3 and name.isalpha():
            continue  # ("or", "to", "fc" are words of TensorRT's sentences as well)
        if name and re.search(r"(^|[\s(\[])" + re.escape(name) + r"([\s:)\]]|$)", msg):
            return name, layers[name]["nodes"]
    for c in _LAYER_CLASS.finditer(msg):
        kind = _norm(c.group("cls")[1:-len("Layer")])
        same = [n for n, info in layers.items() if info["type"] == kind]
        if len(same) == 1:
            return same[0], layers[same[0]]["nodes"]
        if same:
            return None, sorted({x for n in same for x in (layers[n]["nodes"] or [n])})
    return None, []


def build_serialized(builder: Any, network: Any, cfg: Config, logger: Any,
                     ctx: Optional[Context] = None) -> Any:
    """Build the engine; raises Cancelled, the calibrator's error, or 'build-failed' naming
    the layer/node the last error message names. Frees the calibrator's buffers."""
    try:
        blob, exc = serialize_network(builder, network, cfg.config)
    finally:
        if cfg.calibrator is not None:
            cfg.calibrator.free()
    cal_err = getattr(cfg.calibrator, "error", None)
    if cal_err is not None:
        if isinstance(cal_err, OpError):
            raise cal_err
        raise OpError("calibration failed: %s: %s" % (type(cal_err).__name__, cal_err),
                      code="bad-calibration")
    if blob is not None:
        return blob
    if (ctx is not None and ctx.cancelled) or getattr(cfg.monitor, "cancelled", False):
        raise Cancelled("the build was cancelled")
    errs = logger.errors() + ([exc] if exc else [])
    last = errs[-1] if errs else "no error message (see the log)"
    node = None
    for rx in _LAYER_NODE:
        m = rx.search(last)
        if m:
            node = m.group(1)
            break
    if node is None:  # a layer named in the text ('/post/NMS_118 has no runners'): its node
        try:
            _, nodes = blame(last, layer_nodes(network))
        except Exception:  # (bindings without layer metadata)
            nodes = []
        node = nodes[0] if len(nodes) == 1 else None
    raise OpError("TensorRT failed to build the engine: %s" % last, node=node,
                  code="build-failed", details={"log": logger.messages[-60:]})


def read_engine(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise OpError("cannot read engine %s: %s" % (path, e), code="bad-engine") from None


def backend_for(engine_path: str, backend: str) -> str:
    """The backend to load `engine_path` with: `backend`, or for "auto" the one its engine
    card names (an engine built by TensorRT-RTX loads with TensorRT-RTX where both exist)."""
    if backend != "auto":
        return backend
    from workbench.worker.card import read_card

    try:
        card = read_card(engine_path)
    except OpError:
        return backend  # (read_checked_engine reports the bad card)
    named = (card or {}).get("backend")
    return named if named in AUTO_ORDER else backend


def read_checked_engine(name: str, trt: Any, engine_path: str,
                        compute_capability: Optional[str] = None,
                        check_only: bool = False) -> bytes:
    """The engine's bytes, after its card (workbench.worker.card) was checked against this
    runtime (`name`, trt's version, the GPU's `compute_capability` when known): an engine for
    another TensorRT or GPU is refused here, before TensorRT sees it."""
    from workbench.worker.card import guard

    guard(engine_path, name, version_of(trt), compute_capability)
    return b"" if check_only else read_engine(engine_path)


def hardware_compatibility(config: Any) -> Optional[str]:
    """The builder config's hardware-compatibility level by name (None where there is none)."""
    level = getattr(config, "hardware_compatibility_level", None)
    if level is None:
        return None
    return str(getattr(level, "name", level)).split(".")[-1].upper()


def deserialize(trt: Any, logger: Any, blob: Any) -> Tuple[Any, str]:
    """(engine or None, why not): a TensorRT-RTX engine built ahead of time for another GPU,
    or any engine on a machine without one, does not deserialize."""
    try:
        engine = trt.Runtime(logger).deserialize_cuda_engine(blob)
    except Exception as e:
        return None, "%s: %s" % (type(e).__name__, e)
    if engine is None:
        errs = logger.errors()
        return None, errs[-1] if errs else "the engine did not deserialize"
    return engine, ""
