"""The shipped graph-view bundle is the build of the committed JS sources (no network at run
time: the bundle is all the browser gets). scripts/setup.sh rebuilds it with npm + esbuild from the
lockfile; a stale committed bundle then shows up as a modified file."""
from __future__ import annotations

import subprocess

from conftest import REPO

BUNDLE = REPO / "widgets" / "static" / "graphview.js"
STYLE = BUNDLE.with_suffix(".css")  # the stylesheet esbuild writes beside it


def test_bundle_exists_and_loads_nothing_remote():
    text = BUNDLE.read_text(encoding="utf-8")
    assert len(text) > 15_000  # the canvas view, bundled (no runtime dependencies)
    for remote in ("https://cdn", "http://cdn", "unpkg.com", "jsdelivr", "googleapis"):
        assert remote not in text


def test_committed_bundle_matches_the_build_of_the_sources():
    if not (REPO / "widgets" / "js" / "node_modules").exists():
        # setup.sh (and so CI) always builds; without node_modules the comparison cannot be made
        raise AssertionError("widgets/js/node_modules is missing: run scripts/setup.sh "
                             "(npm ci && npm run build) before the tests")
    subprocess.run(["npm", "run", "--silent", "build"], cwd=REPO / "widgets" / "js", check=True,
                   capture_output=True, timeout=120)
    status = subprocess.run(["git", "status", "--porcelain", "--", str(BUNDLE), str(STYLE)],
                            cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert status == "", ("widgets/static/graphview.js or .css differs from the build of "
                          "widgets/js/src: commit the rebuilt bundle")


def test_stylesheet_is_built_from_its_source_and_not_inlined_in_the_module():
    style = STYLE.read_text(encoding="utf-8")
    assert ".wb-graph .wb-legend" in style and "\n" not in style.strip()  # minified
    assert ".wb-graph .wb-legend" not in BUNDLE.read_text(encoding="utf-8")
