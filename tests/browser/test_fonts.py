"""The Chinese course and the exercises' ✅ / ✏️ are drawn with real glyphs, not empty boxes
("tofu"): a zh chapter run in JupyterLab in Debian's chromium, its Chinese title and check verdict
measured in the page's own fonts. A character is tofu when it draws exactly what a code point no
font has draws (the same .notdef box), pixel for pixel; the ✅ / ✏️ must also be drawn in colour
(an emoji font, fonts-noto-color-emoji). The same measure run in a chromium that sees only
DejaVu (a stock Debian without the fonts scripts/setup.sh installs) finds tofu: the test can fail."""
from __future__ import annotations

import base64
import os
import re
from pathlib import Path

import pytest

from browser_support import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, REPO

pytestmark = pytest.mark.browser
COURSE = REPO / "notebooks" / "course"
CJK = re.compile(r"[\u4e00-\u9fff]")
MISSING = ["\u0378", "\U0010FFFD"]   # unassigned / private-use plane 16: no font draws them
HINT = "install the fonts: apt-get install fonts-wqy-microhei fonts-noto-color-emoji (scripts/setup.sh does)"

# Each character drawn at 40 px on a canvas in the computed font of `selector` (so with the
# browser's own font fallback), compared with the box of the missing code points; also its width
# in the page (a Range around the character in the element's own text).
GLYPHS_JS = r"""
({selector, chars, missing}) => {
  const el = document.querySelector(selector);
  if (!el) return {error: 'no element ' + selector};
  const cs = getComputedStyle(el);
  const font = `${cs.fontStyle} ${cs.fontWeight} 40px ${cs.fontFamily}`;
  const draw = (ch) => {
    const c = document.createElement('canvas'); c.width = 96; c.height = 64;
    const ctx = c.getContext('2d'); ctx.font = font; ctx.textBaseline = 'top';
    ctx.fillStyle = '#000'; ctx.fillText(ch, 8, 8);
    const d = ctx.getImageData(0, 0, c.width, c.height).data;
    let ink = 0, colour = 0;
    for (let i = 0; i < d.length; i += 4) {
      if (d[i + 3] > 40) { ink++;
        if (Math.max(d[i], d[i + 1], d[i + 2]) - Math.min(d[i], d[i + 1], d[i + 2]) > 60) colour++; }
    }
    return {ch, width: ctx.measureText(ch).width, ink, colour, key: c.toDataURL(), png: c.toDataURL('image/png')};
  };
  const boxes = missing.map(draw);
  // the width a character takes in the page itself, in the element's text
  const pageWidth = (ch) => {
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      const i = n.data.indexOf(ch);
      if (i < 0) continue;
      const r = document.createRange(); r.setStart(n, i); r.setEnd(n, i + ch.length);
      return r.getBoundingClientRect().width;
    }
    return null;
  };
  const out = chars.map((ch) => {
    const g = draw(ch);
    return {ch, width: g.width, pageWidth: pageWidth(ch), ink: g.ink, colour: g.colour, png: g.png,
            tofu: g.ink === 0 || boxes.some((b) => b.key === g.key)};
  });
  return {font, boxesAlike: boxes[0].key === boxes[1].key, boxWidth: boxes[0].width,
          boxPng: boxes[0].png, chars: out};
}
"""

FONTS_CONF = """<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "fonts.dtd">
<fontconfig>{dirs}<cachedir>{cache}</cachedir></fontconfig>
"""


def _save_png(data_url: str, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    path.write_bytes(base64.b64decode(data_url.split(",", 1)[1]))
    return path


def _problems(result: dict, emoji: set) -> list:
    """What is wrong with the measured characters: tofu, or an emoji drawn without colour."""
    bad = []
    for c in result["chars"]:
        if c["tofu"]:
            bad.append(f"{c['ch']!r} is drawn as the missing-glyph box (tofu)")
        elif c["ch"] in emoji and c["colour"] < 20:
            bad.append(f"{c['ch']!r} is drawn without colour (no emoji font)")
    return bad


def _zh_chapter(root: Path) -> str:
    """zh/05_runtime with its answers (its checks print ✅ 回答正确), finding coursework.py here."""
    import importlib.util

    import nbformat

    spec = importlib.util.spec_from_file_location("make_course", COURSE / "make_course.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    nb = mod.render(solutions=True, course=str(COURSE))["zh/05_runtime.ipynb"]
    nbformat.write(nb, str(root / "zh_05_runtime.ipynb"))
    return "zh_05_runtime.ipynb"


def test_zh_course_draws_chinese_and_emoji_with_real_fonts(lab, browser, tmp_path):
    name = _zh_chapter(lab.server.root)
    lab.open_notebook(name)
    lab.run_all(timeout=240)
    page = lab.page
    # the chapter's title (a markdown h1) and the first check's verdict, as JupyterLab drew them
    title = page.locator(".jp-RenderedMarkdown h1").first
    title.wait_for(timeout=30_000)
    title_text = title.inner_text()
    cjk = CJK.findall(title_text)[:2]
    assert len(cjk) == 2, f"the zh chapter's title has no Chinese: {title_text!r}"
    verdict = page.locator(".jp-OutputArea-output", has_text="回答正确").first
    verdict.wait_for(timeout=30_000)
    page.evaluate("(el) => el.setAttribute('data-wb-verdict', '1')", verdict.element_handle())
    page.evaluate("(el) => el.setAttribute('data-wb-title', '1')", title.element_handle())
    lab.screenshot("fonts-zh-chapter.png")
    title.screenshot(path=str(ARTIFACTS / "fonts-zh-title.png"))
    verdict.scroll_into_view_if_needed()
    verdict.screenshot(path=str(ARTIFACTS / "fonts-zh-verdict.png"))

    heading = page.evaluate(GLYPHS_JS, {"selector": "[data-wb-title]", "chars": cjk, "missing": MISSING})
    checks = page.evaluate(GLYPHS_JS, {"selector": "[data-wb-verdict]",
                                       "chars": ["✅", "回", "✏️"], "missing": MISSING})
    for r in (heading, checks):
        assert "error" not in r, r
        # the measure itself: two code points no font has draw the same box
        assert r["boxesAlike"], "the missing-glyph boxes differ: the tofu measure cannot work here"
    for i, c in enumerate(heading["chars"] + checks["chars"]):
        _save_png(c["png"], f"fonts-glyph-{i}-U+{ord(c['ch'][0]):04X}.png")
    _save_png(heading["boxPng"], "fonts-missing-box.png")
    problems = _problems(heading, set()) + _problems(checks, {"✅", "✏️"})
    assert not problems, f"{problems} ({HINT}); font: {heading['font']}"
    # drawn glyphs take their expected width: a CJK character is about 1 em (40 px on the
    # canvas, the title's font size in the page), wider than the box
    size = float(page.evaluate("(el) => parseFloat(getComputedStyle(el).fontSize)", title.element_handle()))
    for c in heading["chars"]:
        assert 36 <= c["width"] <= 44 and c["width"] > heading["boxWidth"], c | {"png": ""}
        assert 0.85 * size <= c["pageWidth"] <= 1.15 * size, (c["ch"], c["pageWidth"], size)
    # two different Chinese characters draw differently (tofu would draw both as one box)
    assert heading["chars"][0]["png"] != heading["chars"][1]["png"] or cjk[0] == cjk[1]

    # the same measure where chromium sees only DejaVu (no CJK font, no emoji font): tofu
    dejavu = Path("/usr/share/fonts/truetype/dejavu")
    conf = tmp_path / "fonts.conf"
    conf.write_text(FONTS_CONF.format(dirs=f"<dir>{dejavu}</dir>" if dejavu.is_dir() else "",
                                      cache=tmp_path / "fc-cache"))
    bare = browser.browser_type.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS,
                                       env=dict(os.environ, FONTCONFIG_FILE=str(conf)))
    try:
        p = bare.new_page()
        p.set_content(f"<h1 style='font-family: sans-serif'>{title_text}</h1>"
                      "<pre style='font-family: monospace'>✅ 回答正确 ✏️</pre>")
        no_cjk = p.evaluate(GLYPHS_JS, {"selector": "h1", "chars": cjk, "missing": MISSING})
        no_emoji = p.evaluate(GLYPHS_JS, {"selector": "pre", "chars": ["✅", "✏️"], "missing": MISSING})
        p.screenshot(path=str(ARTIFACTS / "fonts-without-cjk-and-emoji-fonts.png"))
    finally:
        bare.close()
    assert all(c["tofu"] for c in no_cjk["chars"]), [c | {"png": ""} for c in no_cjk["chars"]]
    assert len(_problems(no_emoji, {"✅", "✏️"})) == 2, [c | {"png": ""} for c in no_emoji["chars"]]
