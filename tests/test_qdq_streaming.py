"""INT8 / FP8 conversion of a model with external data: the Q/DQ pairs go in on the structure
and the weights are quantized tensor by tensor as the model is written. The result is the
model onnxruntime's quantizer makes in memory (same pairs, same scales, the same INT8 weights
to a rounding step), and no weight is ever loaded whole into a protobuf."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from workbench.core import model as wmodel
from workbench.precision.transform import convert


def _save(m: onnx.ModelProto, p: Path) -> Path:
    onnx.save(m, str(p), save_as_external_data=True, all_tensors_to_one_file=True,
              location=p.name + "_data", size_threshold=0)
    return p


@pytest.fixture
def mlp(tmp_path: Path) -> Path:
    """MatMul-Add-Relu-MatMul-Gemm over external weights (the second MatMul reads an
    activation on both sides), plus a Conv branch, as exporters lay them out."""
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((64, 96)).astype(np.float32)
    w1[:, 3] *= 40.0  # one output channel far larger: per-channel scales differ
    w2 = rng.standard_normal((96, 32)).astype(np.float32) * 0.1
    gw = rng.standard_normal((16, 32)).astype(np.float32)  # Gemm, transB=1
    cw = rng.standard_normal((8, 1, 3, 3)).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in (
        (w1, "w1"), (rng.standard_normal(96).astype(np.float32), "b1"), (w2, "w2"),
        (gw, "gw"), (np.zeros(16, np.float32), "gb"), (cw, "cw"))]
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
         helper.make_node("Add", ["h", "b1"], ["hb"], name="add"),
         helper.make_node("Relu", ["hb"], ["r"], name="relu"),
         helper.make_node("MatMul", ["r", "w2"], ["m2"], name="mm2"),
         helper.make_node("Gemm", ["m2", "gw", "gb"], ["y"], name="gemm", transB=1),
         helper.make_node("Conv", ["img", "cw"], ["c"], name="conv", pads=[1, 1, 1, 1])],
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64]),
         helper.make_tensor_value_info("img", TensorProto.FLOAT, [1, 1, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16]),
         helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 8, 8, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    (tmp_path / "src").mkdir()
    return _save(m, tmp_path / "src" / "mlp.onnx")


def _calib(tmp_path: Path) -> Path:
    rng = np.random.default_rng(1)
    p = tmp_path / "calib.npz"
    np.savez(p, x=rng.standard_normal((4, 64)).astype(np.float32),
             img=rng.standard_normal((1, 1, 8, 8)).astype(np.float32))
    return p


def _arrays(path: Path) -> dict:
    m = onnx.load(str(path))
    return {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}


def _run(path: Path, calib: Path) -> list:
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return s.run(None, dict(np.load(calib)))


@pytest.mark.parametrize("method,per_channel", [("minmax", True), ("entropy", True),
                                                ("minmax", False)])
def test_streamed_int8_is_the_in_memory_quantization(mlp: Path, tmp_path: Path,
                                                     method: str, per_channel: bool) -> None:
    calib = _calib(tmp_path)
    mem = convert(mlp, "int8", calibration=str(calib), calibrate_method=method, measure=False,
                  per_channel=per_channel)
    (tmp_path / "a").mkdir()
    ref = wmodel.save_model(mem.proto, tmp_path / "a" / "mem.onnx")
    res = convert(mlp, "int8", calibration=str(calib), calibrate_method=method,
                  per_channel=per_channel, output=tmp_path / "out" / "q.onnx")
    assert res.path == tmp_path / "out" / "q.onnx"
    assert res.report["quantized_nodes"] == mem.report["quantized_nodes"]
    assert sorted(n.op_type for n in res.proto.graph.node) == \
        sorted(n.op_type for n in mem.proto.graph.node)
    got, want = _arrays(res.path), _arrays(ref)
    assert set(got) == set(want)
    for name in ("w1", "w2", "gw", "cw"):
        q, s = got[f"{name}_quantized"], got[f"{name}_scale"]
        assert q.dtype == np.int8 and s.shape == want[f"{name}_scale"].shape
        np.testing.assert_allclose(s, want[f"{name}_scale"], rtol=1e-6)
        assert np.abs(q.astype(int) - want[f"{name}_quantized"].astype(int)).max() <= 1
    if per_channel:
        assert got["w1_scale"].shape == (96,) and got["gw_scale"].shape == (16,)
    else:
        assert got["w1_scale"].shape == () and got["cw_scale"].shape == ()
    for name in ("x", "r", "m2", "img"):  # activations: one pair each, the same range
        np.testing.assert_allclose(got[f"{name}_scale"], want[f"{name}_scale"], rtol=1e-5)
    for a, b in zip(_run(res.path, calib), _run(ref, calib)):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3 * float(np.abs(b).max()))
    assert res.report["error"] is not None  # measured from the two files


def test_streamed_int8_reads_no_weight_into_a_protobuf(mlp: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from onnx import external_data_helper

    from workbench.core import weights

    read: list = []
    real = external_data_helper.load_external_data_for_tensor

    def counted(t: TensorProto, base: str) -> None:
        read.append((t.name, int(np.prod(t.dims)) * 4))
        real(t, base)

    def whole(self: wmodel.Model) -> None:
        raise AssertionError("the whole model was loaded")

    monkeypatch.setattr(external_data_helper, "load_external_data_for_tensor", counted)
    monkeypatch.setattr(wmodel.Model, "load_weights", whole)
    res = convert(mlp, "int8", allow_random=True, output=tmp_path / "q.onnx")
    assert res.report["quantized_nodes"]
    assert all(n < weights.INLINE_BYTES for _, n in read), read  # small ones only, inlined
    assert all(not t.HasField("raw_data") or t.ByteSize() < 4096
               for t in res.proto.graph.initializer)


def test_streamed_int8_excludes_nodes_and_keeps_shared_weights(mlp: Path, tmp_path: Path
                                                               ) -> None:
    calib = _calib(tmp_path)
    res = convert(mlp, "int8", calibration=str(calib), exclude_nodes=["mm2"],
                  calibrate_method="minmax", output=tmp_path / "q.onnx")
    q = onnx.load(str(res.path))
    mm2 = next(n for n in q.graph.node if n.name == "mm2")
    assert list(mm2.input) == ["r", "w2"]  # reads the FP32 tensors
    names = {t.name for t in q.graph.initializer}
    assert "w2" in names and "w2_quantized" not in names and "w1" not in names
    assert "mm2" not in res.report["quantized_nodes"]
    assert _run(res.path, calib)[0].shape == (4, 16)


def test_streamed_fp8_scales_are_amax_over_448(mlp: Path, tmp_path: Path) -> None:
    import ml_dtypes

    calib = _calib(tmp_path)
    res = convert(mlp, "fp8", calibration=str(calib), calibrate_method="minmax",
                  output=tmp_path / "q.onnx", measure=False)
    got = _arrays(res.path)
    w1 = numpy_helper.to_array(onnx.load(str(mlp)).graph.initializer[0])
    np.testing.assert_allclose(got["w1_scale"], np.abs(w1).max(axis=0) / 448.0, rtol=1e-6)
    assert got["w1_quantized"].dtype == ml_dtypes.float8_e4m3fn
    back = got["w1_quantized"].astype(np.float32) * got["w1_scale"]
    assert np.abs(back - w1).max() <= 0.07 * np.abs(w1).max()  # E4M3: 3 mantissa bits
