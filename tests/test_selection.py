"""The selection-aware accuracy check (workbench.compare.selection) on real onnxruntime runs of
a small NonMaxSuppression detector: near-tied scores that swap under noise fail the strict
elementwise check and pass the selection-aware one; noise beyond the budget on the tensors
feeding the selection fails both; the row rule itself on hand-made rows."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T, helper as h, numpy_helper as nh

from workbench.compare.selection import judge_rows, selection_aware, selection_region

N = 6
# sigmoid scores ~ 0.9, 0.7, 0.50002, 0.5, 0.49999, 0.1: the third place is a near tie
LOGITS = np.log(np.array([0.9, 0.7, 0.50002, 0.5, 0.49999, 0.1]) /
                (1 - np.array([0.9, 0.7, 0.50002, 0.5, 0.49999, 0.1]))).astype(np.float32)
BOXES = np.array([[10 * i, 0, 10 * i + 5, 5] for i in range(N)], dtype=np.float32)  # apart


def _detector(score_noise=None, box_noise=None):
    """boxes/logits -> (optional noise, standing in for FP16's) -> NMS keeps 3 -> gathered rows.
    Outputs: the selected boxes and scores (after the selection) and `scores` (before it)."""
    nodes = [h.make_node("Sigmoid", ["logits"], ["s0"], name="sigmoid"),
             h.make_node("Mul", ["boxes_in", "one"], ["b0"], name="scale")]
    inits = [nh.from_array(np.array(1.0, np.float32), "one"),
             nh.from_array(np.array([3], np.int64), "max_out"),
             nh.from_array(np.array([0.5], np.float32), "iou"),
             nh.from_array(np.array([0, 1], np.int64), "ax01"),
             nh.from_array(np.array([0], np.int64), "ax0"),
             nh.from_array(np.array(2, np.int64), "col")]
    for src, dst, noise in (("s0", "scores", score_noise), ("b0", "boxes", box_noise)):
        if noise is None:
            nodes.append(h.make_node("Identity", [src], [dst], name=f"keep_{dst}"))
        else:
            inits.append(nh.from_array(np.asarray(noise, np.float32), f"noise_{dst}"))
            nodes.append(h.make_node("Add", [src, f"noise_{dst}"], [dst], name=f"noise_{dst}"))
    nodes += [
        h.make_node("Unsqueeze", ["boxes", "ax0"], ["boxes3"], name="b3"),
        h.make_node("Unsqueeze", ["scores", "ax01"], ["scores3"], name="s3"),
        h.make_node("NonMaxSuppression", ["boxes3", "scores3", "max_out", "iou"], ["sel"],
                    name="nms"),
        h.make_node("Gather", ["sel", "col"], ["idx"], axis=1, name="index"),
        h.make_node("Gather", ["boxes", "idx"], ["kept_boxes"], axis=0, name="gather_boxes"),
        h.make_node("Gather", ["scores", "idx"], ["kept_scores"], axis=0, name="gather_scores"),
    ]
    g = h.make_graph(nodes, "det", [h.make_tensor_value_info("boxes_in", T.FLOAT, [N, 4]),
                                    h.make_tensor_value_info("logits", T.FLOAT, [N])],
                     [h.make_tensor_value_info("kept_boxes", T.FLOAT, [None, 4]),
                      h.make_tensor_value_info("kept_scores", T.FLOAT, [None]),
                      h.make_tensor_value_info("scores", T.FLOAT, [N])], initializer=inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 9
    return m


FEED = {"boxes_in": BOXES, "logits": LOGITS}


def test_region_frontier_and_selected_outputs_come_from_the_graph():
    region, frontier, selected = selection_region(_detector())
    assert set(frontier) == {"boxes3", "scores3", "boxes", "scores"}
    assert selected == ["kept_boxes", "kept_scores"]
    assert len(region) == 4  # nms and the three gathers


def test_near_tied_swap_fails_strict_and_passes_selection_aware():
    noise = np.array([0, 0, -5e-5, 5e-5, 0, 0], np.float32)  # 1e-4 of the scale: in budget
    check = selection_aware(_detector(), _detector(score_noise=noise), FEED, tol=0.01)
    # the swap is real: onnxruntime picked box 3 instead of box 2
    assert check.strict_passed is False and check.strict_rel == pytest.approx(10 / 25)
    assert check.passed, check.to_dict()
    (g,) = check.groups
    assert (g.score, g.ref_rows, g.cand_rows, g.matched) == ("kept_scores", 3, 3, 2)
    assert g.unmatched_ref == pytest.approx([0.50002], abs=1e-6)
    assert g.unmatched_cand == pytest.approx([0.50005], abs=1e-6)
    assert check.frontier_rel == pytest.approx(5e-5 / 0.9, rel=0.05)
    assert check.plain["scores"] < 1e-4
    assert "1+1 swapped, 0 without a near-tied partner" in check.summary()


def test_identical_candidate_passes_both():
    check = selection_aware(_detector(), _detector(), FEED, tol=0.01)
    assert check.strict_passed and check.passed and check.strict_rel == 0
    assert check.groups[0].matched == 3


def test_noise_beyond_the_budget_feeding_the_selection_fails_both():
    noise = np.array([0, 0, -0.05, 0.05, 0, 0], np.float32)  # 5.5% of the scale
    check = selection_aware(_detector(), _detector(score_noise=noise), FEED, tol=0.01)
    assert not check.strict_passed and not check.passed
    assert check.frontier["scores"] == pytest.approx(0.05 / 0.9, rel=0.05)
    box = np.zeros((N, 4), np.float32)
    box[0] = 0.5  # selected boxes moved by 0.5 / 55: within no elementwise budget of 1e-3
    check = selection_aware(_detector(), _detector(box_noise=box), FEED, tol=1e-3)
    assert not check.passed and check.frontier["boxes"] > 1e-3


def test_a_model_without_selection_is_judged_elementwise():
    m = _detector()
    del m.graph.node[-4:]
    del m.graph.output[:2]
    noisy = _detector(score_noise=np.full(N, 1e-3, np.float32))
    del noisy.graph.node[-4:]
    del noisy.graph.output[:2]
    check = selection_aware(m, noisy, FEED, tol=0.01)
    assert check.selection_nodes == 0 and not check.groups and check.passed
    assert check.strict_rel == pytest.approx(1e-3 / 0.9, rel=0.05)
    assert "elementwise" in check.summary()
    assert not selection_aware(m, noisy, FEED, tol=1e-4).passed


def test_a_frontier_tensor_missing_from_the_candidate_cannot_pass():
    cand = _detector()
    for n in cand.graph.node:
        n.input[:] = ["boxes_x" if x == "boxes" else x for x in n.input]
        n.output[:] = ["boxes_x" if x == "boxes" else x for x in n.output]
    check = selection_aware(_detector(), cand, FEED, tol=0.01)
    assert not check.passed and check.missing == ["boxes"]
    assert "cannot judge" in check.reason


def _rows(scores, base=0):
    s = np.asarray(scores, np.float64)
    boxes = np.stack([np.arange(len(s)) + base] * 4, axis=1).astype(np.float32)
    return {"b": boxes, "s": s.astype(np.float32), "l": np.zeros(len(s), np.int64)}


def test_row_rule_partner_and_cut_off():
    ref = _rows([0.9, 0.5, 0.3])
    # the last row left at the cut-off (the lowest reference score): consistent
    cand = {k: v[:2] for k, v in ref.items()}
    g = judge_rows(ref, cand, ["b", "s", "l"], "s", 0.01)
    assert g.consistent and g.matched == 2 and g.unpaired == []
    # the best row lost, nothing near-tied took its place: not consistent
    cand = {k: v[1:] for k, v in ref.items()}
    g = judge_rows(ref, cand, ["b", "s", "l"], "s", 0.01)
    assert not g.consistent and g.unpaired == [pytest.approx(0.9)]
    # a row swapped for another box of a score 0.2 lower: no near-tied partner
    cand = _rows([0.9, 0.5, 0.3])
    cand["b"][1] += 100
    cand["s"][1] = 0.3
    g = judge_rows(ref, cand, ["b", "s", "l"], "s", 0.01)
    assert not g.consistent and len(g.unpaired) == 1
    # a label that changed on a row whose score and box match is a label flip (it was taken
    # for a swap with itself, its own score a near-tied partner): it fails the group
    cand = _rows([0.9, 0.5, 0.3])
    cand["l"][0] = 7
    g = judge_rows(ref, cand, ["b", "s", "l"], "s", 0.01)
    assert g.matched == 2 and g.label_flips == {"l": 1} and not g.consistent


def test_compare_cli_reports_both_verdicts(tmp_path):
    import subprocess
    import sys

    import onnx

    from conftest import REPO

    ref, cand, feed = tmp_path / "ref.onnx", tmp_path / "cand.onnx", tmp_path / "feed.npz"
    onnx.save(_detector(), str(ref))
    onnx.save(_detector(score_noise=np.array([0, 0, -5e-5, 5e-5, 0, 0], np.float32)), str(cand))
    np.savez(feed, **FEED)

    def cli(*extra):
        return subprocess.run([sys.executable, "-m", "workbench.cli", "compare", str(ref),
                               str(cand), "--inputs", str(feed), "--atol", "0.01", "--rtol",
                               "0.01", *extra], capture_output=True, text=True, cwd=REPO,
                              timeout=300)

    r = cli()
    assert r.returncode == 1, r.stderr  # the strict verdict decides by default
    assert "selection-aware (budget rel 0.01, candidate run by 'onnxruntime'): PASS (6 sample(s) in 1 batch(es), 1 pass)" \
        in r.stdout, r.stdout
    assert "1+1 swapped, 0 without a near-tied partner" in r.stdout
    assert "without pairing rows, relative to each output's range (max abs error / max "\
        "|reference|): rel 0.4 FAIL" in r.stdout
    assert cli("--selection-aware").returncode == 0


def test_outputs_judged_element_by_element_are_named_when_they_fail():
    """A selected output no score group pairs is judged element by element: the one-line
    summary names it and its error (it said only 'FAIL on 0/1 sample(s)' with a tiny
    frontier error beside it)."""
    from workbench.compare.selection import SelectionCheck

    c = SelectionCheck(0.01, 0.1, False, False, selection_nodes=1,
                       frontier={"/scores": 4e-4}, elementwise={"boxes": 0.101, "n": 0.0})
    line = c.summary()
    assert "beyond the budget element by element: boxes rel 0.101" in line
    assert "n rel" not in line and "no score pairs their rows: `compare --score NAME`" in line


K = 3


def _topk_boxes_only(score_noise=None):
    """scores [1, N] -> TopK keeps 3 -> GatherElements of the boxes; the only output is the
    kept boxes [1, 3, 4] (a detector that returns no scores, batch 1)."""
    nodes = [h.make_node("Sigmoid", ["logits"], ["s0"], name="sigmoid")]
    inits = [nh.from_array(np.array([K], np.int64), "k"),
             nh.from_array(np.array([2], np.int64), "ax2"),
             nh.from_array(np.array([1, 1, 4], np.int64), "rep")]
    if score_noise is None:
        nodes.append(h.make_node("Identity", ["s0"], ["scores"], name="keep"))
    else:
        inits.append(nh.from_array(np.asarray(score_noise, np.float32).reshape(1, N), "noise"))
        nodes.append(h.make_node("Add", ["s0", "noise"], ["scores"], name="noise"))
    nodes += [
        h.make_node("TopK", ["scores", "k"], ["top_v", "top_i"], axis=1, name="topk"),
        h.make_node("Unsqueeze", ["top_i", "ax2"], ["i3"], name="i3"),
        h.make_node("Tile", ["i3", "rep"], ["i34"], name="i34"),
        h.make_node("GatherElements", ["boxes_in", "i34"], ["kept_boxes"], axis=1,
                    name="gather_boxes"),
    ]
    g = h.make_graph(nodes, "det", [h.make_tensor_value_info("boxes_in", T.FLOAT, [1, N, 4]),
                                    h.make_tensor_value_info("logits", T.FLOAT, [1, N])],
                     [h.make_tensor_value_info("kept_boxes", T.FLOAT, [1, K, 4])],
                     initializer=inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 9
    return m


FEED_B1 = {"boxes_in": BOXES[None], "logits": LOGITS[None]}


def test_boxes_without_a_score_output_are_paired_by_the_topk_values():
    """A near-tied swap in a detector that outputs only its boxes: the rows are paired by the
    score the TopK selected by (read inside the graph), with the batch axis of 1 dropped;
    before, the boxes were judged element by element and failed."""
    noise = np.array([0, 0, -5e-5, 5e-5, 0, 0], np.float32)
    check = selection_aware(_topk_boxes_only(), _topk_boxes_only(noise), FEED_B1, tol=0.01)
    assert check.strict_passed is False  # the swap is real: box 3 instead of box 2
    assert check.passed, check.to_dict()
    (g,) = check.groups
    assert g.score == "top_v" and g.outputs == ["top_v", "kept_boxes"]
    assert (g.ref_rows, g.cand_rows, g.matched) == (3, 3, 2)
    assert not check.elementwise
    # a swap with a box whose score is far lower is no near tie: it fails
    far = np.array([0, 0, -0.5, 0, 0, 0], np.float32)  # box 2 drops below box 4
    check = selection_aware(_topk_boxes_only(), _topk_boxes_only(far), FEED_B1, tol=0.01)
    assert not check.passed


def test_compare_cli_score_names_a_tensor_inside_the_model(tmp_path):
    import subprocess
    import sys

    import onnx

    from conftest import REPO

    ref, cand, feed = tmp_path / "ref.onnx", tmp_path / "cand.onnx", tmp_path / "feed.npz"
    onnx.save(_topk_boxes_only(), str(ref))
    onnx.save(_topk_boxes_only(np.array([0, 0, -5e-5, 5e-5, 0, 0], np.float32)), str(cand))
    np.savez(feed, **FEED_B1)

    def cli(*extra):
        return subprocess.run([sys.executable, "-m", "workbench.cli", "compare", str(ref),
                               str(cand), "--inputs", str(feed), "--rtol", "0.01",
                               "--selection-aware", *extra], capture_output=True, text=True,
                              cwd=REPO, timeout=300)

    r = cli("--score", "top_v")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "top_v (rows of top_v" in r.stdout and "2/3 rows match, 1+1 swapped" in r.stdout
    r = cli("--score", "no_such")
    assert r.returncode == 2 and "no tensor named 'no_such'" in r.stderr
    assert "--score" in r.stderr and "Traceback" not in r.stderr


def test_boxes_kept_by_nms_without_a_score_output_are_paired_by_the_scores_nms_kept():
    """The NMS detector with its scores outputs removed: the kept boxes are paired by the
    score of each box NonMaxSuppression kept (its scores input at the selected indices)."""
    def boxes_only(m):
        keep = [o for o in m.graph.output if o.name == "kept_boxes"]
        del m.graph.output[:]
        m.graph.output.extend(keep)
        return m

    noise = np.array([0, 0, -5e-5, 5e-5, 0, 0], np.float32)
    check = selection_aware(boxes_only(_detector()), boxes_only(_detector(score_noise=noise)),
                            FEED, tol=0.01)
    assert check.strict_passed is False and check.passed, check.to_dict()
    (g,) = check.groups
    assert g.score == "scores kept by nms" and (g.ref_rows, g.matched) == (3, 2)
    assert g.unmatched_ref == pytest.approx([0.50002], abs=1e-6)


def test_a_batched_topk_is_paired_per_image():
    """TopK per image ([B, N] scores -> [B, K] values, boxes [B, K, 4]): the rows of every
    image are paired by that image's TopK values, within the image (its index a field of the
    row); before, [B, K, 4] boxes had no score of their shape and were judged elementwise."""
    import onnx

    noise = np.zeros((2, N), np.float32)
    noise[1, 2], noise[1, 3] = -5e-5, 5e-5  # image 1 swaps its third box; image 0 does not
    ref = _topk_boxes_only()
    cand = _topk_boxes_only(np.zeros(N, np.float32))
    for model in (ref, cand):
        for vi in list(model.graph.input) + list(model.graph.output):
            vi.type.tensor_type.shape.dim[0].dim_param = "batch"
    cand.graph.initializer.remove(next(t for t in cand.graph.initializer if t.name == "noise"))
    cand.graph.initializer.append(nh.from_array(noise, "noise"))
    onnx.checker.check_model(cand)
    boxes = np.stack([BOXES, BOXES[::-1] + 100])  # image 1's boxes differ from image 0's
    logits = np.stack([LOGITS, LOGITS])
    feed = {"boxes_in": boxes, "logits": logits}
    check = selection_aware(ref, cand, feed, tol=0.01)
    assert check.strict_passed is False and check.passed, check.to_dict()
    (g,) = check.groups
    assert g.score == "top_v" and g.outputs == ["top_v", "kept_boxes", "(image) top_v"]
    assert (g.ref_rows, g.matched) == (2 * K, 2 * K - 1)


def _threshold_model():
    """x -> Relu -> r (an output too) -> r > 0.5 -> NonZero -> idx: values just above 0.5 round
    to 0.5 in FP16, so the FP16 model keeps fewer indices (another output length)."""
    half = nh.from_array(np.array(0.5, np.float32), "half")
    nodes = [h.make_node("Relu", ["x"], ["r"], name="/act/Relu"),
             h.make_node("Greater", ["r", "half"], ["keep"], name="/keep/Greater"),
             h.make_node("NonZero", ["keep"], ["idx"], name="/keep/NonZero")]
    g = h.make_graph(nodes, "thr", [h.make_tensor_value_info("x", T.FLOAT, ["n", 8])],
                     [h.make_tensor_value_info("idx", T.INT64, [2, None]),
                      h.make_tensor_value_info("r", T.FLOAT, ["n", 8])], initializer=[half])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 9
    return m


def test_a_selection_that_keeps_another_count_is_compared_not_crashed(tmp_path):
    """A detector's NMS kept 543 boxes in FP32 and 540 in FP16: `compare --to fp16` (the
    command precision printed) stopped with 'internal error: could not broadcast (540,) into
    (543,)'. The changed length is a failing tensor with its shape change, no culprit; the
    search judges the outputs after the selection by what feeds it; precision says so."""
    import subprocess
    import sys

    import onnx

    from conftest import REPO
    from workbench.runtime.comparison import compare_tensor
    from workbench.precision import convert

    path, data = tmp_path / "thr.onnx", tmp_path / "x.npz"
    onnx.save(_threshold_model(), str(path))
    x = np.full((4, 8), 0.2, np.float32)
    x[:, :3] = 0.50001  # rounds to 0.5 in FP16: no longer > 0.5
    np.savez(data, x=x)
    t = compare_tensor("idx", [np.zeros((2, 12))], [np.zeros((2, 0))], 0.01, 0.01)
    assert not t.passed and t.shape_change == "[2, 12] -> [2, 0]"
    res = convert(str(path), "fp16", calibration=str(data))
    said = {f.code: f for f in res.findings}
    assert "accuracy-after-selection" in said and said["accuracy-after-selection"].tensors == ["idx"]
    assert not any(f.code == "accuracy-loss" and "idx" in f.tensors for f in res.findings)
    r = subprocess.run([sys.executable, "-m", "workbench.cli", "compare", str(path), "--to",
                        "fp16", "--inputs", str(data)], capture_output=True, text=True,
                       cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "internal error" not in r.stderr
    assert "fp16: within budget" in r.stdout
    assert "outputs after the model's data-dependent selection (idx)" in r.stdout
    res.save(tmp_path / "thr16.onnx")
    c = subprocess.run([sys.executable, "-m", "workbench.cli", "compare", str(path),
                        str(tmp_path / "thr16.onnx"), "--inputs", str(data)],
                       capture_output=True, text=True, cwd=REPO, timeout=300)
    assert c.returncode == 1 and "internal error" not in c.stderr, c.stderr
    assert "precision-loss" not in c.stdout  # the selection names no culprit


def test_batched_topk_values_that_are_an_output_pair_the_rows():
    """A detector returning TopK's values as its [B, K] 'scores' output with [B, K, 4] boxes
    and [B, K] labels: the values are the score (a 2-D output is no score otherwise, since a
    [K, 4] box output is not one); boxes and labels were judged elementwise ('labels rel inf')."""
    noise = np.zeros((2, N), np.float32)
    noise[1, 2], noise[1, 3] = -5e-5, 5e-5
    ref, cand = _topk_boxes_only(), _topk_boxes_only(np.zeros(N, np.float32))
    cand.graph.initializer.remove(next(t for t in cand.graph.initializer if t.name == "noise"))
    cand.graph.initializer.append(nh.from_array(noise, "noise"))
    for model in (ref, cand):
        for vi in list(model.graph.input) + list(model.graph.output):
            vi.type.tensor_type.shape.dim[0].dim_param = "batch"
        model.graph.output.append(h.make_tensor_value_info("top_v", T.FLOAT, ["batch", K]))
    feed = {"boxes_in": np.stack([BOXES, BOXES[::-1] + 100]), "logits": np.stack([LOGITS] * 2)}
    check = selection_aware(ref, cand, feed, tol=0.01)
    assert check.passed and not check.elementwise, check.to_dict()
    (g,) = check.groups
    assert g.score == "top_v" and "kept_boxes" in g.outputs


def test_compare_prints_integer_outputs_as_elements_that_differ(tmp_path):
    """Integer class labels were printed with a cosine ('labels ... cos 0.998')."""
    import subprocess
    import sys

    import onnx

    from conftest import REPO

    g = h.make_graph([h.make_node("ArgMax", ["x"], ["labels"], axis=1, keepdims=0, name="am"),
                      h.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, ["n", 5])],
                     [h.make_tensor_value_info("labels", T.INT64, ["n"]),
                      h.make_tensor_value_info("y", T.FLOAT, ["n", 5])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    path, data = tmp_path / "m.onnx", tmp_path / "x.npz"
    onnx.save(m, str(path))
    np.savez(data, x=np.random.default_rng(0).standard_normal((6, 5)).astype(np.float32))
    r = subprocess.run([sys.executable, "-m", "workbench.cli", "compare", str(path), str(path),
                        "--inputs", str(data)], capture_output=True, text=True, cwd=REPO,
                       timeout=300)
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("outputs: "))
    assert "labels 0 of 6 differ PASS" in line and "y max abs 0 rel 0 cos 1.000000 PASS" in line


def test_a_box_kept_or_dropped_at_the_iou_threshold_is_no_failure():
    """Two boxes overlapping by IoU 0.5004 (NMS threshold 0.5): the reference suppresses the
    second; noise of 2e-4 of the scale moves it to IoU 0.498 and the candidate keeps it. The
    candidate's extra row has no near-tied partner, and was counted as a failure; it is an
    IoU flip. A box moved far past the threshold stays a failure."""
    boxes = BOXES.copy()
    boxes[1] = [1.665, 0, 6.665, 5]  # IoU with box 0: 3.335 / 6.665 = 0.5004
    feed = {"boxes_in": boxes, "logits": LOGITS}
    near = np.zeros((N, 4), np.float32)
    near[1, [0, 2]] = 0.01  # IoU 0.498: kept
    check = selection_aware(_detector(), _detector(box_noise=near), feed, tol=0.01)
    (g,) = check.groups
    assert (g.ref_rows, g.cand_rows) == (3, 3) and g.matched == 2
    assert g.iou_flips == pytest.approx([0.7], abs=1e-6) and g.unpaired == []
    assert check.passed, check.to_dict()
    assert "1 kept or dropped at the IoU threshold" in check.summary()
    # the same rows judged without the NMS threshold: the extra row fails (as it did)
    ref = {"kept_scores": np.array([0.9, 0.50002, 0.5]), "kept_boxes": boxes[[0, 2, 3]]}
    cand = {"kept_scores": np.array([0.9, 0.7, 0.50002]),
            "kept_boxes": (boxes + near)[[0, 1, 2]]}
    assert not judge_rows(ref, cand, ["kept_scores", "kept_boxes"], "kept_scores", 0.01).consistent
    assert judge_rows(ref, cand, ["kept_scores", "kept_boxes"], "kept_scores", 0.01,
                      iou=(0.5, False)).consistent
    far = np.zeros((N, 4), np.float32)
    far[1, [0, 2]] = 0.8  # IoU 0.34: no rounding puts it there
    check = selection_aware(_detector(), _detector(box_noise=far), feed, tol=0.02)
    (g,) = check.groups
    assert g.unpaired == pytest.approx([0.7], abs=1e-6) and g.iou_flips == []
    assert not check.passed
