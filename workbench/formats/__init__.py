"""Readers for the files TensorRT, trtexec, Polygraphy and NVIDIA's tools write, one per schema.

    from workbench import formats
    obj = formats.read("model.layers.json")  # EngineLayers / Profile / AnalyzeData / RunResultsInfo
    formats.detect(data, "x.json").name     # which reader takes parsed JSON
    [r.name for r in formats.readers("layers")]

Each reader module declares what it reads (`registry.Reader`): TensorRT layer information of
8.6/10.x (`Bindings`), 11.x (`I/O Tensors`) and LAYER_NAMES_ONLY; per-layer profiles (IProfiler,
trtexec `--exportProfile`), trtexec `--exportTimes`, the workbench capture; Polygraphy
RunResults (what it holds, arrays not decoded); NVIDIA
trt-perf-analysis `analyze-data.json` (read and written). Reading only: no TensorRT needed.
"""
from __future__ import annotations

from typing import Any, Optional

from workbench.formats import (analyze_data, polygraphy_run_results, profiles,  # noqa: F401
                               trt_layers_bindings, trt_layers_io_tensors,
                               trt_layers_names_only)
from workbench.formats._json import PathLike, read_json
from workbench.formats.registry import Reader, detect, find_reader, readers

def read(path: PathLike, kind: Optional[str] = None) -> Any:
    """Read `path` with the reader that recognises it (of `kind` when given)."""
    data = read_json(path, kind or "TensorRT")
    return detect(data, str(path), kind).read(data, str(path))


__all__ = ["Reader", "detect", "find_reader", "read", "readers"]
