"""The builder-flag route's layer precision (bisection on TensorRT without strongly typed
networks pins layers to a precision instead of editing the ONNX) on a CPU: the worker's layer
plan on a network parsed by the real
TensorRT-RTX, the refusal where networks are strongly typed, the build request's plumbing, the
route bisection picks (probed), and the trtexec line. The builds themselves run on the GPU
(tests/gpu/test_engine_compare.py::test_planted_overflow_bisected_on_the_engine)."""
from __future__ import annotations

import onnx
import pytest

from planted_models import PLANTED, planted_overflow
from workbench.engines.engine import BuildConfig, build_engine, layer_precisions
from workbench.engines.export import config_from_trtexec, trtexec_command
from workbench.core.errors import WorkbenchError
from workbench.worker.client import WorkerClient


@pytest.fixture(scope="module")
def rtx():
    from workbench.worker import loaders as L

    try:
        name, trt = L.load_backend("tensorrt-rtx")
    except Exception as e:  # pragma: no cover - the CI image has it
        pytest.skip(f"no TensorRT-RTX here: {e}")
    return L, trt


@pytest.fixture(scope="module")
def planted_network(rtx, tmp_path_factory):
    L, trt = rtx
    path = tmp_path_factory.mktemp("planted") / "planted.onnx"
    onnx.save(planted_overflow(d=64, blocks=2), str(path))
    log = L.make_logger(trt)
    builder = L.create_builder(trt, log)
    net = L.network_from_onnx(trt, builder, log, str(path), strongly_typed=False)
    return net, builder


def test_plan_puts_excluded_nodes_in_fp32_and_every_other_float_layer_in_fp16(rtx,
                                                                             planted_network):
    L, trt = rtx
    net, _ = planted_network
    network = net.network
    wanted = {n: "float32" for n in PLANTED[:3]}
    plan, unmatched = L.plan_layer_precisions(trt, network, {"*": "float16", **wanted,
                                                            "/no/such/node": "float32"})
    assert unmatched == ["/no/such/node"]
    by_layer = {network.get_layer(i).name: dt for i, dt in plan}
    for n in PLANTED[:3]:
        assert by_layer[n] == "float32", (n, by_layer)
    for n in ("/b0/MatMul", "/b1/Relu", "/planted/sqrt", "/head/MatMul"):
        assert by_layer[n] == "float16", (n, by_layer)
    const = trt.LayerType.CONSTANT
    planned = {i for i, _ in plan}
    constants = [i for i in range(network.num_layers) if network.get_layer(i).type == const]
    assert constants and not planned & set(constants)  # weights keep their own type
    # without "*", only the named nodes' layers are constrained
    plan2, _ = L.plan_layer_precisions(trt, network, wanted)
    assert {network.get_layer(i).name for i, _ in plan2} >= set(PLANTED[:3])
    assert all(dt == "float32" for _, dt in plan2)


def test_plan_refuses_a_type_this_tensorrt_does_not_have(rtx, planted_network):
    L, trt = rtx
    net, _ = planted_network
    with pytest.raises(L.OpError) as e:
        L.plan_layer_precisions(trt, net.network, {"*": "float17"})
    assert e.value.code == "bad-args" and "float17" in e.value.message


def test_strongly_typed_tensorrt_refuses_layer_precision_and_says_use_casts(rtx,
                                                                           planted_network):
    L, trt = rtx
    net, builder = planted_network
    config = builder.create_builder_config()
    with pytest.raises(L.OpError) as e:
        L.set_layer_precisions(trt, config, net.network, {"*": "float16"})
    assert e.value.code == "no-flag" and "Casts" in (e.value.hint or "")


def test_the_build_request_carries_layer_precisions_and_the_worker_checks_them(tmp_path):
    from workbench.worker.protocol import BUILD
    from workbench.worker.client import WorkerError

    path = tmp_path / "planted.onnx"
    onnx.save(planted_overflow(d=32, blocks=1), str(path))
    w = WorkerClient()
    try:
        with pytest.raises(WorkerError) as e:  # strongly typed build: layer precision is moot
            w.call(BUILD, {"onnx_path": str(path), "engine_path": str(tmp_path / "e"),
                           "backend": "tensorrt-rtx", "route": "strongly-typed",
                           "target": "sm89", "layer_precisions": {"*": "float16"}},
                   timeout=300)
        assert e.value.code == "bad-args"
        assert (e.value.details or {}).get("field") == "layer_precisions"
        with pytest.raises(WorkerError) as e:  # weakly typed parse, no layer precision
            w.call(BUILD, {"onnx_path": str(path), "engine_path": str(tmp_path / "e"),
                           "backend": "tensorrt-rtx", "route": "legacy-flags",
                           "target": "sm89", "layer_precisions": {PLANTED[0]: "float32"},
                           "profiles": [{"input": [[1, 32], [2, 32], [4, 32]]}]},
                   timeout=300)
        assert e.value.code == "no-flag" and "strongly typed" in e.value.message
    finally:
        w.close()


def test_client_layer_precisions_come_from_the_precision_table():
    forced = BuildConfig(precision="fp16", route="legacy-flags", layer_precision="obey")
    assert layer_precisions(forced, ["/a", "/b"]) == {"*": "float16", "/a": "float32",
                                                       "/b": "float32"}
    free = BuildConfig(precision="fp16", route="legacy-flags")
    assert layer_precisions(free, ["/a"]) == {"/a": "float32"}
    assert layer_precisions(free, []) == {}
    assert layer_precisions(BuildConfig(precision="bf16", layer_precision="prefer"), [])["*"] \
        == "bfloat16"
    with pytest.raises(WorkbenchError) as e:
        layer_precisions(BuildConfig(precision="int8", layer_precision="obey",
                                     allow_random_calibration=True), [])
    assert e.value.field == "layer_precision"
    with pytest.raises(WorkbenchError) as e:
        BuildConfig(precision="fp16", layer_precision="always")
    assert e.value.field == "layer_precision"
    # unset, the field stays out of the JSON: configs written before it keep their hash
    assert "layer_precision" not in BuildConfig(precision="fp16").to_dict()
    assert forced.config_hash != BuildConfig(precision="fp16", route="legacy-flags").config_hash


def test_trtexec_line_of_layer_precision_round_trips():
    c = BuildConfig(precision="fp16", route="legacy-flags", layer_precision="obey",
                    exclude_nodes=["/planted/sq"])
    line = trtexec_command(c, "m.onnx", "m.engine", route="legacy-flags")
    assert "--precisionConstraints=obey" in line
    assert "--layerPrecisions='*':fp16,/planted/sq:fp32" in line
    assert "--layerOutputTypes='*':fp16,/planted/sq:fp32" in line
    back, _, _ = config_from_trtexec(line)
    assert back.layer_precision == "obey" and back.exclude_nodes == ["/planted/sq"]
    assert back.route == "legacy-flags" and back.precision == "fp16"


def test_bisection_on_a_strongly_typed_tensorrt_keeps_the_cast_route():
    from workbench.measure.enginedebug import _route_name, bisect_config

    w = WorkerClient()
    try:
        cfg = BuildConfig(precision="fp16", backend="tensorrt-rtx", target="sm89")
        assert bisect_config(cfg, client=w) == cfg  # STRONGLY_TYPED probed: Casts
        assert "Casts" in _route_name(cfg)
    finally:
        w.close()
    forced = BuildConfig(precision="fp16", route="legacy-flags", layer_precision="obey")
    assert "every float layer float16" in _route_name(forced)


def test_rtx_build_refuses_the_builder_flag_route_with_layer_precision(tmp_path):
    path = tmp_path / "planted.onnx"
    onnx.save(planted_overflow(d=32, blocks=1), str(path))
    w = WorkerClient()
    try:
        with pytest.raises(WorkbenchError) as e:
            build_engine(path, BuildConfig(precision="fp16", backend="tensorrt-rtx",
                                           target="sm89", route="legacy-flags",
                                           layer_precision="obey"), client=w)
        assert e.value.field == "route"
    finally:
        w.close()


def test_suspects_put_a_fused_overflow_first_even_when_its_tensors_are_not_compared():
    """The engine fuses the planted square and sum into the layer that outputs the norm, so
    their tensors are never compared; the nodes of that layer still come first, with the
    producers and consumers of the tensors beyond the FP16 range, ahead of the culprits (CPU stand-in: the FP16 ONNX on onnx's
    reference evaluator, compared only at the 'layer boundaries' an engine would have)."""
    import numpy as np

    from workbench.compare.bisect import suspects
    from workbench.compare.engine_compare import engine_layerwise, onnx_candidate
    from workbench.precision.transform import convert

    model = planted_overflow(d=64, blocks=2)
    fp16 = convert(model, "fp16", measure=False).proto
    feeds = [{"input": np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)}]
    boundaries = ["/b0/relu", "/b1/relu", "/planted/h", "/planted/n", "/planted/y"]
    rep = engine_layerwise(model, onnx_candidate(fp16, runner="reference"), feeds,
                           tensors=boundaries, precision="fp16")
    assert "/planted/ss" not in {t.tensor for t in rep.tensors}
    got = suspects(rep, model)
    assert set(got[:len(PLANTED)]) == set(PLANTED), got  # /planted/sum among them
    assert len(got) > len(PLANTED)  # the culprits by added error follow


def test_bisection_adds_and_drops_whole_fused_layers():
    """A fused engine layer [a, b] goes into FP32 whole: the answer is never a split layer,
    even where suspects put a and b far apart and the search would cut between them."""
    from workbench.compare.bisect import bisect_exclusions
    from workbench.runtime.comparison import Comparison

    seen = []

    def evaluate(excluded):
        seen.append(set(excluded))
        if ("a" in excluded) != ("b" in excluded):
            return Comparison(1e-2, 1e-2, reason="TensorRT cannot build a split layer")
        ok = {"a", "b", "z"} <= set(excluded)
        return Comparison(1e-2, 1e-2) if ok else Comparison(1e-2, 1e-2, reason="misses")

    cands = ["a", "x1", "x2", "x3", "z", "x4", "b", "x5"]
    res = bisect_exclusions(cands, evaluate, units=[["a", "b"]])
    assert res.passed and sorted(res.excluded) == ["a", "b", "z"], res.to_dict()
    assert not any(("a" in s) != ("b" in s) for s in seen)  # no split layer was tried
    assert res.rows[1]["added"] == "a + b"
    plain = bisect_exclusions(cands, evaluate)  # without units the cut lands between them
    assert any(("a" in s) != ("b" in s) for s in seen[len(seen) - len(plain.evaluations):])


class _Recorded:
    """A real layer whose precision settings are recorded (TensorRT-RTX layers have none)."""

    def __init__(self, layer, log):
        self._layer, self._log = layer, log

    def __getattr__(self, name):
        return getattr(self._layer, name)

    def __setattr__(self, name, value):
        if name.startswith("_"):
            return object.__setattr__(self, name, value)
        self._log.append((self._layer.name, name, value))

    def set_output_type(self, j, dt):
        self._log.append((self._layer.name, f"output{j}", dt))


def test_standalone_script_puts_the_same_layers_in_the_same_types_as_the_worker(rtx,
                                                                               planted_network):
    """The exported build script (no workbench import) reproduces the worker's layer plan on a
    network parsed by the real TensorRT-RTX; the engine build itself is a GPU matter."""
    from workbench.engines.export import python_script

    L, trt = rtx
    net, _ = planted_network
    network = net.network
    config = BuildConfig(precision="fp16", route="legacy-flags", layer_precision="obey",
                         exclude_nodes=list(PLANTED[:3]))
    src = python_script(config, "/m/p.onnx", "/m/p.engine", route="legacy-flags")
    assert f"LAYER_PRECISIONS = {layer_precisions(config, list(PLANTED[:3]))!r}" in src
    ns: dict = {"__name__": "exported"}
    exec(compile(src, "build_and_run.py", "exec"), ns)
    ns["trt"] = trt
    log: list = []
    flags: list = []

    class Net:
        num_layers = network.num_layers

        @staticmethod
        def get_layer(i):
            return _Recorded(network.get_layer(i), log)

    class Config:
        @staticmethod
        def set_flag(f):
            flags.append(str(f))

    try:
        ns["set_layer_precisions"](Net, Config)
    except SystemExit as e:  # this TensorRT has no constraint flag: said in one line
        assert "Casts" in str(e)
    plan, _ = L.plan_layer_precisions(trt, network, layer_precisions(config, list(PLANTED[:3])))
    names = {getattr(trt, n): n for n in ("float32", "float16", "bfloat16") if hasattr(trt, n)}
    want = {(network.get_layer(i).name, dt) for i, dt in plan}
    got = {(name, names[value]) for name, what, value in log if what == "precision"}
    assert got == want, got ^ want
    assert {(n, "float32") for n in PLANTED[:3]} <= got and ("/b0/MatMul", "float16") in got


def test_bisection_counts_only_builder_failures_as_unbuildable_sets():
    """A cancel, a timeout or a crashed worker during a bisection build is no answer about
    the exclusion set: it must stop the bisection, not count as a failing set."""
    from workbench.engines.engine import BuildCancelled, BuildFailed
    from workbench.measure.enginedebug import _not_buildable

    assert _not_buildable(BuildFailed("no implementation obeys the layer precisions"))
    assert not _not_buildable(BuildCancelled("the build was cancelled", code="cancelled"))
    for code in ("timeout", "worker-crashed", "bad-args", "no-gpu"):
        assert not _not_buildable(BuildFailed("x", code=code)), code
