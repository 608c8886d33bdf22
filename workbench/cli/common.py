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
    from workbench.errors import WorkbenchError

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
