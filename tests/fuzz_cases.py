"""Hostile inputs for every reader users feed files to (tests/test_fuzz_readers.py and
benchmarks/fuzz.py share them).

Two kinds of case, both seeded so a failure can be replayed:
- byte level: bit flips, truncation, insertion, overwrites of a real, valid file;
- structure aware: a valid ONNX / JSON / npz / recipe argument with one hostile value: huge,
  negative or wrong-typed dims, lengths and offsets, deep nesting, path-escaping locations.

A case is `Case(reader, kind, argv, files)`: `files` ({relative path: bytes or None for a
symlink out}) are written into a fresh folder, `argv` is the `workbench` command line with
`{d}` standing for that folder. `run_case` runs it in-process (`workbench.cli.main`) and
returns the exit code and the one line it printed on stderr.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import random
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "data" / "fixtures"
SAMPLES = REPO / "sample_models"


@dataclass
class Case:
    reader: str
    kind: str
    argv: List[str]
    files: Dict[str, Any] = field(default_factory=dict)


# ----------------------------------------------------------------------------- running
def write_case(case: Case, folder: Path) -> List[str]:
    for rel, data in case.files.items():
        p = folder / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, tuple) and data and data[0] == "symlink":
            if p.is_symlink() or p.exists():
                p.unlink()
            os.symlink(data[1], p)
        else:
            p.write_bytes(data)
    return [a.replace("{d}", str(folder)) for a in case.argv]


def run_case(case: Case, folder: Path) -> Tuple[int, str]:
    """(exit code, stderr) of `workbench ARGV` run in this process; for readers no verb
    exposes (argv[0] '@name'), the same contract from the Python call: 0 read, 2 a
    WorkbenchError (its one line), 3 anything else."""
    from workbench.cli import main

    argv = write_case(case, folder)
    if argv[0].startswith("@"):
        return _call_reader(argv[0][1:], argv[1:], folder)
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            rc = main(argv)
        except SystemExit as e:  # argparse
            rc = e.code if isinstance(e.code, int) else 2
    return rc, err.getvalue()


def _call_reader(name: str, args: List[str], folder: Path) -> Tuple[int, str]:
    from workbench.core.errors import WorkbenchError

    try:
        if name == "run_results":
            from workbench.compare.layer_compare import load_run_results

            load_run_results(args[0])
        elif name == "engine_meta":
            _read_engine_meta(folder)
        elif name == "recipe":
            from workbench.surgery.changes import parse_recipe_arg

            rc, err = run_case(Case("recipe", "cli", ["fix", "{d}/absent.onnx", "-o",
                                                      "{d}/out.onnx", "--recipe", args[0]]),
                               folder)
            if rc != 2 or len(err.strip().splitlines()) != 1:
                return 3 if rc != 2 else rc, err
            parse_recipe_arg(args[0])
        else:  # pragma: no cover
            raise KeyError(name)
    except WorkbenchError as e:
        return 2, e.one_line() + "\n"
    except Exception as e:  # what the CLI would call an internal error
        return 3, f"internal error: {type(e).__name__}: {e}"[:500] + "\n"
    return 0, ""


def _read_engine_meta(folder: Path) -> None:
    """load_cached + result_from_meta on the (hostile) card; the hash memo read for m.onnx."""
    from workbench.engines import cache

    meta = cache.load_cached(folder / "e.engine", folder / "e.json", "k" * 64)
    if meta is not None:
        cache.result_from_meta(meta, folder / "e.engine", 0.0, cache_hit=True).to_dict()
    memo = folder / "hash-memo.json"
    if memo.exists():
        model = folder / "m.onnx"
        try:  # half the time the hostile record sits under the model's real key
            doc = json.loads(memo.read_text())
            if isinstance(doc, dict) and doc and zlib.crc32(memo.read_bytes()) % 2:
                key = "|".join(map(str, cache._stat_key(model)))
                memo.write_text(json.dumps({key: next(iter(doc.values()))}))
        except (ValueError, RecursionError):
            pass
        old = os.environ.get("WORKBENCH_HOME")
        os.environ["WORKBENCH_HOME"] = str(folder)
        cache._hash_memo.clear()
        try:
            cache._memo_lookup(model)
        finally:
            if old is None:
                os.environ.pop("WORKBENCH_HOME", None)
            else:
                os.environ["WORKBENCH_HOME"] = old


# ----------------------------------------------------------------------------- byte level
def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    """One of: bit flips, truncation, insertion of random bytes, overwritten bytes, a
    duplicated slice (so length-prefixed fields point at the wrong place)."""
    b = bytearray(data)
    kind = rng.randrange(5)
    if kind == 0 or not b:
        for _ in range(rng.randint(1, 8)):
            if b:
                p = rng.randrange(len(b))
                b[p] ^= 1 << rng.randrange(8)
    elif kind == 1:
        del b[rng.randrange(len(b)):]
    elif kind == 2:
        p = rng.randrange(len(b) + 1)
        b[p:p] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 32)))
    elif kind == 3:
        for _ in range(rng.randint(1, 4)):
            p = rng.randrange(len(b))
            b[p] = rng.choice((0, 0x7F, 0x80, 0xFF, rng.randrange(256)))
    else:
        p = rng.randrange(len(b))
        q = min(len(b), p + rng.randint(1, 64))
        b[p:p] = b[p:q]
    return bytes(b)


# ----------------------------------------------------------------------------- ONNX
ONNX_VERBS = (["inspect", "{m}"], ["inspect", "{m}", "--json"], ["inspect", "{m}", "--tree"],
              ["inspect", "{m}", "--node", "/conv/Conv"], ["check", "{m}", "--backend", "static"],
              ["graph", "{m}", "--json"])
HUGE = (2 ** 62, 2 ** 63 - 1, 2 ** 40, 2 ** 31, -1, -(2 ** 63), 0)


def base_model() -> onnx.ModelProto:
    """Conv -> Relu -> If(then: Identity, else: Neg) -> Reshape; weights big enough to be
    external when asked; a Constant node; a dynamic batch dim."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "conv.w")
    b = numpy_helper.from_array(np.zeros(4, np.float32), "conv.b")
    shape = numpy_helper.from_array(np.array([-1, 4 * 8 * 8], np.int64), "shape")
    then_g = helper.make_graph([helper.make_node("Identity", ["r"], ["t_out"], name="/then/Id")],
                               "then", [], [helper.make_tensor_value_info("t_out", 1, None)])
    else_g = helper.make_graph([helper.make_node("Neg", ["r"], ["e_out"], name="/else/Neg")],
                               "else", [], [helper.make_tensor_value_info("e_out", 1, None)])
    nodes = [
        helper.make_node("Conv", ["x", "conv.w", "conv.b"], ["c"], name="/conv/Conv",
                         pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="/relu/Relu"),
        helper.make_node("Constant", [], ["cond"], name="/cond/Constant",
                         value=numpy_helper.from_array(np.array(True), "cond_v")),
        helper.make_node("If", ["cond"], ["i"], name="/if/If", then_branch=then_g,
                         else_branch=else_g),
        helper.make_node("Reshape", ["i", "shape"], ["y"], name="/head/Reshape"),
    ]
    g = helper.make_graph(nodes, "fuzz", [helper.make_tensor_value_info("x", 1, ["N", 3, 8, 8])],
                          [helper.make_tensor_value_info("y", 1, ["N", 256])],
                          initializer=[w, b, shape],
                          value_info=[helper.make_tensor_value_info("c", 1, ["N", 4, 8, 8])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                          producer_name="workbench-fuzz")
    m.ir_version = 8
    return m


def _external(m: onnx.ModelProto, tensor: str = "conv.w", location: str = "w.bin",
              offset: Any = 0, length: Any = None) -> Tuple[onnx.ModelProto, bytes]:
    """Move one initializer to external data; returns the model and the data file's bytes."""
    t = next(x for x in m.graph.initializer if x.name == tensor)
    raw = t.raw_data or numpy_helper.to_array(t).tobytes()
    t.ClearField("raw_data")
    t.ClearField("float_data")
    t.data_location = TensorProto.EXTERNAL
    kv = {"location": location, "offset": str(offset),
          "length": str(len(raw) if length is None else length)}
    for k, v in kv.items():
        e = t.external_data.add()
        e.key, e.value = k, v
    return m, raw


def _pb(field: int, payload: Any) -> bytes:
    """One protobuf field: varint for ints, length-delimited for bytes/str."""
    def varint(v: int) -> bytes:
        v &= (1 << 64) - 1
        out = bytearray()
        while True:
            out.append((v & 0x7F) | (0x80 if v > 0x7F else 0))
            v >>= 7
            if not v:
                return bytes(out)
    if isinstance(payload, int):
        return varint(field << 3) + varint(payload)
    data = payload.encode() if isinstance(payload, str) else payload
    return varint((field << 3) | 2) + varint(len(data)) + data


def nested_if_bytes(depth: int) -> bytes:
    """A model whose If nodes nest `depth` levels (then_branch only), serialized by hand:
    protobuf's own classes refuse to build one deeper than their recursion limit (100), and
    that is exactly what a hostile file does not care about."""
    vi = lambda name: _pb(1, name) + _pb(2, _pb(1, _pb(1, 1)))  # noqa: E731 (float tensor)
    graph = (_pb(1, _pb(1, "x") + _pb(2, "o0") + _pb(3, "/leaf") + _pb(4, "Identity"))
             + _pb(2, "leaf") + _pb(12, vi("o0")))
    leaf = graph
    for i in range(depth):
        attrs = (_pb(5, _pb(1, "then_branch") + _pb(6, graph) + _pb(20, 5))
                 + _pb(5, _pb(1, "else_branch") + _pb(6, leaf) + _pb(20, 5)))
        node = _pb(1, "cond") + _pb(2, f"o{i + 1}") + _pb(3, f"/if{i}") + _pb(4, "If") + attrs
        graph = _pb(1, node) + _pb(2, f"g{i}") + _pb(12, vi(f"o{i + 1}"))
    graph += _pb(11, vi("x")) + _pb(11, _pb(1, "cond") + _pb(2, _pb(1, _pb(1, 9))))
    return _pb(1, 8) + _pb(7, graph) + _pb(8, _pb(1, "") + _pb(2, 17))


def _onnx_structural(rng: random.Random) -> Tuple[str, Dict[str, Any]]:
    """(what, files) for one structure-aware hostile ONNX model (file 'm.onnx')."""
    m = base_model()
    files: Dict[str, Any] = {}
    g = m.graph
    kind = rng.randrange(16)
    what = ""
    if kind == 0:  # huge / negative declared dims on an input or value_info
        vi = rng.choice([g.input[0], g.value_info[0], g.output[0]])
        d = rng.choice(vi.type.tensor_type.shape.dim)
        d.Clear()
        d.dim_value = rng.choice(HUGE)
        what = f"dim {d.dim_value}"
    elif kind == 1:  # initializer declares huge dims (data absent or short)
        t = rng.choice(list(g.initializer))
        del t.dims[:]
        t.dims.extend(rng.choice(HUGE) for _ in range(rng.randint(1, 4)))
        if rng.random() < 0.5:
            t.ClearField("raw_data")
        what = f"initializer dims {list(t.dims)}"
    elif kind == 2:  # Constant node tensor with hostile dims/type
        t = g.node[2].attribute[0].t
        del t.dims[:]
        t.dims.extend(rng.choice(HUGE) for _ in range(rng.randint(1, 3)))
        t.data_type = rng.choice((1, 7, 8, 16, 999, -3, 0))
        what = f"constant dims {list(t.dims)} type {t.data_type}"
    elif kind == 3:  # wrong element types everywhere
        for t in g.initializer:
            t.data_type = rng.choice((0, 8, 13, 17, 21, 999, -1, 2 ** 31 - 1))
        g.input[0].type.tensor_type.elem_type = rng.choice((0, 8, 999, -7))
        what = "element types"
    elif kind == 4:  # external data with hostile offset / length
        off = rng.choice((0, -1, -(2 ** 63), 2 ** 62, "abc", "1e9", "", " 12", "0x10"))
        ln = rng.choice((None, 0, -1, 2 ** 62, 2 ** 63 + 5, "nan", "", "-0"))
        m, raw = _external(m, offset=off, length=ln)
        files["w.bin"] = raw if rng.random() < 0.8 else raw[: rng.randrange(len(raw))]
        what = f"external offset {off!r} length {ln!r}"
    elif kind == 5:  # path-escaping or odd locations
        loc = rng.choice(("../w.bin", "/etc/passwd", "sub/../../w.bin", "a\x00b", "x" * 5000,
                          ".", "", "sub", "link.bin", "w.bin/", "~/w.bin", "C:\\w.bin",
                          "%2e%2e/w.bin", "sub/" * 200 + "w.bin"))
        m, raw = _external(m, location=loc)
        files["w.bin"] = raw
        files["sub/keep"] = b""
        files["link.bin"] = ("symlink", "/etc/hostname")
        what = f"location {loc[:40]!r}"
    elif kind == 6:  # nesting deeper than any walker should recurse
        depth = rng.choice((10, 30, 33, 34, 45, 60, 150, 400, 2000))
        return f"nested {depth}", {"m.onnx": nested_if_bytes(depth)}
    elif kind == 7:  # attribute whose type and value disagree
        a = g.node[0].attribute[0]
        a.type = rng.choice((0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14))  # (a closed enum)
        if rng.random() < 0.5:
            a.ClearField("ints")
        what = f"attribute type {a.type}"
    elif kind == 8:  # If branch missing / graph attribute empty
        a = g.node[3].attribute[rng.randrange(2)]
        a.ClearField("g")
        what = "empty branch"
    elif kind == 9:  # opset / ir versions out of range
        m.opset_import[0].version = rng.choice((0, -1, 2 ** 62, 10 ** 6, 1))
        m.ir_version = rng.choice((1, 2, 3, 8, 10 ** 6, 2 ** 62))
        if rng.random() < 0.3:
            m.opset_import.add(domain=rng.choice(("", "ai.onnx", "com.microsoft", "x" * 300)),
                               version=rng.choice((1, -5, 2 ** 40)))
        what = f"opset {m.opset_import[0].version} ir {m.ir_version}"
    elif kind == 10:  # names: empty, duplicated, control characters, very long
        n = rng.choice(list(g.node))
        n.name = rng.choice(("", "/relu/Relu", "\n\r\t", "a" * 20000, "\x1e\x1f", "../../x",
                             "名前/ノード", "\ud7ff"))
        if rng.random() < 0.5:
            n.output[0] = rng.choice(("", "x", "c", "y"))
        what = "names"
    elif kind == 11:  # dims with params that are not identifiers
        d = g.input[0].type.tensor_type.shape.dim[rng.randrange(4)]
        d.Clear()
        d.dim_param = rng.choice(("", "N" * 10000, "-1", "1e400", "\n", "N+M", "0"))
        what = "dim_param"
    elif kind == 12:  # non-tensor types where tensors are expected
        vi = rng.choice([g.input[0], g.output[0], g.value_info[0]])
        vi.type.Clear()
        pick = rng.randrange(4)
        if pick == 0:
            vi.type.sequence_type.elem_type.tensor_type.elem_type = 1
        elif pick == 1:
            vi.type.map_type.key_type = 7
            vi.type.map_type.value_type.tensor_type.elem_type = 1
        elif pick == 2:
            vi.type.optional_type.elem_type.tensor_type.elem_type = 1
        what = f"type kind {pick}"
    elif kind == 13:  # a node with very many inputs / outputs (all empty or repeated)
        n = g.node[1]
        n.input.extend([rng.choice(("", "r", "c"))] * rng.choice((1000, 50000)))
        what = "many inputs"
    elif kind == 14:  # huge tensor data declared through int64 or string data fields
        t = g.initializer[2]
        t.ClearField("int64_data")
        t.ClearField("raw_data")
        t.int64_data.extend([2 ** 62] * 3)
        del t.dims[:]
        t.dims.extend([2 ** 62])
        what = "int64 data vs dims"
    else:  # graph cycles and dangling references
        g.node[0].input[0] = "y"
        g.node[4].input[1] = rng.choice(("nope", "", "y"))
        what = "cycle"
    files["m.onnx"] = m.SerializeToString()
    return what, files


def onnx_cases(rng: random.Random, n: int, *, byte_share: float = 0.5) -> Iterator[Case]:
    """n ONNX cases: byte-level mutations of the base model and sample models, and
    structure-aware hostile models, each run through one verb."""
    seeds = [base_model().SerializeToString(), (SAMPLES / "needs_fixing.onnx").read_bytes(),
             (FIXTURES / "trt86-h200" / "bert_small.structure.onnx").read_bytes()]
    for _ in range(n):
        verb = [a.replace("{m}", "{d}/m.onnx") for a in rng.choice(ONNX_VERBS)]
        if rng.random() < byte_share:
            yield Case("onnx", "bytes", verb, {"m.onnx": mutate_bytes(rng.choice(seeds), rng)})
        else:
            what, files = _onnx_structural(rng)
            yield Case("onnx", "structure:" + what.split(" ")[0], verb, files)


# ----------------------------------------------------------------------------- JSON
HOSTILE_VALUES = (None, True, False, 0, -1, 2 ** 63, -(2 ** 63), 10 ** 400, 1e308, -1e308,
                  float("nan"), float("inf"), -0.0, "", "x" * 10000, "\x00\x1e\x1f", "[profile 1]",
                  "NaN", "-1", [], [None], [[[]]], {}, {"": None}, {"Name": None}, [1] * 1000,
                  "{ForeignNode[a...b]}", "Reformatting CopyNode for Input Tensor 0",
                  "[ONNX Layer: /x]\x1e[ONNX Layer: ]")


def _paths(obj: Any, path: Tuple = ()) -> Iterator[Tuple]:
    yield path
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:40]):  # (the first records are enough to be hostile with)
            yield from _paths(v, path + (i,))


def mutate_json(obj: Any, rng: random.Random) -> str:
    """The JSON text of `obj` with one hostile change at a random place: a value of the
    wrong type or size, a deleted key, a renamed key, deep nesting, a duplicated record."""
    obj = json.loads(json.dumps(obj))
    paths = list(_paths(obj))
    path = rng.choice(paths)
    kind = rng.randrange(6)
    if kind == 5:  # nesting deeper than json's recursion limit, somewhere inside
        depth = rng.choice((50, 990, 5000, 100000))
        deep = "[" * depth + "]" * depth
        return json.dumps(_set(obj, path, "@@DEEP@@")).replace('"@@DEEP@@"', deep)
    if not path:
        return json.dumps(rng.choice(HOSTILE_VALUES))
    parent = _get(obj, path[:-1])
    key = path[-1]
    if kind <= 2:
        parent[key] = rng.choice(HOSTILE_VALUES)
    elif kind == 3:
        if isinstance(parent, dict):
            del parent[key]
        else:
            parent.pop(key)
    else:
        if isinstance(parent, dict):
            parent[key + rng.choice(("_", " ", "\u00e9"))] = parent.pop(key)
        else:
            parent.insert(key, parent[key])
    return json.dumps(obj)


def _get(obj: Any, path: Tuple) -> Any:
    for k in path:
        obj = obj[k]
    return obj


def _set(obj: Any, path: Tuple, value: Any) -> Any:
    if not path:
        return value
    _get(obj, path[:-1])[path[-1]] = value
    return obj


def _json_case(reader: str, seeds: List[bytes], rng: random.Random, name: str) -> bytes:
    seed = rng.choice(seeds)
    if rng.random() < 0.4:
        return mutate_bytes(seed, rng)
    return mutate_json(json.loads(seed.decode("utf-8"), strict=False), rng).encode()


def timing_cases(rng: random.Random, n: int) -> Iterator[Case]:
    """`workbench timing`: layer info (every TensorRT layout), per-layer profiles, --times."""
    h200, a100 = FIXTURES / "trt86-h200", FIXTURES / "trex-a100-resnet"
    layers = [(h200 / "bert_small_fp16.layers.json").read_bytes(),
              (a100 / "resnet-qat.engine.graph.json").read_bytes()]
    names_only = json.dumps({"Layers": ["a", "b [profile 1]", "{ForeignNode[x...y]}"],
                             "Bindings": ["in", "out"]}).encode()
    layers.append(names_only)
    profiles = [(h200 / "bert_small_fp16.profile.json").read_bytes(),
                (a100 / "resnet-fp16.engine.profile.json").read_bytes()]
    times = [json.dumps(json.loads((a100 / "resnet-fp16.engine.timing.json").read_bytes())[:50]
                        ).encode()]
    for _ in range(n):
        form = rng.randrange(4)
        files = {"l.json": rng.choice(layers), "p.json": rng.choice(profiles),
                 "t.json": times[0]}
        target = ("l.json", "p.json", "t.json", "l.json")[form]
        seeds = {"l.json": layers, "p.json": profiles, "t.json": times}[target]
        files[target] = _json_case("timing", seeds, rng, target)
        argv = [["timing", "{d}/l.json"], ["timing", "{d}/l.json", "--profile", "{d}/p.json"],
                ["timing", "{d}/l.json", "--times", "{d}/t.json"],
                ["timing", "{d}/p.json"]][form if form < 3 else 1]
        if form == 3:
            argv = ["timing", "{d}/l.json", "--profile", "{d}/p.json", "--vs", "{d}/l.json"]
        if rng.random() < 0.5:
            argv.append("--json")
        yield Case("timing", target.split(".")[0], argv, files)


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def hostile_npy(rng: random.Random) -> bytes:
    """An .npy whose header declares a shape / dtype the data does not back (huge, negative,
    object dtype, a Python expression), or a valid header over truncated data."""
    shape = rng.choice(("(1000000000000,)", "(2**40,)", "(-1,)", "(3, -5)", "(4611686018427387904, 4)",
                        "(1, 3, 8, 8)", "()", "(0,)", "(1e3,)", "('a',)", "(10, 10, 10, 10, 10, 10)"))
    descr = rng.choice(("'<f4'", "'<f8'", "'|O'", "'<U10'", "'|V1000000000'", "'<i8'", "'>f2'",
                        "[('a', '<f4')]", "'<f4'", "'<f4'"))
    order = rng.choice(("False", "True", "1", "None"))
    header = "{'descr': %s, 'fortran_order': %s, 'shape': %s, }" % (descr, order, shape)
    header = header.ljust(((len(header) + 11) // 64 + 1) * 64 - 11) + "\n"
    body = bytes(rng.randrange(256) for _ in range(rng.choice((0, 7, 64, 768))))
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin-1") + body


def npz_of(members: Dict[str, bytes]) -> bytes:
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for k, v in members.items():
            z.writestr(k, v)
    return buf.getvalue()


def calib_cases(rng: random.Random, n: int) -> Iterator[Case]:
    """`workbench profiles MODEL --calib X.npz|.npy|folder` on the base model (input x:
    [N, 3, 8, 8] float32): byte mutations of a valid npz, hostile npy headers, wrong keys,
    types and shapes, zip members that are not arrays."""
    model = base_model().SerializeToString()
    good = {"x": np.zeros((2, 3, 8, 8), np.float32)}
    good_npz = npz_of({k + ".npy": _npy(v) for k, v in good.items()})
    for _ in range(n):
        kind = rng.randrange(6)
        files: Dict[str, Any] = {"m.onnx": model}
        target = "c.npz"
        if kind == 0:
            files[target] = mutate_bytes(good_npz, rng)
        elif kind == 1:
            files[target] = npz_of({"x.npy": hostile_npy(rng)})
        elif kind == 2:
            target = "c.npy"
            files[target] = hostile_npy(rng) if rng.random() < 0.7 else mutate_bytes(
                _npy(good["x"]), rng)
        elif kind == 3:  # valid arrays, wrong for the model
            arr = rng.choice((np.zeros((2, 3, 8, 9), np.float32), np.zeros((0, 3, 8, 8), np.float32),
                              np.full((1, 3, 8, 8), np.nan, np.float32),
                              np.zeros((1, 3, 8, 8), np.complex64), np.zeros((1, 3, 8, 8), "U2"),
                              np.zeros((2 ** 20,), np.uint8), np.array(7), np.zeros((1, 3, 8, 8), bool),
                              np.full((1, 3, 8, 8), 1e300), np.zeros((1, 3, 8, 8), [("a", "<f4")])))
            key = rng.choice(("x", "y", "", "x/../y", "x" * 300))
            files[target] = npz_of({key + ".npy": _npy(arr)})
        elif kind == 4:  # members that are not .npy at all
            files[target] = npz_of({rng.choice(("x.npy", "x", "x.txt", "../x.npy")):
                                    rng.choice((b"", b"\x93NUMPY", b"PK\x03\x04", b"\x93NUMPY\x09\x00",
                                                b"\x93NUMPY\x01\x00\xff\xff{"))})
        else:  # a folder of files, one of them bad
            target = "calib"
            files["calib/a.npz"] = good_npz
            files["calib/b.npz"] = mutate_bytes(good_npz, rng)
            files["calib/c.npy"] = hostile_npy(rng)
        argv = ["profiles", "{d}/m.onnx", "--calib", "{d}/" + target]
        if rng.random() < 0.3:
            argv += ["--profile", "x:1x3x8x8:2x3x8x8:4x3x8x8"]
        yield Case("calib", ("npz", "npz-header", "npy", "mismatch", "members", "folder")[kind],
                   argv, files)


# ----------------------------------------------------------------------------- readers called directly
def run_results_doc() -> Dict[str, Any]:
    def arr(a: np.ndarray) -> Dict[str, Any]:
        import base64

        return {"values": {"array": base64.b64encode(_npy(a)).decode(),
                           "polygraphy_class": "ndarray"}, "polygraphy_class": "LazyArray"}
    return {"lst": [["onnxrt-runner", [{"outputs": {"y": arr(np.ones((2, 4), np.float32))},
                                        "runtime": None, "runner_name": "onnxrt-runner",
                                        "polygraphy_class": "IterationResult"}]]],
            "polygraphy_class": "RunResults"}


def run_results_cases(rng: random.Random, n: int) -> Iterator[Case]:
    """compare's `load_run_results` (Polygraphy RunResults JSON) on hostile files."""
    import base64

    seed = json.dumps(run_results_doc()).encode()
    for _ in range(n):
        r = rng.random()
        if r < 0.3:
            data = mutate_bytes(seed, rng)
        elif r < 0.5:  # a valid document whose array is a hostile .npy
            doc = run_results_doc()
            doc["lst"][0][1][0]["outputs"]["y"]["values"]["array"] = base64.b64encode(
                hostile_npy(rng)).decode()
            data = json.dumps(doc).encode()
        else:
            data = mutate_json(run_results_doc(), rng).encode()
        yield Case("run_results", "json", ["@run_results", "{d}/r.json"], {"r.json": data})


def engine_meta_doc() -> Dict[str, Any]:
    return {"key": "k" * 64, "size_bytes": 4, "backend": "tensorrt-rtx", "backend_version": "1.7",
            "config_hash": "c" * 16, "findings": [{"severity": "info", "code": "x", "message": "m"}],
            "export": {"trtexec": "trtexec --onnx=m.onnx"}, "log": [{"severity": "I", "text": "t"}],
            "route": "strongly-typed", "onnx_path": "m.onnx", "build_seconds": 0.5,
            "targets": ["sm89"], "layers": [{"name": "l", "outputs": [{"dtype": "FLOAT"}]}],
            "notes": [], "config": {"precision": "fp32"}}


def engine_meta_cases(rng: random.Random, n: int) -> Iterator[Case]:
    """The engine cache's meta / engine card (`build.cache.load_cached` + `result_from_meta`)
    and its hash memo: a bad card is a cache miss (rebuild), never a crash."""
    seed = json.dumps(engine_meta_doc()).encode()
    for _ in range(n):
        data = mutate_bytes(seed, rng) if rng.random() < 0.3 else mutate_json(
            engine_meta_doc(), rng).encode()
        target = "e.json" if rng.random() < 0.8 else "hash-memo.json"
        files = {"e.engine": b"\x00" * 4, "e.json": seed, "m.onnx": base_model().SerializeToString()}
        files[target] = data
        yield Case("engine_meta", target.split(".")[0], ["@engine_meta", "{d}"], files)


RECIPE_VALUES = ("", "=", "==", ",", ",,,", ":", "1e999", "nan", "-1", "9" * 5000, "a/b;c/",
                 "/", ";", "+", "x/", "\x00", "名前", "../../etc/passwd", "true", "1.5", "k=v")


def recipe_cases(rng: random.Random, n: int) -> Iterator[Case]:
    """`fix --recipe NAME:k=v,...` arguments: real recipe names and parameters with hostile
    values, unknown names and keys, broken syntax. Run through the CLI on a missing model
    (parsing happens first; a valid argument then ends at 'file not found') and directly."""
    from workbench.surgery.recipes import list_recipes

    recipes = list_recipes()
    for _ in range(n):
        r = rng.choice(recipes)
        name = rng.choice((r["name"], r["name"], r["name"].upper(), "", "nope", r["name"] + " "))
        params = [p["name"] for p in r["params"]] or ["k"]
        parts = []
        for _ in range(rng.randint(0, 4)):
            k = rng.choice(params + ["", "zz", " "])
            v = rng.choice(RECIPE_VALUES + tuple(RECIPE_VALUES[i] + RECIPE_VALUES[j]
                                                 for i, j in [(9, 10), (12, 11), (13, 14)]))
            parts.append(rng.choice((f"{k}={v}", f"{k}{v}", v)))
        arg = name + rng.choice((":", ":", "", "::")) + rng.choice((",", ",,", ";")).join(parts)
        yield Case("recipe", "arg", ["@recipe", arg], {})
