"""onnxruntime in a child process: a crash, a hang or a memory blow-up ends the child, not the caller.

    child = default_child()
    key, meta = child.load("model.onnx")            # session cached in the child by model hash
    outputs = child.run(key, {"input": x}, ["logits"])

A converted model has been seen to crash onnxruntime with a segmentation fault; run in the notebook
kernel that takes the kernel and the user's unsaved work down. Here every run happens in one
long-lived child (`workbench.runtime.ortserver`, started like the TensorRT worker: the same interpreter
with `-S` and this process's import path, its own session, JSON lines on pipes with the worker's
framing) and sessions are cached there by model hash, so the cost per call stays small
(benchmarks/ort_containment.py measures it). Limits, per call: `timeout` seconds
($WORKBENCH_ORT_TIMEOUT, default 600) and `max_rss` bytes of resident memory
($WORKBENCH_ORT_MAX_RSS, default 3/4 of physical memory), watched from here every 20 ms; the child
also runs under RLIMIT_AS when $WORKBENCH_ORT_ADDRESS_SPACE is set. A run past a limit is killed
(`OrtLimitExceeded`); a death is `OrtCrashed` naming the model, the signal and, when a re-run in
a fresh child can pin it, the node (`locate_crash`: the shortest prefix of the graph that still
crashes). Either way the next call starts a fresh child. Arrays cross as .npy files (no pickle).
Several threads may call at once (a layer-wise compare streams its two graphs side by side): each
waits for its own answer, the child runs their loads and runs concurrently, and a crash ends every
request in flight.
"""
from __future__ import annotations

import atexit
import collections
import hashlib
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from workbench.worker import childproc
from workbench.core.errors import WorkbenchError
from workbench.core.model import ModelLike
from workbench.worker import protocol as P
from workbench.worker.launch import ROOT  # the child starts with -S: handed the package root

TIMEOUT_ENV, MAX_RSS_ENV = "WORKBENCH_ORT_TIMEOUT", "WORKBENCH_ORT_MAX_RSS"
LOCATE_ENV = "WORKBENCH_ORT_LOCATE_S"  # seconds spent pinning a crash to a node (0: none)
ISOLATE_ENV = "WORKBENCH_ORT_ISOLATE"  # "0": run onnxruntime in this process (trusted models)
POLL_S = 0.02
FOLDER_PREFIX = "workbench-ort-"  # + owner pid + random: one transfer folder per process
MODEL_FILES = 16  # serialized models kept in the transfer folder (tmpfs is memory)
CRASH_HINT = "your session is fine; the model crashes onnxruntime: check it with `workbench inspect`"
# a child that dies before any model reached it: this Python's environment, not the model
START_HINT = ("the onnxruntime child process could not start (no model was loaded yet): check "
              "that this Python imports workbench and onnxruntime (bash scripts/setup.sh), or "
              "set WORKBENCH_ORT_ISOLATE=0 to run onnxruntime in this process")
# glibc's allocator in the child: onnxruntime allocates every tensor from malloc (its arena is
# off: sessions are short-lived), and by default freed tensors go back to the kernel and come
# back as fresh, faulted pages on the next run (~0.1 s of system time per layer-wise compare of
# a ResNet-50). Tensors under 32 MB are reused from the heap instead; at most 32 MB stays free
# at the top of each of the two arenas (so the peak does not grow: measured, it shrinks).
MALLOC_ENV = {"MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_THRESHOLD_": str(32 << 20),
              "MALLOC_TRIM_THRESHOLD_": str(32 << 20)}
_BOOT = ("import sys; sys.path.insert(0, %r); sys.path.extend(p for p in %r if p not in sys.path); "
         "from workbench.runtime.ortserver import main; main()")


class OrtError(WorkbenchError):
    """The onnxruntime process failed us (crashed, went past a limit, could not start)."""


class OrtFailed(RuntimeError):
    """onnxruntime refused the model or the feed: its own message (as an in-process run would
    raise it, so callers that explain such failures keep doing so), and the node it names."""

    def __init__(self, message: str, node: Optional[str] = None) -> None:
        super().__init__(message)
        self.node = node


class OrtLoadFailed(OrtFailed):
    """onnxruntime refused to load the model (`label`: how errors name it). A caller that does
    not explain it leaves it to the CLI, which reports it as bad input."""

    def __init__(self, message: str, node: Optional[str] = None,
                 label: Optional[str] = None) -> None:
        super().__init__(message, node)
        self.label = label


_ORT_PREFIX = re.compile(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ")
_LOAD_FROM = re.compile(r"Load model from .*? failed:\s*")


def load_message(text: str) -> str:
    """onnxruntime's words on a model it cannot load, without its error-code prefix and the
    "Load model from PATH failed:" part (PATH is a temporary copy users never made)."""
    return _LOAD_FROM.sub("", _ORT_PREFIX.sub("", text), count=1)


class _NotLoaded(OrtError):
    """The child dropped the session from its cache (load it again)."""


class OrtModelGone(OrtError):
    """The child no longer knows how to load this key (closed, or its file left the folder):
    the caller loads the model again."""


class OrtCrashed(OrtError):
    """The onnxruntime child died (segfault, abort, killed) while working on a model."""

    def __init__(self, message: str, *, returncode: int, log_tail: str = "",
                 shared: bool = False, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.returncode = returncode
        self.log_tail = log_tail
        # other requests were running in the child when it died: the crash may be theirs
        self.shared = shared


class OrtLimitExceeded(OrtError):
    """A run went past its time or memory limit and the child was stopped."""


class OrtStopped(OrtError):
    """The child was stopped because another run in it went past its limit: this run did
    nothing wrong (`OnnxRuntimeRunner` runs it again in a fresh child)."""


def isolated_by_default() -> bool:
    """Do onnxruntime runs go to the child? Yes unless $WORKBENCH_ORT_ISOLATE is "0"."""
    return os.environ.get(ISOLATE_ENV, "1") != "0"


_default_max_rss = childproc.default_max_rss


def _sweep(base: str) -> None:
    """Remove transfer folders whose process is gone (killed kernels never run atexit)."""
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        if not name.startswith(FOLDER_PREFIX):
            continue
        pid = name[len(FOLDER_PREFIX):].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)
        except OSError:  # alive, another user's
            pass


_signal_name, _rss = childproc.signal_name, childproc.rss


def model_key(model: ModelLike) -> Tuple[str, str]:
    """(key, path onnxruntime loads) for a path or serialized model bytes. Paths: the real
    path, size, mtime and inode (a changed file gets a new session; reading a large model just
    to hash it would cost more than the session cache saves); bytes: their sha256."""
    if isinstance(model, (bytes, bytearray)):
        return "sha256:" + hashlib.sha256(model).hexdigest()[:32], ""
    path = os.path.realpath(str(model))
    try:
        st = os.stat(path)
    except OSError:
        raise OrtError("the model file does not exist", file=str(model),
                       hint="check the path") from None
    raw = f"{path}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}".encode()
    return "file:" + hashlib.sha256(raw).hexdigest()[:32], path


class OrtChild(childproc.ChildHandle):
    """One onnxruntime child process, started lazily and restarted after a crash or a limit."""

    def __init__(self, *, timeout: Optional[float] = None, max_rss: Optional[int] = None,
                 env: Optional[Dict[str, str]] = None, stderr_lines: int = 40) -> None:
        self.timeout = float(timeout or os.environ.get(TIMEOUT_ENV) or 600)
        self.max_rss = int(max_rss or os.environ.get(MAX_RSS_ENV) or _default_max_rss())
        super().__init__(env, stderr_lines)
        self._pending_lock = threading.Lock()
        self._lock = threading.RLock()  # a widget's background thread and the kernel share it
        # requests in flight: id -> the queue its answer goes to (several caller threads may
        # wait at once, each on its own request; the lock is held only to start or send)
        self._pending: Dict[int, Tuple[subprocess.Popen, "queue.Queue[Any]"]] = {}
        self._eof: Dict[int, bool] = {}  # child pid -> its stdout has closed
        self._died_with: Dict[int, int] = {}  # child pid -> requests in flight when it closed
        self._stopped_for: Dict[int, str] = {}  # child pid -> the limit we stopped it for
        self._mapped: Dict[int, Any] = {}  # id(mmap of an out.bin) -> (ref, path, address, size)
        self._dir: Optional[str] = None
        self._loaded: Dict[str, Dict[str, Any]] = {}  # key -> load reply, for this child
        self._models: "collections.OrderedDict[str, str]" = collections.OrderedDict()  # key -> the file serialized bytes were written to
        self._sources: Dict[str, Tuple[str, Optional[int], List[str]]] = {}  # key -> how to load
        self.starts = 0
        self._ready = False  # the running child said "ready"

    # -- process ------------------------------------------------------------------------------
    @property
    def pid(self) -> Optional[int]:
        return self._proc.pid if self.alive and self._proc else None

    @property
    def folder(self) -> str:
        """The private folder arrays and serialized models cross through (tmpfs when there is);
        named with this process's id, so folders left by a killed process are swept."""
        if self._dir is None or not os.path.isdir(self._dir):
            base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) \
                else tempfile.gettempdir()
            _sweep(base)
            self._dir = tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-", dir=base)
        return self._dir

    def _start(self) -> None:
        if self.alive and self._ready:
            return
        if not self.alive:
            self._spawn()
        proc, events = self._proc, self._events
        assert proc is not None
        msg = self._wait(proc, events, time.monotonic() + 60, None, "starting")
        if msg.get("event") != "ready":  # pragma: no cover - the child always says ready first
            raise OrtError("the onnxruntime process did not start: " + str(msg))
        self._ready = True

    def warm(self) -> None:
        """Start the process now without waiting for it: its interpreter and onnxruntime
        import while the caller prepares its first request."""
        with self._lock:
            if not self.alive:
                self._spawn()

    def _spawn(self) -> None:
        env = childproc.child_env(self.env)
        for k, v in MALLOC_ENV.items():  # (the caller's own settings win)
            env.setdefault(k, v)
        paths = [p for p in sys.path if p and os.path.isabs(p) and os.path.exists(p)]
        self._events = queue.Queue()
        self._stderr.clear()
        self._loaded.clear()
        self._ready = False
        try:
            self._proc = childproc.spawn([sys.executable, "-S", "-c", _BOOT % (ROOT, paths)],
                                         env)
        except OSError as e:
            raise OrtError(f"cannot start the onnxruntime process: {e}",
                           hint="check that this Python can start subprocesses") from None
        self.starts += 1
        proc, events = self._proc, self._events
        self._eof[proc.pid] = False
        self._died_with.pop(proc.pid, None)  # (a pid reused: nothing of an earlier child's)
        self._stopped_for.pop(proc.pid, None)
        threading.Thread(target=self._read_stdout, args=(proc, events), daemon=True).start()
        self._stderr.follow(proc)

    def _read_stdout(self, proc: subprocess.Popen, events: "queue.Queue") -> None:
        """Route each message to the request waiting for it (by id); others (ready) to
        `events`. At the end of the stream every waiter of this process hears None."""
        assert proc.stdout is not None
        try:
            for msg in P.read_json_lines(proc.stdout, lambda line: self._stderr.append(line)):
                with self._pending_lock:
                    to = self._pending.get(msg.get("id"))  # type: ignore[arg-type]
                (to[1] if to and to[0] is proc else events).put(msg)
        finally:
            with self._pending_lock:
                self._eof[proc.pid] = True
                waiting = [q for p, q in self._pending.values() if p is proc]
                self._died_with[proc.pid] = len(waiting)
            for q in waiting + [events]:
                q.put(None)

    def kill(self, proc: Optional[subprocess.Popen] = None) -> None:
        """Stop the child now (its process group); the next call starts a fresh one. `proc`:
        only that process (a request's watcher stops the child it waits on, not a newer one)."""
        if proc is None or proc is self._proc:
            proc, self._proc = self._proc, None
        if proc is None:
            return
        childproc.kill_group(proc)
        self._loaded.clear()

    def close(self) -> None:
        """End the child and remove the transfer folder. The child holds nothing to save (its
        sessions are caches), so it is stopped at once: waiting for its interpreter to wind
        down cost every CLI call ~60 ms at exit."""
        with self._lock:
            self.kill()
            if self._dir:
                shutil.rmtree(self._dir, ignore_errors=True)
                self._dir = None
            self._models.clear()
            self._sources.clear()

    # -- one request ----------------------------------------------------------------------------
    def _wait(self, proc: subprocess.Popen, events: "queue.Queue", deadline: float,
              max_rss: Optional[int], what: str, label: Optional[str] = None,
              timeout: float = 0.0) -> Dict[str, Any]:
        """The next message, watching the child's time and memory; raises on death or limit."""
        watch = childproc.Watch(proc.pid, timeout=timeout, deadline=deadline, max_rss=max_rss)
        while True:
            try:
                msg = events.get(timeout=POLL_S)
            except queue.Empty:
                msg = "wait"
            if msg is None:
                self._crashed(proc, what, label)
            if isinstance(msg, dict):
                return msg
            stop = watch.check()
            if stop is None:
                continue
            self._stopped_for[proc.pid] = stop.limit_text()
            self.kill(proc)
            if stop.kind == "time":
                raise OrtLimitExceeded(
                    f"onnxruntime exceeded its {stop.limit_text()} while {what} and was "
                    "stopped", file=label,
                    hint=f"raise the limit (timeout=, ${TIMEOUT_ENV}) or run fewer samples")
            raise OrtLimitExceeded(
                f"onnxruntime used {childproc.mib(stop.rss)}, over its {stop.limit_text()}, "
                f"while {what} and was stopped", file=label,
                hint=f"raise the limit (max_rss=, ${MAX_RSS_ENV}) or use smaller inputs")

    def _crashed(self, proc: subprocess.Popen, what: str, label: Optional[str]) -> None:
        try:
            rc = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # stdout closed but still alive: stop it
            self.kill(proc)
            rc = -int(signal.SIGKILL)
        time.sleep(0.05)  # let the stderr reader take the last lines
        tail = self.log_tail()
        with self._lock:
            if proc is self._proc:  # (another waiter may have started a fresh one since)
                self._proc = None
                self._loaded.clear()
        last = self._stderr.last(2)
        limit = self._stopped_for.get(proc.pid)
        if limit:  # we stopped it, for another run's limit: not this run's crash
            raise OrtStopped(f"onnxruntime was stopped while {what}: another run in the same "
                             f"child went past its {limit}", file=label,
                             hint="run it again (the other run's error names its model)")
        with self._pending_lock:
            shared = self._died_with.get(proc.pid, 0) > 1
        raise OrtCrashed(f"onnxruntime crashed ({_signal_name(rc)}) while {what}"
                         + (f"; last output: {'; '.join(last)}" if last else ""),
                         returncode=rc, log_tail=tail, file=label,
                         hint=START_HINT if what == "starting" else CRASH_HINT,
                         shared=shared, category="tool")

    def call(self, op: str, args: Optional[Dict[str, Any]] = None, *, what: str = "",
             label: Optional[str] = None, timeout: Optional[float] = None,
             max_rss: Optional[int] = None) -> Any:
        """Send one request and return its result. onnxruntime's own refusals: OrtFailed; the
        process dying or going past a limit: OrtCrashed / OrtLimitExceeded. Several threads
        may call at once: each waits for its own answer (the child runs their loads and runs
        side by side)."""
        what = what or f"'{op}'"
        answers: "queue.Queue[Optional[Dict[str, Any]]]" = queue.Queue()
        with self._lock:
            self._start()
            proc = self._proc
            assert proc is not None and proc.stdin is not None
            rid = next(self._ids)
            with self._pending_lock:
                self._pending[rid] = (proc, answers)
                if self._eof.get(proc.pid):
                    answers.put(None)  # its stdout closed already: it is dying
            try:
                proc.stdin.write(P.encode(P.request(rid, op, args)))
                proc.stdin.flush()
            except (BrokenPipeError, OSError):
                answers.put(None)
        try:
            limit = self.timeout if timeout is None else timeout
            deadline = time.monotonic() + limit
            while True:
                msg = self._wait(proc, answers, deadline,
                                 self.max_rss if max_rss is None else max_rss, what, label, limit)
                if msg.get("id") != rid:
                    continue
                if msg.get("event") == "result":
                    return msg.get("result")
                if msg.get("event") == "error":
                    err = msg.get("error") or {}
                    text = err.get("message") or "unknown error"
                    if err.get("code") == "not-loaded":
                        raise _NotLoaded(text)
                    raise OrtFailed(text, node_in_message(text))
        finally:
            with self._pending_lock:
                self._pending.pop(rid, None)

    # -- models ---------------------------------------------------------------------------------
    def load(self, model: ModelLike, *, threads: Optional[int] = None, label: Optional[str] = None,
             timeout: Optional[float] = None, max_rss: Optional[int] = None,
             private: bool = False) -> Tuple[str, Dict[str, Any]]:
        """Load a model (a path, or serialized ModelProto bytes) into a cached session in the
        child; returns (key, {"inputs": [{name, type, shape}], "outputs": [names]}).
        private: a key of its own, shared with no other load of the same bytes (a one-off
        model that its caller forgets while another thread may run the same bytes)."""
        from workbench.runtime.ortserver import custom_op_libraries

        if private and isinstance(model, (bytes, bytearray)):  # (no hash: it is never shared)
            key, path = f"private:{next(self._ids)}", ""
        else:
            key, path = model_key(model)
            if private:
                key += f"|private={next(self._ids)}"
        custom_ops = custom_op_libraries()
        key = f"{key}|threads={threads}|ops={os.pathsep.join(custom_ops)}"
        with self._lock:
            if not path:
                path = self._models.get(key, "")
                if not path or not os.path.exists(path):
                    path = os.path.join(self.folder, f"model-{next(self._ids)}.onnx")
                    with open(path, "wb") as f:
                        f.write(model)
                    self._models[key] = path
                    while len(self._models) > MODEL_FILES:  # the oldest leaves tmpfs
                        old_key, old = self._models.popitem(last=False)
                        self._sources.pop(old_key, None)
                        try:
                            os.unlink(old)
                        except OSError:
                            pass
                self._models.move_to_end(key)
            info = self._loaded.get(key) if self.alive else None
        if info is None:  # (the answer is awaited without the lock: other threads go on)
            label = label or (str(model) if isinstance(model, (str, os.PathLike))
                              else "the model")
            try:
                info = self.call("load", {"model": path, "key": key, "threads": threads,
                                          "custom_ops": custom_ops},
                                 what="loading the model", label=label, timeout=timeout,
                                 max_rss=max_rss)
            except OrtLoadFailed:
                raise
            except OrtFailed as e:  # (without the tmpfs copy's path: it names nothing users have)
                raise OrtLoadFailed(load_message(str(e)), e.node, label) from None
            with self._lock:
                self._loaded[key] = info
                self._sources[key] = (path, threads, custom_ops)
        return key, info

    def run(self, key: str, feed: Dict[str, Any], outputs: Sequence[str], *,
            label: Optional[str] = None, timeout: Optional[float] = None,
            max_rss: Optional[int] = None, last: bool = False,
            reuse: bool = False) -> Dict[str, Any]:
        """Outputs by name for one feed of a model `load` returned `key` for. last: the model
        is dropped after this run (as `forget`, without another round trip). reuse: feed
        arrays that are outputs of earlier runs are read from their out.bin as they lie (the
        caller has not written into them: the file holds the values as they came)."""
        from workbench.runtime.ortserver import load_arrays, save_arrays

        for attempt in (0, 1):
            with self._lock:
                loaded = self.alive and key in self._loaded
            if not loaded:  # a fresh child since, or the session left its cache
                self._reload(key, label, timeout, max_rss)
            rid = next(self._ids)
            folder = os.path.join(self.folder, f"run-{rid}")
            os.makedirs(folder)
            kept = False
            try:
                fresh, refs = [], []
                for name, a in feed.items():
                    ref = _weight_spec(name, a)  # a weight mapped from its file: by reference
                    if ref is None and reuse:
                        ref = self._mapped_spec(name, a)
                    if ref is None:
                        fresh.append((name, a))
                    else:
                        refs.append(ref)
                specs = save_arrays(os.path.join(folder, "in.bin"), fresh) + refs
                args = {"key": key, "feed": specs, "outputs": list(outputs), "dir": folder}
                if last:
                    args["forget"] = True
                res = self.call("run", args, what="running the model", label=label,
                                timeout=timeout, max_rss=max_rss)
                if last:
                    with self._lock:
                        self._loaded.pop(key, None)  # the child dropped it
                    self.forget(key)  # (the serialized copy: no call, it is not loaded)
                out_path = os.path.join(folder, "out.bin")
                out = load_arrays(out_path, res)
                kept = self._keep_mapped(out, out_path, folder)
                return out
            except _NotLoaded:
                with self._lock:
                    self._loaded.pop(key, None)
                if attempt:
                    raise
            finally:
                if not kept:
                    shutil.rmtree(folder, ignore_errors=True)
        raise AssertionError("unreachable")  # pragma: no cover

    # -- outputs fed back ------------------------------------------------------------------------
    # A run's outputs are views of its out.bin, mapped here. While any of them lives, the file
    # stays (its folder is removed when the mapping is garbage), so an output fed to a later
    # run (a segment's tensors that the next segments read) is named by file and offset
    # instead of being written out again.
    def _keep_mapped(self, out: Dict[str, Any], path: str, folder: str) -> bool:
        import weakref

        import numpy as np

        mm = next((_mapping_of(a) for a in out.values()), None)
        if mm is None:
            return False
        base = np.frombuffer(mm, np.uint8, count=1).__array_interface__["data"][0]
        k = id(mm)
        self._mapped[k] = (weakref.ref(mm), path, base, len(mm))
        weakref.finalize(mm, _unmapped, self._mapped, k, folder)
        return True

    def _mapped_spec(self, name: str, a: Any) -> Optional[Dict[str, Any]]:
        """The feed spec naming `a` where it lies (an output of an earlier run), or None."""
        mm = _mapping_of(a)
        entry = self._mapped.get(id(mm)) if mm is not None else None
        if entry is None or entry[0]() is not mm or not a.flags.c_contiguous or \
                a.dtype.kind not in "biufc" or a.dtype.type.__module__ != "numpy":
            return None
        _, path, base, size = entry
        off = a.__array_interface__["data"][0] - base
        if off < 0 or off + a.nbytes > size:
            return None
        return {"name": name, "dtype": a.dtype.str, "shape": list(a.shape), "offset": off,
                "view": None, "file": path}

    def forget(self, key: str) -> None:
        """Drop a loaded model: its session in the child and its serialized copy (tmpfs is
        memory). Short-lived models (a graph run a segment at a time) leave nothing behind."""
        with self._lock:
            self._sources.pop(key, None)
            path = self._models.pop(key, None)
            if path:
                try:
                    os.unlink(path)
                except OSError:
                    pass
            drop = self._loaded.pop(key, None) is not None and self.alive
        if drop:
            self.call("forget", {"key": key}, what="dropping a model")

    def _reload(self, key: str, label: Optional[str], timeout: Optional[float],
                max_rss: Optional[int]) -> None:
        with self._lock:
            source = self._sources.get(key)
        if source is None:
            raise OrtModelGone("the model is no longer loaded in the onnxruntime process",
                               file=label, hint="load it again (a new runner)")
        path, threads, custom_ops = source
        info = self.call(
            "load", {"model": path, "key": key, "threads": threads, "custom_ops": custom_ops},
            what="loading the model", label=label, timeout=timeout, max_rss=max_rss)
        with self._lock:
            self._loaded[key] = info


def _weight_spec(name: str, a: Any) -> Optional[Dict[str, Any]]:
    """The feed spec naming a weight by its file and offset (a `workbench.core.weights` memmap,
    read-only, whole: never a view of one), or None for any other array. The child maps it
    read-only; nothing is copied into the transfer folder."""
    import numpy as np

    if not isinstance(a, np.memmap) or a.mode != "r" or not a.filename or \
            not a.flags.c_contiguous or a.dtype.kind not in "biuf" or \
            a.dtype.type.__module__ != "numpy" or getattr(a, "offset", None) is None:
        return None
    base = a.base
    if a.size * a.itemsize != getattr(base, "__len__", lambda: -1)() - (a.offset % _gran()):
        return None  # (a slice or reshape of a memmap: its offset no longer names its start)
    return {"name": name, "dtype": a.dtype.str, "shape": list(a.shape), "offset": int(a.offset),
            "view": None, "file": str(a.filename), "weights": True}


def _gran() -> int:
    import mmap

    return mmap.ALLOCATIONGRANULARITY


def _mapping_of(a: Any) -> Any:
    """The mmap an array is a view of (`load_arrays`), or None."""
    import mmap

    b = a
    while getattr(b, "base", None) is not None and not isinstance(b, memoryview):
        b = b.base
    obj = b.obj if isinstance(b, memoryview) else None
    return obj if isinstance(obj, mmap.mmap) else None


def _unmapped(mapped: Dict[int, Any], k: int, folder: str) -> None:
    mapped.pop(k, None)
    shutil.rmtree(folder, ignore_errors=True)


def node_in_message(text: str) -> Optional[str]:
    """The node onnxruntime names in an error ("... node. Name:'/conv1/Conv' ...")."""
    import re

    m = re.search(r"[Nn]ode\.? [Nn]ame:\s*'([^']*)'", text) or re.search(r"\bName:'([^']*)'", text)
    return m.group(1) if m and m.group(1) else None


_default: Optional[OrtChild] = None
_default_lock = threading.Lock()


def default_child() -> OrtChild:
    """The process-wide onnxruntime child (started on first use, restarted after a crash)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = OrtChild()
            atexit.register(_default.close)
        return _default


def locate_crash(proto: Any, feed: Dict[str, Any], *, budget_s: float = 30.0,
                 timeout: float = 60.0) -> Optional[str]:
    """The node whose run crashes onnxruntime: the shortest prefix of the graph (its first k
    nodes, every output marked, so each of them runs) that still crashes a fresh child, found
    by bisection. None when the crash does not repeat, is not in a node, or the budget runs out."""
    import onnx

    nodes = list(proto.graph.node)
    if not nodes:
        return None
    t_end = time.monotonic() + budget_s

    def crashes(k: int) -> Optional[bool]:
        m = onnx.ModelProto()
        m.CopyFrom(proto)
        del m.graph.node[k:]
        del m.graph.output[:]
        for n in m.graph.node:
            for o in n.output:
                if o:
                    m.graph.output.append(onnx.ValueInfoProto(name=o))
        child = OrtChild(timeout=max(0.1, min(timeout, t_end - time.monotonic())))
        try:
            key, meta = child.load(m.SerializeToString(), label="prefix")
            names = {i["name"] for i in meta["inputs"]}
            child.run(key, {k2: v for k2, v in feed.items() if k2 in names}, meta["outputs"])
            return False
        except OrtCrashed:
            return True
        except (OrtError, OrtFailed):
            return None  # a prefix onnxruntime refuses, or one past the budget: cannot tell
        finally:
            child.close()

    if not crashes(len(nodes)):
        return None
    lo, hi = 0, len(nodes)  # prefix lo does not crash, prefix hi does
    while hi - lo > 1:
        if time.monotonic() > t_end:
            return None
        mid = (lo + hi) // 2
        c = crashes(mid)
        if c is None:
            return None
        lo, hi = (lo, mid) if c else (mid, hi)
    n = nodes[hi - 1]
    return n.name or f"{n.op_type} #{hi - 1}"
