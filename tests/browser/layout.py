"""Layout checks run inside the page on one cell's output area: what a user would call "cut off".

`layout_problems(locator)` returns one line per problem (empty: the panel fits):
- a box that spills: an element (not inside a clipping box) whose bounding box leaves the output
  area, or a clipping box (overflow hidden/auto/scroll) whose content is wider than it;
- a truncated label: a button, toggle button, widget description or text field whose text is
  wider than its box (scrollWidth > clientWidth, which is how the ellipsis shows; for a
  description, the laid-out width of its text, since scrollWidth rounds a sub-pixel overflow
  away while the ellipsis still shows);
- a plot wider than the widget box that holds it.
Only visible elements count (a hidden tab or a collapsed accordion is checked when opened:
`open_every_view` clicks through them).
"""
from __future__ import annotations

from typing import Any, List

CHECK_JS = r"""
(root) => {
  const R = root.getBoundingClientRect();
  const out = [];
  const TOL = 1.5;
  const shown = (el) => {
    const r = el.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) return false;
    const cs = getComputedStyle(el);
    return cs.display !== 'none' && cs.visibility !== 'hidden';
  };
  const label = (el) => {
    const cls = (typeof el.className === 'string' ? el.className : '').trim().split(/\s+/)
      .filter((c) => c).slice(0, 3).join('.');
    const text = (el.value !== undefined && el.tagName === 'INPUT' ? el.value : el.innerText || '')
      .replace(/\s+/g, ' ').trim().slice(0, 50);
    return `<${el.tagName.toLowerCase()}${cls ? '.' + cls : ''}> "${text}"`;
  };
  const clips = (el) => {
    const cs = getComputedStyle(el);
    return cs.overflowX !== 'visible';
  };
  const clipped = (el) => {  // inside a clipping box below the root?
    for (let p = el.parentElement; p && p !== root; p = p.parentElement) if (clips(p)) return p;
    return null;
  };
  const culprit = (box) => {  // the widest visible child sticking out on the right
    const B = box.getBoundingClientRect();
    let worst = null, right = B.right;
    for (const c of box.children) {
      if (!shown(c)) continue;
      const r = c.getBoundingClientRect();
      if (r.right > right + 0.5) { right = r.right; worst = c; }
    }
    return worst ? ` because of ${label(worst)} (width ${getComputedStyle(worst).width}, margin `
      + `${getComputedStyle(worst).marginLeft}/${getComputedStyle(worst).marginRight})` : '';
  };
  // a label's laid-out text width: scrollWidth rounds to whole pixels, so a text 0.4 px wider
  // than its box reads as fitting while the ellipsis shows ("aux strea..."); an inline label
  // (clientWidth 0) grows with its text and is never cut
  const textWidth = (el) => {
    const r = document.createRange();
    r.selectNodeContents(el);
    const cs = getComputedStyle(el);
    return r.getBoundingClientRect().width + parseFloat(cs.paddingLeft || '0')
      + parseFloat(cs.paddingRight || '0');
  };
  const inSvg = (el) => el instanceof SVGElement && el.parentElement instanceof SVGElement;
  for (const el of root.querySelectorAll('*')) {
    if (inSvg(el) || !shown(el)) continue;
    const r = el.getBoundingClientRect();
    const tag = el.tagName;
    if (!clipped(el) && (r.right > R.right + TOL || r.left < R.left - TOL))
      out.push(`spills out of the output area (${Math.round(r.left - R.left)}..` +
               `${Math.round(r.right - R.left)} of ${Math.round(R.width)} px): ${label(el)}`);
    const isLabel = el.classList.contains('widget-label') || el.classList.contains('widget-label-basic');
    const textual = tag === 'BUTTON' || tag === 'INPUT' || isLabel;
    if (textual && (el.scrollWidth > el.clientWidth + 1 || (isLabel && el.clientWidth > 0
        && textWidth(el) > el.clientWidth + 0.01)))
      out.push(`truncated text (${el.scrollWidth} > ${el.clientWidth} px): ${label(el)}`);
    else if (!textual && clips(el) && tag !== 'SELECT' && tag !== 'TEXTAREA' && !(el instanceof SVGElement)
             && el.scrollWidth > el.clientWidth + 1)
      out.push(`content wider than its box (${el.scrollWidth} > ${el.clientWidth} px): ${label(el)}`
               + culprit(el));
    if (el.classList.contains('js-plotly-plot')) {
      const svg = el.querySelector('svg.main-svg');
      const box = el.parentElement && el.parentElement.closest('.widget-box, .jp-OutputArea-output');
      if (svg && box) {
        const w = svg.getBoundingClientRect().width;
        if (w > box.clientWidth + TOL)
          out.push(`plot wider than its container (${Math.round(w)} > ${box.clientWidth} px): ` +
                   label(el.querySelector('.gtitle') || el));
      }
    }
  }
  return out;
}
"""

def layout_problems(locator: Any) -> List[str]:
    """The layout problems of one output area (a Playwright locator), deduplicated."""
    return list(dict.fromkeys(locator.evaluate(CHECK_JS)))


def views(locator: Any) -> Any:
    """Tabs and accordion headers inside the output area (each shows hidden content)."""
    return locator.locator(".lm-TabBar-tab, .jupyter-widget-Collapse-header, "
                           ".p-Collapse-header")


# A figure that stays on its empty placeholder is a failure. (plotly's own FigureWidget did, now
# and then, under load: anywidget gives a model 2 s to load plotly's 4.9 MB module; the panels use
# widgets.figure.Figure, which loads it once per page outside that window.)
UNDRAWN = "never drew its figure:"
DRAWN_JS = r"""
(root) => [...root.querySelectorAll('.js-plotly-plot')].filter((gd) => {
  const r = gd.getBoundingClientRect();
  return r.width > 0 && !(gd.data && gd.data.length && gd._fullLayout);
}).length
"""


def undrawn_plots(page: Any, locator: Any, timeout_ms: int = 15000) -> int:
    """Wait until every visible plot has drawn its figure (a plotly widget first draws an empty
    700-px placeholder, then the figure once attached); returns how many never did."""
    waited = 0
    while waited < timeout_ms:
        n = locator.evaluate(DRAWN_JS)
        if not n:
            return 0
        page.wait_for_timeout(250)
        waited += 250
    return int(locator.evaluate(DRAWN_JS))


def check_every_view(page: Any, locator: Any) -> List[str]:
    """Problems in the panel as shown, then with each tab selected / accordion section open."""
    n = undrawn_plots(page, locator)
    problems = [f"{UNDRAWN} {n} plot(s)"] if n else []
    problems += layout_problems(locator)
    tabs = views(locator)
    for i in range(tabs.count()):
        tab = tabs.nth(i)
        name = tab.inner_text().strip()
        tab.click()
        page.wait_for_timeout(400)  # plotly lays out a newly shown figure on resize
        n = undrawn_plots(page, locator)
        if n:
            problems.append(f"{UNDRAWN} [{name}] {n} plot(s)")
        problems += [f"[{name}] {p}" for p in layout_problems(locator)]
    if tabs.count():  # back to the first view (what the screenshot shows)
        tabs.nth(0).click()
        page.wait_for_timeout(300)
    return list(dict.fromkeys(problems))
