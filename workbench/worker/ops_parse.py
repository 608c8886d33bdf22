"""Worker ops that ask TensorRT's own ONNX parser (and builder) whether it takes a model.

`parse`: parse one or many ONNX files (by path, so external data next to them is found) and
return every parser error (node, op, code, message, local-function stack) plus the
supported-subgraph partition where the parser has one. `check_build`: parse then attempt an
engine build (ahead of time on TensorRT-RTX: the target compute capability is set when the
backend has `IBuilderConfig.set_compute_capability`) and name the layer/node it failed on.
Plugin libraries load only when the caller names them. Python 3.9, stdlib + tensorrt only.
"""
from __future__ import annotations

import os
import re
import time
from typing import Any, Dict, List, Optional, Tuple

from workbench.worker.registry import Context, OpError, op
from workbench.worker.trt import import_backend, make_logger, network_flags, version_of

_loaded_plugins: Dict[str, str] = {}


def load_plugins(trt: Any, plugins: Optional[List[str]]) -> List[str]:
    """Load the plugin libraries the user named (and only those); returns "path (how)".

    TensorRT's plugin registry loads libraries that export plugin creators; libraries that
    register themselves from static initialisers (the TensorRT 8.x style) are dlopen'ed."""
    out = []
    for lib in plugins or []:
        path = os.path.abspath(os.path.expanduser(str(lib)))
        if path in _loaded_plugins:
            out.append(_loaded_plugins[path])
            continue
        if not os.path.isfile(path):
            raise OpError("plugin library not found: %s" % path, code="bad-plugin",
                          hint="pass the path of a built plugin .so/.dll with --plugin")
        how = "plugin registry"
        try:
            registry = trt.get_plugin_registry() if hasattr(trt, "get_plugin_registry") else None
            handle = None
            if registry is not None and hasattr(registry, "load_library"):
                handle = registry.load_library(path)
            if handle is None:
                import ctypes

                ctypes.CDLL(path, mode=getattr(ctypes, "RTLD_GLOBAL", 0))
                how = "dlopen"
        except OSError as e:
            raise OpError("cannot load plugin library %s: %s" % (path, e), code="bad-plugin",
                          hint="check the library was built for this TensorRT and platform")
        _loaded_plugins[path] = "%s (%s)" % (path, how)
        out.append(_loaded_plugins[path])
    return out


def _call(obj: Any, name: str, default: Any = None) -> Any:
    fn = getattr(obj, name, None)
    if fn is None:
        return default
    try:
        return fn()
    except Exception:
        return default


def _error_record(err: Any) -> Dict[str, Any]:
    """One parser error as plain data; every accessor is probed (8.6 lacks node_name...)."""
    code = _call(err, "code")
    stack: List[str] = []
    raw = getattr(err, "local_function_stack", None)
    if raw is not None:
        try:
            stack = [str(s) for s in (raw() if callable(raw) else raw)]
        except Exception:
            stack = []
    node_index = _call(err, "node", -1)
    return {
        "node": _call(err, "node_name", "") or "",
        "op": _call(err, "node_operator", "") or "",
        "node_index": int(node_index) if node_index is not None else -1,
        "code": getattr(code, "name", None) or str(code).split(".")[-1],
        "message": str(_call(err, "desc", "") or ""),
        "file": str(_call(err, "file", "") or ""),
        "func": str(_call(err, "func", "") or ""),
        "line": int(_call(err, "line", -1) or -1),
        "local_function_stack": stack,
        # TensorRT 8.x errors carry only the node index: the caller maps it to a node name
        "node_name_api": hasattr(err, "node_name"),
    }


def _new_network(trt: Any, builder: Any) -> Any:
    return builder.create_network(network_flags(trt))


def _parse_file(trt: Any, builder: Any, logger: Any, path: str) -> Tuple[Any, Any, bool,
                                                                          List[Dict[str, Any]]]:
    network = _new_network(trt, builder)
    parser = trt.OnnxParser(network, logger)
    ok = bool(parser.parse_from_file(path))
    errors = [_error_record(parser.get_error(i)) for i in range(parser.num_errors)]
    return network, parser, ok, errors


def _partition(trt: Any, builder: Any, logger: Any, path: str) -> Optional[Dict[str, Any]]:
    """The parser's supported-subgraph partition (node indices), where it has one."""
    network = _new_network(trt, builder)
    parser = trt.OnnxParser(network, logger)
    with open(path, "rb") as f:
        data = f.read()
    if hasattr(parser, "supports_model_v2"):
        ok = bool(parser.supports_model_v2(data, path))
        n = int(getattr(parser, "num_subgraphs", 0) or 0)
        subs = []
        for i in range(n):
            nodes = [int(x) for x in parser.get_subgraph_nodes(i)]
            sup = parser.is_subgraph_supported(i) if hasattr(parser, "is_subgraph_supported") \
                else None
            subs.append({"nodes": nodes, "supported": None if sup is None else bool(sup)})
        return {"api": "supports_model_v2", "supported": ok, "subgraphs": subs}
    if hasattr(parser, "supports_model"):  # TensorRT <= 10: (ok, [(nodes, supported), ...])
        res = parser.supports_model(data, path) if path else parser.supports_model(data)
        ok, subs_raw = res if isinstance(res, tuple) else (bool(res), [])
        subs = [{"nodes": [int(x) for x in nodes], "supported": bool(sup)}
                for nodes, sup in subs_raw]
        return {"api": "supports_model", "supported": bool(ok), "subgraphs": subs}
    return None


def _parse_one(trt: Any, builder: Any, logger: Any, path: str, partition: bool) -> Dict[str, Any]:
    """Errors and (where the parser has one) the partition. supports_model_v2 is itself a full
    parse, so when it exists one pass gives both."""
    network = _new_network(trt, builder)
    parser = trt.OnnxParser(network, logger)
    part: Optional[Dict[str, Any]] = None
    rec: Dict[str, Any] = {"path": path}
    if partition and hasattr(parser, "supports_model_v2"):
        with open(path, "rb") as f:
            data = f.read()
        ok = bool(parser.supports_model_v2(data, path))
        subs = []
        for i in range(int(getattr(parser, "num_subgraphs", 0) or 0)):
            nodes = [int(x) for x in parser.get_subgraph_nodes(i)]
            sup = parser.is_subgraph_supported(i) if hasattr(parser, "is_subgraph_supported") \
                else None
            subs.append({"nodes": nodes, "supported": None if sup is None else bool(sup)})
        part = {"api": "supports_model_v2", "supported": ok, "subgraphs": subs}
    else:
        ok = bool(parser.parse_from_file(path))
        if partition:
            try:
                part = _partition(trt, builder, logger, path)
            except Exception as e:  # the partition is extra information, never fatal
                rec["partition_error"] = "%s: %s" % (type(e).__name__, e)
    rec.update(parsed=ok, errors=[_error_record(parser.get_error(i))
                                  for i in range(parser.num_errors)],
               num_layers=int(network.num_layers), partition=part)
    return rec


@op("parse")
def parse(ctx: Context, paths: Any = None, path: Optional[str] = None, backend: str = "auto",
          plugins: Optional[List[str]] = None, partition: bool = True) -> Dict[str, Any]:
    """Parse each ONNX file with the real parser; errors and partition per file."""
    name, trt = import_backend(backend)
    files = list(paths or []) + ([path] if path else [])
    if not files:
        raise OpError("no model path given", code="bad-args")
    loaded = load_plugins(trt, plugins)
    logger = make_logger(trt, None, "ERROR")
    builder = trt.Builder(logger)
    results = []
    for i, p in enumerate(files):
        ctx.check_cancel()
        ctx.progress("parse", i / max(1, len(files)), os.path.basename(p))
        if not os.path.isfile(p):
            raise OpError("model file not found: %s" % p, code="bad-args")
        t0 = time.monotonic()
        logger.messages.clear()
        rec = _parse_one(trt, builder, logger, p, partition)
        rec["log"] = [m["message"] for m in logger.messages if m["level"] == "error"][-20:]
        rec["seconds"] = round(time.monotonic() - t0, 4)
        results.append(rec)
    ctx.progress("parse", 1.0, "done")
    return {"backend": name, "module": trt.__name__, "version": version_of(trt),
            "plugins": loaded, "results": results}


_LAYER_IN_MSG = re.compile(r"\((?P<cls>I[A-Z]\w*Layer) (?P<name>[^:()]+?):")
_LAYER_CLASS = re.compile(r"\b(?P<cls>I[A-Z]\w*Layer)\b")
_CC_NAMES = {"sm75": "SM75", "sm80": "SM80", "sm86": "SM86", "sm89": "SM89", "sm120": "SM120",
             "sm121": "SM121"}


def _target(trt: Any, config: Any, target: Optional[str]) -> Optional[str]:
    """Set the ahead-of-time compute capability where the backend has one (TensorRT-RTX)."""
    cc_enum = getattr(trt, "ComputeCapability", None)
    if cc_enum is None or not hasattr(config, "set_compute_capability") or not target:
        return None
    member = getattr(cc_enum, _CC_NAMES.get(str(target).lower(), str(target).upper()), None)
    if member is None:
        raise OpError("unknown compute capability '%s'" % target, code="bad-args",
                      hint="use one of: %s" % ", ".join(sorted(_CC_NAMES)))
    if hasattr(config, "num_compute_capabilities"):
        try:
            config.num_compute_capabilities = 1
        except Exception:
            pass
    config.set_compute_capability(member, 0)
    return str(target).lower()


def _default_profile(trt: Any, builder: Any, network: Any,
                     profiles: Optional[Dict[str, Any]]) -> Tuple[Any, List[str]]:
    """A profile for dynamic inputs: the caller's (min, opt, max), else every -1 dim as 1.
    Shape-tensor inputs need values: the caller's, else 1 per element (noted)."""
    notes = []
    profile = builder.create_optimization_profile()
    needed = False
    for i in range(network.num_inputs):
        t = network.get_input(i)
        given = (profiles or {}).get(t.name)
        if getattr(t, "is_shape_tensor", False):
            needed = True
            if given:
                profile.set_shape_input(t.name, *[list(v) for v in given])
            else:
                n = 1
                for d in t.shape:
                    n *= max(int(d), 1)
                lo, hi = [0] * n, [1] * n  # a range, so the value stays a runtime value
                profile.set_shape_input(t.name, lo, hi, hi)
                notes.append("shape input '%s' given values %s..%s for the build (pass "
                             "profiles to choose values)" % (t.name, lo, hi))
            continue
        dims = [int(d) for d in t.shape]
        if given:
            needed = True
            profile.set_shape(t.name, *[tuple(int(x) for x in v) for v in given])
        elif any(d < 0 for d in dims):
            needed = True
            fixed = tuple(1 if d < 0 else d for d in dims)
            profile.set_shape(t.name, fixed, fixed, fixed)
            notes.append("dynamic input '%s' built at shape %s (pass profiles to choose "
                         "min/opt/max)" % (t.name, list(fixed)))
    return (profile if needed else None), notes


def _norm(kind: str) -> str:
    return kind.replace("_", "").lower()


def _layer_nodes(network: Any) -> Dict[str, Dict[str, Any]]:
    """Layer name -> its type and ONNX node names (from metadata where TensorRT records it)."""
    out: Dict[str, Dict[str, Any]] = {}
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        meta = str(getattr(layer, "metadata", "") or "")
        kind = getattr(getattr(layer, "type", None), "name", str(getattr(layer, "type", "")))
        out[layer.name] = {"nodes": re.findall(r"\[ONNX Layer: ([^\]]+)\]", meta),
                           "type": _norm(kind.split(".")[-1])}
    return out


def _blame(msg: str, layers: Dict[str, Dict[str, Any]]) -> Tuple[Optional[str], List[str]]:
    """The layer a build error names: `(ITopKLayer TopK: ...)`, else a known layer name in the
    text, else the only layer of the class it names (`IOneHotLayer must be ...`)."""
    m = _LAYER_IN_MSG.search(msg)
    if m and m.group("name").strip() in layers:
        name = m.group("name").strip()
        return name, layers[name]["nodes"]
    for name in sorted(layers, key=len, reverse=True):
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


@op("check_build")
def check_build(ctx: Context, path: str, backend: str = "auto",
                plugins: Optional[List[str]] = None, target: Optional[str] = "sm89",
                profiles: Optional[Dict[str, Any]] = None,
                memory_limit_mb: int = 1024) -> Dict[str, Any]:
    """Parse, then try to build an engine; report the layer (and ONNX node) a failure names."""
    name, trt = import_backend(backend)
    loaded = load_plugins(trt, plugins)
    logger = make_logger(trt, ctx, "WARNING")
    builder = trt.Builder(logger)
    if not os.path.isfile(path):
        raise OpError("model file not found: %s" % path, code="bad-args")
    ctx.progress("parse", 0.0, os.path.basename(path))
    network, parser, ok, errors = _parse_file(trt, builder, logger, path)
    base = {"backend": name, "module": trt.__name__, "version": version_of(trt),
            "plugins": loaded, "parsed": ok, "errors": errors}
    if not ok:
        base.update(built=False, build_errors=[], notes=[], log=[])
        return base
    config = builder.create_builder_config()
    target_set = _target(trt, config, target)
    if hasattr(config, "set_memory_pool_limit") and hasattr(trt, "MemoryPoolType"):
        try:
            config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, memory_limit_mb << 20)
        except Exception:
            pass
    profile, notes = _default_profile(trt, builder, network, profiles)
    if profile is not None:
        config.add_optimization_profile(profile)
    layer_nodes = _layer_nodes(network)
    logger.messages.clear()
    ctx.progress("build", 0.1, "building")
    t0 = time.monotonic()
    try:
        blob = builder.build_serialized_network(network, config)
        exc = None
    except Exception as e:  # some bindings raise instead of returning None
        blob, exc = None, "%s: %s" % (type(e).__name__, e)
    seconds = round(time.monotonic() - t0, 3)
    built = blob is not None
    msgs = [m["message"] for m in logger.messages if m["level"] == "error"]
    if exc:
        msgs.append(exc)
    build_errors = []
    for msg in msgs:
        layer, nodes = _blame(msg, layer_nodes)
        build_errors.append({"layer": layer, "nodes": nodes, "message": msg})
    base.update(built=built, build_errors=build_errors if not built else [], notes=notes,
                target=target_set, seconds=seconds,
                engine_bytes=int(blob.nbytes) if built and hasattr(blob, "nbytes") else None,
                layers=sorted(layer_nodes),
                log=[m["message"] for m in logger.messages][-30:])
    ctx.progress("build", 1.0, "built" if built else "failed")
    return base
