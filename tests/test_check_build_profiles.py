"""`check --build` builds dynamic inputs at the profile `workbench build` defaults to: at 1 a
U-Net's skip Concat (a stride-2 Conv, then Resize x2, beside the input) fails (1 vs 2), and a
model `build` takes was called NOT SUPPORTED with a split as the next step."""
from __future__ import annotations

import subprocess

import numpy as np
import onnx
from onnx import TensorProto as T, helper as h, numpy_helper as nh

from workbench.support.checker import check


def _unet(path):
    vi = h.make_tensor_value_info
    w = nh.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [h.make_node("Conv", ["image", "w"], ["down"], strides=[2, 2], pads=[1, 1, 1, 1],
                         name="/down/Conv"),
             h.make_node("Resize", ["down", "", "scales"], ["up"], mode="nearest", name="/up/Resize"),
             h.make_node("Concat", ["up", "image"], ["mask"], axis=1, name="/skip/Concat")]
    g = h.make_graph(nodes, "unet", [vi("image", T.FLOAT, ["N", 3, "H", "W"])],
                     [vi("mask", T.FLOAT, ["N", 7, "H", "W"])],
                     [w, nh.from_array(np.array([1, 1, 2, 2], np.float32), "scales")])
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), str(path))


def test_check_build_uses_builds_default_profile_not_ones(tmp_path):
    """The CLI's build check (the API takes the profile it is given)."""
    path = tmp_path / "unet.onnx"
    _unet(path)
    r = subprocess.run(["workbench", "check", str(path), "--build"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and "SUPPORTED: every node parsed and the engine built" in r.stdout
    assert "dynamic input 'image' built at the profile `workbench build` defaults to " \
        "(--profile image:1x3x224x224:" in r.stdout
    # the same through the API with that profile; at 1x1 it does fail
    from workbench.core.model import open_model
    from workbench.precision.profiles import default_profile

    prof = default_profile(open_model(path))[0].to_dict()
    assert check(str(path), backend="tensorrt-rtx", build=True, profiles=prof).supported
    ones = check(str(path), backend="tensorrt-rtx", build=True,
                 profiles={"image": [[1, 3, 1, 1], [1, 3, 1, 1], [1, 3, 1, 1]]})
    assert not ones.supported and ones.unsupported[0]["node"] == "/skip/Concat"
