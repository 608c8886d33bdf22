"""A build whose profile the model cannot run at (TensorRT-RTX on CPU, sm89 ahead of time): the
default profile's min follows the graph (TopK's K), and TensorRT's "Profile kMIN values are not
self-consistent" becomes a `profile-cannot-run` warning naming the node, what cannot run, and
the next step; where the profile was the default one, it says so."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from workbench.engines.engine import BuildConfig, build_engine
from workbench.core.trtlog import findings_from_log
from workbench.worker.client import WorkerClient

from test_profile_minimums import pointnet_like


@pytest.fixture(scope="module")
def client():
    c = WorkerClient()
    yield c
    c.close()


def cfg(**kw) -> BuildConfig:
    return BuildConfig(target="sm89", builder_optimization_level=0, **kw)


def hidden_k(path):
    """pointnet_like with K = Cast(int32 16): TensorRT folds it, the static rule does not read
    it, so the default min stays 1."""
    m = pointnet_like(16)
    m.graph.initializer.remove(next(t for t in m.graph.initializer if t.name == "k"))
    m.graph.initializer.append(numpy_helper.from_array(np.array([16], np.int32), "k32"))
    m.graph.node.insert(0, helper.make_node("Cast", ["k32"], ["k"], name="/k/Cast",
                                            to=TensorProto.INT64))
    onnx.save(m, str(path))
    return path


def _cannot(findings):
    return [f for f in findings if f.code == "profile-cannot-run"]


def test_default_profile_min_from_topk_builds_clean(client, tmp_path):
    path = tmp_path / "pointnet_like.onnx"
    onnx.save(pointnet_like(16), str(path))
    res = build_engine(path, cfg(), client=client)
    assert res.config["profiles"] == [{"points": [[16, 3], [128, 3], [1024, 3]]}]
    assert _cannot(res.findings) == []
    f = next(f for f in res.findings if f.code == "default-profile")
    assert "min 16: /TopK takes the top 16 along it" in f.message


def test_default_profile_tensorrt_cannot_run_is_a_named_warning(client, tmp_path):
    path = hidden_k(tmp_path / "hidden_k.onnx")
    res = build_engine(path, cfg(), client=client)
    assert res.config["profiles"] == [{"points": [[1, 3], [128, 3], [1024, 3]]}]
    found = _cannot(res.findings)
    assert len(found) == 1, [str(f) for f in res.findings]
    f = found[0]
    assert f.severity == "warning" and f.nodes == ["/TopK"] and f.source == "build-log"
    assert f.message.startswith("the default profile's (no --profile was given) min shapes "
                                "cannot run the model")
    assert "smaller than K (16)" in f.message and "shapeMachine.cpp" not in f.message
    assert "--profile NAME:MIN:OPT:MAX" in f.hint and "workbench" not in f.hint
    assert [(s.verb, s.args) for s in f.next_steps] == [("profiles", ("{model}",))]
    assert f.extra["default_profile"] is True
    assert not any(g.code == "build-warning" and "self-consistent" in g.message
                   for g in res.findings)
    # the same build from the cache says the same
    again = build_engine(path, cfg(), client=client)
    assert again.cache_hit and [str(g) for g in _cannot(again.findings)] == [str(f)]


def test_explicit_profile_cannot_run_is_not_called_the_default(client, tmp_path):
    path = tmp_path / "pointnet_like.onnx"
    onnx.save(pointnet_like(16), str(path))
    res = build_engine(path, cfg(profiles=[{"points": [[4, 3], [128, 3], [1024, 3]]}]),
                       client=client)
    (f,) = _cannot(res.findings)
    assert f.message.startswith("the profile's min shapes cannot run the model")
    assert "default" not in f.message and "default_profile" not in f.extra


def test_log_line_for_opt_and_max_says_which():
    for which in ("OPT", "MAX"):
        (f,) = findings_from_log([{"level": "warning", "message":
                                   f"Profile k{which} values are not self-consistent. /TopK: "
                                   "length of reduction axis is smaller than K (16)"}])
        assert f.code == "profile-cannot-run" and f.severity == "warning"
        assert f"the profile's {which.lower()} shapes cannot run the model" in f.message
        assert f"whose {which.lower()} the model can run" in f.hint


def test_check_build_says_the_profile_cannot_run(client, tmp_path):
    from workbench.support.checker import check

    path = hidden_k(tmp_path / "hidden_k.onnx")
    rep = check(path, backend="tensorrt-rtx", build=True, client=client,
                profiles={"points": [[1, 3], [128, 3], [1024, 3]]})
    assert rep.supported and rep.mode == "parser+build"
    (f,) = _cannot(rep.findings)
    assert f.severity == "warning" and f.nodes == ["/TopK"]
    assert "min shapes cannot run the model" in f.message
    assert [(s.verb, s.args) for s in f.next_steps] == [("profiles", (str(path),))]
    ok = tmp_path / "pointnet_like.onnx"
    onnx.save(pointnet_like(16), str(ok))
    assert _cannot(check(ok, backend="tensorrt-rtx", build=True, client=client,
                         profiles={"points": [[16, 3], [128, 3], [1024, 3]]}).findings) == []
