"""The onnxruntime child process: load models into cached sessions and run feeds, over JSON lines.

The calling process (a notebook kernel, a Python caller) never runs a converted or untrusted model
in its own address space: a segfault or abort inside onnxruntime ends this process only, and the
client (`workbench.runtime.ortchild`) turns that into a one-line error. (The `workbench` console script
gets the same from a fork instead: `workbench.cli.supervise`.) Requests and events use the TensorRT
worker's framing and message shapes (`workbench.worker.protocol`: ``{"id", "op", "args"}`` in,
one ``result`` or ``error`` out). Arrays never travel as JSON or pickle: each direction of a run
is one raw file in a private folder (on /dev/shm when there is one: shared memory in effect)
plus a JSON spec per array (dtype string, shape, offset); only plain numeric, bool and unicode
dtypes are read back, and bfloat16/float8 travel as their unsigned view plus the dtype's name.

Requests of several caller threads may be in flight at once (``load`` and ``run`` each get a
thread here). Ops: ``ping``; ``load`` {model, key, threads, custom_ops} -> inputs/outputs (the session is cached under `key`,
the client's model hash, least recently used dropped beyond CACHE_SIZE); ``run`` {key, feed specs,
outputs, dir, forget?} -> output specs (dir/in.bin in, dir/out.bin out); ``forget`` {key} (all when no key). Stdlib, numpy, onnxruntime (and ml_dtypes for exotic
dtypes) only; nothing else from workbench but the protocol module.
"""
from __future__ import annotations

import collections
import os
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

from workbench.worker import protocol as P

CUSTOM_OPS_ENV = "WORKBENCH_ORT_CUSTOM_OPS"  # custom-op libraries (os.pathsep-separated)
CACHE_SIZE = 8  # sessions kept; a compare holds two, a fix session a handful of versions
ADDRESS_SPACE_ENV = "WORKBENCH_ORT_ADDRESS_SPACE"  # bytes: RLIMIT_AS for this process


def _dtype(name: str) -> Any:
    import numpy as np

    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes  # bfloat16, float8_*: registered by importing it

        return np.dtype(getattr(ml_dtypes, name))


ALIGN = 64  # each array starts on a 64-byte boundary of the blob


def save_arrays(path: str, items: Sequence[Tuple[str, Any]]) -> List[Dict[str, Any]]:
    """Write arrays to one raw file (one write per direction, however many tensors: a marked
    BERT has 100+); returns their specs {name, dtype, shape, offset, view} for `load_arrays`.
    String tensors travel as fixed-width unicode, bfloat16/float8 as their unsigned view."""
    import numpy as np

    specs: List[Dict[str, Any]] = []
    offset = 0
    with open(path, "wb") as f:
        for name, a in items:
            kind = non_tensor_kind(a)
            if kind is not None:  # a sequence, map or absent optional: no array to send
                specs.append({"name": name, "skipped": kind})
                continue
            a = np.asarray(a)
            view = None
            if a.dtype.kind == "O":  # onnxruntime's string tensors
                a = a.astype(str)
            elif a.dtype.kind == "V" or a.dtype.type.__module__ != "numpy":  # ml_dtypes
                view = a.dtype.name
                a = a.view(np.dtype("u%d" % a.dtype.itemsize))
            if not a.flags.c_contiguous:
                a = a.copy(order="C")  # (ascontiguousarray would make scalars 1-d)
            pad = -offset % ALIGN
            f.write(b"\0" * pad)
            offset += pad
            f.write(memoryview(a.reshape(-1)).cast("B") if a.size else b"")
            specs.append({"name": name, "dtype": a.dtype.str, "shape": list(a.shape),
                          "offset": offset, "view": view})
            offset += a.nbytes
    return specs


def non_tensor_kind(value: Any) -> Optional[str]:
    """What a run output that is not a tensor is ("a sequence of 3 tensors", "a map", "an
    empty optional"), or None for a tensor: onnxruntime returns lists, dicts and None."""
    if value is None:
        return "an empty optional"
    if isinstance(value, dict):
        return "a map"
    if isinstance(value, (list, tuple)):
        return "a sequence of %d value(s)" % len(value)
    return None


def load_arrays(path: str, specs: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """The arrays `save_arrays` wrote, each a view of the file mapped copy-on-write (no copy:
    the pages are the file's, which may be removed at once; writing to an array copies only
    the pages written). A spec with a "file" is read from that file instead of `path` (an
    output of an earlier run fed back as it lies: no copy either). Only plain numeric, bool
    and unicode dtypes are accepted (never objects: no pickle)."""
    import mmap

    import numpy as np

    maps: Dict[str, Any] = {}

    def mapped(p: str) -> Any:
        if p not in maps:
            size = os.path.getsize(p)
            maps[p] = bytearray(0)
            if size:
                with open(p, "rb", buffering=0) as f:
                    maps[p] = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY)
        return maps[p]

    out: Dict[str, Any] = {}
    for s in specs:
        if s.get("skipped"):  # (not a tensor: left out, the caller says why)
            continue
        dt = np.dtype(str(s["dtype"]))
        if dt.kind not in "biufcU" or dt.fields is not None:
            raise ValueError("refused dtype %r for '%s' (plain arrays only)" % (s["dtype"], s["name"]))
        shape = [int(d) for d in s["shape"]]
        if s.get("weights"):  # a model's weight where it lies in its data file: read-only,
            # only its own pages mapped (the file may be larger than memory)
            out[s["name"]] = np.memmap(s["file"], dtype=dt, mode="r", offset=int(s["offset"]),
                                       shape=tuple(shape))
            continue
        count = int(np.prod(shape)) if shape else 1
        a = np.frombuffer(mapped(s.get("file") or path), dtype=dt, count=count,
                          offset=int(s["offset"])).reshape(shape)
        out[s["name"]] = a.view(_dtype(s["view"])) if s.get("view") else a
    return out


def custom_op_libraries() -> List[str]:
    """The custom-op libraries named in $WORKBENCH_ORT_CUSTOM_OPS (models with ops of their own)."""
    return [p for p in os.environ.get(CUSTOM_OPS_ENV, "").split(os.pathsep) if p]


def session_options(threads: Any = None, custom_ops: Sequence[str] = ()) -> Any:
    """onnxruntime CPU options for running the graph as written: no graph optimisations, no
    kept arena (one-off runs), the custom-op libraries registered. threads None: ORT's default."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if threads is not None:
        so.intra_op_num_threads = int(threads)
    so.enable_cpu_mem_arena = False
    # worker threads sleep between ops instead of spinning: the caller compares tensors on the
    # same cores while onnxruntime runs (spinning burnt as much CPU as the kernels)
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    for lib in custom_ops:
        so.register_custom_ops_library(lib)
    return so


class NotLoaded(KeyError):
    """A run for a session this process does not hold (any more)."""


class Sessions:
    """onnxruntime sessions by model key, least recently used dropped first. Thread-safe: runs
    of different requests proceed at once (onnxruntime releases the GIL while it runs)."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        import threading

        self.size = size
        self.cache: "collections.OrderedDict[str, Any]" = collections.OrderedDict()
        self.lock = threading.Lock()

    def load(self, model: str, key: str, threads: Any = None,
             custom_ops: Sequence[str] = ()) -> Dict[str, Any]:
        with self.lock:
            sess = self.cache.get(key)
        if sess is None:
            import onnxruntime as ort

            sess = ort.InferenceSession(model, session_options(threads, custom_ops),
                                        providers=["CPUExecutionProvider"])
        with self.lock:
            self.cache[key] = sess
            self.cache.move_to_end(key)
            while len(self.cache) > self.size:
                self.cache.popitem(last=False)
        return {"inputs": [{"name": i.name, "type": i.type, "shape": list(i.shape)}
                           for i in sess.get_inputs()],
                "outputs": [o.name for o in sess.get_outputs()], "pid": os.getpid()}

    def run(self, key: str, feed: List[Dict[str, Any]], outputs: List[str],
            dir: str, forget: bool = False) -> List[Dict[str, Any]]:  # noqa: A002
        with self.lock:
            sess = self.cache.get(key)
            if sess is None:  # dropped from the cache: the client loads it again and retries
                raise NotLoaded("session not loaded: " + key)
            self.cache.move_to_end(key)
            if forget:  # a one-off model (a segment): dropped once this run returns
                del self.cache[key]
        folder = os.path.realpath(os.path.dirname(dir)) + os.sep
        for spec in feed:  # outputs of earlier runs: only from the caller's transfer folder
            # (weights are mapped read-only from the model's own data file)
            if spec.get("file") and not spec.get("weights") and \
                    not os.path.realpath(spec["file"]).startswith(folder):
                raise ValueError("refused feed file outside the transfer folder: %s" % spec["file"])
        arrays = load_arrays(os.path.join(dir, "in.bin"), feed)
        res = sess.run(outputs, arrays)
        del arrays
        return save_arrays(os.path.join(dir, "out.bin"), list(zip(outputs, res)))

    def forget(self, key: Any = None) -> None:
        """Drop one session (all when no key)."""
        with self.lock:
            if key:
                self.cache.pop(key, None)
            else:
                self.cache.clear()

    def keys(self) -> List[str]:
        with self.lock:
            return list(self.cache)


def _limit_address_space() -> None:
    limit = os.environ.get(ADDRESS_SPACE_ENV)
    if not limit:
        return
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (int(limit), int(limit)))


CONCURRENT_OPS = ("load", "run")  # each in a thread of its own: a caller's two streams overlap


def main() -> None:
    """Serve requests until stdin closes. `load` and `run` each go to a thread of their own, so
    requests of different caller threads (a reference and a candidate streamed side by side)
    run at once; every answer carries its request's id."""
    import threading

    proto_fd = os.dup(1)
    os.dup2(2, 1)  # whatever onnxruntime's C++ code prints goes to stderr, not the protocol
    sys.stdout = sys.stderr
    out = os.fdopen(proto_fd, "w", buffering=1, encoding="utf-8")
    out_lock = threading.Lock()

    def send(msg: Dict[str, Any]) -> None:
        with out_lock:
            out.write(P.encode(msg))
            out.flush()

    _limit_address_space()
    import onnxruntime  # noqa: F401 - before "ready": start-up is not charged to a request's limit

    sessions = Sessions()
    send(P.ready(os.getpid()))

    def bad(line: str) -> None:
        send(P.error(None, "bad JSON request", type="protocol", code="bad-args"))

    def serve(rid: Any, op: Any, args: Dict[str, Any]) -> None:
        try:
            if op == "ping":
                value: Any = {"pid": os.getpid(), "sessions": sessions.keys()}
            elif op == "load":
                value = sessions.load(args["model"], args["key"], args.get("threads"),
                                      args.get("custom_ops") or ())
            elif op == "run":
                value = sessions.run(args["key"], args["feed"], args["outputs"], args["dir"],
                                     bool(args.get("forget")))
            elif op == "probe_load":  # load at a graph optimization level, keep nothing
                import onnxruntime as ort

                so = session_options(args.get("threads"), args.get("custom_ops") or ())
                so.graph_optimization_level = getattr(ort.GraphOptimizationLevel,
                                                      args["level"])
                ort.InferenceSession(args["model"], so, providers=["CPUExecutionProvider"])
                value = {}
            elif op == "forget":  # one session (args.key), or all
                sessions.forget(args.get("key"))
                value = {}
            else:
                send(P.error(rid, "unknown op '%s'" % op, code="unknown-op"))
                return
            send(P.result(rid, value))
        except NotLoaded as e:
            send(P.error(rid, str(e), code="not-loaded"))
        except MemoryError:
            send(P.error(rid, "out of memory (the process's address-space limit)",
                         code="out-of-memory"))
        except Exception as e:
            send(P.error(rid, " ".join(str(e).split()), type="exception", code=type(e).__name__))

    for msg in P.read_json_lines(sys.stdin, bad):
        rid, op, args = msg.get("id"), msg.get("op"), msg.get("args") or {}
        if op in CONCURRENT_OPS:
            threading.Thread(target=serve, args=(rid, op, args), daemon=True).start()
        else:
            serve(rid, op, args)


if __name__ == "__main__":
    main()
