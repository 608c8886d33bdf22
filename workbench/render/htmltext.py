"""Text for the cells of the static HTML reports: escaped, with line-break opportunities in long
names (kernel names like sm90_xmma_fprop_implicit_gemm_f16f16_f16f16_f16_nhwckrsc_nhwc_tilesize...
and layer paths have no spaces, so a table column took their whole width and the page
scrolled sideways); short values and numbers never break."""
from __future__ import annotations

import html
import re

# after these a long name may wrap: path and scope separators, identifier joints, ' + ' of fused
# layers is a space already
_JOINTS = re.compile(r"([_/.:,=-])")
LONG = 20  # shorter text keeps its one line

# cells wrap only at the <wbr> opportunities (and spaces); a table still wider than the window
# scrolls inside its `.wb-scroll` box, never the page
CSS = (".wb-scroll{max-width:100%;overflow-x:auto}"
       "td,th{overflow-wrap:break-word;vertical-align:top}")


def breakable(value: object, long: int = LONG) -> str:
    """`value` as HTML-escaped text, with <wbr> after each joint character when it is longer
    than `long` characters."""
    text = str(value)
    if len(text) <= long:
        return html.escape(text)
    return "".join(html.escape(p) + ("<wbr>" if _JOINTS.fullmatch(p) else "")
                   for p in _JOINTS.split(text) if p)
