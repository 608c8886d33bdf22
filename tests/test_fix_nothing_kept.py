"""`workbench fix --auto` where no recipe helps writes no output file (a copy of the input is
easily taken for a fixed model), says so and names the split route; FixSession.export and
FixPanel refuse the unchanged original the same way."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from workbench.cli import main
from workbench.core.errors import WorkbenchError


def scatter_mul_model():
    """ScatterND with reduction='mul' (TensorRT's parser refuses it; no recipe rewrites it:
    decompose takes 'add' only)."""
    idx = numpy_helper.from_array(np.array([[0], [2], [0]], np.int64), "idx")
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("ScatterND", ["r", "idx", "u"], ["y"], name="scatter",
                          reduction="mul")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8]),
              helper.make_tensor_value_info("u", TensorProto.FLOAT, [3, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], [idx])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


@pytest.fixture()
def model(tmp_path):
    p = tmp_path / "scatter.onnx"
    onnx.save(scatter_mul_model(), str(p))
    return p


def test_auto_with_nothing_kept_writes_nothing_and_names_the_split(model, tmp_path, capsys):
    out = tmp_path / "scatter.fixed.onnx"
    rc = main(["fix", str(model), "--auto", "-o", str(out)])
    text = capsys.readouterr().out
    assert rc == 1 and not out.exists()
    assert f"nothing written to {out}: 0 change(s) kept" in text
    assert "still unsupported: scatter (ScatterND)" in text
    assert f"$ workbench fix {model} --split -o {str(model)[:-5]}_split" in text
    assert f"$ workbench build {model} -o {str(model)[:-5]}.engine" in text
    rc = main(["fix", str(model), "--auto", "-o", str(out), "--json"])
    d = json.loads(capsys.readouterr().out)
    assert rc == 1 and d["written"] is False and not out.exists() and d["remaining"]


def test_session_export_refuses_the_original(model, tmp_path):
    from workbench.surgery.session import FixSession

    s = FixSession(str(model), backend="tensorrt-rtx", start="original",
                   output=tmp_path / "o.onnx")
    res = s.auto_fix()
    assert not res.supported and not any(st.get("kept") for st in res.steps)
    with pytest.raises(WorkbenchError, match="nothing to export") as e:
        s.export()
    assert "--split" in (e.value.hint or "") and not (tmp_path / "o.onnx").exists()
    out = s.export(tmp_path / "copy.onnx", unchanged=True)  # asked for: written
    assert out.exists()


def test_panel_export_button_is_off_for_the_original(model):
    pytest.importorskip("ipywidgets")
    from widgets.fix import FixPanel

    panel = FixPanel(str(model), backend="tensorrt-rtx", start="original")
    panel.wait()
    assert panel.export_btn.disabled
    with pytest.raises(WorkbenchError, match="nothing to export"):
        panel.export()
