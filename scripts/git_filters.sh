#!/usr/bin/env bash
# In a git clone: notebooks are compared without their outputs (.gitattributes names the filter),
# so running them does not show them as modified. Safe to run again; outside git it does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || exit 0
git config filter.strip-notebook-outputs.clean "python3 scripts/strip_notebook.py"
git config filter.strip-notebook-outputs.smudge cat
