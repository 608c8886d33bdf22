"""The worker's TensorRT loaders: small pieces every op composes, after Polygraphy's
`backend/trt/loader.py` (CreateNetwork, NetworkFromOnnxPath, CreateConfig, EngineFromBytes...).

    name, trt = load_backend("tensorrt-rtx")
    log = make_logger(trt, ctx, keep="info")
    builder = create_builder(trt, log)
    net = network_from_onnx(trt, builder, log, "model.onnx", strongly_typed=True)
    cfg = create_config(trt, builder, net.network, log, ctx, target="sm89", profiles=[...])
    blob = build_serialized(builder, net.network, cfg, log, ctx)

This is the only place in the worker that creates a network (`create_network`) or a parser
(`OnnxParser`), loads plugins, turns parser errors into records, or sets builder-config
fields; ops hold only what is theirs (the build op's result, check_build's blame, profiling).
Every feature is probed with getattr, never by version string: explicit batch is set where
the backend still has the flag and no strongly typed networks (TensorRT 8.x), STRONGLY_TYPED
where present and asked for. Python 3.9, stdlib + tensorrt (+ numpy lazily for calibration).
"""
from __future__ import annotations

import ctypes
import importlib
import os
import re
import sys
import time
import warnings
from typing import Any, Dict, List, Optional, Tuple

from workbench.worker.protocol import AUTO_ORDER, BACKEND_MODULES
from workbench.worker.registry import Cancelled, Context, OpError

LEVELS = ("error", "warning", "info", "verbose")
PARSE_HINT = ("run `workbench check MODEL` for every unsupported node and the recipes that "
              "fix them")

# ============================================================================================
# backend
# ============================================================================================
_backends: Dict[str, Tuple[str, Any]] = {}


def load_backend(backend: str = "auto") -> Tuple[str, Any]:
    """(backend name, TensorRT module) for auto | tensorrt | tensorrt-rtx, imported once."""
    if backend in _backends:
        return _backends[backend]
    try:
        return _import_backend(backend)
    except OpError:
        if not sys.flags.no_site:
            raise
    # started with -S (see launch.worker_command): a backend installed through a .pth hook
    # only becomes importable once site has run
    import site

    site.main()
    return _import_backend(backend)


def _import_backend(backend: str) -> Tuple[str, Any]:
    names = AUTO_ORDER if backend == "auto" else (backend,)
    errors: List[str] = []
    for name in names:
        if name not in BACKEND_MODULES:
            raise OpError("unknown backend '%s'" % backend, code="bad-args",
                          hint="use auto, tensorrt or tensorrt-rtx")
        for mod_name in BACKEND_MODULES[name]:
            try:
                mod = importlib.import_module(mod_name)
            except Exception as e:  # ImportError, or a broken install raising OSError
                errors.append("%s: %s: %s" % (mod_name, type(e).__name__, e))
                continue
            if not hasattr(mod, "Builder"):  # e.g. the PyPI stub meta-package
                errors.append("%s: imported but has no Builder (a stub package?)" % mod_name)
                continue
            _backends[backend] = (name, mod)
            return name, mod
    raise OpError(
        "no TensorRT backend '%s' importable in this interpreter" % backend,
        code="no-backend",
        hint="pip install 'trt-workbench[rtx]' for TensorRT-RTX, or point WORKBENCH_TRT_PYTHON "
             "at an interpreter that has tensorrt",
        details={"tried": errors})


def version_of(trt: Any) -> str:
    return str(getattr(trt, "__version__", "unknown"))


def builder_flags(trt: Any) -> List[str]:
    """Names of this TensorRT's BuilderFlag members (none on a strongly typed-only build)."""
    bf = getattr(trt, "BuilderFlag", None)
    if bf is None:
        return []
    members = getattr(bf, "__members__", None)
    names = list(members) if members else [n for n in dir(bf) if n.isupper()]
    return sorted(n for n in names if getattr(bf, n, None) is not None)


# IBuilderConfig knobs beyond precision, probed by name (each exists on some TensorRT only)
BUILDER_KNOBS = ("builder_optimization_level", "max_aux_streams", "avg_timing_iterations",
                 "tiling_optimization_level", "l2_limit_for_tiling", "max_num_tactics",
                 "hardware_compatibility_level", "runtime_platform", "engine_capability",
                 "profile_stream", "num_compute_capabilities")


def builder_knobs(trt: Any) -> Dict[str, Any]:
    """Which builder knobs this TensorRT exposes: IBuilderConfig attributes by name, and the
    enums that feed them (TacticSource, TensorFormat, PreviewFeature members)."""
    cls = getattr(trt, "IBuilderConfig", object)
    out: Dict[str, Any] = {"config": [k for k in BUILDER_KNOBS if hasattr(cls, k)]}
    for enum in ("TacticSource", "TensorFormat", "PreviewFeature"):
        e = getattr(trt, enum, None)
        members = getattr(e, "__members__", None) if e is not None else None
        out[enum] = sorted(members) if members else sorted(
            n for n in dir(e) if n.isupper()) if e is not None else []
    return out


def capabilities(trt: Any) -> Dict[str, bool]:
    """What this TensorRT can do, probed attribute by attribute. Every BuilderFlag member is
    reported as `<name>_flag` (`fp16_flag`, ...): the client's precision table decides which
    flag a target needs, so a new target needs no change here."""
    parser = getattr(trt, "OnnxParser", None)
    ndcf = getattr(trt, "NetworkDefinitionCreationFlag", None)
    flags = {"%s_flag" % n.lower(): True for n in builder_flags(trt)}
    return {
        **flags,
        "int8_calibrator": getattr(trt, "IInt8EntropyCalibrator2", None) is not None,
        "strongly_typed_flag": getattr(ndcf, "STRONGLY_TYPED", None) is not None,
        "explicit_batch_flag": getattr(ndcf, "EXPLICIT_BATCH", None) is not None,
        "progress_monitor": getattr(trt, "IProgressMonitor", None) is not None,
        "compute_capability": getattr(trt, "ComputeCapability", None) is not None,
        "supports_model_v2": parser is not None and hasattr(parser, "supports_model_v2"),
        "engine_inspector": hasattr(getattr(trt, "ICudaEngine", object), "create_engine_inspector"),
        "runtime_cache": hasattr(getattr(trt, "IBuilderConfig", object), "create_runtime_cache"),
    }


# ============================================================================================
# logger and progress
# ============================================================================================
# Phases recognised in the log when the TensorRT has no IProgressMonitor (8.x).
_LOG_PHASES = (
    (re.compile(r"Graph optimization time|Applying generic optimizations|Graph construction"),
     "optimizing graph", 0.2),
    (re.compile(r"Starting Calibration|Calibrated batch|Post Processing Calibration"),
     "calibrating", 0.3),
    (re.compile(r"Total Activation Memory|Total Host Persistent Memory|Detected \d+ inputs"),
     "selecting tactics", 0.6),
    (re.compile(r"Engine generation completed|Total Weights Memory"), "serializing", 0.9),
)


# the parser's verbose line as it starts on a node (onnx-tensorrt's ModelImporter, 8.6 to
# TensorRT-RTX; 8.6 prefixes its source location)
_PARSING_NODE = re.compile(r"(?:^|: )Parsing node: (.*) \[([\w.:]+)\]\s*$")


def make_logger(trt: Any, ctx: Optional[Context] = None, keep: str = "warning",
                phases_from_log: bool = False, nodes: Optional[Context] = None) -> Any:
    """The ILogger: keeps messages down to level `keep` in `.messages` (the build log that
    findings are made from), streams errors and warnings to the client as log events, and
    (8.x, no IProgressMonitor) turns known log lines into progress phases.

    TensorRT calls it for every message, verbose ones included (thousands per build), so the
    common case, a message below `keep`, returns after one int() of the severity."""
    sev = trt.ILogger.Severity
    names = {int(sev.INTERNAL_ERROR): "error", int(sev.ERROR): "error",
             int(sev.WARNING): "warning", int(sev.INFO): "info", int(sev.VERBOSE): "verbose"}
    keep_rank = LEVELS.index(keep.lower()) if keep.lower() in LEVELS else 1
    kept = {v for v, name in names.items() if LEVELS.index(name) <= keep_rank}
    streamed = {v for v, name in names.items() if name in ("error", "warning")}
    verbose = int(sev.VERBOSE)
    tracker = nodes if nodes is not None else ctx

    class _Logger(trt.ILogger):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.messages: List[Dict[str, str]] = []
            self.phases_from_log = phases_from_log
            self.tracker = tracker  # told each node the parser starts (a crash names it)
            self.parsing = 0  # nodes the parser started on, this parse

        def parsed(self) -> None:
            """The parser is done with nodes (a later crash is not one of theirs)."""
            self.parsing = 0
            if self.tracker is not None:
                self.tracker.working_on("parse", None)

        def log(self, severity: Any, msg: str) -> None:  # noqa: A003
            v = int(severity)
            if v == verbose and self.tracker is not None and "Parsing node: " in msg:
                hit = _PARSING_NODE.search(msg)
                if hit:
                    self.tracker.working_on("parse", hit.group(1), hit.group(2), self.parsing)
                    self.parsing += 1
            if v == verbose and v not in kept and \
                    msg[:40].lstrip().startswith("List of affected weights"):
                # (TensorRT 8.6-10 names the weights a conversion warning counts only here)
                self.messages.append({"level": "verbose", "message": msg})
            if v in kept:
                level = names[v]
                self.messages.append({"level": level, "message": msg})
                if ctx is not None and v in streamed:
                    ctx.log(level, msg)
            if self.phases_from_log and ctx is not None:
                for rx, phase, frac in _LOG_PHASES:
                    if rx.search(msg):
                        ctx.progress(phase, frac, msg[:200])
                        break

        def errors(self) -> List[str]:
            """The error messages; TensorRT-RTX's 'CUDA driver version is insufficient'
            (it probes CUDA while reporting a parse error on a machine without a GPU) is left
            out when other errors say what failed, kept when it is the only one."""
            errs = [m["message"] for m in self.messages if m["level"] == "error"]
            noise = [m for m in errs if "CUDA driver version is insufficient" in m]
            return [m for m in errs if m not in noise] if noise and len(noise) < len(errs) \
                else errs

    return _Logger()


def make_progress_monitor(trt: Any, ctx: Context, step_delay: float = 0.0) -> Any:
    """IProgressMonitor: nested phases -> one overall fraction; returns False to cancel."""

    class _Monitor(trt.IProgressMonitor):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            trt.IProgressMonitor.__init__(self)
            self.stack: List[List[Any]] = []  # [name, num_steps, completed]
            self.last_sent = 0.0
            self.cancelled = False
            self.best = 0.0  # TensorRT's nested phases can step back: never show that

        def _fraction(self) -> float:
            frac, scale = 0.0, 1.0
            for _name, n, done in self.stack:
                n = max(int(n), 1)
                frac += scale * min(done, n) / n
                scale /= n
            return min(frac, 1.0)

        def _send(self, force: bool = False) -> None:
            now = time.monotonic()
            if force or now - self.last_sent > 0.05:
                self.last_sent = now
                names = " / ".join(s[0] for s in self.stack)
                self.best = max(self.best, self._fraction())
                ctx.progress("building", round(self.best, 4), names)

        def phase_start(self, phase_name: str, parent_phase: Optional[str],
                        num_steps: int) -> None:
            try:
                self.stack.append([phase_name, num_steps, 0])
                self._send()
            except Exception:  # never let an exception cross into TensorRT
                pass

        def step_complete(self, phase_name: str, step: int) -> bool:
            try:
                for entry in reversed(self.stack):
                    if entry[0] == phase_name:
                        entry[2] = int(step) + 1
                        break
                if step_delay:
                    time.sleep(step_delay)
                self._send()
                if ctx.cancelled:
                    self.cancelled = True
                    return False
                return True
            except Exception:
                return True

        def phase_finish(self, phase_name: str) -> None:
            try:
                for i in range(len(self.stack) - 1, -1, -1):
                    if self.stack[i][0] == phase_name:
                        del self.stack[i:]
                        break
                if self.stack:
                    self._send()
            except Exception:
                pass

    return _Monitor()


# ============================================================================================
# plugins and builder
# ============================================================================================
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


# ============================================================================================
# network from ONNX
# ============================================================================================
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
    workbench.blame.without_gpu_noise."""
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


# ============================================================================================
# describing a network
# ============================================================================================
def _enum_namer(enum: Any) -> Any:
    """value -> member name for a pybind11 enum (str() of a member costs ~10 us; this ~0.3)."""
    try:
        table = {int(v): k for k, v in enum.__members__.items()}
    except Exception:  # no __members__: the slow, general way
        return lambda v: getattr(v, "name", None) or str(v).split(".")[-1]
    return lambda v: table.get(int(v)) or str(v).split(".")[-1]


def describe_layers(trt: Any, network: Any, detail: bool = False) -> List[Dict[str, Any]]:
    """Each layer: name, type, outputs (name, dtype) and ONNX metadata; with `detail` also
    index, inputs, shapes and (weakly typed networks) the layer precision."""
    type_name = _enum_namer(trt.LayerType)
    dtype_name = _enum_namer(trt.DataType)

    def tensor(t: Any) -> Dict[str, Any]:
        if t is None:
            return {"name": None, "dtype": None, "shape": None}
        rec = {"name": t.name, "dtype": dtype_name(t.dtype)}
        if detail:
            try:
                rec["shape"] = [int(d) for d in t.shape]
            except Exception:
                rec["shape"] = None
        return rec

    layers = []
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        rec: Dict[str, Any] = {"name": layer.name, "type": type_name(layer.type),
                               "outputs": [tensor(layer.get_output(j))
                                           for j in range(layer.num_outputs)]}
        if detail:
            rec["index"] = i
            rec["inputs"] = [tensor(layer.get_input(j)) for j in range(layer.num_inputs)]
        meta = getattr(layer, "metadata", None)
        if meta:
            rec["metadata"] = str(meta)
        layers.append(rec)
    return layers


def _format_names(trt: Any) -> List[str]:
    return [n for n in dir(getattr(trt, "TensorFormat", None)) if n.isupper()]


def allowed_formats(trt: Any, t: Any) -> List[str]:
    """The TensorFormat names an I/O tensor may take (its allowed_formats bit mask)."""
    tf, mask = getattr(trt, "TensorFormat", None), getattr(t, "allowed_formats", None)
    if tf is None or mask is None:
        return []
    return sorted(n for n in dir(tf) if n.isupper() and int(mask) >> int(getattr(tf, n)) & 1)


def network_io(trt: Any, network: Any) -> Dict[str, List[Dict[str, Any]]]:
    """The network's inputs and outputs: name, dtype, shape."""
    dtype_name = _enum_namer(trt.DataType)

    def tensor(t: Any) -> Dict[str, Any]:
        out = {"name": t.name, "dtype": dtype_name(t.dtype), "shape": [int(d) for d in t.shape]}
        fmts = allowed_formats(trt, t)
        if fmts and len(fmts) < len(_format_names(trt)):  # narrowed (I/O formats); by
            # default every format is allowed and TensorRT puts I/O in LINEAR
            out["formats"] = fmts
        return out

    return {"inputs": [tensor(network.get_input(i)) for i in range(network.num_inputs)],
            "outputs": [tensor(network.get_output(i)) for i in range(network.num_outputs)]}


# ============================================================================================
# optimization profiles
# ============================================================================================
def add_profiles(trt: Any, builder: Any, config: Any, network: Any,
                 profiles: Optional[List[Dict[str, List[List[int]]]]],
                 fill_dynamic: bool = False) -> List[str]:
    """The one profile setter: each {input: [min, opt, max]} checked against the network's
    inputs (names, ranks, static dims, min <= opt <= max; field "profiles[k].NAME" in errors)
    and added to `config`. Shape-tensor inputs take values. An input with dynamic dims and no
    profile is an error, or with `fill_dynamic` (check_build) built at 1 for each dynamic dim
    (shape inputs: values 0..1), with a note. Returns the notes."""
    inputs = {network.get_input(i).name: network.get_input(i) for i in range(network.num_inputs)}
    notes: List[str] = []
    profiles = list(profiles or [])
    if not profiles and fill_dynamic:
        profiles = [{}]
    for k, prof in enumerate(profiles):
        p = builder.create_optimization_profile()
        needed = bool(prof)
        for name, shapes in prof.items():
            _set_one(p, k, name, shapes, inputs)
        for name, t in inputs.items():
            if name in prof:
                continue
            dims = [int(d) for d in t.shape]
            if fill_dynamic and getattr(t, "is_shape_tensor", False):
                n = 1
                for d in dims:
                    n *= max(d, 1)
                lo, hi = [0] * n, [1] * n  # a range, so the value stays a runtime value
                p.set_shape_input(name, lo, hi, hi)
                needed = True
                notes.append("shape input '%s' given values %s..%s for the build (pass "
                             "profiles to choose values)" % (name, lo, hi))
            elif any(d < 0 for d in dims):
                if not fill_dynamic:
                    raise OpError("input '%s' has dynamic dims %s but profile %d gives it no "
                                  "min/opt/max" % (name, dims, k), code="bad-profile",
                                  details={"field": "profiles[%d]" % k},
                                  hint="add --profile %s:MIN:OPT:MAX" % name)
                fixed = tuple(1 if d < 0 else d for d in dims)
                p.set_shape(name, fixed, fixed, fixed)
                needed = True
                notes.append("dynamic input '%s' built at shape %s (pass profiles to choose "
                             "min/opt/max)" % (name, list(fixed)))
        if not needed:
            continue
        idx = config.add_optimization_profile(p)
        if idx is not None and int(idx) < 0:
            raise OpError("TensorRT rejected profile %d (see the log)" % k, code="bad-profile",
                          details={"field": "profiles[%d]" % k})
    if not profiles:
        dyn = [n for n, t in inputs.items() if any(d < 0 for d in t.shape)]
        if dyn:
            raise OpError("input(s) %s have dynamic dims and no profile was given"
                          % ", ".join("'%s' %s" % (n, list(inputs[n].shape)) for n in dyn),
                          code="bad-profile", details={"field": "profiles"},
                          hint="add --profile INPUT:MIN:OPT:MAX for each, e.g. "
                               "%s:1x...:8x...:32x..." % dyn[0])
    return notes


def _set_one(p: Any, k: int, name: str, shapes: Any, inputs: Dict[str, Any]) -> None:
    field = "profiles[%d].%s" % (k, name)
    if name not in inputs:
        raise OpError("profile %d names '%s', which is not a network input (inputs: %s)"
                      % (k, name, ", ".join(sorted(inputs))), code="bad-profile",
                      details={"field": field})
    if len(shapes) != 3:
        raise OpError("profile for '%s' needs [min, opt, max]" % name, code="bad-profile",
                      details={"field": field})
    mn, opt, mx = [tuple(int(d) for d in s) for s in shapes]
    if getattr(inputs[name], "is_shape_tensor", False):  # values, not dims
        p.set_shape_input(name, mn, opt, mx)
        return
    dims = tuple(inputs[name].shape)
    for label, s in (("min", mn), ("opt", opt), ("max", mx)):
        if len(s) != len(dims):
            raise OpError("profile %s shape %s for '%s' has rank %d; the input has rank %d %s"
                          % (label, list(s), name, len(s), len(dims), list(dims)),
                          code="bad-profile", details={"field": field})
        for axis, (want, got) in enumerate(zip(dims, s)):
            if want >= 0 and want != got:
                raise OpError("profile %s shape %s for '%s' changes static dim %d (%d -> %d)"
                              % (label, list(s), name, axis, want, got), code="bad-profile",
                              details={"field": field})
    for axis in range(len(dims)):
        if not (0 <= mn[axis] <= opt[axis] <= mx[axis]):  # (0: an empty tensor, which
            # TensorRT's profiles take, e.g. a KV cache's past length on the first step)
            raise OpError("profile for '%s' needs 0 <= min <= opt <= max on dim %d (got %d, %d, "
                          "%d)" % (name, axis, mn[axis], opt[axis], mx[axis]),
                          code="bad-profile", details={"field": field})
    p.set_shape(name, mn, opt, mx)


# ============================================================================================
# builder config from one spec
# ============================================================================================
class Config:
    """What create_config made: the IBuilderConfig and everything the build op reports."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.notes: List[str] = []
        self.targets: List[str] = []
        self.calibrator: Any = None
        self.monitor: Any = None
        self.timing_cache: Optional[str] = None  # the path, when it is used
        self.unmatched_layers: List[str] = []  # layer_precisions names no layer matched


def create_config(trt: Any, builder: Any, network: Any, logger: Any,
                  ctx: Optional[Context] = None, *,
                  workspace_bytes: Optional[int] = None,
                  optimization_level: Optional[int] = None, detailed_profiling: bool = True,
                  target: Optional[str] = None, target_required: bool = True,
                  profiles: Optional[List[Dict[str, List[List[int]]]]] = None,
                  fill_dynamic: bool = False, extra_flags: Optional[List[str]] = None,
                  tactic_sources: Optional[List[str]] = None, precision: str = "",
                  legacy_flags: bool = False, builder_flag: Optional[str] = None,
                  calibrate: bool = False,
                  layer_precisions: Optional[Dict[str, str]] = None,
                  precision_constraints: str = "obey",
                  calib_npz: Optional[str] = None, calib_cache: Optional[str] = None,
                  calibrate_method: str = "entropy", timing_cache: Optional[str] = None,
                  progress: bool = False, step_delay: float = 0.0,
                  hardware_compatibility: Optional[str] = None,
                  tf32: Optional[bool] = None) -> Config:
    """The builder config from one spec (the fields of the `build` request):

    memory pool (`workspace_bytes`), builder optimization level, DETAILED profiling verbosity
    (the engine inspector needs it), compute-capability targets (TensorRT-RTX ahead of time;
    `target_required=False` ignores them where the backend has none), optimization profiles
    (see add_profiles), builder flags and tactic sources by name, the legacy precision route
    (FP16/BF16/INT8 builder flags, entropy/minmax calibrator), layer precisions (see
    set_layer_precisions), the timing cache, and the progress monitor (cancel through it)."""
    cfg = Config(builder.create_builder_config())
    config = cfg.config
    if workspace_bytes:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(workspace_bytes))
    if optimization_level is not None:
        if not hasattr(config, "builder_optimization_level"):
            cfg.notes.append("this TensorRT has no builder optimization level; ignored")
        else:
            config.builder_optimization_level = int(optimization_level)
    pv = getattr(trt, "ProfilingVerbosity", None)
    if detailed_profiling and pv is not None and hasattr(config, "profiling_verbosity"):
        config.profiling_verbosity = pv.DETAILED
    if target:
        cfg.targets = set_targets(trt, config, target, required=target_required)
    if hardware_compatibility:
        set_hardware_compatibility(trt, config, hardware_compatibility)
    cfg.notes += add_profiles(trt, builder, config, network, profiles, fill_dynamic)
    for flag in extra_flags or []:
        set_flag(trt, config, flag.upper())
    if tf32 is not None:
        set_tf32(trt, config, bool(tf32), cfg)
    if tactic_sources is not None:
        set_tactic_sources(trt, config, tactic_sources)
    if legacy_flags:
        _legacy_precision(trt, builder, config, network, ctx, cfg, precision, builder_flag,
                          calibrate, calib_npz, calib_cache, calibrate_method)
    if layer_precisions:
        cfg.unmatched_layers, notes = set_layer_precisions(trt, config, network,
                                                           layer_precisions,
                                                           precision_constraints)
        cfg.notes += notes
    if timing_cache:
        _load_timing_cache(builder, config, timing_cache, cfg)
    if progress and ctx is not None and getattr(trt, "IProgressMonitor", None) is not None:
        cfg.monitor = make_progress_monitor(trt, ctx, float(step_delay or 0.0))
        config.progress_monitor = cfg.monitor
    return cfg


def set_targets(trt: Any, config: Any, target: str, required: bool = True) -> List[str]:
    """Compute capabilities to build for ahead of time ("sm89", "sm86,sm89", "current")."""
    cc_enum = getattr(trt, "ComputeCapability", None)
    if cc_enum is None or not hasattr(config, "set_compute_capability"):
        if not required:
            return []
        raise OpError("this TensorRT cannot build for a chosen compute capability (target "
                      "'%s')" % target, code="bad-target",
                      hint="drop --target; only TensorRT-RTX builds ahead of time for a target")
    names = [t.strip().upper() for t in str(target).replace(";", ",").split(",") if t.strip()]
    values = []
    for n in names:
        key = n if n.startswith("SM") or n == "CURRENT" else "SM" + n.replace(".", "")
        v = getattr(cc_enum, key, None)
        if v is None:
            avail = [a.lower() for a in dir(cc_enum) if a.startswith("SM")]
            raise OpError("unknown target compute capability '%s'" % n.lower(),
                          code="bad-target", details={"field": "target"},
                          hint="one of: %s" % ", ".join(avail))
        values.append(v)
    config.num_compute_capabilities = len(values)
    for i, v in enumerate(values):
        if not config.set_compute_capability(v, i):
            raise OpError("TensorRT refused compute capability %s" % names[i],
                          code="bad-target", details={"field": "target"})
    return [n.lower() for n in names]


def set_hardware_compatibility(trt: Any, config: Any, level: str) -> None:
    """config.hardware_compatibility_level by name ("ampere_plus", ...), probed (8.6+)."""
    enum = getattr(trt, "HardwareCompatibilityLevel", None)
    value = getattr(enum, str(level).upper(), None) if enum is not None else None
    if value is None or not hasattr(config, "hardware_compatibility_level"):
        raise OpError("this TensorRT has no hardware-compatibility level '%s'" % level,
                      code="bad-args", details={"field": "hardware_compatibility"},
                      hint="hardware compatibility needs TensorRT >= 8.6; rebuild on the GPU "
                           "that runs the engine instead")
    config.hardware_compatibility_level = value


def set_flag(trt: Any, config: Any, name: str) -> None:
    flag = getattr(getattr(trt, "BuilderFlag", None), name, None)
    if flag is None:
        raise OpError("this TensorRT has no BuilderFlag.%s" % name, code="no-flag",
                      hint="use the strongly typed route (precision in the ONNX) instead")
    config.set_flag(flag)


def set_tf32(trt: Any, config: Any, on: bool, cfg: Config) -> None:
    """Set or clear BuilderFlag.TF32 (probed; a TensorRT without it gets a note)."""
    flag = getattr(getattr(trt, "BuilderFlag", None), "TF32", None)
    if flag is None:
        cfg.notes.append("this TensorRT has no TF32 builder flag; TF32 %s ignored"
                         % ("on" if on else "off"))
        return
    if on:
        config.set_flag(flag)
    else:
        config.clear_flag(flag)


def set_tactic_sources(trt: Any, config: Any, names: List[str]) -> None:
    ts = getattr(trt, "TacticSource", None)
    if ts is None or not hasattr(config, "set_tactic_sources"):
        raise OpError("this TensorRT has no tactic sources to choose", code="no-flag")
    mask = 0
    for t in names:
        v = getattr(ts, t.upper(), None)
        if v is None:
            raise OpError("unknown tactic source '%s'" % t, code="no-flag",
                          hint="one of: %s" % ", ".join(a for a in dir(ts) if a.isupper()))
        mask |= 1 << int(v)
    config.set_tactic_sources(mask)


def _legacy_precision(trt: Any, builder: Any, config: Any, network: Any, ctx: Any, cfg: Config,
                      precision: str, builder_flag: Optional[str], calibrate: bool,
                      calib_npz: Optional[str], calib_cache: Optional[str],
                      method: str) -> None:
    """TensorRT <= 10: the builder lowers precision by flag (the network stays FP32).

    The client's precision table says which BuilderFlag (`builder_flag`, e.g. "FP16") and
    whether a calibrator is fed (`calibrate`): the worker knows no precision names."""
    if builder_flag:
        set_flag(trt, config, builder_flag.upper())
    if calibrate:
        if calib_npz:
            batches = load_calibration_npz(calib_npz)
            if not batches:
                raise OpError("calibration file has no batches", code="bad-calibration")
            if method == "percentile":
                cfg.notes.append("TensorRT has no percentile calibrator: entropy calibration "
                                 "used (the strongly typed route supports percentile)")
            cfg.calibrator = make_calibrator(trt, ctx, batches, calib_cache, method)
            config.int8_calibrator = cfg.calibrator
            if hasattr(config, "set_calibration_profile"):
                cp = builder.create_optimization_profile()
                for iname, arr in batches[0].items():
                    shp = tuple(int(d) for d in arr.shape)
                    cp.set_shape(iname, shp, shp, shp)
                config.set_calibration_profile(cp)
        elif not (calib_cache and os.path.isfile(calib_cache)):
            raise OpError("%s with builder flags needs calibration data or a calibration "
                          "cache" % precision.upper(), code="bad-calibration",
                          hint="pass --calib PATH with representative inputs")


_ONNX_LAYER = re.compile(r"\[ONNX Layer: ([^\]]+)\]")
_SUFFIX = re.compile(r"^(.*)_\d+$")
# what `precision_constraints` asks of the builder: the flags to try, strongest first
CONSTRAINT_FLAGS = {"obey": ("OBEY_PRECISION_CONSTRAINTS", "STRICT_TYPES"),
                    "prefer": ("PREFER_PRECISION_CONSTRAINTS",)}


def _float_types(trt: Any) -> List[Any]:
    return [getattr(trt, n) for n in ("float32", "float16", "bfloat16") if hasattr(trt, n)]


def _layer_nodes(layer: Any, wanted: Any) -> List[str]:
    """The wanted ONNX node names `layer` belongs to: its name, its '[ONNX Layer: NAME]'
    metadata, or (no metadata) NAME_<k>, the parser's name for a node's further layers."""
    meta = str(getattr(layer, "metadata", "") or "")
    hits = [n for n in _ONNX_LAYER.findall(meta) if n in wanted]
    if layer.name in wanted:
        hits.insert(0, layer.name)
    elif not hits and not meta:
        m = _SUFFIX.match(layer.name)
        if m and m.group(1) in wanted:
            hits.append(m.group(1))
    return list(dict.fromkeys(hits))


def _computes_in_float(trt: Any, layer: Any) -> bool:
    """Polygraphy's rule for layers a precision can be put on: no constant, every output a
    float execution tensor (shape computations and integer outputs keep their type)."""
    const = getattr(getattr(trt, "LayerType", None), "CONSTANT", None)
    if const is not None and layer.type == const:
        return False
    floats = _float_types(trt)
    for j in range(layer.num_outputs):
        t = layer.get_output(j)
        if not getattr(t, "is_execution_tensor", True) or t.dtype not in floats:
            return False
    return True


def plan_layer_precisions(trt: Any, network: Any, precisions: Dict[str, str]
                          ) -> Tuple[List[Tuple[int, str]], List[str]]:
    """([(layer index, DataType attribute name)], names no layer matched) for `precisions`:
    ONNX node name -> a `trt` DataType attribute ("float32"...), "*" for every other layer
    that computes in float. Read-only: works on any parsed network."""
    for name, dt in precisions.items():
        if not isinstance(getattr(trt, str(dt), None), type(getattr(trt, "float32", None))):
            raise OpError("layer_precisions['%s']: '%s' is not a DataType of this TensorRT"
                          % (name, dt), code="bad-args", details={"field": "layer_precisions"})
    default = precisions.get("*")
    wanted = {n: dt for n, dt in precisions.items() if n != "*"}
    found: set = set()
    plan: List[Tuple[int, str]] = []
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        nodes = _layer_nodes(layer, wanted)
        found.update(nodes)
        dt = wanted[nodes[0]] if nodes else default
        if dt is not None and _computes_in_float(trt, layer):
            plan.append((i, str(dt)))
    return plan, sorted(set(wanted) - found)


def set_layer_precisions(trt: Any, config: Any, network: Any, precisions: Dict[str, str],
                         constraints: str = "obey") -> Tuple[List[str], List[str]]:
    """Put layers in the DataTypes `precisions` names (see plan_layer_precisions): the layer
    precision and the type of each float output that is not a network output, then the
    builder flag that makes TensorRT obey (or prefer) them. Returns (unmatched names, notes).
    The weakly typed networks of TensorRT <= 10 have layer precision; strongly typed ones
    (TensorRT-RTX, 11) do not: an OpError says to keep nodes in FP32 with Casts instead."""
    if constraints not in CONSTRAINT_FLAGS:
        raise OpError("unknown precision constraints '%s'" % constraints, code="bad-args",
                      details={"field": "precision_constraints"},
                      hint="one of: %s" % ", ".join(CONSTRAINT_FLAGS))
    plan, unmatched = plan_layer_precisions(trt, network, precisions)
    if plan and not hasattr(network.get_layer(plan[0][0]), "precision"):
        raise OpError("this TensorRT has no layer precision (its networks are strongly "
                      "typed)", code="no-flag",
                      hint="keep nodes in FP32 with Casts in the ONNX: the strongly typed route")
    floats = _float_types(trt)
    for i, dt_name in plan:
        layer, dt = network.get_layer(i), getattr(trt, dt_name)
        layer.precision = dt
        for j in range(layer.num_outputs):
            t = layer.get_output(j)
            if t.dtype in floats and not getattr(t, "is_network_output", False):
                layer.set_output_type(j, dt)
    notes: List[str] = []
    bf = getattr(trt, "BuilderFlag", None)
    names = CONSTRAINT_FLAGS[constraints] + tuple(
        n for k, v in CONSTRAINT_FLAGS.items() if k != constraints for n in v)
    flag = next((n for n in names if getattr(bf, n, None) is not None), None)
    if flag is None:
        raise OpError("this TensorRT has no precision-constraint builder flag", code="no-flag",
                      hint="use the strongly typed route (Casts in the ONNX)")
    if flag not in CONSTRAINT_FLAGS[constraints]:
        notes.append("no BuilderFlag for '%s' precision constraints: %s used" % (constraints,
                                                                                 flag))
    config.set_flag(getattr(bf, flag))
    counts: Dict[str, int] = {}
    for _i, dt_name in plan:
        counts[dt_name] = counts.get(dt_name, 0) + 1
    notes.append("layer precision (%s): %s of %d layers" % (
        flag, ", ".join("%d %s" % (c, n) for n, c in sorted(counts.items())),
        network.num_layers))
    return unmatched, notes


# -- timing cache -----------------------------------------------------------------------------
def _load_timing_cache(builder: Any, config: Any, path: str, cfg: Config) -> None:
    """Load the timing cache where it means something. TensorRT-RTX keeps the calls as no-ops
    that warn (and a loaded cache makes it look for a GPU): probed on a scratch config."""
    if not hasattr(config, "create_timing_cache"):
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scratch = builder.create_builder_config()
        scratch.set_timing_cache(scratch.create_timing_cache(b""), False)
    noop = [str(w.message) for w in caught if "no-op" in str(w.message).lower()]
    if noop:
        cfg.notes.append("timing cache not used: %s" % noop[0])
        return
    blob = b""
    if os.path.isfile(path):
        with open(path, "rb") as f:
            blob = f.read()
    cache = config.create_timing_cache(blob)
    if not config.set_timing_cache(cache, False):
        cfg.notes.append("timing cache %s did not match this TensorRT; started a new one" % path)
        config.set_timing_cache(config.create_timing_cache(b""), False)
    elif blob:
        cfg.notes.append("timing cache loaded: %s (%d bytes)" % (path, len(blob)))
    cfg.timing_cache = path


def save_timing_cache(cfg: Config) -> None:
    if not cfg.timing_cache or not hasattr(cfg.config, "get_timing_cache"):
        return
    try:
        tc = cfg.config.get_timing_cache()
        if tc is not None:
            os.makedirs(os.path.dirname(os.path.abspath(cfg.timing_cache)), exist_ok=True)
            write_atomic(cfg.timing_cache, bytes(tc.serialize()))
    except Exception as e:
        cfg.notes.append("timing cache not saved: %s" % e)


# -- INT8 calibrator (legacy route) -----------------------------------------------------------
def load_calibration_npz(path: str) -> List[Dict[str, Any]]:
    """Batches written by the client: keys 'b<index>:<input name>' (allow_pickle=False)."""
    import numpy as np

    batches: Dict[int, Dict[str, Any]] = {}
    with np.load(path, allow_pickle=False) as data:
        for key in data.files:
            head, sep, name = key.partition(":")
            if not sep or not head.startswith("b") or not head[1:].isdigit():
                raise OpError("calibration file %s has an unexpected key '%s'" % (path, key),
                              code="bad-calibration")
            batches.setdefault(int(head[1:]), {})[name] = data[key]
    return [batches[i] for i in sorted(batches)]


def make_calibrator(trt: Any, ctx: Any, batches: List[Dict[str, Any]],
                    cache_path: Optional[str], method: str) -> Any:
    """An entropy (or minmax) calibrator fed from `batches`; device buffers through cuda.Cuda.
    An exception inside is kept in `.error` (it must not cross into TensorRT)."""
    base_name = {"minmax": "IInt8MinMaxCalibrator", "legacy": "IInt8LegacyCalibrator"
                 }.get(method, "IInt8EntropyCalibrator2")
    base = getattr(trt, base_name, None) or getattr(trt, "IInt8EntropyCalibrator2", None)
    if base is None:
        raise OpError("this TensorRT has no INT8 calibrator classes", code="no-calibrator",
                      hint="use the strongly typed route (Q/DQ in the ONNX) instead")

    class _Calibrator(base):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            base.__init__(self)
            self.batches = batches
            self.index = 0
            self.cuda: Any = None
            self.ptrs: Dict[str, int] = {}
            self.error: Optional[BaseException] = None

        def get_batch_size(self) -> int:
            return 1  # explicit-batch networks: the batch is part of each input's shape

        def get_batch(self, names: List[str]) -> Optional[List[int]]:
            try:
                if (ctx is not None and ctx.cancelled) or self.index >= len(self.batches):
                    return None
                if self.cuda is None:
                    from workbench.worker.cuda import Cuda

                    self.cuda = Cuda("INT8 calibration")
                batch = self.batches[self.index]
                ptrs = []
                for name in names:
                    if name not in batch:
                        raise OpError("calibration batch %d has no data for input '%s'"
                                      % (self.index, name), code="bad-calibration")
                    if name not in self.ptrs:
                        self.ptrs[name] = self.cuda.malloc(
                            max(b[name].nbytes for b in self.batches if name in b))
                    self.cuda.upload(self.ptrs[name], batch[name])
                    ptrs.append(self.ptrs[name])
                self.index += 1
                if ctx is not None:
                    ctx.progress("calibrating", None, "batch %d/%d" % (self.index,
                                                                       len(self.batches)))
                return ptrs
            except BaseException as e:  # an exception must not cross into TensorRT
                self.error = e
                return None

        def read_calibration_cache(self) -> Optional[bytes]:
            if cache_path and os.path.isfile(cache_path) and os.path.getsize(cache_path):
                with open(cache_path, "rb") as f:
                    return f.read()
            return None

        def write_calibration_cache(self, cache: Any) -> None:
            if cache_path:
                write_atomic(cache_path, bytes(cache), fsync=False)

        def free(self) -> None:
            if self.cuda is not None:
                self.cuda.free_all()

    return _Calibrator()


# ============================================================================================
# build, serialize, runtime
# ============================================================================================
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


def write_atomic(path: str, data: Any, fsync: bool = True) -> None:
    """Write `data` to `path` via a temp file and rename: readers never see a partial file."""
    tmp = "%s.tmp%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(data)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)


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
