"""SplitView: the ONNX graph and the TensorRT engine built from it, side by side, selection synced.

The engine side is a graph of its own, made from layer information (`workbench.timing`): one box
per engine layer (its type as the title, the ONNX nodes it covers listed inside), edges along
the tensors layers pass on. Selecting layers selects the ONNX nodes they were built from
(`LayerTable` mapping: names, metadata, ForeignNode/Myelin ranges) and selecting ONNX nodes
selects the layers covering them.

    split = SplitView("resnet50_fp16.layers.json", "resnet50.onnx", profile="resnet50_fp16.profile.json")
    split.select_layers(["/conv1/Conv + /relu/Relu"])
    TimingPanel(split.table, graph_view=split.onnx)  # the Timing panel drives the ONNX side
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import ipywidgets as W

from workbench.errors import WorkbenchError
from workbench.graph import GraphStructure

from widgets.graphview import GraphView

SLASH = "\u2215"  # '/' in layer names would read as ONNX name scopes: drawn as a division slash
MAX_LISTED = 4    # ONNX nodes listed inside a layer's box (then '+N more')


def layer_id(name: str) -> str:
    """The engine graph's element id of a layer name."""
    return name.replace("/", SLASH)


def engine_model(table: Any) -> Any:
    """An ONNX-shaped graph of the engine's layers (one node per layer, its type as op, the
    covered ONNX nodes as doc string) for GraphStructure/GraphView to lay out and draw."""
    from onnx import helper

    layers = table.layers.layers
    produced = {t.name for lay in layers for t in lay.outputs}
    consumed = {t.name for lay in layers for t in lay.inputs}
    nodes = []
    seen: Dict[str, int] = {}
    for lay in layers:
        nm = layer_id(lay.name)
        if nm in seen:  # a name twice (profiles per optimisation profile): keep them apart
            seen[nm] += 1
            nm = f"{nm} #{seen[nm]}"
        else:
            seen[nm] = 0
        nd = helper.make_node(str(lay.type or "Layer").replace(" ", ""), [t.name for t in lay.inputs],
                              [t.name for t in lay.outputs], name=nm, domain="trt.engine")
        nodes.append(nd)
    ins = sorted(consumed - produced)
    outs = sorted(produced - consumed) or sorted(produced)[-1:]
    g = helper.make_graph(nodes, "engine", [helper.make_empty_tensor_value_info(t) for t in ins],
                          [helper.make_empty_tensor_value_info(t) for t in outs])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                               helper.make_opsetid("trt.engine", 1)])


class SplitView(W.HBox):
    """ONNX | engine graphs side by side; `select_layers` / `select_nodes` (and clicks on
    either side) select the mapped elements on the other."""

    def __init__(self, layers: Any, onnx: Any, *, profile: Any = None, height: int = 560) -> None:
        from workbench.timing import LayerTable

        self.table = layers if isinstance(layers, LayerTable) else LayerTable.build(layers, profile, onnx=onnx)
        if self.table.index is None:
            raise WorkbenchError("the split view needs the ONNX model the engine was built from",
                                 field="onnx", hint="pass onnx=PATH (the model given to the builder)")
        self.onnx = GraphView(onnx, height=height)
        model = engine_model(self.table)
        self.engine = GraphView(GraphStructure(model), height=height)
        s = self.engine.structure
        # engine element id <-> layer row; layer -> ONNX node ids
        self.layer_of: Dict[str, int] = {}
        self.nodes_of: Dict[str, List[str]] = {}
        rows = list(self.table.df["onnx_nodes"])
        for k, eid in enumerate(s.ids[: s.n_nodes]):
            self.layer_of[eid] = k
            self.nodes_of[eid] = [str(n) for n in (rows[k] if k < len(rows) else [])]
        self._fill_layer_boxes()
        self._syncing = False
        self._exact_nodes: Optional[List[str]] = None
        self._last_nodes: List[str] = []
        self.onnx.observe(self._on_onnx, names="selected")
        self.engine.observe(self._on_engine, names="selected")
        self.onnx.layout.width = "50%"
        self.engine.layout.width = "50%"
        super().__init__([self.onnx, self.engine])

    def _fill_layer_boxes(self) -> None:
        """List each layer's ONNX nodes inside its box (the engine graph's weight lines)."""
        s = self.engine.structure
        lines = []
        for eid in s.ids[: s.n_nodes]:
            names = [n.rsplit("/", 1)[-1] or n for n in self.nodes_of.get(eid, [])]
            if len(names) > MAX_LISTED:
                names = names[: MAX_LISTED - 1] + [f"+{len(names) - MAX_LISTED + 1} ONNX nodes"]
            lines.append("\n".join(names))
        s._weights = lines
        self.engine._relayout()

    # -- selection both ways ------------------------------------------------------------------
    def select_layers(self, layer_names: Sequence[str]) -> List[str]:
        """Select engine layers (names as in layer information) and their ONNX nodes."""
        ids = [layer_id(n) if layer_id(n) in self.layer_of else n for n in layer_names]
        self.engine.select(ids)
        return list(self._last_nodes)

    def select_nodes(self, node_ids: Sequence[str]) -> List[str]:
        """Select ONNX nodes and the engine layers covering them."""
        self._exact_nodes = list(node_ids)
        try:
            self.onnx.select(list(node_ids))
        finally:
            self._exact_nodes = None
        return list(self.engine.selected)

    def _reveal(self, nodes: Sequence[str]) -> None:
        """Open (in place) the collapsed scopes hiding any of these ONNX nodes."""
        view = self.onnx
        visible = set(view.data.ids)
        for n in nodes[:64]:
            if n in visible or view.structure.element_index(n) is None:
                continue
            path = view.structure.scope_path_of(n)
            if path:
                view.expand(path[-1])
                visible = set(view.data.ids)

    def layers_covering(self, node_ids: Sequence[str]) -> List[str]:
        want = set(node_ids)
        return [eid for eid, ns in self.nodes_of.items() if want & set(ns)]

    def _on_engine(self, change: Dict[str, Any]) -> None:
        if self._syncing:
            return
        self._syncing = True
        try:
            nodes: List[str] = []
            for eid in self.engine.selected_nodes():
                nodes.extend(self.nodes_of.get(eid, []))
            nodes = list(dict.fromkeys(nodes))
            self._reveal(nodes)
            self.onnx.select(nodes)
            self.onnx.highlight(nodes)
            self._last_nodes = nodes
        finally:
            self._syncing = False

    def _on_onnx(self, change: Dict[str, Any]) -> None:
        if self._syncing:
            return
        self._syncing = True
        try:
            picked = self._exact_nodes if self._exact_nodes is not None else self.onnx.selected_nodes()
            layers = self.layers_covering(picked)
            self.engine.select(layers)
            self.engine.highlight(layers)
        finally:
            self._syncing = False

    def selected_layers(self) -> List[str]:
        """Layer names selected on the engine side."""
        s = self.engine.structure
        names = {layer_id(lay.name): lay.name for lay in self.table.layers.layers}
        return [names.get(e, e) for e in self.engine.selected_nodes() if e in s.ids]
