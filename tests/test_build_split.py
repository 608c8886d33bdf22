"""First-try build with a refused tail: `build_engine` / `workbench build` on a model whose
NonZero post-processing TensorRT-RTX's parser refuses builds the prefix as a real RTX engine
and writes the ONNX tail + chain manifest beside it; the chain equals the original on
onnxruntime. Refusals that are no cuttable tail stay errors; --no-split makes every one an error."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper as h

from conftest import REPO
from quant_models import detector
from workbench.engines.engine import BuildConfig, BuildFailed, build_engine
from workbench.runtime.chain import ChainedRunner, read_manifest
from workbench.runtime.runners import OnnxRuntimeRunner
from workbench.support.checker import check

CFG = BuildConfig(precision="fp16", target="sm89", builder_optimization_level=0)


def _feeds(n=6):
    rng = np.random.default_rng(11)
    return [{"images": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)} for _ in range(n)]


def _equal(a, b):
    assert set(a) == set(b)
    for k in a:
        assert a[k].shape == b[k].shape and a[k].dtype == b[k].dtype, k
        assert np.array_equal(a[k], b[k]), k


@pytest.fixture()
def det_path(tmp_path):
    p = tmp_path / "det.onnx"
    onnx.save(detector(), str(p))
    return p


def test_refused_tail_builds_first_try_and_chain_equals_original(det_path, tmp_path):
    assert not check(str(det_path), backend="tensorrt-rtx").supported
    events = []
    engine = tmp_path / "out" / "det.engine"
    res = build_engine(det_path, CFG, output=engine, on_event=events.append)
    assert res.backend == "tensorrt-rtx" and res.size_bytes > 0 and engine.is_file()
    s = res.split
    assert s["refused"] == [{"node": "/post/nonzero", "op": "NonZero"}]
    assert (s["engine_nodes"], s["onnxruntime_nodes"]) == (10, 4)
    assert s["verification"].startswith("equivalent")
    # (det.engine.onnx: the FP16 conversion of the prefix TensorRT built from, which the
    # trtexec / polygraphy lines read, as beside any converted build's engine)
    assert sorted(p.name for p in engine.parent.iterdir()) == [
        "det.engine", "det.engine.card.json", "det.engine.onnx", "det.prefix.onnx",
        "det.split.json", "det.tail.onnx"]
    man = read_manifest(s["manifest"])
    assert man["engine"] == "det.engine" and man["tail"]["file"] == "det.tail.onnx"
    assert man["prefix"]["file"] == "det.prefix.onnx"
    # the engine was built from the prefix file beside it, which RTX takes whole
    assert check(str(engine.parent / "det.prefix.onnx"), backend="tensorrt-rtx").supported
    assert "NonZero" not in {n.op_type for n in onnx.load(s["prefix"]).graph.node}
    # the one notice: refused node + op, node counts, how to run the pair, the opt-out flag
    notes = [e["message"] for e in events if e.get("event") == "notice"
             and e["finding"]["code"] == "split-build"]
    assert len(notes) == 1
    for part in ("NonZero at /post/nonzero", "engine runs 10 node(s)", "tail's 4",
                 "ChainedRunner.from_folder(", "--no-split"):
        assert part in notes[0], part
    assert res.findings[0].code == "split-build" and res.to_dict()["split"] == s
    chain = ChainedRunner.from_folder(s["manifest"])
    original = OnnxRuntimeRunner(str(det_path))
    counts = set()
    for feed in _feeds():
        want = original.infer(feed)
        _equal(want, chain.infer(feed))
        counts.add(want["kept_boxes"].shape[0])
    assert len(counts) > 1  # the selection really is data-dependent


def test_no_split_keeps_the_refusal_an_error_and_writes_nothing(det_path, tmp_path):
    engine = tmp_path / "det.engine"
    with pytest.raises(BuildFailed) as e:
        build_engine(det_path, CFG, output=engine, split_tail=False)
    assert e.value.node == "/post/nonzero" and e.value.op == "NonZero"
    assert not list(tmp_path.glob("det.*.onnx")) and not (tmp_path / "det.split.json").exists()


def test_refusal_that_is_no_tail_stays_an_error_naming_node_op_and_why(tmp_path):
    g = h.make_graph([h.make_node("NonZero", ["x"], ["y"], name="first")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [4])],
                     [h.make_tensor_value_info("y", T.INT64, [1, None])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    p = tmp_path / "nz.onnx"
    onnx.save(m, str(p))
    with pytest.raises(BuildFailed) as e:
        build_engine(p, CFG, output=tmp_path / "nz.engine")
    assert e.value.node == "first" and e.value.op == "NonZero"
    assert "no split build: nothing of the model is left" in e.value.hint
    assert any(f.code == "no-split" for f in e.value.findings)
    assert not (tmp_path / "nz.split.json").exists() and not (tmp_path / "nz.engine").exists()


def test_refusal_an_exact_recipe_fixes_stays_an_error(tmp_path):
    from conftest import SAMPLES

    with pytest.raises(BuildFailed) as e:
        build_engine(SAMPLES / "needs_fixing.onnx",
                     CFG.replace(profiles=[{"input": [[1, 4, 12, 12]] * 3}]),
                     output=tmp_path / "n.engine")
    assert e.value.code == "parse-failed" and e.value.node and e.value.op
    # the next step is a record naming the user's model and the -o that fix requires
    assert "no split build:" in e.value.hint and "workbench" not in e.value.hint
    first = e.value.next_steps[0]
    assert (first.verb, first.args) == ("fix", (str(SAMPLES / "needs_fixing.onnx"),))
    assert dict(first.flags) == {"-o": str(SAMPLES / "needs_fixing.fixed.onnx"), "--auto": None}
    assert not list(tmp_path.iterdir())


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "workbench.cli", *map(str, args)],
                          capture_output=True, text=True, cwd=REPO, timeout=300)


def test_cli_build_prints_the_notice_and_json_says_split(det_path, tmp_path):
    out = tmp_path / "e" / "det.engine"
    r = _cli("build", det_path, "-o", out, "--mkdir", "--target", "sm89", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["ok"] and d["split"]["onnxruntime_nodes"] == 4
    assert d["split"]["refused"][0] == {"node": "/post/nonzero", "op": "NonZero"}
    human = _cli("build", det_path, "-o", out, "--target", "sm89")
    assert human.returncode == 0, human.stderr
    assert "note: split build: tensorrt-rtx's parser refused 1 node(s): NonZero at " \
        "/post/nonzero" in human.stderr
    assert "--no-split" in human.stderr
    assert f"split build: engine 10 nodes + onnxruntime tail 4 nodes: " \
        f"{out.parent / 'det.tail.onnx'}" in human.stdout
    strict = _cli("build", det_path, "-o", tmp_path / "s.engine", "--target", "sm89",
                  "--no-split")
    assert strict.returncode == 1
    assert "build failed at node '/post/nonzero'" in strict.stderr and "NonZero" in strict.stderr
    # a later build of a supported model to the same engine leaves no stale chain beside it
    prefix = out.parent / "det.prefix.onnx"
    whole = tmp_path / "whole.onnx"
    whole.write_bytes(prefix.read_bytes())
    again = _cli("build", whole, "-o", out, "--target", "sm89", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["split"] is None
    assert not (out.parent / "det.split.json").exists()
    assert not (out.parent / "det.tail.onnx").exists()


def test_build_panel_shows_the_split_and_the_notice(det_path):
    from widgets import BuildPanel

    panel = BuildPanel(det_path, CFG)
    panel.start()
    res = panel.wait(180)
    assert panel.state == "done", panel.status.value
    assert res.split and res.split["onnxruntime_nodes"] == 4
    card = panel.engine_card.value
    assert "split build" in card and "NonZero" in card and "/post/nonzero" in card
    assert "onnxruntime tail 4 nodes" in card and "split_tail=False" in card
    assert "split build: tensorrt-rtx's parser refused 1 node(s)" in panel.log_view.value
    strict = BuildPanel(det_path, CFG, split_tail=False)
    strict.start()
    strict.wait(180)
    assert strict.state == "failed" and "/post/nonzero" in strict.status.value


def test_a_refusal_a_static_rule_explains_is_said_in_the_model_terms_first(tmp_path):
    """The real parser refuses qdq_conv's QuantizeLinear with an assertion that talks about
    DLA; the build error leads with what is wrong in the model (a non-zero zero point, its
    values) and keeps TensorRT's words after it, in the message and in the finding."""
    from conftest import POLY

    with pytest.raises(BuildFailed) as e:
        build_engine(POLY / "qdq_conv.onnx", CFG, output=tmp_path / "q.engine")
    lead = ("TensorRT could not parse the model at node 'onnx_graphsurgeon_node_1' "
            "(QuantizeLinear): QuantizeLinear has a non-zero zero point ([84, 24, 196])")
    assert e.value.message.startswith(lead), e.value.message
    assert "(TensorRT's parser: " in e.value.message and "shiftIsAllZeros" in e.value.message
    refused = [f for f in e.value.findings if f.code == "parse-error"]
    assert refused and refused[0].message.startswith(
        "TensorRT's parser refused QuantizeLinear: QuantizeLinear has a non-zero zero point")


def test_a_node_the_builder_has_no_kernel_for_is_split_off_too(tmp_path):
    """The parser takes NonMaxSuppression but TensorRT-RTX's builder has no runner for it
    ('/post/nms_... has no runners'): `check` says SUPPORTED, and the build used to fail
    with TensorRT's layer name and no split. It now names the ONNX node and splits there."""
    path = tmp_path / "nms.onnx"
    onnx.save(detector(nms=True), str(path))
    assert check(str(path), backend="tensorrt-rtx").supported  # the parser alone takes it
    with pytest.raises(BuildFailed) as e:
        build_engine(path, CFG, output=tmp_path / "strict.engine", split_tail=False)
    assert e.value.node == "/post/nms" and "has no runners" in e.value.message
    events = []
    res = build_engine(path, CFG, output=tmp_path / "nms.engine", on_event=events.append)
    s = res.split
    assert s["refused_by"] == "builder" and s["refused"][0]["node"] == "/post/nms"
    assert s["verification"].startswith("equivalent")
    note = next(ev["message"] for ev in events if ev.get("event") == "notice"
                and ev["finding"]["code"] == "split-build")
    assert "tensorrt-rtx's builder has no kernel for 1 node(s): NonMaxSuppression at " \
        "/post/nms" in note
    chain = ChainedRunner.from_folder(s["manifest"])
    feed = _feeds(1)[0]
    _equal(chain.infer(feed), OnnxRuntimeRunner(str(path)).infer(feed))
    from widgets.build import BuildPanel  # the panel says who refused it, as the notice does

    html = BuildPanel._split_html(res)
    assert "the builder has no kernel for 1 node(s)" in html and "parser refused" not in html
    # check --build finds it, and its next step splits by building
    rep = check(str(path), backend="tensorrt-rtx", build=True)
    assert not rep.supported and rep.unsupported[0]["node"] == "/post/nms"
    r = subprocess.run(["workbench", "check", str(path), "--build"],
                       capture_output=True, text=True, cwd=REPO, timeout=300)
    assert f"$ workbench fix {path} --split --build -o {str(path)[:-5]}_split" in r.stdout, r.stdout


def test_a_split_that_leaves_most_of_the_model_out_names_the_check_to_run():
    from workbench.engines.tail import split_notice

    info = {"refused": [{"node": "/a/If", "op": "If"}], "backend": "tensorrt-rtx",
            "engine_nodes": 3, "onnxruntime_nodes": 40, "tail": "/w/m.tail.onnx",
            "manifest": "/w/m.split.json", "prefix": "/w/m.prefix.onnx", "verification": "equal",
            "run": "ChainedRunner...", "model": "/w/my\\ model.onnx"}
    note = split_notice(info)
    assert "MOST OF THE MODEL IS NOT IN THE ENGINE (40 of 43 nodes" in note
    assert "`workbench check /w/my\\ model.onnx` says how" in note
    assert "MODEL`" not in note


def test_an_engine_over_its_own_model_is_refused_before_building(tmp_path):
    """`build m.onnx -o m.onnx` built, printed '100.0% done: m.onnx ready', then refused to
    write: refused at once, the model untouched."""
    from conftest import SAMPLES

    m = tmp_path / "m.onnx"
    m.write_bytes((SAMPLES / "resnet_tiny.onnx").read_bytes())
    before = m.read_bytes()
    r = _cli("build", m, "-o", m, "--target", "sm89")
    assert r.returncode == 2, r.stderr
    assert "refusing to write the engine over the model" in r.stderr
    assert "ready" not in r.stdout + r.stderr and "done" not in r.stdout + r.stderr
    assert m.read_bytes() == before


def test_constants_the_tail_reads_go_with_the_tail_not_through_the_engine(tmp_path):
    """A torch export feeds NonMaxSuppression its max boxes and thresholds from Constant
    nodes: the split made them engine outputs (`onnx::NonMaxSuppression_171..173`). They are
    copied into the tail; the pair still computes the original."""
    from onnx import numpy_helper as nh

    from workbench.surgery.split import cut_model, tail_of

    def const(name, v, dt):
        return h.make_node("Constant", [], [name], name=f"/{name}",
                           value=nh.from_array(np.array(v, dt), name))

    nodes = [h.make_node("Sigmoid", ["logits"], ["s"], name="/sig"),
             h.make_node("Unsqueeze", ["boxes", "ax0"], ["b3"], name="/b3"),
             h.make_node("Unsqueeze", ["s", "ax01"], ["s3"], name="/s3"),
             const("onnx::max_out", [2], np.int64), const("onnx::iou", [0.5], np.float32),
             const("onnx::score", [0.1], np.float32),
             h.make_node("NonMaxSuppression", ["b3", "s3", "onnx::max_out", "onnx::iou",
                                               "onnx::score"], ["sel"], name="/nms")]
    inits = [nh.from_array(np.array([0], np.int64), "ax0"),
             nh.from_array(np.array([0, 1], np.int64), "ax01")]
    g = h.make_graph(nodes, "det", [h.make_tensor_value_info("boxes", T.FLOAT, [4, 4]),
                                    h.make_tensor_value_info("logits", T.FLOAT, [4])],
                     [h.make_tensor_value_info("sel", T.INT64, [None, 3])], initializer=inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    prefix, tail, man = cut_model(m, tail_of(m, [6]), "det")
    assert not any(o.name.startswith("onnx::") for o in prefix.graph.output), man
    assert man["cut"] == ["b3", "s3"] and len(man["tail"]["constants"]) == 3
    assert [n.op_type for n in tail.graph.node].count("Constant") == 3
    assert "Constant" not in [n.op_type for n in prefix.graph.node]  # (no reader left there)
    feed = {"boxes": np.array([[0, 0, 1, 1], [0, 0, 1, 1.1], [2, 2, 3, 3], [5, 5, 6, 6]],
                              np.float32), "logits": np.array([2, 1, 0.5, -3], np.float32)}
    mid = OnnxRuntimeRunner(prefix).infer(feed)
    got = OnnxRuntimeRunner(tail).infer({k: mid[k] for k in man["tail"]["inputs"]})
    np.testing.assert_array_equal(got["sel"], OnnxRuntimeRunner(m).infer(feed)["sel"])


def test_a_converted_split_build_names_the_onnx_beside_the_engine(det_path, tmp_path):
    """An FP16 split build's trtexec line read the workspace's conversion
    (~/.trt-workbench/models/.../versions/<hash>.onnx) where unsplit builds copy it beside the
    engine: it is copied beside this one too, and the lines name the copy."""
    out = tmp_path / "e" / "det.engine"
    res = build_engine(det_path, CFG, output=out)  # (CFG: FP16)
    assert res.split
    beside = out.with_name("det.engine.onnx")
    assert beside.is_file()
    assert f"--onnx={beside}" in res.export["trtexec"], res.export["trtexec"]
    onnx.checker.check_model(str(beside))


def test_the_nms_plugin_option_is_not_offered_where_the_backend_ships_no_plugins(tmp_path):
    """The split of a detector on TensorRT-RTX suggested `--recipe efficient_nms` (TensorRT's
    EfficientNMS_TRT plugin): TensorRT-RTX ships no TensorRT plugins, and the build of the
    rewritten model failed with no split possible. The option is said as TensorRT's."""
    path = tmp_path / "nms.onnx"
    onnx.save(detector(nms=True), str(path))
    r = _cli("fix", path, "--split", "--build", "-o", tmp_path / "fold")
    assert r.returncode == 0, r.stderr
    assert "option (not exact)" not in r.stdout
    assert "tensorrt-rtx ships no TensorRT plugins, so here it stays in the tail" in r.stdout
    man = read_manifest(tmp_path / "fold" / "split.json")
    assert man["options"] and all(o["backend_has_plugin"] is False for o in man["options"])


def test_compare_finds_the_split_beside_an_engine(det_path, tmp_path):
    """`compare MODEL SPLIT.engine` said "output 'logits' is missing from the candidate (the
    engine must have the model's outputs)": the engine is the prefix; compare now finds the
    split beside it, compares the engine's layers with the prefix ONNX and the model's outputs
    through the chain. (Running the engine needs a GPU: here the files it reads, and the
    verb's one-line error on a CPU machine.)"""
    from workbench.cli.cmd_compare import _split_of

    engine = tmp_path / "det.engine"
    build_engine(det_path, CFG, output=engine)
    split = _split_of(str(engine))
    assert split is not None and split["prefix"] == tmp_path / "det.prefix.onnx"
    assert split["tail"] == tmp_path / "det.tail.onnx" and split["manifest"]["engine"] == \
        "det.engine"
    assert _split_of(str(tmp_path / "other.engine")) is None
    whole = tmp_path / "whole.engine"
    build_engine(REPO / "sample_models" / "resnet_tiny.onnx", CFG.replace(
        profiles=[{"input": [[1, 3, 32, 32], [1, 3, 32, 32], [2, 3, 32, 32]]}]), output=whole)
    assert _split_of(str(whole)) is None
    data = tmp_path / "d.npz"
    np.savez(data, images=_feeds(1)[0]["images"])
    r = _cli("compare", str(det_path), str(engine), "--inputs", str(data))
    assert "is missing from the candidate" not in r.stdout + r.stderr
    if r.returncode == 2:  # (no GPU here: the worker says so in one line)
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_timing_capture_of_a_split_engine_takes_the_engines_inputs_only(det_path, tmp_path):
    """timing-capture of a split engine with the model's --shapes: 'no engine input named
    past_key_values.1.key' (the tail reads it). The shapes the engine does not take are left
    out before the worker sees them."""
    import json

    from workbench.measure.capture import _engine_inputs_only

    engine = tmp_path / "det.engine"
    build_engine(det_path, CFG, output=engine)
    man = json.loads((tmp_path / "det.split.json").read_text())
    man["prefix"]["inputs"] = ["images"]
    man["inputs"] = ["images", "extra"]
    (tmp_path / "det.split.json").write_text(json.dumps(man))
    shapes = {"images": [1, 3, 8, 8], "extra": [4]}
    assert _engine_inputs_only(engine, shapes) == {"images": [1, 3, 8, 8]}
    assert _engine_inputs_only(tmp_path / "other.engine", shapes) == shapes
