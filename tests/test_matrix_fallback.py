"""The variant matrix with quantized targets and a float fallback ("int8+fp16": INT8 where Q/DQ
sits, FP16 for every other node): the precision axis item parsed in one place, variants named
"int8+fp16" beside the uniform ones, built for real by TensorRT-RTX on the CPU (a local Ray
instance), judged at INT8's budgets, predicted with the fallback, and the builder-flag
route's trtexec / Polygraphy lines carrying --int8 --fp16."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.conftest import REPO, SAMPLES
from workbench.core.errors import WorkbenchError
from workbench.matrix.plan import Variant, plan_matrix
from workbench.precision import table
from workbench.precision.spec import (fallback_choices, parse_precision, precision_items,
                                      precision_label)

RESNET = SAMPLES / "resnet_tiny.onnx"
# the fields a Variant had before variants had fallbacks (what older matrix.json files hold)
OLD_FIELDS = {"model", "precision", "target", "profile_name", "profiles", "opt_level",
              "calibration", "backend", "build"}


@pytest.fixture(scope="module")
def small_calib(tmp_path_factory):
    """resnet_tiny's calibration data, first 16 samples (calibration time scales with them)."""
    out = tmp_path_factory.mktemp("calib") / "resnet_tiny.npz"
    with np.load(SAMPLES / "calib" / "resnet_tiny.npz") as z:
        np.savez(out, **{k: z[k][:16] for k in z.files})
    return str(out)


# ----------------------------------------------------------------------------- the axis item
def test_a_precision_item_is_a_target_or_target_plus_fallback():
    assert parse_precision("int8") == ("int8", None)
    assert parse_precision("int8+fp16") == ("int8", "fp16")
    assert parse_precision(" INT8+half ") == ("int8", "fp16")  # aliases, case, spaces
    assert parse_precision("fp8+bf16") == ("fp8", "bf16")
    assert precision_label("int8", "fp16") == "int8+fp16"
    assert precision_label("fp16") == "fp16"


def test_the_items_offered_come_from_the_table():
    items = precision_items()
    assert items[:len(table.names())] == list(table.names())
    combos = [precision_label(t, f) for t in table.names() for f in fallback_choices(t)]
    assert items[len(table.names()):] == combos and "int8+fp16" in combos
    assert "fp16+fp16" not in items and "int8+int8" not in items
    # a float precision added to the table is a fallback every quantized target is offered
    table.register(table.Precision("fp12", "float", "a test float", transform=lambda *a: a))
    try:
        assert "int8+fp12" in precision_items() and parse_precision("int8+fp12")[1] == "fp12"
    finally:
        table.unregister("fp12")
    assert "int8+fp12" not in precision_items()


@pytest.mark.parametrize("item, why", [
    ("fp16+fp16", "a fallback applies to a quantized target"),
    ("int8+int8", "not a float precision"),
    ("int8+fp32", "not a float precision"),
    ("int8+fp13", "unknown precision 'fp13'"),
    ("int9", "unknown precision 'int9'"),
    ("int8+", "unknown precision ''"),
])
def test_a_bad_item_names_the_field_the_item_and_what_is_allowed(item, why):
    with pytest.raises(WorkbenchError) as e:
        parse_precision(item)
    assert e.value.field == "precision"
    assert f"precision '{item}'" in e.value.message and why in e.value.message
    assert "int8+fp16" in e.value.hint and "fp32" in e.value.hint


# ----------------------------------------------------------------------------- the plan
def test_the_plan_has_a_fallback_variant_beside_the_uniform_one(small_calib):
    vs = plan_matrix([RESNET], ["int8", "int8+fp16"], ["sm89"], calibration=small_calib)
    plain, fb = vs
    assert (plain.precision, plain.fallback, plain.label) == ("int8", None, "int8")
    assert (fb.precision, fb.fallback, fb.label) == ("int8", "fp16", "int8+fp16")
    assert plain.id != fb.id
    assert fb.id.startswith("resnet_tiny-int8_fp16-sm89-") and "+" not in fb.id
    assert plain.id.startswith("resnet_tiny-int8-sm89-")
    cfg = fb.config()
    assert cfg.precision == "int8" and cfg.fallback == "fp16"
    assert cfg.calibration == small_calib  # calibrated as INT8 is
    assert plain.config().fallback is None
    assert cfg.config_hash != plain.config().config_hash
    # the builder-flag route's lines carry the fallback's flag, from the option objects
    from workbench.engines.export import polygraphy_command, trtexec_command

    line = trtexec_command(cfg, "m.onnx", "m.engine", route="legacy-flags")
    assert "--int8 --fp16" in line
    assert "--int8" in polygraphy_command(cfg, "m.onnx", "m.engine", route="legacy-flags") \
        and "--fp16" in polygraphy_command(cfg, "m.onnx", "m.engine", route="legacy-flags")
    assert "--fp16" not in trtexec_command(plain.config(), "m.onnx", "m.engine",
                                           route="legacy-flags")


def test_the_plan_refuses_bad_items_missing_calibration_and_repeats(small_calib):
    with pytest.raises(WorkbenchError, match="INT8\\+FP16 needs calibration data") as e:
        plan_matrix([RESNET], ["int8+fp16"], ["sm89"])
    assert e.value.field == "calibration"
    with pytest.raises(WorkbenchError, match="precision 'fp16\\+fp16'") as e:
        plan_matrix([RESNET], ["fp32", "fp16+fp16"], ["sm89"], calibration=small_calib)
    assert e.value.field == "precision"
    with pytest.raises(WorkbenchError, match="the same variant twice"):
        plan_matrix([RESNET], ["int8+fp16", "INT8+half"], ["sm89"], calibration=small_calib)


def test_an_older_variant_without_a_fallback_loads_with_its_id(small_calib):
    """A uniform variant's dict is the one older matrices stored (no `fallback` key): its id,
    a hash of that dict, is unchanged, so an older results folder resumes."""
    v = plan_matrix([RESNET], ["int8"], ["sm89"], calibration=small_calib)[0]
    old = v.to_dict()
    assert set(old) == OLD_FIELDS
    back = Variant.from_dict(old)
    assert back.fallback is None and back == v and back.id == v.id
    fb = dataclasses.replace(v, fallback="fp16")
    assert set(fb.to_dict()) == OLD_FIELDS | {"fallback"}
    assert Variant.from_dict(fb.to_dict()) == fb and fb.id != v.id


def test_the_cli_names_a_bad_item_in_one_line(tmp_path):
    p = subprocess.run([sys.executable, "-m", "workbench.cli", "matrix", str(RESNET), "-o",
                        str(tmp_path / "o"), "--precision", "fp32,int8+int8"], cwd=REPO,
                       env=os.environ.copy(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr[-2000:]
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("workbench matrix: error: ")
    assert "precision 'int8+int8'" in p.stderr and "int8+fp16" in p.stderr


# ----------------------------------------------------------------------------- real builds
@pytest.fixture(scope="module")
def built(small_calib, tmp_path_factory):
    """resnet_tiny as int8 and int8+fp16, built ahead of time for sm89 by TensorRT-RTX on
    this CPU through the worker, each a task of a local Ray instance (2 samples of accuracy
    on CPU)."""
    pytest.importorskip("ray")
    pytest.importorskip("tensorrt_rtx_bindings")
    from workbench.matrix.run import run_matrix

    home = tmp_path_factory.mktemp("wbhome")
    old = os.environ.get("WORKBENCH_HOME")
    os.environ["WORKBENCH_HOME"] = str(home)
    try:
        vs = plan_matrix([RESNET], ["int8", "int8+fp16"], ["sm89"], calibration=small_calib)
        res = run_matrix(vs, tmp_path_factory.mktemp("m"), workers=2, samples=2)
    finally:
        if old is None:
            os.environ.pop("WORKBENCH_HOME", None)
        else:
            os.environ["WORKBENCH_HOME"] = old
    return vs, res


def test_int8_and_int8_fp16_build_two_engines_the_fallback_with_half_layers(built):
    vs, res = built
    assert res.summary["ok"] == 2, [r.get("error") for r in res.results]
    plain, fb = res.results
    assert [r["id"] for r in res.results] == [v.id for v in vs]
    assert (plain["precision"], fb["precision"]) == ("int8", "int8+fp16")
    assert (plain["fallback"], fb["fallback"]) == (None, "fp16")
    assert plain["cache_key"] != fb["cache_key"]
    assert plain["engine_path"] != fb["engine_path"]
    assert Path(plain["engine_path"]).read_bytes() != Path(fb["engine_path"]).read_bytes()
    # the engines' layer information: INT8 in both, FP16 (HALF) only in the fallback one
    assert plain["dtypes"].get("INT8", 0) > 0 and fb["dtypes"].get("INT8", 0) > 0
    assert fb["dtypes"].get("HALF", 0) > 0
    assert plain["dtypes"].get("HALF", 0) == 0


def test_the_fallback_variant_is_judged_at_int8s_budgets(built):
    """Its error is INT8's (the Q/DQ rounding), above FP32's and FP16's relative-error budgets:
    judged as INT8, within budget."""
    from workbench.runtime.verdict import default_budget

    _, res = built
    fb = res.results[1]
    rel = default_budget("int8")["rel"]
    assert default_budget("fp16")["rel"] < fb["error_rel"] <= rel
    assert fb["accuracy_passed"] is True
    assert f"<= {rel:g}" in fb["accuracy_verdict"]
    assert fb["accuracy_source"] == "onnx-cpu"


def test_rows_table_and_pareto_page_name_it_int8_fp16(built):
    _, res = built
    df = res.frame()
    assert list(df["precision"]) == ["int8", "int8+fp16"]
    import pandas as pd

    csv = pd.read_csv(res.files["csv"])
    assert list(csv["precision"]) == ["int8", "int8+fp16"]
    page = Path(res.files["pareto_html"]).read_text()
    assert "<td>int8+fp16</td>" in page and "<td>int8</td>" in page  # the table's rows
    assert "int8+fp16 sm89" in page  # the point's hover text
    from workbench.matrix.table import pareto_axes, pareto_front
    from workbench.render.matrix_figures import pareto_figure

    fig = pareto_figure(pareto_front(df, pareto_axes(df)["x"]), pareto_axes(df))
    labels = [t for tr in fig.data if tr.mode == "markers+text" for t in tr.text]
    assert "int8+fp16/sm89" in labels and "int8/sm89" in labels


def _lm_over(model: Path):
    """A LatencyModel over `model`'s nodes, one layer each, no reformats: 4 ms a node in FP32,
    2 in FP16; in INT8 1 ms for a node of an op the quantizer takes, 3 for the rest (what an
    INT8 engine leaves in FP32)."""
    import pandas as pd

    from workbench.core.qdq import QUANT_OPS
    from workbench.timing.predict import LatencyModel

    class Table:
        def __init__(self, rows):
            self.df = pd.DataFrame(rows, columns=["onnx_nodes", "time_ms", "is_reformat",
                                                  "is_constant"])

    nodes = onnx.load(str(model), load_external_data=False).graph.node
    quant = {n.name for n in nodes if n.op_type in QUANT_OPS}
    times = {"fp32": lambda n: 4.0, "fp16": lambda n: 2.0,
             "int8": lambda n: 1.0 if n in quant else 3.0}
    return LatencyModel.from_tables({p: Table([([n.name], f(n.name), False, False)
                                               for n in nodes]) for p, f in times.items()}), quant


def test_the_fallback_variant_is_predicted_with_the_fallback(built):
    """INT8's nodes at the INT8 engine's time, every other node at the FP16 engine's: below the
    uniform INT8 engine (whose unquantized nodes cost 3 ms, not 2)."""
    from workbench.matrix.latency import predicted_latency, quantized_nodes

    _, res = built
    plain, fb = res.results
    lm, quant = _lm_over(RESNET)
    n_all = len(onnx.load(str(RESNET), load_external_data=False).graph.node)
    # the engine's Q/DQ ONNX quantizes the nodes of the ops the quantizer takes; the model
    # alone (the builder-flag route got it) says the same
    assert quantized_nodes(fb) == quant == quantized_nodes({"model_path": str(RESNET)})
    assert 0 < len(quant) < n_all
    ms, how = predicted_latency(lm, fb)
    assert ms == pytest.approx(len(quant) * 1.0 + (n_all - len(quant)) * 2.0)
    assert "int8 and fp16 engines" in how and f"{len(quant)} quantized node(s)" in how
    uniform, _ = predicted_latency(lm, plain)
    assert uniform == pytest.approx(len(quant) * 1.0 + (n_all - len(quant)) * 3.0)
    assert ms < uniform
    # without the fallback's recording: no prediction (never INT8's total under its name)
    lm16 = lm.__class__(**{**lm.__dict__, "totals": {k: v for k, v in lm.totals.items()
                                                     if k != "fp16"}})
    assert predicted_latency(lm16, fb) is None and predicted_latency(lm16, plain) is not None
