"""Profiles at the resolve stage: the default profile a model with dynamic inputs and no
--profile gets (the rules, or the profile advisor on the calibration data; a KV-cache decoder's
prefill/decode pair), the check of given profiles against the model's inputs, and the wording
of the build log's profile findings when the profile was the workbench's guess."""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

from workbench.engines.spec import BuildConfig
from workbench.core.errors import Finding, WorkbenchError
from workbench.core.findings import step
from workbench.core.model import Model


def validate_profiles(ref: Model, config: BuildConfig) -> None:
    """Profiles against the model's inputs (symbolic dims shared between inputs included);
    the worker checks them again against the parsed network."""
    from workbench.precision.profiles import validate_profiles as check_profiles

    model = ref  # an unreadable file is reported as such, not as a profile problem
    refuse_zero_size_axes(ref)  # (else: every profile refused as 'changes static dim 0')
    try:
        check_profiles(model, config.profiles)
    except WorkbenchError as e:
        raise WorkbenchError(e.message, file=str(ref.path) if ref.path else None,
                             field=f"profiles.{e.field}" if e.field else "profiles",
                             hint=e.hint) from None


def refuse_zero_size_axes(ref: Model) -> None:
    """An input axis TensorRT reads as a fixed size 0 (`inputs.zero_size_axes`) is refused
    before the build, naming the input, the axis and the recipe that names the axis (else
    TensorRT refuses every profile as 'changes static dim 0 (0 -> 1)')."""
    from workbench.core.inputs import shape_text, zero_size_axes

    bad = zero_size_axes(ref)
    if not bad:
        return
    name, axis, how = bad[0]
    more = f" (and {len(bad) - 1} more axis/axes)" if len(bad) > 1 else ""
    raise WorkbenchError(
        f"input '{name}' axis {axis} {how}{more}", file=str(ref.path) if ref.path else None,
        field=f"inputs.{name}", hint="give the axis a name or a size, then build the fixed model",
        next_steps=[step("fix", "{model}", recipe=f"set_input_shapes:shapes={name}/"
                         f"{shape_text(ref, name)}", o="{fixed}",
                         why="names the axis (edit the size to yours)")])


def profile_shape_findings(found: List[Finding], ref: Model, defaulted: bool
                            ) -> List[Finding]:
    """The build log's findings, with TensorRT's "Profile kMIN values are not self-consistent"
    (`profile-cannot-run`), where the build took the default profile (no --profile given),
    saying so: the profile is the workbench's guess. (Its next step is a record the CLI
    names the model in.)"""
    for f in found:
        if f.code != "profile-cannot-run":
            continue
        if defaulted:
            f.message = f.message.replace(
                "the profile's", "the default profile's (no --profile was given)", 1)
            f.extra["default_profile"] = True
    return found


def default_profiles(ref: Model, config: BuildConfig, strict: bool
                      ) -> Tuple[BuildConfig, List[Finding]]:
    """`config` with a default profile for the model's dynamic inputs (none: unchanged), and
    the finding that says so; with `strict`, one error naming every dynamic input."""
    from workbench.core.inputs import model_inputs
    from workbench.precision.profiles import (default_profile, default_profile_finding,
                                              missing_profile_error, shape_tensor_inputs)

    model = ref  # an unreadable file is reported as such, not as a profile problem
    shape_inputs = set(shape_tensor_inputs(model))
    dynamic = [s for s in model_inputs(model) if s.dynamic_axes or s.name in shape_inputs]
    if not dynamic:
        return config, []
    file = str(ref.path) if ref.path else None
    try:
        if strict:
            e = missing_profile_error(model, dynamic)
            raise WorkbenchError(e.message + " (--strict-profiles)", field=e.field, hint=e.hint)
        prof, rules = default_profile(model)
        if config.calibration:  # representative data says more than the rules
            prof, rules = advised(model, config.calibration, prof, rules)
    except WorkbenchError as e:
        raise WorkbenchError(e.message, file=file, field=f"profiles.{e.field}" if e.field
                             else "profiles", hint=e.hint) from None
    from workbench.precision.profiles import fixed_axis_findings

    from workbench.precision.profiles import serving_notice, serving_profiles

    notice = default_profile_finding(prof, rules)
    pair = serving_profiles(model, prof)
    if pair is not None:  # a KV-cache decoder: prefill and decode, each tuned for its calls
        return config.replace(profiles=[p.to_dict() for p in pair]), \
            [serving_notice(model, prof, pair, notice)] + \
            fixed_axis_findings(model, prof, "the default profile")
    return config.replace(profiles=[prof.to_dict()]), [notice] + \
        fixed_axis_findings(model, prof, "the default profile")


def advised(model: Model, calibration: str, prof: Any, rules: Dict[str, str]
             ) -> Tuple[Any, Dict[str, str]]:
    """The profile advisor's proposal from the calibration batches, else the rules' one."""
    from workbench.precision.calibration import load_calibration
    from workbench.precision.profiles import advise

    try:
        proposed, _ = advise(model, load_calibration(calibration, model))
    except WorkbenchError:
        return prof, rules
    if not proposed or set(proposed[0]) != set(prof):
        return prof, rules
    # the data's batch size is how it was saved, not how the engine will be fed: the batch
    # axis keeps the default's max when that is larger (sizes of other axes follow the data,
    # a count of items at axis 0 too: `workbench.core.inputs.leading_axes`)
    from workbench.core.inputs import leading_axes

    batch = leading_axes(model).batch
    out = type(proposed[0])()
    widened = False
    for name, (mn, opt, mx) in proposed[0].items():
        dmin, dmax = prof[name][0], prof[name][2]
        batch_dynamic = len(dmax) == len(mx) > 0 and dmin[0] != dmax[0] and name in batch
        if batch_dynamic and mx[0] < dmax[0]:
            mx = (dmax[0],) + tuple(mx[1:])
            widened = True
        out[name] = (tuple(mn), tuple(opt), tuple(mx))
    why = "the profile advisor on the calibration data"
    if widened:
        why += (" (batch max kept at the default "
                f"{max(v[2][0] for k, v in out.items() if k in batch)})")
    return out, {d: why for d in rules}
