"""Run a graph a segment at a time: every node once, only a group of tensors held at a time.

Marking every tensor of a graph (Polygraphy's `mark all`) holds all of them at the end of one
run; fetching them a chunk at a time re-runs the whole graph per chunk. `stream_segments` does
neither: for each group of tensor names (in topological order) it runs, as a small model of its
own, just the nodes not yet run that the group needs, hands back the group's values and keeps
only the tensors later segments read (a ResNet's skip connections, say). Each node runs once with
the same kernel on the same input bytes, so the values are those of one full run.

Graphs whose values are not all plain tensors (sequence or optional ops) cannot cross a cut:
`segmentable` says so and callers run the graph whole.
"""
from __future__ import annotations

from typing import (Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Set,
                    TypeVar)

import numpy as np

Feed = Dict[str, np.ndarray]
T = TypeVar("T")
# run(segment model, its output names, one feed per sample) -> outputs per sample
SegmentRun = Callable[[Any, List[str], List[Feed]], List[Feed]]


def segmentable(proto: Any) -> bool:
    """Can every value of the graph cross a cut as a numpy array (no sequence/optional ops)?"""
    for n in proto.graph.node:
        op = n.op_type
        if "Sequence" in op or op.startswith("Optional"):
            return False
    return True


def _elem_type(a: np.ndarray) -> int:
    from onnx import helper

    if a.dtype.name == "bfloat16":
        return 16
    if a.dtype.kind in "OUS":
        return 8  # STRING
    return int(helper.np_dtype_to_tensor_dtype(a.dtype))


def _model(proto: Any, nodes: Sequence[Any], inputs: Dict[str, np.ndarray],
           outputs: Sequence[str], inits: Dict[str, Any], reads: Set[str], k: int) -> Any:
    """A model of `nodes` reading `inputs` (typed from the arrays, shapes left free: samples of
    another size run the same model) and the initializers they read, giving `outputs`."""
    import onnx
    from onnx import helper

    m = onnx.ModelProto()
    m.ir_version = proto.ir_version
    m.opset_import.extend(proto.opset_import)
    m.functions.extend(proto.functions)
    g = m.graph
    g.name = f"{proto.graph.name or 'model'}_segment{k}"
    g.node.extend(nodes)
    g.initializer.extend(inits[x] for x in reads if x in inits)
    g.input.extend(helper.make_tensor_value_info(x, _elem_type(a), None)
                   for x, a in inputs.items())
    g.output.extend(onnx.ValueInfoProto(name=o) for o in outputs)
    return m


def stream_segments(proto: Any, feeds: Sequence[Feed], groups: Sequence[Sequence[str]],
                    run: SegmentRun) -> Iterator[List[Feed]]:
    """For each group (tensor names, in topological order), its values for every feed
    ({name: array} per feed; names the graph does not make are left out). `feeds` are the
    graph inputs as the graph declares them; `run` executes one segment model."""
    from workbench.core.graphindex import GraphIndex

    g = proto.graph
    idx = GraphIndex.of(proto)
    nodes = list(g.node)
    reads = [[x for x in idx.node_inputs[i] if x] + idx.implicit_inputs(i)
             for i in range(len(nodes))]
    producer: Dict[str, int] = {}
    for i, n in enumerate(nodes):
        for o in n.output:
            if o:
                producer.setdefault(o, i)
    inits = {t.name: t for t in g.initializer}
    readers: Dict[str, int] = {}  # tensor -> nodes not yet run that read it
    for r in reads:
        for x in set(r):
            readers[x] = readers.get(x, 0) + 1
    wanted: Dict[str, int] = {}  # tensor -> groups still to come that ask for it
    for grp in groups:
        for t in set(grp):
            wanted[t] = wanted.get(t, 0) + 1
    done = [False] * len(nodes)
    store: List[Feed] = [dict(f) for f in feeds]
    for k, grp in enumerate(groups):
        here = set(grp)
        targets = [t for t in dict.fromkeys(grp) if t in producer]

        def kept(x: str, here: Set[str] = here) -> bool:  # read by a later segment or
            return readers.get(x, 0) > 0 or wanted.get(x, 0) - (x in here) > 0  # a later group
        need: Set[int] = set()
        todo = [producer[t] for t in targets if not done[producer[t]]]
        while todo:
            i = todo.pop()
            if i in need or done[i]:
                continue
            need.add(i)
            todo.extend(producer[x] for x in reads[i] if x in producer and not done[producer[x]]
                        and producer[x] not in need)
        seg = sorted(need)
        for i in seg:
            done[i] = True
            for x in set(reads[i]):
                readers[x] -= 1
        fresh: List[Feed] = [{} for _ in feeds]
        if seg:
            made = [o for i in seg for o in nodes[i].output if o]
            made_set = set(made)
            seg_reads = list(dict.fromkeys(x for i in seg for x in reads[i]))
            ins = [x for x in seg_reads if x not in made_set and x not in inits]
            outs = list(dict.fromkeys(
                [t for t in targets if t in made_set]
                + [x for x in made if kept(x)]))
            if feeds:
                model = _model(proto, [nodes[i] for i in seg], {x: store[0][x] for x in ins},
                               outs, inits, set(seg_reads), k)
                # weights held by reference (`workbench.core.weights`): fed as memmaps, mapped
                # only while this segment runs
                weights = _referenced(model)
                fresh = run(model, outs, [{**{x: s[x] for x in ins}, **weights}
                                          for s in store])
                del model, weights
            for s, f in zip(store, fresh):
                s.update((x, f[x]) for x in outs if x in f and kept(x))
        yield [{t: (f[t] if t in f else s[t]) for t in targets if t in f or t in s}
               for s, f in zip(store, fresh)]
        del fresh
        for t in here:
            wanted[t] -= 1
        for s in store:  # drop what no later segment reads and no later group asks for
            for x in [x for x in s if readers.get(x, 0) <= 0 and wanted.get(x, 0) <= 0]:
                del s[x]


def _referenced(model: Any) -> Feed:
    """A segment model's weights held by reference, moved to its inputs (in place), as
    memmaps to feed; {} when it holds none."""
    from workbench.core import weights

    refs = weights.weight_refs(model)
    if not refs:
        return {}
    weights.as_inputs(model)
    return weights.feeds_for(refs, list(refs))


def order_of(proto: Any) -> List[str]:
    """Node outputs in topological (graph) order: what `mark all` marks."""
    return list(dict.fromkeys(o for n in proto.graph.node for o in n.output if o))



def ahead(items: Iterable[T]) -> "Ahead[T]":
    """`items`, produced one step ahead in a background thread: the next segment runs (in the
    onnxruntime child) while the caller compares this one. The thread starts at once, not at
    the first `next` (two streams side by side both start before the caller waits on the
    first). At most two items exist at once (the caller's and the next): the producer starts
    an item only once the caller has taken the previous one. An error in the producer is
    raised here, in the caller's thread. `close()` (or the end) stops and joins the thread."""
    return Ahead(items)


class Ahead(Iterator[T]):
    """The iterator `ahead` returns (see there)."""

    def __init__(self, items: Iterable[T]) -> None:
        import queue
        import threading

        self._q: "queue.Queue[Any]" = queue.Queue()
        self._slots = threading.Semaphore(2)  # items alive: the caller's and the next one
        self._stop = threading.Event()
        self._held = False  # the caller holds an item (a slot) until it asks for the next
        self._done = False
        # (the thread holds no reference to self: an iterator dropped unfinished is collected,
        # and __del__ stops its thread)
        self._thread = threading.Thread(target=_produce, name="segments-ahead", daemon=True,
                                        args=(iter(items), self._q, self._slots, self._stop))
        self._thread.start()

    def __next__(self) -> T:
        if self._done:
            raise StopIteration
        ok, it = self._q.get()
        if self._held:
            self._slots.release()  # the caller's previous item is done with
        self._held = ok and it is not _END
        if not ok:
            self.close()
            raise it
        if it is _END:
            self.close()
            raise StopIteration
        return it

    def failure(self, timeout: float) -> Optional[BaseException]:
        """The error the producer's next step ends in, waiting at most `timeout` s for it; None
        when that step made an item (dropped: for a caller about to raise another error) or is
        still at work. The stream is closed after."""
        import queue

        if self._done:
            return None
        try:
            ok, it = self._q.get(timeout=timeout)
        except queue.Empty:
            ok, it = True, None
        self.close()
        return None if ok else it

    def close(self) -> None:
        """Stop the producer (at most a step ahead) and wait for its thread."""
        self._done = True
        self._stop.set()
        self._held = False
        self._drain()  # (the producer may be waiting for a slot: it sees the stop)
        self._thread.join()
        self._drain()  # what it finished meanwhile

    def _drain(self) -> None:
        import queue

        try:
            while True:
                self._q.get_nowait()
        except queue.Empty:
            pass

    def __del__(self) -> None:  # an iterator dropped unfinished: its thread stops soon
        self._stop.set()


_END = object()


def _produce(it: Iterator[Any], q: Any, slots: Any, stop: Any) -> None:
    """`Ahead`'s thread: make the next item once a slot is free; the end or an error is queued
    for the consumer."""
    try:
        while True:
            while not slots.acquire(timeout=0.1):
                if stop.is_set():
                    return
            if stop.is_set():
                return
            try:
                x = next(it)
            except StopIteration:
                q.put((True, _END))
                return
            q.put((True, x))
            del x
    except BaseException as e:  # handed to the consumer
        q.put((False, e))
