"""TensorRT build-log lines -> structured Findings naming the ONNX nodes and tensors involved
(the build's findings, and `check --build`'s: core, so both layers read the same rules).

TensorRT says important things in its build log that users miss in a thousand lines: FP16
overflow of constants ("Detected FP32 infinity values ... converted to FP16 infinity", "Weights
[name=...] had the following issues when converted to FP16"), INT64 weights cast to INT32,
layers falling back to higher precision, missing plugins. Each becomes one Finding with the
node names the message mentions (directly, through `[ONNX Layer: X]` metadata, a
`ForeignNode[a...b]`, or a tensor/weights name mapped to the node that produces or uses it).
"""
from __future__ import annotations

import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from workbench.core.errors import Finding

_TOKEN = re.compile(r"[A-Za-z0-9_./:\-\[\]]+")
_ONNX_LAYER = re.compile(r"\[ONNX Layer: ([^\]\x1e\x1f]+)\]")
_FOREIGN = re.compile(r"ForeignNode\[([^\]]*?)\.\.\.([^\]]*?)\]")
_QUOTED = re.compile(r"['\"`]([^'\"`]{1,300})['\"`]")
_WEIGHTS = re.compile(r"Weights \[name=([^\]]+)\] had the following issues when converted to "
                      r"(FP16|BF16|\w+)")
_TENSOR = re.compile(r"(?:tensor|Tensor|input|Input|output|Output)[: ]+'?\"?([^\s'\",:()]+)")

# TensorRT's shape check of a profile ("Profile kMIN values are not self-consistent. /TopK:
# length of reduction axis (num_points) is smaller than K (16) ..."): the model cannot run there
_PROFILE_SHAPES = re.compile(r"Profile k(MIN|OPT|MAX) values are not self-consistent", re.I)
_TRT_CHECK = re.compile(r"\s*Condition '[^']*' violated.*$|\s*In operator\(\) at .*$", re.S)

def _steps(code: str) -> List[Any]:
    """The next steps of a build-log finding, as records (the hint stays words)."""
    from workbench.core.findings import step

    if code == "profile-cannot-run":
        return [step("profiles", "{model}", why="runs the model on onnxruntime at a profile's "
                     "min, opt and max and proposes one it runs at")]
    if code == "fp16-layernorm-risk":
        return [step("precision", "{model}", to="fp16", calib="{data}", o="{stem}.fp16.onnx",
                     why="names any activation beyond the FP16 range on your data")]
    if code == "missing-plugin":
        return [step("check", "{model}", why="names the recipes that replace the node")]
    return []


# (code, severity, regex, explanation, hint)
_RULES = [
    ("profile-cannot-run", "warning", _PROFILE_SHAPES,
     "the profile's {which} shapes cannot run the model (TensorRT's shape check at {which} "
     "failed: a call at those shapes fails; the engine runs the shapes of the profile the "
     "model can run)",
     "profiles proposes a profile the model runs at; or build with --profile "
     "NAME:MIN:OPT:MAX whose {which} the model can run (the message says the size the node "
     "needs)"),
    ("timing-cache-unused", "warning",
     re.compile(r"timing cache will not be used|myelinCache\.h::deserializeFromBuffer", re.I),
     "TensorRT could not read the timing cache (it holds entries of another build it cannot "
     "use); this build timed its tactics afresh, so it took longer, and the engine is fine",
     "nothing to do; if it repeats, give the build its own cache (--timing-cache PATH) or "
     "delete the shared one in the workspace's timing-caches folder"),
    ("fp16-layernorm-risk", "info",
     re.compile(r"layernorm.*(?:Reduce|Pow).*may cause overflow|INormalizationLayer", re.I),
     "TensorRT warns that a layer normalization written as Reduce/Pow ops (not one "
     "LayerNormalization node) may overflow in FP16; nothing overflowed yet",
     "check it on your data (precision --to fp16 with --calib names any activation beyond "
     "the FP16 range); to keep those ops in FP32: --exclude-op Pow "
     "--exclude-op ReduceMean; or export with opset >= 17 so it is one LayerNormalization"),
    ("fp16-overflow", "warning",
     re.compile(r"finite FP32 values which would overflow in FP16|closest finite FP16", re.I),
     "FP32 weights beyond the FP16 range were clamped to the largest finite FP16 value "
     "(+-65504)",
     "keep the nodes that use them in FP32 (--exclude NODE), or scale the weights into range"),
    ("fp16-overflow", "warning",
     re.compile(r"Detected FP32 infinity values|out of FP16 range|overflow.*FP16|FP16.*overflow",
                re.I),
     "FP32 values outside the FP16 range were converted to FP16 infinity",
     "keep the nodes (or the ops producing the large constants, e.g. attention-mask "
     "fills) in FP32: --exclude NODE, or clamp the constant"),
    ("fp16-subnormal", "info",
     re.compile(r"Subnormal FP16 values|smallest positive FP16 Subnormal", re.I),
     "weights too small for FP16 were flushed to the FP16 subnormal range",
     "usually harmless; compare outputs layer by layer to be sure"),
    ("int64-cast", "info",
     re.compile(r"INT64.*(?:cast|casting).*INT32|cast down to INT32|INT64 weights", re.I),
     "INT64 tensors/weights are cast to INT32 by TensorRT",
     "feed INT32 to the engine's former INT64 inputs; values must fit in INT32"),
    ("int64-input", "info",
     re.compile(r"Make sure input (\S+) has Int64 binding", re.I),
     "the engine keeps an INT64 input", "feed int64 arrays to this input"),
    ("int64-clamp", "warning",
     re.compile(r"outside the range of INT32 (?:was|were) clamped", re.I),
     "INT64 values outside the INT32 range were clamped",
     "check the named constants (often a huge 'end' in Slice): clamping can change results"),
    ("precision-fallback", "warning",
     re.compile(r"fall(?:s|ing)?[ -]?back|fallback|Missing scale and zero-point|"
                r"precision.*(?:not (?:obeyed|honored|honoured)|ignored)|"
                r"running in (?:FP32|higher precision)", re.I),
     "some layers run in a higher precision than requested",
     "check the named layers: add Q/DQ (INT8) or casts (FP16) around them, or accept FP32"),
    ("missing-plugin", "error",
     re.compile(r"could not find plugin|Plugin not found|No importer registered for op|"
                r"getPluginCreator|Failed to load (?:plugin|library)", re.I),
     "a plugin needed by the model is not available",
     "pass the plugin library with --plugins PATH, or replace the node with a supported "
     "subgraph"),
    ("unused-input", "info", re.compile(r"Unused Input", re.I),
     "a network input is not used by any layer", "remove it or check the graph"),
    ("calibrator-unused", "info",
     re.compile(r"Calibrator (?:won't|will not) be used|explicit precision mode", re.I),
     "the calibrator is ignored because the model already has Q/DQ nodes",
     "nothing to do, or drop --calib"),
]


# what a TensorRT plugin logs when it sets up CUDA where no GPU is usable (error 35,
# cudaErrorInsufficientDriver: "Cuda Error in ROIAlignV3: 35 (CUDA driver version is
# insufficient ...)"): the parse finding says it in users' words, the line stays in the log
NO_GPU_NOISE = re.compile(r"Cuda Error in \w+: 35\b|CUDA driver version is insufficient|"
                          r"catchCudaError")


class NameIndex:
    """Node names, and tensor names -> nodes producing/consuming them, of one ONNX graph."""

    def __init__(self, nodes: Iterable[str] = (), tensor_nodes: Optional[Mapping[str,
                 Sequence[str]]] = None, graph: Any = None) -> None:
        self.nodes = set(n for n in nodes if n)
        self.tensor_nodes = {k: list(v) for k, v in (tensor_nodes or {}).items()}
        self.graph = graph  # the GraphIndex, for what the log does not name (int64 clamps)

    @classmethod
    def from_graph(cls, graph: Any) -> "NameIndex":
        """From a Model (its cached graph index), a GraphIndex, or a Model/Graph proto:
        node names, and each tensor's producers plus the readers of weights/graph inputs."""
        from workbench.core.graphindex import GraphIndex

        gi = graph if isinstance(graph, GraphIndex) else GraphIndex.of(graph)
        tn: Dict[str, List[str]] = {}
        for t, i in gi.producer.items():
            tn[t] = [gi.names[k] for k in gi.duplicate_producers.get(t, [i])]
        for t in set(gi.initializers) | set(gi.inputs):
            readers = [gi.names[k] for k in gi.consumers.get(t, ())]
            if readers:
                tn[t] = tn.get(t, []) + readers
        return cls(gi.names, tn, gi)

    def find(self, text: str) -> Tuple[List[str], List[str]]:
        """(node names, tensor names) mentioned in `text`, in order of appearance."""
        found_nodes: List[str] = []
        found_tensors: List[str] = []

        def add_node(n: str) -> None:
            n = n.strip()
            if n and n not in found_nodes and (not self.nodes or n in self.nodes):
                found_nodes.append(n)

        for m in _ONNX_LAYER.finditer(text):
            add_node(m.group(1))
        for m in _FOREIGN.finditer(text):
            add_node(m.group(1))
            add_node(m.group(2))
        candidates = [m.group(1) for m in _QUOTED.finditer(text)]
        candidates += [m.group(1) for m in _WEIGHTS.finditer(text)]
        candidates += [m.group(1) for m in _TENSOR.finditer(text)]
        candidates += [t.strip("[]:.,") for t in _TOKEN.findall(text)]
        for c in candidates:
            if c in self.nodes:
                add_node(c)
            elif c in self.tensor_nodes:
                if c not in found_tensors:
                    found_tensors.append(c)
                for n in self.tensor_nodes[c]:
                    add_node(n)
        return found_nodes, found_tensors


# TensorRT 8.6-10's summary of weight conversion issues: these lines only introduce the
# per-issue lines ("- N weights are affected by this issue: ...") that follow them
_WEIGHTS_PREAMBLE = ("TensorRT encountered issues when converting weights",
                     "If this is not the desired behavior, please modify the weights",
                     "Check verbose logs for the list of affected weights")
_AFFECTED = "List of affected weights:"


def _join_weight_reports(messages: List[Dict[str, str]]) -> List[Dict[str, str]]:
    """TensorRT prints 'Weights [name=X] had the following issues...' and then ' - ...' lines
    as separate messages: fold the follow-up lines into the message they belong to. Its newer
    summary ('- N weights are affected by this issue: ...') is followed by a verbose 'List of
    affected weights: A + B.weight, ...' (kept by the worker's logger): folded in the same way,
    and the summary's preamble lines are dropped."""
    out: List[Dict[str, str]] = []
    for m in messages:
        text = m.get("message", "")
        if text.strip().startswith(_WEIGHTS_PREAMBLE):
            continue
        if text.lstrip().startswith(_AFFECTED):
            if out and "weights are affected" in out[-1]["message"]:
                out[-1] = dict(out[-1], message=out[-1]["message"] + "\n" + text.strip())
            continue
        if out and _WEIGHTS.search(out[-1]["message"]) and (
                text.lstrip().startswith("-") or "weights are affected" in text
                or text.startswith("If this is not the desired behavior")):
            out[-1] = dict(out[-1], message=out[-1]["message"] + "\n" + text)
            continue
        out.append(dict(m))
    return out


def _affected_names(text: str) -> List[str]:
    """The ONNX names in a folded 'List of affected weights:' part: TensorRT names fused
    layers 'A + B' and their weights 'LAYER.weight' / '.bias'."""
    if _AFFECTED not in text:
        return []
    out: List[str] = []
    for item in text.split(_AFFECTED, 1)[1].split(","):
        for part in item.split(" + "):
            part = part.strip()
            for suffix in (".weight", ".bias"):
                if part.endswith(suffix):
                    part = part[:-len(suffix)]
            if part and part not in out:
                out.append(part)
    return out


INT32_MAX = 2**31 - 1
# inputs where a value beyond INT32 means "to the end / no limit" (clamping keeps the meaning)
_SENTINEL_INPUTS = {"Slice": (1, 2), "Range": (1,), "Trilu": (1,)}


def clamped_int64(gi: Any) -> List[Dict[str, Any]]:
    """The INT64 constants (initializers and Constant nodes) with values beyond INT32 that
    TensorRT clamps, each with its readers: {tensor, value, readers: [(node, op, input)],
    sentinel: every reader takes it where "beyond INT32" only means "to the end"}."""
    import numpy as np
    from onnx import TensorProto, numpy_helper

    found: Dict[str, Any] = {}
    for name, t in getattr(gi, "initializers", {}).items():
        if getattr(t, "data_type", None) == TensorProto.INT64 and \
                t.data_location != TensorProto.EXTERNAL:
            found[name] = t
    for k, n in enumerate(getattr(gi, "nodes", [])):
        if n.op_type == "Constant" and n.output:
            for a in n.attribute:
                if a.name == "value" and a.t.data_type == TensorProto.INT64:
                    found[n.output[0]] = a.t
    out = []
    for name, t in found.items():
        try:
            arr = numpy_helper.to_array(t)
        except Exception:
            continue
        if not arr.size:
            continue
        big = arr[(arr > INT32_MAX) | (arr < -INT32_MAX - 1)]
        if not big.size:
            continue
        readers = []
        for c in gi.consumers_of(name):
            node = gi.nodes[c]
            readers.append((gi.names[c], node.op_type, list(node.input).index(name)))
        sentinel = bool(readers) and all(i in _SENTINEL_INPUTS.get(op, ()) for _, op, i in readers)
        out.append({"tensor": name, "value": int(big.flat[np.argmax(np.abs(big))]),
                    "readers": readers, "sentinel": sentinel})
    return out


def _name_clamps(f: Finding, names: NameIndex) -> None:
    """Fill an int64-clamp finding the log left unnamed (TensorRT 8.6 names nothing) from the
    graph: which constants, read by which nodes; only "to the end" values: information."""
    gi = names.graph
    if gi is None or f.nodes or f.tensors:
        return
    try:
        clamps = clamped_int64(gi)
    except Exception:  # (never let the explanation break the build's report)
        return
    if not clamps:
        return
    f.tensors = [c["tensor"] for c in clamps]
    f.nodes = list(dict.fromkeys(r[0] for c in clamps for r in c["readers"]))
    said = "; ".join(
        f"'{c['tensor']}' = {c['value']}" + (
            " read by " + ", ".join(f"{op} '{n}' (input {i})" for n, op, i in c["readers"][:3])
            if c["readers"] else "") for c in clamps[:4])
    if all(c["sentinel"] for c in clamps):
        f.severity = "info"
        f.message = ("INT64 values beyond INT32 were clamped to INT32; they only say 'to the "
                     f"end' (a Slice's starts/ends, as exporters write them): {said}")
        f.hint = "nothing to do: the clamped value means the same"
    else:
        f.message += f" ({said})"
        f.hint = ("check these constants: a value the engine needs beyond INT32 is now "
                  "INT32's limit, which can change results")


def findings_from_log(messages: List[Dict[str, str]], names: Optional[NameIndex] = None,
                      include_other_warnings: bool = True) -> List[Finding]:
    """Structured findings from a TensorRT log (list of {level, message}), deduplicated."""
    names = names or NameIndex()
    by_key: Dict[Any, Finding] = {}
    order: List[Any] = []
    for m in _join_weight_reports(messages):
        level, text = m.get("level", "info"), m.get("message", "")
        if level not in ("error", "warning", "info"):
            continue
        rule = None
        for r in _RULES:
            if r[2].search(text):
                rule = r
                break
        if rule is None:
            if level == "info" or not include_other_warnings:
                continue
            code, sev, expl, hint = "build-" + level, level, None, None
        else:
            code, sev, _rx, expl, hint = rule
            if level == "error" and code != "timing-cache-unused":  # (an error the build
                sev = "error"                                       # recovers from)
        nodes, tensors = names.find(text.split(_AFFECTED, 1)[0])
        for name in _affected_names(text):  # a layer / weights name, or a tensor
            more_nodes, more_tensors = names.find(f"'{name}'")
            nodes += [n for n in more_nodes if n not in nodes]
            tensors += [t for t in more_tensors if t not in tensors]
        shown = text.split(_AFFECTED, 1)[0].strip()
        if shown.startswith("- ") and "weights are affected" in shown:  # '- 3 weights are ...'
            shown = shown[2:]
        first_line = " ".join(shown.split())[:400]
        key = (code, tuple(nodes), tuple(tensors)) if rule else (code, first_line)
        if key in by_key:
            f = by_key[key]
            f.extra["count"] = f.extra.get("count", 1) + 1
            continue
        if code == "profile-cannot-run":  # min/opt/max, and TensorRT's words without its
            which = _PROFILE_SHAPES.search(text).group(1).lower()  # source locations
            expl, hint = expl.format(which=which), hint.format(which=which)
            first_line = _TRT_CHECK.sub("", first_line).rstrip() or first_line
        msg = first_line if expl is None else "%s: %s" % (expl, first_line)
        if rule is not None and not nodes and not tensors and hint and "--exclude NODE" in hint:
            hint += " (TensorRT's log named no weights or nodes here)"
        f = Finding(sev, code, msg, nodes=nodes, tensors=tensors, hint=hint, source="build-log",
                    extra={"count": 1, "level": level},
                    next_steps=_steps(code) if rule is not None else [])
        by_key[key] = f
        order.append(key)
    out = [by_key[k] for k in order]
    for f in out:
        if f.code == "int64-clamp":
            _name_clamps(f, names)
    return out


_MEMORY = {
    "activation_bytes": re.compile(r"Total Activation Memory: (\d+)"),
    "weights_bytes": re.compile(r"Total Weights Memory: (\d+)"),
    "scratch_bytes": re.compile(r"Max Scratch Memory: (\d+)"),
    "host_persistent_bytes": re.compile(r"Total Host Persistent Memory: (\d+)"),
    "device_persistent_bytes": re.compile(r"Total Device Persistent Memory: (\d+)"),
}


def memory_from_log(messages: List[Dict[str, str]]) -> Dict[str, int]:
    """The engine's memory figures as TensorRT reports them at the end of a build (bytes;
    the last value wins when several profiles report)."""
    out: Dict[str, int] = {}
    for m in messages:
        text = m.get("message", "")
        for key, rx in _MEMORY.items():
            hit = rx.search(text)
            if hit:
                out[key] = int(hit.group(1))
    return out
