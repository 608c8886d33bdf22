"""The sample models are what sample_models/README.md says: made by make_samples.py (byte for
byte), small, runnable in onnxruntime with their calibration data, and the real TensorRT-RTX
parser rejects exactly the documented nodes of needs_fixing.onnx."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from conftest import SAMPLES

MODELS = ["resnet_tiny", "bert_tiny", "needs_fixing", "fp16_overflow"]


def _session(name):
    return ort.InferenceSession(str(SAMPLES / f"{name}.onnx"), providers=["CPUExecutionProvider"])


def _calib(name):
    with np.load(SAMPLES / "calib" / f"{name}.npz", allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def test_make_samples_reproduces_the_committed_files(tmp_path):
    r = subprocess.run([sys.executable, str(SAMPLES / "make_samples.py"), "-o", str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    for name in MODELS:
        assert (tmp_path / f"{name}.onnx").read_bytes() == (SAMPLES / f"{name}.onnx").read_bytes(), \
            f"{name}.onnx differs from make_samples.py's output: re-run the script and commit"
    for name in ("resnet_tiny", "bert_tiny"):
        want = _calib(name)
        with np.load(tmp_path / "calib" / f"{name}.npz", allow_pickle=False) as z:
            assert sorted(z.files) == sorted(want)
            for k in want:
                np.testing.assert_array_equal(z[k], want[k])


@pytest.mark.parametrize("name", MODELS)
def test_models_are_small_valid_and_named(name):
    path = SAMPLES / f"{name}.onnx"
    assert path.stat().st_size < 1_000_000
    m = onnx.load(str(path))
    onnx.checker.check_model(m, full_check=True)
    assert all(n.name.startswith("/") for n in m.graph.node)
    assert len({n.name for n in m.graph.node}) == len(m.graph.node)


def test_calibration_data_matches_model_inputs_and_is_structured():
    for name in ("resnet_tiny", "bert_tiny"):
        data = _calib(name)
        inputs = {i.name: i for i in onnx.load(str(SAMPLES / f"{name}.onnx")).graph.input}
        assert set(data) == set(inputs)
        n = {v.shape[0] for v in data.values()}
        assert len(n) == 1 and n.pop() >= 32  # first axis = sample, several batches
    img = _calib("resnet_tiny")["input"]
    assert img.dtype == np.float32 and img.shape[1:] == (3, 32, 32)
    # structured images: neighbouring pixels are strongly correlated (noise would give ~0)
    a, b = img[..., :, :-1].ravel(), img[..., :, 1:].ravel()
    assert np.corrcoef(a, b)[0, 1] > 0.9
    assert len(np.unique(img.reshape(len(img), -1).mean(1).round(3))) == len(img)  # all differ
    tok = _calib("bert_tiny")
    ids, mask = tok["input_ids"], tok["attention_mask"]
    assert ids.dtype == np.int64 and mask.dtype == np.int64 and ids.shape == mask.shape
    lengths = mask.sum(1)
    assert lengths.min() < ids.shape[1] and lengths.max() <= ids.shape[1] and len(set(lengths)) > 5
    assert np.all(ids[:, 0] == 1)  # [CLS]
    assert np.all((ids == 0) == (mask == 0))  # padding exactly where the mask is 0
    assert np.all(ids[np.arange(len(ids)), lengths - 1] == 2)  # [SEP] closes each sequence
    assert ids.max() < 1000


def test_models_run_in_onnxruntime_on_their_calibration_data():
    out = _session("resnet_tiny").run(None, _calib("resnet_tiny"))[0]
    assert out.shape == (32, 10) and np.isfinite(out).all() and out.std() > 0.1
    hidden, pooled = _session("bert_tiny").run(None, _calib("bert_tiny"))
    assert hidden.shape == (64, 32, 64) and pooled.shape == (64, 64)
    assert np.isfinite(hidden).all() and np.isfinite(pooled).all()
    x = np.random.default_rng(0).normal(size=(2, 4, 12, 12)).astype(np.float32)
    y = _session("needs_fixing").run(None, {"input": x})[0]
    assert y.shape == (2, 10) and np.isfinite(y).all()


def test_fp16_overflow_is_fine_in_fp32_and_overflows_in_fp16():
    m = onnx.load(str(SAMPLES / "fp16_overflow.onnx"))
    w = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    x = np.random.default_rng(0).normal(size=(4, 64)).astype(np.float32)
    ref = _session("fp16_overflow").run(None, {"input": x})[0]
    assert np.isfinite(ref).all()

    def forward(dt):
        h = (x.astype(dt) @ w["proj.weight"].astype(dt) + w["proj.bias"].astype(dt)) * dt(500)
        n = h / (np.sqrt((h * h).sum(-1, keepdims=True)) + dt(1e-6))
        return h, n @ w["head.weight"].astype(dt)

    h32, y32 = forward(np.float32)
    np.testing.assert_allclose(y32, ref, rtol=1e-4, atol=1e-5)  # the numpy model is the model
    assert 65504 < np.abs(h32).max() < 1e7  # activations beyond FP16's range
    with np.errstate(over="ignore", invalid="ignore"):
        h16, y16 = forward(np.float16)
    assert np.isinf(h16).any() and np.isnan(y16).all()


def test_real_parser_rejects_exactly_the_documented_nodes():
    import tensorrt_rtx_bindings as trt  # installed by the test extra: absent = failure

    logger = trt.Logger(trt.Logger.ERROR)

    def errors(name):
        builder = trt.Builder(logger)
        net = builder.create_network(0)
        parser = trt.OnnxParser(net, logger)
        ok = parser.parse((SAMPLES / f"{name}.onnx").read_bytes())
        errs = [(parser.get_error(i).node_name(), parser.get_error(i).node_operator())
                for i in range(parser.num_errors)]
        return ok, errs

    for name in ("resnet_tiny", "bert_tiny", "fp16_overflow"):
        assert errors(name) == (True, []), name
    ok, errs = errors("needs_fixing")
    assert not ok
    assert errs == [("/crop/CenterCropPad", "CenterCropPad"), ("/flatten/Compress", "Compress"),
                    ("/act/FastGelu", "FastGelu")]
    readme = (SAMPLES / "README.md").read_text()
    for node, op in errs:
        assert f"`{node}`" in readme and f"`{op}`" in readme
