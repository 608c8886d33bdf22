"""Which optimization profile compare / timing-capture / matrix run: an index, or a KV-cache
decoder's prefill / decode profile found by its shapes (precision.profiles.profile_index)."""
from __future__ import annotations

import json
import subprocess

import pytest

from kv_decoders import STYLES, make_decoder


@pytest.fixture(scope="module", params=STYLES[:2])
def serving(request, tmp_path_factory):
    from workbench.precision.profiles import default_profile, serving_profiles

    path = make_decoder(tmp_path_factory.mktemp(request.param), request.param, True)
    single, _ = default_profile(str(path))
    profs = serving_profiles(str(path), single)
    assert profs is not None and len(profs) == 2
    return path, [p.to_dict() for p in profs]


def test_names_find_the_serving_profiles(serving):
    from workbench.precision.profiles import profile_index

    _, profs = serving
    assert profile_index("prefill", profs) == 0
    assert profile_index("decode", profs) == 1
    assert profile_index("decode", profs[::-1]) == 0  # found by shape, not by position
    assert profile_index("1", profs) == 1 and profile_index(None, profs) == -1
    assert profile_index("auto", profs) == -1


def test_bad_choices_say_what_exists(serving):
    from workbench.core.errors import WorkbenchError
    from workbench.precision.profiles import profile_index

    _, profs = serving
    with pytest.raises(WorkbenchError, match="no profile 2") as e:
        profile_index(2, profs)
    assert "0..1" in e.value.hint
    with pytest.raises(WorkbenchError, match="no decode profile"):
        profile_index("decode", profs[:1])
    with pytest.raises(WorkbenchError, match="unknown profile"):
        profile_index("warm", profs)


def test_timing_capture_checks_the_profile_against_the_engine_card(serving, tmp_path):
    _, profs = serving
    engine = tmp_path / "dec.engine"
    engine.write_bytes(b"\0" * 64)
    (tmp_path / "dec.engine.card.json").write_text(json.dumps(
        {"kind": "trt-workbench engine card", "schema": 1, "profiles": profs}))
    r = subprocess.run(["workbench", "timing-capture", str(engine), "--profile-index", "3"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "no profile 3" in r.stderr, r.stderr


@pytest.mark.parametrize("verb", ["compare", "timing-capture", "matrix"])
def test_the_verbs_take_the_option(verb):
    r = subprocess.run(["workbench", verb, "--help"], capture_output=True, text=True,
                       timeout=60)
    assert "--profile-index N|prefill|decode" in r.stdout


def test_compare_engine_refuses_a_profile_the_build_lacks(serving, tmp_path):
    path, profs = serving
    flags = [f"{n}:" + ":".join("x".join(map(str, s)) for s in trio)
             for n, trio in profs[0].items()]
    args = ["workbench", "compare", str(path), "--engine-from-build", "--allow-random",
            "--profile-index", "decode"]
    for f in flags:
        args += ["--profile", f]
    r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "no decode profile" in r.stderr, r.stderr
