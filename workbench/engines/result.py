"""`BuildResult`: what a build (or a cache hit) hands back: the engine, its backend, the
findings, the exports and the built network's layers."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from workbench.core.errors import Finding


@dataclass
class BuildResult:
    engine_path: str
    size_bytes: int
    seconds: float
    backend: str
    backend_version: str
    config_hash: str
    cache_hit: bool
    findings: List[Finding] = field(default_factory=list)
    export: Dict[str, Any] = field(default_factory=dict)
    log: List[Dict[str, str]] = field(default_factory=list)
    key: str = ""
    route: str = ""
    onnx_path: str = ""
    output_path: Optional[str] = None
    build_seconds: float = 0.0
    targets: List[str] = field(default_factory=list)
    layers: List[Dict[str, Any]] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    config: Optional[Dict[str, Any]] = None
    # a split build (workbench.engines.tail): refused nodes, node counts, tail + manifest paths
    split: Optional[Dict[str, Any]] = None

    @property
    def size(self) -> int:
        return self.size_bytes

    @property
    def memory(self) -> Dict[str, int]:
        """Activation / weights / scratch bytes as the build log reported them."""
        from workbench.core.trtlog import memory_from_log

        return memory_from_log(self.log)

    def dtype_counts(self) -> Dict[str, int]:
        """How many layer outputs of the built network carry each dtype (FLOAT, HALF, INT8...)."""
        counts: Dict[str, int] = {}
        for layer in self.layers:
            for o in layer.get("outputs", []):
                counts[o["dtype"]] = counts.get(o["dtype"], 0) + 1
        return counts

    def to_dict(self, *, with_log: bool = False, with_layers: bool = False) -> Dict[str, Any]:
        d = {
            "engine_path": self.output_path or self.engine_path, "cache_path": self.engine_path,
            "size_bytes": self.size_bytes, "seconds": round(self.seconds, 4),
            "build_seconds": round(self.build_seconds, 4), "backend": self.backend,
            "backend_version": self.backend_version, "config_hash": self.config_hash,
            "cache_hit": self.cache_hit, "cache_key": self.key, "route": self.route,
            "onnx_path": self.onnx_path, "targets": self.targets,
            "dtypes": self.dtype_counts(), "memory": self.memory, "notes": self.notes,
            "findings": [f.to_dict() for f in self.findings],
            "export": {k: v for k, v in self.export.items() if k != "script"},
            "config": self.config, "split": self.split,
        }
        if with_log:
            d["log"] = self.log
        if with_layers:
            d["layers"] = self.layers
        return d
