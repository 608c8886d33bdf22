"""Small ONNX models that make onnxruntime slow or hungry on demand (containment tests, benchmark)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def slow_loop(size: int = 64) -> onnx.ModelProto:
    """y = tanh(y @ W) repeated `n` times (`n` an int64 input): as slow as the feed asks."""
    w = numpy_helper.from_array((np.eye(size, dtype=np.float32) * 0.5), "W")
    body = helper.make_graph(
        [helper.make_node("MatMul", ["v_in", "W"], ["mm"], name="body_mm"),
         helper.make_node("Tanh", ["mm"], ["v_out"], name="body_tanh"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond")],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [1, size])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [1, size])])
    nodes = [helper.make_node("Constant", [], ["true"], name="true",
                              value=helper.make_tensor("t", TensorProto.BOOL, [], [True])),
             helper.make_node("Relu", ["x"], ["x0"], name="first_relu"),
             helper.make_node("Loop", ["n", "true", "x0"], ["y0"], name="the_loop", body=body),
             helper.make_node("Relu", ["y0"], ["y"], name="last_relu")]
    g = helper.make_graph(nodes, "slow", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, size]),
        helper.make_tensor_value_info("n", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, size])], initializer=[w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def hungry() -> onnx.ModelProto:
    """sum(ones(n)) with `n` an int64 [1] input: allocates 4*n bytes on demand."""
    nodes = [helper.make_node("ConstantOfShape", ["n"], ["ones"], name="allocate",
                              value=helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])),
             helper.make_node("ReduceSum", ["ones"], ["total"], name="sum", keepdims=0)]
    g = helper.make_graph(nodes, "hungry", [helper.make_tensor_value_info("n", TensorProto.INT64, [1])],
                          [helper.make_tensor_value_info("total", TensorProto.FLOAT, [])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def slow_feed(n: int, size: int = 64) -> dict:
    return {"x": np.full((1, size), 0.1, np.float32), "n": np.array(n, np.int64)}


CRASH_DOMAIN = "workbench.test"


def crashy() -> onnx.ModelProto:
    """Relu -> workbench.test::Crash ('boom', segfaults in tests/data/ort_crash_op.c) -> Relu."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="first"),
             helper.make_node("Crash", ["a"], ["b"], name="boom", domain=CRASH_DOMAIN),
             helper.make_node("Relu", ["b"], ["y"], name="last")]
    g = helper.make_graph(nodes, "crashy", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                               helper.make_opsetid(CRASH_DOMAIN, 1)], ir_version=8)


def build_crash_library(folder) -> str:
    """Compile tests/data/ort_crash_op.c with the system's C compiler; the .so path (None: no cc)."""
    import shutil
    import subprocess
    from pathlib import Path

    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        return None
    src = Path(__file__).resolve().parent / "data" / "ort_crash_op.c"
    out = Path(folder) / "libworkbench_crash_op.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(out), str(src)], check=True,
                   capture_output=True, timeout=120)
    return str(out)


def slow_twin(iters: int = 1_000_000) -> onnx.ModelProto:
    """crashy()'s tensors (x -> a -> b -> y, the same node names) with a slow Loop (`iters`
    Tanh steps, about a second) where crashy segfaults: a healthy model to compare it with."""
    body = helper.make_graph(
        [helper.make_node("Tanh", ["v_in"], ["v_out"], name="body_tanh"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond")], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [2, 4])])
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="first"),
             helper.make_node("Loop", ["n", "true", "a"], ["b"], name="boom", body=body),
             helper.make_node("Relu", ["b"], ["y"], name="last")]
    g = helper.make_graph(nodes, "twin",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
                          initializer=[numpy_helper.from_array(np.array(iters, np.int64), "n"),
                                       numpy_helper.from_array(np.array(True), "true")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
