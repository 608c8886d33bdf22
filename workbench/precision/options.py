"""Command-line options as objects: `CliOption` (a flag, its argparse keywords and the spec
field it fills) and the precision options `workbench precision` and `workbench build` share.

A verb adds the options it takes with `add_arguments(parser, names)`; the flags, their help
and their defaults are written once, here, not in each verb. The build options
(`workbench.engines.options`) extend `CliOption` with their renderings (trtexec, Polygraphy,
the standalone script, the worker's request)."""
from __future__ import annotations

from typing import Any, Dict, Iterable, Optional, Sequence, Tuple

from workbench.precision import table


class CliOption:
    """One option's command line: `flags` (the first names it), `arg` (argparse keywords
    besides help), `help`, and `field`, the spec field its value fills. (A plain class, not
    a dataclass: the CLI's parsers are built from these and must stay cheap to import.)"""

    def __init__(self, field: str, flags: Tuple[str, ...], help: str = "",
                 arg: Optional[Dict[str, Any]] = None) -> None:
        self.field, self.flags, self.help, self.arg = field, tuple(flags), help, dict(arg or {})

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.field!r}, {self.flags!r})"

    @property
    def dest(self) -> str:
        """The argparse attribute the value lands in."""
        return str(self.arg.get("dest") or self.flags[0].lstrip("-").replace("-", "_"))

    @property
    def flag(self) -> str:
        """The flag an error names."""
        return self.flags[0]

    def add_arguments(self, parser: Any) -> None:
        """Add this option's flag(s) to an argparse parser."""
        kw = dict(self.arg)
        if callable(kw.get("choices")):  # (choices read when the parser is made: a table row
            kw["choices"] = list(kw["choices"]())  # added at run time is offered)
        parser.add_argument(*self.flags, help=self.help or None, **kw)

    def given(self, args: Any) -> Optional[Any]:
        """The value on the command line, or None when the flag was left out (an empty list,
        an unset flag: defaults do not override a --config file)."""
        v = getattr(args, self.dest, None)
        return None if v is None or v == [] else v


def add_arguments(parser: Any, options: Iterable[CliOption],
                  names: Optional[Sequence[str]] = None) -> None:
    """Add `options` (those whose field is in `names`, when given, in that order) to
    `parser`."""
    opts = list(options)
    if names is not None:
        by_field = {o.field: o for o in opts}
        opts = [by_field[n] for n in names]
    for o in opts:
        o.add_arguments(parser)


def _calibrate_methods() -> Sequence[str]:
    return table.CALIBRATE_METHODS


def _float_targets() -> Sequence[str]:
    return [n for n in table.names() if table.is_low_float(n)]


class _KeepIO(CliOption):
    """--keep-io (the default) / --no-keep-io, one field."""

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--keep-io", dest="keep_io", action="store_true", default=True,
                            help="keep inputs/outputs in FP32 (default)")
        parser.add_argument("--no-keep-io", dest="keep_io", action="store_false",
                            help="let inputs/outputs take the target type (FP16/BF16)")


# the PrecisionSpec fields a verb takes on its command line (`PrecisionSpec.from_args` reads
# them by these argparse names); the target is each verb's own (--to, --precision)
PRECISION_OPTIONS: Tuple[CliOption, ...] = (
    CliOption("exclude_nodes", ("--exclude",), "keep this node in FP32 (repeatable)",
              dict(action="append", default=[], metavar="NODE")),
    CliOption("exclude_ops", ("--exclude-op",),
              "keep every node of this op type in FP32 (repeatable)",
              dict(action="append", default=[], metavar="OP")),
    CliOption("calibration", ("--calib",),
              "calibration data: .npz (keys = input names), .npy, or a folder of them",
              dict(metavar="PATH")),
    CliOption("calibrate_method", ("--calib-method",), "",
              dict(default="entropy", choices=_calibrate_methods)),
    CliOption("allow_random", ("--allow-random",),
              "calibrate on random data when no --calib (scales will be meaningless)",
              dict(action="store_true")),
    _KeepIO("keep_io_types", ("--keep-io", "--no-keep-io"), arg=dict(dest="keep_io")),
    CliOption("per_channel", ("--no-per-channel",), "per-tensor weight scales for INT8/FP8",
              dict(dest="per_channel", action="store_false", default=True)),
    CliOption("fallback", ("--fallback",),
              "INT8/FP8: compute the nodes without Q/DQ in this float precision instead of "
              "FP32 (TensorRT <= 10's --int8 --fp16); excluded nodes stay FP32",
              dict(metavar="FLOAT", choices=_float_targets)),
)
# the ones `workbench build` takes too (the rest keep PrecisionSpec's defaults there)
BUILD_PRECISION_FIELDS = ("exclude_nodes", "exclude_ops", "calibration", "calibrate_method",
                          "fallback")
