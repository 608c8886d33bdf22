"""The fallback control the Precision and Build panels share: a dropdown of the float
precisions a quantized target may compute its nodes without Q/DQ in (the precision table's,
through `workbench.precision.spec.fallback_choices`), shown and enabled only while the target
is quantized. Its value reaches `PrecisionSpec.fallback` / `BuildConfig.fallback`, the field
`--fallback` fills on the command line.
"""
from __future__ import annotations

from typing import Any, List, Optional, Tuple

import ipywidgets as W

from workbench.precision.options import PRECISION_OPTIONS
from workbench.precision.spec import fallback_choices

NONE = ""  # the dropdown's value for "no fallback": the nodes without Q/DQ stay FP32
NONE_LABEL = "none (FP32)"


def _help() -> str:
    """The tooltip: the `--fallback` flag's own help (one text for the CLI and the panels)."""
    opt = next(o for o in PRECISION_OPTIONS if o.field == "fallback")
    return f"{opt.flag}: {opt.help}"


def options_for(target: Any) -> List[Tuple[str, str]]:
    """(label, value) pairs for `target`: none, then each float precision it may fall back to."""
    return [(NONE_LABEL, NONE)] + [(n, n) for n in fallback_choices(target)]


def fallback_dropdown(target: Any, value: Optional[str] = None, *,
                      description: str = "Fallback") -> W.Dropdown:
    """The control for `target`, holding `value` (None: none)."""
    dd = W.Dropdown(options=options_for(target), value=NONE, description=description,
                    tooltip=_help(), layout=W.Layout(width="220px"))
    follow_target(dd, target, value)
    return dd


def follow_target(dd: W.Dropdown, target: Any, value: Optional[str] = None) -> None:
    """Offer `target`'s choices, keep `value` (the current one when None) where it is still
    one of them (else none), and show/enable the control only for a quantized target."""
    keep = dd.value if value is None else value
    opts = options_for(target)
    dd.options = opts
    dd.value = keep if keep in [v for _, v in opts] else NONE
    on = len(opts) > 1
    dd.disabled = not on
    dd.layout.display = None if on else "none"


def fallback_value(dd: W.Dropdown) -> Optional[str]:
    """The spec's `fallback`: the chosen precision, None for none or a disabled control."""
    return None if dd.disabled or dd.value == NONE else str(dd.value)
