"""Stage 3, prepare ONNX: the file TensorRT parses. On the strongly typed route precision
lives in the ONNX (the precision table's transform, `workbench.precision.transform.convert`)
and so do the requested I/O types (Casts at the I/O); on the legacy route TensorRT gets the
FP32 model and the builder lowers precision by flag. Every prepared file is a version in the
model's workspace: the user's model is never written.

Given profiles are checked against the model here, except when TensorRT gets the user's own
FP32 file: that build starts at once and the check runs beside it (stage `call`)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from workbench.engines import io_formats
from workbench.engines.failures import BuildCancelled
from workbench.engines.spec import BuildConfig
from workbench.engines.stages import profiles
from workbench.engines.stages.progress import emit
from workbench.engines.stages.resolve import BuildJob
from workbench.core.errors import Finding, WorkbenchError
from workbench.core.model import Model
from workbench.precision import table


@dataclass(frozen=True)
class PreparedOnnx:
    """The ONNX TensorRT gets, what preparing it found, and whether the profile check is
    still to run (`speculative`: beside the build, on the user's own FP32 file)."""

    path: Any  # a Path (None only if no ONNX could be named: never on a real build)
    findings: List[Finding]
    speculative: bool


def prepare_onnx(job: BuildJob, cancel: Any = None) -> PreparedOnnx:
    """The prepared ONNX for `job`'s route; raises BuildCancelled when `cancel` was set
    before TensorRT starts."""
    ref, config = job.ref, job.config
    # The profile check needs the graph (protobuf import + parse: tens of ms on a cold CLI).
    # When TensorRT gets the user's own FP32 file, the build starts at once and the check runs
    # beside it: a failing check stops the build and is what the user sees; nothing is cached.
    speculative = (ref.path is not None and config.entry.kind == "none" and
                   not config.exclude_ops)
    if not speculative:
        profiles.validate_profiles(ref, config)
    findings: List[Finding] = []
    if job.route == "strongly-typed":  # precision lives in the ONNX TensorRT gets
        onnx_path, pfind = transformed_onnx(ref, config, job.ws, job.on_event)
    else:  # legacy flags: the builder lowers precision (a fallback's flag beside the
        # quantized one: the weakly typed builder picks each layer's); TensorRT gets the FP32 model
        onnx_path, pfind = transformed_onnx(ref, config.replace(precision=table.BASE,
                                                                fallback=None), job.ws,
                                            job.on_event)
    findings += pfind
    if job.route == "strongly-typed" and (config.input_io_formats or
                                          config.output_io_formats):
        onnx_path, io_changed = io_cast_onnx(Path(str(onnx_path)), config, job.ws)
        if io_changed:
            findings.append(Finding(
                "info", "io-types", "I/O types in the ONNX TensorRT built from (a strongly "
                "typed network takes them from there): " + "; ".join(io_changed),
                source="build"))
    if cancel is not None and cancel.is_set():
        raise BuildCancelled("the build was cancelled before TensorRT started",
                             code="cancelled")
    return PreparedOnnx(path=onnx_path, findings=findings, speculative=speculative)


def transformed_onnx(ref: Model, config: BuildConfig, ws: Any, on_event: Any
                     ) -> Tuple[Optional[Path], List[Finding]]:
    """The ONNX that goes to TensorRT: the original (FP32) or the precision transform."""
    from workbench.core.model import save_model

    if config.entry.kind == "none":
        if ref.path is not None:
            return ref.path, []
        data = ref.proto.SerializeToString()
        return ws.version_path(ws.add_version(data)), []
    from workbench.precision.transform import convert

    emit(on_event, "precision", None, f"converting to {config.precision}")
    kwargs: Dict[str, Any] = config.spec.convert_kwargs()
    if config.profiles and config.calibration is not None:
        try:
            import workbench.precision.profiles  # noqa: F401  (calibration checks shapes against it)

            kwargs["profile"] = [{k: tuple(v) for k, v in p.items()} for p in config.profiles]
        except ImportError:
            pass
    model = ref
    if model.external_files and model.path is not None:  # weights streamed to the data file
        out = ws.dir / "transformed" / f"{ref.content_hash[:12]}-{config.config_hash}.onnx"
        res = convert(model, config.precision, output=out, **kwargs)
        return res.path, list(res.findings)
    res = convert(model, config.precision, **kwargs)
    try:
        data = res.proto.SerializeToString()
    except ValueError:  # over 2 GB: external data beside it
        out = ws.dir / "transformed" / f"{ref.content_hash[:12]}-{config.config_hash}.onnx"
        return save_model(res.proto, out), list(res.findings)
    vid = ws.add_version(data)
    ws.append_history({"action": "precision", "target": config.precision, "version": vid,
                       "config_hash": config.config_hash})
    return ws.version_path(vid), list(res.findings)


def io_cast_onnx(onnx_path: Path, config: BuildConfig, ws: Any) -> Tuple[Path, List[str]]:
    """The ONNX with the requested float I/O types (Casts at the I/O: `io_formats.cast_io`),
    saved as a workspace version; the same path when nothing changes. The user's model is
    never written."""
    import onnx

    proto = onnx.load(str(onnx_path), load_external_data=False)
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer):
        raise WorkbenchError("I/O types on a strongly typed build of a model with external "
                             "data are not supported yet", file=str(onnx_path),
                             field="input_io_formats", hint="add Casts at the I/O in the ONNX "
                             "yourself, or build without --input-io-formats/--output-io-formats")
    proto, changed = io_formats.cast_io(proto, config.input_io_formats,
                                        config.output_io_formats)
    if not changed:
        return onnx_path, []
    vid = ws.add_version(proto.SerializeToString())
    ws.append_history({"action": "io-types", "version": vid, "changes": changed,
                       "config_hash": config.config_hash})
    return ws.version_path(vid), changed
