"""PrecisionPanel widget state without a browser: exclusions from the table and the graph
view, calibration validation, live profile validation and the advisor, Convert and its report."""
from __future__ import annotations

import html

import numpy as np
import onnx
from onnx import TensorProto, helper

from conftest import SAMPLES
from widgets.precision import PrecisionPanel, missing_profile_note
from workbench.precision.profiles import parse_profiles, validate_profiles

RESNET = SAMPLES / "resnet_tiny.onnx"
BERT = SAMPLES / "bert_tiny.onnx"
OVERFLOW = SAMPLES / "fp16_overflow.onnx"
BERT_CAL = SAMPLES / "calib" / "bert_tiny.npz"


def test_overflow_suggest_then_convert_shows_errors(tmp_path):
    data = tmp_path / "d.npz"
    np.savez(data, input=np.random.default_rng(7).standard_normal((16, 64)).astype(np.float32))
    out = tmp_path / "o16.onnx"
    p = PrecisionPanel(OVERFLOW, calibration=str(data), output=str(out))
    assert p.target.value == "fp16"
    p.validate_calibration()
    assert "1 batch" in p.calib_status.value and "[16, 64]" in p.calib_status.value
    # without exclusions: the error report shows non-finite output in FP16 arithmetic
    res = p.convert()
    assert res is not None and out.exists()
    assert "non-finite-output" in p.report_html.value and "&#10007;" in p.status.value
    nodes = p.suggest_exclusions()
    assert "/scale/Mul" in nodes and set(p.excluded_nodes) == set(nodes)
    res = p.convert()
    assert not [f for f in res.findings if f.severity == "error"]
    assert "&#10003;" in p.status.value and "FP16 storage, as on a GPU" in p.report_html.value
    assert set(res.report["exclude_nodes"]) == set(nodes)


class _FakeGraphSelection:
    """Stands in for widgets.graphview.GraphView's `selected` trait only (a plain list)."""

    def __init__(self, selected):
        self.selected = selected
        self.lit = None

    def highlight(self, ids):
        self.lit = list(ids)
        return self.lit


def test_graph_view_selection_becomes_exclusions(tmp_path):
    gv = _FakeGraphSelection(["/layer1/0/conv1/conv/Conv", "scope:/layer3"])
    p = PrecisionPanel(RESNET, graph_view=gv, output=str(tmp_path / "r.onnx"))
    picked = p.add_graph_selection()
    assert "/layer1/0/conv1/conv/Conv" in picked
    assert "/layer3/0/conv2/conv/Conv" in picked and all(
        n == "/layer1/0/conv1/conv/Conv" or n.startswith("/layer3/") for n in picked)
    res = p.convert()
    assert set(res.report["exclude_nodes"]) == set(picked)
    assert gv.lit == picked  # the exclusions light up in the graph
    m = onnx.shape_inference.infer_shapes(res.proto)
    types = {vi.name: vi.type.tensor_type.elem_type for vi in m.graph.value_info}
    conv = next(n for n in m.graph.node if n.name == "/layer1/0/conv1/conv/Conv")
    assert types[conv.output[0]] == onnx.TensorProto.FLOAT


def test_real_graph_view_selection_if_available(tmp_path):
    from widgets.graphview import GraphView

    gv = GraphView(RESNET)
    gv.select(["/stem/conv/Conv"])
    p = PrecisionPanel(RESNET, graph_view=gv, output=str(tmp_path / "r.onnx"))
    picked = p.add_graph_selection()
    assert "/stem/conv/Conv" in picked


def test_profile_editor_live_validation_and_advisor(tmp_path):
    p = PrecisionPanel(BERT, calibration=str(BERT_CAL), output=str(tmp_path / "b.onnx"))
    assert "dynamic inputs &#x27;input_ids&#x27; and &#x27;attention_mask&#x27; need a" \
        in p.profile_status.value
    p.profile_text.value = "input_ids:1x16:4x64:8x128\nattention_mask:1x16:4x32:8x128"
    assert "&#10007;" in p.profile_status.value and "dimension" in p.profile_status.value
    assert p.profiles == []
    p.profile_text.value = "input_ids:1x16:4x64:8x128\nattention_mask:1x16:4x64:8x128"
    assert "1 valid profile" in p.profile_status.value and len(p.profiles) == 1
    p.profile_text.value = "input_ids:1x1:4x64:8x128\nattention_mask:1x1:4x64:8x128"
    assert "wide-profile" in p.profile_status.value
    profs = p.propose_profile()
    assert len(profs) == 1 and "input_ids:" in p.profile_text.value
    assert "1 valid profile" in p.profile_status.value
    assert "padded-lengths" in p.profile_status.value
    # calibration outside the profile is reported by Validate (64 stacked samples are split
    # into batches the profile takes; their sequence length, 32, is beyond its 16)
    p.profile_text.value = "input_ids:1x4:2x8:8x16\nattention_mask:1x4:2x8:8x16"
    p.validate_calibration()
    assert "&#10007;" in p.calib_status.value and "axis 1 is 32" in p.calib_status.value
    assert "outside the profile range 4..16" in p.calib_status.value


def test_bad_calibration_and_int8_without_data_are_shown_not_raised(tmp_path):
    bad = tmp_path / "bad.npz"
    np.savez(bad, image=np.zeros((1, 3, 32, 32), np.float32))
    p = PrecisionPanel(RESNET, calibration=str(bad), output=str(tmp_path / "r8.onnx"))
    p.validate_calibration()
    assert "unknown input" in p.calib_status.value and "bad.npz" in p.calib_status.value
    p.calib_path.value = ""
    p.target.value = "int8"
    assert p.output.value.endswith(".int8.onnx") or p.output.value.endswith("r8.onnx")
    p.convert_btn.click()
    p.wait(60)
    assert "calibration" in p.status.value and "--calib" in p.status.value
    assert not (tmp_path / "r8.onnx").exists()


def _example(note):
    """The profile the note offers as its example (after 'e.g. ')."""
    return note.split("e.g. ", 1)[1].split(")", 1)[0]


def test_empty_profile_note_reads_right_for_an_input_named_input(tmp_path):
    p = PrecisionPanel(OVERFLOW, output=str(tmp_path / "o.onnx"))
    note = html.unescape(p.profile_status.value)
    assert note.startswith("no optimization profile: dynamic input 'input' needs a min/opt/max "
                           "shape range to build. Type input:MIN:OPT:MAX above"), note
    assert "inputs input" not in note and " need one" not in note
    # what to do next, in the project's own names: the editor line / --profile, the advisor
    # button, and what the build does when it is left empty
    for words in ("--profile", "'Propose from data'", "the build picks a default range",
                  "BuildPanel(strict_profiles=True)", "--strict-profiles"):
        assert words in note, words
    ex = _example(note)
    assert ex == "input:1x64:1x64:16x64"
    assert validate_profiles(OVERFLOW, parse_profiles([ex]))  # the example can be typed as is


def test_empty_profile_note_for_two_inputs_and_for_a_static_model(tmp_path):
    note = missing_profile_note(BERT)
    assert note.startswith("no optimization profile: dynamic inputs 'input_ids' and "
                           "'attention_mask' need a min/opt/max shape range to build. Type "
                           "input_ids:MIN:OPT:MAX and attention_mask:MIN:OPT:MAX above, one per "
                           "line or comma-separated"), note
    assert validate_profiles(BERT, parse_profiles([_example(note)]))
    three = missing_profile_note(["a", "b", "c"])
    assert "dynamic inputs 'a', 'b' and 'c' need a" in three and "e.g." not in three
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    static = tmp_path / "static.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), static)
    p = PrecisionPanel(static, output=str(tmp_path / "s16.onnx"))
    assert p.profile_status.value == "no optimization profile needed: every input has a fixed shape"


def test_exclude_ops_offers_only_ops_whose_exclusion_changes_the_target():
    """"Exclude ops" listed every op of bert_tiny, Constant, Shape and Cast included (they stay
    FP32 whatever is chosen); for INT8 only the quantized op types change anything."""
    p = PrecisionPanel(BERT)
    ops = set(p.op_table.options)
    assert {"MatMul", "Add", "Softmax"} <= ops
    assert not ops & {"Constant", "Shape", "Cast"}
    p.op_table.value = ("MatMul", "Softmax")
    p.target.value = "int8"
    assert set(p.op_table.options) <= {"Conv", "ConvTranspose", "MatMul", "Gemm", "AveragePool",
                                       "GlobalAveragePool", "MaxPool"}
    assert "MatMul" in p.op_table.options and p.op_table.value == ("MatMul",)  # kept
    p.target.value = "fp32"
    assert p.op_table.options == () and p.excluded_ops == []


def test_an_exclude_op_that_changes_nothing_is_said():
    from workbench.precision import convert

    res = convert(RESNET, "int8", exclude_ops=["Relu"],
                  calibration=str(SAMPLES / "calib" / "resnet_tiny.npz"))
    f = [x for x in res.findings if x.code == "exclude-op-no-effect"]
    assert len(f) == 1 and "--exclude-op Relu" in f[0].message and "INT8" in f[0].message
    res = convert(BERT, "fp16", exclude_ops=["Shape", "MatMul"])
    f = [x for x in res.findings if x.code == "exclude-op-no-effect"]
    assert len(f) == 1 and "--exclude-op Shape:" in f[0].message and "it computes in FP32" \
        in f[0].message


def test_keep_in_fp32_lists_the_nodes_whose_exclusion_changes_the_target(tmp_path):
    """The list started with Identity_141 ... and Shape nodes (they stay FP32 anyway); for
    INT8 only the quantized ops count. A chosen node stays listed across a target change."""
    p = PrecisionPanel(BERT, output=str(tmp_path / "b.onnx"))
    ops = {op for _, n in p.node_table.options for op in [p._ops[n]]}
    assert {"Constant", "Shape", "Cast"} <= set(p._ops.values())  # the model has them
    assert ops and not ops & {"Identity", "Shape", "Constant", "Cast", "ConstantOfShape"}
    assert "MatMul" in ops
    first = next(n for _, n in p.node_table.options if p._ops[n] == "Add")
    p.node_table.value = (first,)
    p.target.value = "int8"
    int8_ops = {p._ops[n] for _, n in p.node_table.options}
    assert first in {n for _, n in p.node_table.options} and p.node_table.value == (first,)
    assert int8_ops - {"Add"} <= {"MatMul", "Gemm", "Conv"}


def test_a_conversion_whose_outputs_fail_is_not_shown_as_a_plain_success(tmp_path):
    """'✓ wrote' showed even when the outputs were beyond tolerance vs FP32."""
    data = RESNET.parent / "calib" / "resnet_tiny.npz"  # (entropy INT8 misses its budget)
    p = PrecisionPanel(RESNET, calibration=str(data), output=str(tmp_path / "r8.onnx"))
    p.target.value = "int8"
    res = p.convert()
    assert res.report["error"]["logits"]["verdict"]["passed"] is False
    assert "&#9888;" in p.status.value and "&#10003;" not in p.status.value
    assert "1 output(s) beyond budget vs FP32 (logits)" in p.status.value
    p.target.value = "fp16"  # within tolerance: the plain tick, no such words
    p.convert()
    assert "&#10003;" in p.status.value and "beyond budget" not in p.status.value
