"""The worker's TensorRT loaders: small pieces every op composes, after Polygraphy's
`backend/trt` loader family (CreateNetwork, NetworkFromOnnxPath, CreateConfig, Profile,
Calibrator, EngineFromBytes...), one module per seam:

    backend           the TensorRT module by name, its version, flags, knobs, capabilities
    logger            the ILogger (the build log, streamed warnings) and the progress monitor
    network           plugins, the builder, networks and parsers from ONNX, parser-error records
    describe          a network's layers and I/O as JSON
    profiles          optimization profiles checked against the network's inputs
    config            the builder config from one spec, the timing cache
    layer_precisions  layer precisions on weakly typed networks
    calibration       the INT8 calibrator of the legacy route
    engine            build and serialize, read (card-checked) and deserialize engines
    files             the atomic write they share

    name, trt = load_backend("tensorrt-rtx")
    log = make_logger(trt, ctx, keep="info")
    builder = create_builder(trt, log)
    net = network_from_onnx(trt, builder, log, "model.onnx", strongly_typed=True)
    cfg = create_config(trt, builder, net.network, log, ctx, target="sm89", profiles=[...])
    blob = build_serialized(builder, net.network, cfg, log, ctx)

These modules are the only place in the worker that creates a network (`create_network`) or
a parser (`OnnxParser`), loads plugins, turns parser errors into records, or sets
builder-config fields; ops hold only what is theirs (the build op's result, check_build's
blame, profiling). Every feature is probed with getattr, never by version string: explicit
batch is set where the backend still has the flag and no strongly typed networks (TensorRT
8.x), STRONGLY_TYPED where present and asked for. Python 3.9, stdlib + tensorrt (+ numpy
lazily for calibration). The names below are the ops' interface (`loaders as L`).
"""
from __future__ import annotations

from workbench.worker.loaders.backend import (BUILDER_KNOBS, builder_flags, builder_knobs,
                                              capabilities, load_backend, version_of)
from workbench.worker.loaders.calibration import load_calibration_npz, make_calibrator
from workbench.worker.loaders.config import (Config, create_config, save_timing_cache,
                                             set_flag, set_hardware_compatibility,
                                             set_tactic_sources, set_targets, set_tf32)
from workbench.worker.loaders.describe import allowed_formats, describe_layers, network_io
from workbench.worker.loaders.engine import (backend_for, blame, build_serialized, deserialize,
                                             hardware_compatibility, layer_nodes,
                                             read_checked_engine, read_engine,
                                             serialize_network)
from workbench.worker.loaders.files import write_atomic
from workbench.worker.loaders.layer_precisions import (CONSTRAINT_FLAGS, plan_layer_precisions,
                                                       set_layer_precisions)
from workbench.worker.loaders.logger import LEVELS, make_logger, make_progress_monitor
from workbench.worker.loaders.network import (PARSE_HINT, Network, create_builder,
                                              load_plugins, network_flags, network_from_onnx,
                                              no_gpu_reason, parse_failure, parser_errors,
                                              without_gpu_noise)
from workbench.worker.loaders.profiles import add_profiles
from workbench.worker.registry import Cancelled, OpError

__all__ = [
    "BUILDER_KNOBS", "CONSTRAINT_FLAGS", "Cancelled", "Config", "LEVELS", "Network",
    "OpError", "PARSE_HINT", "add_profiles", "allowed_formats", "backend_for", "blame",
    "build_serialized", "builder_flags", "builder_knobs", "capabilities", "create_builder",
    "create_config", "deserialize", "describe_layers", "hardware_compatibility",
    "layer_nodes", "load_backend", "load_calibration_npz", "load_plugins", "make_calibrator",
    "make_logger", "make_progress_monitor", "network_flags", "network_from_onnx", "network_io",
    "no_gpu_reason", "parse_failure", "parser_errors", "plan_layer_precisions",
    "read_checked_engine", "read_engine", "save_timing_cache", "serialize_network",
    "set_flag", "set_hardware_compatibility", "set_layer_precisions", "set_tactic_sources",
    "set_targets", "set_tf32", "version_of", "without_gpu_noise", "write_atomic",
]
