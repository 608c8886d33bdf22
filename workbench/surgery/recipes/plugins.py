"""Replace a node or a connected group of nodes with one TensorRT plugin node.

TensorRT's ONNX parser imports an op it does not know through its plugin registry: the node's
op_type is the plugin name, and the attributes `plugin_version` / `plugin_namespace` pick the
creator (other attributes become plugin fields). This recipe writes such a node for users who have
the plugin; the plugin library still has to be loaded (named by the user) when parsing.
"""
from __future__ import annotations

from typing import Any, Dict, List

from workbench.support import codes
from workbench.surgery.recipes.base import (Proposal, Param, Precondition, Recipe, find_node_index, gs_export, gs_import,
                                            node_ids,
                                            register)
from workbench.surgery.recipes.cleanup import _as_list
from workbench.core.model import ModelLike, as_model


def _standard_ops() -> set:
    from onnx import defs

    return {s.name for s in defs.get_all_schemas() if s.domain in ("", "ai.onnx")}


@register
class ReplaceWithPlugin(Recipe):
    name = "replace_with_plugin"
    summary = ("replace node(s) with one TensorRT plugin node (op = plugin name, attributes "
               "plugin_version/plugin_namespace); runs only where the plugin is loaded")
    params = (Param("nodes", "list[str]", None, "node name(s)/id(s) to replace", required=True),
              Param("plugin", "str", None, "plugin (creator) name", required=True),
              Param("version", "str", "1", "plugin version"),
              Param("namespace", "str", "", "plugin namespace"),
              Param("domain", "str", "trt.plugins", "ONNX domain of the new node"),
              Param("attrs", "dict", None, "extra plugin fields name=value"))
    preserves_semantics = False
    fixes = (codes.PLUGIN_MISSING, codes.CUSTOM_OP, codes.UNKNOWN_OP)
    priority = 90

    def can_fix(self, finding: Any, ctx: Any) -> bool:
        """Its codes, or any failure of a node of a custom domain (only a plugin runs those)."""
        idx = ctx.node_index(finding)
        if idx is None:
            return False
        custom = ctx.proto.graph.node[idx].domain not in ("", "ai.onnx")
        return custom or super().can_fix(finding, ctx)

    def propose(self, finding: Any, ctx: Any) -> List[Proposal]:
        """Always manual: only the user knows which plugin implements the op."""
        idx = ctx.node_index(finding)
        n, nid = ctx.proto.graph.node[idx], ctx.ids[idx]
        return [Proposal(nid, n.op_type, self.name,
                         {"nodes": [nid], "plugin": n.op_type, "version": "1", "namespace": ""},
                         "no exact rewrite is registered; if you have a TensorRT plugin that "
                         "implements it, replace the node and load the plugin library",
                         auto=False, code=finding.code)]

    def _boundary(self, proto: Any, idxs: List[int]) -> Dict[str, List[str]]:
        g = proto.graph
        inside = set(idxs)
        produced = {o for i in idxs for o in g.node[i].output if o}
        inputs: List[str] = []
        for i in idxs:
            for x in g.node[i].input:
                if x and x not in produced and x not in inputs:
                    inputs.append(x)
        graph_outs = {o.name for o in g.output}
        outputs: List[str] = []
        for i in idxs:
            for o in g.node[i].output:
                if not o:
                    continue
                outside = any(o in g.node[j].input for j in range(len(g.node)) if j not in inside)
                if (outside or o in graph_outs) and o not in outputs:
                    outputs.append(o)
        return {"inputs": inputs, "outputs": outputs}

    def precondition(self, model: ModelLike, nodes: Any = None, plugin: str = "", version: str = "1",
                     namespace: str = "", domain: str = "trt.plugins", attrs: Any = None) -> Precondition:
        proto = as_model(model).with_weights()
        names = _as_list(nodes)
        if not names:
            return Precondition(False, "give the node(s) to replace", [])
        if not plugin:
            return Precondition(False, "give the plugin name", [])
        if domain in ("", "ai.onnx") and plugin in _standard_ops():
            return Precondition(False, f"'{plugin}' is a standard ONNX op: TensorRT would import "
                                "the op, not the plugin; use a distinct plugin name or domain", [])
        idxs = [find_node_index(proto, n) for n in names]
        ids = node_ids(proto)
        b = self._boundary(proto, idxs)
        if not b["outputs"]:
            return Precondition(False, "the node(s) produce nothing the rest of the graph uses", names)
        # the group must be convex: no path leaves the group and comes back into it
        g = proto.graph
        inside = set(idxs)
        produced_by = {o: i for i, n in enumerate(g.node) for o in n.output}
        for i in idxs:
            stack = [x for x in g.node[i].input if x]
            seen = set()
            while stack:
                t = stack.pop()
                j = produced_by.get(t)
                if j is None or t in seen:
                    continue
                seen.add(t)
                if j in inside:
                    continue
                # walk outside nodes upstream; reaching the group again breaks convexity
                for x in g.node[j].input:
                    k = produced_by.get(x)
                    if k in inside:
                        return Precondition(False, f"the group is not convex: {ids[j]} lies between "
                                            "nodes of the group; include it or choose fewer nodes",
                                            [ids[j]])
                    stack.append(x)
        ops = sorted({g.node[i].op_type for i in idxs})
        return Precondition(True, f"applies: {len(idxs)} node(s) ({', '.join(ops)}) become plugin "
                            f"'{plugin}' v{version} (namespace '{namespace}') with inputs "
                            f"{b['inputs']} and outputs {b['outputs']}; the plugin library must be "
                            "loaded when TensorRT parses the model", [ids[i] for i in idxs])

    def _apply(self, proto: Any, nodes: Any = None, plugin: str = "", version: str = "1",
               namespace: str = "", domain: str = "trt.plugins", attrs: Any = None) -> Any:
        from onnx import helper

        names = _as_list(nodes)
        idxs = sorted(find_node_index(proto, n) for n in names)
        b = self._boundary(proto, idxs)
        extra: Dict[str, Any] = {}
        for k, v in (attrs or {}).items():
            extra[k] = _coerce(v)
        pnode = helper.make_node(plugin, b["inputs"], b["outputs"], domain=domain,
                                 name=f"{plugin}_plugin_" + "_".join(
                                     proto.graph.node[i].name or str(i) for i in idxs)[:80],
                                 plugin_version=str(version), plugin_namespace=str(namespace),
                                 **extra)
        g = proto.graph
        nodes_list = [n for i, n in enumerate(g.node) if i not in set(idxs)]
        nodes_list.insert(idxs[0], pnode)
        del g.node[:]
        g.node.extend(nodes_list)
        if not any(o.domain == domain for o in proto.opset_import) and domain not in ("", "ai.onnx"):
            proto.opset_import.append(helper.make_opsetid(domain, 1))
        out = gs_import(proto)
        out.cleanup(remove_unused_graph_inputs=False).toposort()
        return gs_export(out, proto)


def _coerce(v: Any) -> Any:
    if isinstance(v, str):
        for conv in (int, float):
            try:
                return conv(v)
            except ValueError:
                pass
    return v
