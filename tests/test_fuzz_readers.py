"""Fuzzed readers: every file a user can hand the workbench, corrupted byte by byte and made
hostile structure by structure, ends in exit 0/1/2 with one line - never exit 3 (internal
error), a traceback, a hang or unbounded memory.

The cases come from tests/fuzz_cases.py (shared with benchmarks/fuzz.py, which runs >= 10,000);
hypothesis draws the seeds (derandomized: CI sees the same cases every run). Most cases run the
CLI in-process (`workbench.cli.main`), a few in real subprocesses with their peak RSS measured.
Time box: about a minute on 2 cores.
"""
from __future__ import annotations

import base64
import io
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fuzz_cases as fc
from workbench.core.errors import WorkbenchError

REPO = Path(__file__).resolve().parents[1]
PER_CASE_S = 20.0  # no single case may take longer (a hang shows up here or in pytest-timeout)


def _settings(n: int) -> settings:
    return settings(max_examples=n, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


def _check_outcome(case: fc.Case, rc: int, err: str, seconds: float) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    where = f"{case.reader}/{case.kind} {case.argv}"
    assert rc in (0, 1, 2), f"{where}: exit {rc}: {err[:300]}"
    assert "Traceback" not in err, f"{where}: traceback: {err[:300]}"
    if rc == 2:
        assert len(lines) == 1, f"{where}: expected one line, got {lines[:3]}"
    assert seconds < PER_CASE_S, f"{where}: took {seconds:.1f} s"


def _run(gen, seed: int, tmp_path_factory) -> None:
    [case] = list(gen(random.Random(seed), 1))
    folder = tmp_path_factory.mktemp("case")
    t = time.monotonic()
    rc, err = fc.run_case(case, folder)
    _check_outcome(case, rc, err, time.monotonic() - t)


SEEDS = st.integers(min_value=0, max_value=2 ** 32 - 1)


@_settings(400)
@given(seed=SEEDS)
def test_fuzz_onnx_inspect_check_graph(seed, tmp_path_factory):
    _run(fc.onnx_cases, seed, tmp_path_factory)


@_settings(60)
@given(seed=SEEDS)
def test_fuzz_timing_json(seed, tmp_path_factory):
    _run(fc.timing_cases, seed, tmp_path_factory)


@_settings(200)
@given(seed=SEEDS)
def test_fuzz_calibration_npz_npy(seed, tmp_path_factory):
    _run(fc.calib_cases, seed, tmp_path_factory)


@_settings(200)
@given(seed=SEEDS)
def test_fuzz_run_results(seed, tmp_path_factory):
    _run(fc.run_results_cases, seed, tmp_path_factory)


@_settings(200)
@given(seed=SEEDS)
def test_fuzz_engine_card_and_hash_memo(seed, tmp_path_factory):
    _run(fc.engine_meta_cases, seed, tmp_path_factory)


@_settings(150)
@given(seed=SEEDS)
def test_fuzz_recipe_arguments(seed, tmp_path_factory):
    _run(fc.recipe_cases, seed, tmp_path_factory)


# ----------------------------------------------------------------------------- the fixes, one by one
def _cli(argv):
    rc, err = fc.run_case(fc.Case("t", "t", argv), Path("."))
    return rc, err.strip()


def _base_file(tmp_path: Path, proto=None) -> Path:
    p = tmp_path / "m.onnx"
    p.write_bytes((proto or fc.base_model()).SerializeToString())
    return p


def test_invalid_utf8_op_type_is_one_line_naming_node_and_field(tmp_path):
    data = fc.base_model().SerializeToString()
    i = data.index(b"\x22\x04Relu") + 2  # NodeProto.op_type (field 4), 4 bytes
    bad = data[:i] + b"R\xefl" + data[i + 3:]  # same length: only the text is broken
    p = tmp_path / "m.onnx"
    p.write_bytes(bad)
    for verb in (["inspect"], ["check", "--backend", "static"], ["graph"]):
        rc, err = _cli([verb[0], str(p), *verb[1:]])
        assert rc == 2, err
        assert "node '/relu/Relu'" in err and "op_type" in err and "UTF-8" in err, err


def test_strict_parse_accepts_every_valid_model():
    from workbench.core.model import _valid_text

    for f in [*fc.SAMPLES.glob("*.onnx"), *(fc.FIXTURES / "polygraphy-models").glob("*.onnx")]:
        assert _valid_text(f.read_bytes()), f


def test_nesting_past_protobuf_limit_is_bad_input(tmp_path):
    p = tmp_path / "m.onnx"
    p.write_bytes(fc.nested_if_bytes(60))
    rc, err = _cli(["inspect", str(p)])
    assert rc == 2 and "nest deeper than protobuf reads" in err, err
    p.write_bytes(fc.nested_if_bytes(10))  # within the limit: inspected, subgraphs counted
    rc, err = _cli(["inspect", str(p), "--json"])
    assert rc == 0, err


@pytest.mark.parametrize("loc", ["a\x00b", "x" * 5000])
def test_unusable_external_location_is_bad_input(tmp_path, loc):
    m, raw = fc._external(fc.base_model(), location=loc)
    rc, err = _cli(["inspect", str(_base_file(tmp_path, m))])
    assert rc == 2 and "external-data location is not a usable path" in err, err
    assert "conv.w" in err


@pytest.mark.parametrize("offset,length", [("-1", None), ("abc", None), (0, "-5"),
                                            (0, 2 ** 62)])
def test_bad_external_offset_or_length_warns_and_weights_fail(tmp_path, offset, length):
    from workbench.core.model import open_model

    m, raw = fc._external(fc.base_model(), offset=offset, length=length)
    (tmp_path / "w.bin").write_bytes(raw)
    model = open_model(_base_file(tmp_path, m))
    assert [w.code for w in model.warnings] == ["external-data-truncated"]
    with pytest.raises(WorkbenchError, match="external-data file too short"):
        model.load_weights()  # refused before reading or allocating anything


def test_good_external_data_still_loads(tmp_path):
    from workbench.core.model import open_model

    m, raw = fc._external(fc.base_model())
    (tmp_path / "w.bin").write_bytes(raw)
    model = open_model(_base_file(tmp_path, m))
    assert model.warnings == [] and model.truncated_external == []
    w = next(t for t in model.load_weights().graph.initializer if t.name == "conv.w")
    assert onnx.numpy_helper.to_array(w).shape == (4, 3, 3, 3)


def test_undefined_element_type_is_named_by_static_rules(tmp_path):
    m = fc.base_model()
    m.graph.input[0].type.tensor_type.elem_type = 999
    rc, err = _cli(["check", str(_base_file(tmp_path, m)), "--backend", "static", "--json"])
    assert rc in (0, 1), err


# ----------------------------------------------------------------------------- npy / npz
def test_read_npy_matches_np_load(tmp_path):
    from workbench.precision.calibration import _np_load

    a = np.asfortranarray(np.arange(24.0).reshape(2, 3, 4))
    np.save(tmp_path / "a.npy", a)
    got = _np_load(tmp_path / "a.npy")
    assert np.array_equal(got, a) and got.flags.writeable
    np.savez_compressed(tmp_path / "b.npz", x=a.astype(np.float16), y=np.array(["ab", "c"]),
                        z=np.zeros((0, 3)))
    z = _np_load(tmp_path / "b.npz")
    assert sorted(z) == ["x", "y", "z"]
    assert np.array_equal(z["x"], a.astype(np.float16)) and z["y"].tolist() == ["ab", "c"]
    assert z["z"].shape == (0, 3)


def test_npy_header_declaring_more_than_the_file_holds(tmp_path):
    from workbench.precision.calibration import load_calibration

    hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000,), }"
    hdr = hdr.ljust(117) + "\n"
    blob = b"\x93NUMPY\x01\x00" + len(hdr).to_bytes(2, "little") + hdr.encode() + b"\0" * 64
    (tmp_path / "c.npz").write_bytes(fc.npz_of({"x.npy": blob}))
    with pytest.raises(WorkbenchError, match=r"declares shape \(1000000000000,\) float32 "
                                             r"\(4000000000000 bytes\) but only 64 bytes follow"):
        load_calibration(tmp_path / "c.npz", fc.base_model())


def test_array_budget_bounds_what_a_file_may_declare(tmp_path, monkeypatch):
    from workbench.precision.calibration import load_calibration

    np.savez(tmp_path / "c.npz", x=np.zeros((2, 3, 8, 8), np.float32))
    monkeypatch.setenv("WORKBENCH_MAX_ARRAY_BYTES", "1000")
    with pytest.raises(WorkbenchError, match="declare more than 1000 bytes"):
        load_calibration(tmp_path / "c.npz", fc.base_model())
    monkeypatch.setenv("WORKBENCH_MAX_ARRAY_BYTES", str(2 * 3 * 8 * 8 * 4))
    assert load_calibration(tmp_path / "c.npz", fc.base_model())[0]["x"].shape == (2, 3, 8, 8)


def test_pickled_npy_is_refused(tmp_path):
    from workbench.precision.calibration import load_calibration

    np.save(tmp_path / "c.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(WorkbenchError, match="pickled Python objects"):
        load_calibration(tmp_path / "c.npy", fc.base_model())


# ----------------------------------------------------------------------------- JSON readers
def test_run_results_roundtrip_and_errors_name_where(tmp_path):
    from workbench.compare.layer_compare import load_run_results, save_run_results

    y = np.arange(8, dtype=np.float32).reshape(2, 4)
    save_run_results(tmp_path / "r.json", {"onnxrt": [{"y": y}]})
    back = load_run_results(tmp_path / "r.json")
    assert list(back) == ["onnxrt"] and np.array_equal(back["onnxrt"][0]["y"], y)
    doc = fc.run_results_doc()
    doc["lst"][0][1][0]["outputs"]["y"]["values"]["array"] = 5
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    with pytest.raises(WorkbenchError, match=r"lst\[0\]\[0\]\.outputs\.y"):
        load_run_results(tmp_path / "bad.json")
    (tmp_path / "deep.json").write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(WorkbenchError, match="RecursionError"):
        load_run_results(tmp_path / "deep.json")


def test_deep_timing_json_is_bad_input(tmp_path):
    p = tmp_path / "l.json"
    p.write_text('{"Layers": ' + "[" * 100000 + "]" * 100000 + "}")
    rc, err = _cli(["timing", str(p)])
    assert rc == 2 and "nests too deeply" in err, err


def test_broken_engine_card_is_a_cache_miss(tmp_path):
    from workbench.engines.cache import load_cached

    engine, card = tmp_path / "e.engine", tmp_path / "e.json"
    engine.write_bytes(b"\0" * 4)
    good = fc.engine_meta_doc()
    card.write_text(json.dumps(good))
    assert load_cached(engine, card, "k" * 64) == good
    for broken in ({**good, "findings": [{"severity": None}]}, {**good, "build_seconds": "x"},
                   {k: v for k, v in good.items() if k != "backend"}, [good]):
        card.write_text(json.dumps(broken))
        assert load_cached(engine, card, "k" * 64) is None, broken


# ----------------------------------------------------------------------------- real processes
HOSTILE_FILES = {  # name: (writes the files and returns argv, expected exit code)
    "huge-dims": (lambda d: _hostile_dims(d), 0),  # inspected (dims reported), nothing allocated
    "npz-declares-4TB": (lambda d: _hostile_npz(d), 2),
    "deep-json": (lambda d: _deep_json(d), 2),
    "bit-flipped": (lambda d: _flipped(d), 2),
}


def _hostile_dims(d: Path) -> list:
    m = fc.base_model()
    for t in m.graph.initializer:
        del t.dims[:]
        t.dims.extend([2 ** 31, 2 ** 31, 2 ** 31])
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 2 ** 62
    (d / "m.onnx").write_bytes(m.SerializeToString())
    return ["inspect", str(d / "m.onnx"), "--json"]


def _hostile_npz(d: Path) -> list:
    (d / "m.onnx").write_bytes(fc.base_model().SerializeToString())
    hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000,), }".ljust(117) + "\n"
    blob = b"\x93NUMPY\x01\x00" + len(hdr).to_bytes(2, "little") + hdr.encode() + b"\0" * 4096
    (d / "c.npz").write_bytes(fc.npz_of({"x.npy": blob}))
    return ["profiles", str(d / "m.onnx"), "--calib", str(d / "c.npz")]


def _deep_json(d: Path) -> list:
    (d / "l.json").write_text('{"Layers": ' + "[" * 200000 + "]" * 200000 + "}")
    return ["timing", str(d / "l.json")]


def _flipped(d: Path) -> list:
    data = bytearray((fc.SAMPLES / "needs_fixing.onnx").read_bytes())
    i = data.index(b"Constant")
    data[i + 1] ^= 0x80
    (d / "m.onnx").write_bytes(bytes(data))
    return ["check", str(d / "m.onnx"), "--backend", "static"]


PEAK_RSS_MB = 400


def _vm_hwm_kb(pid: int) -> int:
    """Peak resident KiB of `pid` running workbench.cli (0 before its exec or after its exit)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"workbench.cli" not in f.read():
                return 0  # still the forked copy of this process, before exec
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


@pytest.mark.parametrize("name", sorted(HOSTILE_FILES))
def test_hostile_file_in_a_real_process_is_bounded(tmp_path, name):
    make, expected = HOSTILE_FILES[name]
    argv = make(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    t = time.monotonic()
    # The child's own peak: VmHWM of its address space, read while it runs. (ru_maxrss from
    # wait4 would not do: Linux carries the forking process's high-water mark across exec, so
    # a child of a big pytest process "peaks" at pytest's size.)
    hwm_kb = 0
    with open(tmp_path / "stderr.txt", "wb") as errf:
        proc = subprocess.Popen([sys.executable, "-m", "workbench.cli", *argv], env=env,
                                stdout=subprocess.DEVNULL, stderr=errf)
        while True:
            hwm_kb = max(hwm_kb, _vm_hwm_kb(proc.pid))
            pid, status, _ = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - t > 60:
                proc.kill()
                os.wait4(proc.pid, 0)
                pytest.fail(f"{name}: still running after 60 s")
            time.sleep(0.005)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert hwm_kb > 0, f"{name}: the child's memory was never read"
    peak_mb = hwm_kb / 1024
    text = (tmp_path / "stderr.txt").read_text()
    assert proc.returncode == expected, text
    assert len(text.strip().splitlines()) == (expected == 2) and "Traceback" not in text, text
    print(f"{name}: exit {proc.returncode}, peak RSS {peak_mb:.0f} MB")
    assert peak_mb < PEAK_RSS_MB, f"{name}: peak RSS {peak_mb:.0f} MB"


def test_profile_counts_and_times_out_of_range():
    from workbench.timing.profile import parse_profile

    p = parse_profile([{"name": "a", "averageMs": 0.5, "count": float("nan")},
                       {"name": "c", "averageMs": 0.5, "count": 10 ** 400},
                       {"name": "b", "averageMs": 0.25, "count": 50}])
    assert p.layers["count"].tolist()[2] == 50 and p.iterations == 50  # NaN, 10**400: unknown
    with pytest.raises(WorkbenchError, match=r"'averageMs' must be a non-negative number"):
        parse_profile([{"name": "a", "averageMs": 10 ** 400}])
    with pytest.raises(WorkbenchError, match=r"'count' must be a number"):
        parse_profile([{"count": float("inf")}, {"name": "a", "averageMs": 1.0}])
    with pytest.raises(WorkbenchError, match="latency_ms"):
        parse_profile({"format": "workbench-profile", "layers": [], "latency_ms": ["x"]})
