#!/usr/bin/env bash
# One-command set-up on a fresh Debian/Ubuntu machine (as root or with sudo):
#   - Debian packages where missing: a C compiler and the Python headers (the compiled graph
#     layout, workbench/graphs/_layout.c), python3-venv, chromium (browser tests), graphviz (layout
#     compared with dot), a CJK font and an emoji font (the Chinese course and the ✅ / ✏️ marks
#     render as glyphs, not empty boxes);
#   - the project's Python environment: a virtual environment in .venv (Debian 12 and Ubuntu 24.04
#     mark their python3 "externally managed", PEP 668: pip refuses to install into it), with
#     everything in it (TensorRT-RTX included, `pip install -e ".[test]"`); with a virtual
#     environment already active and no .venv yet, .venv becomes a link to the active one;
#   - the graph view's JS bundle from npm (when npm is there), then the main job on a bundled
#     sample model.
# Options: --no-demo (skip the main job), --python-only (only the Python environment: no Debian
# packages, no npm bundle, no main job). PYTHON=... picks the interpreter the environment is made
# from (default: python3 on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
DEMO=1; SYSTEM=1
for arg in "$@"; do
  case "$arg" in
    --no-demo) DEMO=0 ;;
    --python-only) DEMO=0; SYSTEM=0 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup.sh: unknown option $arg (use --no-demo, --python-only or --help)" >&2; exit 2 ;;
  esac
done
export PIP_DISABLE_PIP_VERSION_CHECK=1
VENV=.venv
BASE_PY="${PYTHON:-python3}"
command -v "$BASE_PY" >/dev/null 2>&1 || { echo "setup.sh: $BASE_PY not found: install Python >= 3.9 (apt-get install python3)" >&2; exit 1; }
"$BASE_PY" -c 'import sys; raise SystemExit(sys.version_info < (3, 9))' \
  || { echo "setup.sh: $("$BASE_PY" --version 2>&1) is too old: Python >= 3.9 is needed" >&2; exit 1; }

# ---------------------------------------------------------------- Debian packages (one apt run)
# (apt-cache's output read whole first: `| grep -q` would stop reading at the match, and under
# pipefail apt-cache's SIGPIPE on its next write would turn every "yes" into "no")
has_candidate() { local out; out="$(apt-cache policy "$1" 2>/dev/null)" || return 1
                  [[ "$out" == *"Candidate: "[!\(]* ]]; }
if [ "$SYSTEM" = 1 ]; then
  PKGS=""
  command -v cc >/dev/null 2>&1 || PKGS="$PKGS gcc"
  "$BASE_PY" -c "import os, sysconfig; raise SystemExit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))" \
    || PKGS="$PKGS python3-dev"
  # Debian splits venv's pip bootstrap (ensurepip) into python3-venv
  [ -x "$VENV/bin/python" ] || [ -n "${VIRTUAL_ENV:-}" ] || "$BASE_PY" -c "import ensurepip, venv" 2>/dev/null \
    || PKGS="$PKGS python3-venv"
  command -v chromium >/dev/null 2>&1 || PKGS="$PKGS chromium"   # browser tests
  command -v dot >/dev/null 2>&1 || PKGS="$PKGS graphviz"        # graph layout vs Graphviz dot
  # fonts: without them every Chinese character and emoji in the notebooks is an empty box
  if ! command -v fc-list >/dev/null 2>&1 || [ -z "$(fc-list :lang=zh family 2>/dev/null)" ]; then
    PKGS="$PKGS fonts-wqy-microhei"
  fi
  if ! command -v fc-list >/dev/null 2>&1 || ! fc-list 2>/dev/null | grep -qi "color emoji"; then
    PKGS="$PKGS fonts-noto-color-emoji"
  fi
  if [ -n "$PKGS" ]; then
    if ! command -v apt-get >/dev/null 2>&1; then
      echo "WARNING: not a Debian/Ubuntu system (no apt-get): install$PKGS yourself" >&2
    else
      if [ "$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else SUDO=none; fi
      if [ "$SUDO" = none ]; then
        echo "WARNING: not root and no sudo: install$PKGS as root (apt-get install$PKGS)" >&2
      else
        $SUDO apt-get update -qq
        # a package this release does not have is said and skipped (the rest still installs)
        AVAILABLE=""
        for p in $PKGS; do
          [ "$p" = fonts-wqy-microhei ] && ! has_candidate "$p" && p=fonts-noto-cjk
          if has_candidate "$p"; then AVAILABLE="$AVAILABLE $p"
          else echo "WARNING: no Debian package $p in this release's apt sources: install it another way" >&2; fi
        done
        echo "== Debian packages:$AVAILABLE"
        [ -z "$AVAILABLE" ] || DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $AVAILABLE >/dev/null
      fi
    fi
  fi
fi

# ---------------------------------------------------------------- the Python environment
if [ ! -e "$VENV" ] && [ -n "${VIRTUAL_ENV:-}" ] && [ -x "$VIRTUAL_ENV/bin/python" ]; then
  echo "== using the active virtual environment $VIRTUAL_ENV (.venv links to it)"
  ln -s "$VIRTUAL_ENV" "$VENV"
elif [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "" 2>/dev/null; then
  echo "== virtual environment $VENV (already there)"
else
  echo "== virtual environment $VENV, made from $("$BASE_PY" --version 2>&1) ($(command -v "$BASE_PY"))"
  rm -rf "$VENV"
  "$BASE_PY" -m venv "$VENV" || { echo "setup.sh: could not make a virtual environment: apt-get install python3-venv, then run again" >&2; exit 1; }
fi
PY="$VENV/bin/python"
echo "== python packages into $VENV"
"$PY" -m pip install -q -e ".[test]"
"$PY" -c "import workbench.graphs._layout" 2>/dev/null || echo "WARNING: the compiled graph layout was not built" \
  "(no C compiler or Python headers): graphs are laid out in Python, 10-30x slower" >&2
# byte-compile as a regular (non-editable) install does: with PYTHONDONTWRITEBYTECODE set, every
# `workbench` call would otherwise recompile each module it imports (tens of ms per call)
"$PY" -m compileall -q workbench widgets >/dev/null
bash scripts/git_filters.sh   # running the notebooks leaves `git status` clean

if [ "$SYSTEM" = 1 ]; then
  if command -v npm >/dev/null 2>&1; then
    echo "== graph view bundle (npm + esbuild, from the lockfile)"
    (cd widgets/js && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build)
  elif [ "${CI:-}" = "true" ]; then
    echo "npm is missing: CI must build the graph view bundle from npm" >&2; exit 1
  else
    echo "== npm not found: using the bundled widgets/static/graphview.js"
  fi
fi
if [ "$DEMO" = 1 ]; then
  echo "== main job on a bundled sample"
  PATH="$PWD/$VENV/bin:$PATH" bash scripts/demo.sh
fi
echo "== done. The environment is $VENV: run the tests with  $VENV/bin/python -m pytest -q"
echo "   and open the notebooks with  source $VENV/bin/activate && jupyter lab notebooks/"
