"""Strip an exported ONNX model to its structure + weight statistics (no torch needed)."""
import json
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper

KEEP_FLOAT_NUMEL = 64          # float tensors up to this many elements are kept exactly
KEEP_OTHER_BYTES = 512 * 1024  # non-float / non-finite tensors up to this size are kept exactly


def _tensors(graph, where):
    for t in graph.initializer:
        yield t, where, False
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                yield a.t, "%s/%s" % (where, node.name or node.op_type), True
            elif a.type == onnx.AttributeProto.GRAPH:
                for x in _tensors(a.g, "%s/%s.%s" % (where, node.name, a.name)):
                    yield x
            elif a.type == onnx.AttributeProto.GRAPHS:
                for i, g in enumerate(a.graphs):
                    for x in _tensors(g, "%s/%s.%s%d" % (where, node.name, a.name, i)):
                        yield x


def _tri_pattern(arr):
    """('tril'|'triu', [inside, outside]) when arr is a two-valued lower/upper-triangular mask."""
    import numpy as np
    if arr.ndim < 2 or arr.shape[-1] != arr.shape[-2] or arr.size > 64 * 1024 * 1024:
        return None
    vals = np.unique(arr)
    if vals.size != 2:
        return None
    n = arr.shape[-1]
    for kind, mask in (("tril", np.tril(np.ones((n, n), bool))), ("triu", np.triu(np.ones((n, n), bool)))):
        inside = arr[..., mask]
        outside = arr[..., ~mask]
        if inside.size and outside.size and np.all(inside == inside.flat[0]) and np.all(outside == outside.flat[0]):
            return kind, [inside.flat[0].item(), outside.flat[0].item()]
    return None


def strip(src, dst, stats_path):
    model = onnx.load(src)  # loads external data too
    stem = os.path.basename(dst).replace(".structure.onnx", "")
    location = stem + ".weights.bin"
    stats = {}
    offset = 0
    counter = 0
    for t, where, is_attr in _tensors(model.graph, "graph"):
        arr = numpy_helper.to_array(t)
        isfloat = arr.dtype.kind == "f"
        keep = False
        if isfloat and arr.size <= KEEP_FLOAT_NUMEL:
            keep = True
        elif not isfloat and arr.nbytes <= KEEP_OTHER_BYTES:
            keep = True
        elif isfloat and not np.all(np.isfinite(arr)) and arr.nbytes <= KEEP_OTHER_BYTES:
            keep = True
        if keep:
            continue
        if not t.name or (is_attr and t.name in stats):
            counter += 1
            t.name = "zoo_const_%d" % counter
        a64 = arr.astype(np.float64) if arr.size else np.zeros(1)
        fin = a64[np.isfinite(a64)] if isfloat else a64
        if fin.size == 0:
            fin = np.zeros(1)
        entry = {
            "where": where,
            "shape": list(arr.shape),
            "dtype": str(arr.dtype),
            "mean": float(fin.mean()),
            "std": float(fin.std()),
            "min": float(fin.min()),
            "max": float(fin.max()),
        }
        tri = _tri_pattern(arr)
        if tri:
            entry["pattern"], entry["values"] = tri
        elif not isfloat:
            flat = arr.reshape(-1)
            if flat.size and np.array_equal(flat, np.arange(flat.size, dtype=flat.dtype)):
                entry["pattern"] = "arange"
            elif flat.size and np.all(flat == flat[0]):
                entry["pattern"] = "constant"
        stats[t.name] = entry
        nbytes = arr.nbytes
        t.ClearField("raw_data")
        for f in ("float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data"):
            t.ClearField(f)
        t.data_location = onnx.TensorProto.EXTERNAL
        del t.external_data[:]
        for k, v in (("location", location), ("offset", str(offset)), ("length", str(nbytes))):
            e = t.external_data.add()
            e.key = k
            e.value = v
        offset += nbytes
    onnx.save(model, dst)
    with open(stats_path, "w") as f:
        json.dump(stats, f, sort_keys=True)
    return len(stats), offset


if __name__ == "__main__":
    print(strip(sys.argv[1], sys.argv[2], sys.argv[3]))
