"""The Workspace: one folder per model (by content hash) that the CLI and widgets share.

    <home>/models/<hash16>/
        source.json          where the original came from (never modified)
        versions/<sha>.onnx  content-addressed model versions (atomic writes)
        history.jsonl        append-only log of what was done (one JSON object a line)
        engines/             engine cache (see workbench.build.engine)
        timing-caches/       TensorRT timing caches
        runs/                saved run results
Home is $WORKBENCH_HOME, else ~/.trt-workbench. Everything survives a kernel restart or a kill:
files are written atomically and a torn last history line is ignored on read.
"""
from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from workbench.fsutil import append_jsonl, atomic_write_bytes, atomic_write_json, read_jsonl

PathLike = Union[str, "os.PathLike[str]"]


def workbench_home() -> Path:
    env = os.environ.get("WORKBENCH_HOME")
    return Path(env) if env else Path.home() / ".trt-workbench"


class ModelWorkspace:
    """The folder of one model: versions, history, engines, timing caches, runs."""

    def __init__(self, root: PathLike) -> None:
        self.dir = Path(root)
        for sub in ("versions", "engines", "timing-caches", "runs"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)

    @property
    def versions_dir(self) -> Path:
        return self.dir / "versions"

    @property
    def engines_dir(self) -> Path:
        return self.dir / "engines"

    @property
    def timing_caches_dir(self) -> Path:
        return self.dir / "timing-caches"

    @property
    def runs_dir(self) -> Path:
        return self.dir / "runs"

    @property
    def history_path(self) -> Path:
        return self.dir / "history.jsonl"

    def add_version(self, data: bytes) -> str:
        """Store model bytes content-addressed; returns the version id (sha256 prefix)."""
        vid = hashlib.sha256(data).hexdigest()[:16]
        path = self.version_path(vid)
        if not path.exists():
            atomic_write_bytes(path, data)
        return vid

    def version_path(self, vid: str) -> Path:
        return self.versions_dir / f"{vid}.onnx"

    def versions(self) -> List[str]:
        return sorted(p.stem for p in self.versions_dir.glob("*.onnx"))

    def append_history(self, record: Dict[str, Any]) -> Dict[str, Any]:
        rec = dict(record)
        rec.setdefault("time", time.time())
        append_jsonl(self.history_path, rec)
        return rec

    def history(self) -> List[Dict[str, Any]]:
        return read_jsonl(self.history_path)


def workspace_for(model: Any, home: Optional[PathLike] = None) -> ModelWorkspace:
    """The workspace of a `workbench.model.Model` (keyed by its content hash)."""
    root = Path(home) if home is not None else workbench_home()
    ws = ModelWorkspace(root / "models" / model.content_hash[:16])
    src = ws.dir / "source.json"
    if not src.exists():
        atomic_write_json(src, {"path": str(model.path) if model.path else None,
                                "content_hash": model.content_hash, "created": time.time()})
    return ws
