"""The engine's layers as a graph of their own (the split view's right side).

One ONNX-shaped node per engine layer (its type as the op), edges along the tensors layers hand
on. A layer covering more ONNX nodes than its box can list, and every ForeignNode (Myelin) range,
is a group instead: a scope ('/<layer>') holding a copy of each ONNX node it was built from, wired
as in the ONNX graph, so the graph view draws it collapsed as one box and opens it in place.
Boundary tensors the engine renamed ('Reformatted Output Tensor 0 to ...') are tied to the member
that writes (or reads) the ONNX tensor behind them, looking through the reformat copy next to it.

    eg = engine_graph(LayerTable.build("bert_fp16.layers.json", onnx="bert.onnx"))
    GraphStructure(eg.model)      # lay it out; eg.nodes_of maps its nodes to ONNX node ids
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Sequence, Set

from workbench.core.graphindex import leaf_name, scope_parts

SLASH = "\u2215"  # '/' in layer names would read as ONNX name scopes: drawn as a division slash
MAX_LISTED = 4    # ONNX nodes listed inside a layer's box (then '+N more'); more: a group
ENGINE_DOMAIN = "trt.engine"


def layer_id(name: str) -> str:
    """The engine graph's element id of a layer name."""
    return name.replace("/", SLASH)


def is_group_layer(mapping: str, n_onnx: int) -> bool:
    """A layer drawn as an expandable group: a ForeignNode range, or more ONNX nodes than a box
    lists (`n_onnx`: the nodes it was built from, not those whose time it carries, as a
    reformat copy does)."""
    return n_onnx > 1 and (str(mapping).startswith("foreign") or n_onnx > MAX_LISTED)


@dataclass
class EngineGraph:
    """The engine graph's model and how its elements map to layers and ONNX nodes."""

    model: Any                                    # onnx.ModelProto
    layer_of: Dict[str, int]                      # engine node id -> layer row
    nodes_of: Dict[str, List[str]]                # engine node id -> ONNX node ids
    element_of_layer: List[str]                   # layer row -> its element ('scope:/...' for a group)
    group_labels: Dict[str, str] = field(default_factory=dict)  # group scope -> title
    member_of: Dict[str, str] = field(default_factory=dict)     # group member id -> its ONNX node


def _unique(name: str, seen: Dict[str, int]) -> str:
    if name in seen:  # a name twice (profiles per optimisation profile): keep them apart
        seen[name] += 1
        return f"{name} #{seen[name]}"
    seen[name] = 0
    return name


def engine_graph(table: Any) -> EngineGraph:
    """The graph of `table`'s engine layers (a `workbench.timing.LayerTable`); groups need the
    ONNX model (`table.index`), without it every layer is one box."""
    from onnx import helper

    layers = table.layers.layers
    rows = list(table.df["onnx_nodes"]) if "onnx_nodes" in table.df else [[] for _ in layers]
    maps = list(table.df["mapping"]) if "mapping" in table.df else [""] * len(layers)
    direct = list(table.df["n_onnx"]) if "n_onnx" in table.df else [len(r) for r in rows]
    gi = table.index.graph_index if table.index is not None else None
    produced = {t.name for lay in layers for t in lay.outputs}
    consumed = {t.name for lay in layers for t in lay.inputs}
    readers: Dict[str, List[int]] = {}
    writer: Dict[str, int] = {}
    for k, lay in enumerate(layers):
        for t in lay.inputs:
            readers.setdefault(t.name, []).append(k)
        for t in lay.outputs:
            writer.setdefault(t.name, k)
    nodes: List[Any] = []
    seen: Dict[str, int] = {}
    eg = EngineGraph(model=None, layer_of={}, nodes_of={}, element_of_layer=[])
    for k, lay in enumerate(layers):
        nm = _unique(layer_id(lay.name), seen)
        covered = [str(n) for n in (rows[k] if k < len(rows) else [])]
        kind = str(lay.type or "Layer").replace(" ", "")
        if gi is not None and not lay.is_reformat and len(covered) == direct[k] \
                and is_group_layer(maps[k], direct[k]) and all(n in gi.position for n in covered):
            path = "/" + nm
            members = _group_members(gi, path, covered, lay, layers, readers, writer)
            for onnx_id, node in members:
                nodes.append(node)
                eg.layer_of[node.name] = k
                eg.nodes_of[node.name] = [onnx_id]
                eg.member_of[node.name] = onnx_id
            eg.group_labels[path] = f"{kind}: {len(covered)} ONNX nodes"
            eg.element_of_layer.append("scope:" + path)
            continue
        nodes.append(helper.make_node(kind, [t.name for t in lay.inputs],
                                      [t.name for t in lay.outputs], name=nm, domain=ENGINE_DOMAIN))
        eg.layer_of[nm] = k
        eg.nodes_of[nm] = covered
        eg.element_of_layer.append(nm)
    ins = sorted(consumed - produced)
    outs = sorted(produced - consumed) or sorted(produced)[-1:]
    g = helper.make_graph(nodes, "engine", [helper.make_empty_tensor_value_info(t) for t in ins],
                          [helper.make_empty_tensor_value_info(t) for t in outs])
    eg.model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid(ENGINE_DOMAIN, 1)])
    return eg


def _group_members(gi: Any, path: str, covered: Sequence[str], lay: Any, layers: Sequence[Any],
                   readers: Dict[str, List[int]], writer: Dict[str, int]) -> List[Any]:
    """(ONNX id, node) per ONNX node of a group layer: named '<path>/<scope below the members'
    common scope>/<leaf>', reading and writing tensors local to the group ('<path>::<tensor>')
    except the layer's own engine inputs and outputs."""
    from onnx import helper

    pos = sorted(gi.position[n] for n in covered)
    inside = set(pos)
    e_in = [t.name for t in lay.inputs]
    e_out = [t.name for t in lay.outputs]
    in_set, out_set = set(e_in), set(e_out)
    parts = [scope_parts(gi.scope(i)) for i in pos]
    c = len(os.path.commonprefix(parts)) if parts else 0
    local = lambda t: f"{path}::{t}"  # noqa: E731
    producer = gi.producer
    node_ins: List[List[str]] = []
    node_outs: List[List[str]] = []
    names: List[str] = []
    used: Set[str] = set()
    for j, i in enumerate(pos):
        nm = path + "/" + "/".join(parts[j][c:] + (leaf_name(gi.ids[i]) or gi.ids[i],))
        while nm in used:
            nm += "'"
        used.add(nm)
        names.append(nm)
        ins = []
        for t in gi.node_inputs[i]:
            if t in in_set:
                ins.append(t)
            elif t and producer.get(t) in inside:
                ins.append(local(t))
        outs = [local(t) for t in gi.nodes[i].output if t]
        outs += [t for t in gi.nodes[i].output if t in out_set]
        node_ins.append(ins)
        node_outs.append(outs)
    member_at = {i: j for j, i in enumerate(pos)}

    def through_reformat(t: str, outward: bool) -> List[int]:
        """Members behind an engine tensor the engine renamed: the ONNX tensors a neighbouring
        reformat copy writes (outward) or reads, written (read) by members."""
        nb = readers.get(t, []) if outward else ([writer[t]] if t in writer else [])
        got: List[int] = []
        for k in nb:
            if not layers[k].is_reformat:
                continue
            for x in (layers[k].outputs if outward else layers[k].inputs):
                if outward and producer.get(x.name) in inside:
                    got.append(member_at[producer[x.name]])
                elif not outward:
                    got += [member_at[r] for r in gi.consumers.get(x.name, ()) if r in inside]
        return got

    have_out = {t for outs in node_outs for t in outs}
    leaving = [j for j, i in enumerate(pos) for t in gi.nodes[i].output
               if t and (t in gi.outputs or any(r not in inside for r in gi.consumers.get(t, ())))]
    for t in e_out:
        if t in have_out:
            continue
        js = through_reformat(t, True) or leaving[:1] or [len(pos) - 1]
        if leaving and js == leaving[:1]:
            leaving = leaving[1:]  # the next renamed output: the next tensor leaving the range
        node_outs[js[0]].append(t)
    have_in = {t for ins in node_ins for t in ins}
    sources = [j for j, ins in enumerate(node_ins) if not any(x.startswith(path + "::") for x in ins)]
    for t in e_in:
        if t in have_in:
            continue
        for j in (through_reformat(t, False) or sources[:1] or [0]):
            node_ins[j].append(t)
    return [(gi.ids[i], helper.make_node(gi.nodes[i].op_type, node_ins[j], node_outs[j],
                                         name=names[j], domain=gi.nodes[i].domain))
            for j, i in enumerate(pos)]
