"""The Workspace: one folder per model (by content hash) that the CLI and widgets share.

    <home>/models/<hash16>/
        source.json          where the original came from (never modified)
        versions/<sha>.onnx  content-addressed model versions (atomic writes)
        history.jsonl        append-only log of what was done (one JSON object a line)
        .lock                the workspace lock (see `ModelWorkspace.lock`)
        engines/             engine cache (see workbench.engines.engine)
        timing-caches/       TensorRT timing caches
        runs/                saved run results
        outputs/             what the panels write by default (a converted model, a fixed
                             model, a split): never beside the user's model unless asked
Home is $WORKBENCH_HOME, else ~/.trt-workbench. Everything survives a kernel restart or a kill:
files are written atomically and a torn last history line is ignored on read.

Several processes may share one workspace (two notebooks, parallel CI jobs, a matrix on one
model). Content-addressed files need no coordination (equal bytes, atomic renames); the steps
that read-then-write shared state (a history append that depends on what the log holds, an
engine-cache publish) run under `ws.lock()`, an flock that is released when a process dies.
"""
from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any, ContextManager, Dict, List, Optional, Protocol, Union

from workbench.core.fsutil import (Subfolder, append_jsonl, atomic_write_bytes, atomic_write_json,
                              locked, read_jsonl)

PathLike = Union[str, "os.PathLike[str]"]


class Keyed(Protocol):
    """What a workspace is keyed by: a model handle's content hash (and its path, recorded)."""

    @property
    def content_hash(self) -> str: ...

    @property
    def path(self) -> Optional[Path]: ...


def workbench_home() -> Path:
    env = os.environ.get("WORKBENCH_HOME")
    return Path(env) if env else Path.home() / ".trt-workbench"


class ModelWorkspace:
    """The folder of one model: versions, history, engines, timing caches, runs."""

    versions_dir = Subfolder("versions")
    engines_dir = Subfolder("engines")
    timing_caches_dir = Subfolder("timing-caches")
    runs_dir = Subfolder("runs")
    outputs_dir = Subfolder("outputs")  # the panels' default outputs (made on first use)

    def __init__(self, root: PathLike) -> None:
        self.dir = Path(root)
        for sub in (self.versions_dir, self.engines_dir, self.timing_caches_dir, self.runs_dir):
            sub.mkdir(parents=True, exist_ok=True)

    def output_path(self, name: str) -> Path:
        """`outputs/<name>` (the folder made): a default output path for a file the user did
        not name, kept out of the user's folders (a git checkout stays clean)."""
        if not name or Path(name).name != name:
            raise ValueError(f"an output name, not a path: {name!r}")
        self.outputs_dir.mkdir(parents=True, exist_ok=True)
        return self.outputs_dir / name

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

    @property
    def lock_path(self) -> Path:
        return self.dir / ".lock"

    def build_lock_path(self, key: str) -> Path:
        """The lock a build of cache key `key` holds while it runs (`fsutil.single_flight`),
        kept apart from the engines so a listing of the cache shows engines and cards only."""
        return self.dir / ".building" / f"{key[:32]}.lock"

    def lock(self) -> ContextManager[None]:
        """The workspace's inter-process lock (re-entrant in a thread): hold it only for
        short read-then-write steps, never across a parse or a build."""
        return locked(self.lock_path)

    def append_history(self, record: Dict[str, Any]) -> Dict[str, Any]:
        rec = dict(record)
        rec.setdefault("time", time.time())
        with self.lock():  # one whole line at a time, whoever else appends
            append_jsonl(self.history_path, rec)
        return rec

    def history(self) -> List[Dict[str, Any]]:
        """The log's records (JSON objects); a line that is not one is skipped with a
        CorruptLineWarning."""
        return read_jsonl(self.history_path, objects_only=True)


def workspace_for(model: Keyed, home: Optional[PathLike] = None) -> ModelWorkspace:
    """The workspace of a model handle (`workbench.core.model.Model.workspace`), keyed by its
    content hash."""
    root = Path(home) if home is not None else workbench_home()
    ws = ModelWorkspace(root / "models" / model.content_hash[:16])
    src = ws.dir / "source.json"
    if not src.exists():
        atomic_write_json(src, {"path": str(model.path) if model.path else None,
                                "content_hash": model.content_hash, "created": time.time()})
    return ws
