"""KV-cache decoders: the related input sizes (cache = past, mask = past + new, positions
counting on from the cache) are read from names and from the graph, random inputs respect
them, and `compare --to fp16 --allow-random` runs on every naming style."""
from __future__ import annotations

import subprocess

import numpy as np
import onnxruntime as ort
import pytest

from kv_decoders import STYLES, make_decoder


@pytest.fixture(scope="module", params=[(s, p) for s in STYLES for p in (True, False)],
                ids=lambda v: f"{v[0]}-{'positions' if v[1] else 'no-positions'}")
def decoder(request, tmp_path_factory):
    style, positions = request.param
    return style, positions, make_decoder(tmp_path_factory.mktemp(style), style, positions)


def test_decoder_dims_are_recognised(decoder):
    from workbench.core.inputs import decoder_dims

    style, positions, path = decoder
    d = decoder_dims(str(path))
    assert d is not None and d.ids.name == "input_ids"
    assert len(d.cache) == 4 and {a for _, a in d.cache} == {2}  # 2 layers x key/value
    assert [(s.name, a) for s, a in d.total] == [("attention_mask", 1)]
    assert [s.name for s in d.positions] == (["position_ids"] if positions else [])


def test_random_inputs_fit_together_and_run(decoder):
    from workbench.runtime.equivalence import make_inputs
    from workbench.core.model import open_model

    style, positions, path = decoder
    feed = make_inputs(open_model(path).proto, seed=3)
    new = feed["input_ids"].shape[1]
    caches = [v for k, v in feed.items() if v.ndim == 4]
    past = caches[0].shape[2]
    assert all(c.shape[2] == past for c in caches)
    assert feed["attention_mask"].shape == (feed["input_ids"].shape[0], past + new)
    assert (feed["attention_mask"] == 1).all()
    if positions:
        assert (feed["position_ids"] == np.arange(past, past + new)).all()
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    out = sess.run(None, feed)
    assert out[0].shape[:2] == feed["input_ids"].shape
    assert out[1].shape[2] == past + new  # present = past + new


def test_compare_allow_random_runs(decoder):
    style, positions, path = decoder
    r = subprocess.run(["workbench", "compare", str(path), "--to", "fp16", "--allow-random"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "fp16: within budget" in r.stdout


def test_default_and_serving_profiles_relate_the_dims(decoder):
    """The default profile sizes the mask as cache + new tokens (a cache only the graph's
    Concat reveals included), and the prefill / decode profiles follow."""
    from workbench.precision.profiles import default_profile, serving_profiles

    style, positions, path = decoder
    prof, _ = default_profile(str(path))
    cache = next(n for n in prof if n not in ("input_ids", "attention_mask", "position_ids"))
    for i in range(3):
        assert prof["attention_mask"][i][1] == prof["input_ids"][i][1] + prof[cache][i][2]
    assert prof[cache][0][2] == 0  # decode starts from an empty cache
    pre, dec = serving_profiles(str(path), prof)
    assert pre[cache][2][2] == 0 and dec["input_ids"][2][1] == 1
    assert dec["attention_mask"][2][1] == dec[cache][2][2] + 1


def test_inputs_at_a_prefill_shape_keep_positions_in_the_table(tmp_path):
    """Inputs at a profile's prefill max (an empty cache, as many tokens as the position
    table has rows): the caches not named follow the one given, the positions stay inside the
    table (0 .. rows-1) and the model runs."""
    from workbench.runtime.equivalence import make_inputs_at
    from workbench.core.model import open_model

    path = make_decoder(tmp_path, "optimum", True)
    rows = 128  # tiny_decoder_config().max_pos
    feed = make_inputs_at(open_model(path).proto, {
        "input_ids": [1, rows], "attention_mask": [1, rows], "position_ids": [1, rows],
        "past_key_values.0.key": [1, 2, 0, 16]})
    assert feed["position_ids"].min() == 0 and feed["position_ids"].max() == rows - 1
    assert all(v.shape == (1, 2, 0, 16) for k, v in feed.items() if k.startswith("past_"))
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert sess.run(None, feed)[0].shape == (1, rows, 256)


def test_random_calibration_sizes_the_decoder_together(decoder):
    """`precision --allow-random`'s batches: the mask is past + new, positions count on."""
    from workbench.precision.calibration import random_calibration

    style, positions, path = decoder
    batches, warn = random_calibration(str(path), 2)
    b = batches[0]
    new = b["input_ids"].shape[1]
    past = next(v for v in b.values() if v.ndim == 4).shape[2]
    assert b["attention_mask"].shape[1] == past + new
    if positions:
        assert (b["position_ids"] == np.arange(past, past + new)).all()
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert sess.run(None, b)[0].shape[1] == new
