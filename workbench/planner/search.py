"""The precision planner: the fastest precision plan within an accuracy budget, measured on
samples that were not searched on, answered as ONNX node lists.

    p = plan("model.onnx", data="samples.npz", budget="1%", metric="top1",
             latency_profiles="profiles/")
    p.fp32_nodes           # what `workbench precision --to fp16 --exclude` keeps in FP32
    p.commands["precision"]

Steps, each candidate one evaluation (the conversion `workbench precision` makes, run on CPU
by the emulation `compare` uses: FP16/BF16 rounding, Q/DQ fake-quant), at most `max_builds`:
1. split the samples: a search set and a held-back set (every `1/holdout`-th sample);
2. sensitivity: each region alone in the low precision, on the search set;
3. greedy: regions by latency gain per unit of accuracy loss (gain predicted from recorded
   per-layer profiles, `workbench.timing.predict`; without them the regions' weight sizes
   rank them, and no latency is claimed), each added while the search-set loss stays within
   budget; every accepted step is a point of the front;
4. verification: the front's points on the held-back set, fastest first; the plan is the
   fastest that meets the budget there (none: the all-FP32 model, said so).
"""
from __future__ import annotations

import math
import shlex
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.model import ModelLike, as_model
from workbench.precision import table
from workbench.planner.regions import engine_regions, graph_regions, label, merge_to

Feed = Dict[str, np.ndarray]


@dataclass
class Candidate:
    """One evaluated plan: regions kept in FP32 (indices), losses, predicted latency."""

    kept: Tuple[int, ...]
    search_loss: float
    latency_ms: Optional[float]
    held_loss: Optional[float] = None
    step: str = ""

    def to_dict(self) -> Dict[str, Any]:
        return {"kept_regions": list(self.kept), "search_loss": _j(self.search_loss),
                "held_loss": None if self.held_loss is None else _j(self.held_loss),
                "latency_ms": self.latency_ms, "step": self.step}


@dataclass
class Plan:
    """The planner's answer (see the module docstring)."""

    model: str
    target: str
    metric: str
    budget: float
    regions: List[List[str]]
    region_source: str            # "engine layers" or "graph"
    low_nodes: List[str]          # computed in `target` (with a fallback: the quantized ones)
    fp32_nodes: List[str]         # kept in FP32: `precision --exclude`
    held_loss: float              # the budget is checked on this (held-back samples)
    search_loss: float
    passed: bool
    latency_ms: Optional[float]   # predicted (never measured here)
    latency_note: str
    uniform_ms: Dict[str, float]
    front: List[Candidate]
    sensitivity: List[float]
    evaluations: int
    max_builds: int
    samples: Dict[str, List[int]]  # sample indices of each split
    seconds: float = 0.0
    output: Optional[str] = None
    latency_profiles: Optional[str] = None
    chosen: Optional[int] = None  # the plan's index in `front`
    commands: Dict[str, str] = field(default_factory=dict)
    notes: List[str] = field(default_factory=list)
    fallback: Optional[str] = None  # the float precision of the nodes without Q/DQ, or None
    fallback_nodes: List[str] = field(default_factory=list)  # computed in `fallback`
    # with a fallback: the nodes that compute in `target` wherever they are not kept in FP32
    quantized_nodes: List[str] = field(default_factory=list)

    def precision_of(self, node: str, kept: bool) -> str:
        """The precision a plan's node computes in: FP32 where `kept`, else the target, or
        with a fallback the target where quantized and the fallback elsewhere."""
        if kept:
            return table.BASE
        if self.fallback and node not in set(self.quantized_nodes):
            return self.fallback
        return self.target

    @property
    def kept_regions(self) -> List[List[str]]:
        kept = set(self.fp32_nodes)
        return [r for r in self.regions if r and all(n in kept for n in r)]

    def to_dict(self) -> Dict[str, Any]:
        return {"model": self.model, "target": self.target, "metric": self.metric,
                "budget": self.budget, "passed": self.passed, "held_loss": _j(self.held_loss),
                "search_loss": _j(self.search_loss), "latency_ms": self.latency_ms,
                "latency": "predicted" if self.latency_ms is not None else None,
                "latency_note": self.latency_note, "uniform_ms": self.uniform_ms,
                "fallback": self.fallback,
                "nodes": {self.target: self.low_nodes, **({self.fallback: self.fallback_nodes}
                                                          if self.fallback else {}),
                          "fp32": self.fp32_nodes},
                "kept_regions": [label(r) for r in self.kept_regions],
                "regions": len(self.regions), "region_source": self.region_source,
                "sensitivity": [{"region": label(r), "loss": _j(s)}
                                for r, s in zip(self.regions, self.sensitivity)],
                "front": [c.to_dict() for c in self.front], "chosen": self.chosen,
                "evaluations": self.evaluations,
                "max_builds": self.max_builds, "samples": self.samples,
                "seconds": round(self.seconds, 2), "output": self.output,
                "commands": self.commands, "notes": self.notes}


def _j(v: float) -> Any:
    v = float(v)
    return v if math.isfinite(v) else str(v)


# ----------------------------------------------------------------------------- pieces
def split_samples(feeds: Sequence[Feed], batched: Optional[set], holdout: float
                  ) -> Tuple[List[Feed], List[Feed], Dict[str, List[int]]]:
    """One feed per sample, then every k-th sample (k = round(1/holdout)) held back, at
    least one, at least one left to search on."""
    one: List[Feed] = []
    for f in feeds:
        keys = set(f) if batched is None else set(batched) & set(f)
        n = min((len(f[k]) for k in keys if np.ndim(f[k])), default=1) if keys else 1
        for i in range(n):
            one.append({k: (v[i:i + 1] if k in keys and np.ndim(v) else v)
                        for k, v in f.items()})
    if len(one) < 2:
        raise WorkbenchError("the planner needs at least 2 samples (a search set and a "
                             "held-back set)", field="data",
                             hint="give more samples in the .npz (axis 0 is the sample)")
    k = max(2, int(round(1 / max(min(holdout, 0.5), 1e-3))))
    held = [i for i in range(len(one)) if i % k == k - 1] or [len(one) - 1]
    search = [i for i in range(len(one)) if i not in held]
    return ([one[i] for i in search], [one[i] for i in held],
            {"search": search, "held_back": held})


def default_metric(proto: Any) -> str:
    """top1 when every output is class scores (`verdict.output_kind`), else cosine."""
    from workbench.runtime.verdict import output_kind

    kinds = []
    for o in proto.graph.output:
        dims = [d.dim_value if d.HasField("dim_value") else 2
                for d in o.type.tensor_type.shape.dim]
        kinds.append(output_kind(o.name, dims))
    return "top1" if kinds and all(k == "logits" for k in kinds) else "cosine"


def _weight_sizes(proto: Any, regions: List[List[str]]) -> List[float]:
    sizes = {i.name: float(np.prod(i.dims)) if len(i.dims) else 1.0
             for i in proto.graph.initializer}
    nodes = {n.name: n for n in proto.graph.node}
    return [sum(sizes.get(i, 0.0) for n in r for i in nodes[n].input) + len(r) for r in regions]


class _Evaluator:
    """Converts and runs candidates (the conversion `precision` makes, the runner `compare`
    picks), counting evaluations against the bound."""

    def __init__(self, model: str, target: str, search: List[Feed], held: List[Feed],
                 metric: Any, calibration: Any, limit: int, workdir: str,
                 fallback: Optional[str] = None) -> None:
        from workbench.runtime.runners import OnnxRuntimeRunner

        self.model, self.target, self.metric = model, target, metric
        self.fallback = fallback  # (the conversion's: INT8 where quantized, this elsewhere)
        self.search, self.held = search, held
        self.calibration = calibration
        self.limit, self.count = limit, 0
        self.dir = Path(workdir)
        ref = OnnxRuntimeRunner(model)
        self.ref_search = ref.infer_all(search)
        self.ref_held = ref.infer_all(held)
        self.cache: Dict[Tuple[Tuple[str, ...], str], float] = {}
        self.op_types: Optional[Dict[str, str]] = None

    def quantizes(self, exclude: Sequence[str]) -> bool:
        """Does a node outside `exclude` take Q/DQ pairs (`precision.quantize.QUANT_OPS`)?"""
        skip = set(exclude)
        return any(n not in skip for n in self.quantized())

    def quantized(self) -> List[str]:
        """The nodes the quantizer puts Q/DQ in front of (`precision.quantize.QUANT_OPS`)."""
        from workbench.precision.quantize import QUANT_OPS

        if self.op_types is None:  # (the structure only: no weights held)
            proto = as_model(self.model).proto
            self.op_types = {n.name: n.op_type for n in proto.graph.node}
        return [n for n, op in self.op_types.items() if op in QUANT_OPS]

    def left(self) -> int:
        return self.limit - self.count

    def convert(self, exclude: Sequence[str]) -> Any:
        from workbench.precision.spec import PrecisionSpec
        from workbench.precision.transform import convert

        spec = PrecisionSpec(target=self.target, exclude_nodes=list(exclude),
                             calibration=self.calibration, fallback=self.fallback)
        return convert(self.model, spec.target, measure=False, **spec.convert_kwargs())

    def loss(self, exclude: Sequence[str], on: str = "search") -> float:
        from workbench.runtime.runners import low_float_runner, make_runner
        from workbench.runtime.verdict import metric_loss

        key = (tuple(sorted(exclude)), on)
        if key in self.cache:
            return self.cache[key]
        if table.is_quantized(self.target) and not self.fallback and \
                not self.quantizes(exclude):
            self.cache[key] = 0.0  # (no Q/DQ to place: the candidate is the FP32 model)
            return 0.0
        if self.count >= self.limit:
            raise _OutOfBuilds()
        self.count += 1
        res = self.convert(exclude)
        path = self.dir / f"cand{self.count}.onnx"
        res.save(path)
        feeds, ref = (self.search, self.ref_search) if on == "search" else \
            (self.held, self.ref_held)
        got = make_runner(low_float_runner(str(path)), str(path)).infer_all(feeds)
        path.unlink()
        v = metric_loss(self.metric, ref, got, list(ref[0]))
        v = float(v) if v == v else math.inf  # (NaN: no answer, the worst loss)
        self.cache[key] = v
        return v


class _OutOfBuilds(Exception):
    pass


def add_uniform(front: List[Candidate], ev: "_Evaluator", budget: float,
                latency_ms: Optional[float], target: str) -> None:
    """The uniform plan (every region in `target`) as a candidate of the front when the greedy
    pass did not reach it and it meets the budget on the search set: the plan is then never
    slower than the all-`target` engine where that engine meets the budget."""
    if any(not c.kept for c in front) or ev.left() <= 1:
        return
    loss = ev.loss([])
    if loss <= budget:
        front.append(Candidate((), loss, latency_ms, step=f"all {target.upper()}"))


# ----------------------------------------------------------------------------- the planner
class _Space:
    """The regions searched over and the latency model (None: no latency predicted): what a
    set of kept (FP32) regions excludes and how fast it is predicted to run."""

    def __init__(self, regions: List[List[str]], latency: Any, target: str,
                 fallback: Optional[str] = None, quantized: Sequence[str] = ()) -> None:
        self.regions, self.latency, self.target = regions, latency, target
        self.everything = tuple(range(len(regions)))
        # with a fallback: the nodes computed in `target` (the rest in `fallback`)
        self.fallback, self.quantized = fallback, set(quantized)

    def exclude_of(self, kept: Sequence[int]) -> List[str]:
        """The nodes of the kept regions, in region order: `precision --exclude`."""
        return [n for i in sorted(kept) for n in self.regions[i]]

    def lat(self, kept: Sequence[int]) -> Optional[float]:
        """The predicted latency with the kept regions in FP32 (None without profiles)."""
        if self.latency is None:
            return None
        assign = {n: table.BASE for n in self.exclude_of(kept)}
        return self.latency.predict(assign, default=self.target, fallback=self.fallback,
                                    quantized=self.quantized if self.fallback else None)

    def split(self, low: Sequence[str]) -> Tuple[List[str], List[str]]:
        """(the nodes in `target`, those in the fallback) of the nodes not kept in FP32."""
        if not self.fallback:
            return list(low), []
        return ([n for n in low if n in self.quantized],
                [n for n in low if n not in self.quantized])


def _model_file(model: ModelLike, target: str, data: Any) -> Tuple[str, str]:
    """(the model's file, the lowered target): refuses a model with no file, a target that is
    not a lower precision, and no samples, before any work."""
    path = as_model(model).path  # (the plan's candidates are written from the file)
    if path is None or not Path(path).is_file():
        raise WorkbenchError("the planner needs the model as a file", file=str(path or model),
                             hint="save the model first (workbench.core.model.save_model) and "
                                  "pass its path")
    target = str(target).lower()
    if not (table.is_low_float(target) or table.is_quantized(target)):
        raise WorkbenchError(f"target '{target}' is not a lower precision", field="--to",
                             hint="fp16, bf16, int8 or fp8")
    if data is None:
        raise WorkbenchError("the planner needs samples to measure accuracy on",
                             field="--data", hint="pass SAMPLES.npz (axis 0 is the sample)")
    return str(path), target


def _regions(model: str, proto: Any, target: str, latency_profiles: Any, max_builds: int,
             notes: List[str]) -> Tuple[List[List[str]], str, Any]:
    """(regions, their source, the latency model): the recorded profiles' engine layers where
    they hold a `target` engine, else the graph's regions (no latency); merged to fit the
    bound on evaluations."""
    latency = None
    if latency_profiles is not None:
        from workbench.timing.predict import LatencyModel, find_profiles

        files = find_profiles(latency_profiles, model)
        if files:
            latency = LatencyModel.from_files(files, onnx=model)
        else:
            notes.append(f"no recorded profile for this model in {latency_profiles}")
    if latency is not None and target in latency.node_ms:
        regions = engine_regions(latency, proto)
        source = "engine layers"
    else:
        regions = graph_regions(proto)
        source = "graph"
        if latency is not None:
            notes.append(f"the recorded profiles have no {target} engine: no latency predicted")
            latency = None
    merged = merge_to(regions, max(1, (max_builds - 4) // 2))
    if len(merged) < len(regions):
        notes.append(f"{len(regions)} regions merged into {len(merged)} groups to stay within "
                     f"--max-builds {max_builds}")
        regions = merged
    return regions, source, latency


def _calibration(calibration: Any, data: Any, target: str, notes: List[str]) -> Any:
    """The calibration data: given, else (quantized targets) the samples themselves, noted."""
    calib = calibration if calibration is not None else (data if table.is_quantized(target)
                                                         else None)
    if calibration is None and calib is not None:  # (what `precision --calib DATA` uses: the
        # planned model is reproducible bit for bit; give --calib to keep them apart)
        notes.append(f"{target.upper()} calibrated on all of the data, held-back samples "
                     "included (as `workbench precision --calib` with the same file); pass "
                     "--calib for separate calibration data")
    return calib


def _sensitivity(ev: _Evaluator, space: _Space, sens: List[float], notes: List[str]) -> None:
    """Step 2: each region alone in the target precision, its search-set loss into `sens`
    (filled in place: a cut-short pass keeps what it measured)."""
    for i in range(len(space.regions)):
        if ev.left() <= 2:
            notes.append("sensitivity pass cut short by --max-builds")
            break
        sens[i] = ev.loss(space.exclude_of([j for j in space.everything if j != i]))


def _greedy(ev: _Evaluator, space: _Space, proto: Any, sens: List[float], b: float,
            front: List[Candidate], notes: List[str], say: Callable[[str], None]) -> None:
    """Step 3: regions within budget alone, by gain per unit of loss, each lowered while the
    search-set loss stays within budget; every accepted step appended to `front`."""
    regions, everything, lat = space.regions, space.everything, space.lat
    if space.latency is not None:
        full = lat(everything) or 0.0
        gain = [full - (lat([j for j in everything if j != i]) or full)
                for i in range(len(regions))]
    else:
        gain = _weight_sizes(proto, regions)
        notes.append("no latency predicted (no recorded per-layer profiles of this "
                     "model's uniform engines: --latency-profiles DIR): regions ranked by "
                     "their weights' size")
    order = sorted((i for i in range(len(regions)) if sens[i] <= b),
                   key=lambda i: -gain[i] / (sens[i] + 1e-6))
    kept = set(everything)
    front.append(Candidate(everything, 0.0, lat(everything), step="all FP32"))
    say(f"greedy: {len(order)} region(s) within budget alone")
    for i in order:
        if ev.left() <= 1:
            notes.append("greedy search cut short by --max-builds")
            break
        trial = kept - {i}
        loss = ev.loss(space.exclude_of(trial))
        if loss <= b:
            kept = trial
            front.append(Candidate(tuple(sorted(kept)), loss, lat(kept),
                                   step=f"+{label(regions[i])}"))


def _verify(ev: _Evaluator, space: _Space, front: List[Candidate], b: float,
            notes: List[str]) -> Optional[Candidate]:
    """Step 4: the front's points on the held-back samples, fastest first; the first within
    budget (None: none was)."""
    ranked = sorted(front, key=lambda c: (c.latency_ms if c.latency_ms is not None
                                          else len(c.kept)))
    for c in ranked:
        if ev.left() <= 0 and (tuple(sorted(space.exclude_of(c.kept))), "held") not in ev.cache:
            notes.append("verification cut short by --max-builds")
            break
        c.held_loss = ev.loss(space.exclude_of(c.kept), on="held")
        if c.held_loss <= b:
            return c
    return None


def plan(model: ModelLike, data: Any = None, *, budget: Any = "1%", metric: Any = None,
         target: str = "fp16", latency_profiles: Any = None, max_builds: int = 40,
         holdout: float = 0.25, samples: int = 64, output: Any = None,
         calibration: Any = None, on_step: Optional[Callable[[str], None]] = None,
         fallback: Optional[str] = None) -> Plan:
    """Plan the fastest `target` precision (FP16 / BF16 / INT8) with regions kept in FP32,
    within `budget` of `metric` on held-back samples (see the module docstring). `data`: the
    samples (.npz path or feeds); `metric`: top1 | top5 | cosine | rel | MODULE:FUNC | a
    callable (reference, candidate) -> loss; `output`: write the planned model there.
    `fallback` (a quantized target only, e.g. "fp16"): the regions not kept in FP32 compute
    in `target` where quantized and in `fallback` elsewhere (`convert(..., fallback=)`)."""
    from workbench.runtime.runners import batched_inputs, limit_samples
    from workbench.runtime.verdict import parse_budget, resolve_metric

    t0 = time.monotonic()
    say = on_step or (lambda s: None)
    model, target = _model_file(model, target, data)
    from workbench.precision.spec import check_fallback

    fallback = check_fallback(target, fallback, field="--fallback")
    b = parse_budget(budget)
    b = 0.01 if b is None else b
    proto = as_model(model).proto  # (the structure: no weights held)
    m = resolve_metric(metric) if metric is not None else default_metric(proto)
    mname = getattr(m, "__name__", str(m))
    notes: List[str] = []
    if metric is None:
        notes.append(f"metric: {mname} (the default for these outputs; --metric names another)")
    from workbench.compare.layer_compare import sample_feeds

    feeds = sample_feeds(model, calibration=data, allow_random=False)
    batched = batched_inputs(model)
    feeds = limit_samples(feeds, samples, batched)
    search, held, split = split_samples(feeds, batched, holdout)
    regions, source, latency = _regions(model, proto, target, latency_profiles, max_builds,
                                        notes)
    all_nodes = [n for r in regions for n in r]
    calib = _calibration(calibration, data, target, notes)
    tmp = tempfile.TemporaryDirectory(prefix="wb-plan-")
    ev = _Evaluator(model, target, search, held, m, calib, max_builds, tmp.name, fallback)
    space = _Space(regions, latency, target, fallback, ev.quantized() if fallback else ())
    everything = space.everything
    front: List[Candidate] = []
    sens: List[float] = [math.inf] * len(regions)
    try:
        say(f"sensitivity: {len(regions)} region(s) alone in {target}")
        _sensitivity(ev, space, sens, notes)
        _greedy(ev, space, proto, sens, b, front, notes, say)
        add_uniform(front, ev, b, space.lat(()), target + (f"+{fallback}" if fallback else ""))
        chosen = _verify(ev, space, front, b, notes)
    except _OutOfBuilds:
        notes.append("stopped at --max-builds")
        chosen = None
    if chosen is None:  # nothing verified within budget: the FP32 model
        chosen = front[0] if front else Candidate(everything, 0.0, space.lat(everything))
        if chosen.held_loss is None:
            chosen.held_loss = 0.0
        notes.append(f"no {target} plan met the budget on the held-back samples: every "
                     "region stays FP32")
    fp32_nodes = space.exclude_of(chosen.kept)
    kept_set = set(fp32_nodes)
    low, fb_nodes = space.split([n for n in all_nodes if n not in kept_set])
    out_path = None
    if output is not None:
        res = ev.convert(fp32_nodes)
        out_path = str(res.save(Path(output), source=model))
    p = Plan(model=model, target=target, metric=mname, budget=b, regions=regions,
             region_source=source, low_nodes=low, fp32_nodes=fp32_nodes,
             held_loss=float(chosen.held_loss), search_loss=float(chosen.search_loss),
             passed=bool(chosen.held_loss <= b), latency_ms=chosen.latency_ms,
             latency_note=(latency.describe() if latency is not None else
                           "no latency predicted (no recorded profiles)"),
             uniform_ms={q: latency.uniform(q) for q in latency.precisions}
             if latency is not None else {}, front=front, sensitivity=sens,
             evaluations=ev.count, max_builds=max_builds, samples=split,
             seconds=time.monotonic() - t0, output=out_path, notes=notes,
             latency_profiles=None if latency_profiles is None else str(latency_profiles),
             chosen=next((i for i, c in enumerate(front) if c is chosen), None),
             fallback=fallback, fallback_nodes=fb_nodes,
             quantized_nodes=sorted(space.quantized) if fallback else [])
    p.commands = commands(p, data if isinstance(data, (str, Path)) else None)
    tmp.cleanup()
    return p


def commands(p: Plan, data: Any = None) -> Dict[str, str]:
    """How to act on a plan: the `workbench precision` line, ModelOpt AutoCast's
    nodes_to_exclude, trtexec / Polygraphy per-layer flags (layers named as the ONNX nodes,
    TensorRT's default) where the TensorRT here has per-layer precision, the reproduce line."""
    q = shlex.quote
    ex = " ".join(f"--exclude {q(n)}" for n in p.fp32_nodes)
    calib = f" --calib {q(str(data))}" if data and table.is_quantized(p.target) else ""
    fb = f" --fallback {p.fallback}" if p.fallback else ""
    out = {"precision": f"workbench precision {q(p.model)} --to {p.target}{fb} {ex}{calib} "
                        "-o OUT.onnx".replace("  ", " "),
           "autocast_nodes_to_exclude": repr(list(p.fp32_nodes)),
           "reproduce": f"workbench plan {q(p.model)}"
                        + (f" --data {q(str(data))}" if data else "")
                        + f" --to {p.target}{fb} --budget {p.budget:g} --metric {q(p.metric)} "
                          f"--max-builds {p.max_builds}"
                        + (f" --latency-profiles {q(p.latency_profiles)}"
                           if p.latency_profiles else "")}
    flags = layer_precision_flags()
    if flags:
        layers = ",".join(f"{n}:fp32" for n in p.fp32_nodes)
        poly = " ".join(f"{n}:float32" for n in p.fp32_nodes)
        flag = _flags(p, "trtexec")
        out["trtexec"] = (f"trtexec --onnx={q(p.model)} {flag} --precisionConstraints=obey"
                          + (f" --layerPrecisions={q(layers)}" if layers else ""))
        out["polygraphy"] = (f"polygraphy convert {q(p.model)} {_flags(p, 'polygraphy')} "
                             "--precision-constraints obey"
                             + (f" --layer-precisions {poly}" if poly else "") + " -o OUT.engine")
    else:
        out["trtexec"] = ("(the TensorRT here has no per-layer precision constraints: build the "
                          "planned ONNX, `workbench precision` above, instead)")
    return out


def _flags(p: Plan, tool: str) -> str:
    """The builder-flag route's precision flags of a plan for `tool` ("trtexec" or
    "polygraphy"): the target's and, with a fallback, the fallback's (`--int8 --fp16`)."""
    rows = [table.get(p.target)] + ([table.get(p.fallback)] if p.fallback else [])
    return " ".join(getattr(r, tool) or f"--{r.name}" for r in rows)


def layer_precision_flags() -> bool:
    """Does the TensorRT in use still take per-layer precisions (BuilderFlag
    OBEY_PRECISION_CONSTRAINTS)? Probed, never read from a version string."""
    for mod in ("tensorrt", "tensorrt_rtx"):
        try:
            trt = __import__(mod)
        except Exception:
            continue
        flag = getattr(trt, "BuilderFlag", None)
        if flag is not None and getattr(flag, "OBEY_PRECISION_CONSTRAINTS", None) is not None:
            return True
    return False
