"""Optimization profiles (min/opt/max per dynamic input): parse, validate, advise.

A `Profile` maps input name -> (min, opt, max), each a tuple of ints: shapes for ordinary
inputs, *values* for shape-tensor inputs (int inputs TensorRT reads as shapes, e.g. the target
shape of a Reshape). `validate_profiles` checks everything TensorRT would reject, with errors
naming the profile, input and axis. `advise` proposes a profile from sample data (e.g. the real
sequence lengths of calibration batches) and warns when ranges are wide enough to cost speed.
`default_profile` fills in what a build without profiles uses (batch 1..16, token axes
1..128..positions, other axes a fixed sane size), reported with the exact --profile flag.
"""
from __future__ import annotations

import math
import os
import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from workbench.core.errors import Finding, WorkbenchError
from workbench.core.model import ModelLike, as_model

Shape = Tuple[int, ...]
WIDE_RATIO = 64  # max/min beyond this on one axis: TensorRT tunes for opt, allocates for max
SHAPE_INPUT_SLOTS = {("Reshape", 1), ("Expand", 1), ("ConstantOfShape", 0), ("Tile", 1),
                     ("Slice", 1), ("Slice", 2), ("Resize", 3), ("Range", 0), ("Range", 1),
                     ("OneHot", 1), ("TopK", 1)}


class Profile(dict):
    """{input name: (min, opt, max)}; JSON-friendly (`to_dict`/`from_dict`)."""

    def to_dict(self) -> Dict[str, List[List[int]]]:
        return {k: [list(v[0]), list(v[1]), list(v[2])] for k, v in self.items()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Profile":
        p = cls()
        for k, v in d.items():
            if isinstance(v, Mapping):
                v = (v["min"], v["opt"], v["max"])
            if len(v) != 3:
                raise WorkbenchError(f"profile entry for '{k}' needs [min, opt, max]", field=k)
            p[k] = tuple(tuple(int(x) for x in s) for s in v)  # type: ignore[assignment]
        return p

    def arg_strings(self) -> List[str]:
        """The entries as `input:MIN:OPT:MAX` strings (the CLI's --profile syntax)."""
        return [f"{k}:" + ":".join("x".join(str(x) for x in s) for s in v)
                for k, v in self.items()]

    def trtexec(self) -> Dict[str, str]:
        """--minShapes / --optShapes / --maxShapes values."""
        out = {}
        for i, flag in enumerate(("minShapes", "optShapes", "maxShapes")):
            out[flag] = ",".join(f"{k}:" + "x".join(str(x) for x in v[i]) for k, v in self.items())
        return out


_SHAPE = re.compile(r"^\d+(x\d+)*$")


def _parse_shape(text: str, arg: str) -> Shape:
    text = text.strip().lower()
    if text in ("", "scalar"):
        return ()
    if not _SHAPE.match(text):
        raise WorkbenchError(f"'{text}' is not a shape like 1x3x224x224", field=arg,
                             hint="write INPUT:MIN:OPT:MAX, e.g. input_ids:1x16:4x64:8x128")
    return tuple(int(x) for x in text.split("x"))


def parse_profile_arg(arg: str, into: Optional[Profile] = None) -> Profile:
    """`input:MIN:OPT:MAX` (or `input:SHAPE` for a fixed shape), several comma-separated.

    Input names may contain ':' (TF-style `input:0`): shapes are taken from the right."""
    prof = into if into is not None else Profile()
    for part in [p for p in arg.split(",") if p.strip()]:
        segs = part.strip().split(":")
        shapes: List[str] = []
        while len(segs) > 1 and len(shapes) < 3 and _SHAPE.match(segs[-1].strip().lower()):
            shapes.insert(0, segs.pop())
        name = ":".join(segs).strip()
        tf_suffix_ok = ":" not in name or name.rsplit(":", 1)[1].isdigit()  # TF-style 'x:0'
        if not name or len(shapes) not in (1, 3) or not tf_suffix_ok:
            raise WorkbenchError(f"cannot read profile '{part}'", field="--profile",
                                 hint="write INPUT:MIN:OPT:MAX, e.g. input_ids:1x16:4x64:8x128, "
                                 "or INPUT:SHAPE for a fixed shape")
        parsed = [_parse_shape(s, part) for s in shapes]
        if len(parsed) == 1:
            parsed = parsed * 3
        if name in prof:
            raise WorkbenchError(f"input '{name}' given twice in one profile", field="--profile")
        prof[name] = tuple(parsed)  # type: ignore[assignment]
    return prof


def parse_profiles(args: Iterable[str]) -> List[Profile]:
    """Several --profile arguments: each adds inputs to the current profile; an argument
    starting with '+' starts a new profile (e.g. for small and large batches)."""
    profiles: List[Profile] = []
    for a in args:
        if a.startswith("+") or not profiles:
            profiles.append(Profile())
        parse_profile_arg(a.lstrip("+"), profiles[-1])
    return profiles


# --------------------------------------------------------------------------- validation
def shape_tensor_inputs(model: ModelLike) -> List[str]:
    """Int inputs of rank <= 1 that feed a shape slot (Reshape shape, Expand shape, ...)."""
    from workbench.core.inputs import model_inputs

    proto = as_model(model).proto
    specs = {s.name: s for s in model_inputs(proto)}
    out = []
    for node in proto.graph.node:
        for k, name in enumerate(node.input):
            s = specs.get(name)
            if s and (node.op_type, k) in SHAPE_INPUT_SLOTS and s.elem_type in (6, 7) and \
                    len(s.dims) <= 1 and name not in out:
                out.append(name)
    return out


def validate_profiles(model: ModelLike, profiles: Any) -> List[Profile]:
    """Check profiles against the model; return them as a list of Profile.

    Errors (WorkbenchError naming profile #, input and axis): unknown input, wrong rank,
    min <= opt <= max broken, static dims not respected, dynamic input not covered, inputs
    sharing a symbolic dim given different ranges, shape-tensor values of the wrong length."""
    from workbench.core.inputs import model_inputs

    if isinstance(profiles, Mapping):
        profiles = [profiles]
    profs = [p if isinstance(p, Profile) else Profile.from_dict(p) for p in profiles]
    specs = model_inputs(model)
    by_name = {s.name: s for s in specs}
    shape_inputs = set(shape_tensor_inputs(model))
    dynamic = [s for s in specs if s.dynamic_axes or s.name in shape_inputs]
    if not profs:
        if dynamic:
            raise missing_profile_error(model, dynamic)
        return []
    for idx, prof in enumerate(profs, 1):
        where = f"profile #{idx}"
        for name, rng in prof.items():
            if name not in by_name:
                raise WorkbenchError(f"{where}: unknown input '{name}'", field=name,
                                     hint="the model's inputs are: " + ", ".join(by_name))
            if len(rng) != 3:
                raise WorkbenchError(f"{where}: input '{name}' needs (min, opt, max)", field=name)
            spec = by_name[name]
            mn, op, mx = (tuple(int(x) for x in r) for r in rng)
            prof[name] = (mn, op, mx)
            if name in shape_inputs:
                length = spec.dims[0] if spec.dims else 1
                for label, vals in (("min", mn), ("opt", op), ("max", mx)):
                    if isinstance(length, int) and len(vals) != length:
                        raise WorkbenchError(
                            f"{where}: shape-tensor input '{name}' holds {length} value(s), "
                            f"its {label} gives {len(vals)}", field=name,
                            hint="for shape tensors the profile gives the VALUES min/opt/max")
                _check_order(where, name, mn, op, mx, "value")
                continue
            for label, shp in (("min", mn), ("opt", op), ("max", mx)):
                if len(shp) != len(spec.dims):
                    raise WorkbenchError(
                        f"{where}: input '{name}' has rank {len(spec.dims)} "
                        f"{spec.shape_str()}, its {label} shape {list(shp)} has rank {len(shp)}",
                        field=name, hint="e.g. " + _suggest(model, [spec]))
            _check_order(where, name, mn, op, mx, "axis")
            for axis, d in enumerate(spec.dims):
                if isinstance(d, int) and not (mn[axis] == op[axis] == mx[axis] == d):
                    raise WorkbenchError(
                        f"{where}: input '{name}' axis {axis} is fixed to {d} by the model, the "
                        f"profile gives {mn[axis]}..{op[axis]}..{mx[axis]}", field=name,
                        hint=f"use {d} on axis {axis}")
        missing = [s for s in dynamic if s.name not in prof]
        if missing:
            listed = ", ".join(f"'{s.name}' {s.shape_str()}" for s in missing)
            one = len(missing) == 1
            raise WorkbenchError(f"{where}: input{'' if one else 's'} {listed} "
                                 f"{'has' if one else 'have'} dynamic dims but the profile "
                                 f"gives no shape for {'it' if one else 'them'}",
                                 field=missing[0].name,
                                 hint="add " + _suggest(model, missing, prof))
        _check_shared(where, prof, specs, shape_inputs)
    return profs


def _check_order(where: str, name: str, mn: Shape, op: Shape, mx: Shape, what: str) -> None:
    for i, (a, b, c) in enumerate(zip(mn, op, mx)):
        label = f"{what} {i}"
        if a < 0:  # (0 is an empty tensor, which TensorRT's profiles take: a KV cache's
            # past length is 0 on the first decode step)
            raise WorkbenchError(f"{where}: input '{name}' {label} min {a} must be >= 0",
                                 field=name)
        if not a <= b <= c:
            raise WorkbenchError(f"{where}: input '{name}' {label} needs min <= opt <= max, got "
                                 f"{a} <= {b} <= {c}", field=name,
                                 hint="reorder the shapes as MIN:OPT:MAX")


def _check_shared(where: str, prof: Profile, specs: Sequence[Any], shape_inputs: set) -> None:
    seen: Dict[str, Tuple[str, int, Tuple[int, int, int]]] = {}
    for s in specs:
        if s.name not in prof or s.name in shape_inputs:
            continue
        mn, op, mx = prof[s.name]
        for axis, d in enumerate(s.dims):
            if not isinstance(d, str):
                continue
            rng = (mn[axis], op[axis], mx[axis])
            if d in seen and seen[d][2] != rng:
                other, oax, orng = seen[d]
                raise WorkbenchError(
                    f"{where}: dimension '{d}' is {'..'.join(map(str, rng))} on input "
                    f"'{s.name}' axis {axis} but {'..'.join(map(str, orng))} on input "
                    f"'{other}' axis {oax}", field=s.name,
                    hint="inputs sharing a dimension name must get the same min/opt/max")
            seen.setdefault(d, (s.name, axis, rng))


def check_samples(profiles: Sequence[Profile], samples: Sequence[Mapping[str, Any]], *,
                  stacked: Optional[bool] = None, batch: Optional[Iterable[str]] = None
                  ) -> List[Finding]:
    """Do sample shapes fall inside some profile, and is opt near where the data lives?

    `stacked` (default: one batch given, i.e. one .npz of stacked samples) judges the data the
    way calibration uses it: a file's first axis is the sample, split into batches of at most
    the profile's batch max (`load_calibration`), so its length is no batch size: only a file
    of fewer samples than the batch min (one batch below it) is outside; the other axes must be
    inside the profile. A folder of files, each one batch, is judged batch by batch. `batch`:
    the inputs whose axis 0 is a batch (`workbench.core.inputs.leading_axes`; None: every input
    with a batch range; empty: none is, so each file is one sample, judged as it is)."""
    import numpy as np

    keep = None if batch is None else set(batch)
    if stacked is None:
        stacked = len(samples) == 1 and keep != set()
    findings: List[Finding] = []
    for idx, prof in enumerate(profiles, 1):
        split = _stacked_split(prof, samples, keep) if stacked else None
        for name, (mn, op, mx) in prof.items():
            shapes = [np.shape(b[name]) for b in samples if name in b]
            if not shapes:
                continue
            for axis in range(len(mn)):
                vals = np.array([s[axis] for s in shapes if len(s) > axis])
                if vals.size == 0 or mn[axis] == mx[axis]:
                    continue
                if axis == 0 and split is not None and name in split:
                    n = int(vals.max())  # samples in the file; batches of <= max are made
                    if n < mn[axis]:
                        findings.append(Finding(
                            "error", "sample-outside-profile",
                            f"profile #{idx}: the file holds {n} stacked sample(s) of input "
                            f"'{name}', fewer than the profile's batch min {mn[axis]} (axis 0 "
                            f"is {mn[axis]}..{mx[axis]}): calibration cannot make one batch",
                            tensors=[name], source="profiles",
                            hint=f"lower the batch min to {n} or add samples"))
                    continue  # (its length is a sample count: no batch size to set opt by)
                above = vals > mx[axis]
                if axis == 0 and not stacked:  # a file of more samples than the batch max
                    # is split into batches of it, as one stacked file is (`load_calibration`)
                    splits = [_stacked_split(prof, [b], keep) for b in samples if name in b]
                    above &= np.array([not (sp and name in sp) for sp in splits], bool)
                outside = int(((vals < mn[axis]) | above).sum())
                if outside:
                    findings.append(Finding(
                        "error", "sample-outside-profile",
                        f"profile #{idx}: {outside} sample(s) have input '{name}' axis {axis} "
                        f"outside {mn[axis]}..{mx[axis]} (seen {vals.min()}..{vals.max()})",
                        tensors=[name], source="profiles", hint="widen the profile"))
                lo, hi = np.percentile(vals, 10), np.percentile(vals, 90)
                if not lo <= op[axis] <= max(hi, lo) and not (op[axis] in (lo, hi)):
                    findings.append(Finding(
                        "warning", "opt-far-from-data",
                        f"profile #{idx}: input '{name}' axis {axis} opt={op[axis]} but "
                        + (f"the calibration batches all have it at {lo:g}" if lo == hi else
                           f"80% of the calibration batches have it in {lo:g}..{hi:g}")
                        + ": TensorRT tunes kernels for opt",
                        tensors=[name], source="profiles",
                        hint=f"set opt near the median ({np.median(vals):g})"))
    return findings


def _stacked_split(prof: Profile, samples: Sequence[Mapping[str, Any]],
                   batch: Optional[set] = None) -> Optional[set]:
    """The inputs whose axis 0 calibration splits into batches (one stacked file; inputs with a
    batch range in `prof`, among `batch` when given, all of one sample count, as
    `_split_for_profile` requires), or None when it would not split them (their counts differ,
    or no input has a batch: each batch is then judged as it is)."""
    import numpy as np

    if len(samples) != 1 or batch == set():
        return None
    b = samples[0]
    names = [k for k, (mn, _, mx) in prof.items() if k in b and np.ndim(b[k]) >= 1
             and len(mn) >= 1 and mn[0] != mx[0] and (batch is None or k in batch)]
    if not names or len({int(np.shape(b[k])[0]) for k in names}) != 1:
        return None
    return set(names)


# --------------------------------------------------------------------------- advisor
def _round8(v: float, lo: int, hi: int) -> int:
    r = int(math.ceil(v / 8.0) * 8) if v >= 8 else int(math.ceil(v))
    return int(min(max(r, lo), hi))


_PAD_WORDS = {"pad", "pads", "padding", "padded"}


def mask_polarity_from_name(name: str) -> Optional[bool]:
    """True when a mask input's name says 1/True marks PADDING (src_pad_mask, PyTorch's
    key_padding_mask), False when it says 1 marks a token (Hugging Face's attention_mask),
    None when the name does not say."""
    from workbench.core.inputs import dim_words

    words = dim_words(name)
    if any(w in _PAD_WORDS for w in words) or "keypaddingmask" in name.lower().replace("_", ""):
        return True
    if name.lower().endswith("attention_mask") or any(w in ("valid", "keep") for w in words):
        return False
    return None


def _row_votes(batches: Sequence[Any]) -> Tuple[int, int, int, int]:
    """Over the rows of 0/1 masks [batch, seq]: how many have their 1s as a proper prefix, as a
    proper suffix, none, all."""
    import numpy as np

    votes = np.zeros(4, int)
    for rows in batches:
        a = np.asarray(rows).astype(bool)
        ones, width = a.sum(axis=1), a.shape[1]
        idx = np.arange(width)[None, :]
        prefix = (a == (idx < ones[:, None])).all(axis=1)
        suffix = (a == (idx >= (width - ones)[:, None])).all(axis=1)
        some = (ones > 0) & (ones < width)
        votes += [(prefix & some).sum(), (suffix & some).sum(), (ones == 0).sum(),
                  (ones == width).sum()]
    return tuple(int(v) for v in votes)  # type: ignore[return-value]


def mask_polarity(name: str, batches: Sequence[Any]) -> Tuple[bool, str]:
    """(does 1/True mark padding?, how that was decided) for 0/1 masks [batch, seq]: from its
    name (`mask_polarity_from_name`), else from the data, padding on the right: real tokens
    form a prefix of each row, so 1s forming a suffix (0s the prefix) mean 1 = pad, as does a
    row of 0s (a sequence of no token); else 1 = token."""
    by_name = mask_polarity_from_name(name)
    if by_name is not None:
        return by_name, "from its name"
    prefix, suffix, zeros, ones = _row_votes(batches)
    if prefix != suffix:
        return suffix > prefix, ("from the data: its 1s end the padded rows, where right "
                                 "padding puts the pad" if suffix > prefix else
                                 "from the data: its 1s start the padded rows, where right "
                                 "padding puts the tokens")
    if zeros != ones:
        return zeros > ones, ("from the data: rows of all 0s would hold no token"
                              if zeros > ones else "from the data: its rows of all 1s are full")
    return False, "assumed: neither its name nor its data says"


def _real_lengths(samples: Sequence[Mapping[str, Any]], specs: Sequence[Any]) -> Dict[str, Any]:
    """Sequence lengths hidden under padding, from a 0/1 `*mask*` input [batch, seq]: per dim,
    (mask name, lengths, does 1 mark padding, how that was decided). The tokens a row holds
    are its 1s, or its 0s where 1/True marks padding (`mask_polarity`: src_pad_mask)."""
    import numpy as np

    out: Dict[str, Any] = {}
    for s in specs:
        if "mask" not in s.name.lower() or len(s.dims) != 2 or not isinstance(s.dims[1], str):
            continue
        rows = [np.asarray(b.get(s.name)) for b in samples]
        rows = [a for a in rows if a.ndim == 2 and a.size and np.isin(a, (0, 1)).all()]
        if not rows:
            continue
        pad, how = mask_polarity(s.name, rows)
        lengths = [int(a.shape[1]) - a.astype(bool).sum(axis=1) if pad
                   else a.astype(bool).sum(axis=1) for a in rows]
        said = f"{'True/1 = pad' if pad else 'True/1 = token'}, {how}"
        out[s.dims[1]] = (s.name, np.concatenate(lengths).astype(int), pad, said)
    return out


def _observed_sizes(dyn: Sequence[Any], samples: Sequence[Mapping[str, Any]]
                    ) -> Dict[Any, List[int]]:
    """Every size each dynamic axis has in the samples, keyed by its symbolic dim (inputs that
    share one share the list) or (input, axis)."""
    import numpy as np

    observed: Dict[Any, List[int]] = {}
    for s in dyn:
        for axis in s.dynamic_axes:
            key = s.dims[axis] if isinstance(s.dims[axis], str) else (s.name, axis)
            for b in samples:
                if s.name in b and len(np.shape(b[s.name])) > axis:
                    observed.setdefault(key, []).append(int(np.shape(b[s.name])[axis]))
    return observed


def _axis_range(key: Any, v: Any, *, is_batch: bool, stacked_file: bool,
                cache_keys: Dict[Any, Any], real: Dict[str, Any], positions: Any,
                why: Dict[Any, str], later: List[Tuple[str, Any, str, int, int]]
                ) -> Tuple[int, int, int]:
    """(min, opt, max) for one axis from its observed sizes `v`, by what the axis is: a batch
    (stacked file or served batches), a KV cache, a padded sequence, or any other; notes why a
    range is fixed in `why` and the batch findings (their hints need the profile) in `later`."""
    import numpy as np

    mn, mx = int(v.min()), int(v.max())
    if is_batch and stacked_file:  # one stacked file: its length is a sample
        # count, not a serving batch size: the batch range `workbench build` defaults to
        later.append(("batch-from-default", key, "", int(v.max()), 0))
        return 1, 1, DEFAULT_MAX_BATCH
    if is_batch:  # batches as served (a folder of files, or files that are one sample
        # each, image [batch, ...] beside rois [num_rois, 4]): their sizes say it
        mn, opt = 1, int(np.median(v))
        if mx < DEFAULT_MAX_BATCH:  # (how the data was saved, not all the engine serves)
            later.append(("batch-max-default", key, "", opt, mx))
            mx = DEFAULT_MAX_BATCH
        return mn, opt, mx
    if key in cache_keys:  # a KV cache: decode starts empty, whatever the data holds
        spec, axis = cache_keys[key]
        (rmn, ropt, rmx), _ = _axis_default(spec, axis, positions, True)
        if mn == mx:  # one length (an export's trace value): the rule's range
            mx = max(rmx, mx)
            why[key] = "a past/cache length: from an empty cache up to " + str(mx)
            return rmn, ropt, mx
        return rmn, _round8(float(np.median(v)), 1, mx), mx
    if key in real:  # padded data: the real lengths say where the work is
        lengths = real[key][1]
        mn = int(max(1, lengths.min()))
        return mn, _round8(float(np.percentile(lengths, 75)), mn, mx), mx
    return mn, _round8(float(np.median(v)), mn, mx), mx


def _padded_finding(key: Any, real_key: Any, seen_min: int, opt: int, mx: int) -> Finding:
    """Info on a padded axis: the real lengths under the mask, what padding to `mx` costs, and
    the range unpadded batches would take."""
    import numpy as np

    mask_name, lengths, pad_is_one, polarity = real_key
    p50, p75, lmax = np.percentile(lengths, 50), np.percentile(lengths, 75), lengths.max()
    return Finding(
        "info", "padded-lengths",
        f"'{key}' is {seen_min}..{mx} in the data but '{mask_name}' shows real lengths "
        f"p50={p50:g}, p75={p75:g}, max={lmax}: padding to {mx} costs compute "
        f"({polarity})",
        tensors=[mask_name], source="profiles",
        hint=(f"feed unpadded batches and use {key} opt={_round8(p75, 1, int(lmax))}, "
              f"max={int(lmax)}" if (_round8(p75, 1, int(lmax)), int(lmax)) != (opt, mx) else
              f"feed unpadded batches: the proposed {key} range already spans the "
              "real lengths"),
        extra={"p50": float(p50), "p75": float(p75), "max": int(lmax),
               "pad_is_one": bool(pad_is_one)})


def _profile_from_ranges(dyn: Sequence[Any], ranges: Dict[Any, Tuple[int, int, int]]) -> Profile:
    """The profile of every dynamic input: static dims as they are, dynamic ones from their
    axis's range; an axis the samples never showed is an error naming the input."""
    prof = Profile()
    for s in dyn:
        lo: List[int] = []
        mid: List[int] = []
        hi: List[int] = []
        for axis, d in enumerate(s.dims):
            if isinstance(d, int):
                lo.append(d)
                mid.append(d)
                hi.append(d)
                continue
            key = d if isinstance(d, str) else (s.name, axis)
            r = ranges.get(key)
            if r is None:
                raise WorkbenchError(f"the samples have no '{s.name}' to measure axis {axis}",
                                     field=s.name)
            lo.append(r[0])
            mid.append(r[1])
            hi.append(r[2])
        prof[s.name] = (tuple(lo), tuple(mid), tuple(hi))
    return prof


def _batch_findings(prof: Profile, specs: Sequence[Any],
                    later: List[Tuple[str, Any, str, int, int]]) -> List[Finding]:
    """The batch findings noted while ranging, now that their hints can give the full flag
    (every input at its full rank): one for all stacked-file axes, one per defaulted max."""
    findings: List[Finding] = []
    stacked = [(key, a) for code, key, _, a, _ in later if code == "batch-from-default"]
    if stacked:  # one finding and one flag for every leading axis (image batch and ROI count)
        findings.append(_stacked_finding(prof, specs, stacked))
    for code, key, _, a, b in later:
        if code == "batch-from-default":
            continue
        findings.append(Finding(
            "info", "batch-max-default",
            f"the data's batches hold at most {b} samples: the batch max is build's "
            f"default {DEFAULT_MAX_BATCH}, so the engine also takes larger batches",
            source="profiles",
            hint=f"set the max you serve with {widened_flag(prof, specs, key, (1, a, b))} "
                 f"to keep it at {b}"))
    return findings


def advise(model: ModelLike, samples: Sequence[Mapping[str, Any]], *,
           profiles: Optional[Sequence[Profile]] = None) -> Tuple[List[Profile], List[Finding]]:
    """Propose one profile from sample batches: per dynamic axis min = smallest seen,
    opt = median rounded up to a multiple of 8, max = largest; batch axes (axis 0 where
    `workbench.core.inputs.leading_axes` calls it a batch; a count of items there, num_points, is
    measured like any other axis): min 1, opt the median batch seen; padded sequences (0/1 `*mask*` input): min and opt (p75, rounded
    to 8) from the real lengths. Inputs sharing a symbolic dim get the same range. Warns about wide ranges; with `profiles`, also checks them."""
    import numpy as np

    from workbench.core.inputs import leading_axes, model_inputs, not_batch_finding

    specs = model_inputs(model)
    axes = leading_axes(model)
    findings: List[Finding] = []
    if not samples:
        raise WorkbenchError("the advisor needs sample batches", field="samples",
                             hint="pass calibration data or representative inputs")
    dyn = [s for s in specs if s.dynamic_axes]
    if not dyn:
        findings.append(Finding("info", "static-model", "every input has static dims: no "
                                "profile needed", source="profiles"))
        return [], findings
    observed = _observed_sizes(dyn, samples)
    batch_keys = {s.dims[0] if isinstance(s.dims[0], str) else (s.name, 0)
                  for s in dyn if s.name in axes.batch}
    stacked_file = bool(len(samples) == 1 and axes.splits)  # one file of stacked samples
    note = not_batch_finding(model, "profiles")
    if note is not None:
        findings.append(note)
    real = _real_lengths(samples, specs)
    positions = _position_table(as_model(model).proto)
    cache_keys = {(s.dims[a] if isinstance(s.dims[a], str) else (s.name, a)): (s, a)
                  for s in dyn for a in s.dynamic_axes if is_cache_axis(s, a)}
    ranges: Dict[Any, Tuple[int, int, int]] = {}
    why: Dict[Any, str] = {}
    later: List[Tuple[str, Any, str, int, int]] = []  # batch findings: hints need the profile
    for key, vals in observed.items():
        v = np.array(vals)
        is_batch = key in batch_keys
        mn, opt, mx = _axis_range(key, v, is_batch=is_batch, stacked_file=stacked_file,
                                  cache_keys=cache_keys, real=real, positions=positions,
                                  why=why, later=later)
        ranges[key] = (mn, max(mn, min(opt, mx)), mx)
        if key in real:
            findings.append(_padded_finding(key, real[key], int(v.min()), ranges[key][1], mx))
        if mn > 0 and mx / mn > WIDE_RATIO:
            findings.append(Finding(
                "warning", "wide-profile",
                f"'{key}' spans {mn}..{mx} (x{mx / mn:g}): TensorRT tunes kernels for opt and "
                "sizes memory for max", source="profiles",
                hint="split into two profiles (e.g. small and large) or narrow the range"))
        if mn == mx and not is_batch:
            why[key] = ("every calibration batch has it at this size" if len(samples) > 1
                        else "the calibration file's size; one file holds one size")
    prof = _profile_from_ranges(dyn, ranges)
    findings += _batch_findings(prof, specs, later)
    findings += fixed_axis_findings(model, prof, "the proposed profile", why)
    findings.append(Finding("info", "profile-proposal",
                            "proposed profile: " + " ".join(prof.arg_strings()),
                            source="profiles", extra={"profile": prof.to_dict()}))
    if profiles:
        findings += wide_findings(validate_profiles(model, profiles))
        findings += check_samples(profiles, samples, batch=axes.batch if axes.splits else ())
    return [prof], findings


RUN_CHECK_MAX_MB = 512  # weights up to this size: `run_at_profiles` runs each shape on the CPU


def run_at_profiles(model: ModelLike, profiles: Sequence[Profile], *, timeout: float = 60.0
                    ) -> Tuple[List[Finding], int]:
    """Run the model on onnxruntime (CPU, random inputs) at each profile's min, opt and max
    shapes: a size fixed when the model was exported (a Reshape to a traced constant) fails
    there, and no rule on the profile alone can see it. Returns (an error finding per shape
    the model cannot run, naming node and fix; the number of runs made). Models with more
    than RUN_CHECK_MAX_MB of weights, or inputs that are not tensors, are not run (info)."""
    from workbench.runtime.equivalence import make_inputs_at
    from workbench.core.model import Model, as_model
    from workbench.runtime.runners import OnnxRuntimeRunner, user_error

    # (a ModelProto's external references, if any, are its own: not checked as files)
    opened = as_model(model) if isinstance(model, (Model, str, os.PathLike)) else None
    if opened is not None and opened.missing_external:
        return [Finding("info", "profile-not-run",
                        "the profiles were checked against the model's declared shapes only: "
                        "its external-data file(s) are missing (" +
                        ", ".join(sorted(set(opened.missing_external))[:3]) + ")",
                        source="profiles", hint="put the data file(s) next to the model")], 0
    proto = as_model(model).proto
    weights = sum(math.prod(t.dims) * 4 for t in proto.graph.initializer) / 2**20  # (approx.,
    # external data included)
    # onnxruntime loads the file itself where there is one: external data resolves beside it
    source = str(opened.path) if opened is not None and getattr(opened, "path", None) else proto
    if weights > RUN_CHECK_MAX_MB:
        return [Finding("info", "profile-not-run",
                        f"the profiles were checked against the model's declared shapes only: "
                        f"its {weights:.0f} MB of weights are over {RUN_CHECK_MAX_MB} MB for a "
                        "CPU run at every profile shape", source="profiles",
                        hint="`workbench check MODEL --build` builds it with a profile")], 0
    if any(not i.type.HasField("tensor_type") for i in proto.graph.input):
        return [], 0
    elem = {i.name: i.type.tensor_type.elem_type for i in proto.graph.input}
    out, runs, seen = [], 0, set()
    runner = OnnxRuntimeRunner(source, timeout=timeout)
    try:  # a model onnxruntime cannot load (a TensorRT plugin op) is not run: said, no error
        runner.start()
    except Exception as e:
        err = user_error(e)
        if err is None:
            raise
        runner.close()
        return [Finding("info", "profile-not-run",
                        "the profiles were checked against the model's declared shapes only: "
                        f"{err.message}", source="profiles", hint=err.hint)], 0
    try:
        for k, prof in enumerate(profiles, 1):
            for j, which in enumerate(("min", "opt", "max")):
                shapes = {n: tuple(v[j]) for n, v in prof.items() if n in elem}
                key = tuple(sorted(shapes.items()))
                if key in seen:
                    continue
                seen.add(key)
                runs += 1
                try:
                    runner.infer(make_inputs_at(proto, shapes, seed=k))
                except Exception as e:
                    err = user_error(e)
                    if err is None:
                        raise
                    at = " ".join(f"{n}:{'x'.join(map(str, sh))}" for n, sh in shapes.items())
                    out.append(Finding(
                        "error", "profile-cannot-run",
                        f"profile #{k}: the model cannot run at its {which} shapes ({at}) on "
                        f"onnxruntime: {err.message}", nodes=[err.node] if err.node else [],
                        source="profiles", hint=err.hint, extra={"profile": k, "at": which}))
    finally:
        runner.close()
    return out, runs


def wide_findings(profiles: Sequence[Profile]) -> List[Finding]:
    """Warnings for axes whose max/min exceeds WIDE_RATIO (used by the panel's live check)."""
    out = []
    for idx, p in enumerate(profiles, 1):
        for name, (mn, op, mx) in p.items():
            for axis in range(len(mn)):
                if mn[axis] > 0 and mx[axis] / mn[axis] > WIDE_RATIO:
                    out.append(Finding(
                        "warning", "wide-profile",
                        f"profile #{idx}: input '{name}' axis {axis} spans {mn[axis]}..{mx[axis]}"
                        f" (x{mx[axis] / mn[axis]:g}): TensorRT tunes for opt and sizes memory "
                        "for max", tensors=[name], source="profiles",
                        hint="split into two profiles or narrow the range"))
    return out


# --------------------------------------------------------------------------- defaults
DEFAULT_MAX_BATCH = 16
DEFAULT_SEQUENCE = (1, 128, 512)  # token axes: max from the model's position table if it has one
DEFAULT_DIM = 128  # any other dynamic axis we know nothing about: fixed (min = opt = max)
DEFAULT_ITEMS = (1, 128, 1024)  # axis 0 that is a count of items (points, boxes), not a batch
METADATA_KEY = "workbench.profile"  # metadata_props entry in --profile syntax, set by exporters
_AUDIO_HINTS = ("sample", "audio", "wav", "speech")
_SEQUENCE_NAMES = ("t", "s", "n_tokens", "length", "steps")  # (whole names only: short ones)
_POSITION_HINTS = ("position", "wpe", "pos_emb")


def _position_table(proto: Any) -> Optional[int]:
    """Rows of the model's position-embedding table ([positions, hidden]), if it has one."""
    rows = [int(t.dims[0]) for t in proto.graph.initializer
            if len(t.dims) == 2 and t.dims[0] >= 16 and
            (any(h in t.name.lower() for h in _POSITION_HINTS) or
             "pos" in re.split(r"[^a-z0-9]+", t.name.lower()))]  # (`pos.weight`, `/pos/...`)
    return min(rows) if rows else None


def _axis_default(spec: Any, axis: int, positions: Optional[int], with_cache: bool = False,
                  batch: bool = True) -> Tuple[Tuple[int, int, int], str]:
    """(min, opt, max) for one dynamic axis and the rule that chose it. `with_cache`: the model
    has a KV-cache input, whose length and the new tokens' share the position table (past +
    new <= its rows): each gets half of it at most, so the profile's max runs. `batch`: is
    axis 0 a batch (`workbench.core.inputs.leading_axes`)? If not, it is a count of items (points,
    boxes) or a time-major sequence, which varies from call to call: a range, not a size."""
    from workbench.core.inputs import is_item_count

    rank, dims = len(spec.dims), spec.dims
    name = str(dims[axis] or "").lower()
    half = positions // 2 if (with_cache and positions) else None
    if axis == 0 and batch:
        return (1, 1, DEFAULT_MAX_BATCH), "the batch axis, opt 1 as trtexec picks"
    if axis == 0:
        from workbench.core.inputs import SEQUENCE_WORDS, dim_words

        if any(w in SEQUENCE_WORDS for w in dim_words(name)):
            return DEFAULT_SEQUENCE, "a sequence axis at axis 0 (named so), not a batch"
        return DEFAULT_ITEMS, "a count of items in one sample, not a batch (a guess)"
    if is_cache_axis(spec, axis):  # decode starts from an empty cache: 0 (TensorRT takes it)
        mx = half or positions or DEFAULT_DIM
        return (0, max(1, mx // 2), mx), (
            "a past/cache length, from an empty cache (the first decode step) up to "
            + ("half the model's position table (the new tokens take the rest)" if half else
               "the model's position table" if positions else f"{DEFAULT_DIM} (a guess)"))
    if spec.elem_type in (6, 7) and rank == 2 and axis == 1 and is_item_count(dims[axis]):
        # int [k, num_edges] (edge_index, pairs): a count of items its name says, not tokens
        return DEFAULT_ITEMS, f"a count of items ({dims[axis]}: named so), not a token axis"
    if spec.elem_type in (6, 7) and rank == 2 and axis == 1:  # token ids / masks
        mx = (positions - half) if half else (positions or DEFAULT_SEQUENCE[2])
        src = ("a token axis beside a KV cache: max = the position table less the cache's "
               "max" if half else "a token axis, max = the model's position table" if positions
               else "a token axis")
        return (1, min(DEFAULT_SEQUENCE[1], mx), mx), src
    if spec.elem_type in (1, 10, 11, 16):
        if rank in (4, 5) and axis == 1:
            return (3, 3, 3), "channels (a guess)"
        if rank == 4:  # NCHW: the other spatial axis if it is fixed, else 224
            other = dims[5 - axis] if axis in (2, 3) else None
            v = other if isinstance(other, int) else 224
            return (v, v, v), "image size (a guess)"
        if rank == 5:  # NCTHW video clip
            v = 16 if axis == 2 else 112
            return (v, v, v), "video clip (a guess)"
        if rank == 2 and axis == 1 and any(h in name or h in spec.name.lower()
                                           for h in _AUDIO_HINTS + ("input_values",)):
            return (16000, 16000, 16000), "1 s of 16 kHz audio (a guess)"
        if rank == 3 and axis == 2 and dims[1] == 1 and any(
                h in name or h in spec.name.lower() for h in _AUDIO_HINTS + ("len",)):
            return (16000, 16000, 16000), "1 s of 16 kHz audio, one channel (a guess)"
        if rank == 3 and axis == 1 and (name in _SEQUENCE_NAMES or any(
                h in name for h in ("seq", "len", "time", "frame", "token"))):
            return DEFAULT_SEQUENCE, "a sequence axis (named so)"
    return (DEFAULT_DIM, DEFAULT_DIM, DEFAULT_DIM), "unknown axis (a guess)"


def dim_key(spec: Any, axis: int) -> Any:
    """What identifies a dynamic axis across inputs (`workbench.core.inputs.dim_key`)."""
    from workbench.core.inputs import dim_key as key

    return key(spec, axis)


def is_cache_axis(spec: Any, axis: int) -> bool:
    """A KV-cache length axis (`workbench.core.inputs.is_cache_axis`)."""
    from workbench.core.inputs import is_cache_axis as cache

    return cache(spec, axis)


def _dim_label(spec: Any, axis: int) -> str:
    d = spec.dims[axis]
    return f" ({d})" if isinstance(d, str) and d else ""


def widened_flag(prof: Profile, specs: Sequence[Any], key: Any, rng: Tuple[int, int, int]
                 ) -> str:
    """The full --profile flag for `prof` with dim `key` (a dim name, or (input, axis)) set to
    `rng` on every input that has it: full rank, every input, so it parses and validates."""
    return profile_flag(_widened(prof, specs, [key], rng))


def _widened(prof: Profile, specs: Sequence[Any], keys: Sequence[Any],
             rng: Tuple[int, int, int]) -> Profile:
    """`prof` with every dim of `keys` (dim names, or (input, axis)) set to `rng`."""
    out = Profile()
    for name, (mn, op, mx) in prof.items():
        trio = [list(mn), list(op), list(mx)]
        spec = next((s for s in specs if s.name == name), None)
        for axis, d in enumerate(spec.dims if spec is not None else ()):
            k = d if isinstance(d, str) and d else (name, axis)
            if k in keys and axis < len(mn):
                for i in range(3):
                    trio[i][axis] = rng[i]
        out[name] = tuple(tuple(t) for t in trio)  # type: ignore[assignment]
    return out


def _key_label(key: Any) -> str:
    """A dim key as users read it: 'batch', or input 'x' axis 0."""
    return f"'{key}'" if isinstance(key, str) else f"input '{key[0]}' axis {key[1]}"


def _stacked_finding(prof: Profile, specs: Sequence[Any], stacked: Sequence[Tuple[Any, int]]
                     ) -> Finding:
    """One stacked file: its leading axes (a batch, a ROI count) are how it was saved, not what
    is served; one finding and one flag set them all (one flag per axis contradicts the other)."""
    keys = [k for k, _ in stacked]
    flag = profile_flag(_widened(prof, specs, keys, (1, 4, 32)))
    tail = ", or pass a folder of one .npz per batch, whose sizes the advisor reads"
    if len(stacked) == 1:
        return Finding(
            "info", "batch-from-default",
            f"the data is one batch of {stacked[0][1]} stacked samples, which says nothing "
            "about the batch sizes you serve: the batch axis gets build's default range "
            f"1..1..{DEFAULT_MAX_BATCH}", source="profiles",
            hint=f"set it to what you serve, e.g. {flag} (batch 1..4..32){tail}")
    sizes = ", ".join(f"{a} along {_key_label(k)}" for k, a in stacked)
    return Finding(
        "info", "batch-from-default",
        f"the data is one batch of stacked samples ({sizes}), which says nothing about the "
        "sizes you serve: each of these leading axes gets build's default range "
        f"1..1..{DEFAULT_MAX_BATCH}", source="profiles",
        hint=f"set them to what you serve, e.g. {flag} "
             f"({', '.join(_key_label(k) for k in keys)} each 1..4..32){tail}")


def serving_profiles(model: ModelLike, single: Profile) -> Optional[List[Profile]]:
    """A decoder with a KV cache (`is_cache_axis`) and token ids is called two ways: prefill (the
    prompt, an empty cache) and decode (one new token, a growing cache). One profile covering
    both tunes the engine's kernels for one opt shape; two serve each at its own. From `single`
    (a default or proposed profile): prefill = its token range with an empty cache, decode = one
    token with its cache range (from 1); a mask's total-length axis (past + new,
    `_decoder_axes`, as the default profile reads it) follows each. None when the model is not such a decoder."""
    from workbench.core.inputs import model_inputs, with_cache_names

    proto = as_model(model).proto
    specs = [s for s in with_cache_names(proto, model_inputs(proto)) if s.name in single]
    axes = _decoder_axes(specs)
    if axes is None:
        return None
    ids, caches, total = axes
    tok = dim_key(ids, 1)
    cache = {dim_key(s, a) for s, a in caches}

    def rng_of(k: Any) -> Tuple[int, int, int]:
        for s in specs:
            for a in range(len(s.dims)):
                if dim_key(s, a) == k:
                    mn, op, mx = single[s.name]
                    return int(mn[a]), int(op[a]), int(mx[a])
        raise KeyError(k)

    t_rng, c_rng = rng_of(tok), rng_of(dim_key(*caches[0]))
    if t_rng[2] <= 1 or c_rng[2] <= 0:  # data of one kind (decode steps, or prompts only):
        try:  # the other call's range is the default's
            dflt, _ = default_profile(model)
            d_t = next(dflt[s.name] for s in specs if s.name == ids.name)
            d_c = next(dflt[s.name] for s in specs for a in s.dynamic_axes
                       if dim_key(s, a) in cache and s.name in dflt)
            ca = next(a for s in specs for a in s.dynamic_axes if dim_key(s, a) in cache
                      and s.name in dflt)
        except (WorkbenchError, StopIteration, KeyError):
            return None
        if t_rng[2] <= 1:
            t_rng = (int(d_t[0][1]), int(d_t[1][1]), int(d_t[2][1]))
        if c_rng[2] <= 0:
            c_rng = (int(d_c[0][ca]), int(d_c[1][ca]), int(d_c[2][ca]))
    c_dec = (max(1, c_rng[0]), max(1, c_rng[1]), max(1, c_rng[2]))
    prefill = {**{k: (0, 0, 0) for k in cache}, tok: t_rng, **{k: t_rng for k in total}}
    decode = {**{k: c_dec for k in cache}, tok: (1, 1, 1),
              **{k: (c_dec[0] + 1, c_dec[1] + 1, c_dec[2] + 1) for k in total}}
    out = []
    for dims in (prefill, decode):
        prof = Profile()
        for s in specs:
            trio = [list(x) for x in single[s.name]]
            for a in range(len(s.dims)):
                if dim_key(s, a) in dims:
                    for i in range(3):
                        trio[i][a] = dims[dim_key(s, a)][i]
            prof[s.name] = tuple(tuple(t) for t in trio)  # type: ignore[assignment]
        out.append(prof)
    return out


def serving_notice(model: ModelLike, single: Profile, pair: Sequence[Profile],
                   notice: Finding) -> Finding:
    """The "default-profile" notice of a build that took a decoder's prefill and decode
    profiles (`serving_profiles`) by default: both ranges said in words, the flags that build
    the same (to edit) and the one profile `notice` (`default_profile_finding`) proposed."""
    from workbench.core.inputs import model_inputs

    specs = [s for s in model_inputs(model) if s.name in single]
    axes = _decoder_axes(specs)

    def said(prof: Profile) -> str:
        parts = []
        if axes is not None:
            ids, caches, _ = axes
            for label, (spec, a) in (("new tokens", (ids, 1)), ("cache", caches[0])):
                mn, op, mx = (int(x[a]) for x in prof[spec.name])
                name = spec.dims[a] if isinstance(spec.dims[a], str) else f"axis {a}"
                parts.append(f"{label} ({name}) {mn}..{op}..{mx}")
        return ", ".join(parts)

    flag = serving_flag(pair)
    return Finding(
        "warning", "default-profile",
        "no profile given for the dynamic inputs of this decoder with a KV cache: built with "
        f"two profiles, prefill ({said(pair[0])}) and decode ({said(pair[1])}), each tuned for "
        "its own calls (the workbench's runner picks the profile that holds a call's shapes)",
        tensors=list(single), source="profiles",
        hint=f"change them with {flag}; one profile for both calls: {notice.extra['flag']} "
             "(--strict-profiles makes a missing profile an error)",
        extra={**notice.extra, "profiles": [p.to_dict() for p in pair], "flag": flag,
               "single_flag": notice.extra["flag"], "serving": True})


def serving_flag(profiles: Sequence[Profile]) -> str:
    """`--profile A --profile +B`: the exact flags for several profiles."""
    return " ".join(("--profile " if i == 0 else "--profile +") + ",".join(p.arg_strings())
                    for i, p in enumerate(profiles))


def serving_finding(model: ModelLike, single: Profile, what: str) -> Optional[Finding]:
    """The advice to build a decoder's prefill and decode profiles (`serving_profiles`), only
    once both ran on onnxruntime at their min, opt and max; `what` names `single`."""
    pair = serving_profiles(model, single)
    if not pair:
        return None
    cannot, runs = run_at_profiles(model, pair)
    if cannot or not runs:
        return None
    return Finding(
        "info", "serving-profiles",
        f"a decoder with a KV cache: {what} serves the prompt (prefill: many tokens, an empty "
        "cache) and each step (decode: one token, a growing cache) with one opt shape, so the "
        "kernels are tuned for one of them; two profiles serve each at its own (both ran on "
        "onnxruntime at their min, opt and max; the workbench's runner picks the profile that "
        "holds a call's shapes)", source="profiles", hint=f"build with {serving_flag(pair)}",
        extra={"profiles": [p.to_dict() for p in pair], "flag": serving_flag(pair)})


def fixed_axis_findings(model: ModelLike, prof: Profile, what: str,
                        why: Optional[Mapping[Any, str]] = None) -> List[Finding]:
    """A warning per dynamic axis (batch aside: `workbench.core.inputs.leading_axes`; a count of
    items at axis 0 is no batch) that `prof` pins to one size (min = max): the engine then
    takes that size only, which a defaulted or proposed profile must not do silently. `what`
    says whose profile ("the default profile", "the proposed profile"); `why` (per dim key)
    why that size. Names input, axis, dim name, value and the flag."""
    from workbench.core.inputs import leading_axes, model_inputs

    specs = model_inputs(model)
    batch = leading_axes(model).batch
    out: List[Finding] = []
    done = set()
    for s in specs:
        if s.name not in prof:
            continue
        mn, _, mx = prof[s.name]
        for axis in s.dynamic_axes:
            if axis == 0 and s.name in batch or axis >= len(mn) or mn[axis] != mx[axis]:
                continue
            d = s.dims[axis]
            key = dim_key(s, axis)
            if key in done:
                continue
            done.add(key)
            v = int(mn[axis])
            sharing = [o.name for o in specs if o.name in prof and o.name != s.name and
                       any(dd == key for dd in o.dims)] if isinstance(key, str) else []
            if is_cache_axis(s, axis):
                rng = (0, max(1, v), max(2 * v, DEFAULT_DIM))
            elif s.elem_type in (6, 7) and len(s.dims) == 2 and axis == 1:  # tokens
                rng = (1, v, max(2 * v, DEFAULT_SEQUENCE[1]))
            else:
                rng = (max(1, v // 2), v, max(2 * v, 2))
            reason = (why or {}).get(key)
            out.append(Finding(
                "warning", "fixed-axis",
                f"input '{s.name}' axis {axis}{_dim_label(s, axis)} is dynamic in the model but "
                f"{what} fixes it at {v}" + (f" ({reason})" if reason else "")
                + (f"; so are {', '.join(repr(n) for n in sharing)}, which share it"
                   if sharing else "")
                + f": the engine takes only {v} there", tensors=[s.name, *sharing],
                source="profiles",
                hint=f"widen it to the sizes you serve, e.g. "
                     f"{widened_flag(prof, specs, key, rng)}",
                extra={"input": s.name, "axis": axis, "dim": d if isinstance(d, str) else None,
                       "value": v}))
    return out


def _from_metadata(proto: Any) -> Optional[Profile]:
    for p in proto.metadata_props:
        if p.key == METADATA_KEY and p.value.strip():
            return parse_profile_arg(p.value)
    return None


def default_profile(model: ModelLike, *, max_batch: Optional[int] = None,
                    given: Optional[Mapping[str, Any]] = None
                    ) -> Tuple[Profile, Dict[str, str]]:
    """A min/opt/max for every dynamic input, as trtexec and Polygraphy default them (with a
    notice) rather than refuse: batch (axis 0, where `workbench.core.inputs.leading_axes` calls it
    one) 1..1..16, a count of items at axis 0 (num_points) 1..128..1024, token axes
    1..128..(the model's position table or 512), other axes fixed at a sane size (images 224, video 16x112, audio
    16000 samples, else 128); a min the graph cannot run at is raised to the size its
    constant-size consumers need (`workbench.precision.minsizes`: TopK's K, a kernel without
    padding), the rule saying why. The model's `workbench.profile` metadata entry wins where it has
    an input; `given` (a partial profile) fixes the dims it shares with the others. Returns the
    profile and, per dim, the rule that chose it. Shape-tensor inputs cannot be guessed."""
    from workbench.core.inputs import leading_axes, model_inputs
    from workbench.precision.minsizes import static_minimums

    from workbench.core.inputs import with_cache_names

    proto = as_model(model).proto
    specs = with_cache_names(proto, model_inputs(proto))  # (caches the graph reveals too)
    batch = leading_axes(proto).batch
    shape_inputs = set(shape_tensor_inputs(proto))
    guess_err = [s for s in specs if s.name in shape_inputs and s.name not in (given or {})]
    if guess_err:
        raise WorkbenchError(
            "shape-tensor input" + ("s " if len(guess_err) > 1 else " ")
            + ", ".join(f"'{s.name}'" for s in guess_err)
            + (" need" if len(guess_err) > 1 else " needs")
            + " a profile of VALUES (min/opt/max of the values it holds, not of its shape), "
            "which cannot be guessed", field=guess_err[0].name,
            hint="add --profile " + ",".join(f"{s.name}:MIN:OPT:MAX" for s in guess_err))
    meta = _from_metadata(proto) or Profile()
    positions = _position_table(proto)
    ranges: Dict[Any, Tuple[int, int, int]] = {}
    rules: Dict[str, str] = {}
    for src, rule in ((given or {}, "given"), (meta, "model metadata")):
        for s in specs:
            if s.name not in src:
                continue
            mn, op, mx = src[s.name]
            for axis, d in enumerate(s.dims):
                if not isinstance(d, int) and axis < len(mn):
                    key = d if isinstance(d, str) else (s.name, axis)
                    if key not in ranges:
                        ranges[key] = (int(mn[axis]), int(op[axis]), int(mx[axis]))
                        rules[str(d if isinstance(d, str) else f"{s.name}[{axis}]")] = rule
    prof = Profile()
    mins: Optional[Dict[Any, Tuple[int, str]]] = None  # the graph's lower bounds, on first need
    with_cache = any(is_cache_axis(s, a) for s in specs for a in s.dynamic_axes)
    totals = _total_length_axes(specs) if with_cache else {}
    # token inputs first: a dim they share with float inputs gets the token rule
    order = sorted(specs, key=lambda s: s.elem_type not in (6, 7))
    for s in order:
        if not s.dynamic_axes or s.name in shape_inputs or s.name in (given or {}):
            continue
        trio: List[List[int]] = [[], [], []]
        for axis, d in enumerate(s.dims):
            if isinstance(d, int):
                r = (d, d, d)
            else:
                key = d if isinstance(d, str) else (s.name, axis)
                if key not in ranges and key in totals:  # past + new: the two ranges added
                    parts = []
                    for ps, pa in totals[key]:
                        pk = ps.dims[pa] if isinstance(ps.dims[pa], str) else (ps.name, pa)
                        if pk not in ranges:
                            ranges[pk] = _axis_default(ps, pa, positions, with_cache,
                                                       ps.name in batch)[0]
                        parts.append(ranges[pk])
                    ranges[key] = tuple(sum(r[i] for r in parts) for i in range(3))
                    mn, op, mx = ranges[key]
                    rules[str(d if isinstance(d, str) else f"{s.name}[{axis}]")] = (
                        f"{mn}..{op}..{mx}: a mask over the cache and the new tokens, their "
                        "ranges added")
                elif key not in ranges:
                    ranges[key], rule = _axis_default(s, axis, positions, with_cache,
                                                      s.name in batch)
                    if axis == 0 and max_batch and s.name in batch:
                        ranges[key] = (1, 1, int(max_batch))
                    if mins is None:
                        mins = static_minimums(proto)
                    if key in mins and mins[key][0] > ranges[key][0]:  # the graph needs more
                        low, why = mins[key]
                        mn, op, mx = ranges[key]
                        ranges[key] = (low, max(op, low), max(mx, low))
                        rule += f"; min {low}: {why}"
                    mn, op, mx = ranges[key]
                    text = f"{mn}..{op}..{mx}" if mn != mx else f"fixed at {mn}"
                    rules[str(d if isinstance(d, str) else f"{s.name}[{axis}]")] = \
                        f"{text}: {rule}"
                r = ranges[key]
            for i in range(3):
                trio[i].append(r[i])
        prof[s.name] = tuple(tuple(t) for t in trio)  # type: ignore[assignment]
    return prof, rules


def _decoder_axes(specs: Sequence[Any]) -> Optional[Tuple[Any, List[Tuple[Any, int]], Set[Any]]]:
    """A decoder's inputs: (the token ids' input, the (input, axis) of every KV-cache length,
    the dims as long as past + new tokens: an attention mask over both), as
    `workbench.core.inputs.decoder_dims` relates them; None without token ids and a cache."""
    from workbench.core.inputs import decoder_dims

    d = decoder_dims(None, specs)
    if d is None:
        return None
    return d.ids, list(d.cache), d.total_keys


def _total_length_axes(specs: Sequence[Any]) -> Dict[Any, List[Tuple[Any, int]]]:
    """Per total-length dim of `_decoder_axes`: the (input, axis) of the token length and of
    the cache length it adds up."""
    axes = _decoder_axes(specs)
    if axes is None:
        return {}
    ids, caches, totals = axes
    return {k: [(ids, 1), caches[0]] for k in totals}


def profile_flag(prof: Mapping[str, Any]) -> str:
    """The exact --profile argument that sets `prof`."""
    p = prof if isinstance(prof, Profile) else Profile.from_dict(prof)
    return "--profile " + ",".join(p.arg_strings())


def default_profile_finding(prof: Profile, rules: Mapping[str, str]) -> Finding:
    """The notice a defaulted build carries: what was chosen, why, and the flag to set it."""
    dims = "; ".join(f"{d} = {rule}" for d, rule in rules.items() if rule != "given")
    return Finding(
        "warning", "default-profile",
        "no profile given for the dynamic input" + ("s " if len(prof) > 1 else " ")
        + ", ".join(f"'{k}'" for k in prof) + ": using " + " ".join(prof.arg_strings())
        + (f" ({dims})" if dims else ""), tensors=list(prof), source="profiles",
        hint=f"set your own with {profile_flag(prof)} (--strict-profiles makes a missing "
        "profile an error)", extra={"profile": prof.to_dict(), "flag": profile_flag(prof),
                                    "rules": dict(rules)})


def _suggest(model: Any, missing: Sequence[Any], given: Optional[Mapping[str, Any]] = None
             ) -> str:
    """`--profile ...` for the missing inputs (the defaults), or a template if none can be made."""
    try:
        prof, _ = default_profile(model, given=given)
        sub = Profile({s.name: prof[s.name] for s in missing if s.name in prof})
        if len(sub) == len(missing):
            return profile_flag(sub) if not given else ",".join(sub.arg_strings())
    except WorkbenchError:
        pass
    return ("--profile " if not given else "") + ",".join(f"{s.name}:MIN:OPT:MAX" for s in missing)


def missing_profile_error(model: ModelLike, dynamic: Sequence[Any]) -> WorkbenchError:
    """Every dynamic input at once, with the flag that would cover them all."""
    listed = ", ".join(f"'{s.name}' {s.shape_str()}" for s in dynamic)
    one = len(dynamic) == 1
    return WorkbenchError(f"input{'' if one else 's'} {listed} {'has' if one else 'have'} "
                          "dynamic dims but no profile was given", field=dynamic[0].name,
                          hint="add " + _suggest(model, dynamic))


PROFILE_NAMES = ("prefill", "decode")


def _profile_specs(profiles: Sequence[Mapping[str, Any]]) -> List[Any]:
    """InputSpecs read off the profiles ({input: [min, opt, max]} each): an axis whose size
    varies within or across them is dynamic (named '<input>:<axis>'); rank >= 3 reads as a
    float tensor (a cache), rank 2 as integer ids or a mask."""
    from workbench.core.inputs import InputSpec

    specs = []
    for name, trio in profiles[0].items():
        sizes = [set() for _ in trio[0]]
        for prof in profiles:
            for shape in prof.get(name, ()):
                for k, v in enumerate(shape):
                    if k < len(sizes):
                        sizes[k].add(int(v))
        dims: List[Any] = [next(iter(v)) if len(v) == 1 else f"{name}:{k}"
                           for k, v in enumerate(sizes)]
        specs.append(InputSpec(name, 1 if len(dims) >= 3 else 7, dims))
    return specs


def profile_index(spec: Any, profiles: Sequence[Mapping[str, Any]],
                  where: str = "--profile-index") -> int:
    """The optimization profile to run: -1 for None / "auto" (the first that holds the
    inputs' shapes), an index (checked against `profiles`), or a decoder's "prefill" (the
    profile whose KV cache is empty) / "decode" (the one taking one new token), told apart by
    the shapes each profile allows (`workbench.core.inputs.decoder_dims` on its inputs)."""
    if spec is None or str(spec).strip().lower() in ("", "auto", "-1"):
        return -1
    text = str(spec).strip().lower()
    if text.lstrip("-").isdigit():
        k = int(text)
        if profiles and not 0 <= k < len(profiles):
            raise WorkbenchError(f"the engine has {len(profiles)} optimization profile(s): "
                                 f"there is no profile {k}", field=where,
                                 hint=f"pass 0..{len(profiles) - 1}, prefill or decode")
        return k
    if text not in PROFILE_NAMES:
        raise WorkbenchError(f"unknown profile '{spec}'", field=where,
                             hint="pass an index (0, 1, ...), prefill or decode")
    from workbench.core.inputs import decoder_dims

    d = decoder_dims(None, _profile_specs(profiles)) if profiles else None
    for k, prof in enumerate(profiles if d is not None else ()):
        if d.ids.name not in prof or any(s.name not in prof for s, _ in d.cache):
            continue
        ids_max = int(prof[d.ids.name][2][1])
        cache_max = max(int(prof[s.name][2][a]) for s, a in d.cache)
        if (text == "decode" and ids_max == 1) or (text == "prefill" and cache_max == 0):
            return k
    said = "; ".join(f"{k}: " + ", ".join(f"{n} {'x'.join(map(str, t[2]))}"
                                          for n, t in list(p.items())[:3])
                     for k, p in enumerate(profiles)) or "none recorded"
    raise WorkbenchError(f"no {text} profile among the engine's optimization profiles ({said})",
                         field=where, hint="pass the profile's index; a decoder built with "
                         "prefill and decode profiles has prefill (an empty cache) and decode "
                         "(one new token)")
