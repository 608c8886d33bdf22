"""`workbench profiles MODEL [--profile ...] [--calib PATH]`: validate shape profiles and let the
advisor propose one from sample data."""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional, Tuple


NAME = "profiles"
HELP = ("validate min/opt/max shape profiles for the model's dynamic inputs, propose one from "
        "sample data (--calib), or, with neither, show and run the one a build defaults to")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from workbench.cli.common import add_profile_argument

    p.add_argument("model", help="the ONNX model")
    add_profile_argument(p, " (repeat per input; a leading '+' starts another profile)")
    p.add_argument("--calib", metavar="PATH",
                   help="sample data (.npz/.npy or a folder): the advisor proposes a profile "
                        "and checks the given ones against it")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def model_paths(args: "argparse.Namespace") -> List[Tuple[Optional[str], str]]:
    """The model file main() checks before the options (workbench/cli/__init__.py)."""
    return [(args.model, "onnx")]


def run(args: argparse.Namespace) -> int:
    from workbench.precision.calibration import load_calibration, model_inputs
    from workbench.cli.common import print_json
    from workbench.core.model import open_model
    from workbench.core.findings import Finding
    from workbench.precision.profiles import (advise, default_profile, fixed_axis_findings,
                                             parse_profiles, run_at_profiles, serving_finding,
                                             validate_profiles, wide_findings)

    model = open_model(args.model)
    given = validate_profiles(model, parse_profiles(args.profile)) if args.profile else []
    findings = wide_findings(given)
    ran = 0
    if given:  # the shapes run, not only declared: a size fixed at export shows here
        cannot, ran = run_at_profiles(model, given)
        findings += cannot
    proposed, defaulted = [], []
    if args.calib:
        samples = load_calibration(args.calib, model)
        proposed, more = advise(model, samples, profiles=given or None)
        findings += [f for f in more if f.code != "wide-profile" or not given]
        if proposed and not given:  # the proposal runs too: never hand over shapes that fail
            cannot, ran = run_at_profiles(model, proposed)
            for f in cannot:
                f.message = f.message.replace("profile #", "proposed profile #", 1)
            findings += cannot
    elif not given:
        dyn = [s for s in model_inputs(model) if s.dynamic_axes]
        if dyn:  # no profile, no data: the one a build defaults to, run as a given one
            prof, rules = default_profile(model)
            defaulted = [prof] if len(prof) else []
            findings.append(Finding(
                "info", "default-profile",
                "no --profile or --calib: this is the profile `workbench build` takes by "
                "default (" + "; ".join(f"{d} = {r}" for d, r in rules.items()) + ")",
                source="profiles", hint="check your own with --profile INPUT:MIN:OPT:MAX, or "
                "propose one from your data with --calib DATA"))
            if defaulted:
                cannot, ran = run_at_profiles(model, defaulted)
                findings += cannot
                findings += fixed_axis_findings(model, prof, "the default profile")
    base = given or proposed or defaulted
    if len(base) == 1 and not any(f.severity == "error" for f in findings):
        what = ("your profile" if given else "the proposed profile" if proposed
                else "the default profile")
        serve = serving_finding(model, base[0], what)
        if serve is not None:
            findings.append(serve)
    bad = {f.extra["profile"] for f in findings if f.code == "profile-cannot-run"}
    doc = {"model": str(args.model), "valid": not bad, "runs_on_onnxruntime": ran,
           "profiles": [p.to_dict() for p in given],
           "proposed": [p.to_dict() for p in proposed],
           "proposed_args": [p.arg_strings() for p in proposed],
           "default": [p.to_dict() for p in defaulted],
           "trtexec": [p.trtexec() for p in (given or proposed or defaulted)],
           "findings": [f.to_dict() for f in findings]}
    if args.json:
        from workbench.core.nextstep import json_steps

        print_json(json_steps(doc, model=args.model, data=getattr(args, "calib", None)))
    else:
        w = sys.stdout.write
        for i, p in enumerate(given, 1):
            verdict = ("cannot run (below)" if i in bad else
                       "valid (the model ran on onnxruntime at its min, opt and max)" if ran
                       else "valid")
            w(f"profile #{i} {verdict}: {' '.join(p.arg_strings())}\n")
        for i, p in enumerate(proposed, 1):
            said = ("proposed, but the model cannot run at it (below)" if not given and i in bad
                    else "proposed (the model ran on onnxruntime at its min, opt and max)"
                    if not given and ran else "proposed")
            w(f"{said}: " + " ".join(f"--profile {a}" for a in p.arg_strings()) + "\n")
        for p in defaulted:
            said = ("default, but the model cannot run at it (below)" if 1 in bad else
                    "default (the model ran on onnxruntime at its min, opt and max)" if ran
                    else "default")
            w(f"{said}: {' '.join(p.arg_strings())}\n")
        from workbench.core.nextstep import finding_text

        seen: set = set()
        for f in findings:
            w(finding_text(f, "  ", seen, model=args.model) + "\n")
    return 1 if any(f.severity == "error" for f in findings) else 0
