"""Stage 1, resolve: from what the caller gave (a model, a BuildConfig) to a BuildJob, the
settled facts every later stage reads: the model handle, the config with its default
profiles, the worker's TensorRT and the route it takes, the cache key and the files under it.

Everything the user can get wrong without TensorRT is refused here, before any work: an
output over the model, missing external data, a precision that needs calibration data or a
GPU the targets do not have, a dynamic input with no profile (`strict_profiles`).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from workbench.engines.backend import backend_info, is_cold
from workbench.engines.cache import cache_key, hash_calibration, reads_calibration
from workbench.engines.spec import BuildConfig, resolve_route
from workbench.engines.stages.profiles import default_profiles, refuse_zero_size_axes
from workbench.engines.stages.progress import OnEvent, emit, readable_progress
from workbench.core.errors import Finding, WorkbenchError
from workbench.core.model import Model, ModelLike, as_model


@dataclass(frozen=True)
class BuildJob:
    """One build, resolved: what the cache, prepare, request, translate and publish stages
    share. `on_event` is the readable relay (stages.progress); `names` its mutable wording."""

    ref: Model
    config: BuildConfig  # validated, with the default profiles where none were given
    client: Any
    on_event: OnEvent
    names: Dict[str, str]
    model_name: str
    defaulted: List[Finding]  # the default-profile and GPU-support findings
    backend: str
    version: str
    route: str
    calib_hash: Optional[str]
    key: str
    key_doc: Dict[str, Any]
    ws: Any
    engine: Path  # the cached engine's path (published there only when complete)
    meta_path: Path
    t0: float  # when the build started (time limits and the result's seconds)

    @property
    def file(self) -> Optional[str]:
        """The model's file, for errors (None for an in-memory model)."""
        return str(self.ref.path) if self.ref.path is not None else None


def resolve(model_or_path: ModelLike, config: BuildConfig, *, client: Any, output: Any,
            on_event: OnEvent, strict_profiles: bool, t0: float) -> BuildJob:
    """The BuildJob for `model_or_path` and `config` (validated by the caller)."""
    ref = as_model(model_or_path, opened=False)
    _refuse_unbuildable(ref, output)
    model_name = ref.path.name if ref.path is not None else "the in-memory model"
    names: Dict[str, str] = {}
    on_event = readable_progress(on_event, model_name, Path(output).name if output is not None
                                 else f"the cached engine of {model_name}", names)
    defaulted: List[Finding] = []
    if not config.profiles:  # dynamic inputs get default profiles, or (strict) one error
        refuse_zero_size_axes(ref)  # (first: no default profile for an axis fixed at 0)
        config, defaulted = default_profiles(ref, config, strict_profiles)
        if defaulted and on_event is not None:
            on_event({"event": "notice", "message": str(defaulted[0]),
                      "finding": defaulted[0].to_dict()})
    info, model_hash = _backend_while_hashing(ref, config, client, on_event)
    backend, version = info["backend"], info["version"]
    defaulted += gpu_support_findings(config, backend)
    route = resolve_route(config, info.get("capabilities", {}))
    if route == "strongly-typed" and config.entry.kind != "none":
        names["parsed"] = f"{model_name} ({config.precision} version)"
    calib_hash = _calibration_hash(config, route)
    key, key_doc = cache_key(model_hash, config, route, backend, version, calib_hash)
    ws = ref.workspace()
    return BuildJob(ref=ref, config=config, client=client, on_event=on_event, names=names,
                    model_name=model_name, defaulted=defaulted, backend=backend,
                    version=version, route=route, calib_hash=calib_hash, key=key,
                    key_doc=key_doc, ws=ws, engine=ws.engines_dir / f"{key[:32]}.engine",
                    meta_path=ws.engines_dir / f"{key[:32]}.json", t0=t0)


def _refuse_unbuildable(ref: Model, output: Any) -> None:
    """Refuse, before any work, an output over the model and a model whose weights TensorRT
    cannot read (external data missing, or none stored)."""
    if output is not None and ref.path is not None and \
            Path(output).resolve() == Path(ref.path).resolve():  # before any work, not after
        raise WorkbenchError("refusing to write the engine over the model", file=str(output),
                             field="output", hint="choose another -o path (e.g. "
                             f"{Path(ref.path).with_suffix('.engine').name})")
    missing = getattr(ref, "missing_external", None)
    if missing:  # before TensorRT's own words ('WeightsContext ... Failed to import initializer')
        raise WorkbenchError(
            "external-data file(s) missing: " + ", ".join(sorted(set(missing))[:4]),
            file=str(ref.path) if ref.path is not None else None,
            hint="TensorRT reads the weights from them: put the data file(s) next to the model",
            category="weights")
    if hasattr(ref, "require_weights"):
        ref.require_weights("a build")


def _backend_while_hashing(ref: Model, config: BuildConfig, client: Any, on_event: OnEvent
                           ) -> Tuple[Dict[str, Any], str]:
    """(the worker's backend_info, the model's content hash): the worker starts (and imports
    its TensorRT) on a thread while this one hashes the model and opens its workspace."""
    box: Dict[str, Any] = {}

    def _fetch() -> None:
        try:
            box["info"] = backend_info(config.backend, client)
        except BaseException as e:  # re-raised on the calling thread
            box["error"] = e

    cold = is_cold(client, config.backend)
    fetcher = threading.Thread(target=_fetch, daemon=True)
    fetcher.start()
    emit(on_event, "hashing", 0.0, str(ref.path or "<in-memory model>"))
    try:
        model_hash = ref.content_hash
        if cold:
            ref.workspace()  # while TensorRT may still be importing
    finally:
        fetcher.join()
    if "error" in box:
        raise box["error"]
    return box["info"], model_hash


def _calibration_hash(config: BuildConfig, route: str) -> Optional[str]:
    """The calibration data's hash where the build reads it; refuses a precision that needs
    calibration data without any (random data is allowed on the strongly typed route only)."""
    calib_hash = hash_calibration(config.calibration) if reads_calibration(config) else None
    if config.entry.needs_calibration and calib_hash is None and not (
            config.allow_random_calibration and route == "strongly-typed"):
        raise WorkbenchError(f"{config.precision.upper()} needs calibration data",
                             field="calibration", hint="pass --calib PATH (.npz/.npy or a "
                             "folder of representative inputs)")
    return calib_hash


def gpu_support_findings(config: BuildConfig, backend: str) -> List[Finding]:
    """A precision only newer GPUs compute (the table's `min_sm`: FP8 from Ada, sm89; BF16
    from Ampere, sm80) against the build's targets: a --target below it is an error before
    TensorRT starts; TensorRT-RTX's portable default (Ampere and later, sm86 included) a warning."""
    need = config.entry.min_sm
    if not need:
        return []
    name, cc = config.precision.upper(), f"{need // 10}.{need % 10}"
    targets = [t for t in (config.target or "").split(",") if t.startswith("sm")]
    low = [t for t in targets if int(t[2:]) < need]
    if low:
        raise WorkbenchError(f"{name} needs a GPU of compute capability {cc} or later; "
                             f"--target {', '.join(low)} has no {name}", field="target",
                             hint=f"build {name} for sm{need} or later (e.g. --target "
                                  f"sm{max(need, 89)}), or choose another precision for "
                                  f"{low[0]}")
    if not targets and backend == "tensorrt-rtx" and need > 86:
        return [Finding(
            "warning", "precision-needs-gpu",
            f"{name} needs a GPU of compute capability {cc} or later; without --target the "
            f"engine is built portable across Ampere-and-later GPUs, and Ampere (sm86) has no "
            f"{name}", source="build",
            hint=f"build for the GPUs you serve: --target sm{need} (or sm90, sm120; several "
                 "as sm89,sm120)")]
    return []
