"""SplitView: the ONNX graph and the TensorRT engine built from it, side by side, selection synced.

The engine side is a graph of its own, made from layer information (`workbench.timing`): one box
per engine layer (its type as the title, the ONNX nodes it covers listed inside), edges along
the tensors layers pass on. A ForeignNode (Myelin) range, or a layer covering more ONNX nodes
than its box lists, is a group: one box ('Myelin: 390 ONNX nodes') that a click opens in place
(the rest moves by a bounded shift) into its ONNX nodes, themselves grouped by name scope
(`workbench.graphs.enginegraph`). Selecting layers selects the ONNX nodes they were built from
(`LayerTable` mapping: names, metadata, ForeignNode/Myelin ranges) and selecting ONNX nodes
selects the layers covering them.

    split = SplitView("resnet50_fp16.layers.json", "resnet50.onnx", profile="resnet50_fp16.profile.json")
    split.select_layers(["/conv1/Conv + /relu/Relu"])
    TimingPanel(split.table, graph_view=split.onnx)  # the Timing panel drives the ONNX side
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import ipywidgets as W

from workbench.core.errors import WorkbenchError
from workbench.graphs.enginegraph import MAX_LISTED, SLASH, engine_graph, layer_id  # noqa: F401
from workbench.graphs.layout import GraphStructure

from widgets.graphview import GraphView


def engine_model(table: Any) -> Any:
    """An ONNX-shaped graph of the engine's layers (`workbench.graphs.enginegraph.engine_graph`)."""
    return engine_graph(table).model


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
        self.graph = engine_graph(self.table)
        s = GraphStructure(self.graph.model)
        s.group_labels = dict(self.graph.group_labels)
        # ForeignNode ranges (and layers too big to list) start collapsed: one box per layer
        self.engine = GraphView(s, height=height, expanded=())
        self.layer_of: Dict[str, int] = self.graph.layer_of   # engine node id -> layer row
        self.nodes_of: Dict[str, List[str]] = self.graph.nodes_of  # -> ONNX node ids
        self._engine_of: Dict[str, List[str]] = {}  # ONNX node id -> engine node ids
        for eid, ns in self.nodes_of.items():
            for n in ns:
                self._engine_of.setdefault(n, []).append(eid)
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
        """List each layer's ONNX nodes inside its box (the engine graph's weight lines); a
        group's members carry their ONNX node's weight lines."""
        s = self.engine.structure
        onnx_lines = self.onnx.structure.weights()
        lines = []
        for eid in s.ids[: s.n_nodes]:
            if eid in self.graph.member_of:
                k = self.onnx.structure.element_index(self.graph.member_of[eid])
                lines.append(onnx_lines[k] if k is not None and k < len(onnx_lines) else "")
                continue
            names = [n.rsplit("/", 1)[-1] or n for n in self.nodes_of.get(eid, [])]
            if len(names) > MAX_LISTED:
                names = names[: MAX_LISTED - 1] + [f"+{len(names) - MAX_LISTED + 1} ONNX nodes"]
            lines.append("\n".join(names))
        s._weights = lines
        self.engine._relayout()

    # -- selection both ways ------------------------------------------------------------------
    def select_layers(self, layer_names: Sequence[str]) -> List[str]:
        """Select engine layers (names as in layer information) and their ONNX nodes."""
        rows: Dict[str, List[int]] = {}
        for k, lay in enumerate(self.table.layers.layers):
            rows.setdefault(lay.name, []).append(k)
        ids = [self.graph.element_of_layer[k] for n in layer_names for k in rows.get(n, [])]
        ids += [n for n in layer_names if n not in rows]  # engine element ids as they are
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
        """Engine node ids built from any of these ONNX nodes (a group's members for a group)."""
        return list(dict.fromkeys(e for n in node_ids for e in self._engine_of.get(n, ())))

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
        layers = self.table.layers.layers
        rows = dict.fromkeys(self.layer_of[e] for e in self.engine.selected_nodes() if e in self.layer_of)
        return [layers[k].name for k in rows]
