"""A build of a KV-cache decoder exported the Optimum way (benchmarks/large_model.py's tiny
decoder: input_ids / attention_mask / position_ids / past_key_values.N.key|value) with no
--profile: TensorRT-RTX builds it ahead of time on the CPU with two profiles, prefill (an empty
cache, many tokens) and decode (one token, a growing cache), and the build says so with the
flags that change them."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("large_model", REPO / "benchmarks" /
                                                  "large_model.py")
    lm = importlib.util.module_from_spec(spec)
    sys.modules["large_model"] = lm
    spec.loader.exec_module(lm)
    return lm.build_decoder(tmp_path_factory.mktemp("dec"), lm.tiny_decoder_config())


def _ranges(prof, name, axis):
    return tuple(int(prof[name][i][axis]) for i in range(3))


def test_default_build_of_a_decoder_takes_prefill_and_decode_profiles(decoder, tmp_path):
    pytest.importorskip("tensorrt_rtx_bindings")
    from workbench.engines.engine import BuildConfig, build_engine
    from workbench.worker.client import WorkerClient

    c = WorkerClient()
    try:
        res = build_engine(decoder, BuildConfig(target="sm89", builder_optimization_level=0),
                           client=c, timeout=600, output=tmp_path / "dec.engine")
    finally:
        c.close()
    assert (tmp_path / "dec.engine").stat().st_size == res.size_bytes > 0
    prefill, decode = res.config["profiles"]
    # prefill: the cache empty at min, opt and max; many new tokens
    assert _ranges(prefill, "past_key_values.0.key", 2) == (0, 0, 0)
    assert _ranges(prefill, "input_ids", 1)[2] > 1
    # decode: one new token; a cache from 1 to the max context; the mask one longer
    assert _ranges(decode, "input_ids", 1) == (1, 1, 1)
    past = _ranges(decode, "past_key_values.1.value", 2)
    assert past[0] >= 1 and past[2] > past[0]
    assert _ranges(decode, "attention_mask", 1) == tuple(x + 1 for x in past)
    assert res.export["trtexec"].count("--minShapes=") == 2
    notice = next(f for f in res.findings if f.code == "default-profile")
    assert "two profiles, prefill (new tokens (sequence_length) 1..128..512, cache " \
        "(past_sequence_length) 0..0..0)" in notice.message
    assert "--profile input_ids:" in notice.hint and "--profile +input_ids:1x1:1x1:" in notice.hint
    assert "one profile for both calls: --profile" in notice.hint


def test_build_cli_says_the_two_profiles(decoder, tmp_path):
    pytest.importorskip("tensorrt_rtx_bindings")
    p = subprocess.run(["workbench", "build", str(decoder), "-o", str(tmp_path / "d.engine"),
                        "--target", "sm89", "--opt-level", "0"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    text = p.stdout + p.stderr
    assert "built with two profiles, prefill" in text and "--profile +input_ids:" in text


def test_fp16_build_of_a_model_with_external_data_streams_its_weights(decoder, tmp_path):
    """The FP16 model TensorRT parses is written with its weights streamed into the
    workspace's transformed/ folder (an ONNX file and its .data beside it)."""
    pytest.importorskip("tensorrt_rtx_bindings")
    home = tmp_path / "home"
    p = subprocess.run(["workbench", "build", str(decoder), "-o", str(tmp_path / "h.engine"),
                        "--precision", "fp16", "--target", "sm89", "--opt-level", "0"],
                       capture_output=True, text=True, timeout=600,
                       env={**__import__("os").environ, "WORKBENCH_HOME": str(home)})
    assert p.returncode == 0, p.stderr[-2000:]
    made = list(home.glob("models/*/transformed/*.onnx"))
    assert len(made) == 1 and made[0].with_name(made[0].name + ".data").stat().st_size > 0
    import onnx

    m = onnx.load(str(made[0]), load_external_data=False)
    ext = [t for t in m.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert ext and {t.data_type for t in ext} == {onnx.TensorProto.FLOAT16}
