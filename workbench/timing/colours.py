"""One colour per layer type and per precision, the same in every chart that shows them (the
timing panel, the static HTML report, the matrix page): a colour depends on the name alone,
never on which other types a chart happens to show (a chart of the top 60 layers and one of all
layers used to number their types apart, so "Reformat" changed colour between them).

Plain data (no plotting library): the renderers in workbench.render and the widgets read it."""
from __future__ import annotations

import zlib
from typing import Dict, Sequence

# a general palette: series that are not layer types or precisions (models, engines)
PALETTE = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#eeca3b", "#b279a2",
           "#ff9da6", "#9d755d", "#bab0ac", "#2f4b7c", "#a05195", "#d45087", "#665191"]

# TensorRT's layer types (engine inspector / trtexec names, every version seen), families in
# related colours: convolutions blue, matrix products red, pointwise orange, data movement grey
LAYER_TYPE_COLOURS: Dict[str, str] = {
    "CaskConvolution": "#4c78a8", "Convolution": "#4c78a8", "CaskGemmConvolution": "#2f4b7c",
    "CaskFlattenConvolution": "#7aa6d6", "CaskDeconvolution": "#1b3a5c", "Deconvolution": "#1b3a5c",
    "CaskDepthwiseConvolution": "#9ecae9",
    "CaskGemmMatrixMultiply": "#e45756", "MatrixMultiply": "#e45756", "Gemm": "#e45756",
    "CaskMatrixMultiply": "#b22d2b", "FullyConnected": "#f28e8b",
    "PointWise": "#f58518", "PointWiseV2": "#f58518", "ElementWise": "#ffbf79",
    "Activation": "#d96c00", "Scale": "#e8a33d",
    "CaskPooling": "#54a24b", "Pooling": "#54a24b", "Reduce": "#88d27a", "Softmax": "#ff9da6",
    "Normalization": "#d45087", "LayerNorm": "#d45087",
    "Myelin": "#b279a2", "MyelinReformat": "#7c6b78",
    "Reformat": "#bab0ac", "Shuffle": "#72b7b2", "Slice": "#439894", "Concatenation": "#83bcb6",
    "Gather": "#9d755d", "Resize": "#c49c7a", "Padding": "#d6bfa6", "TopK": "#665191",
    "NoOp": "#d8d8d8", "Constant": "#e6e6e6", "ShapeHostToDevice": "#eeca3b",
    "Cast": "#a0a0a0", "Quantize": "#a05195", "Dequantize": "#c67bbc", "unknown": "#cfcfcf",
}
# types not listed above: a colour from this list picked by a hash of the name (stable across
# charts, runs and machines; never one of the listed families' exact colours)
OTHER_COLOURS = ["#17becf", "#bcbd22", "#8c564b", "#ff7c43", "#003f5c", "#7f7f7f", "#a6761d",
                 "#1b9e77", "#e7298a", "#66a61e", "#6a3d9a", "#b15928"]

PRECISION_COLOURS: Dict[str, str] = {
    "FP32": "#e45756", "TF32": "#f58518", "FP16": "#4c78a8", "BF16": "#72b7b2",
    "INT8": "#54a24b", "FP8": "#b279a2", "FP4": "#d45087", "INT4": "#88d27a",
    "INT32": "#9d755d", "INT64": "#c49c7a", "BOOL": "#d6bfa6", "": "#bab0ac", "unknown": "#bab0ac"}


def _hashed(name: str) -> str:
    return OTHER_COLOURS[zlib.crc32(name.encode("utf-8")) % len(OTHER_COLOURS)]


def layer_type_colour(layer_type: str) -> str:
    """The colour of a TensorRT layer type ('' is 'unknown')."""
    name = str(layer_type) or "unknown"
    return LAYER_TYPE_COLOURS.get(name) or _hashed(name)


def precision_colour(precision: str) -> str:
    """The colour of a precision ('FP16', 'INT8', ...)."""
    name = str(precision)
    return PRECISION_COLOURS.get(name) or PRECISION_COLOURS.get(name.upper()) or _hashed(name)


def colour_map(values: Sequence[str], by: str) -> Dict[str, str]:
    """{value: colour} for a chart coloured by "type" or "precision"."""
    pick = precision_colour if by == "precision" else layer_type_colour
    return {v: pick(v) for v in sorted(set(values))}
