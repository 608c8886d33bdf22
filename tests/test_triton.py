"""Triton export (workbench.engines.triton, `workbench triton`) of a dynamic-batch engine really
built by TensorRT-RTX: config.pbtxt parses with Triton's own schema (tritonclient's
model_config_pb2) and every value matches the engine's real I/O and profiles."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import SAMPLES
from workbench.engines.card import read_card
from workbench.engines.engine import BuildConfig, build_engine
from workbench.engines.triton import check_config, export_triton, triton_config
from workbench.core.errors import WorkbenchError

trt = pytest.importorskip("tensorrt_rtx_bindings")
model_config_pb2 = pytest.importorskip("tritonclient.grpc.model_config_pb2")
from google.protobuf import text_format  # noqa: E402  (tritonclient brings protobuf)

RESNET = SAMPLES / "resnet_tiny.onnx"
BERT = SAMPLES / "bert_tiny.onnx"
TRITON = {"FLOAT": model_config_pb2.TYPE_FP32, "HALF": model_config_pb2.TYPE_FP16,
          "INT32": model_config_pb2.TYPE_INT32, "INT64": model_config_pb2.TYPE_INT64}


def _parse(path):
    msg = model_config_pb2.ModelConfig()
    text_format.Parse(path.read_text(), msg)
    return msg


def _engine_io(onnx_path):
    """The engine's I/O as TensorRT-RTX builds it: the strongly typed network of its ONNX."""
    logger = trt.Logger(trt.Logger.ERROR)
    builder = trt.Builder(logger)
    net = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    assert trt.OnnxParser(net, logger).parse_from_file(str(onnx_path))
    dt = {trt.float32: "FLOAT", trt.float16: "HALF", trt.int32: "INT32", trt.int64: "INT64"}
    ins = [(t.name, dt[t.dtype], list(t.shape)) for t in
           (net.get_input(i) for i in range(net.num_inputs))]
    outs = [(t.name, dt[t.dtype], list(t.shape)) for t in
            (net.get_output(i) for i in range(net.num_outputs))]
    return ins, outs


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    d = tmp_path_factory.mktemp("engines")
    with pytest.MonkeyPatch.context() as mp:  # (the autouse home is per test)
        mp.setenv("WORKBENCH_HOME", str(d / "home"))
        return _build(d)


def _build(d):
    fp16 = build_engine(RESNET, BuildConfig(
        precision="fp16", target="sm89", builder_optimization_level=0,
        profiles=[{"input": [[1, 3, 32, 32], [4, 3, 32, 32], [16, 3, 32, 32]]},
                  {"input": [[1, 3, 32, 32], [32, 3, 32, 32], [64, 3, 32, 32]]}]),
        output=d / "resnet_fp16.engine")
    bert = build_engine(BERT, BuildConfig(
        target="sm89", builder_optimization_level=0,
        profiles=[{"input_ids": [[1, 8], [4, 32], [8, 32]],
                   "attention_mask": [[1, 8], [4, 32], [8, 32]]}]),
        output=d / "bert.engine")
    return d / "resnet_fp16.engine", d / "bert.engine", fp16, bert


def test_dynamic_batch_engine_config_matches_the_engine(engines, tmp_path):
    resnet, _, _, _ = engines
    models = export_triton([resnet], tmp_path / "repo", gpus=[0, 1], instances=2)
    folder = tmp_path / "repo" / "resnet_fp16"
    assert models[0].path == str(folder)
    cfg = _parse(folder / "config.pbtxt")
    assert cfg.name == "resnet_fp16" and cfg.platform == "tensorrt_plan"
    assert cfg.max_batch_size == 16  # the smaller of the two profiles' max batch
    assert cfg.HasField("dynamic_batching")
    ins, outs = _engine_io(RESNET)
    assert [(t.name, t.data_type, list(t.dims)) for t in cfg.input] == \
        [(n, TRITON[d], s[1:]) for n, d, s in ins]  # the batch dim is Triton's
    assert [(t.name, t.data_type, list(t.dims)) for t in cfg.output] == \
        [(n, TRITON[d], s[1:]) for n, d, s in outs]
    assert [(g.count, g.kind, list(g.gpus), list(g.profile)) for g in cfg.instance_group] == \
        [(2, model_config_pb2.ModelInstanceGroup.KIND_GPU, [0, 1], ["0", "1"])]
    plan = folder / "1" / "model.plan"
    assert plan.read_bytes() == resnet.read_bytes()
    assert read_card(plan)["engine"] == "model.plan"
    readme = (folder / "README.md").read_text()
    assert "tensorrt-rtx" in readme and "`input` min [1, 3, 32, 32]" in readme
    assert "TensorRT-RTX engine" in readme


def test_engine_with_int_inputs_and_explicit_max_batch(engines, tmp_path):
    _, bert, _, _ = engines
    card = read_card(bert)
    text = triton_config(card, "bert", max_batch_size=4, dynamic_batching=False)
    cfg = check_config(text)
    assert cfg.max_batch_size == 4 and not cfg.HasField("dynamic_batching")
    ins, outs = _engine_io(BERT)
    assert [(t.name, t.data_type, list(t.dims)) for t in cfg.input] == \
        [(n, TRITON[d], s[1:]) for n, d, s in ins]
    assert [(t.name, t.data_type, list(t.dims)) for t in cfg.output] == \
        [(n, TRITON[d], s[1:]) for n, d, s in outs]
    assert list(cfg.instance_group[0].profile) == []  # one profile: nothing to choose
    with pytest.raises(WorkbenchError, match="max batch 9 is more than the engine's profiles "
                                             "allow \\(8\\)"):
        triton_config(card, "bert", max_batch_size=9)


def test_no_batch_dim_gives_full_dims(engines):
    resnet, _, _, _ = engines
    card = read_card(resnet)
    card["profiles"][0]["input"][0][0] = 2  # a profile that does not start at batch 1
    cfg = check_config(triton_config(card, "r"))
    assert cfg.max_batch_size == 0 and not cfg.HasField("dynamic_batching")
    assert list(cfg.input[0].dims) == [-1, 3, 32, 32]


def test_refusals_are_one_line(engines, tmp_path):
    resnet, _, _, _ = engines
    bare = tmp_path / "bare.engine"
    bare.write_bytes(resnet.read_bytes())
    with pytest.raises(WorkbenchError, match="the engine has no card"):
        export_triton([bare], tmp_path / "repo")
    with pytest.raises(WorkbenchError, match="two engines would be model 'resnet_fp16'"):
        export_triton([resnet, resnet], tmp_path / "repo")
    assert not (tmp_path / "repo").exists()  # checked before anything was written


def test_cli_writes_the_repository(engines, tmp_path):
    resnet, bert, _, _ = engines
    out = subprocess.run([sys.executable, "-m", "workbench.cli", "triton", str(resnet),
                          str(bert), "-o", str(tmp_path / "repo"), "--name", "r50",
                          "--name", "bert", "--gpus", "0", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert [(m["name"], m["max_batch_size"]) for m in d["models"]] == [("r50", 16), ("bert", 8)]
    for name in ("r50", "bert"):
        cfg = _parse(tmp_path / "repo" / name / "config.pbtxt")
        assert cfg.name == name and list(cfg.instance_group[0].gpus) == [0]
        assert (tmp_path / "repo" / name / "1" / "model.plan").is_file()
    bad = subprocess.run([sys.executable, "-m", "workbench.cli", "triton",
                          str(tmp_path / "nope.engine"), "-o", str(tmp_path / "r2")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "engine file not found" in bad.stderr
    assert bad.stderr.count("\n") == 1
