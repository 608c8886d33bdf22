"""A ResNet-50-sized CNN for the GPU matrix test, made with onnx.helper and numpy (no
downloads): the torchvision ResNet-50 topology (7x7 stem, bottleneck blocks 3-4-6-3 with
1x1/3x3/1x1 convolutions and projection shortcuts, global average pool, 1000-way Gemm),
batch norm folded into the convolutions, He-initialised weights from a fixed seed (~25.5 M
parameters, ~100 MB), input `input` float32 [batch, 3, 224, 224] (dynamic batch), output
`logits` [batch, 1000]."""
from __future__ import annotations

from pathlib import Path
from typing import List

import numpy as np


def resnet50_like(path: Path, seed: int = 0) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes: List = []
    inits: List = []
    count = [0]

    def conv(x: str, cin: int, cout: int, k: int, stride: int = 1, relu: bool = True,
             name: str = "") -> str:
        count[0] += 1
        n = name or f"/conv{count[0]}"
        w = (rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))
             ).astype(np.float32)
        b = np.zeros(cout, np.float32)
        inits.extend([numpy_helper.from_array(w, f"{n}.weight"),
                      numpy_helper.from_array(b, f"{n}.bias")])
        y = f"{n}/out"
        nodes.append(helper.make_node("Conv", [x, f"{n}.weight", f"{n}.bias"], [y],
                                      name=f"{n}/Conv", kernel_shape=[k, k],
                                      strides=[stride, stride], pads=[k // 2] * 4))
        if relu:
            nodes.append(helper.make_node("Relu", [y], [f"{n}/relu"], name=f"{n}/Relu"))
            return f"{n}/relu"
        return y

    x = conv("input", 3, 64, 7, 2, name="/stem")
    nodes.append(helper.make_node("MaxPool", [x], ["/stem/pool"], name="/stem/MaxPool",
                                  kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
    x, cin = "/stem/pool", 64
    for stage, (blocks, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512))):
        for b in range(blocks):
            stride = 2 if b == 0 and stage > 0 else 1
            pre = f"/layer{stage + 1}/{b}"
            y = conv(x, cin, width, 1, 1, name=f"{pre}/conv1")
            y = conv(y, width, width, 3, stride, name=f"{pre}/conv2")
            y = conv(y, width, width * 4, 1, 1, relu=False, name=f"{pre}/conv3")
            short = x if b > 0 else conv(x, cin, width * 4, 1, stride, relu=False,
                                         name=f"{pre}/downsample")
            nodes.append(helper.make_node("Add", [y, short], [f"{pre}/add"], name=f"{pre}/Add"))
            nodes.append(helper.make_node("Relu", [f"{pre}/add"], [f"{pre}/out"],
                                          name=f"{pre}/Relu"))
            x, cin = f"{pre}/out", width * 4
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["/pool"], name="/GlobalAveragePool"))
    nodes.append(helper.make_node("Flatten", ["/pool"], ["/flat"], name="/Flatten", axis=1))
    w = (rng.standard_normal((1000, 2048)) / np.sqrt(2048)).astype(np.float32)
    inits.extend([numpy_helper.from_array(w, "fc.weight"),
                  numpy_helper.from_array(np.zeros(1000, np.float32), "fc.bias")])
    nodes.append(helper.make_node("Gemm", ["/flat", "fc.weight", "fc.bias"], ["logits"],
                                  name="/fc/Gemm", transB=1))
    graph = helper.make_graph(
        nodes, "resnet50_like",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 224, 224])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1000])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="trt-workbench tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    path = Path(path)
    onnx.save(model, str(path))
    return path


def images(n: int, seed: int = 1) -> np.ndarray:
    """Smooth, ImageNet-normalised-looking inputs [n, 3, 224, 224] (not white noise)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:224, 0:224].astype(np.float32) / 224.0
    out = np.empty((n, 3, 224, 224), np.float32)
    for i in range(n):
        for c in range(3):
            a, b, f = rng.uniform(-1, 1, 3)
            out[i, c] = a * xx + b * yy + 0.5 * np.sin(6.28 * (f * 3 + 1) * (xx + yy))
    return out
