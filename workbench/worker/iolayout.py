"""I/O tensor types and formats: set them on a network before a build, and move data between
numpy's linear layout and an engine's vectorized one when running it.

A build may ask for FP16 (or INT8...) I/O and vectorized formats such as HWC8 (channels last,
channels padded to 8) or CHW16 (channel blocks of 16), as trtexec's --inputIOFormats /
--outputIOFormats do: the engine then skips the reformat layers it would put at its inputs and
outputs. Such an engine's I/O buffers hold the vectorized layout itself: trtexec sizes them
with the padded vectorized dimension and reads --loadInputs files into them byte for byte, so
the host provides that layout. The runner does the conversion here (numpy, on the host) and
gives and takes linear arrays only for LINEAR tensors. Python 3.9, stdlib + numpy + tensorrt.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

from workbench.worker.registry import OpError

FLOAT_NAMES = ("FLOAT", "HALF", "BF16")
# per tensor (or one for all): [DataType attribute name, [TensorFormat names...]], as the
# client's workbench.engines.io_formats.for_worker writes them (the worker knows no type names)
Spec = Sequence[Sequence[Any]]  # per tensor (or one for all): [type, [formats...]]


def _dt_name(dt: Any) -> str:
    return str(dt).split(".")[-1].upper()


def _tensor_spec(spec: Spec, k: int, n: int, where: str) -> Tuple[str, List[str]]:
    if len(spec) not in (1, n):
        raise OpError("%s I/O formats list %d entries for %d tensors: give one per tensor in "
                      "order, or one for all" % (where, len(spec), n), code="bad-args",
                      details={"field": "%s_io_formats" % where})
    t, fmts = spec[0] if len(spec) == 1 else spec[k]
    return str(t), [str(f) for f in fmts]


def apply_io_formats(trt: Any, network: Any, inputs: Optional[Spec], outputs: Optional[Spec],
                     strongly_typed: bool) -> List[str]:
    """Set dtype and allowed_formats on the network's float I/O tensors (integer and bool
    tensors, e.g. token ids, keep theirs; vectorized formats go only on tensors of rank >= 3,
    where they have a channel axis). On a strongly typed network the dtype must already be
    in the ONNX (the client adds Casts at the I/O): a mismatch is an error. Returns notes."""
    notes: List[str] = []
    tf = getattr(trt, "TensorFormat", None)
    for where, spec, count, get in (
            ("input", inputs, network.num_inputs, network.get_input),
            ("output", outputs, network.num_outputs, network.get_output)):
        if not spec:
            continue
        for k in range(count):
            t = get(k)
            want_t, fmts = _tensor_spec(spec, k, count, where)
            cur = _dt_name(t.dtype)
            if cur not in FLOAT_NAMES:
                notes.append("%s '%s' is %s: kept (I/O formats apply to float tensors)"
                             % (where, t.name, cur))
                continue
            dt = getattr(trt, want_t, None)
            if dt is None:
                raise OpError("this TensorRT has no %s type for %s '%s'" % (want_t, where,
                              t.name), code="bad-args", node=t.name,
                              details={"field": "%s_io_formats" % where})
            if _dt_name(dt) != cur:
                if strongly_typed:
                    raise OpError("%s '%s' is %s in the ONNX, %s was asked for: a strongly typed "
                                  "network takes its I/O types from the ONNX" % (
                                      where, t.name, cur, want_t), node=t.name, code="bad-args",
                                  details={"field": "%s_io_formats" % where},
                                  hint="build through workbench.engines (it adds the Casts at "
                                       "the I/O), or cast the I/O in the ONNX yourself")
                t.dtype = dt
            names = [str(f).upper() for f in fmts]
            if len(t.shape) < 3 and any(n != "LINEAR" for n in names):
                notes.append("%s '%s' has rank %d: vectorized formats need a channel axis; "
                             "kept linear" % (where, t.name, len(t.shape)))
                names = ["LINEAR"]
            if tf is None or not hasattr(t, "allowed_formats"):
                notes.append("this TensorRT has no tensor formats; %s '%s' kept linear"
                             % (where, t.name))
                continue
            mask = 0
            for n in names:
                f = getattr(tf, n, None)
                if f is None:
                    raise OpError("this TensorRT has no tensor format %s" % n, code="bad-args",
                                  details={"field": "%s_io_formats" % where},
                                  hint="formats here: " + ", ".join(
                                      sorted(a for a in dir(tf) if a.isupper())))
                mask |= 1 << int(f)
            t.allowed_formats = mask
    return notes


def tensor_layout(trt: Any, engine: Any, name: str) -> Optional[Tuple[str, int, int]]:
    """(format name, vectorized dim, components per element) of an engine I/O tensor, None
    when it is linear (numpy's layout). DLA formats are refused (the host cannot feed them)."""
    fmt_fn = getattr(engine, "get_tensor_format", None)
    if fmt_fn is None:
        return None
    fmt = _dt_name(fmt_fn(name))
    if fmt == "LINEAR":
        return None
    if fmt.startswith("DLA"):
        raise OpError("tensor '%s' has the DLA format %s, which this runner cannot feed" % (
            name, fmt), node=name, code="bad-input")
    return fmt, int(engine.get_tensor_vectorized_dim(name)), \
        int(engine.get_tensor_components_per_element(name))


def _channels_last(fmt: str) -> bool:
    return fmt.startswith("HWC") or fmt.startswith("DHWC")


def engine_shape(shape: Sequence[int], layout: Tuple[str, int, int]) -> Tuple[int, ...]:
    """The buffer shape of a vectorized tensor of logical `shape`: HWC8-like formats put the
    vectorized (channel) axis last, padded to the component count; CHW16-like ones split it
    into blocks of that many components, innermost."""
    fmt, vdim, comps = layout
    vdim = vdim % len(shape)
    s = [int(d) for d in shape]
    padded = -(-s[vdim] // comps) * comps
    if _channels_last(fmt):
        return tuple(s[:vdim] + s[vdim + 1:] + [padded])
    return tuple(s[:vdim] + [padded // comps] + s[vdim + 1:] + [comps])


def to_engine(arr: Any, layout: Tuple[str, int, int]) -> Any:
    """A linear array in the engine's vectorized layout (padding zero-filled)."""
    import numpy as np

    fmt, vdim, comps = layout
    vdim = vdim % arr.ndim
    c = arr.shape[vdim]
    padded = -(-c // comps) * comps
    if padded != c:
        pad = [(0, 0)] * arr.ndim
        pad[vdim] = (0, padded - c)
        arr = np.pad(arr, pad)
    if _channels_last(fmt):
        return np.ascontiguousarray(np.moveaxis(arr, vdim, -1))
    blocks = arr.reshape(arr.shape[:vdim] + (padded // comps, comps) + arr.shape[vdim + 1:])
    return np.ascontiguousarray(np.moveaxis(blocks, vdim + 1, -1))


def from_engine(buf: Any, shape: Sequence[int], layout: Tuple[str, int, int]) -> Any:
    """The linear array of logical `shape` from a buffer in the engine's layout."""
    import numpy as np

    fmt, vdim, comps = layout
    shape = tuple(int(d) for d in shape)
    vdim = vdim % len(shape)
    if _channels_last(fmt):
        arr = np.moveaxis(buf, -1, vdim)
    else:
        arr = np.moveaxis(buf, -1, vdim + 1)
        arr = arr.reshape(arr.shape[:vdim] + (-1,) + arr.shape[vdim + 2:])
    index = [slice(None)] * len(shape)
    index[vdim] = slice(0, shape[vdim])
    return np.ascontiguousarray(arr[tuple(index)])
