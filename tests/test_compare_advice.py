"""The advice a candidate compare gives builds on the candidate: it keeps the exclusions the
candidate was made with (recorded in its metadata by `workbench precision`), and a culprit
that already computes in FP32 there is not advised again: the advice names where its input
is rounded. Real onnxruntime runs, models made with onnx.helper."""
from __future__ import annotations

import subprocess

import numpy as np
import onnx
from onnx import TensorProto, helper

from workbench import compare
from workbench.precision.spec import recorded_spec
from workbench.precision.transform import convert


def _cli(*args):
    return subprocess.run(["workbench", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def _save(graph, path, opset=17):
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, str(path))
    return path


def sentinel_score(path):
    """score = Where(mask, x * w, Expand(-1e5)): two nodes hold a fill FP16 cannot (beyond
    65504); both must stay FP32 (int32_bool_inputs' masked score, with a fill close enough to
    the scores, |x * w| up to ~5e3, to be data: a -1e9 there is a mask of the output's own,
    which FP16's -inf still masks, `comparison.data_sentinel`)."""
    nodes = [
        helper.make_node("Constant", [], ["big"], name="big_c",
                         value=helper.make_tensor("v", TensorProto.FLOAT, [], [-1e5])),
        helper.make_node("Shape", ["x"], ["shp"], name="shape"),
        helper.make_node("Expand", ["big", "shp"], ["full"], name="fill"),
        helper.make_node("Mul", ["x", "w"], ["xw"], name="scale"),
        helper.make_node("Where", ["mask", "xw", "full"], ["score"], name="select"),
    ]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8]),
                     helper.make_tensor_value_info("mask", TensorProto.BOOL, [2, 8])],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor("w", TensorProto.FLOAT, [8], np.linspace(500, 1500, 8).tolist())])
    return _save(g, path)


def timestep_embedding(path):
    """y = Cos(Unsqueeze(t) * freq) with t up to 1000 (a diffusion timestep embedding): FP16
    rounds t itself (spacing 0.5 near 1000), so Cos is wrong even when it computes in FP32."""
    nodes = [
        helper.make_node("Unsqueeze", ["t", "axes"], ["tu"], name="unsq"),
        helper.make_node("Mul", ["tu", "freq"], ["arg"], name="mul"),
        helper.make_node("Cos", ["arg"], ["c"], name="cos"),
        helper.make_node("Mul", ["c", "gain"], ["y"], name="out"),
    ]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("t", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor("axes", TensorProto.INT64, [1], [1]),
         helper.make_tensor("freq", TensorProto.FLOAT, [1, 8],
                            np.geomspace(1.0, 0.01, 8).tolist()),
         helper.make_tensor("gain", TensorProto.FLOAT, [1, 8], [1.0] * 8)])
    return _save(g, path)


def test_precision_records_what_it_converted_with(tmp_path):
    model = sentinel_score(tmp_path / "s.onnx")
    data = tmp_path / "d.npz"
    rng = np.random.default_rng(0)
    np.savez(data, x=rng.standard_normal((2, 8)).astype(np.float32),
             mask=rng.random((2, 8)) > 0.5)
    out = tmp_path / "q.onnx"
    r = _cli("precision", model, "--to", "fp16", "--exclude", "fill", "--calib", data, "-o", out)
    assert r.returncode in (0, 1), r.stderr
    spec = recorded_spec(onnx.load(str(out)))
    assert spec is not None and spec.target == "fp16" and spec.exclude_nodes == ["fill"]
    assert spec.exclude_ops == [] and spec.calibration == str(data)
    mm = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor("w", TensorProto.FLOAT, [8, 8], rng.standard_normal(64).tolist())])
    xs = {"x": rng.standard_normal((4, 8)).astype(np.float32)}
    q = convert(str(_save(mm, tmp_path / "mm.onnx")), "int8", calibration=[xs],
                calibrate_method="minmax")
    assert recorded_spec(q.proto).calibrate_method == "minmax"
    assert recorded_spec(q.proto).target == "int8"


def test_candidate_advice_keeps_the_candidates_exclusions(tmp_path):
    """Following `--exclude fill` gave 'score ... inf' and advice of `--exclude select` alone,
    which dropped `fill`: the advice now carries both, and says so; following it works."""
    model = sentinel_score(tmp_path / "s.onnx")
    data = tmp_path / "d.npz"
    rng = np.random.default_rng(0)
    np.savez(data, x=rng.standard_normal((2, 8)).astype(np.float32),
             mask=rng.random((2, 8)) > 0.5)
    first = tmp_path / "ex1.onnx"
    assert _cli("precision", model, "--to", "fp16", "--exclude", "fill", "--calib", data,
                "-o", first).returncode in (0, 1)
    r = _cli("compare", model, first, "--inputs", data)
    assert r.returncode == 1, r.stdout + r.stderr
    (line,) = [x for x in r.stdout.splitlines() if x.startswith("ERROR precision-loss")]
    assert "[select]" in line and "it was made with --exclude fill" in line
    cmd = line.split("`")[1]
    assert "--exclude fill --exclude select" in cmd
    argv = cmd.split()[1:]
    argv[argv.index("OUT.onnx")] = str(tmp_path / "ex2.onnx")
    assert _cli(*argv).returncode == 0
    again = compare.layerwise(model, tmp_path / "ex2.onnx", calibration=str(data))
    assert again.outputs_pass and all(t.finite for t in again.outputs)
    assert again.made_with.exclude_nodes == ["fill", "select"]


def test_a_culprit_already_in_fp32_names_where_its_input_is_rounded(tmp_path):
    """Kept in FP32, Cos still 'adds relative error ... --exclude cos': the timestep is cast
    to FP16 at the Unsqueeze, upstream of the kept nodes. The advice names the Unsqueeze."""
    model = timestep_embedding(tmp_path / "t.onnx")
    feeds = [{"t": np.array([999.75, 731.25, 500.5, 17.25], np.float32)}]
    kept = convert(str(model), "fp16", exclude_nodes=["cos", "mul"], measure=False).proto
    rep = compare.layerwise(model, kept, feeds)
    assert not rep.outputs_pass
    (cos,) = [t for t in rep.culprits() if t.node == "cos"]
    assert rep.already_fp32(cos) and rep.to_exclude(cos) == ["unsq"]
    (f,) = [f for f in rep.findings if f.code == "precision-loss" and f.nodes[0] == "cos"]
    assert "already computes in FP32" in f.message and "rounded to FP16 at unsq" in f.message
    assert "--exclude cos --exclude mul --exclude unsq" in f.hint
    # the advice works: with the Unsqueeze kept too, nothing on the path is rounded
    fixed = convert(str(model), "fp16", exclude_nodes=["cos", "mul", "unsq"],
                    measure=False).proto
    after = compare.layerwise(model, fixed, feeds)
    assert after.outputs_pass and not after.culprits()
    c = next(t for t in after.tensors if t.tensor == "c")
    assert c.max_abs < 1e-3 < next(t for t in rep.tensors if t.tensor == "c").max_abs


def test_a_node_the_fp16_candidate_computes_in_fp16_is_advised_as_before(tmp_path):
    """No recorded exclusions, a culprit in FP16: its own exclusion, no 'already' wording."""
    model = timestep_embedding(tmp_path / "t.onnx")
    feeds = [{"t": np.array([999.75, 731.25, 500.5, 17.25], np.float32)}]
    plain = convert(str(model), "fp16", measure=False).proto
    del plain.metadata_props[:]  # a candidate made elsewhere records nothing
    rep = compare.layerwise(model, plain, feeds)
    assert rep.made_with is None
    f = [f for f in rep.findings if f.code == "precision-loss"]
    assert f and all("already" not in x.message for x in f)
    assert all("candidate already keeps" not in x.hint for x in f)
    assert any(x.nodes[0] in ("cos", "mul") and f"--exclude {x.nodes[0]} --calib" in x.hint
               for x in f)


def mlp(path):
    """x [N, 32] -> MatMul -> Relu -> MatMul -> y [N, 10]: INT8 misses 1e-2 elementwise on a
    few elements but keeps the classes and the direction (cosine ~0.9999)."""
    rng = np.random.default_rng(0)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"], name="/fc1"),
         helper.make_node("Relu", ["h"], ["r"], name="/relu"),
         helper.make_node("MatMul", ["r", "w2"], ["y"], name="/fc2")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
        [helper.make_tensor("w1", TensorProto.FLOAT, [32, 32],
                            (rng.standard_normal(1024) / 6).tolist()),
         helper.make_tensor("w2", TensorProto.FLOAT, [32, 10],
                            (rng.standard_normal(320) / 6).tolist())])
    data = path.with_suffix(".npz")
    np.savez(data, x=(rng.standard_normal((16, 32)) * 2).astype(np.float32))
    return _save(g, path), data


def test_precision_and_compare_judge_a_quantized_output_alike(tmp_path):
    """`precision` and `compare` give one verdict: the INT8 output is within the default INT8
    budget (top-1, scale-relative error), so precision raises no accuracy-loss finding and
    says "within budget", compare says PASS with the same figures and the elementwise count
    beside it as a diagnostic (the panel's status too); explicit --atol/--rtol still ask for
    the elementwise rule and fail it."""
    import re

    model, data = mlp(tmp_path / "mlp.onnx")
    out = tmp_path / "mlp8.onnx"
    p = _cli("precision", model, "--to", "int8", "--calib", data, "-o", out)
    assert p.returncode == 0, p.stderr
    # within the INT8 budget by the verdict compare gives: no accuracy-loss finding, the
    # output's line says so with the verdict's words
    assert not [x for x in p.stdout.splitlines() if "accuracy-loss" in x], p.stdout
    (info,) = [x for x in p.stdout.splitlines() if "vs FP32 (onnxruntime CPU)" in x]
    assert "; within budget (" in info and "top-1 16/16" in info
    c = _cli("compare", model, out, "--inputs", data, "--samples", 16)
    assert c.returncode == 0, c.stdout  # within the INT8 budget by its kind's metric
    (line,) = [x for x in c.stdout.splitlines() if x.startswith("outputs:")]
    assert "PASS (" in line and "top-1 16/16" in line and "beyond atol/rtol" in line
    assert re.search(r"(\d+ of \d+) beyond atol/rtol", line)  # (the diagnostic, beside it)
    strict = _cli("compare", model, out, "--inputs", data, "--samples", 16, "--atol", "1e-2",
                  "--rtol", "1e-2")
    assert strict.returncode == 1 and "elementwise" in strict.stdout
    figs = re.search(r"max abs (\S+) rel (\S+) cos (\S+)", line).groups()
    assert f"max abs {figs[0]}, rel {figs[1]}, cosine {figs[2]}" in info

    from widgets import ComparePanel

    panel = ComparePanel(str(model), candidate=str(out), inputs=str(data))
    panel.run_compare()
    assert "outputs PASS" in panel.status.value and "beyond atol/rtol" in panel.status.value


def test_the_fp32_node_search_walks_up_to_where_the_input_is_rounded(tmp_path):
    """The search kept cos, mul, then the reader `out`, and stopped blaming nothing new: the
    rounding (the Cast before `unsq`) sat two nodes above cos. The panel's search now reaches
    it and meets the tolerance."""
    from widgets import ComparePanel

    model = timestep_embedding(tmp_path / "t.onnx")
    data = tmp_path / "t.npz"
    np.savez(data, t=np.array([999.75, 731.25, 500.5, 17.25], np.float32))
    panel = ComparePanel(str(model), target="fp16", inputs=str(data))
    search = panel.run_search()
    assert search.passed and search.excluded == ["cos", "mul", "unsq"]
    assert "within budget</b> (default per output kind, FP16 budgets) with 3 node(s) kept in " \
        "FP32" in panel.status.value
    assert panel.report.made_with.exclude_nodes == ["cos", "mul", "unsq"]
