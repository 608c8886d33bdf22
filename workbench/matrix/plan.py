"""The variant matrix's plan: every (model, precision, target, profile, optimization level)
a matrix builds, each a `Variant` with a stable id and the `BuildConfig` it builds with.

A profile axis entry is one optimization profile written for any of the models:
{input name: [min, opt, max]}; each model keeps the inputs it has (so one entry can serve a
CNN's `input` and a BERT's `input_ids`/`attention_mask`). Calibration and accuracy data are
per model (`data_for`). Plain data (JSON) throughout: variants travel to Ray tasks as dicts.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Union

from workbench.core.errors import WorkbenchError

Profile = Dict[str, List[List[int]]]
NATIVE = "native"  # the target name of "no --target": the GPU the build runs on


@dataclass
class Variant:
    """One engine of the matrix: what to build and with which settings."""

    model: str                       # absolute ONNX path
    precision: str
    target: Optional[str] = None     # "sm89" (TensorRT-RTX ahead of time) or None (this GPU)
    profile_name: str = "default"
    profiles: List[Profile] = field(default_factory=list)
    opt_level: Optional[int] = None
    calibration: Optional[str] = None
    backend: str = "auto"
    build: Dict[str, Any] = field(default_factory=dict)  # more BuildConfig fields (tactic_sources, ...)
    # a quantized precision's float fallback ("fp16": INT8 where Q/DQ sits, FP16 elsewhere,
    # TensorRT <= 10's `--int8 --fp16`); None: a uniform variant
    fallback: Optional[str] = None

    @property
    def model_name(self) -> str:
        return Path(self.model).stem

    @property
    def label(self) -> str:
        """The precision as the matrix names it: "int8", or "int8+fp16" with a fallback."""
        from workbench.precision.spec import precision_label

        return precision_label(self.precision, self.fallback)

    @property
    def id(self) -> str:
        """Stable and readable: `resnet_tiny-fp16-sm89-default-o3-<hash6>` (`int8_fp16` for
        INT8 with an FP16 fallback; the hash covers everything, so two models with one file
        name never share an id)."""
        opt = "odef" if self.opt_level is None else f"o{self.opt_level}"
        text = "-".join([self.model_name, self.label, self.target or NATIVE,
                         self.profile_name, opt])
        digest = hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()
                                ).hexdigest()[:6]
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", text) + "-" + digest

    def config(self) -> Any:
        """The BuildConfig this variant builds with (validated)."""
        from workbench.engines.spec import BuildConfig

        kw: Dict[str, Any] = dict(precision=self.precision, target=self.target,
                                  profiles=self.profiles, backend=self.backend,
                                  builder_optimization_level=self.opt_level)
        if self.fallback:
            kw["fallback"] = self.fallback
        kw.update(self.build)
        if self.calibration:
            from workbench.precision import table

            if table.get(self.precision).needs_calibration:
                kw["calibration"] = self.calibration
        return BuildConfig(**kw)

    def to_dict(self) -> Dict[str, Any]:
        """Every field; `fallback` only when set (a uniform variant keeps the dict, and so the
        id, it had before variants had fallbacks: an older matrix resumes)."""
        d = asdict(self)
        if d["fallback"] is None:
            del d["fallback"]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Variant":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def data_for(model: Union[str, Path], data: Any) -> Optional[str]:
    """The data file for `model` from `data`: None, one path for every model, or a mapping
    {model file stem or path: path}."""
    if data is None:
        return None
    if isinstance(data, (str, Path)):
        return str(Path(data).resolve())
    p = Path(model)
    for key in (str(p), p.name, p.stem):
        if key in data:
            return str(Path(data[key]).resolve())
    return None


def parse_data_args(items: Sequence[str], flag: str) -> Any:
    """CLI `--calib PATH` or `--calib MODEL=PATH` (repeatable): one path for all models, or a
    mapping by model file stem."""
    if not items:
        return None
    plain = [i for i in items if "=" not in i]
    named = dict(i.split("=", 1) for i in items if "=" in i)
    if plain and (named or len(plain) > 1):
        raise WorkbenchError(f"{flag}: give one PATH for every model, or MODEL=PATH per model",
                             field=flag, hint=f"e.g. {flag} resnet_tiny=calib/resnet.npz")
    for k, v in ({"": plain[0]} if plain else named).items():
        if not Path(v).exists():
            raise WorkbenchError(f"{flag} data not found", file=v, field=flag,
                                 hint="check the path")
    return plain[0] if plain else named


def _model_inputs(model: str) -> List[str]:
    from workbench.core.inputs import model_inputs
    from workbench.core.model import open_model

    return [s.name for s in model_inputs(open_model(model))]


def _restrict(profile: Profile, inputs: Sequence[str]) -> Profile:
    return {k: v for k, v in profile.items() if k in inputs}


def plan_matrix(models: Iterable[Union[str, Path]], precisions: Sequence[str],
                targets: Sequence[Optional[str]] = (None,), *,
                profiles: Optional[Mapping[str, Sequence[Profile]]] = None,
                opt_levels: Sequence[Optional[int]] = (None,), calibration: Any = None,
                backend: str = "auto", build: Optional[Mapping[str, Any]] = None
                ) -> List[Variant]:
    """Every combination, in a stable order (model, precision, target, profile, level).

    `profiles`: {name: [profile, ...]} (each entry the optimization profiles of one engine;
    each model keeps the inputs it has); `calibration`: a path or {model stem: path};
    `targets`: "sm89", ... or None for the GPU the build runs on; `build`: more BuildConfig
    fields for every variant (e.g. tactic_sources, workspace_bytes). A precision is a
    target of the table or TARGET+FALLBACK ("int8+fp16": INT8 where Q/DQ sits, FP16
    elsewhere; `workbench.precision.spec.parse_precision`)."""
    from workbench.precision import table
    from workbench.precision.spec import parse_precision, precision_label

    out: List[Variant] = []
    prof_axis = dict(profiles) if profiles else {"default": []}
    precs = [parse_precision(p) for p in precisions]
    if not precs:
        raise WorkbenchError("no precision to build", field="precision",
                             hint="e.g. --precision fp32,fp16,int8")
    for m in models:
        path = Path(m)
        if not path.is_file():
            raise WorkbenchError("model not found", file=str(path), hint="check the path")
        path = path.resolve()
        names = _model_inputs(str(path)) if profiles else []
        calib = data_for(path, calibration)
        for prec, fallback in precs:
            if table.get(prec).needs_calibration and calib is None:
                raise WorkbenchError(f"{precision_label(prec, fallback).upper()} needs "
                                     f"calibration data for {path.name}",
                                     field="calibration", file=str(path),
                                     hint=f"pass --calib {path.stem}=DATA.npz")
            for target in targets:
                t = None if target in (None, "", NATIVE) else str(target).strip().lower()
                for pname, plist in prof_axis.items():
                    mine = [r for r in (_restrict(p, names) for p in plist) if r]
                    for level in opt_levels:
                        v = Variant(str(path), prec, t, pname, mine,
                                    None if level is None else int(level), calib, backend,
                                    dict(build or {}), fallback)
                        v.config()  # every field checked before anything runs
                        out.append(v)
    ids = [v.id for v in out]
    if len(set(ids)) != len(ids):
        raise WorkbenchError("the matrix names the same variant twice", field="matrix",
                             hint="drop the repeated precision/target/profile")
    return out
