"""The `build` op's request, one typed object for both ends (Python 3.9, stdlib only).

The client (workbench.engines) fills a BuildRequest with everything the worker needs: the
prepared ONNX, where to write the engine, the route and what the precision table decided for
it (builder flag, calibrator, layer precisions), profiles, builder knobs, the timing cache.
`to_args()` is what goes over the protocol (JSON); the worker's op rebuilds the object with
`from_args()`, so a field is named, typed and defaulted in one place. Frozen: a request is
what was asked, never edited on the way (`dataclasses.replace` makes a changed copy).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Mapping, Optional, Tuple

Profile = Dict[str, List[List[int]]]  # {input: [min, opt, max]}
IOFormats = Tuple[Any, ...]  # [[type, [formats...]], ...] per I/O tensor, or one for all

# fields that are sequences: tuples in the object (frozen all the way down to the list),
# lists on the wire
_SEQUENCES = ("profiles", "plugins", "extra_flags", "tactic_sources", "input_io_formats",
              "output_io_formats")


@dataclasses.dataclass(frozen=True)
class BuildRequest:
    """One engine build for the worker: ONNX at `onnx_path` -> serialized engine at
    `engine_path` (the client renames it into the cache when complete)."""

    onnx_path: str
    engine_path: str
    backend: str = "auto"
    route: str = "strongly-typed"  # or "legacy-flags": the builder lowers precision by flag
    precision: str = ""  # for messages only: the worker knows no precision names
    builder_flag: Optional[str] = None  # legacy route: the BuilderFlag the table names
    calibrate: bool = False  # legacy route: feed a calibrator (calib_npz / calib_cache)
    profiles: Optional[Tuple[Profile, ...]] = None
    workspace_bytes: Optional[int] = None
    optimization_level: Optional[int] = None
    timing_cache: Optional[str] = None
    target: Optional[str] = None  # compute capabilities ahead of time ("sm89,sm120")
    plugins: Optional[Tuple[str, ...]] = None  # absolute paths of plugin libraries
    extra_flags: Optional[Tuple[str, ...]] = None  # BuilderFlag names
    # ONNX node name -> TensorRT DataType attribute name ("*": every other float layer),
    # weakly typed networks only, held to with `precision_constraints` ("obey" | "prefer")
    layer_precisions: Optional[Dict[str, str]] = None
    precision_constraints: str = "obey"
    calib_npz: Optional[str] = None  # batches, keys 'b<i>:<input>'
    calib_cache: Optional[str] = None
    calibrate_method: str = "entropy"
    tactic_sources: Optional[Tuple[str, ...]] = None  # None: TensorRT's default sources
    keep_log: str = "info"
    report_layers: bool = True
    test_step_delay: float = 0.0  # seconds per builder step (tests and demos of progress)
    hardware_compatibility: Optional[str] = None
    tf32: Optional[bool] = None  # None: TensorRT's default
    input_io_formats: Optional[IOFormats] = None
    output_io_formats: Optional[IOFormats] = None
    # IBuilderConfig attributes by name (max_aux_streams, ...): set where this TensorRT has
    # them, refused naming the field where it does not (ops_build.set_config_attributes)
    config_attributes: Optional[Dict[str, Any]] = None

    def to_args(self) -> Dict[str, Any]:
        """The request as the protocol carries it (JSON types: lists, not tuples)."""
        out: Dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in _SEQUENCES and value is not None:
                value = [list(v) if isinstance(v, tuple) else v for v in value]
            elif isinstance(value, dict):
                value = dict(value)
            out[f.name] = value
        return out

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> "BuildRequest":
        """The request from the protocol's args; a missing or unknown field is a TypeError
        naming it (like a call with a wrong keyword)."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(args) - known)
        if unknown:
            raise TypeError("build request: unknown field(s) %s" % ", ".join(unknown))
        fixed = {k: (tuple(v) if k in _SEQUENCES and v is not None else v)
                 for k, v in args.items()}
        return cls(**fixed)

    @property
    def strongly_typed(self) -> bool:
        """Is the network to be strongly typed (precision in the ONNX)?"""
        return self.route == "strongly-typed"

    @property
    def legacy_flags(self) -> bool:
        """Does the builder lower precision by flag (TensorRT <= 10's route)?"""
        return self.route == "legacy-flags"
