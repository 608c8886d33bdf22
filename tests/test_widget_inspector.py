"""Inspector panel state without a browser: histogram = op counts, dynamic dims marked, support
report (static on open, the real TensorRT-RTX parser on demand), node detail, error state."""
from __future__ import annotations

import re
import shutil
from collections import Counter

import onnx
import plotly.graph_objects as go

from conftest import H200, SAMPLES
from widgets.inspector import Inspector


def _proto_ops(path):
    m = onnx.load(str(path), load_external_data=False)
    return Counter(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}"
                   for n in m.graph.node)


def _histogram(ins):
    bar = ins.op_figure.data[0]
    return dict(zip(bar.y, bar.x))


def test_histogram_equals_op_counts_and_updates_in_place():
    ins = Inspector(SAMPLES / "bert_tiny.onnx")
    assert ins.error is None and ins.summary is not None
    assert isinstance(ins.op_figure, go.FigureWidget)
    assert _histogram(ins) == dict(_proto_ops(SAMPLES / "bert_tiny.onnx"))
    assert list(ins.op_figure.data[0].x) == sorted(ins.op_figure.data[0].x, reverse=True)
    fig = ins.op_figure
    assert fig.layout.xaxis.dtick is None  # bert_tiny: up to 23 of one op, plotly's own ticks
    ins.load(SAMPLES / "resnet_tiny.onnx")
    assert ins.op_figure is fig and len(fig.data) == 1  # same figure, new data
    assert max(fig.data[0].x) == 8 and fig.layout.xaxis.dtick == 1  # whole-number ticks
    assert _histogram(ins) == dict(_proto_ops(SAMPLES / "resnet_tiny.onnx"))
    cards = " ".join(c.value for c in ins.cards.children)
    assert f"{ins.summary.parameter_count:,}" in cards and "29" in cards


def test_io_table_marks_dynamic_dims():
    ins = Inspector(SAMPLES / "bert_tiny.onnx", static_check=False)
    rows = {r["name"]: r for r in ins.io_rows}
    assert rows["input_ids"]["dynamic"] == [0, 1] and rows["input_ids"]["dtype"] == "int64"
    assert rows["last_hidden_state"]["dynamic"] == [0, 1]
    assert rows["pooler_output"]["dynamic"] == [0]
    marked = re.findall(r'class="wb-dyn"[^>]*>([^<]+)<', ins.io_table.value)
    assert marked == ["batch", "seq", "batch", "seq", "batch", "seq", "batch"]
    ins.load(SAMPLES / "resnet_tiny.onnx", static_check=False)
    marked = re.findall(r'class="wb-dyn"[^>]*>([^<]+)<', ins.io_table.value)
    assert marked == ["batch", "batch"]  # 3, 32, 32 and 10 are not highlighted
    assert "[<span" in ins.io_table.value and ", 3, 32, 32]" in ins.io_table.value


def test_static_report_on_open_lists_failing_nodes_and_detail():
    ins = Inspector(SAMPLES / "needs_fixing.onnx")
    assert ins.report is not None and ins.report.backend == "static"
    assert not ins.report.supported
    failing = [v for _, v in ins.failing_select.options]
    assert failing == ["/crop/CenterCropPad", "/flatten/Compress", "/act/FastGelu"]
    assert ins.failing_select.layout.display is None  # shown: it lists the refused nodes
    for name in failing:
        assert name in ins.support_html.value
    ins.failing_select.value = "/act/FastGelu"
    detail = ins.detail_pane.children[0].value
    assert "FastGelu" in detail and "com.microsoft" in detail
    text = re.sub(r"<[^>]+>", "", detail)
    assert "/flatten/Reshape_output_0float32" in text and "act.biasfloat32[512]" in text
    assert "plugin" in detail  # the reason is shown with the node


def test_check_with_tensorrt_rtx_parser_in_a_thread():
    ins = Inspector(SAMPLES / "needs_fixing.onnx", backend="tensorrt-rtx")
    ins.run_check(wait=True)
    assert ins.check_error is None, ins.check_error
    assert not ins.busy and not ins.check_button.disabled
    r = ins.report
    assert r.backend == "tensorrt-rtx" and r.backend_version
    assert sorted(r.unsupported_nodes) == ["/act/FastGelu", "/crop/CenterCropPad",
                                           "/flatten/Compress"]
    assert "tensorrt-rtx" in ins.support_html.value and "done" in ins.check_status.value
    ok = Inspector(SAMPLES / "resnet_tiny.onnx", backend="tensorrt-rtx")
    ok.run_check(wait=True)
    assert ok.report.supported and ok.failing_select.options == ()
    assert ok.failing_select.layout.display == "none"  # no empty 'failing' box
    assert "every node is supported" in ok.support_html.value


def test_bad_file_shows_the_error_without_raising(tmp_path):
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"\x89PNG not a model")
    ins = Inspector(bad)
    assert ins.summary is None and ins.report is None
    assert "broken.onnx" in ins.error
    assert "broken.onnx" in ins.status.value and "Cannot inspect" in ins.status.value
    assert ins.body.layout.display == "none" and ins.check_button.disabled
    assert _histogram(ins) == {}
    ins.run_check(wait=True)  # nothing to check: no thread, no exception
    assert ins.report is None
    ins.load(SAMPLES / "fp16_overflow.onnx")  # recovers
    assert ins.error is None and ins.status.value == "" and ins.body.layout.display is None
    assert _histogram(ins) == dict(_proto_ops(SAMPLES / "fp16_overflow.onnx"))
    missing = Inspector(tmp_path / "nope.onnx")
    assert "not found" in missing.error


def test_missing_weights_are_shown_and_slots_exist(tmp_path):
    p = tmp_path / "resnet50.structure.onnx"
    shutil.copy(H200 / "resnet50.structure.onnx", p)
    ins = Inspector(p, static_check=False)
    assert ins.error is None
    assert "missing" in " ".join(c.value for c in ins.cards.children)
    assert "resnet50.weights.bin" in ins.warnings_html.value
    # the graph view (graph helper) is mounted in the slot, from the weightless graph
    assert [type(c).__name__ for c in ins.graph_slot.children] == ["GraphView"]
    assert ins.graph_slot in ins.body.children
    assert ins.show_node("/conv1/Conv").op == "Conv"
    assert "[N, 64, 112, 112]" in re.sub(r"<[^>]+>", "", ins.detail_pane.children[0].value)
    assert ins.show_node("no-such-node") is None


def test_real_parser_check_runs_in_a_background_task_off_the_kernel_thread(monkeypatch):
    """run_check returns at once (the kernel thread stays free) while the real TensorRT-RTX
    check runs in the panel's BackgroundTask; its result then lands in the panel."""
    import threading

    from widgets.base import BackgroundTask
    from workbench.support import checker

    gate, seen = threading.Event(), []
    real_check = checker.check

    def gated(*a, **kw):
        seen.append(threading.current_thread())
        assert gate.wait(60)
        return real_check(*a, **kw)

    monkeypatch.setattr(checker, "check", gated)
    ins = Inspector(SAMPLES / "needs_fixing.onnx", backend="tensorrt-rtx", static_check=False)
    assert isinstance(ins.task, BackgroundTask)
    ins.run_check()  # returns while the check waits at the gate
    assert ins.busy and ins.check_button.disabled and "checking with" in ins.check_status.value
    ins.run_check()  # a second click while busy starts nothing
    gate.set()
    ins.wait(120)
    assert len(seen) == 1 and seen[0] is not threading.main_thread()
    assert ins.check_error is None, ins.check_error
    assert sorted(ins.report.unsupported_nodes) == ["/act/FastGelu", "/crop/CenterCropPad",
                                                    "/flatten/Compress"]
    assert "done" in ins.check_status.value and not ins.check_button.disabled


def test_shared_node_name_shows_its_candidates(tmp_path):
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["a"], name="dup"),
             helper.make_node("Relu", ["a"], ["y"], name="dup")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    p = tmp_path / "dups.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(p))
    ins = Inspector(p, static_check=False)
    assert ins.show_node("dup") is None
    text = ins.detail_pane.children[0].value
    assert "used by 2 nodes" in text and "dup#0, dup#1" in text
    assert ins.show_node("dup#1").id == "dup#1"


def test_a_node_typed_in_the_node_field_is_selected_in_the_graph():
    """The node field showed the detail but left the graph as it was: the node now opens in
    its scope, selected and zoomed to, as a click on it would."""
    ins = Inspector(SAMPLES / "bert_tiny.onnx")
    view = ins.graph_view
    ops = {n.name: n.op_type for n in ins.model.proto.graph.node}
    node = next(n for n in ins.details if n not in view.data.ids  # in a collapsed scope
                and ops.get(n) not in (None, "Constant"))  # (Constants fold into readers)
    assert node not in view.data.ids
    ins.node_picker.value = node
    assert node in view.data.ids and view.selected == [node] and view.highlighted == [node]
    assert node in ins.detail_pane.children[0].value


def test_a_size_the_exporter_left_unnamed_shows_as_a_question_mark():
    """torch names the sizes it cannot name 'unk__0', 'unk__1': shown as '?', the name kept in
    the tooltip, beside the named dims as they are."""
    from widgets.inspector import shape_html
    from workbench.graphs.inspect import TensorInfo

    t = TensorInfo(name="h", dtype="float32", shape=["batch", "unk__3", 64])
    html = shape_html(t)
    assert ">batch<" in html and ">?<" in html and "(unk__3)" in html and ">unk__3<" not in html
