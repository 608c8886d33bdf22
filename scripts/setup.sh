#!/usr/bin/env bash
# One-command set-up on a fresh Debian/Ubuntu machine: Python packages (TensorRT-RTX included),
# Debian's chromium (browser tests) and graphviz (layout compared with dot), the graph view's JS bundle from npm; then the main
# job on a bundled sample model (skip it with --no-demo).
set -euo pipefail
cd "$(dirname "$0")/.."
DEMO=1; [ "${1:-}" = "--no-demo" ] && DEMO=0
export PIP_DISABLE_PIP_VERSION_CHECK=1
if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
# the graph layout is compiled C (workbench/_layout.c): a compiler and the Python headers first
BUILD_PKGS=""
command -v cc >/dev/null 2>&1 || BUILD_PKGS="$BUILD_PKGS gcc"
python3 -c "import os, sysconfig; raise SystemExit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))" \
  || BUILD_PKGS="$BUILD_PKGS python3-dev"
if [ -n "$BUILD_PKGS" ] && command -v apt-get >/dev/null 2>&1; then
  echo "== Debian packages:$BUILD_PKGS (the compiled graph layout)"
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq $BUILD_PKGS >/dev/null
fi
echo "== python packages"
python3 -m pip install -q -e ".[test]"
python3 -c "import workbench._layout" 2>/dev/null || echo "WARNING: the compiled graph layout was not built" \
  "(no C compiler or Python headers): graphs are laid out in Python, 10-30x slower" >&2
# byte-compile as a regular (non-editable) install does: with PYTHONDONTWRITEBYTECODE set, every
# `workbench` call would otherwise recompile each module it imports (tens of ms per call)
python3 -m compileall -q workbench widgets >/dev/null
bash scripts/git_filters.sh   # running the notebooks leaves `git status` clean
PKGS=""
command -v chromium >/dev/null 2>&1 || PKGS="$PKGS chromium"   # browser tests
command -v dot >/dev/null 2>&1 || PKGS="$PKGS graphviz"        # graph layout vs Graphviz dot
if [ -n "$PKGS" ]; then
  echo "== Debian packages:$PKGS"
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
