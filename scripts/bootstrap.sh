#!/usr/bin/env bash
# Create (or refresh) the workspace environment .venv: torch pinned to 2.13.0 (pip finds the CPU
# build on this machine's disk), every component installed editable with all its extras, and the
# development tools. Re-runs only when a pyproject.toml or requirements file changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
VENV=.venv
stamp_src=$(cat pyproject.toml packages/*/pyproject.toml requirements-dev.txt scripts/bootstrap.sh | sha256sum | cut -d' ' -f1)
if [ -f "$VENV/.stamp" ] && [ "$(cat "$VENV/.stamp")" = "$stamp_src" ]; then
  exit 0
fi
echo "== creating $VENV (torch==2.13.0, all components editable)"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
pip() { "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@" 2> >(grep -v "is ignored: it is neither" >&2); }
pip install "torch==2.13.0"
pip install -r requirements-dev.txt
pip install \
  -e "packages/ppe-core[tensorboard,s3]" \
  -e "packages/ppe-training[ignite,plot,slack,notebook,pandas,yaml,torchdata,s3]" \
  -e "packages/ppe-runtime-cuda" \
  -e "packages/ppe-onnx[runtime]" \
  -e "packages/ppe-config[optuna,yaml]" \
  -e "packages/ppe-dataset" \
  -e ".[all]" "torch==2.13.0"
echo "$stamp_src" > "$VENV/.stamp"
