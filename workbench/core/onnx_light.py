"""onnx's protobuf classes and C++ shape inference without importing the `onnx` package.

`import onnx` imports numpy and most of onnx's Python helpers: ~0.2 s of a ~0.3 s
`workbench inspect`, which only needs the protobuf classes and the C++ shape inference. After
`enable()` (the inspect verb calls it) and while onnx is not imported yet, `onnx_proto()` loads
just onnx's generated `onnx.onnx_ml_pb2` and its `onnx.onnx_cpp2py_export` extension, under their
own names in sys.modules, so a later `import onnx` reuses the very same modules and classes
(nothing is loaded twice; a small import hook attaches them to the package). Without `enable()`,
or if anything about the light load fails, it is plain `import onnx`.
"""
from __future__ import annotations

import glob
import importlib.abc
import importlib.util
import os
import re
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any, List, Optional, Tuple

if TYPE_CHECKING:  # pragma: no cover
    import onnx

_PB = "onnx.onnx_ml_pb2"
_CPP = "onnx.onnx_cpp2py_export"
_enabled = False


def enable() -> None:
    """Allow the light path in this process (call before anything imports onnx)."""
    global _enabled
    _enabled = True


def is_light() -> bool:
    """True when onnx's protobuf module is loaded but the onnx package is not."""
    return _PB in sys.modules and "onnx" not in sys.modules


def onnx_proto() -> Any:
    """A module with ModelProto, TensorProto, AttributeProto, ... (the light one or onnx)."""
    if "onnx" in sys.modules or not _enabled:
        import onnx

        return onnx
    if _PB in sys.modules:
        return sys.modules[_PB]
    try:
        return _load_light()
    except Exception:  # any surprise: the ordinary, complete route
        for name in [n for n in sys.modules if n == _PB or n.startswith(_CPP)]:
            del sys.modules[name]
        import onnx

        return onnx


def _load_module(name: str, path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {name} from {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _load_light() -> ModuleType:
    spec = importlib.util.find_spec("onnx")  # locates the package without running it
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("onnx is not installed")
    base = list(spec.submodule_search_locations)[0]
    pb_path = os.path.join(base, "onnx_ml_pb2.py")
    libs = sorted(glob.glob(os.path.join(base, "onnx_cpp2py_export.*.so")) +
                  glob.glob(os.path.join(base, "onnx_cpp2py_export.*.pyd")))
    if not os.path.isfile(pb_path) or not libs:
        raise ImportError("onnx layout not recognised")
    sys.meta_path.insert(0, _AttachOnImport())
    pb = _load_module(_PB, pb_path)
    _load_module(_CPP, libs[0])
    return pb


class _AttachOnImport(importlib.abc.MetaPathFinder):
    """When `onnx` itself is imported later, set the pre-loaded submodules as its attributes
    (the import system only does that for submodules it loads itself)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "onnx":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("onnx")
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            for full in (_PB, _CPP):
                if full in sys.modules:
                    setattr(module, full.split(".")[1], sys.modules[full])
            run(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


_strict_cls: Any = None


def strict_model_class() -> Any:
    """ModelProto parsed with UTF-8 checks on every string field (None if this protobuf
    cannot build it). onnx.proto is proto2, where protobuf hands invalid UTF-8 back as bytes
    instead of failing; the same schema declared as edition 2023 with `utf8_validation =
    VERIFY` makes the C parser refuse such a file at parse speed. Used only to validate: the
    model itself is still parsed with onnx's own class."""
    global _strict_cls
    if _strict_cls is None:
        try:
            from google.protobuf import descriptor_pool, message_factory

            model_cls = onnx_proto().ModelProto
            # onnx's own FileDescriptorProto with fields appended (protobuf merge: last wins):
            # name (1), syntax (12) "editions", edition (14) 2023, options (8) ->
            # features (50) -> utf8_validation (4) VERIFY (2). (descriptor_pb2 would cost an
            # import on the CLI's start-up path.)
            name = b"workbench_strict/onnx.proto"
            extra = (b"\x0a" + bytes([len(name)]) + name + b"\x62\x08editions" + b"\x70\xe8\x07"
                     + b"\x42\x05\x92\x03\x02\x20\x02")
            pool = descriptor_pool.DescriptorPool()
            pool.AddSerializedFile(model_cls.DESCRIPTOR.file.serialized_pb + extra)
            _strict_cls = message_factory.GetMessageClass(
                pool.FindMessageTypeByName(model_cls.DESCRIPTOR.full_name))
        except Exception:  # an old protobuf without editions: callers fall back to a walk
            _strict_cls = False
    return _strict_cls or None


def infer_shapes(model: "onnx.ModelProto", *, data_prop: bool = True, strict: bool = False) -> Any:
    """ONNX shape inference returning a ModelProto of the same class; `strict` raises on the
    first node whose inference fails (e.g. a declared shape that contradicts it)."""
    if "onnx" in sys.modules or not is_light():
        import onnx.shape_inference

        return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=strict,
                                                 data_prop=data_prop)
    C = sys.modules[_CPP]
    out = C.shape_inference.infer_shapes(model.SerializeToString(), False, strict, data_prop)
    return type(model).FromString(out)


# "(op_type:Relu, node name: relu): [ShapeInferenceError] Inferred shape and existing shape
# differ in rank: (2) vs (3)" - one line per node in a strict inference's error
_CONFLICT = re.compile(r"\(op_type:([^,]*), node name: ([^)]*)\):\s*\[\w+\]\s*"
                       r"(Inferred (?:shape and existing shape|elem type)[^\n]*)")


def declared_conflicts(error: BaseException) -> List[Tuple[str, str, str]]:
    """(node name, op, what differs) for each node whose inferred output contradicts a
    declared value_info, read from a strict shape inference's error (empty for other errors)."""
    return [(m.group(2), m.group(1), m.group(3).strip()) for m in _CONFLICT.finditer(str(error))]


def has_schema(op_type: str, domain: str = "") -> bool:
    """Whether ONNX knows `op_type` in `domain` (any opset)."""
    if is_light():
        return bool(sys.modules[_CPP].defs.has_schema(op_type, domain))
    import onnx.defs

    return bool(onnx.defs.has(op_type, domain))


def light_modules_loaded() -> Optional[bool]:
    """For tests/diagnostics: True light, False full onnx, None neither loaded yet."""
    if "onnx" in sys.modules:
        return False
    return True if _PB in sys.modules else None
