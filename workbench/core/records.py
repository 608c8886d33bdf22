"""Records read from a dict or JSON text (build configs, precision specs): an unknown field
or JSON that is not an object is refused with the field named and the known ones listed."""
from __future__ import annotations

import json
from typing import Any, Dict, Iterable, Mapping

from workbench.core.errors import WorkbenchError


def check_fields(d: Mapping[str, Any], known: Iterable[str], what: str) -> None:
    """Raise naming the first field of `d` that is not in `known` (`what`: 'build config')."""
    known = set(known)
    unknown = sorted(set(d) - known)
    if unknown:
        quoted = ", ".join(f"'{u}'" for u in unknown)
        raise WorkbenchError(f"unknown {what} field{'s' if len(unknown) > 1 else ''} {quoted}",
                             field=unknown[0], hint="known: " + ", ".join(sorted(known)))


def json_object(text: str, what: str) -> Dict[str, Any]:
    """`text` parsed as a JSON object (`what` names it in the error)."""
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise WorkbenchError(f"{what} is not valid JSON: {e}") from None
    if not isinstance(d, dict):
        raise WorkbenchError(f"{what} JSON must be an object, not {type(d).__name__}")
    return d
