"""The reader registry: each reader declares what it reads and how to recognise it.

Like Model Explorer's adapters, a reader is a small module with one `Reader(...)` declaration:
its name, the kind of thing it returns ("layers", "profile", "analysis", "run-results"), a line
saying which tool and version write the file, `accepts(data)` (a cheap test on parsed JSON) and
`read(data, source)` returning one type. `detect` picks the first reader that accepts the
data; when none does the error names the file and lists what was expected.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, List, Optional

from workbench.core.errors import WorkbenchError


@dataclass(frozen=True)
class Reader:
    """One file schema: what it is, how to recognise it, how to read it."""

    name: str
    kind: str  # "layers" | "profile" | "analysis" | "run-results"
    reads: str  # who writes it (tool, version, flag)
    accepts: Callable[[Any], bool]
    read: Callable[[Any, str], Any]
    returns: str = ""


_READERS: List[Reader] = []


def register(reader: Reader) -> Reader:
    """Add a reader (order matters: more specific readers first)."""
    if any(r.name == reader.name for r in _READERS):
        raise ValueError(f"a reader named {reader.name!r} is already registered")
    _READERS.append(reader)
    return reader


def readers(kind: Optional[str] = None) -> List[Reader]:
    """The registered readers, optionally of one kind."""
    return [r for r in _READERS if kind is None or r.kind == kind]


def find_reader(data: Any, kind: Optional[str] = None) -> Optional[Reader]:
    """The first reader (of `kind`) that accepts `data`, or None."""
    for r in readers(kind):
        try:
            if r.accepts(data):
                return r
        except (TypeError, KeyError, AttributeError, IndexError):
            continue
    return None


def detect(data: Any, source: str = "<memory>", kind: Optional[str] = None) -> Reader:
    """The reader for `data`; a WorkbenchError naming `source` and the expected schemas if none."""
    r = find_reader(data, kind)
    if r is not None:
        return r
    expected = "; ".join(f"{x.name} ({x.reads})" for x in readers(kind))
    shape = _shape(data)
    raise WorkbenchError(f"no reader recognises this file ({shape})", file=source,
                         hint=f"expected one of: {expected}")


def _shape(data: Any) -> str:
    if isinstance(data, dict):
        return "an object with keys " + (", ".join(map(str, list(data)[:6])) or "none")
    if isinstance(data, list):
        first = data[0] if data else None
        inner = (f"objects with keys {', '.join(map(str, list(first)[:5]))}"
                 if isinstance(first, dict) else type(first).__name__ if data else "nothing")
        return f"a list of {inner}"
    return f"a JSON {type(data).__name__}"
