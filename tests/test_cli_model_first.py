"""The model argument comes first: every verb that takes a model file says that the file is
missing, a folder, unreadable, empty or not an ONNX model at all - one line naming the file,
exit 2 - before it reports a missing or invalid option, and a good model with a missing
option still gets the option's message. Runs the real CLI (the console script's `run()` in a
subprocess), plus a few in-process calls of `workbench.cli.main`."""
from __future__ import annotations

import contextlib
import io
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import SAMPLES

RESNET = SAMPLES / "resnet_tiny.onnx"
CLI = [sys.executable, "-c", "from workbench.cli import run; run()"]


def _cli(*argv, cwd=None):
    return subprocess.run([*CLI, *map(str, argv)], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def _main(*argv):
    """(exit code, stdout, stderr) of workbench.cli.main in this process."""
    from workbench.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main([str(a) for a in argv])
        except SystemExit as e:  # argparse usage errors
            rc = e.code
    return rc, out.getvalue(), err.getvalue()


def _one_line(r) -> str:
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


@pytest.fixture
def bad(tmp_path):
    """name -> (path, what the line must say) for the three ways a model path goes wrong."""
    text = tmp_path / "README.md"
    text.write_text("# my project\n\nSome notes, not a model.\n")
    folder = tmp_path / "models"
    folder.mkdir()
    return {"missing": (tmp_path / "nope.onnx", "file not found"),
            "text": (text, "not a readable ONNX model (it is a text file"),
            "folder": (folder, "is a folder, not an ONNX file")}


# the option complaints each command makes about a good model (old code: about the bad one too)
OPTION_FIRST = {
    "compare --to": (["--to", "fp16"], "--inputs"),
    "compare": ([], "nothing to compare with"),
    "build": ([], "-o/--output"),
}


@pytest.mark.parametrize("kind", ["missing", "text", "folder"])
@pytest.mark.parametrize("cmd", list(OPTION_FIRST))
def test_compare_and_build_report_a_bad_model_before_missing_options(cmd, kind, bad):
    path, says = bad[kind]
    extra, option_msg = OPTION_FIRST[cmd]
    line = _one_line(_cli(cmd.split()[0], path, *extra))
    assert line.startswith(f"workbench {cmd.split()[0]}: error: {path}: "), line
    assert says in line, line
    assert option_msg not in line, line


@pytest.mark.parametrize("cmd", list(OPTION_FIRST))
def test_a_good_model_with_a_missing_option_still_gets_the_option_message(cmd):
    extra, option_msg = OPTION_FIRST[cmd]
    line = _one_line(_cli(cmd.split()[0], RESNET, *extra))
    assert option_msg in line, line
    assert str(RESNET) not in line.split(": error: ", 1)[1].split(" ")[0], line


def test_the_new_users_two_examples(tmp_path):
    (tmp_path / "README.md").write_text("# trt-workbench\n")
    line = _one_line(_cli("compare", "README.md", "--to", "fp16", cwd=tmp_path))
    assert line == ("workbench compare: error: README.md: not a readable ONNX model (it is a "
                    "text file, not an ONNX protobuf) (pass the .onnx model file)")
    line = _one_line(_cli("build", "nope.onnx", cwd=tmp_path))
    assert line == "workbench build: error: nope.onnx: file not found (check the path)"


@pytest.mark.parametrize("argv", [
    ["build", "{bad}", "--precision", "fp17"],       # invalid choice
    ["build", "{bad}", "-o"],                        # option without its value
    ["build", "{bad}", "-o", "x.engine", "--opt-level", "high"],  # invalid type
    ["build", "{bad}", "--precison", "fp16"],        # misspelt option
    ["precision", "{bad}"],                          # --to and -o missing
    ["precision", "{bad}", "--to", "fp17", "-o", "o.onnx"],
    ["compare", "{bad}", "--to", "fp17"],
    ["compare", "{bad}", "--runner", "nope", "--to", "fp16"],
    ["matrix", "{bad}"],                              # -o missing
    ["fix", "{bad}"],                                 # -o missing (the verb's own check)
    ["fix", "{bad}", "-o", "out.onnx"],               # nothing to do
    ["profiles", "{bad}", "--json"],
    ["check", "{bad}", "--backend", "nope"],
])
def test_invalid_options_wait_for_the_model_check_too(argv, bad, tmp_path):
    path, says = bad["missing"]
    r = _cli(*[a.replace("{bad}", str(path)) for a in argv], cwd=tmp_path)
    line = _one_line(r)
    assert f": error: {path}: file not found" in line, line


@pytest.mark.parametrize("argv, says", [
    (["build", RESNET, "--precision", "fp17"], "invalid choice: 'fp17'"),
    (["build", RESNET, "-o"], "argument -o/--output: expected one argument"),
    (["precision", RESNET], "the following arguments are required: --to, -o/--output"),
    (["compare", RESNET, "--to", "fp17"], "invalid choice: 'fp17'"),
    (["matrix", RESNET], "the following arguments are required: -o/--output"),
    (["fix", RESNET], "-o OUT is required"),
])
def test_good_model_bad_options_are_reported_as_before(argv, says):
    line = _one_line(_cli(*argv))
    assert says in line, line


def test_an_unknown_option_value_is_not_taken_for_a_model():
    """`compare m.onnx --tto fp16`: fp16 lands where the candidate goes, but it belongs to the
    misspelt option: the misspelling is the error, not 'fp16: file not found'."""
    line = _one_line(_cli("compare", RESNET, "--tto", "fp16"))
    assert "unrecognized arguments: --tto fp16 (did you mean --to?)" in line, line


def test_every_model_verb_names_a_missing_model(tmp_path):
    miss = tmp_path / "gone.onnx"
    eng = tmp_path / "gone.engine"
    cases = [
        (["inspect", miss], "file not found"),
        (["graph", miss, "--all"], "file not found"),
        (["check", miss, "--backend", "static"], "file not found"),
        (["profiles", miss], "file not found"),
        (["precision", miss, "--to", "fp16", "-o", tmp_path / "o.onnx"], "file not found"),
        (["matrix", RESNET, miss, "-o", tmp_path / "m"], "file not found"),
        (["fix", miss, "-o", tmp_path / "f.onnx", "--auto"], "file not found"),
        (["compare", RESNET, miss, "--allow-random"], "file not found"),
        (["compare", RESNET, eng, "--allow-random"], "engine file not found"),
        (["compare", RESNET, eng], "engine file not found"),  # before 'no inputs'
        (["triton", eng], "engine file not found"),  # before '-o is required'
        (["timing-capture", miss, "--out", tmp_path / "nofolder" / "x"], "file not found"),
        (["timing-capture", eng], "engine file not found"),
        (["timing", tmp_path / "layers.json", "--onnx", miss], "file not found"),
    ]
    for argv, says in cases:
        line = _one_line(_cli(*argv))
        name = eng if "engine" in says else miss
        assert f"{name}: {says}" in line, (argv, line)
    assert not (tmp_path / "m").exists() and not (tmp_path / "o.onnx").exists()


def test_a_folder_or_empty_engine_and_an_empty_model(tmp_path):
    (tmp_path / "e.plan").mkdir()
    line = _one_line(_cli("triton", tmp_path / "e.plan", "-o", tmp_path / "repo"))
    assert f"{tmp_path / 'e.plan'}: is a folder, not an engine file" in line, line
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    line = _one_line(_cli("build", empty))
    assert f"{empty}: file is empty (0 bytes)" in line, line


def test_binary_that_is_not_onnx(tmp_path):
    png = tmp_path / "picture.onnx"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    line = _one_line(_cli("build", png))
    assert f"{png}: not a readable ONNX model" in line and "-o/--output" not in line, line
    calib = tmp_path / "inputs.onnx"  # a protobuf of another kind: no graph, no IR version
    calib.write_bytes(b"\x12\x05hello\x1a\x02hi")
    line = _one_line(_cli("compare", calib, "--to", "fp16"))
    assert f"{calib}: not an ONNX model (no graph or IR version)" in line, line


def test_json_failure_names_the_file(bad):
    path, _ = bad["text"]
    r = _cli("build", path, "--json")
    line = _one_line(r)
    doc = json.loads(r.stdout)
    assert doc["ok"] is False and doc["exit_code"] == 2 and doc["verb"] == "build"
    assert doc["file"] == str(path) and doc["message"] == line
    assert doc["hint"] == "pass the .onnx model file"


def test_an_unreadable_model_is_named_before_the_options(tmp_path, monkeypatch):
    import workbench.cli.common as common

    model = tmp_path / "secret.onnx"
    model.write_bytes(RESNET.read_bytes())

    def no_access(path, *a, **kw):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(common, "open", no_access, raising=False)
    rc, out, err = _main("precision", model)
    assert rc == 2 and out == "", err
    assert err == (f"workbench precision: error: {model}: cannot be read (permission denied) "
                   "(check the permissions of the file)\n")


def test_a_broken_onnx_model_is_left_to_the_load(tmp_path):
    """A truncated ONNX model is a model (a broken one): its options are checked first, and
    the verb's own load names what is wrong (the check does not read it twice)."""
    data = RESNET.read_bytes()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(data[: len(data) * 2 // 3])
    line = _one_line(_cli("build", cut))
    assert "-o/--output" in line, line
    line = _one_line(_cli("inspect", cut))
    assert f"{cut}: not a readable ONNX model (DecodeError" in line, line


def test_list_flags_need_no_model(tmp_path):
    rc, out, err = _main("fix", tmp_path / "absent.onnx", "--list-recipes")
    assert rc == 0 and "fold_constants" in out, err
    rc, out, err = _main("check", tmp_path / "absent.onnx", "--list-rules")
    assert rc == 0 and out, err


def test_text_formats_are_left_to_onnx_text_parsers(tmp_path):
    from workbench.cli.common import ONNX_TEXT_SUFFIXES, check_model_file
    from workbench.core.model import _TEXT_FORMATS

    assert ONNX_TEXT_SUFFIXES == _TEXT_FORMATS  # the same suffixes open_model parses as text
    p = tmp_path / "m.onnxtxt"
    p.write_text("<ir_version: 8, opset_import: [\"\" : 17]>\nagraph (float[1] x) => "
                 "(float[1] y) { y = Relu(x) }\n")
    check_model_file(str(p))  # text, but for onnx's text parser: not refused here


def test_the_check_never_refuses_what_open_model_reads(tmp_path):
    """Differential: mutated sample models, cut files and junk; whatever open_model accepts,
    check_model_file accepts too (it only refuses what is no ONNX model at all)."""
    from workbench.cli.common import check_model_file
    from workbench.core.errors import WorkbenchError
    from workbench.core.model import open_model

    rng = random.Random(7)
    seeds = [p.read_bytes() for p in sorted(SAMPLES.glob("*.onnx"))]
    p = tmp_path / "m.onnx"
    refused = 0
    for _ in range(400):
        d = bytearray(rng.choice(seeds))
        k = rng.random()
        if k < 0.4:
            for _ in range(rng.randint(1, 6)):
                d[rng.randrange(len(d))] = rng.randrange(256)
        elif k < 0.7:
            d = d[: rng.randrange(1, len(d) + 1)]
        else:
            d = bytearray(rng.randrange(256) for _ in range(rng.randint(1, 200)))
        p.write_bytes(bytes(d))
        try:
            check_model_file(str(p))
        except WorkbenchError as e:
            refused += 1
            with pytest.raises(WorkbenchError):
                open_model(p)
            assert str(p) in e.one_line()
    assert refused > 20  # the junk is refused


def test_the_check_is_cheap_on_a_multi_gb_model(tmp_path):
    """One stat, one open, 64 KiB and a seek past the graph: a 2 GB (sparse) model is
    checked in well under the time a load would take."""
    from workbench.cli.common import check_model_file

    size, length = 2_000_000_000, bytearray()
    v = size
    while True:  # the graph field's length as a protobuf varint
        length.append((v & 0x7F) | (0x80 if v > 0x7F else 0))
        v >>= 7
        if not v:
            break
    head = b"\x08\x08\x12\x04test\x3a" + bytes(length)  # ir_version, producer, graph
    p = tmp_path / "big.onnx"
    with open(p, "wb") as f:
        f.write(head)
        f.truncate(len(head) + size)
    t = time.perf_counter()
    check_model_file(str(p))
    assert time.perf_counter() - t < 0.05
    os.unlink(p)


def test_compare_takes_calib_as_precision_and_build_name_the_data():
    """`compare MODEL --to int8 --calib DATA` was refused ('did you mean --atol?')."""
    import subprocess
    import sys

    from conftest import REPO, SAMPLES

    r = subprocess.run([sys.executable, "-m", "workbench.cli", "compare",
                        str(SAMPLES / "resnet_tiny.onnx"), str(SAMPLES / "resnet_tiny.onnx"),
                        "--calib", str(SAMPLES / "calib" / "resnet_tiny.npz")],
                       capture_output=True, text=True, cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "outputs: logits max abs 0 rel 0" in r.stdout


def test_inspect_ends_with_the_commands_to_run_next():
    """inspect printed a summary and nothing to do next: it names the parser check and, for a
    dynamic model, the profile a build takes by default as a ready `profiles` command (which
    then runs)."""
    import shlex
    import subprocess
    from pathlib import Path

    model = Path(__file__).resolve().parents[1] / "sample_models" / "resnet_tiny.onnx"
    out = subprocess.run(["workbench", "inspect", str(model)], capture_output=True, text=True,
                         timeout=120).stdout
    nxt = out[out.index("\nnext "):].splitlines()
    assert f"$ workbench check {model}  # " in nxt[1]
    cmd = nxt[2].strip().split("  # ")[0].lstrip("$ ")
    assert cmd.startswith("workbench profiles") and \
        "--profile input:1x3x32x32:1x3x32x32:16x3x32x32" in cmd
    r = subprocess.run(shlex.split(cmd), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "valid" in r.stdout, r.stdout + r.stderr
