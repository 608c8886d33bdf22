"""What a BuildConfig looks like outside the workbench: the equivalent `trtexec` line (and back),
the `polygraphy convert` line, a standalone Python build-and-run script on the modern API, and a
table of what tutorial-era calls became. Precision flags come from the precision table
(`workbench.precision.table`); this module depends on the build spec only, never on the
orchestration.

    export_for(cfg, onnx_path="m.onnx", engine_path="m.engine")  # {"trtexec", "polygraphy", ...}
    config_from_trtexec(trtexec_command(cfg, "m.onnx", "m.engine"))  # -> (cfg', onnx, engine)
"""
from __future__ import annotations

import re
import shlex
from typing import Any, Callable, Dict, List, Optional, Tuple

from workbench.engines.options import AFTER_PRECISION, BEFORE_PRECISION, OPTIONS, Option, Render
from workbench.engines.options import parse_mem as parse_mem  # (its old home: callers import it)
from workbench.engines.spec import BuildConfig, layer_precisions
from workbench.core.errors import WorkbenchError
from workbench.precision import table

# tutorial-era call -> what it became, and why
MIGRATION: List[Tuple[str, str, str]] = [
    ("builder.max_workspace_size = n / config.max_workspace_size = n",
     "config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, n)",
     "workspace became one of several memory pools (8.4); the attribute was removed in 10.0"),
    ("builder.build_engine(network, config) / build_cuda_engine(network)",
     "plan = builder.build_serialized_network(network, config); "
     "engine = trt.Runtime(logger).deserialize_cuda_engine(plan)",
     "building returns a serialized plan you can save; build_engine was removed in 10.0"),
    ("builder.create_network() with implicit batch, max_batch_size",
     "builder.create_network(0) (10.x+; 8.x: 1 << EXPLICIT_BATCH), batch is a dimension with "
     "a profile", "implicit batch was removed in 10.0"),
    ("context.set_binding_shape(idx, shape)", "context.set_input_shape(name, shape)",
     "inputs are addressed by tensor name, not binding index"),
    ("engine.get_binding_index/get_binding_shape/binding_is_input, num_bindings",
     "engine.num_io_tensors, get_tensor_name(i), get_tensor_shape(name), "
     "get_tensor_mode(name) == TensorIOMode.INPUT", "binding indices were removed in 10.0"),
    ("context.execute_v2(bindings) / execute_async_v2(bindings, stream_handle)",
     "context.set_tensor_address(name, ptr) for every I/O tensor; "
     "context.execute_async_v3(stream_handle)",
     "explicit tensor addresses; v2 and the bindings list were removed in 10.0"),
    ("pycuda.autoinit / pycuda.driver.mem_alloc",
     "cuda-python (cudart.cudaMalloc / cudaMemcpy) or polygraphy.cuda.DeviceArray",
     "pycuda must compile against the CUDA toolkit; cuda-python is NVIDIA's binding"),
    ("config.set_flag(trt.BuilderFlag.FP16)",
     "TensorRT 11 / TensorRT-RTX: FP16 Casts + FP16 weights in the ONNX, network created "
     "STRONGLY_TYPED (workbench precision --to fp16)",
     "strongly typed networks: precision is in the model, not a builder hint"),
    ("config.set_flag(trt.BuilderFlag.INT8); config.int8_calibrator = "
     "IInt8EntropyCalibrator2 subclass", "TensorRT 11 / TensorRT-RTX: Q/DQ nodes (zero point 0) "
     "with calibrated scales in the ONNX (workbench precision --to int8 --calib DATA)",
     "calibrators and set_dynamic_range are gone; Q/DQ is explicit quantization"),
    ("layer.precision = ...; layer.set_output_type(...); BuilderFlag.STRICT_TYPES",
     "keep nodes in FP32 in the ONNX (--exclude NODE) on strongly typed builds; "
     "OBEY_PRECISION_CONSTRAINTS on <= 10", "STRICT_TYPES was removed; 11 has no layer precision"),
    ("trtexec --workspace=N (MiB)", "trtexec --memPoolSize=workspace:NM",
     "same change as max_workspace_size"),
    ("trtexec --explicitBatch / --buildOnly --saveEngine + --fp16/--int8",
     "trtexec --stronglyTyped (11.x) with a converted ONNX; explicit batch is the only mode",
     "flags removed with implicit batch and weak typing"),
]


def migration_markdown() -> str:
    """The table as Markdown (docs, a terminal). A notebook shows `migration_html()`: a Markdown
    table grows with its longest unbreakable code and is cut at the output area's edge."""
    rows = ["| tutorial-era | now | why |", "|---|---|---|"]
    rows += [f"| `{a}` | `{b}` | {c} |" for a, b, c in MIGRATION]
    return "\n".join(rows)


# column widths of the HTML table (old call, new call, why): the calls get the room
MIGRATION_COLUMNS = (("tutorial-era", 34), ("now", 40), ("why", 26))
MIGRATION_MIN_WIDTH = 560  # px: narrower than this, the table scrolls sideways instead


def migration_html() -> str:
    """The table for a notebook output (`IPython.display.HTML(migration_html())`): the width of
    the output area (JupyterLab's is ~900 px at its default layout), fixed column widths, text
    left-aligned and wrapped; code wraps at spaces, then after . ( / _ (dotted names run to 60
    characters), then anywhere. In an area narrower than MIGRATION_MIN_WIDTH it scrolls sideways
    inside its own box rather than being cut."""
    import html

    cell = ("text-align:left;vertical-align:top;white-space:normal;overflow-wrap:anywhere;"
            "word-break:break-word;padding:4px 8px")
    code = "white-space:pre-wrap;overflow-wrap:anywhere;word-break:break-word"
    head = "".join(f"<th style='{cell};width:{w}%'>{html.escape(t)}</th>"
                   for t, w in MIGRATION_COLUMNS)

    def call(text: str) -> str:  # a line break may come after . ( / _ before any other place
        return re.sub(r"([.(/_])(?=\w)", r"\1<wbr>", html.escape(text, quote=False))

    rows = "".join(
        f"<tr><td style='{cell}'><code style='{code}'>{call(a)}</code></td>"
        f"<td style='{cell}'><code style='{code}'>{call(b)}</code></td>"
        f"<td style='{cell}'>{html.escape(c)}</td></tr>" for a, b, c in MIGRATION)
    return (f"<div class='wb-migration' style='max-width:100%;overflow-x:auto'>"
            f"<table style='table-layout:fixed;width:100%;min-width:{MIGRATION_MIN_WIDTH}px;"
            f"border-collapse:collapse;margin:0'><thead><tr>{head}</tr></thead>"
            f"<tbody>{rows}</tbody></table></div>")


# --------------------------------------------------------------------------------------------
# trtexec
# --------------------------------------------------------------------------------------------
def _shape(s: List[int]) -> str:
    return "x".join(str(int(d)) for d in s)


def _q(s: str) -> str:
    return shlex.quote(str(s))


def _route(config: BuildConfig, route: Optional[str]) -> str:
    """The route a command line spells: the one asked, else the config's ("auto" builds
    strongly typed)."""
    return route or ("strongly-typed" if config.route == "auto" else config.route)


def _line(render: Callable[[Option], List[str]], head: List[str], shapes: List[str],
          precision: List[str], tail: List[str]) -> str:
    """One build command in the order trtexec and polygraphy both take it: the tool and its
    paths, the shape profiles, the build options that come before the precision flags, the
    precision flags, the options after them, and the tool's closing flags."""
    a = head + shapes
    for option in BEFORE_PRECISION:
        a += render(option)
    a += precision
    for option in AFTER_PRECISION:
        a += render(option)
    return " ".join(a + tail)


def trtexec_command(config: BuildConfig, onnx_path: str, engine_path: str, *,
                    backend: str = "tensorrt", route: Optional[str] = None,
                    calib_cache: Optional[str] = None) -> str:
    """The trtexec (or, for TensorRT-RTX, tensorrt_rtx) line that builds the same engine."""
    route = _route(config, route)
    exe = "tensorrt_rtx" if backend == "tensorrt-rtx" else "trtexec"
    head = [exe, f"--onnx={_q(onnx_path)}", f"--saveEngine={_q(engine_path)}"]
    shapes = [flag + "=" + ",".join(f"{_q(n)}:{_shape(s[i])}" for n, s in prof.items())
              for prof in config.profiles
              for i, flag in enumerate(("--minShapes", "--optShapes", "--maxShapes"))]
    how = Render(route, backend)
    tail = ["--profilingVerbosity=detailed",
            f"--exportLayerInfo={_q(str(engine_path) + '.layers.json')}"]
    return _line(lambda option: option.trtexec(config, how), head, shapes,
                 _trtexec_precision(config, route, backend, calib_cache), tail)


def fallback_row(config: BuildConfig) -> Optional[table.Precision]:
    """The precision table's row of the config's fallback (the builder-flag route sets its
    flag beside the quantized target's: `--int8 --fp16`), or None."""
    return table.get(config.fallback) if config.fallback else None


def _trtexec_precision(config: BuildConfig, route: str, backend: str,
                       calib_cache: Optional[str]) -> List[str]:
    """trtexec's precision flags: strongly typed, or the legacy flags, calibration cache and
    per-layer constraints."""
    if route != "legacy-flags":
        return [] if backend == "tensorrt-rtx" else ["--stronglyTyped"]
    entry = config.entry
    a = [p.trtexec for p in (entry, fallback_row(config)) if p is not None and p.trtexec]
    if entry.flag_calibrator and calib_cache:
        a.append(f"--calib={_q(calib_cache)}")
    specs = [f"{_q(n)}:fp32" for n in config.exclude_nodes]
    if config.layer_precision and entry.layer_dtype:  # "*" first: later specs win
        specs.insert(0, f"{_q('*')}:{entry.name}")
    if specs:
        a.append(f"--precisionConstraints={config.layer_precision or 'obey'}")
        a.append("--layerPrecisions=" + ",".join(specs))
        if config.layer_precision:
            a.append("--layerOutputTypes=" + ",".join(specs))
    return a


def config_from_trtexec(command: str) -> Tuple[BuildConfig, str, str]:
    """Parse a trtexec / tensorrt_rtx line back into (BuildConfig, onnx path, engine path)."""
    argv = shlex.split(command)
    if not argv:
        raise WorkbenchError("empty trtexec command")
    d: Dict[str, Any] = {"profiles": [], "plugins": [], "extra_flags": [], "exclude_nodes": []}
    exe = argv[0].rsplit("/", 1)[-1]
    d["backend"] = "tensorrt-rtx" if exe.startswith("tensorrt_rtx") else "tensorrt"
    onnx = engine = ""
    shapes: Dict[str, List[str]] = {"min": [], "opt": [], "max": []}
    legacy = every = False
    constraints = "obey"
    precisions: List[str] = []
    by_flag = {p.trtexec: p.name for p in map(table.get, table.names()) if p.trtexec}
    for arg in argv[1:]:
        key, _, val = arg.partition("=")
        if any(o.read_trtexec(key, val, d) for o in OPTIONS):
            continue
        if key == "--onnx":
            onnx = val
        elif key == "--saveEngine":
            engine = val
        elif key in ("--minShapes", "--optShapes", "--maxShapes"):
            shapes[key[2:5]].append(val)
        elif key == "--stronglyTyped":
            d["route"] = "strongly-typed"
        elif key in by_flag:
            precisions.append(by_flag[key])
            legacy = True
        elif key == "--precisionConstraints":
            constraints = val
        elif key == "--layerPrecisions":
            for part in val.split(","):
                name, _, prec = part.rpartition(":")
                if name == "*":
                    every = True
                elif table.is_base(prec):  # trtexec spells the base precision "fp32"
                    d["exclude_nodes"].append(name)
    if legacy:
        d["route"] = "legacy-flags"
        d.update(_precision_flags(precisions))
    fp32 = d.get("precision", table.BASE) == table.BASE
    if d.get("tf32") is False and fp32:
        del d["tf32"]  # FP32 engines build without TF32 by default
    elif "tf32" not in d and fp32 and d["backend"] != "tensorrt-rtx":
        d["tf32"] = True  # trtexec without --noTF32 builds FP32 layers in TF32
    if every:
        d["layer_precision"] = constraints
    if len({len(v) for v in shapes.values()}) != 1:
        raise WorkbenchError("trtexec needs as many --minShapes as --optShapes and --maxShapes",
                             field="shapes")
    for mn, op, mx in zip(shapes["min"], shapes["opt"], shapes["max"]):
        prof: Dict[str, List[List[int]]] = {}
        for label, spec in (("min", mn), ("opt", op), ("max", mx)):
            for item in spec.split(","):
                name, _, dims = item.rpartition(":")
                name = name.strip("'\"")
                prof.setdefault(name, []).append([int(x) for x in dims.split("x")])
        d["profiles"].append(prof)
    return BuildConfig.from_dict(d), onnx, engine


def _precision_flags(names: List[str]) -> Dict[str, str]:
    """The precision (and fallback) of a line's precision flags: one flag is the precision;
    a quantized one beside a float one (`--int8 --fp16`) is a quantized target with that
    float fallback."""
    quant = [n for n in names if table.is_quantized(n)]
    floats = [n for n in names if table.is_low_float(n)]
    if quant and floats:
        return {"precision": quant[-1], "fallback": floats[-1]}
    return {"precision": names[-1]} if names else {}


# --------------------------------------------------------------------------------------------
# polygraphy
# --------------------------------------------------------------------------------------------
def polygraphy_command(config: BuildConfig, onnx_path: str, engine_path: str, *,
                       backend: str = "tensorrt", route: Optional[str] = None,
                       calib_cache: Optional[str] = None) -> str:
    route = _route(config, route)
    head = ["POLYGRAPHY_USE_TENSORRT_RTX=1"] if backend == "tensorrt-rtx" else []
    head += ["polygraphy", "convert", _q(onnx_path), "--convert-to", "trt", "-o", _q(engine_path)]
    shapes: List[str] = []
    for prof in config.profiles:
        for i, flag in enumerate(("--trt-min-shapes", "--trt-opt-shapes", "--trt-max-shapes")):
            shapes.append(flag)
            shapes += [_q(f"{n}:[{','.join(str(d) for d in s[i])}]") for n, s in prof.items()]
    how = Render(route, backend)
    return _line(lambda option: option.polygraphy(config, how), head, shapes,
                 _polygraphy_precision(config, route, calib_cache),
                 ["--profiling-verbosity", "detailed"])


def _polygraphy_precision(config: BuildConfig, route: str,
                          calib_cache: Optional[str]) -> List[str]:
    """polygraphy's precision flags: strongly typed, or the legacy flags, calibration cache
    and per-layer constraints."""
    if route != "legacy-flags":
        return ["--strongly-typed"]
    entry = config.entry
    a = [p.polygraphy for p in (entry, fallback_row(config)) if p is not None and p.polygraphy]
    if entry.flag_calibrator and calib_cache:
        a += ["--calibration-cache", _q(calib_cache)]
    if config.exclude_nodes or config.layer_precision:
        a += ["--precision-constraints", config.layer_precision or "obey"]
    if config.exclude_nodes:
        a += ["--layer-precisions"] + [_q(f"{n}:float32") for n in config.exclude_nodes]
    return a


# --------------------------------------------------------------------------------------------
# standalone script
# --------------------------------------------------------------------------------------------
_SCRIPT = '''#!/usr/bin/env python3
"""Build {onnx_name} into a TensorRT engine and run it once: modern API only
(generated by trt-workbench from config {config_hash}).

Build: set_memory_pool_limit, build_serialized_network. Run: set_input_shape,
set_tensor_address, execute_async_v3. Buffers: cuda-python, else polygraphy.cuda.
"""
import sys

import numpy as np

try:
    import tensorrt as trt
except ImportError:
    try:
        import tensorrt_rtx as trt
    except ImportError:
        import tensorrt_rtx_bindings as trt

ONNX = {onnx!r}
ENGINE = {engine!r}
STRONGLY_TYPED = {strongly_typed!r}
LEGACY_PRECISION = {legacy_precision!r}   # builder flag route (TensorRT <= 10) or None
LEGACY_FLAG = {legacy_flag!r}         # its BuilderFlag
FALLBACK_FLAG = {fallback_flag!r}     # the float BuilderFlag beside it (--int8 --fp16) or None
CALIBRATOR = {calibrator!r}           # the builder-flag route reads a calibration cache
CALIB_CACHE = {calib_cache!r}
PROFILES = {profiles!r}               # [{{input: [min, opt, max]}}]
LAYER_PRECISIONS = {layer_precisions!r}   # builder-flag route: ONNX node -> DataType, "*" = others
PRECISION_CONSTRAINTS = {constraints!r}   # "obey" | "prefer": how strictly TensorRT keeps them
{option_constants}
LOGGER = trt.Logger(trt.Logger.WARNING)
{option_helpers}

def build():
{start_lines}
    builder = trt.Builder(LOGGER)
    flags = 0
    ndcf = trt.NetworkDefinitionCreationFlag
    if STRONGLY_TYPED and getattr(ndcf, "STRONGLY_TYPED", None) is not None:
        flags |= 1 << int(ndcf.STRONGLY_TYPED)
    elif getattr(ndcf, "EXPLICIT_BATCH", None) is not None:
        flags |= 1 << int(ndcf.EXPLICIT_BATCH)   # TensorRT 8.x
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, LOGGER)
    if not parser.parse_from_file(ONNX):
        for i in range(parser.num_errors):
            print(parser.get_error(i), file=sys.stderr)
        sys.exit("parse failed")
{network_lines}
    config = builder.create_builder_config()
    config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
{config_lines}
    if LEGACY_FLAG:
        config.set_flag(getattr(trt.BuilderFlag, LEGACY_FLAG))
        if FALLBACK_FLAG:   # layers without INT8 run in this float type, not FP32
            config.set_flag(getattr(trt.BuilderFlag, FALLBACK_FLAG))
        if CALIBRATOR:
            class CacheOnly(trt.IInt8EntropyCalibrator2):
                def __init__(self):
                    trt.IInt8EntropyCalibrator2.__init__(self)
                def get_batch_size(self):
                    return 1
                def get_batch(self, names):
                    return None   # scales come from the calibration cache
                def read_calibration_cache(self):
                    with open(CALIB_CACHE, "rb") as f:
                        return f.read()
                def write_calibration_cache(self, cache):
                    pass
            config.int8_calibrator = CacheOnly()
    if LAYER_PRECISIONS:
        set_layer_precisions(network, config)
    for prof in PROFILES:
        p = builder.create_optimization_profile()
        for name, (mn, opt, mx) in prof.items():
            p.set_shape(name, mn, opt, mx)
        config.add_optimization_profile(p)
    plan = builder.build_serialized_network(network, config)
    if plan is None:
        sys.exit("build failed (see the log above)")
    with open(ENGINE, "wb") as f:
        f.write(plan)
    return plan


def set_layer_precisions(network, config):
    """Each float layer in the type LAYER_PRECISIONS names for its ONNX node (by layer name,
    its '[ONNX Layer: NAME]' metadata, or NAME_<k>), else the "*" type; constants and layers
    with integer or shape outputs keep theirs (Polygraphy's rule); then the constraint flag."""
    import re
    floats = [getattr(trt, n) for n in ("float32", "float16", "bfloat16") if hasattr(trt, n)]
    wanted = {{n: dt for n, dt in LAYER_PRECISIONS.items() if n != "*"}}
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        meta = str(getattr(layer, "metadata", "") or "")
        nodes = [n for n in re.findall(r"\\[ONNX Layer: ([^\\]]+)\\]", meta) if n in wanted]
        if layer.name in wanted:
            nodes.insert(0, layer.name)
        elif not nodes and not meta:
            m = re.match(r"^(.*)_\\d+$", layer.name)
            nodes = [m.group(1)] if m and m.group(1) in wanted else []
        dt = wanted[nodes[0]] if nodes else LAYER_PRECISIONS.get("*")
        outs = [layer.get_output(j) for j in range(layer.num_outputs)]
        if dt is None or layer.type == trt.LayerType.CONSTANT or not all(
                getattr(t, "is_execution_tensor", True) and t.dtype in floats for t in outs):
            continue
        layer.precision = getattr(trt, dt)
        for j, t in enumerate(outs):
            if not t.is_network_output:
                layer.set_output_type(j, getattr(trt, dt))
    names = {{"obey": ("OBEY_PRECISION_CONSTRAINTS", "STRICT_TYPES"),
             "prefer": ("PREFER_PRECISION_CONSTRAINTS",)}}[PRECISION_CONSTRAINTS]
    flag = next((n for n in names if getattr(trt.BuilderFlag, n, None) is not None), None)
    if flag is None:
        sys.exit("this TensorRT cannot keep layer precisions (strongly typed: use Casts)")
    config.set_flag(getattr(trt.BuilderFlag, flag))


class Device:
    """cudaMalloc / cudaMemcpy through cuda-python, else polygraphy.cuda (ctypes)."""

    def __init__(self):
        try:
            try:
                from cuda.bindings import runtime as cudart
            except ImportError:
                from cuda import cudart
            self.cudart, self.poly = cudart, None
        except ImportError:
            from polygraphy import cuda as poly
            self.cudart, self.poly = None, poly

    def malloc(self, nbytes):
        if self.cudart:
            err, ptr = self.cudart.cudaMalloc(max(nbytes, 1))
            assert int(err) == 0, err
            return int(ptr)
        return int(self.poly.wrapper().malloc(max(nbytes, 1)))

    def h2d(self, ptr, arr):
        if self.cudart:
            self.cudart.cudaMemcpy(ptr, arr.ctypes.data, arr.nbytes,
                                   self.cudart.cudaMemcpyKind.cudaMemcpyHostToDevice)
        else:
            self.poly.wrapper().memcpy(ptr, arr.ctypes.data, arr.nbytes,
                                       self.poly.MemcpyKind.HostToDevice)

    def d2h(self, arr, ptr):
        if self.cudart:
            self.cudart.cudaMemcpy(arr.ctypes.data, ptr, arr.nbytes,
                                   self.cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost)
        else:
            self.poly.wrapper().memcpy(arr.ctypes.data, ptr, arr.nbytes,
                                       self.poly.MemcpyKind.DeviceToHost)

    def synchronize(self):
        if self.cudart:
            self.cudart.cudaDeviceSynchronize()
        else:
            self.poly.wrapper().device_synchronize() if hasattr(
                self.poly.wrapper(), "device_synchronize") else None


def run(plan):
    runtime = trt.Runtime(LOGGER)
    engine = runtime.deserialize_cuda_engine(plan)
    if engine is None:
        sys.exit("this machine cannot run the engine (no suitable GPU?)")
    context = engine.create_execution_context()
    dev = Device()
    shapes = {{n: s[1] for prof in PROFILES[:1] for n, s in prof.items()}}   # opt shapes
    outputs = {{}}
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT:
            shape = shapes.get(name, tuple(engine.get_tensor_shape(name)))
            context.set_input_shape(name, shape)
            dtype = np.dtype(trt.nptype(engine.get_tensor_dtype(name)))
            data = np.ones(shape, dtype=dtype)            # put real inputs here
            ptr = dev.malloc(data.nbytes)
            dev.h2d(ptr, np.ascontiguousarray(data))
            context.set_tensor_address(name, ptr)
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        if engine.get_tensor_mode(name) == trt.TensorIOMode.OUTPUT:
            shape = tuple(context.get_tensor_shape(name))
            dtype = np.dtype(trt.nptype(engine.get_tensor_dtype(name)))
            host = np.empty(shape, dtype=dtype)
            ptr = dev.malloc(host.nbytes)
            context.set_tensor_address(name, ptr)
            outputs[name] = (host, ptr)
    if not context.execute_async_v3(0):                # 0 = the default stream
        sys.exit("execute_async_v3 failed")
    dev.synchronize()
    for name, (host, ptr) in outputs.items():
        dev.d2h(host, ptr)
        print(name, host.shape, host.dtype, float(np.abs(host).max()) if host.size else 0.0)


if __name__ == "__main__":
    if {{"-h", "--help"}} & set(sys.argv[1:]):
        print(__doc__.strip())
        print()
        print("usage: python3", sys.argv[0], "[--build-only]")
        print("  builds ONNX into ENGINE, then runs it once on random inputs at the first")
        print("  profile's opt shapes; --build-only: build and write the engine, do not run it")
        sys.exit(0)
    unknown = [a for a in sys.argv[1:] if a != "--build-only"]
    if unknown:
        sys.exit("unknown argument(s): " + " ".join(unknown) + " (try --help)")
    plan = build()
    print("engine:", ENGINE, plan.nbytes, "bytes")
    if "--build-only" not in sys.argv:
        run(plan)
'''


def _script_parts(config: BuildConfig, how: Render) -> Dict[str, str]:
    """The options' shares of the script, joined per place (constants, helpers, lines
    before the builder, on the network, on the builder config)."""
    parts = [o.script(config, how) for o in OPTIONS]

    def lines(items: List[str], indent: str = "    ") -> str:
        return "\n".join(indent + line for line in items) or indent + "pass"

    return dict(
        option_constants="\n".join(c for p in parts for c in p.constants),
        option_helpers="".join("\n\n" + p.helpers.strip("\n") + "\n" for p in parts
                               if p.helpers),
        start_lines=lines([x for p in parts for x in p.start]),
        network_lines=lines([x for p in parts for x in p.network]),
        config_lines=lines([x for p in parts for x in p.config]))


def python_script(config: BuildConfig, onnx_path: str, engine_path: str, *,
                  backend: str = "tensorrt", route: Optional[str] = None,
                  calib_cache: Optional[str] = None) -> str:
    """A standalone build-and-run script for `config` (modern API, no workbench import)."""
    import os

    route = route or ("strongly-typed" if config.route == "auto" else config.route)
    entry = config.entry
    legacy = entry if route == "legacy-flags" and entry.kind != "none" else None
    return _SCRIPT.format(
        onnx_name=os.path.basename(str(onnx_path)), config_hash=config.config_hash,
        # absolute: the script runs from wherever it is copied or run (`cd out && python
        # build.py` could not find a path relative to where `workbench build` ran)
        onnx=os.path.abspath(str(onnx_path)), engine=os.path.abspath(str(engine_path)),
        strongly_typed=route != "legacy-flags",
        legacy_precision=legacy and legacy.name,
        legacy_flag=legacy and (legacy.builder_flag or legacy.name.upper()),
        fallback_flag=(fb.builder_flag if legacy and (fb := fallback_row(config)) else None),
        calibrator=bool(legacy and legacy.flag_calibrator),
        calib_cache=os.path.abspath(str(calib_cache)) if calib_cache else calib_cache,
        profiles=[{n: [list(s) for s in v] for n, v in p.items()} for p in config.profiles],
        **_script_parts(config, Render(route, backend)),
        layer_precisions=layer_precisions(config, list(config.exclude_nodes)) if legacy else {},
        constraints=config.layer_precision or "obey")


def layer_info_note(engine_path: str) -> str:
    """What the trtexec line's --exportLayerInfo file is, and who writes it (not the
    workbench's own build: its engine may be built ahead of time, for another GPU)."""
    return (f"the trtexec line's --exportLayerInfo={engine_path}.layers.json is written only when "
            "you run that line; `workbench build` does not write it. On a GPU, `workbench "
            f"timing-capture {_q(engine_path)} --out DIR` writes DIR/layers.json and "
            "DIR/profile.json for `workbench timing`")


def fallback_note(config: BuildConfig, route: str) -> str:
    """What a fallback precision is on `route`: two builder flags on the builder-flag route,
    the chained conversion in the ONNX (and the `workbench precision` line that makes it) on
    the strongly typed one."""
    q, fb = config.precision.upper(), str(config.fallback).upper()
    if route == "legacy-flags":
        flags = [p.trtexec for p in (config.entry, fallback_row(config)) if p and p.trtexec]
        return (f"{q} with the {fb} fallback: both builder flags are set (trtexec "
                f"{' '.join(flags)}): the builder picks per layer, layers without {q} run "
                f"in {fb} (or FP32 where faster); excluded nodes are held in FP32")
    calib = f" --calib {_q(config.calibration)}" if config.calibration else " --calib DATA"
    ex = "".join(f" --exclude {_q(n)}" for n in config.exclude_nodes) + \
        "".join(f" --exclude-op {_q(o)}" for o in config.exclude_ops)
    return (f"the ONNX named here carries {q} Q/DQ and {fb} Casts (layers without Q/DQ in "
            f"{fb}, excluded nodes in FP32): `workbench precision MODEL --to {config.precision} "
            f"--fallback {config.fallback}{calib}{ex} -o OUT.onnx` makes it")


def _missing_tools(backend: str) -> Optional[str]:
    """What the trtexec/polygraphy lines need that this machine lacks (probed, not assumed):
    the pip wheels carry neither trtexec/tensorrt_rtx nor, for TensorRT-RTX, the
    `tensorrt_rtx` module Polygraphy imports; the standalone script runs on the wheels."""
    import importlib.util
    import shutil as _shutil

    rtx = backend == "tensorrt-rtx"
    exe, module = ("tensorrt_rtx", "tensorrt_rtx") if rtx else ("trtexec", "tensorrt")
    lacks = []
    if _shutil.which(exe) is None:
        lacks.append(f"`{exe}` is not on PATH (it ships in the bin/ folder of the "
                     f"{'TensorRT-RTX' if rtx else 'TensorRT'} SDK archive, not in the pip "
                     "wheels)")
    if _shutil.which("polygraphy") is None:
        lacks.append("`polygraphy` is not installed (pip install polygraphy)"
                     if importlib.util.find_spec("polygraphy") is None else
                     "the `polygraphy` Python package is installed but its command is not on "
                     "PATH (pip puts it in the bin/ folder of the environment it installs into)")
    elif importlib.util.find_spec(module) is None:
        lacks.append(f"polygraphy imports the `{module}` Python module, which is not installed "
                     f"here (the {'TensorRT-RTX SDK' if rtx else 'tensorrt'} wheel provides it)")
    if not lacks:
        return None
    return ("on this machine " + "; ".join(lacks) + ": the standalone script (--export-script) "
            "runs with what is installed")


def export_for(config: BuildConfig, *, onnx_path: str, engine_path: str,
               backend: str = "tensorrt", route: Optional[str] = None,
               calib_cache: Optional[str] = None) -> Dict[str, Any]:
    """trtexec + polygraphy lines, the standalone script and notes for one build."""
    kw = dict(backend=backend, route=route, calib_cache=calib_cache)
    notes = [layer_info_note(engine_path)]
    if backend == "tensorrt-rtx":
        notes.append("tensorrt_rtx (TensorRT-RTX's trtexec) builds strongly typed by default; "
                     "the ONNX named here already carries the precision casts / Q/DQ")
        if config.target:
            notes.append(f"target compute capability {config.target}: set it with "
                         "config.set_compute_capability (see the script); check "
                         "`tensorrt_rtx --help` for the matching flag of your version")
        else:
            notes.append("no --target: TensorRT-RTX's default, an engine portable across "
                         "Ampere-and-later GPUs (its support matrix: sm86, sm89, sm120); a "
                         "Turing GPU needs --target sm75, and --target SM builds for one GPU "
                         "only")
    missing = _missing_tools(backend)
    if missing:
        notes.append(missing)
    if route == "legacy-flags" and config.entry.flag_calibrator and not calib_cache:
        notes.append(f"{config.precision.upper()} with builder flags needs a calibration "
                     "cache (--calib)")
    if (route or config.route) == "legacy-flags" and config.layer_precision:
        notes.append("layer precisions: the standalone script builds what the workbench built; "
                     "trtexec matches layers by exact name only (not by '[ONNX Layer: ...]' "
                     "metadata or NAME_<k>) and its --layerOutputTypes='*' also retypes the "
                     "network outputs; Polygraphy's --layer-precisions has no '*', so its line "
                     "keeps only the FP32 exclusions")
    how = Render(route or ("strongly-typed" if config.route == "auto" else config.route),
                 backend)
    if config.fallback:
        notes.append(fallback_note(config, how.route))
    for option in OPTIONS:
        notes += option.notes(config, how)
    return {"onnx": str(onnx_path),  # the ONNX the lines read (the conversion built from)
            "trtexec": trtexec_command(config, onnx_path, engine_path, **kw),
            "polygraphy": polygraphy_command(config, onnx_path, engine_path, **kw),
            "script": python_script(config, onnx_path, engine_path, **kw),
            "notes": notes}
