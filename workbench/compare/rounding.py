"""Where an FP16/BF16 candidate rounds what a node reads.

A culprit of a layer-wise compare that already computes in FP32 in the candidate (kept by an
earlier `--exclude`, or an op the lowering keeps FP32) cannot be helped by excluding it again:
its input arrives rounded (a timestep of 1000 cast to FP16 before the Mul that feeds a Cos).
`CandidateTypes.rounded_at` walks up from such a node through Casts and FP32 nodes to the
nearest nodes still computing in the low type whose output it reads: the ones to keep in FP32
next. A Q/DQ (INT8/FP8) candidate is read the same way (`CandidateTypes.of(proto, quantized)`):
a node it leaves in float (no Q/DQ of its own: a ReduceMax sharing the DQ in front of a Gemm)
computes in FP32, and the walk from it ends at the quantized nodes whose rounding it carries:
the owners of a DequantizeLinear it reads (the Gemm), or a quantized node whose output it
reads. Excluding the float node changes nothing; excluding those does.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Mapping, Optional, Set

from workbench.core.graphindex import GraphIndex
from workbench.core.qdq import QDQ_OPS

FLOAT_TYPES = frozenset({1, 10, 11, 16})  # FLOAT, FLOAT16, DOUBLE, BFLOAT16
LOW_TYPES = frozenset({10, 16})
CONSTANT_OPS = frozenset({"Constant", "ConstantOfShape"})  # excluding one keeps nothing FP32


@dataclass
class CandidateTypes:
    """A low-float candidate's graph and the element type of each of its tensors; for a Q/DQ
    candidate also the nodes it quantizes (`workbench.core.qdq.quantized_nodes`)."""

    index: GraphIndex
    types: Mapping[str, int]
    quantized: Optional[Set[str]] = None  # None: an FP16/BF16 candidate

    @classmethod
    def of(cls, proto: Any, quantized: Optional[Set[str]] = None) -> "CandidateTypes":
        """The candidate's index and its inferred types (main graph)."""
        from workbench.precision.lowering import scoped_types

        return cls(GraphIndex.of(proto), scoped_types(proto)[""],
                   set(quantized) if quantized is not None else None)

    def _node(self, name: str) -> Optional[int]:
        found = self.index.find(name)
        return found[0] if len(found) == 1 else None

    def _low(self, i: int) -> bool:
        """Does node i compute in the low type (a low-float output, or low inputs only; in a
        Q/DQ candidate: a quantized node)?"""
        n = self.index.nodes[i]
        if self.quantized is not None:
            return self.index.key(i) in self.quantized
        outs = [self.types.get(o, 0) for o in n.output if o]
        if any(t in LOW_TYPES for t in outs):
            return True
        return not any(t in FLOAT_TYPES for t in outs) and \
            any(self.types.get(x, 0) in LOW_TYPES for x in n.input if x)

    def _rounds(self, p: int) -> Optional[List[str]]:
        """What excluding keeps node p's rounding out of its readers: [its name] (it computes
        in the low type), the quantized readers of a DequantizeLinear (the Q/DQ is theirs),
        [] for a Constant (excluding one keeps nothing in FP32); None: p rounds nothing
        (a Cast, an FP32 node): the walk goes on above it."""
        n = self.index.nodes[p]
        if n.op_type in CONSTANT_OPS:
            return []
        if self.quantized is not None and n.op_type == "DequantizeLinear":
            return [self.index.key(r) for o in n.output if o
                    for r in self.index.consumers_of(o) if self.index.key(r) in self.quantized]
        if n.op_type == "Cast" or (self.quantized is not None and n.op_type in QDQ_OPS) or \
                not self._low(p):
            return None
        return [self.index.key(p)]

    def computes_fp32(self, name: str) -> bool:
        """Is node `name` in the candidate, computing in FP32 (float outputs, none low; Q/DQ:
        no Q/DQ of its own)?"""
        i = self._node(name)
        if i is None:
            return False
        n = self.index.nodes[i]
        if self.quantized is not None and n.op_type in QDQ_OPS + tuple(CONSTANT_OPS):
            return False
        return not self._low(i) and any(self.types.get(o, 0) in FLOAT_TYPES
                                        for o in n.output if o)

    def reads_dq(self, name: str) -> bool:
        """Q/DQ candidates: does node `name` read a DequantizeLinear output (a bystander of a
        quantized op's Q/DQ, where the rounding first shows)? A float node further down (a
        BatchNorm scaling the error that comes in) does not."""
        i = self._node(name)
        if i is None or self.quantized is None:
            return False
        return any(p is not None and self.index.nodes[p].op_type == "DequantizeLinear"
                   for p in (self.index.producer_of(x) for x in self.index.nodes[i].input if x))

    def rounded_at(self, name: str, limit: int = 4) -> List[str]:
        """The nearest nodes upstream of `name` still in the low type whose output it reads
        (through Casts and FP32 nodes, float inputs only; Constants are no answer: excluding
        one keeps nothing in FP32; Q/DQ: the quantized nodes owning a DQ it reads). At most
        `limit`, nearest first."""
        i = self._node(name)
        if i is None:
            return []
        nodes = self.index.nodes
        todo = [x for x in nodes[i].input if x and self.types.get(x, 0) in FLOAT_TYPES]
        seen, out = {i}, []
        while todo and len(out) < limit:
            p = self.index.producer_of(todo.pop(0))
            if p is None or p in seen:
                continue  # a graph input or an initializer: read as the model stores it
            seen.add(p)
            found = self._rounds(p)
            if found is None:
                todo += [x for x in nodes[p].input if x and self.types.get(x, 0) in FLOAT_TYPES]
                continue
            out += [f for f in found if f not in out]
        return out[:limit]
