"""Build options that own themselves: one object per option holds its CLI flag(s), its
BuildConfig field, its validation, its trtexec and Polygraphy rendering (and how trtexec's
flag reads back), its lines in the standalone script and what the worker's build request gets.

The verbs compose them: `workbench build`, `matrix` and `timing-capture` add their flags with
`add_arguments`, read them with `overrides`; `BuildConfig.validate` calls each option's
`validate`; the exports iterate `OPTIONS`. Adding an option is one `Option` in `OPTIONS`
(its field joins BuildConfig's JSON, left out while unset so older configs keep their hash).

    # an integer IBuilderConfig attribute: flag, field, checks and every rendering at once
    ConfigAttribute("max_things", ("--max-things",), "help", trtexec_flag="--maxThings")
    # anything else: a subclass of Option overriding what it renders
"""
from __future__ import annotations

import argparse
import re
import shlex
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from workbench.engines import io_formats
from workbench.core.errors import WorkbenchError
from workbench.precision.options import CliOption

# HardwareCompatibilityLevel members by their config name (TensorRT >= 8.6; not TensorRT-RTX)
HARDWARE_COMPATIBILITY = ("none", "ampere_plus", "same_compute_capability")


class Render(NamedTuple):
    """What a rendering depends on besides the config: the route resolved, the backend."""

    route: str = "strongly-typed"
    backend: str = "tensorrt"


class ScriptPart:
    """An option's share of the standalone script: module-level constants and helpers, lines
    run before the builder is made (`start`), on the parsed network (`network`) and on the
    builder config (`config`); unindented (the script indents them)."""

    def __init__(self, constants: Optional[List[str]] = None, helpers: str = "",
                 start: Optional[List[str]] = None, network: Optional[List[str]] = None,
                 config: Optional[List[str]] = None) -> None:
        self.constants, self.helpers = list(constants or []), helpers
        self.start, self.network = list(start or []), list(network or [])
        self.config = list(config or [])


def q(s: Any) -> str:
    """Quoted for a shell line."""
    return shlex.quote(str(s))


class Option(CliOption):
    """One build option. `default`: the field's value when unset (a fresh list for []);
    `optional`: left out of the JSON (and so of the config hash and the cache key) while
    None, so configs written before the option existed keep their hash. Subclasses override
    what they render; the base renders nothing."""

    def __init__(self, field: str, flags: Tuple[str, ...], help: str = "",
                 arg: Optional[Dict[str, Any]] = None, *, default: Any = None,
                 optional: bool = True) -> None:
        super().__init__(field, flags, help, arg)
        self.default, self.optional = default, optional

    @property
    def fields(self) -> Tuple[str, ...]:
        """The BuildConfig fields this option owns."""
        return (self.field,)

    def default_value(self) -> Any:
        return [] if self.default == [] else self.default

    # -- command line -----------------------------------------------------------------------
    def overrides(self, args: Any) -> Dict[str, Any]:
        """The fields the command line sets (nothing when the flag was left out)."""
        v = self.given(args)
        return {} if v is None else {self.field: self.from_cli(v)}

    def from_cli(self, value: Any) -> Any:
        """The flag's text as the field's value (errors name the flag)."""
        return value

    # -- the spec ---------------------------------------------------------------------------
    def validate(self, config: Any) -> None:
        """Normalise this option's field(s) on `config`; WorkbenchError names the field."""
        for name in self.fields:
            v = getattr(config, name)
            if v is not None:
                setattr(config, name, self.check(v))

    def check(self, value: Any) -> Any:
        """A set (not None) value normalised, or WorkbenchError naming the field."""
        return value

    # -- renderings -------------------------------------------------------------------------
    def trtexec(self, config: Any, how: Render) -> List[str]:
        """The trtexec / tensorrt_rtx arguments for this option."""
        return []

    def read_trtexec(self, key: str, value: str, d: Dict[str, Any]) -> bool:
        """Read one trtexec argument (`key`=`value`) into the config dict `d`; True when it
        was this option's."""
        return False

    def polygraphy(self, config: Any, how: Render) -> List[str]:
        """The `polygraphy convert` arguments for this option."""
        return []

    def script(self, config: Any, how: Render) -> ScriptPart:
        """This option's lines in the standalone script."""
        return ScriptPart()

    def worker(self, config: Any, how: Render) -> Dict[str, Any]:
        """The fields of the worker's `build` request for this option."""
        return {}

    def notes(self, config: Any, how: Render) -> List[str]:
        """Notes the export adds for this option (what a line cannot say)."""
        return []


# --------------------------------------------------------------------------------------------
# memory sizes (trtexec's grammar)
# --------------------------------------------------------------------------------------------
def mem_text(n: int) -> str:
    """Bytes as trtexec writes a size: 512M, 2G, 4K or 100B."""
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n % size == 0:
            return f"{n // size}{unit}"
    return f"{n}B"


def parse_mem(text: str) -> int:
    """'512M', '2G', '1024' (MiB) -> bytes; WorkbenchError otherwise."""
    m = re.fullmatch(r"([0-9.]+)([BKMG]?)", text.strip(), re.I)
    if not m:
        raise WorkbenchError(f"bad memory size '{text}'", field="memPoolSize")
    mult = {"B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "": 1 << 20}[m.group(2).upper()]
    return int(round(float(m.group(1)) * mult))


def _csv(text: str) -> List[str]:
    return [t for t in text.replace(" ", "").split(",") if t]


# --------------------------------------------------------------------------------------------
# the options
# --------------------------------------------------------------------------------------------
class Workspace(Option):
    def from_cli(self, value: Any) -> Any:
        try:
            return parse_mem(value)
        except WorkbenchError:
            raise WorkbenchError(f"bad {self.flag} '{value}'", field="workspace",
                                 hint="e.g. 512M, 2G or a number of MiB") from None

    def check(self, value: Any) -> Any:
        value = int(value)
        if value <= 0:
            raise WorkbenchError("workspace must be a positive number of bytes",
                                 field=self.field)
        return value

    def trtexec(self, config: Any, how: Render) -> List[str]:
        n = config.workspace_bytes
        return [f"--memPoolSize=workspace:{mem_text(n)}"] if n else []

    def read_trtexec(self, key: str, value: str, d: Dict[str, Any]) -> bool:
        if key != "--memPoolSize":
            return False
        for part in value.split(","):
            pool, _, size = part.partition(":")
            if pool == "workspace":
                d[self.field] = parse_mem(size)
        return True

    def polygraphy(self, config: Any, how: Render) -> List[str]:
        n = config.workspace_bytes
        return ["--pool-limit", f"workspace:{n}"] if n else []

    def script(self, config: Any, how: Render) -> ScriptPart:
        return ScriptPart(
            constants=[f"WORKSPACE_BYTES = {config.workspace_bytes!r}"],
            config=["if WORKSPACE_BYTES:",
                    "    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, "
                    "WORKSPACE_BYTES)"])

    def worker(self, config: Any, how: Render) -> Dict[str, Any]:
        return {"workspace_bytes": config.workspace_bytes}


class OptLevel(Option):
    def check(self, value: Any) -> Any:
        value = int(value)
        if not 0 <= value <= 5:
            raise WorkbenchError("builder optimization level must be 0..5", field=self.field,
                                 hint="e.g. --opt-level 3 (TensorRT's default)")
        return value

    def trtexec(self, config: Any, how: Render) -> List[str]:
        v = config.builder_optimization_level
        return [] if v is None else [f"--builderOptimizationLevel={v}"]

    def read_trtexec(self, key: str, value: str, d: Dict[str, Any]) -> bool:
        if key != "--builderOptimizationLevel":
            return False
        d[self.field] = int(value)
        return True

    def polygraphy(self, config: Any, how: Render) -> List[str]:
        v = config.builder_optimization_level
        return [] if v is None else ["--builder-optimization-level", str(v)]

    def script(self, config: Any, how: Render) -> ScriptPart:
        return ScriptPart(constants=[f"OPT_LEVEL = {config.builder_optimization_level!r}"],
                          config=["if OPT_LEVEL is not None:",
                                  "    config.builder_optimization_level = OPT_LEVEL"])

    def worker(self, config: Any, how: Render) -> Dict[str, Any]:
        return {"optimization_level": config.builder_optimization_level}


class TimingCache(Option):
    def check(self, value: Any) -> Any:
        return str(value)

    def trtexec(self, config: Any, how: Render) -> List[str]:
        return [f"--timingCacheFile={q(config.timing_cache)}"] if config.timing_cache else []

    def read_trtexec(self, key: str, value: str, d: Dict[str, Any]) -> bool:
        if key != "--timingCacheFile":
            return False
        d[self.field] = value
        return True

    def polygraphy(self, config: Any, how: Render) -> List[str]:
        t = config.timing_cache
        return ["--load-timing-cache", q(t), "--save-timing-cache", q(t)] if t else []


class Target(Option):
    def check(self, value: Any) -> Any:
        t = str(value).strip().lower()
        parts = [p.strip() for p in t.replace(";", ",").split(",") if p.strip()]
        for p in parts:
            if not (p == "current" or (p.startswith("sm") and p[2:].isdigit())):
                raise WorkbenchError(f"target '{p}' is not a compute capability like 'sm89'",
                                     field=self.field, hint="e.g. --target sm89 (RTX 40xx), "
                                     "sm86, sm120; several as sm86,sm89")
        return ",".join(parts) or None

    def script(self, config: Any, how: Render) -> ScriptPart:
        targets = [t for t in (config.target or "").split(",") if t and t != "current"]
        return ScriptPart(
            constants=[f"TARGETS = {targets!r}"
                       "                 # TensorRT-RTX ahead-of-time compute capabilities"],
            config=["if TARGETS and hasattr(trt, 'ComputeCapability'):",
                    "    config.num_compute_capabilities = len(TARGETS)",
                    "    for i, t in enumerate(TARGETS):",
                    "        config.set_compute_capability(getattr(trt.ComputeCapability, "
                    "t.upper()), i)"])

    def worker(self, config: Any, how: Render) -> Dict[str, Any]:
        return {"target": config.target}


class Plugins(Option):
    def validate(self, config: Any) -> None:
        config.plugins = [str(p) for p in config.plugins]

    def trtexec(self, config: Any, how: Render) -> List[str]:
        flag = "--plugins=" if how.route == "legacy-flags" else "--staticPlugins="
        return [flag + q(p) for p in config.plugins]

    def read_trtexec(self, key: str, value: str, d: Dict[str, Any]) -> bool:
        if key not in ("--plugins", "--staticPlugins", "--dynamicPlugins"):
            return False
        d.setdefault(self.field, []).append(value)
        return True

    def polygraphy(self, config: Any, how: Render) -> List[str]:
        return ["--plugins"] + [q(p) for p in config.plugins] if config.plugins else []

    def script(self, config: Any, how: Render) -> ScriptPart:
        import os

        libs = [os.path.abspath(str(x)) for x in config.plugins]
        return ScriptPart(constants=[f"PLUGINS = {libs!r}"],
                          start=["import ctypes", "for lib in PLUGINS:", "    ctypes.CDLL(lib)"])

    def worker(self, config: Any, how: Render) -> Dict[str, Any]:
        from pathlib import Path  # (absolute: the worker's folder may differ)

        return {"plugins": [str(Path(p).resolve()) for p in config.plugins]}


# BuilderFlag -> trtexec flag, for the extra flags trtexec has one for
FLAG_TO_TRTEXEC = {"REFIT": "--refit", "SPARSE_WEIGHTS": "--sparsity=enable",
                   "VERSION_COMPATIBLE": "--versionCompatible", "STRIP_PLAN": "--stripWeights",
                   "DIRECT_IO": "--directIO", "WEIGHT_STREAMING": "--weightStreaming"}
_TRTEXEC_TO_FLAG = {v: k for k, v in FLAG_TO_TRTEXEC.items()}


class ExtraFlags(Option):
    def validate(self, config: Any) -> None:
        config.extra_flags = [str(f).upper() for f in config.extra_flags]

    def trtexec(self, config: Any, how: Render) -> List[str]:
        return [FLAG_TO_TRTEXEC[f] for f in config.extra_flags if f in FLAG_TO_TRTEXEC]

    def read_trtexec(self, key: str, value: str, d: Dict[str, Any]) -> bool:
        arg = f"{key}={value}" if value else key
        flag = _TRTEXEC_TO_FLAG.get(arg, _TRTEXEC_TO_FLAG.get(key))
        if flag is None:
            return False
        d.setdefault(self.field, []).append(flag)
        return True

    def worker(self, config: Any, how: Render) -> Dict[str, Any]:
        return {"extra_flags": list(config.extra_flags)}


class TacticSources(Option):
    def from_cli(self, value: Any) -> Any:
        return _csv(value)

    def check(self, value: Any) -> Any:
        if isinstance(value, str):
            value = _csv(value)
        return [str(t).upper() for t in value]

    def trtexec(self, config: Any, how: Render) -> List[str]:
        ts = config.tactic_sources
        return [] if ts is None else ["--tacticSources=" + ",".join("+" + t for t in ts)]

    def read_trtexec(self, key: str, value: str, d: Dict[str, Any]) -> bool:
        if key != "--tacticSources":
            return False
        d[self.field] = [t[1:] for t in value.split(",") if t.startswith("+")]
        return True

    def polygraphy(self, config: Any, how: Render) -> List[str]:
        ts = config.tactic_sources
        return [] if ts is None else ["--tactic-sources"] + list(ts)

    def script(self, config: Any, how: Render) -> ScriptPart:
        return ScriptPart(
            constants=[f"TACTIC_SOURCES = {config.tactic_sources!r}"
                       "          # None = TensorRT's default set"],
            config=["if TACTIC_SOURCES is not None:", "    mask = 0",
                    "    for t in TACTIC_SOURCES:",
                    "        mask |= 1 << int(getattr(trt.TacticSource, t))",
                    "    config.set_tactic_sources(mask)"])

    def worker(self, config: Any, how: Render) -> Dict[str, Any]:
        return {"tactic_sources": config.tactic_sources}


class HardwareCompat(Option):
    def check(self, value: Any) -> Any:
        hw = str(value).strip().lower().replace("-", "_")
        hw = {"ampere+": "ampere_plus", "ampere": "ampere_plus"}.get(hw, hw)
        if hw not in HARDWARE_COMPATIBILITY:
            raise WorkbenchError(f"unknown hardware compatibility '{value}'", field=self.field,
                                 hint="one of " + ", ".join(HARDWARE_COMPATIBILITY))
        return hw

    def trtexec(self, config: Any, how: Render) -> List[str]:
        # (trtexec 8.6+: none | ampere+)
        return (["--hardwareCompatibilityLevel=ampere+"]
                if config.hardware_compatibility == "ampere_plus" else [])

    def read_trtexec(self, key: str, value: str, d: Dict[str, Any]) -> bool:
        if key != "--hardwareCompatibilityLevel":
            return False
        d[self.field] = "ampere_plus" if value == "ampere+" else value
        return True

    def script(self, config: Any, how: Render) -> ScriptPart:
        hw = (config.hardware_compatibility or "").upper() or None
        return ScriptPart(
            constants=[f"HARDWARE_COMPAT = {hw!r}"
                       "        # e.g. \"AMPERE_PLUS\": run on other GPUs (TensorRT >= 8.6)"],
            config=["if HARDWARE_COMPAT:",
                    "    config.hardware_compatibility_level = getattr(",
                    "        trt.HardwareCompatibilityLevel, HARDWARE_COMPAT)"])

    def worker(self, config: Any, how: Render) -> Dict[str, Any]:
        hw = config.hardware_compatibility
        return {"hardware_compatibility": hw} if hw else {}


class TF32(Option):
    """TF32 as the builder gets it is `config.effective_tf32` (off for an FP32 engine)."""

    def check(self, value: Any) -> Any:
        if not isinstance(value, bool):
            raise WorkbenchError(f"tf32 must be true, false or null, not {value!r}",
                                 field=self.field, hint="--tf32 or --no-tf32")
        return value

    def trtexec(self, config: Any, how: Render) -> List[str]:
        # (trtexec: TF32 is on unless --noTF32; tensorrt_rtx has no TF32 flag)
        return ["--noTF32"] if config.effective_tf32 is False and \
            how.backend != "tensorrt-rtx" else []

    def read_trtexec(self, key: str, value: str, d: Dict[str, Any]) -> bool:
        if key != "--noTF32":
            return False
        d[self.field] = False
        return True

    def polygraphy(self, config: Any, how: Render) -> List[str]:
        # (Polygraphy leaves TF32 off unless asked)
        return [] if config.effective_tf32 is False else ["--tf32"]

    def script(self, config: Any, how: Render) -> ScriptPart:
        return ScriptPart(
            constants=[f"TF32 = {config.effective_tf32!r}"
                       "                       # True / False: set / clear TF32; None: "
                       "TensorRT's default"],
            config=["if TF32 is not None and getattr(trt.BuilderFlag, 'TF32', None) is not "
                    "None:",
                    "    (config.set_flag if TF32 else config.clear_flag)(trt.BuilderFlag.TF32)"])

    def worker(self, config: Any, how: Render) -> Dict[str, Any]:
        t = config.effective_tf32
        return {} if t is None else {"tf32": t}


_SET_IO_FORMATS = '''
def set_io_formats(network):
    types = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "int8": "int8"}
    for side, count, get in (("inputs", network.num_inputs, network.get_input),
                             ("outputs", network.num_outputs, network.get_output)):
        spec = IO_FORMATS.get(side)
        for k in range(count if spec else 0):
            t = get(k)
            if str(t.dtype).split(".")[-1].upper() not in ("FLOAT", "HALF", "BF16"):
                continue  # integer / bool tensors keep their type
            dtype, formats = spec[0] if len(spec) == 1 else spec[k]
            if not STRONGLY_TYPED:  # strongly typed: the type is in the ONNX (Casts at the I/O)
                t.dtype = getattr(trt, types[dtype])
            if len(t.shape) >= 3 or formats == ["chw"]:
                t.allowed_formats = sum(
                    1 << int(getattr(trt.TensorFormat, "LINEAR" if f == "chw" else f.upper()))
                    for f in formats)
'''


class IOFormats(Option):
    """Input and output types/formats in trtexec's grammar ("fp16:hwc8"): one option, two
    fields and two flags (--input-io-formats, --output-io-formats)."""

    @property
    def fields(self) -> Tuple[str, ...]:
        return ("input_io_formats", "output_io_formats")

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--input-io-formats", metavar="TYPE:FMT[,..]",
            help="engine input types/formats as trtexec's --inputIOFormats, e.g. fp16:hwc8 "
                 "(one for all float inputs, or one per input in order): an FP16 engine with "
                 "FP16 channels-last I/O skips its I/O reformat layers")
        parser.add_argument(
            "--output-io-formats", metavar="TYPE:FMT[,..]",
            help="engine output types/formats as trtexec's --outputIOFormats, e.g. fp16:chw")

    def overrides(self, args: Any) -> Dict[str, Any]:
        return {n: getattr(args, n) for n in self.fields if getattr(args, n, None)}

    def validate(self, config: Any) -> None:
        for n in self.fields:
            setattr(config, n, io_formats.normalise(getattr(config, n), n))

    def _pairs(self, config: Any) -> List[Tuple[str, str, str]]:
        return [(n, flag, v) for n, flag in zip(self.fields, ("--inputIOFormats",
                                                              "--outputIOFormats"))
                for v in [getattr(config, n)] if v]

    def trtexec(self, config: Any, how: Render) -> List[str]:
        return [f"{flag}={v}" for _, flag, v in self._pairs(config)]

    def read_trtexec(self, key: str, value: str, d: Dict[str, Any]) -> bool:
        name = {"--inputIOFormats": "input_io_formats",
                "--outputIOFormats": "output_io_formats"}.get(key)
        if name is None:
            return False
        d[name] = value
        return True

    def script(self, config: Any, how: Render) -> ScriptPart:
        spec = {k: [[t, list(f)] for t, f in (io_formats.parse(v) or [])]
                for k, v in (("inputs", config.input_io_formats),
                             ("outputs", config.output_io_formats)) if v}
        return ScriptPart(
            constants=[
                "# I/O types/formats (trtexec's --inputIOFormats/--outputIOFormats): per "
                "tensor or one for all,",
                "# float tensors only. A vectorized format (HWC8, CHW16...) means the caller's "
                "buffers hold that",
                "# layout: run() below feeds linear arrays, so convert to it first (HWC8: "
                "channels last, padded",
                "# to 8) or leave the format out",
                f"IO_FORMATS = {spec!r}"],
            helpers=_SET_IO_FORMATS, network=["set_io_formats(network)"])

    def worker(self, config: Any, how: Render) -> Dict[str, Any]:
        return {n: io_formats.for_worker(v) for n, _, v in self._pairs(config)}

    def notes(self, config: Any, how: Render) -> List[str]:
        if not (config.input_io_formats or config.output_io_formats):
            return []
        return ["I/O formats (" + ", ".join(
            f"{w} {v}" for w, v in (("inputs", config.input_io_formats),
                                    ("outputs", config.output_io_formats)) if v) +
            "): the trtexec line sets them with --inputIOFormats/--outputIOFormats; "
            "Polygraphy's convert has no such option (the script sets ITensor.dtype/"
            "allowed_formats; the ONNX named here already carries the I/O Casts on strongly "
            "typed builds); a vectorized format (hwc8, chw16...) means the caller feeds "
            "and reads that layout: channels last padded to 8 for hwc8, blocks of 16 channels "
            "for chw16 (trtexec's --loadInputs reads files in it byte for byte)"]


class ConfigAttribute(Option):
    """An integer IBuilderConfig attribute set by name (`attribute`, the field's name by
    default), e.g. max_aux_streams: trtexec's `trtexec_flag`=N, Polygraphy's
    `polygraphy_flag` N (None: Polygraphy has none), `config.<attribute> = N` in the script,
    and the worker sets it where this TensorRT has it (probed; it refuses the build, naming
    the field, where not) and reads it back. Values below `minimum` are refused."""

    def __init__(self, field: str, flags: Tuple[str, ...], help: str = "",
                 arg: Optional[Dict[str, Any]] = None, *, trtexec_flag: str,
                 polygraphy_flag: Optional[str] = None, minimum: int = 0,
                 attribute: Optional[str] = None) -> None:
        super().__init__(field, flags, help, dict(arg or {}, type=int))
        self.trtexec_flag, self.polygraphy_flag = trtexec_flag, polygraphy_flag
        self.minimum, self.attribute = minimum, attribute or field

    def from_cli(self, value: Any) -> Any:
        try:
            return int(value)
        except (TypeError, ValueError):
            raise WorkbenchError(f"{self.flag} '{value}' is not a whole number",
                                 field=self.flag, hint=f"e.g. {self.flag} {self.minimum}"
                                 ) from None

    def check(self, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise WorkbenchError(f"{self.field} must be a whole number, not {value!r}",
                                 field=self.field)
        try:
            n = int(value)
        except ValueError:
            raise WorkbenchError(f"{self.field} must be a whole number, not {value!r}",
                                 field=self.field) from None
        if n < self.minimum:
            raise WorkbenchError(f"{self.field} must be >= {self.minimum}, not {n}",
                                 field=self.field,
                                 hint=f"{self.flag} {self.minimum} or more")
        return n

    def _value(self, config: Any) -> Optional[int]:
        return getattr(config, self.field)

    def trtexec(self, config: Any, how: Render) -> List[str]:
        v = self._value(config)
        return [] if v is None else [f"{self.trtexec_flag}={v}"]

    def read_trtexec(self, key: str, value: str, d: Dict[str, Any]) -> bool:
        if key != self.trtexec_flag:
            return False
        d[self.field] = int(value)
        return True

    def polygraphy(self, config: Any, how: Render) -> List[str]:
        v = self._value(config)
        return [] if v is None or not self.polygraphy_flag else [self.polygraphy_flag, str(v)]

    def script(self, config: Any, how: Render) -> ScriptPart:
        const = self.attribute.upper()
        return ScriptPart(constants=[f"{const} = {self._value(config)!r}"],
                          config=[f"if {const} is not None:",
                                  f"    config.{self.attribute} = {const}"])

    def worker(self, config: Any, how: Render) -> Dict[str, Any]:
        v = self._value(config)
        return {} if v is None else {"config_attributes": {self.attribute: v}}


# --------------------------------------------------------------------------------------------
# the registry: the order is the order of the lines (trtexec, Polygraphy, the script)
# --------------------------------------------------------------------------------------------
# rendered before the precision route's arguments (trtexec, Polygraphy)
BEFORE_PRECISION: Tuple[Option, ...] = (
    Workspace("workspace_bytes", ("--workspace",), "workspace memory pool, e.g. 512M or 2G",
              dict(metavar="SIZE"), optional=False),
    OptLevel("builder_optimization_level", ("--opt-level",),
             "builder optimization level 0-5", dict(type=int, metavar="N"), optional=False),
    TimingCache("timing_cache", ("--timing-cache",), "timing cache file to load and save",
                dict(metavar="PATH"), optional=False),
    Target("target", ("--target",), "TensorRT-RTX ahead-of-time target, e.g. sm89 (default: "
           "the library's portable engine for Ampere and later GPUs)", dict(metavar="SM"),
           optional=False),
)
# rendered after it
AFTER_PRECISION: Tuple[Option, ...] = (
    Plugins("plugins", ("--plugins",),
            "plugin library to load (only the ones you name are loaded)",
            dict(action="append", default=[], metavar="LIB"), default=[], optional=False),
    ExtraFlags("extra_flags", ("--flag",), "extra BuilderFlag to set, e.g. REFIT",
               dict(action="append", default=[], metavar="BUILDER_FLAG"), default=[],
               optional=False),
    TacticSources("tactic_sources", ("--tactic-sources",),
                  "tactic sources TensorRT may use, e.g. EDGE_MASK_CONVOLUTIONS,"
                  "JIT_CONVOLUTIONS (default: TensorRT's set)", dict(metavar="A,B"),
                  optional=False),
    HardwareCompat("hardware_compatibility", ("--hardware-compat",),
                   "let the engine run on other GPUs: ampere_plus (any sm >= 8.0, TensorRT "
                   ">= 8.6; TensorRT-RTX uses --target instead)",
                   dict(metavar="LEVEL", choices=list(HARDWARE_COMPATIBILITY))),
    TF32("tf32", ("--tf32",), "TF32 for FP32 math on Ampere and later (default: off for an "
         "FP32 engine, so it computes in FP32 as Polygraphy builds; TensorRT's default, on, "
         "for the other precisions)", dict(action=argparse.BooleanOptionalAction, default=None)),
    IOFormats("io_formats", ("--input-io-formats", "--output-io-formats")),
    ConfigAttribute("max_aux_streams", ("--max-aux-streams",),
                    "auxiliary CUDA streams TensorRT may run layers on beside the main one "
                    "(0: one stream, less memory, and an engine a CUDA graph captures whole; "
                    "default: TensorRT's choice)", dict(metavar="N"),
                    trtexec_flag="--maxAuxStreams", polygraphy_flag="--max-aux-streams"),
)
OPTIONS: Tuple[Option, ...] = BEFORE_PRECISION + AFTER_PRECISION


def by_field(name: str) -> Option:
    """The option that owns BuildConfig field `name`."""
    for o in OPTIONS:
        if name in o.fields:
            return o
    raise KeyError(name)


def config_fields() -> List[str]:
    """Every BuildConfig field an option owns."""
    return [n for o in OPTIONS for n in o.fields]


def optional_fields() -> List[str]:
    """The fields left out of the JSON while None."""
    return [n for o in OPTIONS if o.optional for n in o.fields]


def add_arguments(parser: Any, exclude: Sequence[str] = ()) -> None:
    """Add every option's flags to `parser`, but those of the options whose field is in
    `exclude` (a verb's own axis, e.g. `matrix --target LIST`)."""
    for o in OPTIONS:
        if not set(o.fields) & set(exclude):
            o.add_arguments(parser)


def overrides(args: Any, options: Optional[Iterable[Option]] = None) -> Dict[str, Any]:
    """The BuildConfig fields the command line sets (flags left out set nothing)."""
    out: Dict[str, Any] = {}
    for o in OPTIONS if options is None else options:
        out.update(o.overrides(args))
    return out


def worker_args(config: Any, how: Render) -> Dict[str, Any]:
    """The worker `build` request's fields for every option."""
    out: Dict[str, Any] = {}
    for o in OPTIONS:
        for k, v in o.worker(config, how).items():
            if k == "config_attributes":  # (one mapping, whichever options fill it)
                out.setdefault(k, {}).update(v)
            else:
                out[k] = v
    return out
