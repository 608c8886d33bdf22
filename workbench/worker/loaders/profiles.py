"""Optimization profiles (Polygraphy's Profile): each {input: [min, opt, max]} checked
against the network's inputs and added to a builder config."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from workbench.worker.registry import OpError


def add_profiles(trt: Any, builder: Any, config: Any, network: Any,
                 profiles: Optional[List[Dict[str, List[List[int]]]]],
                 fill_dynamic: bool = False) -> List[str]:
    """The one profile setter: each {input: [min, opt, max]} checked against the network's
    inputs (names, ranks, static dims, min <= opt <= max; field "profiles[k].NAME" in errors)
    and added to `config`. Shape-tensor inputs take values. An input with dynamic dims and no
    profile is an error, or with `fill_dynamic` (check_build) built at 1 for each dynamic dim
    (shape inputs: values 0..1), with a note. Returns the notes."""
    inputs = {network.get_input(i).name: network.get_input(i) for i in range(network.num_inputs)}
    notes: List[str] = []
    profiles = list(profiles or [])
    if not profiles and fill_dynamic:
        profiles = [{}]
    for k, prof in enumerate(profiles):
        p = builder.create_optimization_profile()
        needed = bool(prof)
        for name, shapes in prof.items():
            _set_one(p, k, name, shapes, inputs)
        for name, t in inputs.items():
            if name in prof:
                continue
            dims = [int(d) for d in t.shape]
            if fill_dynamic and getattr(t, "is_shape_tensor", False):
                n = 1
                for d in dims:
                    n *= max(d, 1)
                lo, hi = [0] * n, [1] * n  # a range, so the value stays a runtime value
                p.set_shape_input(name, lo, hi, hi)
                needed = True
                notes.append("shape input '%s' given values %s..%s for the build (pass "
                             "profiles to choose values)" % (name, lo, hi))
            elif any(d < 0 for d in dims):
                if not fill_dynamic:
                    raise OpError("input '%s' has dynamic dims %s but profile %d gives it no "
                                  "min/opt/max" % (name, dims, k), code="bad-profile",
                                  details={"field": "profiles[%d]" % k},
                                  hint="add --profile %s:MIN:OPT:MAX" % name)
                fixed = tuple(1 if d < 0 else d for d in dims)
                p.set_shape(name, fixed, fixed, fixed)
                needed = True
                notes.append("dynamic input '%s' built at shape %s (pass profiles to choose "
                             "min/opt/max)" % (name, list(fixed)))
        if not needed:
            continue
        idx = config.add_optimization_profile(p)
        if idx is not None and int(idx) < 0:
            raise OpError("TensorRT rejected profile %d (see the log)" % k, code="bad-profile",
                          details={"field": "profiles[%d]" % k})
    if not profiles:
        dyn = [n for n, t in inputs.items() if any(d < 0 for d in t.shape)]
        if dyn:
            raise OpError("input(s) %s have dynamic dims and no profile was given"
                          % ", ".join("'%s' %s" % (n, list(inputs[n].shape)) for n in dyn),
                          code="bad-profile", details={"field": "profiles"},
                          hint="add --profile INPUT:MIN:OPT:MAX for each, e.g. "
                               "%s:1x...:8x...:32x..." % dyn[0])
    return notes


def _set_one(p: Any, k: int, name: str, shapes: Any, inputs: Dict[str, Any]) -> None:
    field = "profiles[%d].%s" % (k, name)
    if name not in inputs:
        raise OpError("profile %d names '%s', which is not a network input (inputs: %s)"
                      % (k, name, ", ".join(sorted(inputs))), code="bad-profile",
                      details={"field": field})
    if len(shapes) != 3:
        raise OpError("profile for '%s' needs [min, opt, max]" % name, code="bad-profile",
                      details={"field": field})
    mn, opt, mx = [tuple(int(d) for d in s) for s in shapes]
    if getattr(inputs[name], "is_shape_tensor", False):  # values, not dims
        p.set_shape_input(name, mn, opt, mx)
        return
    dims = tuple(inputs[name].shape)
    for label, s in (("min", mn), ("opt", opt), ("max", mx)):
        if len(s) != len(dims):
            raise OpError("profile %s shape %s for '%s' has rank %d; the input has rank %d %s"
                          % (label, list(s), name, len(s), len(dims), list(dims)),
                          code="bad-profile", details={"field": field})
        for axis, (want, got) in enumerate(zip(dims, s)):
            if want >= 0 and want != got:
                raise OpError("profile %s shape %s for '%s' changes static dim %d (%d -> %d)"
                              % (label, list(s), name, axis, want, got), code="bad-profile",
                              details={"field": field})
    for axis in range(len(dims)):
        if not (0 <= mn[axis] <= opt[axis] <= mx[axis]):  # (0: an empty tensor, which
            # TensorRT's profiles take, e.g. a KV cache's past length on the first step)
            raise OpError("profile for '%s' needs 0 <= min <= opt <= max on dim %d (got %d, %d, "
                          "%d)" % (name, axis, mn[axis], opt[axis], mx[axis]),
                          code="bad-profile", details={"field": field})
    p.set_shape(name, mn, opt, mx)
