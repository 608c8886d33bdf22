"""FP16 lowering: the workbench's (`workbench precision --to fp16`, workbench.precision.lowering)
vs onnxconverter-common's `convert_float_to_float16` (what `polygraphy convert --fp-to-fp16`
uses) vs NVIDIA ModelOpt's ONNX AutoCast (`modelopt.onnx.autocast.convert_to_f16`), side by side.

Models: the lowering test models (tests/lowering_models.py: If with outer-scope values, Loop and
Scan bodies, a CLIP-style block), the sample models, onnx's backend `light` model-zoo
architectures (their generated weights stored as small random initializers) and
`pytorch-converted` models (opset 6 mostly), and tests/data/zoo/*.onnx when
present. For each model and converter (all with keep_io_types=True, defaults otherwise):
  valid    onnx.checker full_check (strict shape inference) passes
  loads    onnxruntime CPU creates a session
  rel_err  max over outputs of max|fp16 - ref| / max|ref|, ref = the FP32 model in onnxruntime
           (or the expected outputs shipped with the model where onnxruntime cannot run it);
           inputs from the model's test data or seeded random ones
  seconds  wall time of the conversion call alone
A converter that raises gets the one-line error. ModelOpt: `pip install nvidia-modelopt` pulls
torch and CUDA wheels (GBs) and `modelopt.onnx`'s package __init__ imports torch; on a CPU
machine install it with `pip install --no-deps --target DIR nvidia-modelopt tqdm onnxscript
onnx-ir nvidia-ml-py lief` and pass `--modelopt-target DIR`: its autocast modules are then
imported with the two package __init__s (modelopt.onnx, modelopt.onnx.quantization) bypassed,
which the output says. Without it the column says why it is unavailable.

    python benchmarks/fp16_lowering.py [--modelopt-target DIR] [--only SUBSTR] [--json-only]

The last line is one JSON object.
"""
from __future__ import annotations

import argparse
import glob
import json
import statistics
import sys
import time
import types
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
REL_OK = 1e-2
SKIPPED: List[str] = []


# --------------------------------------------------------------------------- models
def models(max_params: int = 0) -> List[Tuple[str, Any, Optional[List[Dict[str, np.ndarray]]],
                                              Optional[list]]]:
    """(name, ModelProto, feeds or None, expected outputs or None); light models with more than
    `max_params` weights (0: no limit) are left out."""
    import onnx
    from onnx import numpy_helper

    from lowering_models import CASES

    out: List[Tuple[str, Any, Any, Any]] = []
    for name, make in sorted(CASES.items()):
        m, feed = make()
        out.append((f"test/{name}", m, [feed], None))
    for p in sorted((REPO / "sample_models").glob("*.onnx")):
        out.append((f"sample/{p.stem}", onnx.load(str(p)), None, None))
    data = Path(onnx.__file__).parent / "backend" / "test" / "data"
    for p in sorted((data / "light").glob("*.onnx")):
        m = materialise(onnx.load(str(p)))
        if max_params and _params(m) > max_params:
            SKIPPED.append(f"light/{p.stem} ({_params(m) / 1e6:.0f}M weights)")
            continue
        out.append((f"light/{p.stem}", m, None, None))
    for d in sorted(glob.glob(str(data / "pytorch-converted" / "*" / ""))):
        d = Path(d)
        m = onnx.load(str(d / "model.onnx"))
        ts = d / "test_data_set_0"
        ins = [numpy_helper.to_array(onnx.load_tensor(str(x))) for x in sorted(ts.glob("input_*.pb"))]
        exp = [numpy_helper.to_array(onnx.load_tensor(str(x))) for x in sorted(ts.glob("output_*.pb"))]
        inits = {t.name for t in m.graph.initializer}
        names = [i.name for i in m.graph.input if i.name not in inits]
        out.append((f"pytorch-converted/{d.name}", m, [dict(zip(names, ins))], exp))
    for p in sorted((REPO / "tests" / "data" / "zoo").glob("*.onnx")):
        out.append((f"zoo/{p.stem}", onnx.load(str(p)), None, None))
    return out


def materialise(m: Any) -> Any:
    """The light models generate their weights with ConstantOfShape (constant shapes): store
    them as initializers, as exported models do (onnxruntime would fold them in every session,
    minutes per model here, and the converters would see no weights)."""
    from onnx import numpy_helper

    g = m.graph
    inits = {t.name: t for t in g.initializer}
    variances = {n.input[4] for n in g.node if n.op_type == "BatchNormalization"
                 and len(n.input) > 4}
    keep = []
    for n in g.node:
        if n.op_type == "ConstantOfShape" and n.input and n.input[0] in inits:
            shape = numpy_helper.to_array(inits[n.input[0]]).astype(np.int64)
            value = next((numpy_helper.to_array(a.t) for a in n.attribute if a.name == "value"),
                         np.zeros(1, np.float32))
            rng = np.random.default_rng(len(keep))  # small random weights, not one constant
            arr = (np.full(tuple(shape), value.reshape(-1)[0], value.dtype) if value.dtype.kind
                   != "f" else (rng.standard_normal(tuple(shape)) * 0.05).astype(value.dtype))
            if n.output[0] in variances:  # a variance must be positive
                arr = (np.abs(arr) * 10 + 0.5).astype(arr.dtype)
            g.initializer.append(numpy_helper.from_array(arr, n.output[0]))
        else:
            keep.append(n)
    del g.node[:]
    g.node.extend(keep)
    names = {t.name for t in g.initializer}
    ins = [vi for vi in g.input if vi.name not in names]
    del g.input[:]
    g.input.extend(ins)
    m.ir_version = max(m.ir_version, 4)  # initializers need not be inputs from IR 4
    return m


def _params(m: Any) -> int:
    return sum(int(np.prod(t.dims)) for t in m.graph.initializer)


# --------------------------------------------------------------------------- converters
def workbench_fp16(m: Any) -> Any:
    from workbench.precision.transform import convert

    return convert(m, "fp16", measure=False).proto


def onnxconverter_fp16(m: Any) -> Any:
    from onnxconverter_common import float16

    return float16.convert_float_to_float16(m, keep_io_types=True)


def load_modelopt(target: Optional[str]) -> Tuple[Optional[Callable[[Any], Any]], str]:
    """(convert function or None, how it was imported / why not)."""
    try:
        from modelopt.onnx.autocast import convert_to_f16  # type: ignore

        how = "modelopt.onnx.autocast (installed)"
    except Exception as e:
        if not target:
            return None, ("unavailable: " + " ".join(str(e).split())[:160] + " (nvidia-modelopt's "
                          "ONNX part needs torch + CUDA wheels; see --modelopt-target)")
        for k in [k for k in sys.modules if k == "modelopt" or k.startswith("modelopt.")]:
            del sys.modules[k]
        sys.path.insert(0, target)
        for name, sub in (("modelopt", "modelopt"), ("modelopt.onnx", "modelopt/onnx"),
                          ("modelopt.onnx.quantization", "modelopt/onnx/quantization")):
            mod = types.ModuleType(name)
            mod.__path__ = [str(Path(target) / sub)]  # type: ignore[attr-defined]
            sys.modules[name] = mod
        try:
            from modelopt.onnx.autocast import convert_to_f16  # type: ignore
        except Exception as e2:
            return None, "unavailable: " + " ".join(str(e2).split())[:200]
        import importlib.metadata as md

        try:
            ver = md.version("nvidia-modelopt")
        except Exception:
            ver = next((p.name.split("-")[1] for p in Path(target).glob("nvidia_modelopt-*")), "?")
        how = (f"nvidia-modelopt {ver} autocast from {target}, package __init__s bypassed "
               "(modelopt.onnx imports torch)")

    import contextlib
    import io
    import logging

    def run(m: Any) -> Any:
        for name in ("modelopt", "modelopt.onnx", "modelopt.onnx.autocast"):
            logging.getLogger(name).setLevel(logging.ERROR)
        with contextlib.redirect_stdout(io.StringIO()):  # its version converter prints
            return convert_to_f16(m, low_precision_type="fp16", keep_io_types=True)

    return run, how


# --------------------------------------------------------------------------- measuring
def _one_line(e: BaseException) -> str:
    return f"{type(e).__name__}: " + " ".join(str(e).split())[:180]


def _ort(m: Any) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 4
    # default optimisations: without them onnxruntime drops Cast pairs around the FP16 nodes it
    # upcasts and reports FP32 results
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _run(sess: Any, feed: Dict[str, np.ndarray]) -> List[np.ndarray]:
    meta = {i.name: i.type for i in sess.get_inputs()}
    f = {}
    for k, v in feed.items():
        if k in meta:
            f[k] = v.astype(np.float16) if meta[k] == "tensor(float16)" else v
    return [np.asarray(x) for x in sess.run(None, f)]


def reference(name: str, m: Any, feeds: Any, expected: Any) -> Tuple[Any, Any, str]:
    """(feeds, reference outputs per feed, what the reference is)."""
    from workbench.runtime.equivalence import make_inputs

    if feeds is None:
        feeds = [make_inputs(m, seed=0)]
    try:
        s = _ort(m)
        return feeds, [_run(s, f) for f in feeds], "onnxruntime FP32"
    except Exception:
        if expected is not None:
            return feeds, [expected], "expected outputs (onnxruntime cannot run the FP32 model)"
        return feeds, None, "none (onnxruntime cannot run the FP32 model)"


def measure(convert: Callable[[Any], Any], m: Any, feeds: Any, ref: Any) -> Dict[str, Any]:
    import copy

    import onnx

    row: Dict[str, Any] = {"valid": False, "loads": False, "rel_err": None, "seconds": None,
                           "error": None}
    src = copy.deepcopy(m)
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = convert(src)
    except BaseException as e:  # noqa: BLE001 - a converter's crash is a result here
        if isinstance(e, KeyboardInterrupt):
            raise
        row["seconds"] = round(time.perf_counter() - t0, 3)
        row["error"] = _one_line(e)
        return row
    row["seconds"] = round(time.perf_counter() - t0, 3)
    try:
        onnx.checker.check_model(out, full_check=True)
        row["valid"] = True
    except Exception as e:
        row["error"] = "invalid: " + _one_line(e)
    try:
        s = _ort(out)
        row["loads"] = True
    except Exception as e:
        row["error"] = row["error"] or "onnxruntime: " + _one_line(e)
        return row
    if ref is None:
        return row
    try:
        worst = 0.0
        for f, r in zip(feeds, ref):
            got = _run(s, f)
            for a, b in zip(r, got):
                a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
                if a64.shape != b64.shape:
                    raise ValueError(f"output shape {b64.shape} != {a64.shape}")
                scale = float(np.abs(a64).max()) if a64.size else 0.0
                d = float(np.abs(a64 - b64).max()) if a64.size else 0.0
                if not np.isfinite(d):
                    worst = float("inf")
                else:
                    worst = max(worst, d / scale if scale > 0 else d)
        row["rel_err"] = worst
    except Exception as e:
        row["error"] = row["error"] or "run: " + _one_line(e)
    return row


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modelopt-target", help="a `pip install --no-deps --target` folder "
                    "holding nvidia-modelopt and its light deps")
    ap.add_argument("--only", help="only models whose name contains this")
    ap.add_argument("--json-only", action="store_true")
    ap.add_argument("--max-params", type=float, default=30e6, help="leave out light models with "
                    "more weights (alexnet, vgg19, zfnet512: 60-140M; 0 = none left out)")
    args = ap.parse_args(argv)

    mo, mo_how = load_modelopt(args.modelopt_target)
    convs: Dict[str, Optional[Callable[[Any], Any]]] = {
        "workbench": workbench_fp16, "onnxconverter-common": onnxconverter_fp16, "modelopt": mo}
    say = (lambda *a: None) if args.json_only else print
    say(f"modelopt: {mo_how}")
    rows: List[Dict[str, Any]] = []
    for name, m, feeds, expected in models(int(args.max_params)):
        if args.only and args.only not in name:
            continue
        feeds, ref, ref_kind = reference(name, m, feeds, expected)
        row: Dict[str, Any] = {"model": name, "reference": ref_kind}
        for cname, fn in convs.items():
            row[cname] = measure(fn, m, feeds, ref) if fn is not None else None
        rows.append(row)
        cells = []
        for cname in convs:
            r = row[cname]
            if r is None:
                cells.append(f"{cname}: n/a")
                continue
            mark = ("ok" if r["valid"] and r["loads"] and r["rel_err"] is not None
                    and r["rel_err"] < REL_OK else "FAIL")
            err = f"{r['rel_err']:.1e}" if r["rel_err"] is not None else "-"
            cells.append(f"{cname}: {mark} valid={int(r['valid'])} loads={int(r['loads'])} "
                         f"rel={err} {r['seconds']}s" + (f" [{r['error'][:90]}]"
                                                        if r["error"] and mark != "ok" else ""))
        say(f"{name:45s} " + " | ".join(cells))
    if SKIPPED:
        say("left out (--max-params): " + ", ".join(SKIPPED))
    summary: Dict[str, Any] = {"models": len(rows), "modelopt_import": mo_how, "rel_ok": REL_OK,
                               "left_out": SKIPPED}
    for cname in convs:
        rs = [r[cname] for r in rows if r[cname] is not None]
        if not rs:
            summary[cname] = None
            continue
        summary[cname] = {
            "valid": sum(r["valid"] for r in rs), "loads": sum(r["loads"] for r in rs),
            "accurate": sum(1 for r in rs if r["rel_err"] is not None and r["rel_err"] < REL_OK
                            and r["valid"]),
            "errors": sum(1 for r in rs if r["error"]),
            "median_s": statistics.median(r["seconds"] for r in rs),
            "total_s": round(sum(r["seconds"] for r in rs), 2),
            "worst_rel_err": max((r["rel_err"] for r in rs if r["rel_err"] is not None),
                                 default=None),
        }
        s = summary[cname]
        say(f"{cname:22s} valid {s['valid']}/{len(rs)}, loads {s['loads']}/{len(rs)}, within "
            f"{REL_OK:g} {s['accurate']}/{len(rs)}, median {s['median_s']:.3f}s, total "
            f"{s['total_s']}s")
    summary["failures"] = {c: [r["model"] for r in rows if r[c] is not None and not (
        r[c]["valid"] and r[c]["loads"] and r[c]["rel_err"] is not None
        and r[c]["rel_err"] < REL_OK)] for c in convs}
    print(json.dumps(summary, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
