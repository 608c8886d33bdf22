"""An op newer than the parser: TensorRT 8.6's ONNX parser has no Gelu importer (opset 20), so
its fallback importer looks for a plugin named Gelu and fails with 'Assertion failed: creator
&& "Plugin not found, ..."' from `importFallbackPluginImporter`, naming the node by index only.
`check` showed that raw assertion as a generic unsupported-node; it now says the parser has no
importer for the op and what to do (fix --auto's decomposition is still proposed).

Plumbing only: the client answers with the record the TensorRT worker builds from 8.6's
IParserError (node index, empty op, code, message, func); the GPU machine was not lent this
session to re-run it on 8.6 itself."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T, helper as h, numpy_helper as nh

from workbench.support import codes
from workbench.support.checker import check
from workbench.surgery.propose import advise


class _Parser86:
    """What the worker answers for TensorRT 8.6 on a model whose first Gelu it cannot import."""

    python = "trt86-record"

    def call(self, op, args=None, timeout=None, **kw):
        assert op == "parse", op
        m = onnx.load(args["path"], load_external_data=False)
        errs = [{"node": "", "node_index": i, "op": "", "code": "UNSUPPORTED_NODE",
                 "message": 'Assertion failed: creator && "Plugin not found, are the plugin '
                            'name, version, and namespace correct?"',
                 "local_function_stack": [], "file": "builtinOpImporters.cpp",
                 "func": "importFallbackPluginImporter", "line": 5447, "node_name_api": False}
                for i, n in enumerate(m.graph.node) if n.op_type == "Gelu"][:1]
        return {"backend": "tensorrt", "module": "tensorrt", "version": "8.6.0", "plugins": [],
                "results": [{"path": args["path"], "parsed": not errs, "errors": errs,
                             "num_layers": 2, "partition": None, "log": [], "seconds": 0.01}]}

    def close(self):
        pass


def _gelu_model(path):
    w = nh.from_array(np.eye(16, dtype=np.float32), "w")
    g = h.make_graph([h.make_node("MatMul", ["x", "w"], ["mm"], name="/fc/MatMul"),
                      h.make_node("Gelu", ["mm"], ["y"], name="/act/Gelu")], "gelu",
                     [h.make_tensor_value_info("x", T.FLOAT, [1, 16])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 16])], initializer=[w])
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 20)]), str(path))
    return path


def test_an_op_newer_than_the_parser_is_named_as_such(tmp_path):
    path = _gelu_model(tmp_path / "gelu.onnx")
    rep = check(path, backend="tensorrt", client=_Parser86())
    assert not rep.supported
    (f,) = [p for p in rep.problems if p.nodes == ["/act/Gelu"]]
    assert f.code == codes.UNSUPPORTED_OP
    assert "no importer for op 'Gelu'" in f.message and "Assertion failed" not in f.message
    assert "newer TensorRT" in f.hint and "workbench" not in f.hint
    (auto,) = f.next_steps  # the rewrite, with the -o fix requires
    assert (auto.verb, auto.args) == ("fix", (str(path),))
    assert dict(auto.flags) == {"-o": str(path).replace(".onnx", ".fixed.onnx"), "--auto": None}
    # the decomposition is still the next step put first for it
    (f,) = [p for p in advise(rep, path).problems if p.nodes == ["/act/Gelu"]]
    assert dict(f.next_steps[0].flags)["--recipe"] == "decompose:node=/act/Gelu"
    assert f.next_steps[-1] == auto
