"""The precision planner beside the answers users have today, side by side in one run, on
ResNet-50, a BERT-base-sized encoder and a ViT (random init, made here without torch).

Per model and method: the accuracy metric on the held-back samples (never searched on), whether
it meets the budget, the latency, and the evaluations / builds the method used. Methods:
- `fp16`, `int8`: uniform engines (INT8 calibrated on the search split only);
- `autocast`: ModelOpt AutoCast's documented rules, reimplemented here and named so (ModelOpt
  is not a dependency): a node stays FP32 when a tensor it reads or writes exceeds
  `data_max` 512 in magnitude on the search split (IORangeRule) or an initializer it reads
  exceeds `init_max` 65504 (InitializerRangeRule); the rest FP16;
- `first_k`: Polygraphy `debug precision`-style bisection (direction forward): the smallest K
  such that the first K regions in topological order kept FP32, the rest FP16, meet the budget
  on the search split;
- `planner`: `workbench.planner.plan` (FP16 with regions kept FP32; `--targets` adds plans:
  `int8`, or `int8+fp16`: INT8 where quantized, the FP16 fallback elsewhere, regions kept
  FP32), its candidate set joined by the uniform engines (all-FP16, all-INT8: INT8 alone, no
  fallback), the fastest that meets the budget on the held-back split. Each answer's JSON
  says how its engine was built (`build`: the route and the builder flags).
Default metrics: top-1 agreement (budget 1%) for classifiers, cosine (budget 1e-3) for the
encoder. Searches (AutoCast's ranges, the bisection, the planner) measure accuracy with the
onnxruntime emulation (FP16 rounding, Q/DQ fake-quant).

CPU (default): each answer's held-back accuracy by emulation; latency *predicted* from the
recorded TensorRT 8.6 H200 per-layer profiles in tests/data (`workbench.timing.predict`) where
the model has them (ResNet-50: FP32/FP16 at batch 8, 224x224 — the emulation itself runs at
`--image`), else none (said so).
GPU (`--gpu`): each distinct answer is built once (TensorRT through the workbench worker,
e.g. WORKBENCH_TRT_PYTHON=/tmp/rig/bin/trt-python; engine cache and one timing cache reused;
`--tactics` restricts tactic sources), its held-back accuracy read from the engine's outputs
and its P50 *measured* (`run_engine` timing, `--iters` runs at `--batch`); identical answers
share one engine and one timing. The predicted latency and its error are reported beside the
measured one where profiles exist.

    python benchmarks/planner.py                       # CPU, all models, small sample counts
    python benchmarks/planner.py --gpu --models resnet50,bert --max-builds 6
    python benchmarks/planner.py --gpu --models resnet50 --targets fp16,int8+fp16
Last line: one JSON object with all figures.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
H200 = REPO / "tests" / "data" / "fixtures" / "trt86-h200"
BERT_BASE = dict(vocab=30522, hidden=768, heads=12, inter=3072, layers=12, max_pos=512)
AUTOCAST_DATA_MAX, AUTOCAST_INIT_MAX = 512.0, 65504.0
METHODS = ("fp16", "int8", "autocast", "first_k", "planner")
Feed = Dict[str, np.ndarray]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------ models
@dataclass
class Case:
    """One model of the benchmark: its file, its samples, metric and budget."""

    name: str
    path: Path
    samples: Feed                   # axis 0: the sample
    budget: float
    metric: str = ""
    profiles: Optional[Path] = None  # recorded uniform engines of this graph (predicted latency)
    about: str = ""


def _resnet50(path: Path, size: int) -> Path:
    """The graph of the recorded H200 ResNet-50 engines (node names are those engines'
    Metadata, so their profiles map onto it) with random weights (fan-in scaled), at `size`."""
    import onnx
    from onnx import numpy_helper

    m = onnx.load(str(H200 / "resnet50.structure.onnx"), load_external_data=False)
    rng = np.random.default_rng(0)
    for i, t in enumerate(m.graph.initializer):
        dims = list(t.dims)
        a = (rng.standard_normal(dims) * 0.01 if len(dims) <= 1 else
             rng.standard_normal(dims) * np.sqrt(2.0 / np.prod(dims[1:])) * 0.7)
        m.graph.initializer[i].CopyFrom(numpy_helper.from_array(a.astype(np.float32), t.name))
    d = m.graph.input[0].type.tensor_type.shape.dim
    d[2].dim_value = d[3].dim_value = size
    onnx.save(m, str(path))
    return path


def make_case(name: str, work: Path, n: int, *, image: int, seq: int, layers: int = 12,
              seed: int = 0) -> Case:
    """The model `name` written under `work` with `n` samples."""
    import onnx

    rng = np.random.default_rng(seed)
    if name == "resnet50":
        path = _resnet50(work / "resnet50.onnx", image)
        x = rng.standard_normal((n, 3, image, image)).astype(np.float32)
        return Case(name, path, {"input": x}, 0.01, profiles=H200,
                    about=f"torchvision ResNet-50 graph (the recorded H200 engines'), random "
                          f"weights, {image}x{image}")
    if name in ("bert", "bert_tiny"):
        sys.path.insert(0, str(REPO / "sample_models"))
        from make_samples import BERT, make_bert

        cfg = dict(BERT_BASE, layers=layers) if name == "bert" else BERT
        path = work / f"{name}.onnx"
        onnx.save(make_bert(cfg, name=name, seed=2), str(path))
        ids = rng.integers(0, cfg["vocab"], (n, seq)).astype(np.int64)
        mask = np.ones((n, seq), np.int64)
        for i in range(n):  # some samples padded: the mask's large negative constant matters
            mask[i, seq - int(rng.integers(0, seq // 4 + 1)):] = 0
        return Case(name, path, {"input_ids": ids, "attention_mask": mask}, 1e-3,
                    about=f"BERT-style encoder ({cfg['layers']} layers, hidden "
                          f"{cfg['hidden']}), sequence {seq}")
    if name == "vit":
        sys.path.insert(0, str(REPO / "tests"))
        from zoo_models import materialize

        path = materialize("vit_small_patch16_224", seed=0, out_dir=work)
        x = rng.random((n, 3, 224, 224)).astype(np.float32)
        return Case(name, path, {"input": x}, 0.01,
                    about="timm vit_small_patch16_224 (the zoo's export, weights drawn from its "
                          "statistics), 224x224")
    if name == "tiny":  # the sample with a planted FP16 overflow: fast, for the test
        path = work / "tiny.onnx"
        shutil.copyfile(REPO / "sample_models" / "fp16_overflow.onnx", path)
        x = rng.standard_normal((n, 64)).astype(np.float32)
        return Case(name, path, {"input": x}, 0.01,
                    about="sample_models/fp16_overflow.onnx (planted FP16 overflow)")
    raise SystemExit(f"unknown model '{name}': resnet50, bert, bert_tiny, vit, tiny")


def batch_of(samples: Feed, batch: int) -> Feed:
    """`batch` samples (repeated when fewer): the timing input."""
    n = len(next(iter(samples.values())))
    idx = [i % n for i in range(batch)]
    return {k: v[idx] for k, v in samples.items()}


# ------------------------------------------------------------------------------------ judges
@dataclass
class Answer:
    """A method's answer judged on the held-back samples."""

    target: str
    fp32_nodes: List[str]
    held_loss: float
    latency_ms: Optional[float]
    latency: str                       # "measured" / "predicted" / "none"
    predicted_ms: Optional[float] = None
    engine: Optional[str] = None
    build_s: Optional[float] = None
    fallback: Optional[str] = None     # the float precision of the nodes without Q/DQ
    build: Optional[str] = None        # GPU: the route and builder flags the engine had

    def figures(self, budget: float) -> Dict[str, Any]:
        d: Dict[str, Any] = {"target": self.target, "fallback": self.fallback,
                             "fp32_nodes": len(self.fp32_nodes),
                             "held_loss": _j(self.held_loss),
                             "meets_budget": bool(self.held_loss <= budget),
                             "latency_ms": self.latency_ms, "latency": self.latency}
        if self.latency == "measured":
            d["predicted_ms"] = self.predicted_ms
            d["prediction_error"] = (None if self.predicted_ms is None or not self.latency_ms
                                     else round(self.predicted_ms / self.latency_ms - 1, 4))
            d["engine"] = self.engine
            d["build"] = self.build
        return d


def _j(v: float) -> Any:
    return float(v) if math.isfinite(v) else str(v)


def parse_target(text: str) -> Tuple[str, Optional[str]]:
    """A `--targets` entry: "fp16", "int8" or "int8+fp16" (INT8 with the FP16 fallback) ->
    (target, fallback or None)."""
    target, _, fallback = str(text).partition("+")
    return target, (fallback or None)


def build_flags(res: Any) -> str:
    """How an engine was built, for the JSON: the route and, on the builder-flag route, its
    precision flags (the target's, a fallback's, the extra ones)."""
    from workbench.precision import table

    cfg = res.config if isinstance(res.config, dict) else res.config.to_dict()
    if res.route != "legacy-flags":
        return f"{res.route}: precision in the ONNX (Q/DQ, Casts), no precision flag"
    flags = [table.get(p).builder_flag for p in (cfg.get("precision"), cfg.get("fallback"))
             if p and table.get(p).builder_flag]
    return f"{res.route}: " + " ".join(f"BuilderFlag.{f}" for f in
                                       flags + list(cfg.get("extra_flags") or []))


class Judge:
    """Judges answers (target, FP32 nodes) once each: the held-back loss and the latency.
    CPU: onnxruntime emulation + predicted latency; GPU (`gpu`): the engine built, run on the
    held-back samples and timed. Search-split losses always by emulation (`search_loss`)."""

    def __init__(self, case: Case, search: List[Feed], held: List[Feed], metric: Any,
                 calib: str, work: Path, gpu: Optional[Dict[str, Any]] = None) -> None:
        from workbench.planner.search import _Evaluator

        self.case, self.search, self.held, self.metric = case, search, held, metric
        self.calib, self.work, self.gpu = calib, work, gpu
        self.evaluators: Dict[str, Any] = {}
        self._evaluator = _Evaluator
        self.answers: Dict[Tuple[str, Tuple[str, ...]], Answer] = {}
        self.timings: Dict[str, Tuple[float, Optional[float]]] = {}  # engine -> (loss, p50)
        self.latency_model = None
        if case.profiles is not None:
            from workbench.timing.predict import LatencyModel, find_profiles

            files = find_profiles(case.profiles, str(case.path))
            if files:
                self.latency_model = LatencyModel.from_files(files, onnx=str(case.path))
        self.ref_held: Optional[List[Feed]] = None

    def evaluator(self, target: str, fallback: Optional[str] = None) -> Any:
        key = f"{target}+{fallback}" if fallback else target
        if key not in self.evaluators:
            from workbench.precision import table

            calib = self.calib if table.is_quantized(target) else None
            self.evaluators[key] = self._evaluator(
                str(self.case.path), target, self.search, self.held, self.metric, calib,
                10 ** 6, str(self.work), fallback)
        return self.evaluators[key]

    def search_loss(self, target: str, fp32_nodes: Sequence[str],
                    fallback: Optional[str] = None) -> float:
        return self.evaluator(target, fallback).loss(list(fp32_nodes), on="search")

    def predict(self, target: str, fp32_nodes: Sequence[str],
                fallback: Optional[str] = None) -> Optional[float]:
        lm = self.latency_model
        if lm is None or target not in lm.node_ms:
            return None
        quantized = self.evaluator(target, fallback).quantized() if fallback else None
        return float(lm.predict({n: "fp32" for n in fp32_nodes}, default=target,
                                fallback=fallback, quantized=quantized))

    def judge(self, target: str, fp32_nodes: Sequence[str],
              fallback: Optional[str] = None) -> Answer:
        key = (f"{target}+{fallback}" if fallback else target, tuple(sorted(fp32_nodes)))
        if key not in self.answers:
            self.answers[key] = (self._on_gpu if self.gpu else self._on_cpu)(
                target, list(fp32_nodes), fallback)
        return self.answers[key]

    def _on_cpu(self, target: str, fp32_nodes: List[str],
                fallback: Optional[str] = None) -> Answer:
        loss = self.evaluator(target, fallback).loss(fp32_nodes, on="held")
        pred = self.predict(target, fp32_nodes, fallback)
        return Answer(target, fp32_nodes, loss, pred, "predicted" if pred is not None
                      else "none", predicted_ms=pred, fallback=fallback)

    def _on_gpu(self, target: str, fp32_nodes: List[str],
                fallback: Optional[str] = None) -> Answer:
        from workbench.engines.engine import BuildConfig, build_engine
        from workbench.precision import table
        from workbench.runtime.runners import OnnxRuntimeRunner
        from workbench.runtime.trtrunner import TensorRTRunner
        from workbench.runtime.verdict import metric_loss
        from workbench.worker.client import default_client
        from workbench.worker.protocol import RUN_ENGINE

        g = self.gpu or {}
        if self.ref_held is None:
            self.ref_held = OnnxRuntimeRunner(str(self.case.path)).infer_all(self.held)
        batch = g["batch"]
        shapes = {k: list(v.shape[1:]) for k, v in self.case.samples.items()}
        profile = {k: [[1] + s, [batch] + s, [batch] + s] for k, s in shapes.items()}
        cfg = BuildConfig(precision=target, fallback=fallback, exclude_nodes=list(fp32_nodes),
                          backend=g.get("backend", "tensorrt"), target=g.get("target"),
                          route=g.get("route", "auto"),
                          calibration=self.calib if table.is_quantized(target) else None,
                          profiles=[profile], tactic_sources=g.get("tactics"),
                          timing_cache=str(g["timing_cache"]),
                          workspace_bytes=4096 << 20)
        t0 = time.monotonic()
        res = build_engine(self.case.path, cfg, timeout=g.get("build_timeout", 600))
        build_s = time.monotonic() - t0
        log(f"  built {self.case.name} {target}{'+' + fallback if fallback else ''} "
            f"({len(fp32_nodes)} FP32 nodes) in {build_s:.0f} s"
            f"{' (cache)' if res.cache_hit else ''}: {build_flags(res)}")
        eng = str(res.engine_path)
        if eng not in self.timings:  # the same engine: judged and timed once
            got = TensorRTRunner(eng, model=str(self.case.path),
                                 backend=g.get("backend", "tensorrt")).infer_all(self.held)
            loss = metric_loss(self.metric, self.ref_held, got, list(self.ref_held[0]))
            npz = self.work / "timing_input.npz"
            if not npz.exists():
                np.savez(npz, **batch_of(self.case.samples, batch))
            r = default_client().call(RUN_ENGINE, {
                "engine_path": eng, "inputs_npz": [str(npz)],
                "backend": g.get("backend", "tensorrt"),
                "out_dir": str(self.work / "timing_out"), "time_iterations": g["iters"],
                "time_warmup_ms": 200.0, "cuda_graph": False}, timeout=600)
            self.timings[eng] = (float(loss) if loss == loss else math.inf,
                                 (r.get("latency") or {}).get("p50_ms"))
        loss, p50 = self.timings[eng]
        return Answer(target, fp32_nodes, loss, p50, "measured" if p50 is not None else "none",
                      predicted_ms=self.predict(target, fp32_nodes, fallback),
                      engine=Path(eng).name, build_s=round(build_s, 1), fallback=fallback,
                      build=build_flags(res))

    @property
    def builds(self) -> int:
        return len(self.timings)


# ----------------------------------------------------------------------------------- methods
def autocast_fp32_nodes(model: Path, search: List[Feed]) -> List[str]:
    """AutoCast's default rules (reimplemented): FP32 for a node reading or writing a tensor
    over `data_max` in magnitude on the search samples, or reading an initializer over
    `init_max`."""
    import onnx
    from onnx import numpy_helper

    from workbench.runtime.runners import OnnxRuntimeRunner, mark_all_outputs

    proto = onnx.load(str(model))
    inits = {t.name: float(np.abs(numpy_helper.to_array(t)).max()) if t.dims else
             float(np.abs(numpy_helper.to_array(t)))
             for t in proto.graph.initializer if t.data_type == onnx.TensorProto.FLOAT}
    marked, _names, _ = mark_all_outputs(onnx.load(str(model)))
    tmp = Path(tempfile.mkdtemp(prefix="wb-autocast-"))
    try:
        p = tmp / "all.onnx"
        onnx.save(marked, str(p))
        peak: Dict[str, float] = {}
        for out in OnnxRuntimeRunner(str(p)).infer_all(search):
            for k, v in out.items():
                v = np.asarray(v)
                if v.dtype.kind == "f" and v.size:
                    peak[k] = max(peak.get(k, 0.0), float(np.nanmax(np.abs(v))))
        for f in search:
            for k, v in f.items():
                if np.asarray(v).dtype.kind == "f":
                    peak[k] = max(peak.get(k, 0.0), float(np.abs(v).max()))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    keep = []
    for n in proto.graph.node:
        io = [t for t in list(n.input) + list(n.output) if t]
        if any(peak.get(t, 0.0) > AUTOCAST_DATA_MAX for t in io) or \
                any(inits.get(t, 0.0) > AUTOCAST_INIT_MAX for t in n.input):
            keep.append(n.name)
    return keep


def first_k(regions: List[List[str]], ok: Callable[[List[str]], bool]) -> Tuple[int, int]:
    """(K, evaluations): the smallest K such that the first K regions kept FP32 pass `ok`
    (bisection, as Polygraphy's: assumes more FP32 never hurts); K = all when none pass."""
    lo, hi, evals = 0, len(regions), 0
    while lo < hi:
        mid = (lo + hi) // 2
        evals += 1
        if ok([n for r in regions[:mid] for n in r]):
            hi = mid
        else:
            lo = mid + 1
    return lo, evals


def fastest_meeting(cands: List[Tuple[str, Answer]], budget: float
                    ) -> Optional[Tuple[str, Answer]]:
    """The fastest candidate meeting the budget on the held-back samples (latency unknown:
    after every timed one, fewer FP32 nodes first)."""
    ok = [c for c in cands if c[1].held_loss <= budget]
    return min(ok, key=lambda c: (c[1].latency_ms is None, c[1].latency_ms or 0.0,
                                  len(c[1].fp32_nodes)), default=None)


def _to_verify(p: Any, gpu: Optional[Dict[str, Any]]) -> List[List[str]]:
    """The FP32 node lists of a plan's candidates to judge: on CPU its own answer; on GPU its
    front fastest first (predicted; fewer FP32 regions first where nothing predicts), at most
    `front_builds`, and its own answer."""
    if not gpu:
        return [p.fp32_nodes]
    ranked = sorted(p.front, key=lambda c: (c.latency_ms is None, c.latency_ms or 0.0,
                                            len(c.kept)))
    out: List[List[str]] = []
    for c in ranked:
        nodes = [x for i in sorted(c.kept) for x in p.regions[i]]
        if nodes not in out and len(out) < gpu["front_builds"]:
            out.append(nodes)
    if p.fp32_nodes not in out:
        out.append(p.fp32_nodes)
    return out


def run_case(case: Case, work: Path, *, holdout: float, max_builds: int,
             gpu: Optional[Dict[str, Any]], bisect_groups: Optional[int] = None,
             targets: Sequence[str] = ("fp16",)) -> Dict[str, Any]:
    """All methods on one model; figures per method."""
    from workbench.planner import plan
    from workbench.planner.regions import engine_regions, graph_regions
    from workbench.precision import table
    from workbench.planner.search import default_metric, split_samples
    from workbench.runtime.runners import batched_inputs

    import onnx

    t_case = time.monotonic()
    proto = onnx.load(str(case.path), load_external_data=False)
    case.metric = case.metric or default_metric(proto)
    n = len(next(iter(case.samples.values())))
    data = work / f"{case.name}.npz"
    np.savez(data, **case.samples)
    search, held, split = split_samples([case.samples], batched_inputs(str(case.path)), holdout)
    calib = work / f"{case.name}.search.npz"  # INT8 calibration: the search split only
    np.savez(calib, **{k: np.concatenate([f[k] for f in search]) for k in search[0]})
    judge = Judge(case, search, held, case.metric, str(calib), work, gpu)
    b = case.budget
    out: Dict[str, Any] = {"about": case.about, "metric": case.metric, "budget": b,
                           "samples": {"search": len(search), "held_back": len(held)},
                           "latency": ("measured (P50, TensorRT engine)" if gpu else
                                       "predicted (recorded profiles)" if judge.latency_model
                                       else "none (no recorded profiles of this graph)"),
                           "methods": {}}
    if judge.latency_model is not None:
        out["latency_model"] = judge.latency_model.describe()
    m = out["methods"]

    def record(method: str, ans: Answer, evaluations: int, extra: Optional[Dict[str, Any]] = None
               ) -> None:
        d = ans.figures(b)
        d["evaluations"] = evaluations
        d.update(extra or {})
        m[method] = d
        log(f"{case.name} {method}: {case.metric} loss {d['held_loss']} "
            f"({'meets' if d['meets_budget'] else 'misses'} {b:g}), latency "
            f"{ans.latency_ms} ms ({ans.latency}), {evaluations} evaluation(s)")

    t0 = time.monotonic()
    uniform = {t: judge.judge(t, []) for t in ("fp16", "int8")}
    for t, a in uniform.items():
        record(t, a, 1)
    log(f"{case.name}: uniform engines in {time.monotonic() - t0:.0f} s")

    ac = autocast_fp32_nodes(case.path, search)
    modelopt = importlib.util.find_spec("modelopt") is not None
    record("autocast", judge.judge("fp16", ac), 2, {
        "rules": f"AutoCast's default rules reimplemented (IORangeRule data_max "
                 f"{AUTOCAST_DATA_MAX:g}, InitializerRangeRule init_max {AUTOCAST_INIT_MAX:g}, "
                 f"ranges on the search split){'' if modelopt else '; ModelOpt not installed'}"})

    regions = graph_regions(proto)
    if judge.latency_model is not None and "fp16" in judge.latency_model.node_ms:
        regions = engine_regions(judge.latency_model, proto)
    from workbench.planner.regions import merge_to

    groups = merge_to(regions, bisect_groups)  # (None: every region its own step)
    k, evals = first_k(groups, lambda ex: judge.search_loss("fp16", ex) <= b)
    fk = [x for r in groups[:k] for x in r]
    record("first_k", judge.judge("fp16", fk), evals + 1,
           {"k": k, "steps": len(groups), "regions": len(regions),
            "searched_on": "search split (emulation)"})

    t0 = time.monotonic()
    cands: List[Tuple[str, Answer]] = []
    plans: Dict[str, Any] = {}
    evals = 0
    for label in targets:  # one plan per target: its regions in `target` (+ fallback) or FP32
        target, fallback = parse_target(label)
        calib_arg = str(calib) if table.is_quantized(target) else None
        p = plan(case.path, data, budget=b, metric=case.metric, target=target,
                 latency_profiles=case.profiles, max_builds=max_builds, holdout=holdout,
                 samples=n, calibration=calib_arg, fallback=fallback)
        assert p.samples == split, "the planner split the samples differently"
        plans[label], evals = p, evals + p.evaluations
        cands += [(f"{label}, {len(nodes)} FP32 nodes", judge.judge(target, nodes, fallback))
                  for nodes in _to_verify(p, gpu)]
    # joined by the uniform engines (each meeting the budget on the search set), each judged on
    # held-back samples: the fastest meeting the budget there wins
    for t, a in uniform.items():
        if not any(c[1] is a for c in cands):
            evals += 1
            if judge.search_loss(t, []) <= b:
                cands.append((f"all {t.upper()}", a))
    best = fastest_meeting(cands, b)
    if all(a.latency_ms is None for _, a in cands) and cands[0][1].held_loss <= b:
        best = cands[0]  # no latency known at all: the first plan's own answer, not a guess
    p0 = plans[targets[0]]
    name, ans = best if best is not None else (
        f"{targets[0]}, {len(p0.fp32_nodes)} FP32 nodes",
        judge.judge(p0.target, p0.fp32_nodes, p0.fallback))
    extra_builds = {"builds": len({c[1].engine for c in cands})} if gpu else {}
    record("planner", ans, evals, {
        **extra_builds, "choice": name, "targets": list(targets),
        "plans": {t: {"passed": p.passed, "fallback": p.fallback,
                      "nodes": {k: len(v) for k, v in p.to_dict()["nodes"].items()},
                      "regions": len(p.regions), "evaluations": p.evaluations,
                      "region_source": p.region_source, "kept_regions": len(p.kept_regions),
                      "front": [{"kept_regions": len(c.kept), "search_loss": _j(c.search_loss),
                                 "held_loss": None if c.held_loss is None else _j(c.held_loss),
                                 "predicted_ms": c.latency_ms} for c in p.front],
                      "notes": p.notes} for t, p in plans.items()},
        "candidates": {nm: a.figures(b) for nm, a in cands},
        "plan_seconds": round(time.monotonic() - t0, 1)})
    meeting = [m[x]["latency_ms"] for x in ("fp16", "int8", "autocast", "first_k")
               if m[x]["meets_budget"] and m[x]["latency_ms"] is not None]
    out["fastest_baseline_meeting_ms"] = min(meeting) if meeting else None
    pl = m["planner"]
    out["planner_not_slower"] = (None if not meeting or pl["latency_ms"] is None else
                                 bool(pl["meets_budget"] and pl["latency_ms"] <= min(meeting)))
    out["builds"] = judge.builds if gpu else 0
    out["seconds"] = round(time.monotonic() - t_case, 1)
    if gpu:
        out["prediction_errors"] = [
            {"target": a.target, "fp32_nodes": len(a.fp32_nodes), "measured_ms": a.latency_ms,
             "predicted_ms": a.predicted_ms,
             "error": None if a.predicted_ms is None or not a.latency_ms else
             round(a.predicted_ms / a.latency_ms - 1, 4)} for a in judge.answers.values()]
    return out


# -------------------------------------------------------------------------------------- main
def main(argv: Optional[List[str]] = None) -> Dict[str, Any]:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--models", default="resnet50,bert,vit",
                    help="resnet50, bert (BERT-base-sized), vit; bert_tiny, tiny for tests")
    ap.add_argument("--samples", type=int, default=None,
                    help="samples per model (default 16 CPU, 32 GPU)")
    ap.add_argument("--holdout", type=float, default=0.25, help="share held back")
    ap.add_argument("--max-builds", type=int, default=None,
                    help="the planner's evaluations (emulated) per model (default 8 CPU, 12 GPU)")
    ap.add_argument("--image", type=int, default=None, help="ResNet-50 input size "
                    "(default 32 CPU, 224 GPU)")
    ap.add_argument("--seq", type=int, default=None, help="encoder sequence (16 CPU, 128 GPU)")
    ap.add_argument("--bert-layers", type=int, default=None,
                    help="the encoder's layers of BERT-base size (hidden 768, 12 heads, FFN "
                         "3072; default 12 GPU, 2 CPU: each emulated candidate converts and "
                         "writes the whole model)")
    ap.add_argument("--bisect-groups", type=int, default=None,
                    help="first-K bisection over at most this many groups of neighbouring "
                         "regions (default: every region)")
    ap.add_argument("--targets", default="fp16",
                    help="the planner's targets, one plan each (fp16, int8, int8+fp16: INT8 "
                         "where quantized, the FP16 fallback elsewhere): regions in the "
                         "target or FP32; the uniform engines join every candidate set")
    ap.add_argument("--gpu", action="store_true", help="build and time engines (TensorRT "
                    "through the worker)")
    ap.add_argument("--gpu-builds", type=int, default=3,
                    help="GPU: the planner's front points built per model (fastest first)")
    ap.add_argument("--batch", type=int, default=8, help="GPU: timing batch")
    ap.add_argument("--backend", default="tensorrt", help="GPU: the worker's TensorRT "
                    "(tensorrt, tensorrt-rtx)")
    ap.add_argument("--iters", type=int, default=100, help="GPU: timed runs per engine")
    ap.add_argument("--route", default="auto", choices=["auto", "strongly-typed", "legacy-flags"],
                    help="GPU: the precision route (auto: strongly typed where the TensorRT has "
                         "it; legacy-flags on TensorRT <= 10: int8+fp16 is `--int8 --fp16`)")
    ap.add_argument("--tactics", default="",
                    help="GPU: tactic sources, e.g. EDGE_MASK_CONVOLUTIONS,JIT_CONVOLUTIONS "
                         "(default: TensorRT's set)")
    ap.add_argument("--work", help="folder for models, engines' inputs, the timing cache "
                    "(default: a new temporary folder)")
    ap.add_argument("--out", help="also write the JSON here")
    a = ap.parse_args(argv)
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="wb-bench-planner-"))
    work.mkdir(parents=True, exist_ok=True)
    n = a.samples or (32 if a.gpu else 16)
    a.max_builds = a.max_builds or (12 if a.gpu else 8)
    gpu = None
    if a.gpu:
        gpu = {"batch": a.batch, "iters": a.iters, "timing_cache": work / "timing.cache",
               "tactics": [t for t in a.tactics.split(",") if t] or None,
               "front_builds": a.gpu_builds, "backend": a.backend, "route": a.route}
    result: Dict[str, Any] = {"benchmark": "planner", "device": "gpu" if a.gpu else "cpu",
                              "latency": "measured P50" if a.gpu else "predicted",
                              "samples": n, "holdout": a.holdout, "max_builds": a.max_builds,
                              "bisect_groups": a.bisect_groups, "targets": a.targets,
                              "tactic_sources": a.tactics or None,
                              "route": a.route if a.gpu else None, "models": {}}
    t0 = time.monotonic()
    try:  # (SIGINT, e.g. `timeout -s INT`: the models done so far are still reported)
        for name in [x for x in a.models.split(",") if x]:
            sub = work / name
            sub.mkdir(exist_ok=True)
            case = make_case(name, sub, n, image=a.image or (224 if a.gpu else 32),
                             seq=a.seq or (128 if a.gpu else 16),
                             layers=a.bert_layers or (12 if a.gpu else 2))
            log(f"{name}: {case.about}")
            result["models"][name] = run_case(case, sub, holdout=a.holdout,
                                              max_builds=a.max_builds, gpu=gpu,
                                              bisect_groups=a.bisect_groups,
                                              targets=[t for t in a.targets.split(",") if t])
            if a.out:
                Path(a.out).write_text(json.dumps(result, indent=1))
    except KeyboardInterrupt:
        result["interrupted"] = f"after {time.monotonic() - t0:.0f} s, in model " \
                                f"{len(result['models']) + 1} of {len(a.models.split(','))}"
        log(f"interrupted: {result['interrupted']}")
    result["seconds"] = round(time.monotonic() - t0, 1)
    if a.out:
        Path(a.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
