#!/usr/bin/env bash
# Create (or refresh) the workspace environment .venv: torch at workspace.toml's pin (pip finds
# the CPU build on this machine's disk), every component installed editable with the extras its
# tests use (workspace.toml), the test tools, the S3 server and the components' test-requires
# (workspace.toml) and the development tools (requirements-dev.txt). Re-runs only when one of
# these files or a pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
VENV=.venv
stamp_src=$(cat pyproject.toml packages/*/pyproject.toml requirements-dev.txt workspace.toml \
  scripts/workspace.py scripts/bootstrap.sh scripts/uv_sources.sh | sha256sum | cut -d' ' -f1)
if [ -f "$VENV/.stamp" ] && [ "$(cat "$VENV/.stamp")" = "$stamp_src" ]; then
  exit 0
fi
workspace() { "$PY" scripts/workspace.py "$@"; }
TORCH=$(workspace torch)
listed=$(workspace dev-requirements)
mapfile -t TEST_TOOLS <<<"$listed"
listed=$(workspace editables)
EDITABLES=()
while IFS= read -r project; do EDITABLES+=(-e "$project"); done <<<"$listed"
echo "== creating $VENV ($TORCH, all components editable)"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
pip() { "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@" 2> >(grep -v "is ignored: it is neither" >&2); }
# pip installs uv (requirements-dev.txt's pin), which installs the rest: it links torch from its
# cache instead of unpacking it. Where uv cannot be installed, pip does it all (and compiles all).
# torch is compiled at install (`compiled`): where PYTHONDONTWRITEBYTECODE is set, nothing would
# compile it later, and every process importing torch would compile it again (6 s an import
# instead of 2). The rest compiles at first import: compiling every module of the environment
# costs 45 s of CPU, of which a run imports a fraction, and check.sh lets Python write the
# .pyc files it compiles.
install() { pip install "$@"; }
compiled() { pip install "$@"; }
if pip install "$(grep -E '^uv==' requirements-dev.txt)"; then
  # shellcheck source=uv_sources.sh
  source scripts/uv_sources.sh
  uv_sources "$VENV/bin/python"
  install() {
    "$VENV/bin/python" -m uv pip install -q --python "$VENV/bin/python" "${UV_SOURCES[@]}" "$@"
  }
  compiled() { install --compile-bytecode "$@"; }
fi
compiled "$TORCH"
install -r requirements-dev.txt "${TEST_TOOLS[@]}"
install "${EDITABLES[@]}" -e ".[all]" "$TORCH"
echo "$stamp_src" > "$VENV/.stamp"
