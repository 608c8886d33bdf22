"""Helpers shared by the CLI verbs: JSON output and the output-path check."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:  # pragma: no cover
    import argparse


def flush_streams() -> bool:
    """Flush stdout and stderr before the process ends without the interpreter's teardown
    (os._exit). False when output was lost (a full disk): the caller exits 120, as CPython's
    own exit does; a closed pipe (`| head`) is not a loss - nothing more is wanted there."""
    ok = True
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except BrokenPipeError:
            pass
        except (OSError, ValueError):
            ok = False
    return ok


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")
    sys.stdout.flush()


def add_profile_index_argument(p: Any) -> None:
    """`--profile-index`: which optimization profile of an engine with several runs (an index,
    or a decoder's prefill / decode; `workbench.precision.profiles.profile_index`)."""
    p.add_argument("--profile-index", default=None, metavar="N|prefill|decode",
                   help="the engine's optimization profile to run: an index, or a decoder's "
                        "prefill (empty cache) / decode (one new token) profile (default: the "
                        "first profile that holds the inputs' shapes)")


def add_profile_argument(p: Any, more: str) -> None:
    """`--profile INPUT:MIN:OPT:MAX` (repeatable): a dynamic input's shape range, the one
    spelling every verb reads with `workbench.precision.profiles.parse_profiles`; `more` says
    what it does in this verb."""
    p.add_argument("--profile", action="append", default=[], metavar="INPUT:MIN:OPT:MAX",
                   help="shape range of a dynamic input" + more)


def add_latency_profiles_argument(p: Any, use: str) -> None:
    """`--latency-profiles DIR`: the folder of recorded uniform-engine profiles that
    `workbench.timing.predict.find_profiles` reads; `use` says what the verb makes of them."""
    p.add_argument("--latency-profiles", metavar="DIR",
                   help="recorded per-layer profiles of uniform engines (<model>_<precision>"
                        ".layers.json + .profile.json, or trtexec --exportLayerInfo/"
                        "--exportProfile files): " + use)


def add_fp32_model_argument(p: Any) -> None:
    """The FP32 model a verb converts or plans from: read, never written."""
    p.add_argument("model", help="the FP32 ONNX model (never overwritten)")


def add_verdict_arguments(p: Any, *, elementwise: bool, budget_default: Optional[str],
                          metric_default: str, budget_help: str) -> None:
    """`--metric` / `--budget`: the verdict's metric and the loss it may reach
    (`workbench.runtime.verdict`), one grammar for every verb that judges outputs."""
    names = "top1|top5|cosine|rel" + ("|elementwise" if elementwise else "")
    p.add_argument("--metric", default=None, metavar=names + "|MODULE:FUNC",
                   help="judge the outputs by this metric within --budget (FUNC(reference, "
                        "candidate) -> loss over {output: array}); default: " + metric_default)
    p.add_argument("--budget", default=budget_default, metavar="1%|0.01", help=budget_help)


def add_onnx_argument(p: Any) -> None:
    """`--onnx` of the timing verbs: the ONNX an engine was built from, whose nodes its layers
    are mapped to."""
    p.add_argument("--onnx", metavar="MODEL",
                   help="the ONNX model the engine was built from (to map layers to nodes)")


def add_html_argument(p: Any) -> None:
    """`--html` of the timing verbs: the one standalone report both write."""
    p.add_argument("--html", metavar="REPORT.html", help="write a standalone HTML report")


def add_gpu_argument(p: Any) -> None:
    """`--gpu`: the GPU or MIG instance a verb's worker is pinned to."""
    p.add_argument("--gpu", metavar="ID|UUID", help="pin the worker to this GPU or MIG "
                   "instance (see `workbench gpus`)")


def add_mkdir_argument(p: "argparse.ArgumentParser") -> None:
    """`--mkdir`: the one way to let a verb create the missing folders of its output paths."""
    p.add_argument("--mkdir", action="store_true",
                   help="create missing folders of the output path(s) (default: refuse, so a "
                        "typo in a path does not silently make directories)")


def output_path(path: Optional[str], flag: str, *, mkdir: bool = False,
                folder: bool = False) -> Optional[str]:
    """Check an output path before any work: its folder must exist (or is made with --mkdir),
    and a file output must not name an existing folder. `folder`: the path is itself a folder
    to write into (the verb makes it; its parent must exist). Returns `path` unchanged."""
    from workbench.core.errors import WorkbenchError

    if not path:
        return path
    p = Path(path)
    if folder and p.is_dir():
        return path
    if p.is_dir() or (folder and p.exists()):
        what = ("a file, not a folder", "a folder path") if folder else \
            ("a folder, not a file", "a file path")
        raise WorkbenchError(f"{flag} names {what[0]}", file=str(p), field=flag,
                             hint=f"give {what[1]}")
    parent = p.parent
    if parent.is_dir():
        return path
    blocker = next((a for a in parent.parents if a.exists()), None)
    if blocker is not None and not blocker.is_dir():
        raise WorkbenchError(f"'{blocker}' in the {flag} path is a file, not a folder",
                             file=str(p), field=flag, hint="choose another output path")
    if not mkdir:
        import shlex

        raise WorkbenchError(f"the folder '{parent}' for {flag} does not exist", file=str(p),
                             field=flag, hint=f"run `mkdir -p {shlex.quote(str(parent))}` "
                             "first, or add --mkdir to create it")
    parent.mkdir(parents=True, exist_ok=True)
    return path


# ------------------------------------------------------------------------ the model argument
# A verb names the model files among its arguments with `model_paths(args)` (see
# workbench/cli/__init__.py); main() checks them with check_model_file before it reports a
# missing or invalid option and before the verb runs, so `workbench build nope.onnx` says that
# nope.onnx does not exist rather than asking for -o first. The messages are open_model's
# (workbench.core.model): the same file, the same words, whichever check meets the problem first.
# Cheap on a multi-GB model: one stat, one open, the first 64 KiB read and a seek past each
# top-level field (the graph is one field); the verb's own load reports everything deeper.
ONNX_TEXT_SUFFIXES = (".onnxtxt", ".textproto", ".txtpb", ".json", ".onnxjson")  # as
# workbench.core.model._TEXT_FORMATS (onnx's text parsers; not imported here: start-up time)
_CHUNK = 1 << 16
_MAX_FIELDS = 4096  # past this many top-level fields the walk stops: the load decides
_MAX_GROUPS = 64


def check_model_file(path: str, kind: str = "onnx") -> None:
    """Raise the WorkbenchError that names `path` when it cannot be the model (kind "onnx")
    or engine (kind "engine") the verb needs: missing, a folder, unreadable, empty, or (ONNX
    in binary form) not an ONNX protobuf at all. Anything it cannot tell is left to the
    verb's own load, which reports it."""
    import os
    import stat

    from workbench.core.errors import WorkbenchError

    engine = kind == "engine"
    noun = "engine file" if engine else "ONNX file"
    label = str(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise WorkbenchError("engine file not found" if engine else "file not found",
                             file=label, hint="build it with `workbench build`" if engine
                             else "check the path") from None
    except (OSError, ValueError) as e:  # (a NUL byte, a name too long, a loop of symlinks...)
        if isinstance(e, PermissionError):
            raise WorkbenchError("cannot be read (permission denied)", file=label,
                                 hint="check the permissions of the file and its folders"
                                 ) from None
        raise WorkbenchError(f"is not a usable path ({type(e).__name__}: "
                             f"{getattr(e, 'strerror', None) or e})", file=label,
                             hint="check the path") from None
    if stat.S_ISDIR(st.st_mode):
        raise WorkbenchError(f"is a folder, not an {noun}", file=label,
                             hint=f"pass the {'engine' if engine else '.onnx'} file inside it")
    if not stat.S_ISREG(st.st_mode):
        return  # (a pipe, a device: opening it could block; the verb's load reports it)
    if st.st_size == 0:
        raise WorkbenchError("file is empty (0 bytes)", file=label,
                             hint="rebuild it; the write may have failed" if engine else
                             "re-export the model; the write may have failed")
    try:
        with open(path, "rb") as f:
            if engine or label.lower().endswith(ONNX_TEXT_SUFFIXES):
                return  # (readable is all we can cheaply say)
            problem, text = _not_onnx(f, st.st_size)
    except PermissionError:
        raise WorkbenchError("cannot be read (permission denied)", file=label,
                             hint="check the permissions of the file") from None
    except OSError as e:
        raise WorkbenchError(f"cannot be read ({type(e).__name__}: {e.strerror or e})",
                             file=label, hint="check the file and the disk") from None
    if problem is None:
        return
    if text:
        raise WorkbenchError("not a readable ONNX model (it is a text file, not an ONNX "
                             "protobuf)", file=label, hint="pass the .onnx model file")
    if problem == "no-graph":  # the words of workbench.core.model._checked
        raise WorkbenchError("not an ONNX model (no graph or IR version)", file=label,
                             hint="the file is corrupt, truncated or not ONNX; re-export it")
    raise WorkbenchError(f"not a readable ONNX model (it is not an ONNX protobuf: {problem})",
                         file=label,
                         hint="the file is corrupt, truncated or not ONNX; re-export it")


class _CutOff(Exception):
    """A varint of the wire format ends early or runs past 10 bytes (its argument: which)."""


def _not_onnx(f: Any, size: int) -> "tuple[Optional[str], bool]":
    """(why the file is not an ONNX model at all, whether it starts as text), or (None, _)
    when it may be one. Walks the top-level protobuf fields as protobuf's parser does
    (unknown fields and groups included), seeking over length-delimited ones. Rejected are
    only files protobuf or open_model would refuse too, and of those only the ones that are
    no ONNX model at all: the wire format breaks before any ModelProto field (ir_version,
    graph, opset_import) or in what reads as text, or a whole protobuf without graph or IR
    version. An ONNX model that is truncated or corrupt further on is the load's to report
    (with the options checked first: it is a model, if a broken one)."""
    buf = f.read(_CHUNK)
    head, base = buf, 0
    pos, ir, graph, groups, fields = 0, 0, False, [], 0
    onnx_like = False  # a ModelProto field with its own wire type seen at the top level

    def varint(p: int, what: str) -> "tuple[int, int]":
        nonlocal buf, base
        if p < base or (p + 10 > base + len(buf) and base + len(buf) < size):
            f.seek(p)
            buf, base = f.read(_CHUNK), p
        value = shift = 0
        for i in range(p - base, min(p - base + 10, len(buf))):
            b = buf[i]
            value |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return value, base + i + 1
        raise _CutOff(what)  # truncated, or longer than 10 bytes

    problem: Optional[str] = None
    try:
        while pos < size:
            fields += 1
            if fields > _MAX_FIELDS:
                return None, False
            tag, pos = varint(pos, "a field tag")
            field, wire = tag >> 3, tag & 7
            if tag > 0xFFFFFFFF:
                return None, False  # (not worth mirroring exactly: the load decides)
            if field == 0:
                problem = "field number 0: the wire format is corrupt"
                break
            if wire == 0:
                value, pos = varint(pos, "a number")
                if field == 1 and not groups:
                    ir = value - (1 << 64) if value >= 1 << 63 else value
                    onnx_like = True
            elif wire == 1 or wire == 5:
                pos += 8 if wire == 1 else 4
            elif wire == 2:
                length, pos = varint(pos, "a length")
                pos += length
                if field in (7, 8) and not groups:
                    graph = graph or field == 7
                    onnx_like = True
            elif wire == 3:
                groups.append(field)
                if len(groups) > _MAX_GROUPS:
                    return None, False
            elif wire == 4:
                if not groups or groups[-1] != field:
                    problem = "an end-group tag without its start: the wire format is corrupt"
                    break
                groups.pop()
            else:
                problem = f"wire type {wire} does not exist: the wire format is corrupt"
                break
        else:
            if pos > size:
                problem = f"a field runs {pos - size} byte(s) past the end of the file: truncated?"
            elif groups:
                problem = "the file ends inside a group: truncated?"
            elif not graph or ir <= 0:
                problem = "no-graph"
    except _CutOff as e:
        problem = f"{e} is cut off or malformed"
    if problem is None:
        return None, False
    text = _looks_like_text(head)
    if problem != "no-graph" and onnx_like and not text:
        return None, False  # a broken ONNX model: the load names what is wrong with it
    return problem, text


def _looks_like_text(head: bytes) -> bool:
    """The first bytes read as UTF-8 text (no control characters but tab, newlines, form
    feed): a README, a script, JSON... handed over where the model belongs."""
    import codecs

    if not head or any(b < 0x20 and b not in (9, 10, 12, 13) for b in head[:4096]):
        return False
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head[:4096], final=False)
    except UnicodeDecodeError:
        return False
    return True
