"""Where precision is lost: layer-wise comparison, run results, the FP32-exclusion search.
The runners (`workbench.runtime.runners`) and the one output comparison (`workbench.runtime.comparison`) sit in
the core, so surgery verification and precision measurement use them too."""
from __future__ import annotations

from workbench.core import lazy

__getattr__, __dir__, __all__ = lazy.exports(__name__, {
    'workbench.runtime.runners': ('Feed', 'has_low_float'),
    'workbench.runtime.comparison': ('SENTINEL', 'TensorComparison', 'compare_tensor', 'infer_precision'),
    'workbench.precision.table': ('tolerances',),
    '.layer_compare': ('PASS_THROUGH_OPS', 'run_all', 'TensorError', 'LayerwiseReport',
                       'sample_feeds', 'layerwise', 'candidate_words', 'beyond_text',
                       'save_run_results', 'load_run_results', 'ExclusionSearch', 'find_exclusions',
                       'range_prepass', 'plan_chunks', 'tensor_bytes', 'constant_tensors',
                       'weightless'),
    '.engine_compare': ('EngineCompareReport', 'engine_layerwise', 'boundary_tensors',
                        'compare_tensors', 'mark_outputs', 'onnx_candidate'),
    '.bisect': ('BisectResult', 'bisect_exclusions', 'onnx_evaluator'),
})
