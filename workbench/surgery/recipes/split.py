"""The split, as a proposal: for a standard op the backend refuses (NonZero on TensorRT-RTX,
post-processing with data-dependent shapes), keep it and everything after it in ONNX for
onnxruntime and build the rest. Exact by construction, but it makes two models, so it is
offered (never applied by `--auto`) and run by `workbench fix MODEL --split -o FOLDER`
(`workbench.surgery.split.split_model`)."""
from __future__ import annotations

from typing import Any, List, Sequence, Set

from workbench.support import codes
from workbench.surgery.recipes.base import Precondition, Proposal, Recipe, register

from workbench.core.model import ModelLike

ORT_DOMAINS = ("", "ai.onnx", "com.microsoft")


def tail_runs_in_onnxruntime(node: Any) -> bool:
    """Only an op onnxruntime has a kernel for can stay in the ONNX tail: a standard ONNX op
    (known to onnx's schemas, ai.onnx.ml's included) or an onnxruntime contrib op."""
    import onnx

    d = node.domain or ""
    if d == "com.microsoft":
        return True
    if d not in ("", "ai.onnx", "ai.onnx.ml"):
        return False
    try:
        return bool(onnx.defs.has(node.op_type, "" if d == "ai.onnx" else d))
    except Exception:
        return False


def node_reads(idx: Any, i: int) -> List[str]:
    """Every tensor node i of a GraphIndex reads, its bodies' outer-scope reads included."""
    return [t for t in idx.node_inputs[i] if t] + idx.implicit_inputs(i)


def tail_of(proto: Any, refused: Sequence[int]) -> Set[int]:
    """The refused nodes and every node downstream of them (indices of graph.node); a node
    whose subgraph reads a tail tensor from the outer scope is downstream too."""
    from workbench.core.graphindex import GraphIndex

    idx = GraphIndex.of(proto)
    g = proto.graph
    tail: Set[int] = set()
    todo = list(refused)
    while todo:
        i = todo.pop()
        if i in tail:
            continue
        tail.add(i)
        for o in g.node[i].output:
            if o:
                todo.extend(idx.consumers_of(o))
                todo.extend(idx.outer_readers.get(o, []))
    return tail


def _no_recipe_for(finding: Any, ctx: Any) -> bool:
    """A main-graph node the parser or builder refused (named exactly: never a guess by op),
    under a code (a static rule's id, e.g. scatterelements-reduction) that no other recipe
    can fix on this node (decompose takes a scatter's 'add', not its 'max'): running the node
    outside the engine is the step there is."""
    from workbench.core.graphindex import GraphIndex
    from workbench.surgery.recipes.base import REGISTRY

    extra = getattr(finding, "extra", None) or {}
    if getattr(finding, "source", None) not in ("parser", "build") or not finding.nodes or \
            extra.get("subgraph") or extra.get("local_function_stack"):
        return False
    if len(GraphIndex.of(ctx.proto).find(finding.nodes[0])) != 1:
        return False
    return not any(finding.code in r.fixes and r.can_fix(finding, ctx)
                   for r in REGISTRY.values() if r.name != "split")


@register
class Split(Recipe):
    name = "split"
    summary = ("keep what the backend refuses (and everything after it) as an ONNX tail for "
               "onnxruntime; the largest prefix it takes becomes the engine (fix --split -o "
               "a folder)")
    params = ()
    preserves_semantics = True
    fixes = codes.OP_REJECTED + codes.GENERIC_PARSER_CODES + (codes.BUILD_FAILED,)
    priority = 95

    def can_fix(self, finding: Any, ctx: Any) -> bool:
        if not (super().can_fix(finding, ctx) or _no_recipe_for(finding, ctx)):
            return False
        idx = ctx.node_index(finding)
        return idx is not None and tail_runs_in_onnxruntime(ctx.proto.graph.node[idx])

    def propose(self, finding: Any, ctx: Any) -> List[Proposal]:
        idx = ctx.node_index(finding)
        n, nid = ctx.proto.graph.node[idx], ctx.ids[idx]
        tail = tail_of(ctx.proto, [idx])
        left = len(ctx.proto.graph.node) - len(tail)
        reason = (f"{nid} ({n.op_type}) and the {len(tail) - 1} node(s) after it stay ONNX for "
                  f"onnxruntime; the {left} node(s) before become the engine (exact: "
                  "prefix then tail compute the original outputs; fix --split writes both "
                  "and a manifest)")
        return [Proposal(nid, n.op_type, self.name, {}, reason, auto=False, code=finding.code)]

    def next_step(self, finding: Any, ctx: Any) -> Any:
        if not self.can_fix(finding, ctx):
            return None
        from workbench.core.findings import step

        # the builder (not the parser) refused it: only a split checked by building finds it
        build = getattr(finding, "code", None) == codes.BUILD_FAILED
        return step("fix", "{model}", split=True, build=build, o="{stem}_split",
                    why="builds everything before it and keeps it and what follows as ONNX "
                    "for onnxruntime (build splits so by itself)")

    def precondition(self, model: ModelLike) -> Precondition:
        return Precondition(False, "a split makes two models (the engine's prefix and an ONNX "
                            "tail), not a new version of one: run fix --split with -o a folder "
                            "(or workbench.surgery.split.split_model)", [])
