"""What a build says, said once and in words: the default profile's notice once per build, a
parser refusal without a reason worded (never a bare ': false'), a bad profile answered with an
example of the input's own rank. Real CLI runs, TensorRT-RTX's parser."""
from __future__ import annotations

import json
import re
import shutil

import pytest

from tests.backend_sweep_cases import run_inprocess
from tests.conftest import SAMPLES

pytest.importorskip("tensorrt_rtx_bindings")


@pytest.fixture
def here(tmp_path, monkeypatch):
    for name in ("bert_tiny.onnx", "needs_fixing.onnx"):
        shutil.copy(SAMPLES / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_default_profile_notice_is_said_once_per_build(here):
    rc, out, err = run_inprocess(["build", "bert_tiny.onnx", "-o", "b.engine", "--target",
                                  "sm89", "--no-cache"])
    assert rc == 0, err
    assert (out + err).count("default-profile") == 1, out + err
    assert "no profile given for the dynamic inputs 'input_ids', 'attention_mask'" in err


def test_a_parser_refusal_without_a_reason_is_worded(here):
    rc, out, err = run_inprocess(["build", "needs_fixing.onnx", "-o", "n.engine", "--target",
                                  "sm89", "--no-split"])
    assert rc == 1
    said = [ln for ln in err.splitlines() if not ln.startswith("[TRT")]
    assert not [ln for ln in said if re.search(r":\s*(\[\d+\]\s*)?false\b", ln)], said
    # check and build word it alike (one translation of parser errors)
    assert "CenterCropPad is not supported by this TensorRT (no importer)" in err
    rc, out, _ = run_inprocess(["build", "needs_fixing.onnx", "-o", "n.engine", "--target",
                                "sm89", "--json"])
    doc = json.loads(out)
    texts = [doc["error"]] + [f["message"] for f in doc["findings"]]
    assert not [t for t in texts if re.search(r":\s*(\[\d+\]\s*)?false$", t)], texts
    # no split for a node fix rewrites exactly: the step is fix, with the -o it requires
    assert doc["next_steps"][0]["command"] == \
        "workbench fix needs_fixing.onnx -o needs_fixing.fixed.onnx --auto"


@pytest.mark.parametrize("profile", ["input_ids:1x2x3x4:1x2x3x4:1x2x3x4",
                                     "input_ids:16x64:1x1:1x64,attention_mask:1x1:1x64:16x64"])
def test_a_bad_profile_for_a_2d_input_is_answered_with_a_2d_example(here, profile):
    rc, _, err = run_inprocess(["build", "bert_tiny.onnx", "-o", "b.engine", "--target",
                                "sm89", "--profile", profile])
    assert rc == 2
    example = re.search(r"e\.g\. --profile input_ids:(\S+?)[,)]", err)
    assert example, err
    shapes = example.group(1).split(":")
    assert len(shapes) == 3 and all(len(s.split("x")) == 2 for s in shapes), shapes


def test_check_json_gives_no_bare_false_message(here):
    rc, out, _ = run_inprocess(["check", "needs_fixing.onnx", "--backend", "tensorrt-rtx",
                                "--json"])
    assert rc == 1
    msgs = [u.get("message") for u in json.loads(out)["unsupported"]]
    assert "CenterCropPad is not supported by this TensorRT (its check checkCenterCropPad " \
        "refused it, giving no reason)" in msgs
    assert not [m for m in msgs if m and re.fullmatch(r"\s*(\[\d+\]\s*)?false\s*", m)], msgs
