"""Attention-mask sentinels in FP16: one finding per mask path, never a warning per tensor and
never advice to exclude a Constant (workbench.precision.masks). Real conversions and
onnxruntime runs; the models are the repository's torch export and onnx.helper graphs."""
from __future__ import annotations

import subprocess

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from conftest import SAMPLES
from workbench import compare
from workbench.precision.transform import convert

EXPORTS = SAMPLES.parent / "tests" / "data" / "exports"
MASKED = EXPORTS / "masked_attention.onnx"  # masked_fill(-1e9) padding + -inf causal, Softmax
MASKED_DATA = EXPORTS / "masked_attention.npz"


def _cli(*args):
    return subprocess.run(["workbench", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def padded_attention(path):
    """scores = q k^T + Unsqueeze(Where(pad, -1e9, 0)) -> Softmax -> @ v: the padding mask of
    transformer_seq2seq (bool src_pad_mask, True = PAD)."""
    rng = np.random.default_rng(0)
    w = [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32) * 0.3, n)
         for n in ("wq", "wk", "wv")]
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"], name="/q"),
        helper.make_node("MatMul", ["x", "wk"], ["k"], name="/k"),
        helper.make_node("MatMul", ["x", "wv"], ["v"], name="/v"),
        helper.make_node("Transpose", ["k"], ["kt"], name="/kt", perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s"], name="/scores"),
        helper.make_node("Constant", [], ["big"], name="/Constant_5",
                         value=helper.make_tensor("v", TensorProto.FLOAT, [], [-1e9])),
        helper.make_node("Constant", [], ["zero"], name="/Constant_6",
                         value=helper.make_tensor("z", TensorProto.FLOAT, [], [0.0])),
        helper.make_node("Where", ["pad", "big", "zero"], ["m"], name="/Where"),
        helper.make_node("Unsqueeze", ["m", "ax"], ["mu"], name="/Unsqueeze"),
        helper.make_node("Add", ["s", "mu"], ["sm"], name="/sa/Add"),
        helper.make_node("Softmax", ["sm"], ["p"], name="/sa/Softmax", axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["y"], name="/out"),
    ]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6, 8]),
                     helper.make_tensor_value_info("pad", TensorProto.BOOL, [2, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6, 8])],
        w + [numpy_helper.from_array(np.array([1], np.int64), "ax")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, str(path))
    pad = np.zeros((4, 6), bool)
    pad[1, 4:] = pad[3, 2:] = True
    data = path.with_suffix(".npz")
    np.savez(data, x=rng.standard_normal((4, 6, 8)).astype(np.float32), pad=pad)
    return path, data


def test_a_clamped_mask_is_one_info_and_no_warning():
    res = convert(str(MASKED), "fp16", calibration=str(MASKED_DATA))
    (mask,) = [f for f in res.findings if f.code == "fp16-saturated-mask"]
    assert mask.severity == "info" and "-1e+09" in mask.message and "clamped" in mask.message
    assert "/Softmax" in mask.message and mask.nodes == ["/Where", "/Where_1"]
    assert not [f for f in res.findings if f.severity != "info"], \
        [str(f) for f in res.findings]
    # what it says: the -1e9 Constant is stored as FP16's -65504, and the outputs agree
    const = next(n for n in res.proto.graph.node if n.name == "/Constant_13")
    assert numpy_helper.to_array(const.attribute[0].t).tolist() == -65504.0
    ref = res.report["error_reference"]["out"]
    assert ref["finite"] and ref["passed"]


def test_a_mask_that_reaches_fp16_through_a_cast_is_one_warning_naming_its_path():
    """/Where kept FP32: the -1e9 it selects is cast to FP16 before /Where_1 (-inf)."""
    res = convert(str(MASKED), "fp16", calibration=str(MASKED_DATA), exclude_nodes=["/Where"])
    (w,) = [f for f in res.findings if f.severity == "warning"]
    assert w.code == "fp16-mask-overflow" and "becomes -inf" in w.message
    assert w.hint == "keep the mask path in FP32: --exclude /Where --exclude /Where_1 " \
                     "--exclude /Softmax"
    kept = convert(str(MASKED), "fp16", calibration=str(MASKED_DATA),
                   exclude_nodes=["/Where", "/Where_1", "/Softmax"])
    assert not [f for f in kept.findings if "mask" in f.code]


def test_precision_build_and_compare_tell_the_same_story_of_a_padding_mask(tmp_path):
    """8 overlapping fp16-overflow warnings, one of them '--exclude /Constant_5', while
    `compare --to fp16` kept nothing: now one INFO everywhere, and no culprit."""
    model, data = padded_attention(tmp_path / "att.onnx")
    out = tmp_path / "att16.onnx"
    r = _cli("precision", model, "--to", "fp16", "--calib", data, "-o", out)
    assert r.returncode == 0, r.stderr
    said = [x.strip() for x in r.stdout.splitlines() if x.strip().startswith(("INFO", "WARN"))]
    assert not [x for x in said if x.startswith("WARNING")], said
    assert [x for x in said if "fp16-saturated-mask" in x] and "Constant" not in \
        " ".join(x.split("attention mask")[0] for x in said)
    assert "--exclude /Constant_5" not in r.stdout
    s = _cli("compare", model, "--to", "fp16", "--inputs", data)
    assert s.returncode == 0 and "fp16-saturated-mask" in s.stdout
    assert "within budget (default per output kind, FP16 budgets) with 0 node(s) kept in " \
        "FP32" in s.stdout, s.stdout
    rep = compare.layerwise(model, out, calibration=str(data))
    assert rep.outputs_pass and rep.masks >= {"m", "mu", "sm"}
    assert not rep.culprits() and (rep.first_divergence is None or
                                   rep.first_divergence.tensor not in rep.masks)


def test_a_sentinel_written_to_an_output_is_still_an_overflow(tmp_path):
    """No Softmax after it: the output itself holds -1e9, FP16 cannot; the warnings stay,
    and none names the Constant."""
    from test_compare_advice import sentinel_score

    model = sentinel_score(tmp_path / "s.onnx")
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((2, 8)).astype(np.float32),
              "mask": rng.random((2, 8)) > 0.5}]
    res = convert(str(model), "fp16", calibration=feeds)
    over = [f for f in res.findings if f.code == "fp16-overflow"]
    assert over and {n for f in over for n in f.nodes} == {"fill", "select"}
    assert not [f for f in res.findings if "mask" in f.code]
    assert all("big_c" not in (f.hint or "") for f in res.findings)
