"""The CLI's first look at a model file names which varint of the protobuf wire format is cut
off: the field tag, a number's value or a length (workbench.cli.common._not_onnx)."""
import io

import pytest

from workbench.cli.common import _not_onnx


@pytest.mark.parametrize("data, problem", [
    (b"\xff", "a field tag is cut off or malformed"),
    (b"\x08\xff", "a number is cut off or malformed"),                  # field 1, varint
    (b"\x12\xff\xff", "a length is cut off or malformed"),              # field 2, bytes
    (b"\x08" + b"\xff" * 11, "a number is cut off or malformed"),       # longer than 10 bytes
])
def test_a_cut_off_varint_is_named(data, problem):
    assert _not_onnx(io.BytesIO(data), len(data)) == (problem, False)


def test_a_whole_model_header_is_not_refused():
    data = b"\x08\x07\x3a\x00"  # ir_version 7, an empty graph (field 7)
    assert _not_onnx(io.BytesIO(data), len(data)) == (None, False)
