#!/usr/bin/env bash
# One-command set-up on a fresh Debian/Ubuntu machine: Python packages (TensorRT-RTX included),
# Debian's chromium (browser tests) and graphviz (layout compared with dot), the graph view's JS bundle from npm; then the main
# job on a bundled sample model (skip it with --no-demo).
set -euo pipefail
cd "$(dirname "$0")/.."
DEMO=1; [ "${1:-}" = "--no-demo" ] && DEMO=0
export PIP_DISABLE_PIP_VERSION_CHECK=1
echo "== python packages"
python3 -m pip install -q -e ".[test]"
# byte-compile as a regular (non-editable) install does: with PYTHONDONTWRITEBYTECODE set, every
# `workbench` call would otherwise recompile each module it imports (tens of ms per call)
python3 -m compileall -q workbench widgets >/dev/null
bash scripts/git_filters.sh   # running the notebooks leaves `git status` clean
PKGS=""
command -v chromium >/dev/null 2>&1 || PKGS="$PKGS chromium"   # browser tests
command -v dot >/dev/null 2>&1 || PKGS="$PKGS graphviz"        # graph layout vs Graphviz dot
if [ -n "$PKGS" ]; then
  echo "== Debian packages:$PKGS"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq $PKGS >/dev/null
fi
if command -v npm >/dev/null 2>&1; then
  echo "== graph view bundle (npm + esbuild, from the lockfile)"
  (cd widgets/js && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build)
elif [ "${CI:-}" = "true" ]; then
  echo "npm is missing: CI must build the graph view bundle from npm" >&2; exit 1
else
  echo "== npm not found: using the bundled widgets/static/graphview.js"
fi
if [ "$DEMO" = 1 ]; then
  echo "== main job on a bundled sample"
  bash scripts/demo.sh
fi
