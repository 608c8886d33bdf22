"""Calibration data: every supported source loads, and every wrong file gives a clear error
naming the file, the input and (for shapes) the axis and allowed range."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from conftest import SAMPLES
from workbench.precision.calibration import (ImagePreprocess, describe, load_calibration, ort_reader,
                                   random_calibration, write_batches)
from workbench.core.errors import WorkbenchError
from workbench.precision.profiles import parse_profile_arg

RESNET = SAMPLES / "resnet_tiny.onnx"
BERT = SAMPLES / "bert_tiny.onnx"
RESNET_CAL = SAMPLES / "calib" / "resnet_tiny.npz"
BERT_CAL = SAMPLES / "calib" / "bert_tiny.npz"


def _err(fn, *args, **kw) -> str:
    with pytest.raises(WorkbenchError) as e:
        fn(*args, **kw)
    msg = str(e.value)
    assert "\n" not in msg and "Traceback" not in msg
    return msg


def test_sample_npz_files_load_as_validated_batches():
    b = load_calibration(RESNET_CAL, RESNET)
    assert len(b) == 1 and b[0]["input"].shape == (32, 3, 32, 32)
    assert b[0]["input"].dtype == np.float32
    bb = load_calibration(BERT_CAL, BERT)
    assert set(bb[0]) == {"input_ids", "attention_mask"} and bb[0]["input_ids"].dtype == np.int64
    info = describe(bb)
    assert info["batches"] == 1 and info["inputs"]["input_ids"]["shapes"] == [[64, 32]]


def test_folder_of_npz_and_npy_and_iterables(tmp_path):
    x = np.load(RESNET_CAL)["input"]
    for i in range(3):
        np.savez(tmp_path / f"b{i}.npz", input=x[i * 4:(i + 1) * 4])
    np.save(tmp_path / "b3.npy", x[12:14])
    b = load_calibration(tmp_path, RESNET)
    assert [a["input"].shape[0] for a in b] == [4, 4, 4, 2]
    np.testing.assert_array_equal(b[1]["input"], x[4:8])
    gen = ({"input": x[i:i + 2]} for i in range(0, 8, 2))
    assert len(load_calibration(gen, RESNET)) == 4
    assert len(load_calibration({"input": x[:3]}, RESNET)) == 1
    assert len(load_calibration([{"input": x[:1]}] * 9, RESNET, max_batches=5)) == 5


def test_wrong_input_name_names_it_and_lists_inputs(tmp_path):
    f = tmp_path / "bad.npz"
    np.savez(f, image=np.zeros((2, 3, 32, 32), np.float32))
    msg = _err(load_calibration, f, RESNET)
    assert "bad.npz" in msg and "unknown input 'image'" in msg and "input" in msg
    f2 = tmp_path / "missing.npz"
    np.savez(f2, input_ids=np.zeros((2, 8), np.int64))
    msg = _err(load_calibration, f2, BERT)
    assert "missing input 'attention_mask'" in msg and "missing.npz" in msg


def test_wrong_dtype_is_an_error_safe_casts_are_not(tmp_path):
    f = tmp_path / "ids.npz"
    np.savez(f, input_ids=np.zeros((2, 8), np.float32), attention_mask=np.ones((2, 8), np.int64))
    msg = _err(load_calibration, f, BERT)
    assert "input 'input_ids'" in msg and "float32" in msg and "int64" in msg and "ids.npz" in msg
    # int32 ids and float64 images are converted safely
    ok = load_calibration({"input_ids": np.ones((2, 8), np.int32),
                           "attention_mask": np.ones((2, 8), np.int32)}, BERT)
    assert ok[0]["input_ids"].dtype == np.int64
    ok = load_calibration({"input": np.zeros((1, 3, 32, 32), np.float64)}, RESNET)
    assert ok[0]["input"].dtype == np.float32
    msg = _err(load_calibration, {"input_ids": np.full((1, 4), 2 ** 63 + 5, np.uint64),
                                  "attention_mask": np.ones((1, 4), np.int64)}, BERT)
    assert "input_ids" in msg
    msg = _err(load_calibration, {"input": np.full((1, 3, 32, 32), np.nan, np.float32)}, RESNET)
    assert "NaN" in msg


def test_shape_errors_name_input_axis_and_range(tmp_path):
    msg = _err(load_calibration, {"input": np.zeros((2, 3, 28, 28), np.float32)}, RESNET)
    assert "input 'input' axis 2 is 28" in msg and "32" in msg
    msg = _err(load_calibration, {"input": np.zeros((3, 32, 32), np.float32)}, RESNET)
    assert "rank 3" in msg and "rank 4" in msg
    f = tmp_path / "long.npz"
    np.savez(f, input_ids=np.ones((2, 200), np.int64), attention_mask=np.ones((2, 200), np.int64))
    prof = parse_profile_arg("input_ids:1x8:4x64:8x128,attention_mask:1x8:4x64:8x128")
    msg = _err(load_calibration, f, BERT, profile=prof)
    assert "input 'input_ids' axis 1 is 200" in msg and "1..8" not in msg and "8..128" in msg
    assert "long.npz" in msg
    msg = _err(load_calibration, {"input_ids": np.ones((2, 16), np.int64),
                                  "attention_mask": np.ones((2, 12), np.int64)}, BERT)
    assert "dimension 'seq'" in msg and "16" in msg and "12" in msg


def test_pickled_object_array_is_refused(tmp_path):
    f = tmp_path / "evil.npy"
    np.save(f, np.array([{"input": 1}], dtype=object), allow_pickle=True)
    msg = _err(load_calibration, f, RESNET)
    assert "evil.npy" in msg and "pickle" in msg
    g = tmp_path / "evil.npz"
    np.savez(g, input=np.array([object()], dtype=object))
    msg = _err(load_calibration, g, RESNET)
    assert "evil.npz" in msg and "pickle" in msg


def test_npy_for_multi_input_model_and_unknown_file_types(tmp_path):
    f = tmp_path / "one.npy"
    np.save(f, np.ones((2, 8), np.int64))
    msg = _err(load_calibration, f, BERT)
    assert "one.npy" in msg and "input_ids" in msg and ".npz" in msg
    t = tmp_path / "data.txt"
    t.write_text("1 2 3")
    assert "data.txt" in _err(load_calibration, t, RESNET)
    assert "not found" in _err(load_calibration, tmp_path / "nope.npz", RESNET)
    (tmp_path / "empty").mkdir()
    assert "no .npz/.npy" in _err(load_calibration, tmp_path / "empty", RESNET)
    bad = tmp_path / "trunc.npz"
    bad.write_bytes(b"PK\x03\x04garbage")
    assert "trunc.npz" in _err(load_calibration, bad, RESNET)


def test_static_leading_dim_splits_stacked_samples(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    b = load_calibration({"x": np.arange(12, dtype=np.float32).reshape(3, 4)}, m)
    assert len(b) == 3 and b[2]["x"].tolist() == [[8, 9, 10, 11]]
    assert isinstance(m, onnx.ModelProto)


def _write_ppm(path, img):
    h, w, _ = img.shape
    path.write_bytes(b"P6\n# test\n%d %d\n255\n" % (w, h) + img.astype(np.uint8).tobytes())


def test_image_folder_with_declared_preprocessing(tmp_path):
    rng = np.random.default_rng(0)
    imgs = [rng.integers(0, 256, (32, 32, 3)).astype(np.uint8) for _ in range(3)]
    for i, im in enumerate(imgs):
        _write_ppm(tmp_path / f"img{i}.ppm", im)
    np.save(tmp_path / "img3.npy", imgs[0])  # an HxWxC .npy image counts too
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    pre = ImagePreprocess(mean=mean, std=std, batch_size=2)
    b = load_calibration(tmp_path, RESNET, preprocess=pre)
    assert [x["input"].shape for x in b] == [(2, 3, 32, 32), (2, 3, 32, 32)]
    want = ((imgs[1] / 255.0 - np.array(mean)) / np.array(std)).transpose(2, 0, 1)
    np.testing.assert_allclose(b[0]["input"][1], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(b[1]["input"][1], b[0]["input"][0], rtol=1e-6)
    # resize: a 64x64 constant image stays constant at 32x32
    big = tmp_path / "big"
    big.mkdir()
    _write_ppm(big / "a.ppm", np.full((64, 48, 3), 51, np.uint8))
    r = load_calibration(big, RESNET, preprocess=ImagePreprocess())
    assert r[0]["input"].shape == (1, 3, 32, 32)
    np.testing.assert_allclose(r[0]["input"], 0.2, rtol=1e-6)
    # PNG: read with Pillow when installed, otherwise a clear error saying what to do
    (big / "b.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    if importlib.util.find_spec("PIL") is None:
        msg = _err(load_calibration, big, RESNET, preprocess=ImagePreprocess())
        assert "b.png" in msg and "pillow" in msg.lower()
    else:
        with pytest.raises(Exception):
            load_calibration(big, RESNET, preprocess=ImagePreprocess())
    assert "layout" in _err(ImagePreprocess, layout="CHW")


def test_random_calibration_is_explicit_and_warns():
    batches, finding = random_calibration(BERT, n=3)
    assert finding.severity == "warning" and finding.code == "random-calibration"
    assert len(batches) == 3
    ids = batches[0]["input_ids"]
    assert ids.dtype == np.int64 and ids.max() < 1000  # within the embedding table
    assert (batches[0]["attention_mask"] == 1).all()
    load_calibration(batches, BERT)  # random batches still pass validation


def test_ort_reader_rewinds_and_write_batches_round_trip(tmp_path):
    b = load_calibration(BERT_CAL, BERT)
    r = ort_reader(b)
    assert r.get_next() is not None and r.get_next() is None
    r.rewind()
    assert r.get_next()["input_ids"].shape == (64, 32)
    paths = write_batches(b + b, tmp_path / "w")
    assert [p.name for p in paths] == ["batch_0000.npz", "batch_0001.npz"]
    again = load_calibration(tmp_path / "w", BERT)
    np.testing.assert_array_equal(again[1]["attention_mask"], b[0]["attention_mask"])


def test_entropy_calibration_takes_batches_of_other_shapes(tmp_path):
    """A folder of batches of different sizes (a smaller last batch, variable-length audio)
    failed entropy and percentile INT8 with 'The requested array has an inhomogeneous shape':
    onnxruntime's histogram calibrators stack one call's batches. Each run of one shape is now
    collected on its own (the histograms merge across calls)."""
    from workbench.precision import convert

    x = np.load(SAMPLES / "calib" / "resnet_tiny.npz")["input"]
    batches = [{"input": x[:16]}, {"input": x[16:29]}, {"input": x[29:]}]  # 16, 13, 3
    for method in ("entropy", "percentile", "minmax"):
        res = convert(SAMPLES / "resnet_tiny.onnx", "int8", calibration=batches,
                      calibrate_method=method)
        assert res.report["qdq_pairs"] > 0, method
        assert res.report["error"]["logits"]["cosine"] > 0.99, method
