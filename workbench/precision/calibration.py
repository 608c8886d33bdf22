"""Calibration data: load it from wherever the user keeps it, and check it against the model.

Sources: an `.npz` file (keys = input names, one batch per file), an `.npy` file (one array, for
single-input models), a folder of those, a folder of images with a declared preprocessing
(`ImagePreprocess`: resize, mean/std, NCHW/NHWC; .npy images and binary PPM/PGM always, PNG/JPEG
when Pillow is installed), or a Python iterable of dicts. Everything is checked against the
model's inputs (names, dtypes, shapes within the static dims and the shape profile) and every
problem is a WorkbenchError naming the file, input and axis. Never pickle: np.load(allow_pickle=False).
Random data exists only behind an explicit `random_calibration(...)` call that returns a warning.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from workbench.core.errors import Finding, WorkbenchError
from workbench.core.inputs import InputSpec, model_inputs  # noqa: F401  (re-exported)
from workbench.core.inputs import LeadingAxes, leading_axes
from workbench.core.model import ModelLike, as_model

Batch = Dict[str, np.ndarray]
DATA_SUFFIXES = (".npz", ".npy")
IMAGE_SUFFIXES = (".ppm", ".pgm", ".pnm", ".npy", ".png", ".jpg", ".jpeg", ".bmp")

# --------------------------------------------------------------------------- image folders
@dataclass
class ImagePreprocess:
    """How to turn image files into an input tensor: resize to (height, width), scale to [0,1]
    when `scale_255`, subtract mean / divide std per channel, lay out NCHW or NHWC."""

    input: Optional[str] = None  # which model input; default: the only input
    size: Optional[Tuple[int, int]] = None  # (height, width); default: from the model's dims
    mean: Sequence[float] = (0.0, 0.0, 0.0)
    std: Sequence[float] = (1.0, 1.0, 1.0)
    scale_255: bool = True
    layout: str = "NCHW"
    batch_size: int = 1

    def __post_init__(self) -> None:
        if self.layout.upper() not in ("NCHW", "NHWC"):
            raise WorkbenchError(f"unknown layout '{self.layout}'", field="layout",
                                 hint="use NCHW or NHWC")
        self.layout = self.layout.upper()
        if any(s == 0 for s in self.std):
            raise WorkbenchError("std contains 0", field="std", hint="std values divide the data")


def _read_pnm(path: Path) -> np.ndarray:
    """Binary PPM (P6) / PGM (P5), 8-bit, as HxWxC uint8, with numpy only."""
    data = path.read_bytes()
    tokens: List[bytes] = []
    pos = 0
    while len(tokens) < 4:
        while pos < len(data) and data[pos:pos + 1].isspace():
            pos += 1
        if data[pos:pos + 1] == b"#":
            while pos < len(data) and data[pos:pos + 1] not in (b"\n", b"\r"):
                pos += 1
            continue
        start = pos
        while pos < len(data) and not data[pos:pos + 1].isspace():
            pos += 1
        if start == pos:
            break
        tokens.append(data[start:pos])
    if len(tokens) < 4 or tokens[0] not in (b"P5", b"P6"):
        raise WorkbenchError("not a binary PPM/PGM image (P5/P6)", file=str(path),
                             hint="save images as binary PPM, .npy (HxWxC), or install pillow")
    w, h, maxval = int(tokens[1]), int(tokens[2]), int(tokens[3])
    if maxval > 255:
        raise WorkbenchError("16-bit PPM/PGM is not supported", file=str(path))
    c = 3 if tokens[0] == b"P6" else 1
    pixels = np.frombuffer(data, dtype=np.uint8, count=w * h * c, offset=pos + 1)
    return pixels.reshape(h, w, c)


def _read_image(path: Path) -> np.ndarray:
    suffix = path.suffix.lower()
    if suffix in (".ppm", ".pgm", ".pnm"):
        return _read_pnm(path)
    if suffix == ".npy":
        arr = _np_load(path)
        if not isinstance(arr, np.ndarray) or arr.ndim not in (2, 3):
            raise WorkbenchError("an image .npy must be HxW or HxWxC", file=str(path))
        return arr if arr.ndim == 3 else arr[:, :, None]
    try:
        from PIL import Image  # optional
    except ImportError:
        raise WorkbenchError(f"reading {suffix} images needs Pillow, which is not installed",
                             file=str(path), hint="pip install pillow, or convert the images to "
                             ".ppm or .npy (HxWxC)") from None
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def _resize(img: np.ndarray, size: Tuple[int, int]) -> np.ndarray:
    """Bilinear resize of HxWxC with numpy (align_corners=False, like most frameworks)."""
    h, w = img.shape[:2]
    th, tw = size
    if (h, w) == (th, tw):
        return img.astype(np.float32)
    ys = (np.arange(th) + 0.5) * h / th - 0.5
    xs = (np.arange(tw) + 0.5) * w / tw - 0.5
    y0 = np.clip(np.floor(ys).astype(int), 0, h - 1)
    x0 = np.clip(np.floor(xs).astype(int), 0, w - 1)
    y1, x1 = np.clip(y0 + 1, 0, h - 1), np.clip(x0 + 1, 0, w - 1)
    wy = np.clip(ys - y0, 0, 1)[:, None, None]
    wx = np.clip(xs - x0, 0, 1)[None, :, None]
    f = img.astype(np.float32)
    top = f[y0][:, x0] * (1 - wx) + f[y0][:, x1] * wx
    bot = f[y1][:, x0] * (1 - wx) + f[y1][:, x1] * wx
    return top * (1 - wy) + bot * wy


def load_images(folder: Union[str, os.PathLike], model: ModelLike, pre: ImagePreprocess) -> List[Batch]:
    """Image files of `folder` (sorted) -> preprocessed batches for one model input."""
    folder = Path(folder)
    specs = model_inputs(model)
    if pre.input is None:
        if len(specs) != 1:
            raise WorkbenchError("the model has several inputs; say which one the images feed",
                                 file=str(folder), field="input",
                                 hint="ImagePreprocess(input=NAME); inputs: "
                                 + ", ".join(s.name for s in specs))
        spec = specs[0]
    else:
        spec = next((s for s in specs if s.name == pre.input), None)
        if spec is None:
            raise WorkbenchError(f"unknown input '{pre.input}'", field="input",
                                 hint="inputs: " + ", ".join(s.name for s in specs))
    if len(spec.dims) != 4:
        raise WorkbenchError(f"input '{spec.name}' has rank {len(spec.dims)}, images need rank 4",
                             file=str(folder))
    hw_axes = (2, 3) if pre.layout == "NCHW" else (1, 2)
    c_axis = 1 if pre.layout == "NCHW" else 3
    size = pre.size
    if size is None:
        dims = [spec.dims[a] for a in hw_axes]
        if not all(isinstance(d, int) for d in dims):
            raise WorkbenchError(f"input '{spec.name}' has dynamic height/width", field="size",
                                 hint="give ImagePreprocess(size=(H, W))")
        size = (int(dims[0]), int(dims[1]))
    channels = spec.dims[c_axis] if isinstance(spec.dims[c_axis], int) else 3
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise WorkbenchError("no image files found", file=str(folder),
                             hint="supported: " + ", ".join(IMAGE_SUFFIXES))
    mean = np.asarray(pre.mean, np.float32)[:channels]
    std = np.asarray(pre.std, np.float32)[:channels]
    imgs = []
    for f in files:
        img = _read_image(f)
        if img.shape[2] != channels:
            if img.shape[2] == 1 and channels == 3:
                img = np.repeat(img, 3, axis=2)
            else:
                raise WorkbenchError(f"image has {img.shape[2]} channels, input '{spec.name}' "
                                     f"expects {channels}", file=str(f))
        x = _resize(img, size)
        if pre.scale_255:
            x = x / 255.0
        x = (x - mean) / std
        imgs.append(x.transpose(2, 0, 1) if pre.layout == "NCHW" else x)
    out: List[Batch] = []
    for i in range(0, len(imgs), pre.batch_size):
        out.append({spec.name: np.stack(imgs[i:i + pre.batch_size]).astype(spec.dtype or np.float32)})
    return out


# --------------------------------------------------------------------------- files
def max_array_bytes() -> int:
    """The most bytes one data file may declare (WORKBENCH_MAX_ARRAY_BYTES; default half the
    machine's memory): checked from the headers before anything is allocated."""
    env = os.environ.get("WORKBENCH_MAX_ARRAY_BYTES")
    if env:
        return int(env)
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError, AttributeError):  # pragma: no cover (not Linux/macOS)
        return 8 << 30


def read_npy(f: Any, available: int, label: str, budget: Optional[List[int]] = None) -> np.ndarray:
    """One .npy array from the open binary stream `f` holding `available` bytes, checked
    before allocating: the header must parse, the dtype hold no Python objects (never
    pickle), and shape x itemsize fit in the bytes that are really there (and in `budget`,
    a one-item list of bytes still allowed, shared by the members of one file)."""
    from numpy.lib import format as npf

    try:
        version = npf.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = npf.read_array_header_1_0(f)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = npf.read_array_header_2_0(f)
        else:
            raise ValueError(f"unknown .npy format version {version}")
    except Exception as e:  # (ValueError, TokenError, SyntaxError, EOFError, ...)
        raise WorkbenchError(f"not a readable numpy array ({type(e).__name__}: "
                             f"{str(e)[:120]})", file=label,
                             hint="write it with np.save / np.savez") from None
    if dtype.hasobject:
        raise WorkbenchError("contains pickled Python objects, which are never loaded "
                             "(untrusted code)", file=label,
                             hint="save plain numeric arrays: np.savez(path, **{name: array})")
    count = 1
    for d in shape:
        if not isinstance(d, int) or d < 0:
            raise WorkbenchError(f"the array header declares shape {shape}", file=label,
                                 hint="the file is corrupt; write it with np.save / np.savez")
        count *= d
    nbytes = count * dtype.itemsize
    data_left = available - f.tell() if hasattr(f, "tell") else available
    if nbytes > data_left:
        raise WorkbenchError(f"the array header declares shape {shape} {dtype} ({nbytes} bytes) "
                             f"but only {max(data_left, 0)} bytes follow", file=label,
                             hint="the file is truncated or corrupt; write it again")
    if budget is not None:
        if nbytes > budget[0]:
            raise WorkbenchError(f"the arrays declare more than {max_array_bytes()} bytes",
                                 file=label, hint="split the data into several files, or set "
                                 "WORKBENCH_MAX_ARRAY_BYTES")
        budget[0] -= nbytes
    try:
        arr = np.empty(count, dtype=dtype)  # (writable, like np.load's; size checked above)
        if nbytes:
            view, got = memoryview(arr.view(np.uint8).reshape(-1)), 0
            while got < nbytes:
                n = f.readinto(view[got:])
                if not n:
                    raise EOFError(f"{got} of {nbytes} bytes")
                got += n
        return arr.reshape(shape[::-1]).transpose() if fortran else arr.reshape(shape)
    except Exception as e:
        raise WorkbenchError(f"could not read the array data ({type(e).__name__}: "
                             f"{str(e)[:120]})", file=label, hint="the file is truncated or "
                             "corrupt; write it again") from None


def _np_load(path: Path) -> Any:
    """An .npy file's array, or an .npz file's {name: array}, read with `read_npy` (sizes
    checked before allocating, never pickle); anything else is a one-line WorkbenchError."""
    import zipfile
    import zlib

    budget = [max_array_bytes()]
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            magic = f.read(4)
            f.seek(0)
            if not magic.startswith(b"PK"):
                return read_npy(f, size, str(path), budget)
            out: Dict[str, np.ndarray] = {}
            with zipfile.ZipFile(f) as z:
                for info in z.infolist():
                    if info.is_dir():
                        continue
                    name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
                    with z.open(info) as m:
                        out[name] = read_npy(_Counting(m), info.file_size,
                                             f"{path}[{info.filename}]", budget)
            return out
    except WorkbenchError:
        raise
    except (zipfile.BadZipFile, zlib.error, NotImplementedError, EOFError, OSError,
            ValueError, RuntimeError) as e:
        raise WorkbenchError(f"not a readable numpy file ({type(e).__name__}: {str(e)[:120]})",
                             file=str(path), hint="write it with np.save / np.savez") from None


class _Counting:
    """A read-only stream that knows its position (zip members' tell() is not reliable on
    every Python; read_npy needs it to know how many data bytes are left)."""

    def __init__(self, f: Any) -> None:
        self._f, self._pos = f, 0

    def read(self, n: int = -1) -> bytes:
        b = self._f.read(n)
        self._pos += len(b)
        return b

    def readinto(self, buf: Any) -> int:
        n = self._f.readinto(buf)
        self._pos += n
        return n

    def tell(self) -> int:
        return self._pos


def _load_file(path: Path, specs: List[InputSpec]) -> Batch:
    obj = _np_load(path)
    if isinstance(obj, np.ndarray):
        if len(specs) != 1:
            raise WorkbenchError(
                "a .npy file holds one array but the model has inputs "
                + ", ".join(s.name for s in specs), file=str(path),
                hint="use .npz with one key per input: np.savez(path, **batch)")
        return {specs[0].name: obj}
    return obj


def _files_in(folder: Path) -> List[Path]:
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in DATA_SUFFIXES)
    if not files:
        raise WorkbenchError("no .npz/.npy files in the folder", file=str(folder),
                             hint="one .npz per batch (keys = input names); for images pass "
                             "preprocess=ImagePreprocess(...)")
    return files


# --------------------------------------------------------------------------- validation
def _safe_cast(arr: np.ndarray, target: Any, label: str, name: str) -> np.ndarray:
    """Cast when no value changes meaning: numpy-safe casts, float64->float32/float16 within
    range, and integer narrowing when every value fits. Anything else is an error."""
    src = arr.dtype
    if src == target:
        return arr
    tgt = np.dtype(target)
    if arr.dtype.kind == "O" or arr.dtype.kind in "USV":
        raise WorkbenchError(f"input '{name}' holds {src} data, not numbers", file=label,
                             field=name, hint=f"save it as {tgt} arrays")
    if np.can_cast(src, tgt, casting="safe"):
        return arr.astype(tgt)
    if src.kind == "f" and tgt.kind == "f":
        finite = arr[np.isfinite(arr)]
        if finite.size == 0 or np.abs(finite).max() <= np.finfo(tgt).max:
            return arr.astype(tgt)
    if src.kind in "iub" and tgt.kind in "iu":
        info = np.iinfo(tgt)
        if arr.size == 0 or (arr.min() >= info.min and arr.max() <= info.max):
            return arr.astype(tgt)
    if src.kind in "iu" and tgt.kind == "f" and (arr.size == 0 or np.abs(arr).max() < 2 ** 24):
        return arr.astype(tgt)
    raise WorkbenchError(f"input '{name}' has dtype {src} but the model expects {tgt}; "
                         "the values cannot be converted safely", file=label, field=name,
                         hint=f"convert it yourself, e.g. arr.astype(np.{tgt.name}), if that "
                         "is what you mean")


def check_batch(batch: Mapping[str, Any], specs: List[InputSpec], label: str,
                profile: Optional[Mapping[str, Any]] = None,
                values_inputs: Sequence[str] = ()) -> Batch:
    """Validate one batch against the model inputs (and an optional Profile); return it cast."""
    names = [s.name for s in specs]
    if not isinstance(batch, Mapping):
        raise WorkbenchError(f"a calibration batch must be a dict of input name -> array, "
                             f"got {type(batch).__name__}", file=label)
    unknown = [k for k in batch if k not in names]
    if unknown:
        raise WorkbenchError(f"unknown input '{unknown[0]}'", file=label, field=unknown[0],
                             hint="the model's inputs are: " + ", ".join(names))
    missing = [n for n in names if n not in batch]
    if missing:
        raise WorkbenchError(f"missing input '{missing[0]}'", file=label, field=missing[0],
                             hint="every batch needs all inputs: " + ", ".join(names))
    out: Batch = {}
    symbols: Dict[str, Tuple[str, int, int]] = {}
    for spec in specs:
        arr = batch[spec.name]
        if not isinstance(arr, np.ndarray):
            try:
                arr = np.asarray(arr)
            except Exception:
                raise WorkbenchError(f"input '{spec.name}' is not array-like", file=label,
                                     field=spec.name) from None
        if spec.dtype is None:
            raise WorkbenchError(f"input '{spec.name}' has an ONNX type ({spec.elem_type}) "
                                 "that calibration cannot feed", file=label, field=spec.name)
        arr = _safe_cast(arr, spec.dtype, label, spec.name)
        if arr.dtype.kind == "f" and not np.isfinite(arr).all():
            raise WorkbenchError(f"input '{spec.name}' contains NaN or infinity", file=label,
                                 field=spec.name, hint="calibration needs finite real data")
        if spec.dims and arr.ndim != len(spec.dims):
            raise WorkbenchError(f"input '{spec.name}' has rank {arr.ndim} (shape "
                                 f"{list(arr.shape)}) but the model expects rank {len(spec.dims)} "
                                 f"{spec.shape_str()}", file=label, field=spec.name)
        rng = profile.get(spec.name) if profile is not None else None
        for axis, (d, v) in enumerate(zip(spec.dims, arr.shape)):
            if isinstance(d, int) and d != v:
                raise WorkbenchError(f"input '{spec.name}' axis {axis} is {v} but the model "
                                     f"fixes it to {d} {spec.shape_str()}", file=label,
                                     field=spec.name)
            if rng is not None and spec.name not in values_inputs:
                lo, hi = rng[0][axis], rng[2][axis]
                if not lo <= v <= hi:
                    raise WorkbenchError(f"input '{spec.name}' axis {axis} is {v}, outside the "
                                         f"profile range {lo}..{hi}", file=label, field=spec.name,
                                         hint="use data inside the profile or widen the profile")
            if isinstance(d, str):
                if d in symbols and symbols[d][2] != v:
                    other, oax, ov = symbols[d]
                    raise WorkbenchError(
                        f"dimension '{d}' is {v} on input '{spec.name}' axis {axis} but {ov} on "
                        f"input '{other}' axis {oax}", file=label, field=spec.name,
                        hint="inputs that share a dimension name must agree within a batch")
                symbols.setdefault(d, (spec.name, axis, v))
        out[spec.name] = arr
    return out


def _split_for_static_batch(batch: Batch, specs: List[InputSpec]) -> Optional[List[Batch]]:
    """A stacked array for a model with a static leading dim k: split into n batches of k."""
    ks = {}
    for s in specs:
        if not s.dims or not isinstance(s.dims[0], int) or s.name not in batch:
            return None
        a = np.asarray(batch[s.name])
        if a.ndim != len(s.dims) or a.shape[0] == s.dims[0] or a.shape[0] % s.dims[0]:
            return None
        ks[s.name] = a.shape[0] // s.dims[0]
    if len(set(ks.values())) != 1:
        return None
    n = next(iter(ks.values()))
    return [{s.name: np.asarray(batch[s.name])[i * s.dims[0]:(i + 1) * s.dims[0]] for s in specs}
            for i in range(n)]


def _split_for_profile(batch: Batch, specs: List[InputSpec],
                       profile: Optional[Mapping[str, Any]],
                       axes: Optional[LeadingAxes] = None) -> Optional[List[Batch]]:
    """Stacked samples (one .npz whose first axis is the sample) more than the profile's
    largest batch: split along axis 0 into batches of that size (the last may be smaller, not
    below the profile's min), so a file of 300 samples calibrates a batch-16 profile. Inputs
    whose first axis is fixed by the model are not split (each batch gets them whole); nor is
    anything when some input's axis 0 is a count of items, not a batch (`axes`,
    `workbench.core.inputs.leading_axes`: points [num_points, 4]): the file is one sample."""
    if profile is None or (axes is not None and not axes.splits):
        return None
    batched = [s for s in specs if s.dims and not isinstance(s.dims[0], int)
               and s.name in batch and s.name in profile
               and (axes is None or s.name in axes.batch)]
    if not batched:
        return None
    n = {int(np.shape(batch[s.name])[0]) for s in batched if np.ndim(batch[s.name])}
    if len(n) != 1:
        return None
    n_samples = n.pop()
    size = min(int(profile[s.name][2][0]) for s in batched)
    low = max(int(profile[s.name][0][0]) for s in batched)
    if n_samples <= size or size < 1:
        return None
    out = []
    for start in range(0, n_samples, size):
        stop = min(start + size, n_samples)
        if stop - start < low:
            break  # (a last partial batch below the profile's min is left out)
        out.append({k: (np.asarray(v)[start:stop] if any(s.name == k for s in batched) else v)
                    for k, v in batch.items()})
    return out or None


def load_calibration(source: Any, model: ModelLike, *, profile: Any = None,
                     preprocess: Optional[ImagePreprocess] = None,
                     max_batches: Optional[int] = None) -> List[Batch]:
    """Load and validate calibration batches (list of {input name: array}) for `model`.

    `source`: .npz/.npy path, a folder of them, an image folder (with `preprocess`), a dict, or
    an iterable of dicts; in a file, the first axis is the sample. `profile`: a Profile
    ({input: (min, opt, max)}) that dynamic dims must fall within; a file holding more samples
    than the profile's largest batch is split into batches of that size. A list of profiles
    (an engine's several): the data must fit one of them, the first that holds it is used.
    Raises WorkbenchError naming the file, input and axis on any mismatch.
    """
    if isinstance(profile, (list, tuple)):
        profiles = [p for p in profile if p]
        if len(profiles) <= 1:
            profile = profiles[0] if profiles else None
        else:
            if not isinstance(source, (str, os.PathLike, Mapping, np.ndarray)):
                source = list(source)  # read more than once
            errors: List[WorkbenchError] = []
            for p in profiles:
                try:
                    return load_calibration(source, model, profile=p, preprocess=preprocess,
                                            max_batches=max_batches)
                except WorkbenchError as e:
                    if "profile" not in str(e):  # not about the shapes: so under any profile
                        raise
                    errors.append(e)
            err = errors[0]
            raise WorkbenchError(
                err.message + f" of the first of the engine's {len(profiles)} profiles",
                file=err.file, node=err.node, field=err.field,
                hint=f"the data fits none of the {len(profiles)} profiles: use data inside "
                     "one of them, or widen one") from None
    specs = model_inputs(model)
    values_inputs: Sequence[str] = ()
    if profile is not None:
        from workbench.precision.profiles import shape_tensor_inputs

        values_inputs = shape_tensor_inputs(model)
    raw: List[Tuple[str, Any]] = []
    if isinstance(source, (str, os.PathLike)):
        p = Path(source)
        if not p.exists():
            raise WorkbenchError("calibration source not found", file=str(p), hint="check the path")
        if p.is_dir():
            if preprocess is not None:
                raw = [(f"{p}[{i}]", b) for i, b in enumerate(load_images(p, model, preprocess))]
            else:
                raw = [(str(f), _load_file(f, specs)) for f in _files_in(p)]
        else:
            if p.suffix.lower() not in DATA_SUFFIXES:
                raise WorkbenchError(f"unsupported calibration file type '{p.suffix}'", file=str(p),
                                     hint="use .npz (keys = input names), .npy, or a folder")
            raw = [(str(p), _load_file(p, specs))]
    elif isinstance(source, Mapping):
        raw = [("<batch 0>", source)]
    elif isinstance(source, np.ndarray):
        raw = [("<array>", {specs[0].name: source} if len(specs) == 1 else source)]
    elif isinstance(source, Iterable):
        for i, b in enumerate(source):
            raw.append((f"<batch {i}>", b))
            if max_batches is not None and len(raw) >= max_batches:
                break
    else:
        raise WorkbenchError(f"unsupported calibration source of type {type(source).__name__}",
                             hint="pass a .npz/.npy path, a folder, or a list of dicts")
    batches: List[Batch] = []
    axes = leading_axes(model) if profile is not None else None
    for label, b in raw:
        split = _split_for_static_batch(b, specs) if isinstance(b, Mapping) else None
        if split is None and isinstance(b, Mapping):
            split = _split_for_profile(b, specs, profile, axes)
        for sub in (split or [b]):
            batches.append(check_batch(sub, specs, label, profile, values_inputs))
    if not batches:
        raise WorkbenchError("the calibration source holds no batches",
                             file=str(source) if isinstance(source, (str, os.PathLike)) else None)
    if max_batches is not None:
        batches = batches[:max_batches]
    return batches


# --------------------------------------------------------------------------- random (explicit)
def random_finding(n: int) -> Finding:
    return Finding("warning", "random-calibration",
                   f"calibrated on {n} batches of RANDOM data: scales and error figures do not "
                   "reflect real inputs", hint="pass representative data with --calib PATH",
                   source="calibration")


def declared_zero_axes(proto: Any) -> set:
    """(input, axis) of the graph inputs' axes declared with dim_value 0: a real size of 0
    that random inputs must respect (onnxruntime refuses any other size there)."""
    inits = {i.name for i in proto.graph.initializer}
    out = set()
    for vi in proto.graph.input:
        tt = vi.type.tensor_type
        if vi.name in inits or not tt.HasField("shape"):
            continue
        for axis, d in enumerate(tt.shape.dim):
            if d.WhichOneof("value") == "dim_value" and d.dim_value == 0:
                out.add((vi.name, axis))
    return out


def random_calibration(model: ModelLike, n: int = 8, *, profile: Optional[Mapping[str, Any]] = None,
                       seed: int = 0) -> Tuple[List[Batch], Finding]:
    """Random batches, only for users who asked explicitly; returns the warning Finding too.

    Integer inputs feeding a Gather get indices within its table; names containing 'mask' (and
    bool inputs) mark every position a token: ones, zeros where 1 means padding
    (src_pad_mask, key_padding_mask); dynamic dims take the profile's opt (else 1 for axis 0,
    16 otherwise; of several profiles, the first's)."""
    from workbench.runtime.equivalence import count_range
    from workbench.precision.profiles import mask_polarity_from_name

    if isinstance(profile, (list, tuple)):
        profile = next((p for p in profile if p), None)
    proto = as_model(model).proto
    specs = model_inputs(proto)
    inits = {i.name: tuple(i.dims) for i in proto.graph.initializer}
    gather_high: Dict[str, int] = {}
    for node in proto.graph.node:
        if node.op_type == "Gather" and len(node.input) > 1 and node.input[0] in inits:
            gather_high[node.input[1]] = int(inits[node.input[0]][0])
    zero = declared_zero_axes(proto)
    rng = np.random.default_rng(seed)
    from workbench.core.inputs import relate_decoder_shapes

    shapes: Dict[str, List[int]] = {}
    guessed: set = set()  # (input, axis) sized by the default, not by the profile or model
    for s in specs:
        if profile is not None and s.name in profile:
            shapes[s.name] = [int(v) for v in profile[s.name][1]]
        else:
            shapes[s.name] = [d if isinstance(d, int) else (1 if i == 0 else 16)
                              for i, d in enumerate(s.dims)]
            guessed.update((s.name, i) for i, d in enumerate(s.dims) if not isinstance(d, int))
        # an axis the model declares as size 0 is fed as 0 (onnxruntime insists on it)
        shapes[s.name] = [0 if (s.name, i) in zero else v for i, v in enumerate(shapes[s.name])]
    # a KV-cache decoder: cache, mask (past + new) and positions sized and valued together
    related = relate_decoder_shapes(proto, shapes, guessed)
    out = []
    for _ in range(n):
        b: Batch = {}
        for s in specs:
            shape = tuple(shapes[s.name])
            if s.name in related:
                b[s.name] = related[s.name]
                continue
            dt = np.dtype(s.dtype or np.float32)
            if dt.kind == "f":
                b[s.name] = rng.standard_normal(shape).astype(dt)
            elif dt.kind == "b" or "mask" in s.name.lower():  # every position a token
                b[s.name] = (np.zeros if mask_polarity_from_name(s.name) else np.ones)(shape, dt)
            else:  # an index within its table; a count (a Loop's trip count) of at least 1
                low, high = count_range(proto, s.name) or (0, gather_high.get(s.name, 2))
                b[s.name] = rng.integers(low, high, size=shape).astype(dt)
        out.append(b)
    return out, random_finding(n)


# --------------------------------------------------------------------------- adapters
def ort_reader(batches: List[Batch]) -> Any:
    """An onnxruntime.quantization CalibrationDataReader over the batches (rewindable)."""
    from onnxruntime.quantization import CalibrationDataReader

    class _Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._it = iter(batches)

        def get_next(self) -> Optional[Batch]:
            return next(self._it, None)

        def rewind(self) -> None:
            self._it = iter(batches)

        def __len__(self) -> int:
            return len(batches)

    return _Reader()


def npz_bytes(arrays: Mapping[str, Any]) -> bytes:
    """An .npz of `arrays` (what np.savez writes) whose bytes depend on the arrays alone: no
    zip timestamps, so the same data written twice hashes the same (the engine cache keys on
    the calibration's content)."""
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for name, arr in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            with z.open(info, "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(arr), allow_pickle=False)
    return buf.getvalue()


def write_batches(batches: List[Batch], folder: Union[str, os.PathLike]) -> List[Path]:
    """Write batches as batch_0000.npz ... (atomic each; the same batches, the same bytes)."""
    from workbench.core.fsutil import atomic_write_bytes

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, b in enumerate(batches):
        p = folder / f"batch_{i:04d}.npz"
        atomic_write_bytes(p, npz_bytes(b))
        paths.append(p)
    return paths


def describe(batches: List[Batch]) -> Dict[str, Any]:
    """A short JSON-able summary: batch count and per-input shapes/dtypes/ranges."""
    info: Dict[str, Any] = {"batches": len(batches), "inputs": {}}
    for name in batches[0] if batches else []:
        arrs = [b[name] for b in batches]
        shapes = sorted({tuple(a.shape) for a in arrs})
        info["inputs"][name] = {
            "dtype": str(arrs[0].dtype),
            "shapes": [list(s) for s in shapes[:8]],
            "min": float(min(a.min() for a in arrs)) if arrs[0].size else None,
            "max": float(max(a.max() for a in arrs)) if arrs[0].size else None,
        }
    return info
