"""The verbs tests/test_backend_sweep.py leaves out (inspect, graph, profiles, compare) over the
same onnx backend test models, and every verb over the odd-model corpus (tests/odd_models.py):
never exit 3 or a traceback, exit 2 in one line, and no `compare` error blames the inputs when
onnxruntime refused the model itself (at load time). The CLI's main runs in this process with
its output captured (well under a minute on 2 cores)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional

import pytest

import backend_sweep_cases as bs
import odd_models
from test_odd_models import _main

MODELS = bs.models(tuple(f for f in bs.FOLDERS if f != "node"))


@pytest.fixture(scope="module")
def zoo(tmp_path_factory) -> List[bs.SweepModel]:
    made = odd_models.make_zoo(tmp_path_factory.mktemp("verbsweep") / "zoo")
    return [bs.SweepModel("zoo", name, path) for name, path in made.items()]


@pytest.fixture(scope="module")
def node_sample(tmp_path_factory) -> List[bs.SweepModel]:
    """onnx's node models with sequences, optionals and control flow (generated)."""
    return bs.node_ci_sample(bs.generate_node_models(tmp_path_factory.mktemp("onnx-data")))


def onnxruntime_refuses(path: Path) -> Optional[str]:
    """onnxruntime's words when it will not load the model at all (whatever the feed)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 4
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    except Exception as e:
        return " ".join(str(e).split())
    return None


def _broken(outcomes: List[bs.Outcome]) -> str:
    return "\n".join(f"{o.model} {o.verb}: {'; '.join(o.problems)}: {o.stderr.strip()[-300:]}"
                     for o in outcomes if o.problems)


def test_the_sweep_has_its_models(zoo):
    assert len(MODELS) >= 150 and {m.folder for m in MODELS} >= {
        "simple", "light", "pytorch-converted", "pytorch-operator"}
    assert len(zoo) >= 40


@pytest.mark.parametrize("verb", [v for v in bs.READ_VERBS if v != "compare"])
def test_backend_models_never_exit_3(verb, tmp_path):
    outcomes = [bs.run_one(m, verb, tmp_path) for m in MODELS]
    assert not _broken(outcomes), _broken(outcomes)
    assert sum(o.rc == 0 for o in outcomes) >= 100  # the verb ran for real


@pytest.mark.parametrize("verb", [v for v in bs.VERBS + bs.READ_VERBS if v != "compare"])
def test_odd_models_never_exit_3(zoo, verb, tmp_path):
    outcomes = [bs.run_one(m, verb, tmp_path) for m in zoo]
    assert not _broken(outcomes), _broken(outcomes)


def test_compare_never_exits_3_nor_blames_the_inputs_for_a_model_onnxruntime_refuses(
        zoo, node_sample, tmp_path):
    """compare over every model: exit 0, 1 or 2 in one line; every refusal has a category;
    where onnxruntime will not load the model at all, it is the model's (structure, weights),
    the machine's or a limit of this tool (an input that is not a tensor), never the
    inputs'."""
    seen: Dict[str, Optional[str]] = {}
    outcomes = []
    for m in MODELS + zoo + node_sample:
        o = bs.run_one(m, "compare", tmp_path)
        outcomes.append(o)
        if o.rc != 2 or o.problems:
            continue
        line = o.stderr.strip().splitlines()[-1]
        seen[m.key] = category = _category(line, m.path, tmp_path)
        refused = onnxruntime_refuses(m.path)
        if refused is not None:
            assert "these inputs" not in line, (m.key, refused, line)
            assert category in ("structure", "weights", "machine", "tool"), (m.key, category,
                                                                            line)
    assert not _broken(outcomes), _broken(outcomes)
    assert sum(o.rc == 0 for o in outcomes) >= 100
    assert set(seen.values()) <= {"structure", "weights", "inputs", "machine", "tool"}, seen
    assert {"structure", "weights", "inputs"} <= set(seen.values()), seen


def _category(line: str, path: Path, tmp_path: Path) -> Optional[str]:
    """The category of a compare refusal (its --json object; the same run again)."""
    rc, out, _ = _main("compare", path, "--to", "fp16", "--allow-random", "--json")
    doc = json.loads(out)
    assert rc == 2 and doc["message"] == line, (line, doc["message"])
    return doc.get("category")
