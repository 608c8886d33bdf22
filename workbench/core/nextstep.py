"""Next steps as the CLI and the panels show them: a `workbench.core.findings.NextStep` record
rendered as a shell line that runs when pasted (the user's own paths, shell-quoted, every
required flag), as a short line for a panel, or as its record for --json.

The engine room (build, check, fix, compare, ...) only makes records; the words `workbench
VERB ...` are written here and nowhere else.
"""
from __future__ import annotations

import shlex
from typing import Any, Dict, Iterable, List, Optional

from workbench.core.findings import PLACEHOLDERS, NextStep, steps_of

PROGRAM = "workbench"


def _word(text: str) -> str:
    """One shell word: quoted where it needs it; an unfilled placeholder as its capitals
    (`{data}` -> DATA: the one thing the user must write in)."""
    for name in PLACEHOLDERS:
        text = text.replace("{" + name + "}", name.upper())
    return shlex.quote(text)


def command(s: Any, *, model: Optional[str] = None, data: Optional[str] = None,
            candidate: Optional[str] = None) -> str:
    """`workbench VERB ARGS FLAGS` for the step (a NextStep or its dict) with the placeholders
    this run knows filled in."""
    s = NextStep.from_dict(s).bound(model=model, data=data, candidate=candidate)
    words = [PROGRAM, s.verb, *(_word(a) for a in s.args)]
    for flag, value in s.flags:
        if value is None:
            words.append(flag)
        elif isinstance(value, str):
            words += [flag, _word(value)]
        else:
            words += [flag, *(_word(v) for v in value)]
    return " ".join(words)


# flags whose values are paths: a short line leaves them out (the tooltip has them)
_PATH_FLAGS = ("-o", "--output", "--inputs", "--calib", "--out", "--export-script")


def short(s: Any) -> str:
    """A panel's one short line: the verb and the flags that say what it does (`fix --recipe
    decompose:node=/a`), then why; no paths (the command with them is `command`)."""
    s = NextStep.from_dict(s)
    words = [s.verb]
    for flag, value in s.flags:
        if flag in _PATH_FLAGS:
            continue
        words.append(flag if value is None else f"{flag} {value if isinstance(value, str) else ' '.join(value)}")
    head = " ".join(words)
    return f"{head}: {s.why}" if s.why else head


def record(s: Any, **paths: Optional[str]) -> Dict[str, Any]:
    """The step as --json prints it: the record with this run's paths filled in, plus the
    `command` it renders to (so a script can run it without rebuilding the line)."""
    s = NextStep.from_dict(s).bound(**paths)
    d = s.to_dict()
    d["command"] = command(s)
    return d


def lines(steps: Iterable[Any], indent: str = "    ", seen: Optional[set] = None,
          **paths: Optional[str]) -> List[str]:
    """The printed lines of some next steps: `$ COMMAND  # why`. `seen`: the commands
    printed already in this output (each is printed once; the set grows)."""
    out = []
    for s in steps_of(steps):
        line = command(s, **paths)
        if seen is not None:
            if line in seen:
                continue
            seen.add(line)
        why = f"  # {s.why}" if s.why else ""
        out.append(f"{indent}$ {line}{why}")
    return out


def finding_text(f: Any, indent: str = "  ", seen: Optional[set] = None,
                 **paths: Optional[str]) -> str:
    """A finding as the CLI prints it: its one line, then one line per next step not printed
    already (`seen`, see `lines`)."""
    where = f" [{', '.join(f.nodes)}]" if getattr(f, "nodes", None) else ""
    hint = f" -> {f.hint}" if getattr(f, "hint", None) else ""
    head = f"{indent}{f.severity.upper()} {f.code}{where}: {f.message}{hint}"
    return "\n".join([head, *lines(getattr(f, "next_steps", ()), indent + "    ", seen,
                                     **paths)])


def inline(steps: Iterable[Any], **paths: Optional[str]) -> str:
    """Next steps inside one line (an error's: exit 2 prints exactly one line), each command
    in backticks so it can be copied whole: "next: `workbench fix ...` (why); or `...`"."""
    parts = [f"`{command(s, **paths)}`" + (f" ({s.why})" if s.why else "")
             for s in steps_of(steps)]
    return ("next: " + "; or ".join(parts)) if parts else ""


def error_text(e: Any, seen: Optional[set] = None, **paths: Optional[str]) -> str:
    """The lines after an error's one line: its next steps (empty when it has none)."""
    return "\n".join(lines(getattr(e, "next_steps", ()) or (), "  ", seen, **paths))


def json_steps(d: Any, **paths: Optional[str]) -> Any:
    """`d` (a report's dict) with every `next_steps` list in it rendered as `record`s."""
    if isinstance(d, dict):
        return {k: ([record(s, **paths) for s in v] if k == "next_steps" and isinstance(v, list)
                    else json_steps(v, **paths)) for k, v in d.items()}
    if isinstance(d, list):
        return [json_steps(v, **paths) for v in d]
    return d


def pasteable(text: str, model: str, data: Optional[str],
              candidate: Optional[str] = None) -> str:
    """A finding's line with its MODEL / DATA / CANDIDATE placeholders as this run's paths
    (quoted), so the commands it names run as printed."""
    import re
    import shlex

    text = re.sub(r"\bMODEL\b", lambda _: shlex.quote(str(model)), text)
    if data:
        text = re.sub(r"\bDATA\b", lambda _: shlex.quote(str(data)), text)
    if candidate:
        text = re.sub(r"\bCANDIDATE\b", lambda _: shlex.quote(str(candidate)), text)
    return text
