"""Precision as an ONNX transform: the precision table and spec, FP16/BF16 casts, INT8/FP8 Q/DQ,
calibration data, profiles.

Public names resolve lazily (PEP 562): importing the package costs nothing until a name is
used, which keeps CLI start-up lean."""
from __future__ import annotations

import importlib
from typing import Any, Dict

_EXPORTS: Dict[str, str] = {
    'Batch': 'workbench.precision.calibration',
    'DATA_SUFFIXES': 'workbench.precision.calibration',
    'IMAGE_SUFFIXES': 'workbench.precision.calibration',
    'ImagePreprocess': 'workbench.precision.calibration',
    'load_images': 'workbench.precision.calibration',
    'check_batch': 'workbench.precision.calibration',
    'load_calibration': 'workbench.precision.calibration',
    'random_finding': 'workbench.precision.calibration',
    'random_calibration': 'workbench.precision.calibration',
    'ort_reader': 'workbench.precision.calibration',
    'write_batches': 'workbench.precision.calibration',
    'describe': 'workbench.precision.calibration',
    'DEFAULT_BLOCK_OPS': 'workbench.precision.casts',
    'TYPE_AGNOSTIC_OPS': 'workbench.precision.casts',
    'FP32_ONLY_INPUTS': 'workbench.precision.casts',
    'opset_of': 'workbench.precision.casts',
    'op_accepts': 'workbench.precision.casts',
    'min_opset_for': 'workbench.precision.casts',
    'lower_float': 'workbench.precision.casts',
    'Shape': 'workbench.precision.profiles',
    'WIDE_RATIO': 'workbench.precision.profiles',
    'SHAPE_INPUT_SLOTS': 'workbench.precision.profiles',
    'Profile': 'workbench.precision.profiles',
    'parse_profile_arg': 'workbench.precision.profiles',
    'parse_profiles': 'workbench.precision.profiles',
    'shape_tensor_inputs': 'workbench.precision.profiles',
    'validate_profiles': 'workbench.precision.profiles',
    'check_samples': 'workbench.precision.profiles',
    'advise': 'workbench.precision.profiles',
    'wide_findings': 'workbench.precision.profiles',
    'QUANT_OPS': 'workbench.precision.quantize',
    'INT8_QMAX': 'workbench.precision.quantize',
    'FP8_E4M3_MAX': 'workbench.precision.quantize',
    'ensure_opset': 'workbench.precision.quantize',
    'extra_options': 'workbench.precision.quantize',
    'calibrate': 'workbench.precision.quantize',
    'convert_modelopt': 'workbench.precision.quantize',
    'TARGETS': 'workbench.precision.table',
    'CALIBRATE_METHODS': 'workbench.precision.table',
    'FP16_MAX': 'workbench.precision.table',
    'BF16_MAX': 'workbench.precision.table',
    'Precision': 'workbench.precision.table',
    'register': 'workbench.precision.table',
    'unregister': 'workbench.precision.table',
    'PrecisionSpec': 'workbench.precision.spec',
    'TransformJob': 'workbench.precision.transform',
    'keep_fp32': 'workbench.precision.transform',
    'fp16_casts': 'workbench.precision.transform',
    'bf16_casts': 'workbench.precision.transform',
    'qdq': 'workbench.precision.transform',
    'SENTINEL_ABS': 'workbench.precision.transform',
    'PrecisionResult': 'workbench.precision.transform',
    'load_fp32': 'workbench.precision.transform',
    'modernize_ir': 'workbench.precision.transform',
    'name_unnamed_nodes': 'workbench.precision.transform',
    'resolve_exclusions': 'workbench.precision.transform',
    'run_ort': 'workbench.precision.transform',
    'activation_ranges': 'workbench.precision.transform',
    'overflow_findings': 'workbench.precision.transform',
    'auto_exclusions': 'workbench.precision.transform',
    'compare_outputs': 'workbench.precision.transform',
    'feeds_for': 'workbench.precision.transform',
    'measure_error': 'workbench.precision.transform',
    'reference_batches': 'workbench.precision.transform',
    'measure_error_reference': 'workbench.precision.transform',
    'fold_round_trip_casts': 'workbench.precision.transform',
    'convert': 'workbench.precision.transform',
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(mod), name)
    if name != "TARGETS":  # that one follows the table (tests may register a target)
        globals()[name] = value
    return value
