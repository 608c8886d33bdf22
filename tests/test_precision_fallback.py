"""A quantized target with a float fallback (`convert(..., fallback="fp16")`,
`precision --fallback fp16`): INT8 where Q/DQ sits, FP16 for the other nodes, FP32 only where
excluded, on the real sample models run by onnxruntime; the spec's validation."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from conftest import REPO, SAMPLES
from workbench.core.errors import WorkbenchError
from workbench.engines.spec import BuildConfig
from workbench.precision.spec import PrecisionSpec, recorded_spec
from workbench.precision.transform import convert

FP16 = onnx.TensorProto.FLOAT16
QDQ = ("QuantizeLinear", "DequantizeLinear")


def _calib(name):
    return str(SAMPLES / "calib" / f"{name}.npz")


@pytest.fixture(scope="module")
def converted():
    """{model: (int8 only, int8 + fp16 fallback)} for both sample models."""
    out = {}
    for name in ("resnet_tiny", "bert_tiny"):
        kw = dict(calibration=_calib(name))
        out[name] = (convert(SAMPLES / f"{name}.onnx", "int8", **kw),
                     convert(SAMPLES / f"{name}.onnx", "int8", fallback="fp16", **kw))
    return out


# ------------------------------------------------------------------------------ the spec
def test_spec_takes_a_float_fallback_of_a_quantized_target_only():
    s = PrecisionSpec(target="int8", fallback="half")
    assert s.fallback == "fp16" and s.convert_kwargs()["fallback"] == "fp16"
    assert PrecisionSpec.from_json(s.to_json()) == s
    with pytest.raises(WorkbenchError) as e:
        PrecisionSpec(target="fp16", fallback="fp16")
    assert e.value.field == "fallback" and "quantized target" in e.value.message
    assert "int8" in e.value.hint
    with pytest.raises(WorkbenchError) as e:
        PrecisionSpec(target="int8", fallback="fp8")
    assert e.value.field == "fallback" and "not a float precision" in e.value.message
    assert "fp16" in e.value.hint
    with pytest.raises(WorkbenchError) as e:
        PrecisionSpec(target="int8", fallback="fp12")
    assert e.value.field == "fallback"


def test_a_spec_without_fallback_keeps_its_json_and_build_hash():
    """The field is left out while unset: specs recorded in models and configs hashed before
    it stay the same."""
    assert "fallback" not in PrecisionSpec(target="int8").to_dict()
    plain = BuildConfig(precision="int8", calibration="c.npz")
    assert "fallback" not in plain.to_dict()
    fb = BuildConfig(precision="int8", calibration="c.npz", fallback="fp16")
    assert fb.to_dict()["fallback"] == "fp16" and fb.config_hash != plain.config_hash
    assert BuildConfig.from_json(fb.to_json()) == fb
    with pytest.raises(WorkbenchError) as e:
        BuildConfig(precision="fp16", fallback="fp16")
    assert e.value.field == "fallback"


# ------------------------------------------------------------------------------ convert
@pytest.mark.parametrize("name", ["resnet_tiny", "bert_tiny"])
def test_fallback_puts_every_node_without_qdq_in_fp16(converted, name):
    only, fb = converted[name]
    counts = fb.report["precisions"]
    nodes = fb.report["nodes_by_precision"]
    assert fb.report["fallback"] == "fp16"
    assert counts == {p: len(v) for p, v in nodes.items()}
    assert counts["int8"] > 0 and counts["fp16"] > counts["fp32"]
    # the quantized ops are the int8-only model's, its Q/DQ nodes untouched
    from workbench.core.qdq import quantized_nodes

    assert set(nodes["int8"]) == quantized_nodes(only.proto)
    q_only = [n for n in only.proto.graph.node if n.op_type in QDQ]
    q_fb = [n for n in fb.proto.graph.node if n.op_type in QDQ]
    # (a Q reading a lowered node's output reads it through a Cast back to FP32: input 0)
    assert [(n.name, n.op_type, list(n.input[1:]), list(n.output), list(n.attribute))
            for n in q_only] == [(n.name, n.op_type, list(n.input[1:]), list(n.output),
                                  list(n.attribute)) for n in q_fb]
    inits = {t.name: t.data_type for t in fb.proto.graph.initializer}
    for n in q_fb:  # scales stay FP32, zero points INT8
        assert inits.get(n.input[1], onnx.TensorProto.FLOAT) == onnx.TensorProto.FLOAT
    # FP16 Casts in, and the float nodes read FP16
    to16 = [n for n in fb.proto.graph.node if n.op_type == "Cast"
            and any(a.name == "to" and a.i == FP16 for a in n.attribute)]
    assert to16 and fb.report["casts_inserted"] > 0 and only.report["casts_inserted"] == 0
    assert sum(t.data_type == FP16 for t in fb.proto.graph.initializer) > 0
    # the model records its spec with the fallback
    assert recorded_spec(fb.proto).fallback == "fp16"
    assert any(f.code == "fallback-precisions" for f in fb.findings)


@pytest.mark.parametrize("name", ["resnet_tiny", "bert_tiny"])
def test_fallback_model_runs_in_onnxruntime_near_fp32(converted, name):
    only, fb = converted[name]
    for out, s in fb.report["error"].items():
        ref = only.report["error"][out]
        assert s["finite"] and s["cosine"] > 0.995, (out, s)
        # FP16 adds little to INT8's own error
        assert s["rel_err"] < 2 * ref["rel_err"] + 0.02, (out, s["rel_err"], ref["rel_err"])
    sess = ort.InferenceSession(fb.proto.SerializeToString(), providers=["CPUExecutionProvider"])
    with np.load(_calib(name)) as d:
        feeds = {k: d[k][:2] for k in d.files}
    ref = ort.InferenceSession(str(SAMPLES / f"{name}.onnx")).run(None, feeds)
    got = sess.run(None, feeds)
    for a, b in zip(ref, got):
        assert b.dtype == a.dtype and np.isfinite(b).all()
        cos = float(np.dot(a.ravel(), b.ravel()) /
                    (np.linalg.norm(a) * np.linalg.norm(b)))
        assert cos > 0.99


def test_excluded_nodes_stay_fp32_under_the_fallback():
    m = SAMPLES / "resnet_tiny.onnx"
    proto = onnx.load(str(m))
    bn = next(n.name for n in proto.graph.node if n.op_type == "BatchNormalization")
    r = convert(m, "int8", calibration=_calib("resnet_tiny"), fallback="fp16",
                exclude_nodes=[bn], measure=False)
    assert bn in r.report["nodes_by_precision"]["fp32"]
    assert bn not in r.report["nodes_by_precision"]["fp16"]
    assert recorded_spec(r.proto).exclude_nodes == [bn]


def test_streamed_model_with_external_data_converts_with_the_fallback(tmp_path):
    """A model whose weights live in external data, written with `output`: the quantized and
    the float conversions streamed one after the other; no temporary file left behind."""
    src = tmp_path / "src"
    src.mkdir()
    onnx.save(onnx.load(str(SAMPLES / "resnet_tiny.onnx")), str(src / "m.onnx"),
              save_as_external_data=True, location="m.data", size_threshold=0)
    out = tmp_path / "out" / "m_int8.onnx"
    out.parent.mkdir()
    r = convert(src / "m.onnx", "int8", calibration=_calib("resnet_tiny"), fallback="fp16",
                output=out)
    assert r.path == out and sorted(p.name for p in out.parent.iterdir()) == \
        ["m_int8.onnx", "m_int8.onnx.data"]
    assert r.report["precisions"]["int8"] > 0 and r.report["precisions"]["fp16"] > 0
    assert r.report["error"]["logits"]["cosine"] > 0.995
    written = onnx.load(str(out), load_external_data=False)
    assert recorded_spec(written).fallback == "fp16"
    assert any(n.op_type == "Cast" for n in written.graph.node)
    assert any(n.op_type == "DequantizeLinear" for n in written.graph.node)


def test_cli_precision_fallback(tmp_path):
    out = tmp_path / "r.onnx"
    r = subprocess.run([sys.executable, "-m", "workbench.cli", "precision",
                        str(SAMPLES / "resnet_tiny.onnx"), "--to", "int8", "--fallback", "fp16",
                        "--calib", _calib("resnet_tiny"), "-o", str(out), "--json"],
                       capture_output=True, text=True, cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["fallback"] == "fp16" and d["precisions"]["fp16"] > 0
    bad = subprocess.run([sys.executable, "-m", "workbench.cli", "precision",
                          str(SAMPLES / "resnet_tiny.onnx"), "--to", "fp16", "--fallback",
                          "fp16", "-o", str(tmp_path / "x.onnx")],
                         capture_output=True, text=True, cwd=REPO, timeout=300)
    assert bad.returncode != 0 and "fallback" in bad.stderr + bad.stdout
    assert not (tmp_path / "x.onnx").exists()


def test_nothing_left_to_quantize_is_the_fallback_model():
    """Every quantizable op excluded (what a plan keeping them all in FP32 asks): no Q/DQ, the
    fallback lowers the rest, the excluded ops stay FP32, the spec still says INT8 + FP16."""
    r = convert(SAMPLES / "resnet_tiny.onnx", "int8", calibration=_calib("resnet_tiny"),
                fallback="fp16", exclude_ops=["Conv", "Gemm", "GlobalAveragePool"])
    ops = [n.op_type for n in r.proto.graph.node]
    assert "QuantizeLinear" not in ops and "DequantizeLinear" not in ops and "Cast" in ops
    counts = r.report["precisions"]
    assert counts["int8"] == 0 and counts["fp16"] > 0
    fp32 = set(r.report["nodes_by_precision"]["fp32"])
    assert {n.name for n in r.proto.graph.node if n.op_type == "Conv"} <= fp32
    assert [f.code for f in r.findings][:1] == ["nothing-quantized"]
    assert recorded_spec(r.proto).fallback == "fp16"
    assert r.report["error"]["logits"]["cosine"] > 0.999


def test_compare_advice_on_a_fallback_candidate_repeats_the_fallback():
    """The `workbench precision` line compare suggests for a candidate made with a fallback
    keeps it (else the new model would put every node without Q/DQ back in FP32)."""
    from workbench.compare.layer_compare import _keep_hint

    made = PrecisionSpec(target="int8", fallback="fp16", exclude_nodes=["a"])
    hint = _keep_hint("int8", "b", made_with=made)
    assert "--to int8 --exclude a --fallback fp16 --exclude b --calib DATA" in hint
    assert "--fallback" not in _keep_hint("int8", "b", made_with=PrecisionSpec(target="int8"))


def test_the_streamed_chain_says_it_checked_no_fp16_range(tmp_path):
    """The streamed float step runs without calibration data (the weights are not held): the
    FP16 overflow check is not made, and the result says so."""
    src = tmp_path / "m.onnx"
    onnx.save(onnx.load(str(SAMPLES / "resnet_tiny.onnx")), str(src),
              save_as_external_data=True, location="m.data", size_threshold=0)
    r = convert(src, "int8", calibration=_calib("resnet_tiny"), fallback="fp16",
                output=tmp_path / "o.onnx", measure=False)
    (f,) = [f for f in r.findings if f.code == "no-overflow-check"]
    # calibration data was given: the next step is the search on it, not "pass --calib"
    assert "--calib" not in f.hint and "workbench compare MODEL --to fp16 --inputs DATA" in f.hint
    assert "without running the calibration data" in f.message
    mem = convert(SAMPLES / "resnet_tiny.onnx", "int8", calibration=_calib("resnet_tiny"),
                  fallback="fp16", measure=False)
    assert "no-overflow-check" not in [f.code for f in mem.findings]
