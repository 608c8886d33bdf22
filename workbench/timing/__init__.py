"""Where the time goes in a TensorRT engine, mapped back to the ONNX graph.

    from workbench.timing import LayerTable, summarize, compare
    t = LayerTable.build("fp16.layers.json", "fp16.profile.json", onnx="model.onnx")
    summarize(t)["by_type"]

The readers of every layer-info / profile layout live in `workbench.formats` (one module per
schema; `load_layers`, `load_profile` are re-exported here); this package joins them into the
`LayerTable`, summaries, lints and engine-vs-engine comparison, an HTML report, NVIDIA
trt-perf-analysis `analyze-data.json` (`write_analyze_data`; `LayerTable.build` also opens
theirs). Live capture on a GPU through the TensorRT worker builds an engine first, so it
stands above the build: `workbench.measure.capture` (`capture`, `capture_onnx`).
"""
from __future__ import annotations

from workbench.timing.analysis import to_analyze_data, write_analyze_data
from workbench.formats.layerinfo import (EngineLayer, EngineLayers, TensorInfo, load_layers,
                                     parse_layers, parse_precision)
from workbench.timing.mapping import OnnxIndex
from workbench.formats.profiledata import (Profile, latency_stats, load_profile, load_run_metadata,
                                      parse_profile)
from workbench.timing.summary import (by_precision, by_type, compare, fusion_stats, lint,
                                      node_comparison, reformat_overhead, same_layers,
                                      speed_words, summarize, top_layers)
from workbench.timing.table import LayerTable, build_layer_table

__all__ = ["EngineLayer", "EngineLayers", "LayerTable", "OnnxIndex", "Profile",
           "TensorInfo", "build_layer_table", "by_precision", "by_type", "compare", "fusion_stats", "latency_stats", "lint", "load_layers",
           "load_profile", "load_run_metadata", "node_comparison", "parse_layers", "parse_precision", "parse_profile",
           "reformat_overhead", "same_layers", "speed_words", "summarize", "to_analyze_data",
           "top_layers", "write_analyze_data"]
