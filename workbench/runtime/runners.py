"""Runners: one way to run a model on a feed and get its outputs (Polygraphy's BaseRunner, small).

A `Runner` has a name, its input metadata and `infer(feed) -> {output name: array}`; with
`mark_all=True` every node output comes back too (Polygraphy's `--mark all`), in topological order.
`infer` feeds only the declared inputs and casts float feeds to the declared float type (FP16/BF16
inputs of a model converted without keep-io), so every caller hands the same FP32 data to every
runner. Three runners live here:
- `OnnxRuntimeRunner`: onnxruntime CPU, the graph as written (no graph optimisations), one session
  factory (`session`) with a threads setting; it runs in the onnxruntime child process
  (`workbench.runtime.ortchild`: a crash, hang or memory blow-up there is a one-line `OrtError`, never the
  end of the calling kernel; what onnxruntime refuses raises `OrtFailed` with its own text, as
  in-process) unless `isolated=False` (or $WORKBENCH_ORT_ISOLATE=0);
- `ReferenceRunner`: onnx's reference evaluator (numpy), which computes FP16/BF16 tensors in that
  arithmetic like a GPU does; onnxruntime's CPU provider upcasts most FP16 ops to FP32 and would
  hide overflow;
- `EmulatedRunner`: onnxruntime in FP32 with every low-float value rounded and saturated as the
  low type stores it (`workbench.runtime.emulation`): FP16 storage with FP32 accumulation, fast.
Elsewhere, with the same interface: `TensorRTRunner` (a TensorRT engine run through the worker,
`workbench.runtime.trtrunner`), `ChainedRunner` (a model run segment by segment, `workbench.runtime.chain`) and
`RecordedRunner` (an engine's recorded outputs, `workbench.compare.engine_compare`).
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from workbench.core.model import ModelLike, as_model

Feed = Dict[str, np.ndarray]
RUNNERS = ("onnxruntime", "emulate", "reference")
LOW_FLOAT_TYPES = (10, 16)  # TensorProto.FLOAT16, BFLOAT16


# ----------------------------------------------------------------------------- models
def has_low_float(proto: Any) -> bool:
    """Does the graph, or a subgraph in it (a Loop body lowered to FP16), compute in FP16/BF16
    (initializers, casts or value infos)?"""
    from workbench.core.graphindex import computed_types

    return bool(computed_types(proto.graph) & set(LOW_FLOAT_TYPES))


def mark_all_outputs(proto: Any) -> Tuple[Any, List[str], Dict[str, int]]:
    """A copy of `proto` whose graph outputs are every node output (Polygraphy's `mark all`).
    Returns (marked model, node outputs in topological order, inferred elem types by name)."""
    import copy

    import onnx

    m = copy.deepcopy(proto)
    try:
        typed = onnx.shape_inference.infer_shapes(m)
    except Exception:
        typed = m
    types = {vi.name: vi.type.tensor_type.elem_type
             for vi in list(typed.graph.value_info) + list(typed.graph.output)
             + list(typed.graph.input)}
    existing = {o.name for o in m.graph.output}
    order: List[str] = []
    for node in m.graph.node:
        for o in node.output:
            if not o:
                continue
            order.append(o)
            if o in existing:
                continue
            if types.get(o):
                m.graph.output.append(onnx.helper.make_tensor_value_info(o, types[o], None))
            else:
                m.graph.output.append(onnx.ValueInfoProto(name=o))
            existing.add(o)
    return m, order, types


# ----------------------------------------------------------------------------- feeds
@dataclass
class TensorMeta:
    """One input as a runner sees it: name, numpy dtype (None if exotic) and dims."""

    name: str
    dtype: Any
    shape: List[Any]


def _np_dtype(elem_type: int) -> Any:
    if elem_type == 16:
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    try:
        from onnx import helper

        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except Exception:
        return None


def input_metadata_of(proto: Any) -> Dict[str, TensorMeta]:
    """The graph inputs that are not initializers, with their declared dtype and dims."""
    inits = {t.name for t in proto.graph.initializer}
    out: Dict[str, TensorMeta] = {}
    for vi in proto.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                for d in tt.shape.dim] if tt.HasField("shape") else []
        out[vi.name] = TensorMeta(vi.name, _np_dtype(tt.elem_type), dims)
    return out


def cast_feed(meta: Dict[str, TensorMeta], feed: Feed) -> Feed:
    """Only the declared inputs; float arrays cast to the declared float type (FP16/BF16/FP32)."""
    out: Feed = {}
    for k, v in feed.items():
        if k not in meta:
            continue
        want = meta[k].dtype
        a = np.asarray(v)
        if want is not None and a.dtype.kind == "f" and a.dtype != want and \
                (want.kind == "f" or want.name == "bfloat16"):
            a = a.astype(want)
        out[k] = a
    return out


def batched_inputs(model: ModelLike) -> Optional[set]:
    """The inputs whose axis 0 is a batch (`workbench.core.inputs.leading_axes`): only they hold one
    entry per sample; an input the model fixes (indices [3], a table) is whole in every sample.
    An empty set when some input's dynamic axis 0 is not a batch (points [num_points, 4]): a
    feed is then one sample, never cut. None when no input has a dynamic axis 0 (static
    models: every input counts)."""
    from workbench.core.inputs import leading_axes

    try:
        axes = leading_axes(as_model(model).with_weights())
    except Exception:
        return None
    if not axes.splits:
        return set()
    return set(axes.batch) or None


def samples_in(feed: Feed, batched: Optional[Iterable[str]] = None) -> int:
    """Samples in one feed: the smallest first axis (1 for scalars) of its `batched` inputs
    (`batched_inputs`; None: of every input; empty: the feed is one sample)."""
    if batched is not None and not set(batched):
        return 1 if feed else 0
    keys = set(batched) & set(feed) if batched is not None else set()
    vals = [v for k, v in feed.items() if not keys or k in keys]
    return min((len(v) if np.ndim(v) else 1 for v in vals), default=0)


def limit_samples(feeds: Sequence[Feed], n: int, batched: Optional[Iterable[str]] = None
                  ) -> List[Feed]:
    """At most `n` samples in total, in order, split along axis 0 of the `batched` inputs
    (None: every input; the others are whole in each sample; empty: each feed is one sample,
    never cut). The reference evaluator is
    slow; every comparison that limits samples uses this, so they all see the same data."""
    keys = set(batched) if batched is not None else None
    out: List[Feed] = []
    left = n
    for f in feeds:
        if left <= 0:
            break
        k = samples_in(f, keys)
        if k > left:
            use = keys & set(f) if keys else set(f)
            f = {name: (v[:left] if name in use else v) for name, v in f.items()}
            k = left
        out.append(f)
        left -= k
    return out


# ----------------------------------------------------------------------------- runners
class Runner:
    """Runs one model. Subclasses set `name` and implement `_start` and `_infer`."""

    name = "runner"

    def __init__(self, model: Any, *, mark_all: bool = False) -> None:
        self.model = model
        self.mark_all = mark_all
        self.order: List[str] = []  # node outputs in topological order (mark_all)
        self._started = False

    def _start(self) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def _infer(self, feed: Feed, names: Optional[Sequence[str]] = None
               ) -> Feed:  # pragma: no cover - interface
        raise NotImplementedError

    def start(self) -> "Runner":
        """Load the model (sessions are built once, on first use)."""
        if not self._started:
            self._start()
            self._started = True
        return self

    def input_metadata(self) -> Dict[str, TensorMeta]:  # pragma: no cover - interface
        raise NotImplementedError

    def warm(self) -> None:
        """Start what runs the model in the background, if anything (the onnxruntime child),
        so its start-up overlaps the caller's own preparation."""

    def infer(self, feed: Feed, names: Optional[Sequence[str]] = None) -> Feed:
        """Outputs by name for one feed (declared inputs only, floats cast to their type);
        `names`: only these outputs (marked tensors are fetched a chunk at a time)."""
        self.start()
        out = self._infer(cast_feed(self.input_metadata(), feed), names)
        if names is not None:
            keep = set(names)
            out = {k: v for k, v in out.items() if k in keep}
        return out

    def infer_all(self, feeds: Sequence[Feed]) -> List[Feed]:
        return [self.infer(f) for f in feeds]

    def stream(self, feeds: Sequence[Feed], groups: Sequence[Sequence[str]]
               ) -> Iterator[List[Feed]]:
        """For each group of tensor names (topological order), their values for every feed,
        one group at a time (a caller compares and drops each before the next). Here: one
        run per group; graph runners override it to run each node once (`workbench.runtime.segments`)."""
        for grp in groups:
            yield [self.infer(f, grp) for f in feeds]


_IR_TOO_NEW = re.compile(r"Unsupported model IR version: (\d+), max supported IR version: (\d+)")


def older_ir_copy(src: Any, err: BaseException) -> Optional[Tuple[Any, str]]:
    """onnxruntime older than the exporter refuses the IR version stamp ('Unsupported model IR
    version: 14, max supported IR version: 13'): the same graph stamped with the newest IR it
    reads (an opset it lacks still fails, with its own words), and the note that says so. None
    when `err` is not that, or the model keeps its weights in external files (a copy in memory
    would lose them)."""
    m = _IR_TOO_NEW.search(str(err))
    if m is None:
        return None
    proto = as_model(src).with_weights()
    if any(t.data_location == 1 for t in proto.graph.initializer):  # (EXTERNAL)
        return None
    have, top = int(m.group(1)), int(m.group(2))
    copy = type(proto)()
    copy.CopyFrom(proto)
    copy.ir_version = top
    return copy, (f"the model's IR version {have} is newer than this onnxruntime reads "
                  f"({top}): it ran stamped IR {top}, the graph unchanged")


def session(proto: Any, threads: Optional[int] = 1) -> Any:
    """An onnxruntime CPU session running the graph as written (no graph optimisations);
    a path is handed to onnxruntime as is (no re-serialising). threads=None: ORT's default."""
    import onnxruntime as ort

    from workbench.runtime.ortserver import custom_op_libraries, session_options

    so = session_options(threads, custom_op_libraries())  # the child's options, in this process
    src = str(proto) if isinstance(proto, (str, os.PathLike)) else proto.SerializeToString()
    return ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])


_ORT_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16,
              "tensor(double)": np.float64, "tensor(int64)": np.int64, "tensor(int32)": np.int32,
              "tensor(int8)": np.int8, "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_}


class OnnxRuntimeRunner(Runner):
    """onnxruntime CPU. `model`: a ModelProto, a Model or a path (a path is handed to
    onnxruntime as is unless mark_all needs a changed copy). threads=None: ORT's default.
    isolated (default: `ortchild.isolated_by_default()`): run in the shared onnxruntime child
    process, with its time (`timeout` s) and memory (`max_rss` bytes) limits; a crash there
    becomes `ortchild.OrtCrashed` naming the model and, when a re-run pins it, the node."""

    name = "onnxruntime"

    def __init__(self, model: Any, *, mark_all: bool = False, threads: Optional[int] = None,
                 outputs: Optional[Sequence[str]] = None, isolated: Optional[bool] = None,
                 timeout: Optional[float] = None, max_rss: Optional[int] = None) -> None:
        super().__init__(model, mark_all=mark_all)
        self.threads = threads
        self.outputs = list(outputs) if outputs else None
        self.sess: Any = None
        if isolated is None:
            from workbench.runtime.ortchild import isolated_by_default

            isolated = isolated_by_default()
        self.isolated = isolated
        self.timeout, self.max_rss = timeout, max_rss
        self._key: Optional[str] = None
        self._meta: Dict[str, TensorMeta] = {}
        self._text: Optional[str] = None  # how errors name the model (default: its path/name)
        self._one_off = False  # a segment: its session is shared with no other runner
        self._weights: Dict[str, Any] = {}  # name -> WeightRef: weights fed from their file

    def _label(self) -> str:
        if self._text:
            return self._text
        m = self.model
        if isinstance(m, (str, os.PathLike)):
            return str(m)
        path = getattr(m, "path", None)
        if path:
            return str(path)
        name = getattr(getattr(m, "graph", None), "name", "")
        return f"model '{name}'" if name else "the model"

    def _start(self) -> None:
        src = self.model
        if self.mark_all:
            src, self.order, _ = mark_all_outputs(as_model(self.model).with_weights())
        elif not isinstance(src, (str, os.PathLike)):
            src = as_model(src).with_weights()
        if not isinstance(src, (str, os.PathLike)):  # weights held by reference: fed as
            from workbench.core import weights  # memmaps on every run, never serialized

            refs = weights.weight_refs(src)
            if refs:
                import onnx

                held = onnx.ModelProto()
                held.CopyFrom(src)
                src = weights.as_inputs(held)
                self._weights = refs
        self._src = src
        try:
            ins = self._open()
        except Exception as e:
            older = older_ir_copy(self._src, e)
            if older is None:
                raise
            self._src, self.ir_note = older  # an exporter newer than this onnxruntime
            ins = self._open()
        for name, typ, shape in ins:
            if name in self._weights:
                continue  # (fed by the runner itself)
            dt = np.dtype(_ORT_TYPES[typ]) if typ in _ORT_TYPES else None
            if typ == "tensor(bfloat16)":
                dt = _np_dtype(16)
            self._meta[name] = TensorMeta(name, dt, shape)

    ir_note: Optional[str] = None  # said when the model ran with an older IR version stamp

    def _open(self) -> List[Tuple[str, str, List[Any]]]:
        """Load `self._src` (here or in the child): the inputs' (name, type, shape)."""
        if not self.isolated:
            self.sess = session(self._src, threads=self.threads)
            self._names = self.outputs or [o.name for o in self.sess.get_outputs()]
            return [(i.name, i.type, list(i.shape)) for i in self.sess.get_inputs()]
        info = self._load()
        self._names = self.outputs or list(info["outputs"])
        return [(i["name"], i["type"], list(i["shape"])) for i in info["inputs"]]


    def _load(self) -> Dict[str, Any]:
        """Load the model into the shared child (cached there by model hash)."""
        from workbench.runtime.ortchild import default_child

        src = self._src
        data = str(src) if isinstance(src, (str, os.PathLike)) else src.SerializeToString()
        self._key, info = default_child().load(data, threads=self.threads, label=self._label(),
                                               timeout=self.timeout, max_rss=self.max_rss,
                                               private=self._one_off)
        return info

    def input_metadata(self) -> Dict[str, TensorMeta]:
        self.start()
        return self._meta

    def warm(self) -> None:
        if self.isolated:
            from workbench.runtime.ortchild import default_child

            default_child().warm()

    def close(self) -> None:
        """Drop the session (in the child: its cache entry and serialized model)."""
        if self._key is not None:
            from workbench.runtime.ortchild import default_child

            default_child().forget(self._key)
            self._key = None
        self.sess = None
        self._started = False

    def stream(self, feeds: Sequence[Feed], groups: Sequence[Sequence[str]]
               ) -> Iterator[List[Feed]]:
        """Each group's tensors, every node run once: the graph a segment at a time
        (`workbench.runtime.segments`), each segment a short-lived session; no full marked session."""
        from workbench.runtime import segments

        proto = as_model(self.model).with_weights()
        if not segments.segmentable(proto):  # (sequences cannot cross a cut): one marked
            marked = self  # session, every node output a graph output
            if not self.mark_all:
                marked = OnnxRuntimeRunner(self.model, threads=self.threads, mark_all=True,
                                           isolated=self.isolated, timeout=self.timeout,
                                           max_rss=self.max_rss)
                marked._text = self._label()
            try:
                yield from Runner.stream(marked, feeds, groups)
            finally:
                if marked is not self:
                    marked.close()
            return
        meta = input_metadata_of(proto)
        yield from segments.stream_segments(proto, [cast_feed(meta, f) for f in feeds], groups,
                                            self._run_segment)

    def _run_segment(self, model: Any, outputs: List[str], feeds: List[Feed]) -> List[Feed]:
        seg = OnnxRuntimeRunner(model, threads=self.threads, outputs=outputs,
                                isolated=self.isolated, timeout=self.timeout,
                                max_rss=self.max_rss)
        seg._text = self._label()  # errors name the model, and the node where one is pinned
        seg._one_off = True  # (another stream may run the same bytes at the same time)
        try:
            try:
                seg.start()
            except Exception as e:
                from workbench.core.errors import WorkbenchError

                if isinstance(e, WorkbenchError):
                    raise
                raise load_error(self.name, e, seg._text) from None
            outs = [seg._infer(f, outputs, last=k == len(feeds) - 1, reuse=True)
                    for k, f in enumerate(feeds)]
            for o in outs:  # kept tensors are fed on as they lie: nobody may write into them
                for a in o.values():
                    if isinstance(a, np.ndarray):
                        a.flags.writeable = False
            return outs
        finally:
            seg.close()

    def _infer(self, feed: Feed, names: Optional[Sequence[str]] = None,
               last: bool = False, reuse: bool = False) -> Feed:
        """last: the session is not needed after this run (the child drops it at once).
        reuse: feeds that are earlier runs' outputs, unchanged, are read where they lie (a
        segment's inputs: `workbench.runtime.segments` never writes into the tensors it keeps)."""
        want = list(names) if names is not None else self._names
        if self._weights:
            from workbench.core import weights

            feed = {**feed, **weights.feeds_for(self._weights, list(self._weights))}
        if not self.isolated:
            return dict(zip(want, _run_limited(self.sess, want, feed, self.timeout,
                                               self._label())))
        from workbench.runtime.ortchild import (LOCATE_ENV, OrtCrashed, OrtModelGone, OrtStopped,
                                        default_child, locate_crash)

        def run() -> Feed:
            return default_child().run(self._key or "", feed, want, label=self._label(),
                                       timeout=self.timeout, max_rss=self.max_rss, last=last,
                                       reuse=reuse)

        try:
            try:
                return run()
            except (OrtModelGone, OrtStopped):  # the child was closed since (or dropped the
                self._load()  # file, or was stopped for another run's limit): load again, once
                return run()
        except OrtCrashed as e:
            budget = float(os.environ.get(LOCATE_ENV) or 30)
            node = locate_crash(as_model(self._src).with_weights(), feed, budget_s=budget) if budget > 0 \
                else None
            where = (f"; a fresh process crashes again at node '{node}'" if node else
                     "; it could not be pinned to a node (the crash did not repeat in a fresh "
                     "process or is not inside one node)")
            if e.shared and not node:
                where += ("; another model was running in the same onnxruntime child when it "
                          "died: the crash may be that model's")
            raise OrtCrashed(e.message + where, returncode=e.returncode, log_tail=e.log_tail,
                             file=e.file, node=node, hint=e.hint, shared=e.shared) from None


def _run_limited(sess: Any, want: List[str], feed: Feed, timeout: Optional[float],
                 label: str) -> List[Any]:
    """An in-process run under the child's time limit (`timeout`, else $WORKBENCH_ORT_TIMEOUT,
    else 600 s): a timer sets onnxruntime's terminate flag, which it checks between nodes
    (inside Loop bodies too), and the run ends as a limit error naming the model."""
    import threading

    import onnxruntime as ort

    from workbench.runtime.ortchild import TIMEOUT_ENV, OrtLimitExceeded

    limit = float(timeout or os.environ.get(TIMEOUT_ENV) or 600)
    ro = ort.RunOptions()
    ro.log_severity_level = 4  # (the terminated run's error is ours to report, in one line)
    timer = threading.Timer(limit, setattr, (ro, "terminate", True))
    timer.daemon = True
    timer.start()
    try:
        return sess.run(want, feed, ro)
    except Exception:
        if ro.terminate:
            raise OrtLimitExceeded(
                f"onnxruntime exceeded its time limit of {limit:g} s while running the model "
                "and was stopped", file=label,
                hint=f"raise the limit (timeout=, ${TIMEOUT_ENV}) or run fewer samples") from None
        raise
    finally:
        timer.cancel()


class ReferenceRunner(Runner):
    """onnx's reference evaluator: FP16/BF16 computed in that arithmetic (overflow shows)."""

    name = "reference"

    def _start(self) -> None:
        from onnx.reference import ReferenceEvaluator

        self.proto = as_model(self.model).with_weights()
        self.ev = ReferenceEvaluator(self.proto)
        self._outputs = [o.name for o in self.proto.graph.output]
        if self.mark_all:
            self.order = [o for n in self.proto.graph.node for o in n.output if o]
        self._meta = input_metadata_of(self.proto)

    def input_metadata(self) -> Dict[str, TensorMeta]:
        self.start()
        return self._meta

    def _infer(self, feed: Feed, names: Optional[Sequence[str]] = None) -> Feed:
        import warnings

        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                if not self.mark_all:
                    return dict(zip(self._outputs,
                                    (np.asarray(v) for v in self.ev.run(None, feed))))
                outs = self.ev.run(None, feed, intermediate=True)
        except (TypeError, NotImplementedError, AttributeError, IndexError) as e:
            raise self._refused(e) from None
        keep = set(self.order) | set(self._outputs)
        return {k: np.asarray(v) for k, v in outs.items()
                if k in keep and isinstance(v, (np.ndarray, np.generic))}


    def _refused(self, e: BaseException) -> Any:
        """A run onnx's reference evaluator could not do (an op or an attribute form it does
        not implement): the tool's limit, said with the way around it."""
        import re

        from workbench.core.errors import WorkbenchError

        text = " ".join(str(e).split())
        op = re.search(r"\(operator '(\w+)'\)", text)
        what = f"the {op.group(1)} op here" if op else "this graph"
        return WorkbenchError(
            f"onnx's reference evaluator (the FP16/BF16 candidate runner) cannot run {what}: "
            f"{type(e).__name__}: {text[:200]}", category="tool",
            file=str(self.model) if isinstance(self.model, (str, os.PathLike)) else None,
            field="runner", hint="a limit of onnx's reference evaluator, not of the model: "
            "its low-float accuracy cannot be measured on the CPU here; build it and compare "
            "the engine on a GPU")


class EmulatedRunner(Runner):
    """An FP16/BF16 graph run by onnxruntime in FP32 with every low-float value rounded and
    saturated as stored in the low type (`workbench.runtime.emulation`): a GPU's FP16 storage with FP32
    accumulation, at onnxruntime's speed. Use `can_emulate` first; `start` raises otherwise."""

    name = "emulate"

    def __init__(self, model: Any, *, mark_all: bool = False,
                 threads: Optional[int] = None) -> None:
        super().__init__(model, mark_all=mark_all)
        self.threads = threads
        self._inner: Optional[OnnxRuntimeRunner] = None

    def _start(self) -> None:
        from workbench.runtime.emulation import emulate
        from workbench.core.errors import WorkbenchError

        proto = as_model(self.model).with_weights()
        em = emulate(proto, outputs="all" if self.mark_all else "graph")
        if em is None:
            raise WorkbenchError("this graph cannot be emulated in FP32 (low-float values "
                                 "inside control-flow bodies, or no low-float values)",
                                 field="runner", hint="use --runner reference")
        self.order = em.order if self.mark_all else []
        self._outputs = [o.name for o in proto.graph.output]
        names = list(dict.fromkeys(self._outputs + self.order))
        self._inner = OnnxRuntimeRunner(em.proto, threads=self.threads, outputs=names)
        self._inner.start()
        self._meta = input_metadata_of(proto)  # feeds keep the candidate's declared types

    def input_metadata(self) -> Dict[str, TensorMeta]:
        self.start()
        return self._meta

    def warm(self) -> None:
        from workbench.runtime.ortchild import default_child, isolated_by_default

        if isolated_by_default():
            default_child().warm()

    def _infer(self, feed: Feed, names: Optional[Sequence[str]] = None) -> Feed:
        assert self._inner is not None
        return self._inner._infer(_widened(feed), names)

    def stream(self, feeds: Sequence[Feed], groups: Sequence[Sequence[str]]
               ) -> Iterator[List[Feed]]:
        """Each group's tensors, the emulated graph run a segment at a time (each node once;
        no full marked session)."""
        from workbench.runtime.emulation import emulate
        from workbench.core.errors import WorkbenchError

        proto = as_model(self.model).with_weights()
        em = emulate(proto, outputs="graph")
        if em is None:
            raise WorkbenchError("this graph cannot be emulated in FP32 (low-float values "
                                 "inside control-flow bodies, or no low-float values)",
                                 field="runner", hint="use --runner reference")
        meta = input_metadata_of(proto)
        inner = OnnxRuntimeRunner(em.proto, threads=self.threads)
        inner._text = (f"{self.model} (emulated)" if isinstance(self.model, (str, os.PathLike))
                       else "the emulated candidate")
        yield from inner.stream([_widened(cast_feed(meta, f)) for f in feeds], groups)


def _widened(feed: Feed) -> Feed:
    """Low-float feeds as FP32 (the emulated graph rounds them on entry)."""
    return {k: (v.astype(np.float32) if v.dtype.kind == "f" or v.dtype.name == "bfloat16"
                else v) for k, v in feed.items()}


def can_emulate(model: ModelLike) -> bool:
    """Does `workbench.runtime.emulation` handle this low-float graph (else: the reference runner)?"""
    from workbench.runtime.emulation import emulable

    return emulable(as_model(model).with_weights())


def low_float_runner(model: ModelLike) -> str:
    """THE runner for a candidate: emulate (FP16/BF16 graphs it handles), reference (other
    FP16/BF16 graphs), onnxruntime (FP32/INT8 graphs). compare and precision use this."""
    proto = as_model(model).with_weights()
    if not has_low_float(proto):
        return "onnxruntime"
    return "emulate" if can_emulate(proto) else "reference"


def load_error(runner: str, e: BaseException, label: Optional[str],
               hint: Optional[str] = None) -> Any:
    """WorkbenchError for a model the runner cannot load: the runner's own words without the
    temporary file it was loaded from, naming the user's model, blamed as `workbench.core.blame`
    decides (repeated node names, an op without a kernel, no weights), with the next step as a
    record."""
    from workbench.core import blame
    from workbench.core.errors import WorkbenchError
    from workbench.runtime.ortchild import load_message

    msg = load_message(" ".join(str(e).split()))
    category, hint, steps = blame.ort_load_hint(msg, hint or "")
    return WorkbenchError(f"{runner} cannot load the model: {msg[:300]}", file=label,
                          hint=hint or None, category=category, next_steps=_bound(steps, label))


def _bound(steps: List[Any], label: Optional[str]) -> List[Any]:
    """The steps with {model} as the user's path, where `label` is one."""
    return [s.bound(model=label) for s in steps] if label and os.path.exists(label) else steps


def user_error(e: BaseException, label: Optional[str] = None) -> Any:
    """The WorkbenchError an onnxruntime refusal stands for, in the user's terms, or None for
    anything else: a model it cannot load (`load_error`), or a run it refused (`run_error`:
    the runners raise onnxruntime's own text, which explanations such as `verify` quote; the
    CLI and the panels show this instead of it)."""
    from workbench.core.blame import ort_stage

    mod = sys.modules.get("workbench.runtime.ortchild")  # (only loaded when onnxruntime ran)
    if mod is not None and isinstance(e, mod.OrtLoadFailed):
        own = e.label if e.label and os.path.exists(e.label) else None
        return load_error("onnxruntime", e, own or label or e.label)  # (a file over a name)
    if (mod is not None and isinstance(e, mod.OrtFailed)) or \
            type(e).__module__.startswith("onnxruntime"):  # (Fail, InvalidArgument, ...)
        if ort_stage(str(e)) == "load":  # (an in-process session refused the model itself)
            return load_error("onnxruntime", e, label)
        return run_error(e, label)
    return None


def run_error(e: BaseException, label: Optional[str]) -> Any:
    """WorkbenchError for a run onnxruntime refused (the model loaded, these inputs do not go
    through it): the node and op it names, its words without its source paths, and the next
    step; a Reshape to a size that does not fit says that the export fixed that size."""
    import re

    from workbench.core.blame import ort_category
    from workbench.core.errors import WorkbenchError
    from workbench.runtime.ortchild import node_in_message

    text = " ".join(str(e).split())
    category = ort_category(text, "run")
    if category == "machine":
        return WorkbenchError(f"onnxruntime ran out of memory: {text[:300]}", file=label,
                              category=category, hint="free memory, or run fewer samples at "
                              "once (--samples)")
    if category != "inputs":  # the model is at fault, whatever it was fed
        return load_error("onnxruntime", e, label)
    node = node_in_message(text)
    op = re.search(r"while running (\w+) node", text)
    msg = text.split("Status Message:", 1)[-1].strip()
    msg = re.sub(r"/onnxruntime_src/\S+ \S+::\S+\(.*?\) ", "", msg)
    msg = re.sub(r"^\S*/\S+\.(h|cc|cpp):\d+ ", "", msg)
    msg = re.sub(r"\S+ [=!<>]=? \S+ was false\. ", "", msg)  # (its assertion, not words)
    what = f"the {op.group(1)} " if op else "a "
    hint = "check the inputs' shapes and dtypes against the model's inputs"
    from workbench.core.findings import step

    steps = [step("inspect", "{model}", why="the model's inputs: names, shapes, dtypes")]
    shapes = re.search(r"Input shape:\s*\{([^}]*)\},\s*requested shape:\s*\{([^}]*)\}", msg)
    if op and op.group(1) == "Reshape" and shapes:
        hint = (f"the Reshape's target shape {{{shapes.group(2)}}} does not fit an input of "
                f"shape {{{shapes.group(1)}}}: a size was fixed when the model was exported "
                "(a traced x.shape turned into a constant); re-export with that axis dynamic "
                "(torch.onnx.export dynamic_axes / dynamic_shapes), or use inputs of the "
                "size it was exported with")
    state = re.search(r"Input (initial_[hc]|sequence_lens) must have shape\s*\{([^}]*)\}\.?"
                      r"\s*Actual:\s*\{([^}]*)\}", msg)
    if op and op.group(1) in ("LSTM", "GRU", "RNN") and state:
        hint = (f"the {op.group(1)}'s {state.group(1)} is made inside the model with the shape "
                f"{{{state.group(3)}}}, but these inputs need {{{state.group(2)}}}: a size was "
                "fixed when the model was exported (the initial state built from a traced "
                "batch size); re-export with the state sized from the input (e.g. "
                "torch.zeros(n_layers, x.size(0), hidden)), pass the state as an input, or use "
                "inputs of the size it was exported with")
    bounds = re.search(r"idx=(-?\d+) must be within the inclusive range \[(-?\d+),\s*(-?\d+)\]",
                       msg)
    if op and op.group(1) in ("Gather", "GatherElements", "GatherND") and bounds:
        rows = int(bounds.group(3)) + 1
        hint = (f"the {op.group(1)} reads a table of {rows} rows (a position table, or a "
                f"vocabulary) at index {bounds.group(1)}: these inputs go past its end. A "
                f"sequence axis that indexes a position table can be at most {rows} long; "
                f"token ids must be below {rows}: shorten the inputs (or the profile's max) "
                "to fit")
    return WorkbenchError(f"onnxruntime could not run {what}node on these inputs: {msg[:300]}",
                          file=label, node=node, hint=hint, category="inputs",
                          next_steps=_bound(steps, label))


def make_runner(kind: str, model: ModelLike, *, mark_all: bool = False,
                threads: Optional[int] = None) -> Runner:
    """A runner by name: onnxruntime | emulate | reference | auto (`low_float_runner`)."""
    if kind == "auto":
        kind = low_float_runner(model)
    if kind == "onnxruntime":
        return OnnxRuntimeRunner(model, mark_all=mark_all, threads=threads)
    if kind == "emulate":
        return EmulatedRunner(model, mark_all=mark_all, threads=threads)
    if kind == "reference":
        return ReferenceRunner(model, mark_all=mark_all)
    from workbench.core.errors import WorkbenchError

    raise WorkbenchError(f"unknown runner '{kind}'", field="runner",
                         hint="use " + " or ".join(RUNNERS) + " (or auto)")


def run(proto: Any, feed: Feed, threads: Optional[int] = 1) -> Feed:
    """One feed through onnxruntime (a path is handed over as is): outputs by name."""
    return OnnxRuntimeRunner(proto, threads=threads).infer(feed)


def mark_outputs(proto: Any, names: Sequence[str]) -> Any:
    """A copy of `proto` whose graph outputs are its own plus `names` (in that order)."""
    import copy

    import onnx

    m = copy.deepcopy(proto)
    have = {o.name for o in m.graph.output}
    for n in names:
        if n not in have:
            m.graph.output.append(onnx.ValueInfoProto(name=n))
            have.add(n)
    return m


def run_bounded(proto: Any, feeds: Sequence[Feed], names: Sequence[str],
                budget_mb: Optional[float] = None) -> List[Feed]:
    """The values of `names` per feed, from a model held by reference
    (`workbench.core.weights.by_reference`) run a segment at a time
    (`workbench.core.weights.segment_groups`): memory follows the budget, not the model. Names
    that are graph inputs come from the feeds."""
    from workbench.core import weights
    from workbench.runtime.segments import order_of

    out: List[Feed] = [{n: f[n] for n in names if n in f} for f in feeds]
    want = set(names)
    # every node output is a place to cut (a group's values not asked for are dropped as
    # they come): the segments follow the budget even where `names` are the graph's outputs
    groups = weights.segment_groups(proto, order_of(proto), weights.SEGMENT_WEIGHTS_MB
                                    if budget_mb is None else budget_mb)
    runner = OnnxRuntimeRunner(proto)
    try:
        for vals in runner.stream(list(feeds), groups):
            for o, v in zip(out, vals):
                o.update((k, a) for k, a in v.items() if k in want)
    finally:
        runner.close()
    return out
