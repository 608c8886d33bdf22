"""Decompositions registered without a check of their own (the GELU forms) take the default:
a float32/float16 first input; an int32 input is refused, naming the node and why."""
import pytest
from onnx import TensorProto, helper

from workbench.core.model import model_from_proto
from workbench.surgery.recipes import get_recipe
from workbench.surgery.recipes.decompose import REGISTRY


def _model(op, dtype):
    x = helper.make_tensor_value_info("x", dtype, [2, 4])
    y = helper.make_tensor_value_info("y", dtype, [2, 4])
    node = helper.make_node(op, ["x"], ["y"], name="g", domain="com.microsoft")
    g = helper.make_graph([node], "m", [x], [y])
    return model_from_proto(helper.make_model(g, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]))


@pytest.mark.parametrize("op", ["FastGelu", "QuickGelu"])
def test_float_input_applies_and_int_input_is_refused(op):
    assert REGISTRY[("com.microsoft", op)].check.__name__ == "_float_input"
    pre = get_recipe("decompose").precondition(_model(op, TensorProto.FLOAT), node="g")
    assert pre.applies, pre.reason
    pre = get_recipe("decompose").precondition(_model(op, TensorProto.INT32), node="g")
    assert not pre.applies
    assert "node g" in pre.reason and "is not float32/float16" in pre.reason


def test_scatter_add_rewrites_check_their_own_op():
    nd, el = REGISTRY[("", "ScatterND")], REGISTRY[("", "ScatterElements")]
    assert nd.build is el.build
    assert nd.check.keywords == {"kind": "ScatterND"} and el.check.keywords == {"kind": "ScatterElements"}
