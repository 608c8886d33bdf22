"""Every next step any verb prints runs when pasted: the corpus (sample models, odd models,
onnx's backend models) through inspect, check, fix, build, precision, profiles and compare,
text and --json; each step collected is pasted into a shell in an empty folder beside a copy
of the model and must parse and run without a usage error (tests/next_step_cases.py says
precisely what fails). Plus the record and its renderings on known values."""
from __future__ import annotations

import json
import shlex
import shutil

import pytest

from tests import next_step_cases as C
from workbench.core.findings import Finding, NextStep, step

pytest.importorskip("tensorrt_rtx_bindings")


# ------------------------------------------------------------------ the record, rendered
def test_a_step_renders_as_a_quoted_command_with_the_users_paths():
    from workbench.core.nextstep import command, inline, record, short

    s = step("fix", "{model}", o="{fixed}", recipe="decompose:node=/a b", why="rewrites it")
    assert command(s, model="my model.onnx") == (
        "workbench fix 'my model.onnx' -o 'my model.fixed.onnx' --recipe 'decompose:node=/a b'")
    # unfilled placeholders print as the words a user fills in
    assert command(step("precision", "{model}", calib="{data}", to="int8")) == \
        "workbench precision MODEL --calib DATA --to int8"
    assert short(s) == "fix --recipe decompose:node=/a b: rewrites it"  # no paths
    r = record(s, model="m.onnx")
    assert r == {"verb": "fix", "args": ["m.onnx"],
                 "flags": [["-o", "m.fixed.onnx"], ["--recipe", "decompose:node=/a b"]],
                 "why": "rewrites it",
                 "command": "workbench fix m.onnx -o m.fixed.onnx --recipe 'decompose:node=/a b'"}
    assert NextStep.from_dict(r) == s.bound(model="m.onnx")
    assert inline([s], model="m.onnx").startswith("next: `workbench fix m.onnx -o ")
    assert step("fix", "{model}", split=True, build=False).flags == (("--split", None),)


def test_a_finding_carries_its_steps_through_json():
    f = Finding("error", "x", "m", next_steps=[step("check", "{model}", why="w")])
    back = Finding.from_dict(json.loads(json.dumps(f.to_dict())))
    assert back == f and back.next_steps[0].verb == "check"
    assert str(f) == "ERROR x: m -> w"  # the core's own line names no command


# ------------------------------------------------------------------ every printed step runs
@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The corpus's models in one folder as NAME.onnx (the verbs run there, in this process),
    with each model's calibration data."""
    src = tmp_path_factory.mktemp("corpus-src")
    folder = tmp_path_factory.mktemp("corpus")
    data = {}
    for name, (path, calib) in C.corpus(src).items():
        shutil.copy2(path, folder / f"{name}.onnx")
        data[name] = calib
    return folder, data


@pytest.fixture(scope="module")
def collected(corpus):
    folder, data = corpus
    return C.collect(folder, list(data))


def test_the_corpus_prints_steps_of_every_kind(corpus, collected):
    folder, data = corpus
    assert len(data) >= 12, sorted(data)  # samples, odd models and backend models
    verbs = {shlex.split(s)[1] for s, _, _ in collected}
    # (a model onnxruntime cannot load is answered by the step its refusal calls for: fix,
    # check or check --backend static, so `inspect` need not be among them)
    assert {"fix", "check", "profiles"} <= verbs, verbs
    origins = {o.split(" ")[0] for _, _, o in collected}
    assert {"build", "check", "inspect", "compare"} <= origins, origins
    # the step a build prints for a node `fix --auto` rewrites carries the -o it requires
    assert ("workbench fix needs_fixing.onnx -o needs_fixing.fixed.onnx --auto",
            "needs_fixing") in {(s, m) for s, m, _ in collected}


def test_every_printed_next_step_runs_when_pasted(corpus, collected, tmp_path):
    folder, data = corpus
    failed = []
    for s, name, origin in collected:
        r = C.paste(s, folder / f"{name}.onnx", data.get(name), tmp_path, origin)
        problem = r.problem()
        if problem:
            failed.append(f"{name} {origin}: {s}\n    {problem}")
    assert not failed, f"{len(failed)} of {len(collected)} steps do not run:\n" + \
        "\n".join(failed)


def test_a_step_that_does_not_run_is_caught(corpus, tmp_path):
    """The checks above can fail: the steps the CLI once printed are refused."""
    folder, _ = corpus
    model = folder / "needs_fixing.onnx"
    no_out = C.paste("workbench fix needs_fixing.onnx --auto", model, None, tmp_path, "t")
    assert no_out.rc == 2 and "is required" in no_out.problem()
    typo = C.paste("workbench build needs_fixing.onnx", model, None, tmp_path, "t")
    assert typo.problem().startswith("usage error")
    unfilled = C.paste("workbench fix MODEL --recipe rename_duplicates -o OUT", model, None,
                       tmp_path, "t")
    assert unfilled.problem().startswith("an unfilled placeholder")
    quote = C.paste("workbench check 'needs_fixing.onnx", model, None, tmp_path, "t")
    assert "does not split" in quote.problem()


# ------------------------------------------------------------------ the panels' short lines
def test_the_inspectors_next_steps_are_short_lines_with_the_command_in_a_tooltip(tmp_path):
    """The Inspector showed 10-15 wrapped lines of absolute-path commands per node: now one
    short line per step (no path), the command that runs when pasted in its tooltip."""
    import html
    import re

    from tests.conftest import SAMPLES, shown_text
    from widgets import Inspector

    model = tmp_path / "nf.onnx"
    shutil.copy(SAMPLES / "needs_fixing.onnx", model)
    ins = Inspector(model, backend="tensorrt-rtx")
    ins.run_check(wait=True)
    assert ins.check_error is None, ins.check_error
    value = ins.support_html.value
    text = shown_text(value)
    tips = [html.unescape(t) for t in re.findall(r"title='([^']*)'", value)]
    assert f"workbench fix {model} -o {tmp_path / 'nf.fixed.onnx'} --recipe " \
        "decompose:node=/crop/CenterCropPad" in tips
    assert "fix --recipe decompose:node=/crop/CenterCropPad: replaces it with standard ops" in text
    assert str(tmp_path) not in text  # no path in what the table shows
    for tip in tips:  # every tooltip is a command that splits into shell words
        assert shlex.split(tip)[0] == "workbench"
