"""One model handle: every capability coerces what it is handed (path, Model, ModelProto) with
`workbench.core.model.as_model`, reads the structure without weights, and loads a model's weights
at most once. Loads are counted where they happen: onnx's reader of one external tensor (what
`onnx.load`, `load_external_data_for_model` and `Model.load_weights` all go through), by data
folder and tensor, so a capability that opens the file again with its weights is seen too."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from workbench.core.errors import WorkbenchError
from workbench.core.model import Model, as_model, open_model

ROOT = Path(__file__).resolve().parents[1]
MODEL_PARAMS = {"model", "reference", "candidate", "model_or_path"}


@pytest.fixture
def small(tmp_path: Path) -> Path:
    """A small MatMul-Add-Relu model whose weights live in an external-data file."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 32)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
         helper.make_node("Add", ["m", "b"], ["a"], name="add"),
         helper.make_node("Relu", ["a"], ["y"], name="relu")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 32])], [w, b])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    p = tmp_path / "small.onnx"
    onnx.save(m, str(p), save_as_external_data=True, all_tensors_to_one_file=True,
              location="small.onnx_data", size_threshold=0)
    return p


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list:
    """Every external weight read into memory, as 'FOLDER/small.onnx:TENSOR'."""
    from onnx import external_data_helper

    calls: list = []
    real = external_data_helper.load_external_data_for_tensor

    def counted(tensor: onnx.TensorProto, base_dir: str) -> None:
        calls.append(f"{Path(base_dir).resolve() / 'small.onnx'}:{tensor.name}")
        real(tensor, base_dir)

    monkeypatch.setattr(external_data_helper, "load_external_data_for_tensor", counted)
    return calls


def test_as_model_takes_a_path_a_model_or_a_proto(small: Path) -> None:
    m = as_model(small)
    assert isinstance(m, Model) and m.path == small and m.external_files
    assert as_model(m) is m
    assert as_model(str(small)).path == small
    inline = as_model(onnx.load(str(small)))
    assert inline.path is None and len(inline.graph.initializer) == 2
    with pytest.raises(WorkbenchError, match="cannot use a int as a model"):
        as_model(3)


def test_with_weights_loads_once_per_model(small: Path, loads: list) -> None:
    m = open_model(small)
    a, b = m.with_weights(), m.with_weights()
    assert a is b and sorted(loads) == [f"{small.resolve()}:b", f"{small.resolve()}:w"]
    assert numpy_helper.to_array(a.graph.initializer[0]).shape == (16, 32)
    assert m.proto.graph.initializer[0].data_location == TensorProto.EXTERNAL  # untouched


def _capabilities(tmp_path: Path, other: Path):
    """(name, call) for each capability run on a model as handed (compare: against `other`,
    a copy in another folder, so each of the two models is counted on its own)."""
    from workbench.engines.stages.prepare import transformed_onnx
    from workbench.engines.spec import BuildConfig
    from workbench.compare import find_exclusions, layerwise
    from workbench.compare.bisect import onnx_evaluator
    from workbench.compare.engine_compare import (compare_tensors, engine_layerwise,
                                                  onnx_candidate)
    from workbench.graphs.inspect import inspect_model
    from workbench.precision.profiles import default_profile
    from workbench.precision.transform import convert
    from workbench.support.checker import check
    from workbench.surgery.session import auto_fix

    feeds = [{"x": np.linspace(-1, 1, 32, dtype=np.float32).reshape(2, 16)}]

    def prepare(m: object) -> None:  # what a build hands TensorRT: the FP16 transform
        ref = as_model(m, opened=False)  # type: ignore[arg-type]
        transformed_onnx(ref, BuildConfig(precision="fp16"), ref.workspace(), None)

    return [
        ("inspect", lambda m: inspect_model(m)),
        ("check", lambda m: check(m, backend="static")),
        ("precision", lambda m: convert(m, "fp16", measure=False)),
        ("precision measured", lambda m: convert(m, "fp16", measure=True)),
        ("compare", lambda m: layerwise(m, other, allow_random=True, stream_weights_mb=1e6)),
        ("engine compare", lambda m: engine_layerwise(
            m, onnx_candidate(other), feeds, tensors=compare_tensors(m))),
        ("build prepare", prepare),
        ("search", lambda m: find_exclusions(m, "fp16", allow_random=True,
                                             stream_weights_mb=1e6)),
        ("bisect", lambda m: onnx_evaluator(m, feeds)([])),
        ("fix", lambda m: auto_fix(m, backend="static")),
        ("profiles", lambda m: default_profile(m)),
    ]


@pytest.mark.parametrize("handed", ["path", "model"])
def test_no_capability_loads_the_weights_of_its_model_twice(small: Path, tmp_path: Path,
                                                             loads: list, handed: str) -> None:
    import shutil
    from collections import Counter

    (tmp_path / "other").mkdir()
    for f in (small, small.with_name("small.onnx_data")):
        shutil.copy(f, tmp_path / "other" / f.name)
    seen = set()
    for name, call in _capabilities(tmp_path, tmp_path / "other" / "small.onnx"):
        loads.clear()
        call(small if handed == "path" else open_model(small))
        most = Counter(loads).most_common(1)
        assert not most or most[0][1] == 1, f"{name} loaded {most[0][0]} {most[0][1]} times"
        seen.update(name for name in loads)
    # (the count is live: precision and compare read the weights)
    assert f"{small.resolve()}:w" in seen


def _public_model_any(path: Path) -> list:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                and not node.name.startswith("_"):
            a = node.args
            for arg in a.posonlyargs + a.args + a.kwonlyargs:
                if arg.arg in MODEL_PARAMS and isinstance(arg.annotation, ast.Name) \
                        and arg.annotation.id == "Any":
                    found.append(f"{path.name}:{node.lineno} {node.name}({arg.arg})")
    return found


def test_no_public_function_takes_a_model_typed_any() -> None:
    files = sorted((ROOT / "workbench").rglob("*.py")) + sorted((ROOT / "widgets").rglob("*.py"))
    assert len(files) > 50
    bad = [hit for f in files for hit in _public_model_any(f)]
    assert not bad, "type these ModelLike (workbench.core.model): " + "; ".join(bad)


def test_the_scan_sees_a_model_typed_any(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("from typing import Any\ndef run(model: Any) -> None: ...\n"
                     "def _private(model: Any) -> None: ...\n"
                     "def typed(model: 'ModelLike', other: Any) -> None: ...\n")
    assert _public_model_any(probe) == ["probe.py:2 run(model)"]


def test_an_unopened_handle_hashes_without_parsing_and_opens_on_use(small: Path,
                                                                    tmp_path: Path) -> None:
    import hashlib

    inline = tmp_path / "inline.onnx"
    onnx.save(onnx.load(str(small)), str(inline))  # weights embedded: no 'location' key
    m = as_model(inline, opened=False)
    assert not m.opened and m.path == inline.resolve()
    assert m.content_hash == hashlib.sha256(inline.read_bytes()).hexdigest()
    assert not m.opened  # a self-contained file is hashed as bytes, never parsed
    assert [n.op_type for n in m.graph.node] == ["MatMul", "Add", "Relu"] and m.opened
    assert m.content_hash == open_model(inline).content_hash
    with pytest.raises(WorkbenchError, match="file not found"):
        as_model(tmp_path / "nope.onnx", opened=False)


def test_the_hash_covers_external_data_and_is_memoised_by_stat(small: Path) -> None:
    from workbench.core import contenthash

    m = as_model(small, opened=False)
    h = m.content_hash
    assert m.opened  # ('location' in the file: the handle reads which data files it uses)
    assert contenthash.memo_lookup(small) == h == open_model(small).content_hash
    data = small.with_name("small.onnx_data")
    raw = bytearray(data.read_bytes())
    raw[0] ^= 1
    data.write_bytes(bytes(raw))
    assert contenthash.memo_lookup(small) is None  # its data file changed: hashed again
    assert open_model(small).content_hash != h


def test_the_handle_knows_where_each_weight_lies(small: Path) -> None:
    from workbench.core import weights

    m = open_model(small)
    locs = m.weight_locations
    assert set(locs) == {"w", "b"} and m.external_bytes == (16 * 32 + 32) * 4
    w = locs["w"]
    assert Path(w.file) == small.with_name("small.onnx_data").resolve() and w.dims == (16, 32)
    np.testing.assert_array_equal(
        w.array(), numpy_helper.to_array(onnx.load(str(small)).graph.initializer[0]))
    ref = weights.by_reference(m, inline_bytes=1024)  # 'b' (128 B) read in, 'w' referenced
    assert weights.weight_refs(ref) == {"w": w}
    assert ref.graph.initializer[1].raw_data and m.proto.graph.initializer[1].data_location \
        == TensorProto.EXTERNAL  # the handle's structure is untouched


def test_an_unopened_handle_keys_the_build_cache_and_its_workspace(small: Path) -> None:
    ref = as_model(str(small), opened=False)
    assert ref.path == small.resolve() and ref.content_hash == open_model(small).content_hash
    assert ref.workspace().dir.name == ref.content_hash[:16]
