"""`Finding`: one record per thing worth telling the user about a node or tensor (the non-fatal
counterpart of `workbench.core.errors.WorkbenchError`; also importable from there), and `NextStep`:
what to run next, as data.

A next step is never command text here: the CLI renders it as a shell line that runs when
pasted (`workbench.core.nextstep`), a panel as a button or a short line, `--json` as the record.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

SEVERITIES = ("error", "warning", "info")

# Placeholders a NextStep's arguments and flag values may hold, filled where the step is shown:
# {model} the model the finding is about (the user's own path), {stem} that path without its
# .onnx suffix (for output names: "{stem}.engine"), {fixed} where a fix of it goes by default
# (`fsutil.fixed_name`: m.fixed.onnx, m.fixed2.onnx for m.fixed.onnx), {candidate} the compared
# model, {data} the user's input data. One the renderer cannot fill prints as the word in
# capitals (DATA).
PLACEHOLDERS = ("model", "stem", "fixed", "candidate", "data")

FlagValue = Union[str, Sequence[str], None]


@dataclass(frozen=True)
class NextStep:
    """One `workbench VERB ARGS... FLAGS...` to run next and why.

    verb: a CLI verb ("fix", "build", "check", ...); args: its positional arguments; flags:
    (flag, value) pairs in order, value None for a switch, a list for a flag taking several
    values (`--exclude a b`); why: what running it does, in a few words. Every flag the verb
    requires is in `flags` (a step that prints must run as printed)."""

    verb: str
    args: Tuple[str, ...] = ()
    flags: Tuple[Tuple[str, FlagValue], ...] = ()
    why: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", tuple(str(a) for a in self.args))
        object.__setattr__(self, "flags", tuple(
            (str(f), v if v is None or isinstance(v, str) else tuple(str(x) for x in v))
            for f, v in self.flags))

    def bound(self, **values: Optional[str]) -> "NextStep":
        """This step with the placeholders given in `values` filled (model=..., data=...;
        `stem` follows from `model` when not given). Unknown placeholders stay as they are."""
        vals = {k: str(v) for k, v in values.items() if v is not None}
        if "model" in vals and "stem" not in vals:
            m = vals["model"]
            vals["stem"] = m[:-5] if m.lower().endswith(".onnx") else m
        if "model" in vals and "fixed" not in vals:
            vals["fixed"] = fixed_name(vals["model"])
        if not vals:
            return self

        def fill(text: str) -> str:
            for k, v in vals.items():
                text = text.replace("{" + k + "}", v)
            return text

        return NextStep(self.verb, tuple(fill(a) for a in self.args),
                        tuple((f, None if v is None else fill(v) if isinstance(v, str)
                               else tuple(fill(x) for x in v)) for f, v in self.flags), self.why)

    def unfilled(self) -> List[str]:
        """The placeholders still in the step (what the user has to supply, e.g. ['data'])."""
        import re

        text = " ".join([*self.args, *(v if isinstance(v, str) else " ".join(v)
                                       for _, v in self.flags if v is not None)])
        return sorted(set(re.findall(r"\{(" + "|".join(PLACEHOLDERS) + r")\}", text)))

    def to_dict(self) -> Dict[str, Any]:
        return {"verb": self.verb, "args": list(self.args),
                "flags": [[f, v if v is None or isinstance(v, str) else list(v)]
                          for f, v in self.flags], "why": self.why}

    @classmethod
    def from_dict(cls, d: Any) -> "NextStep":
        if isinstance(d, NextStep):
            return d
        return cls(d["verb"], tuple(d.get("args") or ()),
                   tuple((f, v) for f, v in (d.get("flags") or ())), d.get("why") or "")


def fixed_name(path: str) -> str:
    """Where a fix of file `path` goes by default: `<name>.fixed.onnx` beside it
    (`<name>.fixed2.onnx` for a file already named so, and so on)."""
    import re
    from pathlib import Path as _Path

    src = _Path(path)
    m = re.fullmatch(r"(.*)\.fixed(\d*)", src.stem)
    stem = f"{m.group(1)}.fixed{int(m.group(2) or 1) + 1}" if m else f"{src.stem}.fixed"
    return str(src.with_name(stem + ".onnx"))


def step(verb: str, *args: str, why: str = "", **flags: FlagValue) -> NextStep:
    """`step("fix", "{model}", o="{stem}.fixed.onnx", auto=True, why=...)`: a NextStep from
    keyword flags (one letter: `-o`; longer: `--long-name` from long_name; True: a switch;
    False / None: left out)."""
    pairs: List[Tuple[str, FlagValue]] = []
    for name, value in flags.items():
        if value is False or value is None:
            continue
        flag = ("-" + name) if len(name) == 1 else "--" + name.replace("_", "-")
        pairs.append((flag, None if value is True else value))
    return NextStep(verb, tuple(args), tuple(pairs), why)


def steps_of(items: Optional[Iterable[Any]]) -> List[NextStep]:
    """NextSteps from records or their dicts (a JSON report read back)."""
    return [NextStep.from_dict(s) for s in (items or ())]


@dataclass
class Finding:
    """Anything worth telling the user about a node or tensor.

    severity: "error" | "warning" | "info"; code: a stable machine-readable id such as
    "unsupported-op" or "fp16-overflow"; source: who said it ("static", "parser", "build-log", ...).
    """

    severity: str
    code: str
    message: str
    nodes: List[str] = field(default_factory=list)
    tensors: List[str] = field(default_factory=list)
    hint: Optional[str] = None
    source: str = ""
    op: Optional[str] = None
    extra: Dict[str, Any] = field(default_factory=dict)
    # whose fault, where known (`workbench.core.blame.CATEGORIES`): structure, weights, inputs,
    # machine, tool
    category: Optional[str] = None
    # what to run next, as records (the hint stays prose: no command text in it)
    next_steps: List[NextStep] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")
        self.next_steps = steps_of(self.next_steps)

    def to_dict(self) -> Dict[str, Any]:
        d = asdict(self)
        d["next_steps"] = [s.to_dict() for s in self.next_steps]
        return d

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Finding":
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        return cls(**known)

    def __str__(self) -> str:
        """One line without commands (the CLI's `nextstep.finding_line` adds them)."""
        where = f" [{', '.join(self.nodes)}]" if self.nodes else ""
        why = "; ".join(s.why for s in self.next_steps if s.why)
        nxt = f" -> {'; '.join(t for t in (self.hint, why) if t)}" if (self.hint or why) else ""
        return f"{self.severity.upper()} {self.code}{where}: {self.message}{nxt}"
