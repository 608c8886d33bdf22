"""Precision as an ONNX transform: the precision table and spec, FP16/BF16 casts, INT8/FP8 Q/DQ,
calibration data, profiles."""
from __future__ import annotations

from workbench.core import lazy

__getattr__, __dir__, __all__ = lazy.exports(__name__, {
    '.calibration': ('Batch', 'DATA_SUFFIXES', 'IMAGE_SUFFIXES', 'ImagePreprocess', 'load_images',
                     'check_batch', 'load_calibration', 'random_finding', 'random_calibration',
                     'ort_reader', 'write_batches', 'describe'),
    '.casts': ('DEFAULT_BLOCK_OPS', 'TYPE_AGNOSTIC_OPS', 'FP32_ONLY_INPUTS', 'opset_of',
               'op_accepts', 'min_opset_for', 'lower_float'),
    '.lowering': ('Lowered', 'lower', 'scoped_types'),
    '.profiles': ('Shape', 'WIDE_RATIO', 'SHAPE_INPUT_SLOTS', 'Profile', 'parse_profile_arg',
                  'parse_profiles', 'shape_tensor_inputs', 'validate_profiles', 'default_profile',
                  'default_profile_finding', 'missing_profile_error', 'profile_flag',
                  'DEFAULT_MAX_BATCH', 'check_samples', 'advise', 'wide_findings'),
    '.quantize': ('QUANT_OPS', 'INT8_QMAX', 'FP8_E4M3_MAX', 'ensure_opset', 'extra_options',
                  'calibrate', 'convert_modelopt'),
    '.spec': ('excludable_ops', 'record_spec', 'recorded_spec', 'PrecisionSpec'),
    '.table': ('TARGETS', 'CALIBRATE_METHODS', 'FP16_MAX', 'BF16_MAX', 'Precision', 'register',
               'unregister'),
    '.transform': ('TransformJob', 'keep_fp32', 'fp16_casts', 'bf16_casts', 'qdq', 'SENTINEL_ABS',
                   'PrecisionResult', 'modernize_ir', 'name_unnamed_nodes', 'resolve_exclusions',
                   'run_ort', 'activation_ranges', 'overflow_findings', 'auto_exclusions',
                   'compare_outputs', 'feeds_for', 'measure_error', 'reference_batches',
                   'measure_error_reference', 'fold_round_trip_casts', 'convert'),
}, live=('TARGETS',))
