#!/usr/bin/env bash
# The main job on the bundled samples, end to end, with the real TensorRT-RTX parser and its CPU
# ahead-of-time builder: inspect -> check -> fix -> precision -> build. Outputs go to demo-output/.
set -euo pipefail
cd "$(dirname "$0")/.."
# the environment scripts/setup.sh made (.venv), also when it is not activated
[ -x .venv/bin/workbench ] && PATH="$PWD/.venv/bin:$PATH"
OUT=demo-output; mkdir -p "$OUT"
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "inspect: structure, dynamic dims, op histogram (bert_tiny)"
workbench inspect sample_models/bert_tiny.onnx

step "check: will TensorRT-RTX take needs_fixing.onnx? (exit 1 = unsupported nodes found)"
set +e; workbench check sample_models/needs_fixing.onnx --backend tensorrt-rtx; rc=$?; set -e
[ "$rc" = 1 ] || { echo "expected the check to find unsupported nodes (exit 1), got $rc"; exit 1; }

step "fix --auto: graphsurgeon recipes until the real parser accepts it (verified with onnxruntime)"
workbench fix sample_models/needs_fixing.onnx --auto -o "$OUT/needs_fixing.fixed.onnx"
workbench check "$OUT/needs_fixing.fixed.onnx" --backend tensorrt-rtx

step "precision: INT8 Q/DQ calibrated on representative data (resnet_tiny)"
workbench precision sample_models/resnet_tiny.onnx --to int8 \
  --calib sample_models/calib/resnet_tiny.npz -o "$OUT/resnet_tiny.int8.onnx"

step "compare: where FP16 loses fp16_overflow.onnx, and which nodes must stay FP32"
python3 -c "import numpy as np; np.savez('$OUT/overflow_inputs.npz', input=np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32))"
workbench compare sample_models/fp16_overflow.onnx --to fp16 --inputs "$OUT/overflow_inputs.npz"

step "build: FP16 engine, dynamic batch profile, TensorRT-RTX ahead of time for sm89 (CPU)"
workbench build sample_models/resnet_tiny.onnx --precision fp16 --backend tensorrt-rtx \
  --target sm89 --profile input:1x3x32x32:8x3x32x32:32x3x32x32 -o "$OUT/resnet_tiny.fp16.engine"

step "done: outputs in $OUT/"
ls -l "$OUT"
