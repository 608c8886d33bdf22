"""Console output a user can trust: each console behaviour (what is printed, to which stream,
how errors read), through the real CLI (subprocess or in-process `workbench.cli.main`), the
real TensorRT-RTX parser/builder and the real fixtures."""
from __future__ import annotations

import json
import re
import subprocess

import pytest

from conftest import H200, POLY, SAMPLES
from workbench.cli import main

RESNET = SAMPLES / "resnet_tiny.onnx"
NEEDS_FIXING = SAMPLES / "needs_fixing.onnx"
PROFILE = ["--profile", "input:1x3x32x32:4x3x32x32:32x3x32x32", "--target", "sm89",
           "--opt-level", "0"]
L16, P16 = H200 / "resnet50_fp16.layers.json", H200 / "resnet50_fp16.profile.json"
L32, P32 = H200 / "resnet50_fp32.layers.json", H200 / "resnet50_fp32.profile.json"
HEX_NAME = re.compile(r"[0-9a-f]{16,}")  # workspace / engine-cache file names


def _main(capsys, *argv):
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as e:  # argparse usage errors exit by themselves
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def _cli(*args):
    return subprocess.run(["workbench", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


# ------------------------------------------------------------------ check: parser partition
def test_partition_reads_importable_not_supported_false(capsys):
    rc, out, _ = _main(capsys, "check", NEEDS_FIXING, "--backend", "tensorrt-rtx")
    assert rc == 1
    assert "supported=False" not in out and "supported=" not in out
    assert "subgraph 0: 2 node(s) importable: /conv/Conv, /crop/Constant" in out
    assert "subgraph 3: 1 node(s) importable: /fc/Gemm" in out
    assert ("not importable (outside every subgraph): /crop/CenterCropPad, /flatten/Compress, "
            "/act/FastGelu") in out
    assert "verifies a subgraph only when the whole model parses" in out
    rc, out, _ = _main(capsys, "check", POLY / "capability.onnx", "--backend", "tensorrt-rtx",
                       "--json")
    part = json.loads(out)["partition"]
    assert [s["supported"] for s in part["subgraphs"]] == [False, False]  # the parser's flag
    assert "only when the whole model parses" in part["note"]


def _step_after(out: str, head: str) -> str:
    """The first `$ workbench ...` line printed under the line starting with `head`."""
    lines = [ln.strip() for ln in out.splitlines()]
    at = next(i for i, ln in enumerate(lines) if ln.startswith(head))
    return next(ln for ln in lines[at + 1:] if ln.startswith("$ workbench"))


# ------------------------------------------------------------------ fix --auto steps + advice
def test_fix_steps_say_what_is_left_and_check_advises_the_recipe_fix_uses(capsys, tmp_path):
    rc, out, _ = _main(capsys, "check", NEEDS_FIXING, "--backend", "tensorrt-rtx")
    step = _step_after(out, "/flatten/Compress:")
    fixed = str(NEEDS_FIXING).replace(".onnx", ".fixed.onnx")
    assert step == (f"$ workbench fix {NEEDS_FIXING} -o {fixed} --recipe fold_constants  "
                    "# replaces it by its value (all its inputs are constant)")
    rc, out, err = _main(capsys, "fix", NEEDS_FIXING, "-o", tmp_path / "fixed.onnx", "--auto")
    assert rc == 0, err
    lines = err.strip().splitlines()
    assert lines == [
        "decompose on /crop/CenterCropPad: kept, max abs diff 0; 2 node(s) still to fix: "
        "/flatten/Compress, /act/FastGelu",
        "fold_constants on /flatten/Compress: kept, max abs diff 0; 1 node(s) still to fix: "
        "/act/FastGelu",
        lines[2]]
    assert lines[2].startswith("decompose on /act/FastGelu: kept, max abs diff ")
    assert lines[2].endswith("; the model now parses with tensorrt-rtx")
    assert "supported: False" not in err
    # the recipe check advised for the Compress is the one fix --auto applied to it
    rc, out, _ = _main(capsys, "fix", NEEDS_FIXING, "-o", tmp_path / "f2.onnx", "--auto",
                       "--json")
    used = {s["proposal"]["node"]: s["proposal"]["recipe"] for s in json.loads(out)["applied"]}
    assert used["/flatten/Compress"] == "fold_constants"


# ------------------------------------------------------------------ timing --vs wording
def test_vs_says_slower_for_a_slowdown(capsys):
    rc, out, _ = _main(capsys, "timing", L32, "--profile", P32, "--vs", L16, "--vs-profile", P16)
    assert rc == 0
    line = next(ln for ln in out.splitlines() if " vs resnet50_fp16:" in ln)
    assert line.strip() == ("resnet50_fp32 vs resnet50_fp16: 2.9339 vs 0.8787 ms "
                            "(resnet50_fp32 is x3.34 slower)")
    assert "faster" not in out
    assert re.search(r"CaskConvolution +x4\.\d\d slower", out)
    rc, out, _ = _main(capsys, "timing", L16, "--profile", P16, "--vs", L32, "--vs-profile", P32,
                       "--json")
    c = json.loads(out)["comparison"]
    assert c["speed"] == "x3.34 faster" and c["speedup"] == pytest.approx(3.339, abs=1e-3)


def test_speed_words():
    from workbench.timing import speed_words

    assert speed_words(1 / 1.03) == "x1.03 slower"
    assert speed_words(0.97) == "x1.03 slower"
    assert speed_words(1.5) == "x1.50 faster"
    assert speed_words(1.001) == "same speed (x1.00)"
    assert speed_words(None) == "n/a" and speed_words(0.0) == "n/a"


# ------------------------------------------------------------------ build progress + exports
def test_build_progress_lines_name_the_files_and_are_whole(tmp_path):
    out = tmp_path / "r.engine"
    r = _cli("build", RESNET, "-o", out, *PROFILE, "--precision", "fp16", "--no-cache")
    assert r.returncode == 0, r.stderr
    lines = r.stderr.strip().splitlines()
    progress = [ln for ln in lines if re.match(r"^\s*(\d+\.\d%|\.\.\.) ", ln)]
    assert len(progress) >= 5 and progress == lines, lines
    for ln in progress:
        head, sep, msg = ln.partition(": ")
        assert sep and msg.strip(), ln  # every phase says something
        assert not HEX_NAME.search(ln) and ".partial" not in ln and "engines/" not in ln, ln
    text = "\n".join(progress)
    assert "hashing: reading resnet_tiny.onnx" in text
    assert "parsing: resnet_tiny.onnx (fp16 version)" in text
    assert "writing: r.engine" in text and "done: r.engine ready" in text
    assert "building: TensorRT builder started on resnet_tiny.onnx (fp16 version)" in text


def test_progress_printer_keeps_log_lines_whole_and_fits_a_terminal(capsys):
    from workbench.cli.cmd_build import _StderrProgress, fit_line

    phases = ("Building engine / Building engine from subgraph / Computing profile costs / "
              "Determining refit engines")
    p = _StderrProgress()  # stderr is not a terminal under pytest: a log file
    p({"event": "progress", "phase": "building", "fraction": 0.8, "message": phases})
    assert capsys.readouterr().err == f" 80.0% building: {phases}\n"
    fit = fit_line(" 80.0% building", phases, 60)
    assert len(fit) <= 60 and fit.endswith("Determining refit engines")
    assert fit == " 80.0% building: ... / Determining refit engines"
    assert fit_line(" 80.0% building", phases, None) == f" 80.0% building: {phases}"
    assert fit_line("x", "a" * 50, 20) == "x: " + "a" * 14 + "..."


def test_trtexec_line_and_cache_hit_name_this_runs_files(tmp_path):
    a, b = tmp_path / "a.engine", tmp_path / "b.engine"
    r1 = _cli("build", RESNET, "-o", a, *PROFILE)
    assert r1.returncode == 0, r1.stderr
    trtexec = next(ln for ln in r1.stdout.splitlines() if ln.startswith("trtexec:"))
    assert f"--exportLayerInfo={a}.layers.json" in trtexec
    assert not (tmp_path / "a.engine.layers.json").exists()  # not written by this build...
    note = next(ln for ln in r1.stdout.splitlines() if "--exportLayerInfo=" in ln
                and ln.strip().startswith("note:"))
    assert "written only when you run that line" in note  # ...and the output says so
    assert f"workbench timing-capture {a} --out DIR" in note
    # the same build into another file: a cache hit whose lines name b, never a
    r2 = _cli("build", RESNET, "-o", b, *PROFILE, "--json", "--export-script",
              tmp_path / "build.py")
    d = json.loads(r2.stdout)
    assert r2.returncode == 0 and d["cache_hit"] is True and b.is_file()
    for key in ("trtexec", "polygraphy"):
        assert str(b) in d["export"][key] and str(a) not in d["export"][key], key
    assert f"--saveEngine={b}" in d["export"]["trtexec"]
    script = (tmp_path / "build.py").read_text()
    assert str(b) in script and str(a) not in script
    r3 = _cli("build", RESNET, "-o", a, *PROFILE)  # and the text view of a hit
    assert "(cache hit)" in r3.stdout and f"--saveEngine={a} " in r3.stdout
    assert str(b) not in r3.stdout


# ------------------------------------------------------------------ timing: own profile alone
def test_timing_takes_the_workbenchs_own_profile_alone(capsys, tmp_path):
    rc, out, _ = _main(capsys, "timing", "--help")
    assert rc == 0 and "timing-capture's profile.json" in " ".join(out.split())
    layers = json.loads(P16.read_text())
    prof = tmp_path / "profile.json"  # what timing-capture writes (worker ops_profile record)
    prof.write_text(json.dumps({
        "format": "workbench-profile", "layers": layers, "iterations": 50,
        "latency": {"p50_ms": 0.9, "p90_ms": 1.0, "p99_ms": 1.1}, "latency_ms": [0.9, 0.9, 1.0],
        "throughput": [], "shapes": {"input": [8, 3, 224, 224]}, "profile_index": 0}))
    rc, out, err = _main(capsys, "timing", prof, "--json")
    assert rc == 0, err
    s = json.loads(out)
    assert s["schema"] == "from-profile" and s["layers"] == len(layers)
    assert s["total_ms"] == pytest.approx(sum(r["medianMs"] for r in layers))


# ------------------------------------------------------------------ -o into a missing folder
@pytest.mark.parametrize("argv,flag", [
    (["build", RESNET, "-o", "{d}/x.engine"], "-o"),
    (["fix", NEEDS_FIXING, "-o", "{d}/x.onnx", "--auto"], "-o"),
    (["precision", RESNET, "--to", "fp16", "-o", "{d}/x.onnx"], "-o"),
    (["graph", RESNET, "-o", "{d}/layout.json"], "-o"),
    (["timing", L16, "--html", "{d}/r.html"], "--html"),
    (["compare", RESNET, "--to", "fp16", "--allow-random", "--save-results", "{d}/r.json"],
     "--save-results"),
    (["build", RESNET, "-o", "x.engine", "--export-script", "{d}/build.py"], "--export-script"),
])
def test_output_into_a_missing_folder_exits_2_naming_it(capsys, tmp_path, argv, flag):
    missing = tmp_path / "no" / "such"
    rc, out, err = _main(capsys, *[str(a).format(d=missing) for a in argv])
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and f"field '{flag}'" in err
    assert f"the folder '{missing}' for {flag} does not exist" in err
    assert f"mkdir -p {missing}" in err and "--mkdir" in err
    assert not (tmp_path / "no").exists()


def test_mkdir_flag_creates_the_folder_and_a_folder_is_not_a_file(capsys, tmp_path):
    out = tmp_path / "new" / "dir" / "layout.json"
    rc, _, err = _main(capsys, "graph", RESNET, "-o", out, "--mkdir")
    assert rc == 0, err
    assert json.loads(out.read_text())["ids"]
    rc, _, err = _main(capsys, "precision", RESNET, "--to", "fp16", "-o", tmp_path)
    assert rc == 2 and "-o names a folder, not a file" in err


# ------------------------------------------------------------------ inspect text view
def test_inspect_text_shows_every_warning_the_json_has(capsys):
    for model in (POLY / "identity.onnx", POLY / "custom_op_node.onnx", SAMPLES / "bert_tiny.onnx"):
        rc, out, _ = _main(capsys, "inspect", model, "--json")
        warnings = json.loads(out)["warnings"]
        rc, text, _ = _main(capsys, "inspect", model)
        assert rc == 0 and warnings
        for w in warnings:
            assert w["message"] in text, (model.name, w["code"])
    assert "note       1 node(s) have no name; they get ids like 'Identity#0'" in \
        _main(capsys, "inspect", POLY / "identity.onnx")[1]


# ------------------------------------------------------------------ misspelt flags
def test_misspelt_flag_names_the_verb_and_the_flag_meant(capsys, tmp_path):
    rc, out, err = _main(capsys, "inspect", RESNET, "--jsn")
    assert rc == 2 and out == ""
    assert err == ("workbench inspect: error: unrecognized arguments: --jsn (did you mean "
                   "--json?) (see 'workbench inspect --help')\n")
    r = _cli("build", RESNET, "-o", tmp_path / "x.engine", "--precison", "fp16")
    assert r.returncode == 2 and r.stderr.startswith(
        "workbench build: error: unrecognized arguments: --precison fp16 (did you mean "
        "--precision?)"), r.stderr
    assert not (tmp_path / "x.engine").exists()
    rc, _, err = _main(capsys, "--bogus")
    assert rc == 2 and err.startswith("workbench: error: unrecognized arguments: --bogus")


def test_the_fix_command_check_prints_runs_as_printed(capsys, tmp_path):
    """A next step copied from `check` works: it carries the -o the CLI requires, writes
    `<name>.fixed.onnx` beside the model and leaves the model itself as it was."""
    import shlex
    import shutil

    model = tmp_path / "my model.onnx"  # a space: the command is shell-quoted
    shutil.copy(NEEDS_FIXING, model)
    before = model.read_bytes()
    rc, out, _ = _main(capsys, "check", model, "--backend", "tensorrt-rtx")
    cmd = _step_after(out, "/flatten/Compress:")[2:].split("  # ")[0]
    fixed = tmp_path / "my model.fixed.onnx"
    assert cmd == (f"workbench fix {shlex.quote(str(model))} -o {shlex.quote(str(fixed))} "
                   "--recipe fold_constants")
    argv = shlex.split(cmd)
    assert argv[:2] == ["workbench", "fix"]
    rc, out, err = _main(capsys, *argv[1:])
    assert rc in (0, 1), err  # 1: other nodes still to fix
    assert err.startswith("fold_constants: kept") and "equivalent" in err
    assert fixed.exists() and model.read_bytes() == before
    import onnx

    assert "Compress" not in {n.op_type for n in onnx.load(str(fixed)).graph.node}
    # the next check of the fixed file points its own fix one name further
    rc, out, _ = _main(capsys, "check", fixed, "--backend", "tensorrt-rtx")
    assert shlex.quote(str(tmp_path / "my model.fixed2.onnx")) in out
