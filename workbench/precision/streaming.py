"""Weights streamed tensor by tensor: a transform works on the model's structure only, and the
weights go from the source's external-data files to the output's one chunk at a time.

A transform that changes a weight's type (FP32 -> FP16/BF16) on a weightless model calls
`retype_external(tensor, new_type)`: the tensor keeps pointing at its source bytes and records
the type they have there. `write_streamed(proto, source_dir, out)` then writes `out` and
`out.data` (`<name>.data`, as `workbench.core.model.save_model` names it): every external tensor is
read in chunks of at most `CHUNK_BYTES`, converted when it was retyped (finite values beyond the
new type's range saturate, as the in-memory lowering does) and appended, aligned, to the new
data file. Peak memory is the structure plus two chunks, whatever the model's size; no protobuf
ever holds a weight, so there is no 2 GB limit. Reads go through `readinto` into one reused
buffer rather than a memory map: a map counts every page it touched in the process's RSS until
it is unmapped, a read leaves them in the page cache only.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Dict, List, Optional, Tuple, Union

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.fsutil import atomic_write_bytes
from workbench.core.model import external_location, iter_tensors_with_data

# external_data keys of a weight `workbench.precision.qdq_stream` marks for quantization: the
# per-channel axis ("" per tensor) and the scale initializer its writer fills
QUANT_AXIS_KEY = "workbench_quant_axis"
QUANT_SCALE_KEY = "workbench_quant_scale"
INT8, FP8_E4M3FN = 3, 17
QMAX = {INT8: 127.0, FP8_E4M3FN: 448.0}  # symmetric ranges: [-127, 127], E4M3's largest

if TYPE_CHECKING:  # pragma: no cover
    import onnx

PathLike = Union[str, "os.PathLike[str]"]
SOURCE_TYPE_KEY = "workbench_source_type"  # external_data key: the type the source bytes have
CHUNK_BYTES = 64 << 20
ALIGN = 64


def is_external(t: "onnx.TensorProto") -> bool:
    return t.data_location == 1  # TensorProto.EXTERNAL


def retype_external(t: "onnx.TensorProto", new_type: int) -> None:
    """Mark an external FP32 tensor as `new_type` (FP16 / BF16); its bytes are converted when
    the model is written by `write_streamed`."""
    if t.data_type == new_type:
        return
    if not any(kv.key == SOURCE_TYPE_KEY for kv in t.external_data):
        kv = t.external_data.add()
        kv.key, kv.value = SOURCE_TYPE_KEY, str(t.data_type)
    t.data_type = new_type


def has_pending(proto: "onnx.ModelProto") -> bool:
    """Does the model hold retyped tensors whose bytes are still the source's?"""
    return any(kv.key == SOURCE_TYPE_KEY for t in iter_tensors_with_data(proto)
               for kv in t.external_data)


def _ext(t: "onnx.TensorProto") -> Dict[str, str]:
    return {kv.key: kv.value for kv in t.external_data}


class _Lowering:
    """FP32 chunks -> FP16 / BF16, round to nearest even (as the in-memory lowering's numpy /
    ml_dtypes casts), finite values beyond the type's range saturated. FP16 goes through
    onnxruntime's Cast kernel when it loads (vectorised: 3-5x numpy's float16 cast, the same
    bits), BF16 through ml_dtypes."""

    def __init__(self, low_type: int) -> None:
        import ml_dtypes

        self.low_np = np.float16 if low_type == 10 else ml_dtypes.bfloat16
        self.limit = float(ml_dtypes.finfo(self.low_np).max)
        self.sess = _cast_session() if low_type == 10 else None

    def __call__(self, a: np.ndarray) -> Tuple[np.ndarray, bool]:
        """(converted chunk, whether a finite value saturated)."""
        clipped = False
        if a.size:
            hi, lo = float(a.max()), float(a.min())  # (NaN anywhere fails both tests)
            if not (hi <= self.limit and lo >= -self.limit):
                finite = np.isfinite(a)
                clipped = bool(np.any(finite & (np.abs(a) > self.limit)))
                a = np.where(finite, np.clip(a, -self.limit, self.limit), a).astype(np.float32)
        if self.sess is not None:
            try:
                return self.sess.run(None, {"x": a})[0], clipped
            except Exception:  # pragma: no cover - numpy does the same, slower
                self.sess = None
        return a.astype(self.low_np), clipped


def _cast_session():
    """An onnxruntime session of one Cast FP32 -> FP16 over a 1-D tensor, or None."""
    try:
        import onnxruntime as ort
        from onnx import TensorProto, helper

        g = helper.make_graph(
            [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT16)], "cast",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["n"])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        m.ir_version = 7
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.log_severity_level = 1, 3
        return ort.InferenceSession(m.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
    except Exception:  # pragma: no cover
        return None


class _Reader:
    """Open source data files, read by (file, offset, length) into a reused buffer."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.files: Dict[str, BinaryIO] = {}
        self.buf = bytearray(CHUNK_BYTES)

    def chunks(self, loc: str, offset: int, length: int, label: str, step: int = 1):
        """Views of the bytes, each at most CHUNK_BYTES and a whole number of `step` bytes
        (rows of a tensor) long, the last one excepted when `length` is not."""
        f = self.files.get(loc)
        if f is None:
            path = self.base / loc
            try:
                f = self.files[loc] = open(path, "rb", buffering=0)
            except OSError as e:
                raise WorkbenchError(f"cannot read external data '{loc}' ({e.strerror})",
                                     file=str(path), hint="put the data file next to the model"
                                     ) from None
        if length <= 0:
            length = os.fstat(f.fileno()).st_size - offset
        done = 0
        block = max(step, CHUNK_BYTES - CHUNK_BYTES % step)
        if block > len(self.buf):  # (one row longer than a chunk)
            self.buf = bytearray(block)
        while done < length:
            n = min(block, length - done)
            view = memoryview(self.buf)[:n]
            got = os.preadv(f.fileno(), [view], offset + done)
            if got != n:
                raise WorkbenchError(f"external-data file '{loc}' ends inside tensor '{label}'",
                                     file=str(self.base / loc),
                                     hint="the data file is truncated; re-export the model")
            yield view
            done += n

    def close(self) -> None:
        for f in self.files.values():
            f.close()


def channel_amax(w: np.ndarray, axis: Optional[int]) -> np.ndarray:
    """Max |w| per channel along `axis` (all of it when None), NaN ignored."""
    a = np.abs(w.astype(np.float32, copy=False))
    if axis is None:
        return np.asarray(np.nanmax(a) if a.size else 0.0, np.float32)
    other = tuple(d for d in range(a.ndim) if d != axis)
    return np.nanmax(a, axis=other).astype(np.float32) if a.size else \
        np.zeros(a.shape[axis], np.float32)


def scales(amax: np.ndarray, qtype: int) -> np.ndarray:
    """Symmetric scales for the maxima `amax`: amax / qmax, 1 where a channel is all 0."""
    scale = (np.asarray(amax, np.float32) / np.float32(QMAX[qtype])).astype(np.float32)
    return np.where(scale > 0, scale, np.float32(1.0)).astype(np.float32)


def quantize_block(w: np.ndarray, axis: Optional[int], qtype: int, amax: np.ndarray
                   ) -> Tuple[np.ndarray, np.ndarray]:
    """(quantized values, scales) of the FP32 block `w` whose channels along `axis` have the
    maxima `amax` (over the whole tensor): symmetric, round half to even, saturated."""
    qmax = QMAX[qtype]
    scale = scales(amax, qtype)
    shape = [1] * w.ndim
    if axis is not None and w.ndim:
        shape[axis] = scale.size
    x = w.astype(np.float32, copy=False) / scale.reshape(shape)
    if qtype == INT8:
        return np.clip(np.rint(x), -qmax, qmax).astype(np.int8), scale
    if qtype == FP8_E4M3FN:
        import ml_dtypes

        return np.clip(x, -qmax, qmax).astype(ml_dtypes.float8_e4m3fn), scale
    raise WorkbenchError(f"no streamed quantization to ONNX element type {qtype}",
                         hint="quantize a model with its weights in memory")


def _point_at(t: "onnx.TensorProto", location: str, offset: int, length: int) -> None:
    del t.external_data[:]
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(length))):
        e = t.external_data.add()
        e.key, e.value = k, v


def _write_quantized(reader: "_Reader", f: BinaryIO, t: "onnx.TensorProto",
                     kv: Dict[str, str], inits: Dict[str, "onnx.TensorProto"]) -> int:
    """Quantize the FP32 source bytes of `t` (marked by `workbench.precision.qdq_stream`)
    into `f`, a block of whole rows at a time: one pass for the channels' maxima, one to
    write; fills its scale initializer. Returns the bytes written."""
    dims = [int(d) for d in t.dims]
    rest = dims[1:]
    row = int(np.prod(rest)) * 4 if dims else 4
    count = int(np.prod(dims)) if dims else 1
    axis = int(kv[QUANT_AXIS_KEY]) if kv[QUANT_AXIS_KEY] else None
    loc, offset = kv["location"], int(kv.get("offset") or 0)
    length = int(kv.get("length") or 0) or 4 * count
    if length != 4 * count:
        raise WorkbenchError(f"tensor '{t.name}': {length} bytes of data for {count} FP32 "
                             "values", hint="the data file does not match the model; re-export")

    def blocks():
        for view in reader.chunks(loc, offset, length, t.name, step=max(row, 1)):
            yield np.frombuffer(view, np.float32).reshape([-1] + rest if dims else [])

    if axis == 0:
        amax = np.concatenate([channel_amax(b, 0) for b in blocks()]) if count else \
            np.zeros(dims[0], np.float32)
    else:
        amax = None
        for b in blocks():
            m = channel_amax(b, axis)
            amax = m if amax is None else np.maximum(amax, m)
        if amax is None:
            amax = np.zeros(dims[axis] if axis is not None else (), np.float32)
    written = first = 0
    for b in blocks():
        rows = b.shape[0] if b.ndim else 1
        q, _ = quantize_block(b, axis, t.data_type,
                              amax[first:first + rows] if axis == 0 else amax)
        first += rows
        f.write(q.tobytes())
        written += q.nbytes
    inits[kv[QUANT_SCALE_KEY]].raw_data = scales(amax, t.data_type).tobytes()
    return written


def write_streamed(proto: "onnx.ModelProto", source_dir: Optional[PathLike], out: PathLike,
                   *, source: Optional[PathLike] = None) -> Tuple[Path, List[str]]:
    """Write `proto` (weightless: external tensors refer to files in `source_dir`, retyped ones
    carry their source type) to `out` + `<out name>.data`, streaming every external tensor.
    Mutates `proto`'s external references to point at the new data file. Refuses to write over
    `source` or its data. Returns (path, names of tensors whose values saturated)."""
    out = Path(out)
    if source is not None and out.resolve() == Path(source).resolve():
        raise WorkbenchError("refusing to overwrite the original model", file=str(out),
                             hint="choose another output path (-o)")
    out.parent.mkdir(parents=True, exist_ok=True)
    data_name = out.name + ".data"
    tensors = [t for t in iter_tensors_with_data(proto) if is_external(t)]
    inits = {t.name: t for t in proto.graph.initializer}
    base = Path(source_dir) if source_dir is not None else None
    if tensors and base is None:
        raise WorkbenchError("the model's external data has no folder to be read from",
                             hint="open the model from its file")
    if base is not None:
        theirs = {(base / (external_location(t) or "")).resolve() for t in tensors}
        if out.with_name(data_name).resolve() in theirs:
            raise WorkbenchError(f"refusing to overwrite the model's data file '{data_name}'",
                                 file=str(out), hint="choose another output name or folder (-o)")
    clipped: List[str] = []
    lowerings: Dict[int, _Lowering] = {}
    data_tmp = out.with_name(f".{data_name}.{os.getpid()}.tmp")
    reader = _Reader(base) if base is not None else None
    try:
        with open(data_tmp, "wb") as f:
            pos = 0
            for t in tensors:
                kv = _ext(t)
                src_type = int(kv.get(SOURCE_TYPE_KEY, t.data_type))
                if QUANT_AXIS_KEY in kv:
                    pad = (-pos) % ALIGN
                    f.write(bytes(pad))
                    start = pos + pad
                    pos = start + _write_quantized(reader, f, t, kv, inits)
                    _point_at(t, data_name, start, pos - start)
                    continue
                if src_type != t.data_type and (src_type, t.data_type) not in ((1, 10), (1, 16)):
                    raise WorkbenchError(f"tensor '{t.name}': no streamed conversion from type "
                                         f"{src_type} to {t.data_type}",
                                         hint="report the model")
                pad = (-pos) % ALIGN
                if pad:
                    f.write(bytes(pad))
                    pos += pad
                start = pos
                carry = b""
                for view in reader.chunks(kv["location"], int(kv.get("offset") or 0),
                                          int(kv.get("length") or 0), t.name):
                    if src_type == t.data_type:
                        f.write(view)
                        pos += len(view)
                        continue
                    raw = carry + bytes(view) if carry else view
                    whole = len(raw) - len(raw) % 4
                    carry = bytes(raw[whole:])
                    conv = lowerings.get(t.data_type) or \
                        lowerings.setdefault(t.data_type, _Lowering(t.data_type))
                    low, hit = conv(np.frombuffer(raw[:whole], np.float32))
                    if hit and (not clipped or clipped[-1] != t.name):
                        clipped.append(t.name)
                    low.tofile(f)
                    pos += low.nbytes
                _point_at(t, data_name, start, pos - start)
            f.flush()
            os.fsync(f.fileno())
        if tensors:
            os.replace(data_tmp, out.with_name(data_name))
        else:
            data_tmp.unlink()
    except BaseException:
        data_tmp.unlink(missing_ok=True)
        raise
    finally:
        if reader is not None:
            reader.close()
    atomic_write_bytes(out, proto.SerializeToString())
    return out, clipped
