"""Regions: the units TensorRT fuses, as ONNX node lists; a precision plan assigns each one a
precision (a choice inside a fused layer rarely pays on its own).

From an engine's layer information where one exists (`LatencyModel.regions`: each fused layer's
ONNX nodes), else from the graph: a Conv / MatMul / Gemm with the BatchNormalization and
activation that follow it alone, otherwise the nodes of one module scope (`/layer1/conv1/...`,
a LayerNorm or an attention block exported by torch), otherwise the node itself. Constants and
shape arithmetic are in no region: they compute no activations.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

ANCHORS = {"Conv", "ConvTranspose", "MatMul", "Gemm", "BatchNormalization"}
FOLLOWERS = {"BatchNormalization", "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Clip", "HardSigmoid",
             "HardSwish", "Gelu", "Elu", "Selu", "PRelu", "Softplus", "Mish"}
NO_DATA = {"Constant", "Shape", "Size", "ConstantOfShape", "Range", "Identity"}


def graph_regions(proto: Any) -> List[List[str]]:
    """Regions of the graph's nodes (see the module docstring), in graph order."""
    from workbench.core.graphindex import GraphIndex, scope_path_of

    g = proto.graph
    idx = GraphIndex.of(proto)  # (producers and consumers come from the one index)
    nodes = list(g.node)

    def consumers(t: str) -> int:
        return len(idx.consumers.get(t, ()))

    def produced_by(t: str) -> Any:
        i = idx.producer_of(t)
        return None if i is None else nodes[i]

    region_of: Dict[str, int] = {}
    regions: List[List[str]] = []
    by_scope: Dict[str, int] = {}
    for n in g.node:
        if n.op_type in NO_DATA or not n.name:
            continue
        src = [p for p in (produced_by(i) for i in n.input)
               if p is not None and p.op_type not in NO_DATA]
        if n.op_type in FOLLOWERS and len(src) == 1 and src[0].name in region_of and \
                src[0].op_type in ANCHORS | FOLLOWERS and \
                consumers(src[0].output[0]) == 1:
            k = region_of[src[0].name]  # fused with the conv / matmul before it
        else:
            scope = scope_path_of(n.name)
            if scope and scope in by_scope:
                k = by_scope[scope]
            else:
                k = len(regions)
                regions.append([])
                if scope:
                    by_scope[scope] = k
        regions[k].append(n.name)
        region_of[n.name] = k
    return [r for r in regions if r]


def engine_regions(latency: Any, proto: Any) -> List[List[str]]:
    """The engine's fused layers (`LatencyModel.regions`), limited to nodes of this graph, and
    the graph's nodes no layer names as regions of their own (`graph_regions`)."""
    names = {n.name for n in proto.graph.node}
    out = [[n for n in r if n in names] for r in latency.regions]
    out = [r for r in out if r]
    seen = {n for r in out for n in r}
    out += [r for r in ([n for n in r if n not in seen] for r in graph_regions(proto)) if r]
    return out


def label(region: Sequence[str]) -> str:
    """A short name of a region: its common scope, else its first node (+N)."""
    from workbench.core.graphindex import scope_path_of

    scopes = {scope_path_of(n) for n in region}
    if len(scopes) == 1 and next(iter(scopes)):
        return next(iter(scopes))
    return region[0] + (f" (+{len(region) - 1})" if len(region) > 1 else "")


def merge_to(regions: List[List[str]], limit: Optional[int]) -> List[List[str]]:
    """At most `limit` regions: neighbours merged evenly (a bounded sensitivity pass)."""
    if not limit or len(regions) <= limit:
        return regions
    size = -(-len(regions) // limit)
    return [sum(regions[i:i + size], []) for i in range(0, len(regions), size)]
