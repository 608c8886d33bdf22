"""The worker's shared core: one protocol module for both ends, one set of loaders under every
op (one place that creates networks and parsers, one plugin loader, one parser-error record),
and timing-capture of an ONNX built through the same route as `workbench build`. Real
TensorRT-RTX on the CPU (ahead of time for sm89) throughout."""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import POLY, SAMPLES
from workbench.worker import protocol
from workbench.worker.client import WorkerClient, WorkerError

REPO = Path(__file__).resolve().parents[1]
WORKER = REPO / "workbench" / "worker"
CAPABILITY = POLY / "capability.onnx"
RESNET = SAMPLES / "resnet_tiny.onnx"
RESNET_PROFILE = {"input": [[1, 3, 32, 32], [4, 3, 32, 32], [32, 3, 32, 32]]}
RECORD_KEYS = {"node", "node_index", "op", "code", "message", "local_function_stack", "file",
               "func", "line", "node_name_api"}


@pytest.fixture(scope="module")
def worker():
    w = WorkerClient()
    yield w
    w.close()


def _sources() -> dict:
    """Every module of the worker package by its path under it ("ops_build.py",
    "loaders/network.py")."""
    return {f.relative_to(WORKER).as_posix(): f.read_text()
            for f in sorted(WORKER.rglob("*.py"))}


# the loader family, one module per seam (Polygraphy's backend/trt loaders): where each
# construction lives
SEAMS = {
    "create_network(": "network", "OnnxParser(": "network", "get_error(": "network",
    "get_plugin_registry(": "network", "CDLL(": "network", "init_libnvinfer_plugins": "network",
    "trt.Builder(": "network", "(trt.ILogger)": "logger", "(trt.IProgressMonitor)": "logger",
    "set_compute_capability(": "config", "set_memory_pool_limit(": "config",
    "build_serialized_network(": "engine", "deserialize_cuda_engine(": "engine",
    "trt.Runtime(": "engine",
}


# --------------------------------------------------------------------------- one of each
@pytest.mark.parametrize("needle", [
    "create_network(", "OnnxParser(", "get_error(", "get_plugin_registry(", "CDLL(",
    "init_libnvinfer_plugins", "(trt.ILogger)", "(trt.IProgressMonitor)",
    "create_builder_config(", "create_optimization_profile(", "set_compute_capability(",
    "set_memory_pool_limit(", "build_serialized_network(", "deserialize_cuda_engine(",
    "trt.Builder(", "trt.Runtime("])
def test_only_the_loaders_touch_tensorrt_construction(needle):
    """Networks, parsers, parser errors, plugins, the logger, configs, profiles, builds and
    runtimes are made in the loader family (workbench/worker/loaders/) and nowhere else in
    the worker; each in the module of its seam."""
    # (`CDLL(None` loads no library: the C library's own prctl, for die-with-parent)
    holders = sorted(name for name, text in _sources().items()
                     if needle in text.replace("CDLL(None", ""))
    assert holders and all(h.startswith("loaders/") for h in holders), (needle, holders)
    if needle in SEAMS:
        assert holders == [f"loaders/{SEAMS[needle]}.py"], (needle, holders)


def test_one_definition_of_each_loader():
    defs = {}
    for name, text in _sources().items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                defs.setdefault(node.name, []).append(name)
    for fn, seam in (("load_plugins", "network"), ("make_logger", "logger"),
                     ("parser_errors", "network"), ("network_from_onnx", "network"),
                     ("add_profiles", "profiles"), ("create_config", "config"),
                     ("make_calibrator", "calibration"), ("load_backend", "backend"),
                     ("build_serialized", "engine"), ("set_layer_precisions",
                                                      "layer_precisions")):
        assert defs.get(fn) == [f"loaders/{seam}.py"], (fn, defs.get(fn))
    assert defs.get("Cuda") == ["cuda.py"]  # the one CUDA wrapper
    # the ops reach the family through its package (`loaders as L`): every public name of a
    # seam is on it
    from workbench.worker import loaders

    for name in loaders.__all__:
        assert getattr(loaders, name) is not None, name
    assert loaders.network_from_onnx.__module__ == "workbench.worker.loaders.network"
    # one build op: no op but `build` builds an engine
    ops = re.findall(r"@op\((\w+)\)", "".join(_sources().values()))
    assert "BUILD" in ops and "build_and_profile" not in "".join(_sources().values())


def test_the_client_imports_no_server_module():
    """client.py (and what it imports from the worker package at module level) is the
    protocol, launch, forked and the shared supervision: never the TensorRT side."""
    tree = ast.parse((WORKER / "client.py").read_text())
    mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    mods |= {f"{n.module}.{a.name}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
             and n.module == "workbench.worker" for a in n.names}
    worker_mods = {m for m in mods if m.startswith("workbench.worker")}
    assert worker_mods <= {"workbench.worker", "workbench.worker.protocol",
                           "workbench.worker.launch", "workbench.worker.forked",
                           # the stdlib-only supervision both sides share (limits, signals)
                           "workbench.worker.childproc"}, worker_mods
    for server in ("trt", "loaders", "ops_build", "ops_parse", "main", "registry"):
        assert f"workbench.worker.{server}" not in mods


def test_protocol_is_stdlib_only_and_codes_are_declared():
    tree = ast.parse((WORKER / "protocol.py").read_text(), feature_version=(3, 9))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported
    # every code an op raises is one the protocol declares, and "bad input" is a subset
    raised = set()
    for text in _sources().values():
        raised |= set(re.findall(r'code="([a-z0-9-]+)"', text))
    assert raised - set(protocol.CODES) == set(), raised - set(protocol.CODES)
    assert protocol.BAD_INPUT_CODES <= set(protocol.CODES)
    assert protocol.is_bad_input("bad-profile") and not protocol.is_bad_input("build-failed")
    # every op has a module, and the build backends are what BuildConfig accepts
    from workbench.engines.engine import BACKENDS

    assert BACKENDS == protocol.BUILD_BACKENDS == ("auto", "tensorrt", "tensorrt-rtx")
    assert set(protocol.OP_MODULES) >= {protocol.BUILD, protocol.PARSE, protocol.CHECK_BUILD,
                                        protocol.NETWORK_DTYPES, protocol.PROFILE_ENGINE}


def test_protocol_messages_round_trip_through_the_framing():
    lines = [protocol.encode(protocol.request(1, protocol.PING)),
             "not json\n", "[1, 2]\n", "\n",
             protocol.encode(protocol.error(1, "x", code="bad-profile", details={"field": "f"}))]
    bad = []
    msgs = list(protocol.read_json_lines(lines, bad.append))
    assert msgs[0] == {"id": 1, "op": "ping", "args": {}}
    assert msgs[1]["event"] == "error" and msgs[1]["error"]["code"] == "bad-profile"
    assert msgs[1]["error"]["details"] == {"field": "f"}
    assert bad == ["not json", "[1, 2]"]
    assert protocol.check_request({"op": 3}) and protocol.check_request({"op": "x", "args": []})
    assert protocol.check_request({"op": "ping", "args": {}}) is None


def test_a_malformed_request_is_a_bad_args_error(worker):
    with pytest.raises(WorkerError) as e:
        worker.call("ping", ["not", "an", "object"])  # type: ignore[arg-type]
    assert e.value.code == "bad-args" and "args must be a JSON object" in e.value.message


def test_worker_package_has_no_import_cycle():
    """client <-> forked was a cycle: the interpreter test lives in launch.py now."""
    def name_of(f):  # "client", "loaders.network"; a package by its own name
        parts = f.relative_to(WORKER).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    graph = {}
    for f in WORKER.rglob("*.py"):
        tree = ast.parse(f.read_text())
        deps = set()
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith(
                    "workbench.worker"):
                if n.module == "workbench.worker":
                    deps |= {a.name for a in n.names}
                else:
                    deps.add(n.module[len("workbench.worker."):])
        graph[name_of(f)] = deps - {name_of(f)}
    assert graph["loaders"] >= {"loaders.network", "loaders.engine"}  # (read the package)

    def reaches(a, b, seen=()):
        return any(d == b or (d not in seen and reaches(d, b, seen + (d,)))
                   for d in graph.get(a, ()))

    cycles = sorted(m for m in graph if reaches(m, m))
    assert cycles == [], cycles
    assert "client" not in graph["forked"]


# --------------------------------------------------------------------------- one error record
def test_one_parser_error_record_from_parse_check_build_build_and_dtypes(worker, tmp_path):
    """capability.onnx fails in TensorRT-RTX's parser at Fake1 (FAKE!, no plugin): every op
    that parses reports that failure with the same record."""
    assert CAPABILITY.is_file(), CAPABILITY
    parse = worker.call(protocol.PARSE, {"path": str(CAPABILITY), "backend": "tensorrt-rtx"},
                        timeout=120)["results"][0]
    check = worker.call(protocol.CHECK_BUILD, {"path": str(CAPABILITY),
                                               "backend": "tensorrt-rtx"}, timeout=120)
    with pytest.raises(WorkerError) as built:
        worker.call(protocol.BUILD, {"onnx_path": str(CAPABILITY), "backend": "tensorrt-rtx",
                                     "engine_path": str(tmp_path / "c.engine"),
                                     "target": "sm89"}, timeout=120)
    with pytest.raises(WorkerError) as dtypes:
        worker.call(protocol.NETWORK_DTYPES, {"path": str(CAPABILITY),
                                              "backend": "tensorrt-rtx"}, timeout=120)
    assert not parse["parsed"] and not check["parsed"] and not check["built"]
    assert built.value.code == dtypes.value.code == "parse-failed"
    sets = {"parse": parse["errors"], "check_build": check["errors"],
            "build": built.value.details["errors"], "network_dtypes": dtypes.value.details["errors"]}
    for where, errs in sets.items():
        assert errs, where
        for rec in errs:
            assert set(rec) == RECORD_KEYS, (where, sorted(rec))
        assert (errs[0]["node"], errs[0]["op"]) == ("Fake1", "FAKE!"), (where, errs[0])
        assert errs[0]["code"] and errs[0]["message"] and errs[0]["node_index"] >= 0
    assert len({json.dumps(e, sort_keys=True) for e in sets.values()}) == 1  # identical
    assert built.value.node == "Fake1" and "Fake1" in built.value.message
    assert not (tmp_path / "c.engine").exists()


# --------------------------------------------------------------------------- timing-capture route
def _layer_dtypes(layers):
    return {la["name"]: [o["dtype"] for o in la["outputs"]] for la in layers}


def test_timing_capture_builds_fp16_like_workbench_build(worker, tmp_path, monkeypatch):
    """`timing-capture MODEL.onnx --fp16` builds through build_engine: on TensorRT-RTX (no
    FP16 builder flag) the network it builds carries the same per-layer dtypes as
    `workbench build --precision fp16`, HALF in every convolution. Profiling itself needs a
    GPU; this goes up to the built engine."""
    from workbench.measure.capture import build_for_capture, capture_build_config

    cfg = capture_build_config(RESNET, fp16=True, profiles=RESNET_PROFILE, target="sm89",
                               backend="tensorrt-rtx")
    assert cfg.precision == "fp16" and cfg.profiles == [RESNET_PROFILE]
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home-capture"))
    cap = build_for_capture(RESNET, fp16=True, profiles=RESNET_PROFILE, target="sm89",
                            backend="tensorrt-rtx", out_dir=str(tmp_path / "cap"),
                            client=worker, timeout=600)
    assert cap.route == "strongly-typed" and not cap.cache_hit
    assert Path(cap.output_path) == tmp_path / "cap" / "model.engine"
    assert Path(cap.output_path).stat().st_size == cap.size_bytes > 0

    # the same model through the CLI, in its own home (no shared cache)
    env = dict(os.environ, WORKBENCH_HOME=str(tmp_path / "home-build"))
    r = subprocess.run(["workbench", "build", str(RESNET), "--precision", "fp16", "--target",
                        "sm89", "--backend", "tensorrt-rtx", "--profile",
                        "input:1x3x32x32:4x3x32x32:32x3x32x32", "-o",
                        str(tmp_path / "b.engine"), "--json"],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    built = json.loads(r.stdout)
    assert built["route"] == "strongly-typed" and built["cache_hit"] is False
    assert built["dtypes"] == cap.dtype_counts() and built["dtypes"].get("HALF", 0) > 0

    # per layer: what TensorRT parsed from the ONNX each route handed it
    net = worker.call(protocol.NETWORK_DTYPES, {"path": built["onnx_path"],
                                                "backend": "tensorrt-rtx"}, timeout=180)
    assert net["strongly_typed"]
    assert _layer_dtypes(net["layers"]) == _layer_dtypes(cap.layers)
    convs = [la for la in cap.layers if la["type"] == "CONVOLUTION"]
    assert convs and all(o["dtype"] == "HALF" for la in convs for o in la["outputs"])
    # and FP32 stays FP32 on the same route
    cap32 = build_for_capture(RESNET, profiles=RESNET_PROFILE, target="sm89",
                              backend="tensorrt-rtx", client=worker, timeout=600)
    assert cap32.dtype_counts().get("HALF", 0) == 0


class _NoGpuHere:
    """The real worker for everything but the two GPU-only requests: cuda_info answers as a
    GPU machine would, profile_engine is recorded and stopped (profiling needs a GPU)."""

    class Stop(Exception):
        pass

    def __init__(self, real):
        self.real, self.python, self.profiled = real, real.python, None

    def call(self, op, args=None, **kw):
        if op == protocol.CUDA_INFO:
            return {"device_count": 1, "compute_capability": "8.9"}
        if op == protocol.PROFILE_ENGINE:
            self.profiled = args
            raise self.Stop()
        return self.real.call(op, args, **kw)


def test_capture_onnx_hands_the_build_route_engine_to_the_profiler(worker, tmp_path):
    """capture_onnx (what `timing-capture MODEL.onnx --fp16` runs) builds through
    build_engine and profiles that very engine: FP16 in the network on TensorRT-RTX."""
    from workbench.engines.engine import BuildConfig, build_engine
    from workbench.measure.capture import capture_onnx

    proxy = _NoGpuHere(worker)
    with pytest.raises(_NoGpuHere.Stop):
        capture_onnx(RESNET, fp16=True, profiles=RESNET_PROFILE, target="sm89",
                     backend="tensorrt-rtx", out_dir=str(tmp_path / "out"), client=proxy,
                     iterations=5, warmup=1, layer_iterations=2)
    eng = Path(proxy.profiled["engine_path"])
    assert eng == (tmp_path / "out" / "model.engine").resolve() and eng.stat().st_size > 0
    assert proxy.profiled["backend"] == "tensorrt-rtx" and proxy.profiled["iterations"] == 5
    # the engine is the one `workbench build --precision fp16` makes from the same settings
    ref = build_engine(RESNET, BuildConfig(precision="fp16", profiles=[RESNET_PROFILE],
                                           target="sm89", backend="tensorrt-rtx",
                                           workspace_bytes=2048 << 20), client=worker)
    assert ref.cache_hit and ref.size_bytes == eng.stat().st_size
    assert ref.dtype_counts().get("HALF", 0) > 0


def test_capture_fills_a_profile_for_dynamic_inputs_left_out():
    from workbench.measure.capture import capture_build_config

    cfg = capture_build_config(SAMPLES / "bert_tiny.onnx", fp16=True,
                               profiles={"input_ids": [[1, 8], [4, 32], [64, 32]]})
    prof = cfg.profiles[0]
    # the mask shares input_ids' symbolic batch and sequence dims: it takes their ranges
    assert prof == {"input_ids": [[1, 8], [4, 32], [64, 32]],
                    "attention_mask": [[1, 8], [4, 32], [64, 32]]}
    assert cfg.workspace_bytes == 2048 << 20 and cfg.precision == "fp16"
    # nothing given: every dynamic dim at 1
    cfg = capture_build_config(SAMPLES / "bert_tiny.onnx")
    assert cfg.profiles[0]["input_ids"] == [[1, 1]] * 3 and cfg.precision == "fp32"


def test_the_worker_knows_no_precision_names():
    """The client's precision table names the builder flag and the calibrator: a new target
    needs no worker change (no 'fp16'/'int8'/... literals in the server modules)."""
    import re

    names = re.compile(r"""["'](fp16|bf16|int8|fp8|fp32)["']""")
    hits = [f"{p.relative_to(WORKER)}:{i}" for p in sorted(WORKER.rglob("*.py"))
            if p.stem not in ("client", "forked", "launch")
            for i, line in enumerate(p.read_text().splitlines(), 1) if names.search(line)]
    assert not hits, hits
