"""Versions of a model under surgery: every kept change is a content-addressed file in the
model's Workspace plus one line in its append-only history log; undo/redo are log lines too.
History only stores and replays versions: making a change (recipe, verification, verdict) is
`workbench.surgery.changes.apply_in_history`, which stages, then records or discards.

The state (current version, redo stack) is rebuilt by replaying the log, so a new process (a
restarted kernel, the CLI) sees exactly what the last one left, and a kill at any point leaves
either the old state or the new one: the version file is written atomically *before* its log
line, and a torn last line is ignored on read. The original file is never written to.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from workbench.errors import WorkbenchError
from workbench.model import Model, open_model, save_model
from workbench.surgery.recipes.base import _pause_hook
from workbench.workspace import ModelWorkspace, workspace_for

KIND = "surgery"
BLOB_MIN_BYTES = 1 << 14  # initializers at least this big live in the shared blob store


def _graphs(proto: Any) -> List[Any]:
    from workbench.model import _iter_graphs

    return list(_iter_graphs(proto.graph))


def store_version(ws: ModelWorkspace, proto: Any) -> str:
    """Write `proto` as a version: large initializers go to content-addressed blobs
    (versions/blobs/<sha256>.bin, shared by every version that has the same tensor) and the
    version file references them as external data. A version of a big model then costs only
    what changed, and models over protobuf's 2 GB limit can be versioned. The version id hashes
    the graph and the blob ids, so equal models get equal ids. Blobs are written (atomically)
    before the version file that names them."""
    import hashlib

    import onnx

    from workbench.fsutil import atomic_write_bytes
    from workbench.surgery.recipes.base import light_copy

    blobs = ws.versions_dir / "blobs"
    # a copy that leaves out the big tensors' bytes (never the weights themselves), then point
    # those tensors at blobs; the caller's proto is not touched
    out = light_copy(proto, max_bytes=BLOB_MIN_BYTES - 1)
    for g, lg in zip(_graphs(proto), _graphs(out)):
        for t, lt in zip(g.initializer, lg.initializer):
            if not (t.HasField("raw_data") and t.ByteSize() >= BLOB_MIN_BYTES):
                if lt.ByteSize() != t.ByteSize():
                    lt.CopyFrom(t)  # small or typed-field data stays inline, whole
                continue
            raw = t.raw_data
            sha = hashlib.sha256(raw).hexdigest()
            path = blobs / f"{sha}.bin"
            if not path.exists():
                atomic_write_bytes(path, raw)
            lt.ClearField("raw_data")
            lt.data_location = onnx.TensorProto.EXTERNAL
            del lt.external_data[:]
            for k, v in (("location", f"blobs/{sha}.bin"), ("offset", "0"),
                         ("length", str(len(raw)))):
                e = lt.external_data.add()
                e.key, e.value = k, v
            del raw
    data = out.SerializeToString()
    return ws.add_version(data)


class History:
    """Undoable surgery on one original model (path or Model)."""

    def __init__(self, model: Any, home: Any = None) -> None:
        if isinstance(model, Model):
            self.model = model
        elif isinstance(model, (str, Path)):
            self.model = open_model(model)
        else:
            raise WorkbenchError("History needs a model file path or an opened Model",
                                 hint="save the ModelProto first (workbench.model.save_model)")
        self.ws: ModelWorkspace = workspace_for(self.model, home)
        self._proto_cache: Dict[str, Any] = {}
        if not self._records():
            proto = self.model.load_weights()
            vid = store_version(self.ws, proto)
            self._proto_cache = {vid: proto}
            self._log({"event": "init", "version": vid,
                       "source": str(self.model.path) if self.model.path else None})

    # ------------------------------------------------------------------ log and replay
    def _log(self, rec: Dict[str, Any]) -> Dict[str, Any]:
        return self.ws.append_history({"kind": KIND, **rec})

    def _records(self) -> List[Dict[str, Any]]:
        return [r for r in self.ws.history() if r.get("kind") == KIND]

    def _state(self) -> Dict[str, Any]:
        cur, redo, made = None, [], []
        for r in self._records():
            ev = r.get("event")
            if ev == "init":
                cur = r["version"]
                made.append(r)
            elif ev == "apply":
                cur = r["version"]
                redo = []
                made.append(r)
            elif ev == "undo":
                redo.append(r["from"])
                cur = r["to"]
            elif ev == "redo":
                if redo and redo[-1] == r["to"]:
                    redo.pop()
                cur = r["to"]
            elif ev == "checkout":
                cur = r["to"]
                redo = []
        return {"current": cur, "redo": redo, "made": made}

    # ------------------------------------------------------------------ queries
    @property
    def current(self) -> str:
        return self._state()["current"]

    @property
    def original(self) -> str:
        return self._records()[0]["version"]

    def versions(self) -> List[Dict[str, Any]]:
        """Every version ever made, oldest first (init, then one per kept change)."""
        out = []
        for k, r in enumerate(self._state()["made"]):
            out.append({"index": k, "version": r["version"], "parent": r.get("parent"),
                        "recipe": r.get("recipe", "(original)"), "params": r.get("params", {}),
                        "diff": r.get("diff"), "verification": r.get("verification"),
                        "forced": r.get("forced", False), "time": r.get("time"),
                        "exists": self.ws.version_path(r["version"]).exists()})
        return out

    def lineage(self) -> List[str]:
        """Version ids from the original to the current one."""
        parents = {r["version"]: r.get("parent") for r in self._state()["made"]}
        out, v = [], self.current
        while v is not None:
            out.append(v)
            v = parents.get(v)
        return list(reversed(out))

    def can_undo(self) -> bool:
        return self.current != self.original and self._parent(self.current) is not None

    def can_redo(self) -> bool:
        return bool(self._state()["redo"])

    def _parent(self, vid: str) -> Optional[str]:
        for r in self._state()["made"]:
            if r["version"] == vid:
                return r.get("parent")
        return None

    def current_path(self) -> Path:
        return self.version_path(self.current)

    def version_path(self, vid: str) -> Path:
        p = self.ws.version_path(vid)
        if not p.exists():
            raise WorkbenchError(f"version {vid} is missing from the workspace", file=str(p),
                                 hint="the workspace folder was modified outside the workbench")
        return p

    def proto(self, vid: str) -> Any:
        import onnx

        if vid not in self._proto_cache:
            self._proto_cache = {vid: onnx.load(str(self.version_path(vid)))}
        return self._proto_cache[vid]

    def current_proto(self) -> Any:
        return self.proto(self.current)

    def original_proto(self) -> Any:
        import onnx

        return onnx.load(str(self.version_path(self.original)))

    def current_model(self) -> Model:
        return open_model(self.current_path())

    # ------------------------------------------------------------------ changes
    def commit(self, change: Any) -> str:
        """Store a kept Change as a new version (file first, then the log line)."""
        if not change.kept:
            raise WorkbenchError(f"refusing to record recipe '{change.recipe}': {change.note}",
                                 hint="re-run with force=True to keep a change that differs")
        return self.record(change, self.stage(change.proto))

    def stage(self, proto: Any) -> str:
        """Write `proto` as a version file (no log line yet): verification can then load it
        from disk; `record` makes it current, `discard` removes it again."""
        return store_version(self.ws, proto)

    def discard(self, vid: str) -> None:
        """Remove a staged version file that was never recorded (a change not kept)."""
        if vid not in {r["version"] for r in self._state()["made"]}:
            self.ws.version_path(vid).unlink(missing_ok=True)

    def record(self, change: Any, vid: str) -> str:
        """The log line that makes staged version `vid` (holding `change.proto`) current."""
        if not change.kept:
            raise WorkbenchError(f"refusing to record recipe '{change.recipe}': {change.note}",
                                 hint="re-run with force=True to keep a change that differs")
        before = self.current
        _pause_hook("commit", change.recipe)
        rec = change.to_dict()
        rec.update({"event": "apply", "version": vid, "parent": before})
        self._log(rec)
        change.version, change.parent = vid, before
        self._proto_cache = {vid: change.proto}
        return vid

    def undo(self) -> str:
        cur = self.current
        parent = self._parent(cur)
        if parent is None:
            raise WorkbenchError("nothing to undo: this is the original model")
        self._log({"event": "undo", "from": cur, "to": parent})
        return parent

    def redo(self) -> str:
        st = self._state()
        if not st["redo"]:
            raise WorkbenchError("nothing to redo")
        to = st["redo"][-1]
        self._log({"event": "redo", "from": st["current"], "to": to})
        return to

    def checkout(self, vid: str) -> str:
        """Make any earlier version current (clears redo)."""
        if vid not in {r["version"] for r in self._state()["made"]}:
            raise WorkbenchError(f"no version {vid} in this model's history", field="version")
        self._log({"event": "checkout", "from": self.current, "to": vid})
        return vid

    def export(self, path: Any, vid: Optional[str] = None) -> Path:
        """Write a version (default: current) to `path` as a self-contained model (weights
        inline; beside it as `<name>.data` over 1.8 GB); never over the original model."""
        import onnx

        proto = onnx.load(str(self.version_path(vid or self.current)))
        return save_model(proto, path, source=self.model.path)
