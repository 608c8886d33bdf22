"""Networks from ONNX (Polygraphy's CreateNetwork / NetworkFromOnnxPath): plugin libraries,
the builder, network creation flags, the parse (and the supported-subgraph partition), and
the one parser-error record every op reports. The only place in the worker that creates a
network or a parser."""
from __future__ import annotations

import ctypes
import os
import re
from typing import Any, Dict, List, Optional, Tuple

from workbench.worker.loaders.backend import version_of
from workbench.worker.registry import OpError

PARSE_HINT = ("run `workbench check MODEL` for every unsupported node and the recipes that "
              "fix them")
_loaded_plugins: Dict[str, str] = {}


def load_plugins(trt: Any, logger: Any, plugins: Optional[List[str]]) -> List[str]:
    """Load the plugin libraries the user named, and only those (untrusted input: nothing
    implicit); returns "path (how)" for each. TensorRT's plugin registry loads libraries that
    export plugin creators; libraries that register themselves from static initialisers (the
    8.x style) are dlopen'ed. TensorRT's own plugins are initialised once any is loaded."""
    out = []
    for lib in plugins or []:
        path = os.path.abspath(os.path.expanduser(str(lib)))
        if path in _loaded_plugins:
            out.append(_loaded_plugins[path])
            continue
        if not os.path.isfile(path):
            raise OpError("plugin library not found: %s" % path, code="bad-plugin",
                          hint="pass the path of a built plugin .so/.dll with --plugins")
        how = "plugin registry"
        try:
            registry = trt.get_plugin_registry() if hasattr(trt, "get_plugin_registry") else None
            handle = None
            if registry is not None and hasattr(registry, "load_library"):
                handle = registry.load_library(path)
            if handle is None:
                ctypes.CDLL(path, mode=getattr(ctypes, "RTLD_GLOBAL", 0))
                how = "dlopen"
        except OSError as e:
            raise OpError("cannot load plugin library %s: %s" % (path, e), code="bad-plugin",
                          hint="check the library was built for this TensorRT and platform") from None
        _loaded_plugins[path] = "%s (%s)" % (path, how)
        out.append(_loaded_plugins[path])
    init = getattr(trt, "init_libnvinfer_plugins", None)
    if plugins and init is not None:
        try:
            init(logger, "")
        except Exception:
            pass
    return out


def create_builder(trt: Any, logger: Any) -> Any:
    """trt.Builder, or a clear 'no-gpu' error (8.x returns nullptr without a CUDA device)."""
    try:
        builder = trt.Builder(logger)
    except TypeError as e:
        builder, why = None, str(e)
    else:
        why = "no builder returned"
    if builder is None:
        raise OpError("TensorRT %s could not create a builder (%s)" % (version_of(trt), why),
                      code="no-gpu", hint="this TensorRT needs a usable NVIDIA GPU and driver "
                      "to build; TensorRT-RTX builds ahead of time on a CPU (--backend "
                      "tensorrt-rtx --target sm89)")
    return builder


class Network:
    """A parsed (or partly parsed) network: the TensorRT objects plus what the parse said.
    `errors` are parser-error records (see `parser_errors`); `partition` is the parser's
    supported-subgraph answer when asked for."""

    def __init__(self, builder: Any, network: Any, parser: Any, path: str,
                 strongly_typed: bool) -> None:
        self.builder, self.network, self.parser = builder, network, parser
        self.path = path
        self.strongly_typed = strongly_typed
        self.ok = False
        self.errors: List[Dict[str, Any]] = []
        self.partition: Optional[Dict[str, Any]] = None
        self.partition_error: Optional[str] = None


def network_flags(trt: Any, strongly_typed: bool = False) -> Tuple[int, bool]:
    """(creation flags, strongly typed?): EXPLICIT_BATCH where the backend has it but no
    strongly typed networks (8.x needs it; 10.x deprecates it and warns), STRONGLY_TYPED when
    asked for and present."""
    ndcf = getattr(trt, "NetworkDefinitionCreationFlag", None)
    eb = getattr(ndcf, "EXPLICIT_BATCH", None)
    st = getattr(ndcf, "STRONGLY_TYPED", None)
    flags = 0
    if eb is not None and st is None:
        flags |= 1 << int(eb)
    if strongly_typed and st is not None:
        flags |= 1 << int(st)
        return flags, True
    return flags, False


def _empty(trt: Any, builder: Any, logger: Any, path: str, strongly_typed: bool) -> Network:
    flags, st = network_flags(trt, strongly_typed)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    return Network(builder, network, parser, path, st)


def network_from_onnx(trt: Any, builder: Any, logger: Any, path: str, *,
                      strongly_typed: bool = False, partition: bool = False,
                      check: bool = True) -> Network:
    """Parse the ONNX file at `path` (by path: external data beside it is found).

    `partition`: also ask for the supported-subgraph partition (supports_model_v2 is itself a
    full parse, so where it exists one pass gives both). `check`: raise the 'parse-failed'
    OpError on a failed parse; else the caller reads `.ok` and `.errors`."""
    if not os.path.isfile(path):
        raise OpError("model file not found: %s" % path, code="not-found")
    net = _empty(trt, builder, logger, path, strongly_typed)
    if partition and hasattr(net.parser, "supports_model_v2"):
        with open(path, "rb") as f:
            data = f.read()
        net.ok = bool(net.parser.supports_model_v2(data, path))
        net.partition = {"api": "supports_model_v2", "supported": net.ok,
                         "subgraphs": _subgraphs_v2(net.parser)}
    else:
        net.ok = bool(net.parser.parse_from_file(path))
        if partition:
            try:
                net.partition = _partition_v1(_empty(trt, builder, logger, path, False), path)
            except Exception as e:  # the partition is extra information, never fatal
                net.partition_error = "%s: %s" % (type(e).__name__, e)
    if hasattr(logger, "parsed"):
        logger.parsed()
    net.errors = parser_errors(net.parser)
    if check and not net.ok:
        raise parse_failure(net.errors)
    return net


def _subgraphs_v2(parser: Any) -> List[Dict[str, Any]]:
    subs = []
    for i in range(int(getattr(parser, "num_subgraphs", 0) or 0)):
        nodes = [int(x) for x in parser.get_subgraph_nodes(i)]
        sup = parser.is_subgraph_supported(i) if hasattr(parser, "is_subgraph_supported") \
            else None
        subs.append({"nodes": nodes, "supported": None if sup is None else bool(sup)})
    return subs


def _partition_v1(net: Network, path: str) -> Optional[Dict[str, Any]]:
    """TensorRT <= 10's supports_model: (ok, [(nodes, supported), ...])."""
    if not hasattr(net.parser, "supports_model"):
        return None
    with open(path, "rb") as f:
        data = f.read()
    res = net.parser.supports_model(data, path)
    ok, subs_raw = res if isinstance(res, tuple) else (bool(res), [])
    return {"api": "supports_model", "supported": bool(ok),
            "subgraphs": [{"nodes": [int(x) for x in nodes], "supported": bool(sup)}
                          for nodes, sup in subs_raw]}


def _call(obj: Any, name: str, default: Any = None) -> Any:
    fn = getattr(obj, name, None)
    if fn is None:
        return default
    try:
        return fn()
    except Exception:
        return default


def parser_errors(parser: Any) -> List[Dict[str, Any]]:
    """Every parser error as one record shape, whichever op parsed: node (name), node_index,
    op (operator), code, message, local_function_stack, file/func/line of the importer, and
    node_name_api (False on TensorRT 8.x, whose errors carry only the node index: the client
    maps it to a node). Every accessor is probed."""
    out = []
    for i in range(int(getattr(parser, "num_errors", 0) or 0)):
        err = parser.get_error(i)
        code = _call(err, "code")
        stack: List[str] = []
        raw = getattr(err, "local_function_stack", None)
        if raw is not None:
            try:
                stack = [str(s) for s in (raw() if callable(raw) else raw)]
            except Exception:
                stack = []
        node_index = _call(err, "node", -1)
        out.append(_plugin_gpu_note({
            "node": _call(err, "node_name", "") or "",
            "node_index": int(node_index) if node_index is not None else -1,
            "op": _call(err, "node_operator", "") or "",
            "code": getattr(code, "name", None) or str(code).split(".")[-1],
            "message": _worded(without_gpu_noise(str(_call(err, "desc", "") or "")),
                               _call(err, "node_operator", ""), str(_call(err, "func", "") or "")),
            "local_function_stack": stack,
            "file": str(_call(err, "file", "") or ""),
            "func": str(_call(err, "func", "") or ""),
            "line": int(_call(err, "line", -1) or -1),
            "node_name_api": hasattr(err, "node_name"),
        }))
    return out


# a parser error whose description is only the failed assertion's expression ("false", "[8] false",
# "0"): TensorRT's op checkers (onnxOpCheckers.cpp) refuse an op so, with no words at all
_BARE_ASSERTION = re.compile(r"^\s*(\[\d+\]\s*)?(false|0|!?\w+)\s*$", re.IGNORECASE)


def _worded(desc: str, op: Any, func: str) -> str:
    """The parser's description, or words in its place where it is a bare assertion ("false"):
    which check refused which op, so no message ends in ': false'."""
    if desc and not _BARE_ASSERTION.match(desc):
        return desc
    what = "%s is not supported by this TensorRT" % op if op else "the node is not supported"
    check = " (its check %s refused it, giving no reason)" % func if func else \
        " (the parser gives no reason)"
    return what + check


# the importer found the plugin's creator but could not create the plugin (TensorRT-RTX's
# ROIAlign: its CUDA set-up fails without a usable GPU, "Cuda Error in ROIAlignV3: 35")
_PLUGIN_NOT_CREATED = re.compile(r"plugin != nullptr")
_no_gpu: List[str] = []  # memo: why there is no usable GPU ("" = there is, or unknown)


def no_gpu_reason() -> str:
    """Why this worker has no usable CUDA GPU (the CUDA runtime's words), "" when it has one
    or cannot tell (no polygraphy to ask with)."""
    if not _no_gpu:
        why = ""
        try:
            from workbench.worker.cuda import Cuda

            Cuda("creating a plugin")
        except OpError as e:
            text = str(e)
            m = re.search(r"\(CUDA: (.*)\)$", text)
            why = m.group(1) if m else ("" if "not importable" in text else text)
        except Exception:
            why = ""
        _no_gpu.append(why)
    return _no_gpu[0]


def _plugin_gpu_note(rec: Dict[str, Any]) -> Dict[str, Any]:
    """`rec` with `plugin_needs_gpu` (why there is no GPU) where its importer found a plugin
    creator but the plugin could not be created on a machine without a usable GPU."""
    if _PLUGIN_NOT_CREATED.search(rec.get("message") or ""):
        why = no_gpu_reason()
        if why:
            rec["plugin_needs_gpu"] = why
    return rec


_GPU_NOISE_LINE = re.compile(r"catchCudaError|CUDA driver version is insufficient|"
                             r"Cuda Error in \w+: 35\b")


def without_gpu_noise(text: str) -> str:
    """A parser error's text without the CUDA lines TensorRT-RTX appends when it probes a GPU
    while reporting it ("cudaError 35: CUDA driver version is insufficient"): parsing never
    runs on a GPU, so they say nothing about the model. Kept when they are all it says (then
    they are the error: the machine's). The client side words the same rule in
    workbench.core.blame.without_gpu_noise."""
    lines = str(text).splitlines()
    kept = [ln for ln in lines if not _GPU_NOISE_LINE.search(ln)]
    return "\n".join(kept) if any(ln.strip() for ln in kept) else str(text)


def parse_failure(errors: List[Dict[str, Any]]) -> OpError:
    """The 'parse-failed' error every op raises: names the first refused node, carries all."""
    first = errors[0] if errors else {"message": "unknown parser error"}
    node = first.get("node") or None
    opname = first.get("op") or None
    where = " at node '%s'" % node if node else ""
    if opname:
        where += " (%s)" % opname
    return OpError("TensorRT could not parse the model%s: %s" % (where, first.get("message")),
                   node=node, op=opname, code="parse-failed", hint=PARSE_HINT,
                   details={"errors": errors})
