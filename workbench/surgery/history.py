"""Versions of a model under surgery: every kept change is a content-addressed file in the
model's Workspace plus one line in its append-only history log; undo/redo are log lines too.
History only stores and replays versions: making a change (recipe, verification, verdict) is
`workbench.surgery.changes.apply_in_history`, which stages, then records or discards.

Each History object is one *session* (id, start time, pid; every line it writes names it). A
new session opens the model as it is on disk (`start="original"`, the default) and *offers* the
changes the log holds for the same content (`earlier()`: "3 earlier changes of this model
exist"); `resume()`, or `start="latest"`, continues from where the log left off (replaying it: a
restarted kernel sees exactly what the last one left). Identical content shares one log, so a
copy of a file someone fixed before is not silently opened fixed. From then on a session's
current version and redo stack are its own, so sessions running at the same time on one model
(two notebooks, parallel `workbench fix` jobs) never move each other's state. The log has one
entry per real change: a session that computes a change already in the log (same parent, same
version) reuses it and records no duplicate; that check and the append run under the
workspace lock. A kill at any point leaves either the old state or the new one: the version
file is written atomically *before* its log line, a torn last line is ignored on read, and a
corrupted or stale line is skipped with a warning. The original file is never written to.
"""
from __future__ import annotations

import os
import time
import uuid
import warnings
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

from workbench.core.errors import WorkbenchError
from workbench.core.fsutil import CorruptLineWarning, fixed_name
from workbench.core.model import Model, ModelLike, as_model, open_model, save_model
from workbench.surgery.recipes.base import _pause_hook
from workbench.core.workspace import ModelWorkspace, workspace_for

KIND = "surgery"
_MOVES = {"init": "version", "apply": "version", "undo": "to", "redo": "to", "checkout": "to"}
BLOB_MIN_BYTES = 1 << 14  # initializers at least this big live in the shared blob store


def _graphs(proto: Any) -> List[Any]:
    from workbench.core.model import _iter_graphs

    return list(_iter_graphs(proto.graph))


def _external_chunks(base: Path, t: Any, chunk: int = 64 << 20) -> Iterator[bytes]:
    """The bytes of an external tensor of a model in `base`, `chunk` at a time."""
    kv = {e.key: e.value for e in t.external_data}
    path = base / kv.get("location", "")
    offset, length = int(kv.get("offset") or 0), int(kv.get("length") or 0)
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            left = length if length > 0 else os.fstat(f.fileno()).st_size - offset
            while left > 0:
                b = f.read(min(chunk, left))
                if not b:
                    raise WorkbenchError(f"external-data file '{path.name}' ends inside tensor "
                                         f"'{t.name}'", file=str(path),
                                         hint="the data file is truncated; re-export the model")
                left -= len(b)
                yield b
    except OSError as e:
        raise WorkbenchError(f"cannot read external data of '{t.name}' ({e.strerror})",
                             file=str(path), hint="put the data file next to the model") from None


def _stream_blob(blobs: Path, base: Path, t: Any) -> Tuple[str, int]:
    """Copy an external tensor into a content-addressed blob, streamed (hashed while copied
    into a temporary file, renamed to its hash). Returns (sha256, length)."""
    import hashlib
    import tempfile

    blobs.mkdir(parents=True, exist_ok=True)
    h, n = hashlib.sha256(), 0
    fd, tmp = tempfile.mkstemp(dir=blobs, prefix=".blob-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            for b in _external_chunks(base, t):
                h.update(b)
                f.write(b)
                n += len(b)
            f.flush()
            os.fsync(f.fileno())
        path = blobs / f"{h.hexdigest()}.bin"
        if path.exists():
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return h.hexdigest(), n


def store_version(ws: ModelWorkspace, proto: Any, source_dir: Optional[Path] = None) -> str:
    """Write `proto` as a version: large initializers go to content-addressed blobs
    (versions/blobs/<sha256>.bin, shared by every version that has the same tensor) and the
    version file references them as external data. A version of a big model then costs only
    what changed, and models over protobuf's 2 GB limit can be versioned. The version id hashes
    the graph and the blob ids, so equal models get equal ids. Blobs are written (atomically)
    before the version file that names them. With `source_dir`, tensors `proto` keeps in
    external data (files in that folder) are streamed into their blobs, never loaded whole."""
    import hashlib

    import onnx

    from workbench.core.fsutil import atomic_write_bytes
    from workbench.surgery.recipes.base import light_copy

    blobs = ws.versions_dir / "blobs"
    # a copy that leaves out the big tensors' bytes (never the weights themselves), then point
    # those tensors at blobs; the caller's proto is not touched
    out = light_copy(proto, max_bytes=BLOB_MIN_BYTES - 1)
    for g, lg in zip(_graphs(proto), _graphs(out)):
        for t, lt in zip(g.initializer, lg.initializer):
            if source_dir is not None and t.data_location == onnx.TensorProto.EXTERNAL:
                length = int(next((e.value for e in t.external_data if e.key == "length"),
                                  0) or 0)
                if length >= BLOB_MIN_BYTES:  # big: streamed into its blob
                    sha, length = _stream_blob(blobs, Path(source_dir), t)
                    lt.CopyFrom(t)
                    del lt.external_data[:]
                    for k, v in (("location", f"blobs/{sha}.bin"), ("offset", "0"),
                                 ("length", str(length))):
                        e = lt.external_data.add()
                        e.key, e.value = k, v
                    continue
                full = type(t)()  # small: read, then stored as a loaded tensor would be
                full.CopyFrom(t)
                full.raw_data = b"".join(_external_chunks(Path(source_dir), t))
                del full.external_data[:]
                full.data_location = onnx.TensorProto.DEFAULT
                t = full
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


def _valid(rec: Dict[str, Any]) -> bool:
    """A surgery record this code can replay (a stale or foreign line is skipped, warned)."""
    field_name = _MOVES.get(rec.get("event"))  # type: ignore[arg-type]
    return field_name is not None and isinstance(rec.get(field_name), str)


def replay(records: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The state a log leaves: original, current, redo stack, and the changes made (one per
    (parent, version), oldest first; an older log's duplicate lines count once)."""
    original: Optional[str] = None
    cur: Optional[str] = None
    redo: List[str] = []
    made: List[Dict[str, Any]] = []
    seen: set = set()
    for r in records:
        ev = r["event"]
        if ev == "init":
            if original is None:
                original = r["version"]
                made.append(r)
                seen.add((None, original))
            cur, redo = r["version"], []
        elif ev == "apply":
            key = (r.get("parent"), r["version"])
            if key not in seen:
                seen.add(key)
                made.append(r)
            cur, redo = r["version"], []
        elif ev == "undo":
            if isinstance(r.get("from"), str):
                redo.append(r["from"])
            cur = r["to"]
        elif ev == "redo":
            if redo and redo[-1] == r["to"]:
                redo.pop()
            cur = r["to"]
        elif ev == "checkout":
            cur, redo = r["to"], []
    return {"original": original, "current": cur, "redo": redo, "made": made}


def _lineage(vid: Optional[str], parents: Dict[str, Optional[str]]) -> List[str]:
    out: List[str] = []
    while vid is not None and vid not in out:  # (a hand-edited log could hold a cycle)
        out.append(vid)
        vid = parents.get(vid)
    return list(reversed(out))


class History:
    """Undoable surgery on one original model (path or Model): one session of its log.

    `start="original"` (default) starts this session from the model as it is on disk, writing
    nothing; `earlier()` says what the log holds beyond it and `resume()` opens that.
    `start="latest"` continues from the state the log leaves at once (a restarted kernel).
    """

    def __init__(self, model: ModelLike, home: Any = None, *, start: str = "original") -> None:
        if isinstance(model, (Model, str, os.PathLike)):
            self.model: Model = as_model(model)
        else:
            raise WorkbenchError("History needs a model file path or an opened Model",
                                 hint="save the ModelProto first (workbench.core.model.save_model)")
        if start not in ("latest", "original"):
            raise WorkbenchError(f"unknown history start '{start}'", field="start",
                                 hint="use 'latest' or 'original'")
        self.ws: ModelWorkspace = workspace_for(self.model, home)
        self.session: Dict[str, Any] = {"id": uuid.uuid4().hex[:12], "start": time.time(),
                                        "pid": os.getpid()}
        self._proto_cache: Dict[str, Any] = {}
        # version -> (file, mtime_ns, size) this session exported it to (`exported`)
        self._exports: Dict[str, Tuple[Path, int, int]] = {}
        state = replay(self._records())
        if state["original"] is None:
            if self.model.external_files and self.model.base_dir is not None:
                if self.model.missing_external or self.model.truncated_external:
                    self.model.load_weights()  # (raises the error naming the data file)
                # weights streamed into blobs; loaded from the version when a change needs them
                vid = store_version(self.ws, self.model.proto, self.model.base_dir)
            else:
                proto = self.model.load_weights()  # parse and store outside the lock
                vid = store_version(self.ws, proto)
                self._proto_cache = {vid: proto}
            with self.ws.lock():  # one init line, however many sessions start at once
                state = replay(self._records())
                if state["original"] is None:
                    self._log({"event": "init", "version": vid,
                               "source": str(self.model.path) if self.model.path else None})
                    state = replay(self._records())
        self._original: str = state["original"]
        self._remade: set = set()  # versions this session made again (another made them first)
        if start == "original":
            self._line, self._redo = [self._original], []
        else:
            self._line = self._existing(_lineage(state["current"], self._parents(state)))
            self._redo = [v for v in state["redo"] if self.ws.version_path(v).exists()]

    # ------------------------------------------------------------------ log and replay
    def _log(self, rec: Dict[str, Any]) -> Dict[str, Any]:
        return self.ws.append_history({"kind": KIND, **rec, "session": self.session["id"],
                                       "session_start": self.session["start"],
                                       "pid": self.session["pid"]})

    def _records(self) -> List[Dict[str, Any]]:
        out = []
        for r in self.ws.history():
            if r.get("kind") != KIND:
                continue
            if _valid(r):
                out.append(r)
            else:
                warnings.warn(f"{self.ws.history_path}: skipped a surgery line that cannot be "
                              f"replayed ({str(r)[:80]})", CorruptLineWarning, stacklevel=2)
        return out

    def _state(self) -> Dict[str, Any]:
        return replay(self._records())

    @staticmethod
    def _parents(state: Dict[str, Any]) -> Dict[str, Optional[str]]:
        parents: Dict[str, Optional[str]] = {}
        for r in state["made"]:
            parents.setdefault(r["version"], r.get("parent"))
        return parents

    def _existing(self, line: List[str]) -> List[str]:
        """A replayed lineage cut back to its last version whose file is still there (a stale
        line: the workspace was changed outside the workbench)."""
        keep = [self._original]
        for v in line[1:] if line and line[0] == self._original else []:
            if not self.ws.version_path(v).exists():
                warnings.warn(f"{self.ws.history_path}: version {v} is missing from the "
                              "workspace; continuing from its parent", CorruptLineWarning,
                              stacklevel=3)
                break
            keep.append(v)
        return keep

    # ------------------------------------------------------------------ queries
    @property
    def current(self) -> str:
        return self._line[-1]

    @property
    def original(self) -> str:
        return self._original

    def versions(self) -> List[Dict[str, Any]]:
        """Every version ever made by any session, oldest first (init, then one per change);
        `mine` marks this session's."""
        out = []
        for k, r in enumerate(self._state()["made"]):
            out.append({"index": k, "version": r["version"], "parent": r.get("parent"),
                        "recipe": r.get("recipe", "(original)"), "params": r.get("params", {}),
                        "diff": r.get("diff"), "verification": r.get("verification"),
                        "forced": r.get("forced", False), "time": r.get("time"),
                        "session": r.get("session"), "session_start": r.get("session_start"),
                        "pid": r.get("pid"), "mine": r.get("session") == self.session["id"],
                        "exists": self.ws.version_path(r["version"]).exists()})
        return out

    def lineage(self) -> List[str]:
        """Version ids from the original to this session's current one."""
        return list(self._line)

    def can_undo(self) -> bool:
        return len(self._line) > 1

    def can_redo(self) -> bool:
        return bool(self._redo)

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

    def current_model(self) -> Model:
        return open_model(self.current_path())

    # ------------------------------------------------------------------ the user's files
    def suggested_output(self) -> Optional[Path]:
        """Where a fixed model goes unless the user says otherwise: `<name>.fixed.onnx` in the
        model's workspace (`outputs/`), never beside the user's model (a repository stays
        clean) nor over it; None for a model without a file."""
        src = self.model.path
        return None if src is None else self.ws.output_path(Path(fixed_name(str(src))).name)

    def exported(self, vid: Optional[str] = None) -> Optional[Path]:
        """The file this session last exported version `vid` (default: current) to, while it
        still holds it (same size and modification time as when written); else None."""
        got = self._exports.get(vid or self.current)
        if got is None:
            return None
        path, mtime, size = got
        try:
            st = path.stat()
        except OSError:
            return None
        return path if (st.st_mtime_ns, st.st_size) == (mtime, size) else None

    def user_path(self, vid: Optional[str] = None) -> Optional[Path]:
        """A file the user knows that holds version `vid` (default: current): the original
        model for the original, else where this session exported it; None when the version
        lives only in the workspace (its `version_path` is internal: name it in nothing a user
        copies)."""
        vid = vid or self.current
        if vid == self.original and self.model.path is not None:
            return Path(self.model.path)
        return self.exported(vid)

    # ------------------------------------------------------------------ earlier sessions
    def _latest(self) -> Tuple[List[str], List[str]]:
        """Where the log leaves off: its lineage (original first, cut at a missing version
        file) and its redo stack."""
        state = self._state()
        line = self._existing(_lineage(state["current"], self._parents(state)))
        return line, [v for v in state["redo"] if self.ws.version_path(v).exists()]

    def earlier(self) -> Optional[Dict[str, Any]]:
        """What `resume()` would open, while this session is at the original and the log left
        off at a changed version: {"changes": N (from the original), "version", "steps" (the
        changes, oldest first, as `versions()` entries), "session", "time" (of the last one)};
        None otherwise. What "N earlier changes of this model exist: open them" says."""
        if self.current != self._original:
            return None
        line, _ = self._latest()
        if len(line) < 2:
            return None
        vers = self.versions()
        by = {(v["parent"], v["version"]): v for v in vers}
        steps, parent = [], line[0]
        for vid in line[1:]:
            v = by.get((parent, vid)) or next((x for x in vers if x["version"] == vid), None)
            steps.append(v or {"version": vid, "recipe": "(unknown)", "params": {}})
            parent = vid
        last = steps[-1]
        return {"changes": len(steps), "version": line[-1], "steps": steps,
                "session": last.get("session"), "time": last.get("time")}

    def resume(self) -> str:
        """Continue from where the model's log left off (the earlier sessions' changes and
        redo stack); writes no line (the log already says so). Returns the version."""
        line, redo = self._latest()
        if len(line) < 2 and self.current == self._original:
            raise WorkbenchError("nothing to resume: the history of this model holds no change "
                                 "beyond the original", field="resume")
        self._line, self._redo = line, redo
        return self.current

    # ------------------------------------------------------------------ sessions
    def view(self) -> Dict[str, Any]:
        """What a history display shows: this session's lineage (original first; each step
        says whether this session made it), its redo stack, and the other sessions' changes,
        grouped by session, for a collapsed "earlier sessions" part. `changes` is
        len(steps) - 1, the "N change(s) from the original" a display prints."""
        vers = self.versions()
        by_version: Dict[Tuple[Optional[str], str], Dict[str, Any]] = {
            (v["parent"], v["version"]): v for v in vers}
        steps, parent = [], None
        for vid in self._line:
            v = by_version.get((parent, vid)) or next(
                (x for x in vers if x["version"] == vid), None)
            step = dict(v) if v else {"version": vid, "recipe": "(unknown)", "params": {},
                                      "mine": False, "session": None}
            if vid in self._remade and not step["mine"]:
                # this session applied it too (a re-run reuses the version): its step, not
                # the other session's, though that one made it first (`first_session`)
                step.update(mine=True, first_session=step.get("session"))
            steps.append(step)
            parent = vid
        others: Dict[Any, Dict[str, Any]] = {}
        for v in vers[1:]:
            if v["mine"]:
                continue
            s = others.setdefault(v["session"], {"id": v["session"], "pid": v["pid"],
                                                 "start": v["session_start"] or v["time"],
                                                 "entries": []})
            s["entries"].append(v)
        earlier = sorted(others.values(), key=lambda s: s["start"] or 0)
        return {"session": dict(self.session), "steps": steps, "changes": len(steps) - 1,
                "current": self.current, "redo": list(self._redo),
                "mine": [v for v in vers[1:] if v["mine"]],
                "earlier": earlier, "earlier_entries": sum(len(s["entries"]) for s in earlier)}

    # ------------------------------------------------------------------ changes
    def commit(self, change: Any) -> str:
        """Store a kept Change as a new version (file first, then the log line)."""
        if not change.kept:
            raise WorkbenchError(f"refusing to record recipe '{change.recipe}': {change.note}",
                                 hint="re-run with force=True to keep a change that differs")
        return self.record(change, self.stage(change.proto))

    def _marker(self, vid: str) -> Path:
        return self.ws.versions_dir / ".staging" / f"{vid}.{self.session['id']}"

    def stage(self, proto: Any) -> str:
        """Write `proto` as a version file (no log line yet): verification can then load it
        from disk; `record` makes it current, `discard` removes it again. A marker says this
        session is using the file, so another session's discard of the same bytes keeps it."""
        vid = store_version(self.ws, proto)
        with self.ws.lock():
            marker = self._marker(vid)
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
            if not self.ws.version_path(vid).exists():  # discarded by another session just now
                store_version(self.ws, proto)
        return vid

    def _unstage(self, vid: str) -> None:
        self._marker(vid).unlink(missing_ok=True)

    def discard(self, vid: str) -> None:
        """Remove a staged version file that was never recorded (a change not kept), unless
        another session has it staged too."""
        with self.ws.lock():
            self._unstage(vid)
            if vid in {r["version"] for r in self._state()["made"]}:
                return
            if any((self.ws.versions_dir / ".staging").glob(f"{vid}.*")):
                return
            self.ws.version_path(vid).unlink(missing_ok=True)

    def record(self, change: Any, vid: str) -> str:
        """The log line that makes staged version `vid` (holding `change.proto`) current; a
        change already in the log (same parent and version, e.g. made by a session running at
        the same time) is reused, not written again."""
        if not change.kept:
            raise WorkbenchError(f"refusing to record recipe '{change.recipe}': {change.note}",
                                 hint="re-run with force=True to keep a change that differs")
        before = self.current
        _pause_hook("commit", change.recipe)
        with self.ws.lock():
            if not self.ws.version_path(vid).exists():
                store_version(self.ws, change.proto)  # (a workspace cleaned by hand)
            state = self._state()
            known = any(r["version"] == vid and r.get("parent") == before
                        for r in state["made"])
            if known:
                self._remade.add(vid)
            if not known:
                rec = change.to_dict()
                rec.update({"event": "apply", "version": vid, "parent": before})
                self._log(rec)
            elif state["current"] == before:
                # the log left off where this session was: a move line (not a change) keeps
                # "where the log left off" true for the next session; otherwise nothing
                self._log({"event": "checkout", "from": before, "to": vid, "reused": True})
            self._unstage(vid)
        self._line.append(vid)
        self._redo = []
        change.version, change.parent = vid, before
        self._proto_cache = {vid: change.proto}
        return vid

    def undo(self) -> str:
        if len(self._line) < 2:
            raise WorkbenchError("nothing to undo: this is the original model")
        cur, parent = self._line[-1], self._line[-2]
        self._log({"event": "undo", "from": cur, "to": parent})
        self._line.pop()
        self._redo.append(cur)
        return parent

    def redo(self) -> str:
        if not self._redo:
            raise WorkbenchError("nothing to redo")
        to = self._redo[-1]
        self._log({"event": "redo", "from": self.current, "to": to})
        self._redo.pop()
        self._line.append(to)
        return to

    def checkout(self, vid: str) -> str:
        """Make any earlier version current (clears redo)."""
        state = self._state()
        if vid not in {r["version"] for r in state["made"]}:
            raise WorkbenchError(f"no version {vid} in this model's history", field="version")
        self._log({"event": "checkout", "from": self.current, "to": vid})
        if vid in self._line:
            self._line = self._line[:self._line.index(vid) + 1]
        else:
            self._line = _lineage(vid, self._parents(state))
        self._redo = []
        return vid

    def export(self, path: Any, vid: Optional[str] = None) -> Path:
        """Write a version (default: current) to `path` as a self-contained model (weights
        inline; beside it as `<name>.data` over 1.8 GB), atomically; never over the original
        model. The session remembers the file (`exported`, `user_path`): commands about that
        version can then name it instead of the workspace copy."""
        import onnx

        vid = vid or self.current
        proto = onnx.load(str(self.version_path(vid)))
        out = save_model(proto, path, source=self.model.path)
        st = out.stat()
        self._exports[vid] = (out, st.st_mtime_ns, st.st_size)
        return out


# ---------------------------------------------------------------------- display text
def _when(t: Any) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(t)))
    except (TypeError, ValueError, OverflowError):
        return "unknown time"


def step_label(v: Dict[str, Any]) -> str:
    """One version as a display line: recipe, parameters, version id."""
    params = v.get("params") or {}
    ps = " ".join(f"{k}={val}" for k, val in sorted(params.items()) if val is not None
                  ) if isinstance(params, dict) else str(params)
    return f"{v.get('recipe', '(unknown)')}{' ' + ps if ps else ''} [{v.get('version')}]"


def step_origin(v: Dict[str, Any]) -> str:
    """Who made a step of this session's lineage, when not (only) this session: 'from session
    X', 'from an earlier run', or 'also made earlier by session X' for a step this session
    applied again (a re-run reuses the version another session made first); '' otherwise."""
    if v.get("first_session"):
        return f"also made earlier by session {v['first_session']}"
    if v.get("mine"):
        return ""
    return f"from session {v['session']}" if v.get("session") else "from an earlier run"


def earlier_offer(earlier: Optional[Dict[str, Any]]) -> str:
    """'3 earlier changes of this model exist (decompose, ...; last 2026-12-06 09:00:00 by
    session X)': the line that offers `History.earlier()`; '' for None."""
    if not earlier:
        return ""
    n = earlier["changes"]
    recipes = list(dict.fromkeys(str(s.get("recipe", "(unknown)")) for s in earlier["steps"]))
    who = (f" by session {earlier['session']}" if earlier.get("session") else "")
    return (f"{n} earlier change{'s' if n != 1 else ''} of this model exist{'s' if n == 1 else ''}"
            f" ({', '.join(recipes[:4])}{', ...' if len(recipes) > 4 else ''}; last "
            f"{_when(earlier.get('time'))}{who})")


def session_label(s: Dict[str, Any]) -> str:
    sid = s.get("id")
    return (f"session {sid} (started {_when(s.get('start'))}, pid {s.get('pid')})" if sid
            else "before sessions were recorded")


def earlier_label(view: Dict[str, Any]) -> str:
    """'3 earlier sessions, 15 entries' ('other' when one started after this session)."""
    n, k = len(view["earlier"]), view["earlier_entries"]
    mine = view["session"]["start"]
    word = "earlier" if all((s["start"] or 0) <= mine for s in view["earlier"]) else "other"
    return (f"{n} {word} session{'s' if n != 1 else ''}, {k} entr{'ies' if k != 1 else 'y'}")


def history_rows(view: Dict[str, Any]) -> List[Dict[str, Any]]:
    """This session's lineage as table rows (step, recipe, params, version, parent, made by):
    what a notebook shows as "the history". It is the same on every re-run that makes the same
    changes (they reuse the versions already in the log); `History.versions()` instead lists
    every version any session ever made, other branches included."""
    rows = []
    for k, v in enumerate(view["steps"]):
        who = ("this session" if v.get("mine") else
               f"session {v['session']}" if v.get("session") else "an earlier run")
        params = v.get("params") or {}
        if isinstance(params, dict):  # a parameter left at its default (None) is not shown
            params = {n: val for n, val in params.items() if val is not None}
        rows.append({"step": k, "recipe": v.get("recipe", "(unknown)"),
                     "params": params, "version": v.get("version"),
                     "parent": v.get("parent"), "made by": "(original)" if k == 0 else who})
    return rows


def history_lines(view: Dict[str, Any], *, show_earlier: bool = False,
                  show_hint: str = "") -> List[str]:
    """The history as text: this session's lineage (numbered; steps another session made are
    labelled with it), then the other sessions collapsed to one line unless `show_earlier`."""
    out = [f"history: {session_label(view['session'])}, {view['changes']} change(s) from "
           "the original"]
    for k, v in enumerate(view["steps"]):
        who = f"  ({step_origin(v)})" if k and step_origin(v) else ""
        out.append(f"  {k} {step_label(v)}{who}")
    if view["redo"]:
        out.append(f"  undone (redo): {', '.join(view['redo'])}")
    if view["earlier"]:
        if not show_earlier:
            out.append(f"  + {earlier_label(view)}"
                       + (f" ({show_hint} to show)" if show_hint else ""))
        else:
            out.append(f"  + {earlier_label(view)}:")
            for s in view["earlier"]:
                out.append(f"    {session_label(s)}:")
                out.extend(f"      {step_label(v)}" for v in s["entries"])
    return out
