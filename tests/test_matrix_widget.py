"""MatrixPanel's state with a real local Ray instance and real TensorRT-RTX builds (no
browser): variants arrive one by one, then the table and the Pareto figure."""
from __future__ import annotations

import pytest

from tests.conftest import SAMPLES

ray = pytest.importorskip("ray")
pytest.importorskip("tensorrt_rtx_bindings")
pytest.importorskip("ipywidgets")

PROFILE = {"p0": [{"input": [[1, 3, 32, 32], [8, 3, 32, 32], [16, 3, 32, 32]]}]}


@pytest.fixture(scope="module")
def local_ray():
    from workbench.matrix.run import start_ray

    started = start_ray(workers=2)
    yield
    if started:
        ray.shutdown()


def test_panel_runs_a_matrix_and_draws_table_and_pareto(local_ray, tmp_path):
    from widgets.matrix import MatrixPanel

    panel = MatrixPanel([SAMPLES / "resnet_tiny.onnx"], out_dir=tmp_path / "m",
                        precisions=["fp32", "fp16"], targets=["sm89"], profiles=PROFILE,
                        inputs=str(SAMPLES / "calib" / "resnet_tiny.npz"), samples=4)
    assert panel.chosen_precisions() == ["fp32", "fp16"]
    assert panel.chosen_targets() == ["sm89"]
    assert panel.start() is True
    res = panel.wait(600)
    assert panel.state == "done", panel.status.value
    assert res.summary["ok"] == 2 and panel.progress.value == panel.progress.max == 2
    assert "2/2 ok" in panel.status.value and "#2ca02c" in panel.status.value  # ok colour
    html = panel.table_html.value
    assert html.count("<tr") == 3 and "fp16" in html and "onnx-cpu" in html
    assert "None" not in html and "nan" not in html  # missing figures are blank
    markers = [t for t in panel.figure.data if t.mode == "markers+text"]
    assert len(markers) == 1 and len(markers[0].x) == 2
    # no GPU, no recorded profiles: accuracy only, the variants on the x axis (no size)
    assert sorted(markers[0].x) == sorted(r["id"] for r in res.results)
    assert "accuracy only" in panel.note.value
    # a second Run with the same folder: both variants finished earlier, nothing rebuilt
    panel.start()
    again = panel.wait(600)
    assert again.summary["resumed"] == 2 and "2 finished earlier" in panel.status.value


def test_panel_reports_a_bad_plan_in_its_status(tmp_path):
    from widgets.matrix import MatrixPanel

    panel = MatrixPanel([SAMPLES / "resnet_tiny.onnx"], out_dir=tmp_path / "m",
                        precisions=["int8"], targets=["sm89"])
    assert panel.start() is False
    assert panel.state == "failed"
    assert "INT8 needs calibration data" in panel.status.value
    assert "INT8 needs calibration data" in str(panel.error)  # kept, as the build panel keeps it
    panel.targets.value = "sm8x"
    panel.precision_boxes["int8"].value = False
    panel.precision_boxes["fp32"].value = True
    assert panel.start() is False and "sm8x" in panel.status.value


def test_panel_offers_the_fallback_combinations_the_table_allows(tmp_path):
    """A box per item of the precision axis: the table's targets, then each quantized one
    with each float fallback (`precision_items`); a checked "int8+fp16" plans the fallback
    variant, calibrated as INT8 is."""
    from widgets.matrix import MatrixPanel
    from workbench.precision.spec import precision_items

    calib = str(SAMPLES / "calib" / "resnet_tiny.npz")
    panel = MatrixPanel([SAMPLES / "resnet_tiny.onnx"], out_dir=tmp_path / "m",
                        precisions=["int8", "INT8+half"], targets=["sm89"], calibration=calib)
    assert list(panel.precision_boxes) == precision_items()
    assert "int8+fp16" in panel.precision_boxes and "fp16+fp16" not in panel.precision_boxes
    assert panel.chosen_precisions() == ["int8", "int8+fp16"]
    plain, fb = panel.plan()
    assert (plain.label, fb.label, fb.fallback) == ("int8", "int8+fp16", "fp16")
    assert fb.config().calibration == calib
    panel.calibration = None
    panel.precision_boxes["int8"].value = False
    assert panel.start() is False and "INT8+FP16 needs calibration data" in panel.status.value
