"""Split a model the backend refuses into the largest prefix it takes (the engine's ONNX) and
an ONNX tail for onnxruntime: the exact answer for post-processing TensorRT will not run
(NonZero on TensorRT-RTX, NMS, data-dependent shapes).

    res = split_model("det.onnx", backend="tensorrt-rtx", build=True)
    res.save("split/")              # prefix.onnx, tail.onnx, split.json (the manifest)
    ChainedRunner.from_folder("split/").infer(feed)   # == the original's outputs

The cut: every node the parser (or, with `build=True`, the builder) refuses goes to the tail
with everything downstream of it; the rest is the prefix, the largest set of nodes closed under
its inputs that holds no refused node. The prefix is checked again (the parser stops at its
first error), and the cut grows until the backend takes the prefix. Tensors crossing the cut
become prefix outputs and tail inputs; the chained result is verified against the original
with onnxruntime on the same inputs.
"""
from __future__ import annotations

import copy
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from workbench.runtime.equivalence import Verification
from workbench.core.errors import WorkbenchError
from workbench.core.model import ModelLike, as_model
from workbench.support.checker import SupportReport
from workbench.surgery.recipes.base import fix_step, node_ids
from workbench.surgery.recipes.split import node_reads, tail_of

__all__ = ["SplitResult", "split_model", "cut_model", "tail_of", "nodes_of_ops", "SELECTION_OPS",
           "selection_nodes", "selection_region"]

Checker = Callable[[str], SupportReport]


@dataclass
class SplitResult:
    """The prefix (engine ONNX), the tail (None if nothing was cut), the manifest, the last
    support report of the prefix, the rounds of cutting, and the end-to-end verification."""

    prefix: Any
    tail: Optional[Any]
    manifest: Dict[str, Any]
    report: Optional[SupportReport] = None
    rounds: List[Dict[str, Any]] = field(default_factory=list)
    verification: Optional[Verification] = None

    @property
    def supported(self) -> bool:
        return bool(self.report is not None and self.report.supported)

    def save(self, folder: Any, manifest_name: Optional[str] = None) -> Dict[str, str]:
        """Write prefix.onnx, tail.onnx (when there is one) and split.json (or
        `manifest_name`; the files the manifest names) into `folder`, the manifest last."""
        from workbench.runtime.chain import MANIFEST
        from workbench.core.fsutil import atomic_write_text
        from workbench.core.model import save_model

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        paths = {"prefix": str(folder / self.manifest["prefix"]["file"])}
        save_model(self.prefix, paths["prefix"])
        if self.tail is not None:
            paths["tail"] = str(folder / self.manifest["tail"]["file"])
            save_model(self.tail, paths["tail"])
        man = dict(self.manifest, verification=self.verification.to_dict()
                   if self.verification else None, rounds=self.rounds)
        paths["manifest"] = str(folder / (manifest_name or MANIFEST))
        atomic_write_text(paths["manifest"], json.dumps(man, indent=1, default=str))
        return paths

    def to_dict(self) -> Dict[str, Any]:
        return dict(self.manifest, supported=self.supported, rounds=self.rounds,
                    verification=self.verification.to_dict() if self.verification else None,
                    support=self.report.to_dict() if self.report else None)


# ------------------------------------------------------------------------------ the cut

def _auto_step() -> Any:
    from workbench.core.findings import step

    return step("fix", "{model}", o="{fixed}", auto=True,
                why="applies the recipes that fix the refused nodes")


_AUTO = _auto_step()

def cut_model(proto: Any, tail: Set[int], name: str = "model") -> Tuple[Any, Optional[Any],
                                                                        Dict[str, Any]]:
    """(prefix, tail, manifest) for a set of tail nodes that is closed downstream."""
    from workbench.core.graphindex import GraphIndex

    g = proto.graph
    idx = GraphIndex.of(proto)
    inits = {t.name: t for t in g.initializer}
    graph_inputs = [i for i in g.input if i.name not in inits]
    outputs = [o.name for o in g.output]
    head_nodes = [n for i, n in enumerate(g.node) if i not in tail]
    tail_nodes = [n for i, n in enumerate(g.node) if i in tail]
    head_made = {o for n in head_nodes for o in n.output if o}
    tail_reads = list(dict.fromkeys(x for i in sorted(tail) for x in node_reads(idx, i)))
    tail_made = {o for n in tail_nodes for o in n.output if o}
    crossing = [x for x in tail_reads if x in head_made]
    # a Constant the tail reads (NMS's max boxes and thresholds) goes with the tail, not
    # through the engine as an output of its own
    consts = {n.output[0]: k for k, n in enumerate(g.node)
              if k not in tail and n.op_type == "Constant" and not n.input and n.output}
    moved = [c for c in crossing if c in consts]
    crossing = [c for c in crossing if c not in consts]
    tail_graph_inputs = [i.name for i in graph_inputs if i.name in tail_reads]
    head_reads = {x for i in range(len(g.node)) if i not in tail for x in node_reads(idx, i)}
    if moved:
        tail_nodes = [g.node[consts[c]] for c in moved] + tail_nodes
        only_tail = {consts[c] for c in moved if c not in head_reads and c not in outputs}
        head_nodes = [n for i, n in enumerate(g.node) if i not in tail and i not in only_tail]
    # the prefix: original outputs it makes (or passes through), then the crossing tensors
    head_outputs = [o for o in outputs if o not in tail_made]
    head_outputs += [c for c in crossing if c not in head_outputs]
    types = _value_infos(proto)
    prefix = copy.deepcopy(proto)
    pg = prefix.graph
    del pg.node[:]
    pg.node.extend(copy.deepcopy(head_nodes))
    _keep_initializers(pg, head_reads | set(head_outputs), inits)  # constant outputs too
    del pg.input[:]
    pg.input.extend(copy.deepcopy(i) for i in graph_inputs
                    if i.name in head_reads or i.name in head_outputs)
    del pg.output[:]
    pg.output.extend(_vi(types, o) for o in head_outputs)
    pg.name = f"{g.name or name}_prefix"
    _trim_value_info(pg)
    manifest: Dict[str, Any] = {
        "model": name, "inputs": [i.name for i in graph_inputs], "outputs": outputs,
        "cut": crossing,
        "prefix": {"file": "prefix.onnx", "inputs": [i.name for i in pg.input],
                   "outputs": head_outputs, "nodes": len(head_nodes)},
        "tail": None,
    }
    if not tail_nodes:
        return prefix, None, manifest
    tail_m = copy.deepcopy(proto)
    tg = tail_m.graph
    del tg.node[:]
    tg.node.extend(copy.deepcopy(tail_nodes))
    _keep_initializers(tg, set(tail_reads), inits)
    del tg.input[:]
    tail_inputs = tail_graph_inputs + [c for c in crossing if c not in tail_graph_inputs]
    tg.input.extend(_vi(types, x) for x in tail_inputs)
    del tg.output[:]
    tg.output.extend(_vi(types, o) for o in outputs if o in tail_made)
    tg.name = f"{g.name or name}_tail"
    _trim_value_info(tg)
    ids = node_ids(proto)
    manifest["tail"] = {"file": "tail.onnx", "inputs": tail_inputs,
                        "outputs": [o for o in outputs if o in tail_made],
                        "nodes": [ids[i] for i in sorted(tail)],
                        "constants": [ids[consts[c]] for c in moved]}
    return prefix, tail_m, manifest


def _value_infos(proto: Any) -> Dict[str, Any]:
    from workbench.surgery.recipes.base import infer_types

    inferred = infer_types(proto)
    out: Dict[str, Any] = {}
    for vi in list(inferred.graph.value_info) + list(proto.graph.value_info):
        out.setdefault(vi.name, vi)
    for vi in list(proto.graph.input) + list(proto.graph.output):
        out[vi.name] = vi
    for t in proto.graph.initializer:
        if t.name not in out:
            from onnx import helper

            out[t.name] = helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
    return out


def _vi(types: Dict[str, Any], name: str) -> Any:
    if name in types and types[name].type.tensor_type.elem_type:
        return copy.deepcopy(types[name])
    raise WorkbenchError(f"the type of '{name}', which crosses the cut, is unknown",
                         field=name,
                         hint="infer the shapes first, or give the tensor a value_info",
                         next_steps=[fix_step("infer_shapes", "infers the type of every tensor")])


def _keep_initializers(g: Any, reads: Set[str], inits: Dict[str, Any]) -> None:
    keep = [copy.deepcopy(inits[k]) for k in inits if k in reads]
    del g.initializer[:]
    g.initializer.extend(keep)


def _trim_value_info(g: Any) -> None:
    made = {o for n in g.node for o in n.output if o}
    keep = [v for v in g.value_info if v.name in made]
    del g.value_info[:]
    g.value_info.extend(keep)


# ------------------------------------------------------------------------------ the loop
def _refused(proto: Any, report: SupportReport) -> Tuple[List[int], List[str]]:
    """Top-level node indices of a report's failures, and failures that name no node."""
    from workbench.core.graphindex import GraphIndex

    idx = GraphIndex.of(proto)
    found, loose = [], []
    for u in report.unsupported:
        node = u.get("node")
        hits = idx.find(node) if node else []
        if len(hits) == 1:
            found.append(hits[0])
            continue
        owner = _owner(proto, node) if node else None
        if owner is not None:
            found.append(owner)
        else:
            loose.append(f"{node or '(graph)'}: {u.get('reason')}")
    return found, loose


def _owner(proto: Any, node: str) -> Optional[int]:
    """The top-level node whose subgraph holds a node named `node`."""
    from onnx import AttributeProto

    def holds(graph: Any) -> bool:
        for n in graph.node:
            if n.name == node:
                return True
            for a in n.attribute:
                subs = [a.g] if a.type == AttributeProto.GRAPH else list(a.graphs)
                if any(holds(s) for s in subs):
                    return True
        return False

    for i, n in enumerate(proto.graph.node):
        for a in n.attribute:
            subs = [a.g] if a.type == AttributeProto.GRAPH else \
                list(a.graphs) if a.type == AttributeProto.GRAPHS else []
            if any(holds(s) for s in subs):
                return i
    return None


def default_checker(backend: str, build: bool = False, client: Any = None,
                    target: str = "sm89") -> Checker:
    def check(path: str) -> SupportReport:
        from workbench.support.checker import check as support_check

        return support_check(path, backend=backend, build=build, client=client, target=target)
    return check


def split_model(model: ModelLike, *, backend: str = "tensorrt-rtx", build: bool = False,
                check: Optional[Checker] = None, client: Any = None, target: str = "sm89",
                inputs: Optional[Dict[str, Any]] = None, verify: bool = True,
                max_rounds: int = 32) -> SplitResult:
    """Cut `model` until `backend` takes the prefix (see the module docstring). With
    `build=True` the prefix must also build (TensorRT-RTX builds ahead of time on a CPU)."""
    proto = as_model(model).with_weights()
    label = Path(str(model)).stem if isinstance(model, (str, os.PathLike)) else \
        (proto.graph.name or "model")
    check = check or default_checker(backend, build, client, target)
    tail: Set[int] = set()
    starts: List[int] = []  # the nodes the backend refused (the rest of the tail follows them)
    rounds: List[Dict[str, Any]] = []
    report: Optional[SupportReport] = None
    with tempfile.TemporaryDirectory(prefix="workbench-split-") as tmp:
        for _ in range(max_rounds):
            prefix, tail_m, manifest = cut_model(proto, tail, label)
            if not len(prefix.graph.node) and tail:  # (a graph of no nodes is checked as is)
                raise WorkbenchError("nothing of the model is left for the engine: the "
                                     "backend refuses its first nodes", file=str(label),
                                     node=(manifest.get("tail") or {}).get("nodes", [None])[0],
                                     hint="fix those nodes first, or run the model with "
                                     "onnxruntime", next_steps=[_AUTO])
            path = os.path.join(tmp, f"prefix{len(rounds)}.onnx")
            from workbench.core.model import save_model

            save_model(prefix, path)
            report = check(path)
            if report.supported:
                break
            refused, loose = _refused(prefix, report)
            if loose and not refused:
                raise WorkbenchError("the backend refuses the prefix without naming a node: "
                                     + "; ".join(loose[:2]), file=str(label),
                                     hint="check the prefix; a split cannot move a graph-level "
                                     "problem into the tail")
            # map prefix indices back to the original's
            by_name = _index_map(proto, prefix)
            new = {by_name[i] for i in refused} - tail
            # an op the backend has no importer for is refused wherever it is: cut every node
            # of it at once (the parser stops at its first error: one round per node else)
            new |= set(nodes_of_ops(proto, _op_level(report))) - tail
            starts.extend(sorted(new))
            rounds.append({"refused": [node_ids(prefix)[i] for i in refused],
                           "reasons": [u.get("reason") for u in report.unsupported][:4]})
            if not new:
                raise WorkbenchError("the cut does not grow: the backend refuses the same "
                                     "nodes again", file=str(label),
                                     hint="check the prefix for details")
            tail = tail_of(proto, sorted(tail | new))
        else:
            raise WorkbenchError(f"no prefix the backend takes after {max_rounds} cuts",
                                 file=str(label), hint="fix the refused nodes first",
                                 next_steps=[_AUTO])
    manifest["backend"] = {"name": report.backend, "version": report.backend_version,
                           "build": build}
    ids = node_ids(proto)
    manifest["refused"] = [{"node": ids[i], "op": proto.graph.node[i].op_type} for i in starts]
    from workbench.surgery.recipes.nms import offers

    # the split is exact; an NMS could instead become TensorRT's plugin (stated, not applied)
    from workbench.support.rules import BACKENDS

    # (on a backend that ships TensorRT's plugins; TensorRT-RTX does not: said, not offered)
    plugins = BACKENDS.get(str(report.backend), {}).get("ships_plugins", True)
    manifest["options"] = [dict(p.to_dict(), backend_has_plugin=plugins)
                           for p in offers(proto)]
    res = SplitResult(prefix, tail_m, manifest, report, rounds)
    if verify:
        res.verification = verify_split(proto, res, inputs)
    return res


# refused for the op, not the node
OP_LEVEL_CODES = ("plugin-missing", "plugin-needs-gpu", "unsupported-op")


def _op_level(report: SupportReport) -> Set[str]:
    """Ops a report refuses as such (no importer): every node of them is refused."""
    return {u["op"] for u in report.unsupported if u.get("op") and
            u.get("code") in OP_LEVEL_CODES}


def _bodies(node: Any) -> List[Any]:
    from onnx import AttributeProto

    out: List[Any] = []
    for a in node.attribute:
        if a.type == AttributeProto.GRAPH:
            out.append(a.g)
        elif a.type == AttributeProto.GRAPHS:
            out.extend(a.graphs)
    return out


def _holds(node: Any, ops: Set[str]) -> bool:
    return node.op_type in ops or any(_holds(n, ops) for g in _bodies(node) for n in g.node)


def nodes_of_ops(proto: Any, ops: Any) -> List[int]:
    """Top-level node indices of `ops`, or holding one in a (nested) subgraph."""
    ops = set(ops)
    return [i for i, n in enumerate(proto.graph.node) if ops and _holds(n, ops)]


def _index_map(proto: Any, prefix: Any) -> Dict[int, int]:
    """prefix node index -> original node index (the prefix keeps nodes in order)."""
    pos = {id_: i for i, id_ in enumerate(_keys(proto))}
    return {j: pos[k] for j, k in enumerate(_keys(prefix))}


def _keys(proto: Any) -> List[str]:
    return [f"{n.op_type}|{n.name}|{','.join(n.output)}" for n in proto.graph.node]


def verify_split(original: Any, res: SplitResult, inputs: Optional[Dict[str, Any]] = None,
                 tol: float = 1e-5, seed: int = 0) -> Verification:
    """The original vs prefix-then-tail (onnxruntime for both parts), on the same inputs."""
    from workbench.runtime.chain import ChainedRunner
    from workbench.runtime.equivalence import compare_outputs, make_inputs
    from workbench.runtime.runners import OnnxRuntimeRunner

    proto = as_model(original).with_weights()
    try:
        feed = inputs if inputs is not None else make_inputs(proto, seed=seed)
    except Exception as e:
        return Verification("unverified", reason=f"could not make sample inputs: {e}",
                            tolerance=tol)
    chain = ChainedRunner(OnnxRuntimeRunner(res.prefix),
                          OnnxRuntimeRunner(res.tail) if res.tail is not None else None,
                          res.manifest)
    try:
        want = OnnxRuntimeRunner(proto).infer(feed)
        got = chain.infer(feed)
    except Exception as e:  # onnxruntime refuses the sample (e.g. a batch the export fixed)
        first = str(e).strip().splitlines()[0][:240] if str(e).strip() else type(e).__name__
        return Verification("unverified", reason=f"onnxruntime could not run the sample "
                            f"inputs: {first}", tolerance=tol)
    return compare_outputs(want, got, tol)


# ----------------------------------------------------------------------------- selections
SELECTION_OPS = ("NonMaxSuppression", "TopK", "NonZero")  # data-dependent selection


def selection_nodes(proto: Any) -> List[int]:
    """Top-level node indices that select data-dependently (or whose bodies do)."""
    return nodes_of_ops(proto, SELECTION_OPS)


def selection_region(proto: Any) -> Tuple[Set[int], List[str], List[str]]:
    """(region node indices, frontier tensors, selected graph outputs); all empty when the
    model selects nothing. The region is every selection node and everything downstream of
    it; the frontier, tensors made outside the region (graph inputs excluded) that region
    nodes read, float or not (the caller compares the float ones). Near-tied rows swap there
    under any rounding: compare (`workbench.compare.selection`) and precision judge what
    leaves the region through what enters it."""
    starts = selection_nodes(proto)
    if not starts:
        return set(), [], []
    region = tail_of(proto, starts)
    _, _, manifest = cut_model(proto, region, proto.graph.name or "model")
    made = {o for i in region for o in proto.graph.node[i].output if o}
    selected = [o.name for o in proto.graph.output if o.name in made]
    return region, list(manifest["cut"]), selected
