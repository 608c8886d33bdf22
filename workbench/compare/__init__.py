"""Where precision is lost: layer-wise comparison, run results, the FP32-exclusion search.
The runners (`workbench.runners`) and the one output comparison (`workbench.comparison`) sit in
the core, so surgery verification and precision measurement use them too.

Public names resolve lazily (PEP 562): importing the package costs nothing until a name is
used, which keeps CLI start-up lean."""
from __future__ import annotations

from typing import Dict

from workbench.lazy import lazy_exports

_EXPORTS: Dict[str, str] = {
    'Feed': 'workbench.runners',
    'SENTINEL': 'workbench.comparison',
    'has_low_float': 'workbench.runners',
    'TensorComparison': 'workbench.comparison',
    'compare_tensor': 'workbench.comparison',
    'tolerances': 'workbench.precision.table',
    'infer_precision': 'workbench.comparison',
    'PASS_THROUGH_OPS': 'workbench.compare.layer_compare',
    'run_all': 'workbench.compare.layer_compare',
    'TensorError': 'workbench.compare.layer_compare',
    'LayerwiseReport': 'workbench.compare.layer_compare',
    'sample_feeds': 'workbench.compare.layer_compare',
    'layerwise': 'workbench.compare.layer_compare',
    'candidate_words': 'workbench.compare.layer_compare',
    'beyond_text': 'workbench.compare.layer_compare',
    'save_run_results': 'workbench.compare.layer_compare',
    'load_run_results': 'workbench.compare.layer_compare',
    'ExclusionSearch': 'workbench.compare.layer_compare',
    'find_exclusions': 'workbench.compare.layer_compare',
    'range_prepass': 'workbench.compare.layer_compare',
    'plan_chunks': 'workbench.compare.layer_compare',
    'tensor_bytes': 'workbench.compare.layer_compare',
    'constant_tensors': 'workbench.compare.layer_compare',
    'weightless': 'workbench.compare.layer_compare',
    'EngineCompareReport': 'workbench.compare.engine_compare',
    'engine_layerwise': 'workbench.compare.engine_compare',
    'boundary_tensors': 'workbench.compare.engine_compare',
    'compare_tensors': 'workbench.compare.engine_compare',
    'mark_outputs': 'workbench.compare.engine_compare',
    'onnx_candidate': 'workbench.compare.engine_compare',
    'BisectResult': 'workbench.compare.bisect',
    'bisect_exclusions': 'workbench.compare.bisect',
    'onnx_evaluator': 'workbench.compare.bisect',
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
