"""An engine's culprit that moves values without rounding them (a Reshape after a fused
ScatterND): pointpillar's FP16 engine said "node 'node_view' (Reshape) adds relative error
0.433 -> --exclude node_view", which keeps nothing that rounds. The advice names the hidden
computing node above it. Checked on a recorded candidate (what an engine run exposes: the
tensors of its layer boundaries only), compared with onnxruntime FP32."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto as T, helper as h, numpy_helper as nh

from workbench.compare.engine_compare import engine_layerwise, recorded_candidate
from workbench.runtime.runners import OnnxRuntimeRunner


def _model():
    rng = np.random.default_rng(0)
    nodes = [h.make_node("Mul", ["x", "w"], ["m"], name="/scatter/Mul"),
             h.make_node("Relu", ["m"], ["r"], name="/scatter/Relu"),
             h.make_node("Reshape", ["r", "shape"], ["v"], name="node_view"),
             h.make_node("Add", ["v", "b"], ["y"], name="/head/Add")]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [2, 16])],
                     [h.make_tensor_value_info("y", T.FLOAT, [2, 4, 4])],
                     [nh.from_array(rng.uniform(0.5, 2, 16).astype(np.float32), "w"),
                      nh.from_array(np.array([2, 4, 4], np.int64), "shape"),
                      nh.from_array(np.zeros((4, 4), np.float32), "b")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _runs(model, feeds, hide=("m", "r")):
    """The reference's tensors with the Mul's error planted, the hidden ones left out (the
    engine fused /scatter/Mul and /scatter/Relu: no tensor of theirs to compare)."""
    from workbench.runtime.runners import mark_all_outputs

    marked, order, _ = mark_all_outputs(model)
    ref = OnnxRuntimeRunner(marked).infer_all(feeds)
    out = []
    for r in ref:
        # the fused layer's error: 10% up and down element by element (a uniform scale would
        # keep the output's direction, which the default verdict judges by cosine)
        sign = np.where(np.arange(r["m"].size).reshape(r["m"].shape) % 2 == 0, 1.0, -1.0)
        m = r["m"] * (1 + 0.1 * sign).astype(np.float32)
        rr = np.maximum(m, 0)
        v = rr.reshape(2, 4, 4)
        got = {"m": m, "r": rr, "v": v, "y": v + 0}
        out.append({k: a for k, a in got.items() if k not in hide})
    return out


def test_a_pass_through_culprit_names_the_hidden_node_above_it():
    model = _model()
    feeds = [{"x": np.random.default_rng(k).uniform(0.1, 1, (2, 16)).astype(np.float32)}
             for k in range(2)]
    rep = engine_layerwise(model, recorded_candidate(_runs(model, feeds)), feeds,
                           tensors=["v", "y"], marking="recorded", precision="fp16",
                           candidate_name="recorded", observer=False)
    assert not rep.outputs_pass
    (c,) = [t for t in rep.culprits() if t.node == "node_view"]
    # the nearest computing node above it (the Relu fused with the Mul: excluding it keeps
    # their layer in higher precision)
    assert rep.hidden_sources(c) == ["/scatter/Relu"]
    assert rep.to_exclude(c) == rep.hidden_sources(c)
    (f,) = [f for f in rep.findings if f.code == "precision-loss" and f.nodes[0] == "node_view"]
    assert "computes nothing of its own (Reshape)" in f.message
    assert "--exclude node_view" not in f.hint and f"--exclude {rep.to_exclude(c)[0]}" in f.hint


def test_a_pass_through_culprit_whose_input_was_compared_stays_the_culprit():
    model = _model()
    feeds = [{"x": np.random.default_rng(3).uniform(0.1, 1, (2, 16)).astype(np.float32)}]
    runs = _runs(model, feeds, hide=("m",))
    rep = engine_layerwise(model, recorded_candidate(runs), feeds, tensors=["r", "v", "y"],
                           marking="recorded", precision="fp16", candidate_name="recorded",
                           observer=False)
    view = next(t for t in rep.tensors if t.node == "node_view")
    assert rep.hidden_sources(view) == []  # /scatter/Relu's output was compared


def test_an_engine_report_counts_a_point_cloud_as_one_sample():
    """pointpillar's engine compare said 'samples: 700' (its points) for one cloud."""
    from onnx import TensorProto as T, helper as h

    g = h.make_graph([h.make_node("Relu", ["points"], ["y"], name="relu")], "g",
                     [h.make_tensor_value_info("points", T.FLOAT, ["num_points", 4])],
                     [h.make_tensor_value_info("y", T.FLOAT, ["num_points", 4])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    feeds = [{"points": np.random.default_rng(0).standard_normal((700, 4)).astype(np.float32)}]
    runs = [{"y": np.maximum(feeds[0]["points"], 0)}]
    rep = engine_layerwise(m, recorded_candidate(runs), feeds, tensors=[], marking="recorded",
                           precision="fp16", candidate_name="recorded", observer=False)
    assert rep.samples == 1 and rep.outputs_pass
