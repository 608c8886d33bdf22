#!/usr/bin/env python3
"""git clean filter: a notebook without outputs, execution counts, widget state or the saving
environment's kernel display name and interpreter details (stdin -> stdout).

Running the notebooks then leaves `git status` clean: git compares what this filter makes of the
file with what is committed, so only edits to cells show as changes. Set up by
scripts/git_filters.sh (scripts/setup.sh runs it). Stdlib only; the layout is nbformat's
(indent 1, sorted keys), so a notebook already without outputs passes through unchanged.
Input that is not a notebook passes through untouched (a filter must never lose a file).
"""
import json
import sys


def strip(nb: dict) -> dict:
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        meta = cell.get("metadata", {})
        for key in ("execution", "collapsed", "scrolled"):
            meta.pop(key, None)
    meta = nb.setdefault("metadata", {})
    meta.pop("widgets", None)
    # what the saving environment writes about itself (JupyterLab: "Python 3 (ipykernel)", the
    # interpreter's version, codemirror mode) is not the notebook's: one form for all
    spec = meta.get("kernelspec")
    if isinstance(spec, dict) and spec.get("name") == "python3":
        spec["display_name"] = "Python 3"
    lang = (spec.get("language") if isinstance(spec, dict) else None) or \
        (meta.get("language_info") or {}).get("name")
    if lang:
        meta["language_info"] = {"name": lang}
    return nb


def main() -> int:
    data = sys.stdin.buffer.read()
    try:
        nb = json.loads(data.decode("utf-8"))
        if not isinstance(nb, dict) or "cells" not in nb:
            raise ValueError("not a notebook")
    except ValueError:
        sys.stdout.buffer.write(data)
        return 0
    text = json.dumps(strip(nb), indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    sys.stdout.buffer.write(text.encode("utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
