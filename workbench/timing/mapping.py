"""Which ONNX nodes does an engine layer cover?

In order of trust: the layer's `Metadata` (`[ONNX Layer: name]` records, TensorRT >= 8.6); the
layer name being an ONNX node name; `{ForeignNode[first...last]}` (Myelin) expanded to the ONNX
nodes between first and last in graph order when the model is known; fused names of older
engines (`Conv_0 + Relu_1`, `PWN(PWN(Sigmoid_2), Mul_3)`, `reshape_after_X`). Reformat layers
(`Reformatting CopyNode for Input Tensor 0 to X`) are *attributed* to layer X's nodes: they are
overhead caused by X's format choice, reported separately from direct mappings.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

if TYPE_CHECKING:  # pragma: no cover
    from workbench.core.graphindex import GraphIndex
    from workbench.core.model import Model
    from workbench.formats.layerinfo import EngineLayer

FOREIGN = re.compile(r"^\{ForeignNode\[(.*)\]\}$", re.S)
REFORMAT_FOR = re.compile(r"^Reformatting CopyNode for (?:Input|Output) Tensor \d+ to (.+)$", re.S)
_DERIVED_PREFIXES = ("copied_squeeze_after_", "squeeze_after_", "unsqueeze_after_",
                     "reshape_after_", "reshape_before_", "squeeze_before_",
                     "unsqueeze_before_", "shuffle_after_", "shuffle_before_")

# generated TensorRT names that are never ONNX nodes
_NOT_NODES = ("(Unnamed Layer", "[", "{", "__")

# how a mapping was found (direct ones count towards coverage; "reformat-for" is attributed)
DIRECT = ("metadata", "name", "foreign-range", "foreign-endpoints", "fused-name",
          "fused-name-unverified", "derived-name", "name-unverified")


class OnnxIndex:
    """The ONNX side of layer mapping, read from the model's `GraphIndex` (no weights, no map
    of its own): nodes are keyed by stable id (= the name when it is unique and non-empty), so a
    layer named after a name that several nodes share maps to none of them rather than to an
    arbitrary one."""

    def __init__(self, graph_index: "GraphIndex", path: str = "") -> None:
        self.graph_index = graph_index
        self.names: List[str] = graph_index.names
        self.ids: List[str] = graph_index.ids
        self.ops: List[str] = graph_index.ops
        self.position: Dict[str, int] = graph_index.position
        self.path = path

    @classmethod
    def from_model(cls, model: "Model") -> "OnnxIndex":
        return cls(model.index, path=str(model.path or ""))

    def has(self, name: str) -> bool:
        return name in self.position

    def node_id(self, name: str) -> str:
        return self.ids[self.position[name]]

    def op(self, name: str) -> str:
        return self.ops[self.position[name]]

    def resolve(self, token: str) -> Optional[str]:
        """A node (by id or unique name), or the node producing a tensor of that name."""
        if token in self.position:
            return token
        i = self.graph_index.producer.get(token)
        return None if i is None else self.ids[i]

    def _endpoint(self, token: str, first: bool) -> Optional[int]:
        """Position of a node name, of a tensor's producer, or (weights/graph inputs, which
        Myelin also names its subgraphs after) of the tensor's first/last consumer."""
        r = self.resolve(token)
        if r is not None:
            return self.position[r]
        cons = self.graph_index.consumers.get(token, ())
        if not cons:
            return None
        return min(cons) if first else max(cons)

    def between(self, first: str, last: str) -> List[str]:
        a, b = self._endpoint(first, True), self._endpoint(last, False)
        if a is None or b is None:
            return []
        if a > b:
            a, b = b, a
        return [self.ids[i] for i in range(a, b + 1)]


def _strip_derived(token: str) -> Tuple[str, bool]:
    for p in _DERIVED_PREFIXES:
        if token.startswith(p):
            return token[len(p):], True
    return token, False


def name_tokens(name: str) -> List[str]:
    """'PWN(PWN(/a/Sigmoid), /a/Mul) + Add_3' -> ['/a/Sigmoid', '/a/Mul', 'Add_3']."""
    out: List[str] = []
    for part in name.split(" + "):
        part = part.strip()
        while part.startswith("PWN(") and part.endswith(")"):
            part = part[4:-1]
        # split nested PWN lists on ', ' at depth 0
        depth, cur, pieces = 0, "", []
        for ch in part:
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
            if ch == "," and depth == 0:
                pieces.append(cur)
                cur = ""
            else:
                cur += ch
        pieces.append(cur)
        for p in pieces:
            p = p.strip()
            if p.startswith("PWN("):
                out.extend(name_tokens(p))
            elif p:
                out.append(p)
    return out


def map_layer(layer: "EngineLayer", index: Optional[OnnxIndex]) -> Tuple[List[str], str]:
    """(ONNX node names, how) for one layer; reformat attribution is done by the caller."""
    meta = layer.onnx_from_metadata
    if meta:
        if index is None:
            return list(meta), "metadata"
        found = [n for n in meta if index.has(n)]
        if found:
            return found, "metadata"
    name = layer.name
    if index is not None and index.has(name):
        return [name], "name"
    m = FOREIGN.match(name)
    if m:
        first, _, last = m.group(1).partition("...")
        first, last = first.strip(), (last.strip() or first.strip())
        if index is not None:
            rng = index.between(first, last)
            if rng:
                return rng, "foreign-range"
            ends = [n for n in (first, last) if index.has(n)]
            return (ends, "foreign-endpoints") if ends else ([], "")
        return [n for n in dict.fromkeys((first, last))], "foreign-endpoints"
    if REFORMAT_FOR.match(name):
        return [], ""
    derived_any = False
    tokens: List[str] = []
    for t in name_tokens(name):
        base, derived = _strip_derived(t)
        derived_any = derived_any or derived
        tokens.append(base)
    if index is None:
        tokens = [t for t in tokens if not t.startswith(_NOT_NODES)]
        if len(tokens) > 1:
            return list(dict.fromkeys(tokens)), "fused-name-unverified"
        if derived_any:
            return tokens, "derived-name"
        if tokens:
            return tokens, "name-unverified"
        return [], ""
    found = []
    for t in tokens:
        r = index.resolve(t)
        if r is not None and r not in found:
            found.append(r)
    if not found:
        return [], ""
    if derived_any and len(tokens) == 1:
        return found, "derived-name"
    return found, "fused-name"


def reformat_target(name: str) -> Optional[str]:
    """'Reformatting CopyNode for Input Tensor 0 to X' -> 'X'."""
    m = REFORMAT_FOR.match(name)
    return m.group(1) if m else None
