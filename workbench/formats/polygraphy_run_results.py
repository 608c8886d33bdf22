"""Polygraphy RunResults JSON: `{"lst": [[runner, [IterationResult...]]], "polygraphy_class":
"RunResults"}`, written by `polygraphy run --save-outputs` and `workbench compare --save-results`.

This reader says what the file holds (runners, iterations, each output's dtype and shape from its
.npy header) without decoding any array, so detection and listings stay cheap on large
results; `workbench.compare.load_run_results` loads the arrays themselves (pickle-free, with a
memory budget).
"""
from __future__ import annotations

import base64
import binascii
import io
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Tuple

from workbench.core.errors import WorkbenchError
from workbench.formats.registry import Reader, register

_HINT = "save results with `workbench compare --save-results` or `polygraphy run --save-outputs`"
OutputInfo = Tuple[str, Tuple[int, ...]]  # (dtype, shape)


@dataclass
class RunResultsInfo:
    """runner name -> one {output name: (dtype, shape)} per iteration."""

    runners: Dict[str, List[Dict[str, OutputInfo]]] = field(default_factory=dict)
    source: str = "<memory>"

    @property
    def runner_names(self) -> List[str]:
        return list(self.runners)


def accepts(data: Any) -> bool:
    return isinstance(data, dict) and (data.get("polygraphy_class") == "RunResults"
                                       or (set(data) == {"lst"} and isinstance(data["lst"], list)))


def _header(b64: str, where: str, source: str) -> OutputInfo:
    from numpy.lib import format as npf

    try:
        head = base64.b64decode(b64[:1024].encode("ascii") + b"=" * (-min(len(b64), 1024) % 4))
        f = io.BytesIO(head)
        version = npf.read_magic(f)
        read = npf.read_array_header_1_0 if version == (1, 0) else npf.read_array_header_2_0
        shape, _fortran, dtype = read(f)
    except (ValueError, binascii.Error, EOFError, SyntaxError, UnicodeEncodeError) as e:
        raise WorkbenchError(f"output array has no readable .npy header ({str(e)[:100]})",
                             file=source, field=where, hint=_HINT) from None
    return str(dtype), tuple(int(d) for d in shape)


def _bad(what: str, where: str, source: str) -> WorkbenchError:
    return WorkbenchError(f"not a RunResults JSON file ({what})", file=source,
                          field=where or None, hint=_HINT)


Arrays = Optional[List[Tuple[str, str, str]]]  # [(output name, base64 .npy, JSON path)]


def iterations(data: Any, source: str = "<memory>") -> Iterator[Tuple[int, str, Arrays]]:
    """Walk a parsed RunResults file: (entry index, runner name, arrays) per iteration, and
    (entry index, runner name, None) first for each entry, so that a reader starts the runner
    afresh (a name listed twice keeps its last entry). Structure errors name the file and the
    JSON path."""
    lst = data.get("lst") if isinstance(data, dict) else None
    if not isinstance(lst, list):
        raise _bad("no 'lst' list", "lst", source)
    for i, entry in enumerate(lst):
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)
                and isinstance(entry[1], list)):
            raise _bad("expected [runner name, [iterations]]", f"lst[{i}]", source)
        name, iters = entry
        yield i, name, None
        for j, it in enumerate(iters):
            outputs = it.get("outputs") if isinstance(it, dict) else None
            if not isinstance(outputs, dict):
                raise _bad("iteration without an 'outputs' object", f"lst[{i}][{j}].outputs",
                           source)
            arrays = []
            for k, v in outputs.items():
                where = f"lst[{i}][{j}].outputs.{k}"
                enc = v.get("values") if isinstance(v, dict) and \
                    v.get("polygraphy_class") == "LazyArray" else v
                arr = enc.get("array") if isinstance(enc, dict) else None
                if not isinstance(arr, str):
                    raise _bad("output without an 'array' string", where, source)
                arrays.append((str(k), arr, where))
            yield i, name, arrays


def read(data: Any, source: str = "<memory>") -> RunResultsInfo:
    out = RunResultsInfo(source=source)
    for _i, name, arrays in iterations(data, source):
        if arrays is None:
            out.runners[name] = []
        else:
            out.runners[name].append({k: _header(b64, where, source) for k, b64, where in arrays})
    return out


READER = register(Reader(
    name="polygraphy-run-results", kind="run-results", accepts=accepts, read=read,
    reads="Polygraphy RunResults JSON (polygraphy run --save-outputs, workbench compare "
          "--save-results)", returns="RunResultsInfo"))
