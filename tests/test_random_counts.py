"""Random inputs that count: a Loop's trip count drawn 0 ran no iteration, so an FP16 Loop body
compared at 0 error without running (a new user's `compare --allow-random` on a scripted loop)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from workbench.compare import layerwise
from workbench.compare.layer_compare import sample_feeds
from workbench.runtime.equivalence import count_range, make_inputs
from workbench.precision.calibration import random_calibration
from workbench.precision.transform import convert


def _loop_model() -> onnx.ModelProto:
    """y = x after `steps` rounds of x <- tanh(x * 1.7 + 0.3) (an FP16 body rounds each)."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Mul", ["s_in", "k"], ["m"]),
         helper.make_node("Add", ["m", "b"], ["a"]),
         helper.make_node("Tanh", ["a"], ["s_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("s_in", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("s_out", TensorProto.FLOAT, ["batch", 16])],
        [numpy_helper.from_array(np.float32(1.7), "k"),
         numpy_helper.from_array(np.float32(0.3), "b")])
    g = helper.make_graph(
        [helper.make_node("Loop", ["steps", "cond", "x"], ["y"], name="/Loop", body=body)],
        "loop",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16]),
         helper.make_tensor_value_info("steps", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])],
        [numpy_helper.from_array(np.array(True), "cond")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_a_loops_trip_count_is_at_least_one_in_every_random_feed():
    m = _loop_model()
    assert count_range(m, "steps") == (1, 5) and count_range(m, "x") is None
    for seed in range(20):
        assert 1 <= int(make_inputs(m, seed=seed)["steps"]) <= 4
    batches, _ = random_calibration(m, n=16)
    assert all(1 <= int(b["steps"]) <= 4 for b in batches)


def test_a_random_compare_of_an_fp16_loop_runs_its_body_and_says_the_count(tmp_path):
    m = _loop_model()
    path = tmp_path / "loop.onnx"
    onnx.save(m, str(path))
    findings: list = []
    feeds = sample_feeds(path, allow_random=True, findings=findings)
    steps = int(feeds[0]["steps"])
    said = [f for f in findings if f.code == "random-inputs"]
    assert len(said) == 1 and f"integer scalars: steps = {steps}" in said[0].message
    rep = layerwise(path, convert(path, "fp16").proto, feeds)
    y = next(t for t in rep.outputs if t.tensor == "y")
    assert y.max_abs > 0  # the FP16 body ran: its rounding shows (0 when no round ran)
