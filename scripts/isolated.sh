#!/usr/bin/env bash
# Install each component ALONE (from the wheels built by check_wheels.py) into a fresh virtual
# environment and run its own tests there, all of them: this is where the component tests run
# (the full suite through the meta-package runs only the cross-component tests of tests/).
# Proves that every distribution declares what it needs; ppe-config's environment must not
# contain torch or numpy. The environments are made by uv when the workspace environment has it
# (it links torch from its cache instead of unpacking it six times), else by pip.
# Usage: scripts/isolated.sh DIST_DIR [component ...]
set -euo pipefail
cd "$(dirname "$0")/.."
DIST=$(realpath "${1:?wheel directory}")
shift
PY=${PYTHON:-python3.11}
ROOT=$(pwd)
# What each environment installs (the wheels of the component and of what it needs, with the
# extras its tests use; torch; the test tools; the S3 server and mpi4py where its tests use
# them) is written once, in workspace.toml; scripts/workspace.py reads it.
workspace() { "$PY" "$ROOT/scripts/workspace.py" "$@"; }
# The environments' modules are compiled when the tests first import them, their .pyc written
# there for the next process: compiling every module at install (uv's --compile-bytecode, pip's
# default) costs 155 s of CPU for the six environments (all of torch, onnxruntime, botocore...),
# of which the tests import a fraction. Where PYTHONDONTWRITEBYTECODE is set, nothing would be
# written and every process the tests start would compile torch again (6 s an import).
unset PYTHONDONTWRITEBYTECODE
COMPONENTS=("$@")
# workspace.toml's order: the longest first (two run at a time)
if [ ${#COMPONENTS[@]} -eq 0 ]; then names=$(workspace names); mapfile -t COMPONENTS <<<"$names"; fi
LOGS=${ISOLATED_LOGS:-.venvs/logs}
mkdir -p .venvs "$LOGS"

UV=()
if "$ROOT/.venv/bin/python" -m uv --version >/dev/null 2>&1; then
  UV=("$ROOT/.venv/bin/python" -m uv)
  # shellcheck source=uv_sources.sh
  source "$ROOT/scripts/uv_sources.sh"
  uv_sources "$ROOT/.venv/bin/python"
fi

make_env() {  # make_env VENV REQUIREMENT...: a fresh environment with the requirements
  local venv=$1; shift
  rm -rf "$venv"
  if [ ${#UV[@]} -gt 0 ]; then
    "${UV[@]}" venv -q --python "$PY" "$venv"
    # Without --compile-bytecode: each module is compiled at its first import (see above)
    "${UV[@]}" pip install -q --python "$venv/bin/python" "${UV_SOURCES[@]}" "$@"
    "${UV[@]}" pip check -q --python "$venv/bin/python"
  else
    "$PY" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "$@" 2>&1 \
      | grep -v "is ignored: it is neither" || true
    "$venv/bin/python" -m pip check >/dev/null
  fi
}

run_one() {
  local comp=$1 venv=.venvs/$1 listed workers torch_free left_out
  listed=$(workspace requirements "$comp" --dist "$DIST") || return 2
  workers=$(workspace workers "$comp") || return 2
  torch_free=$(workspace torch-free "$comp") || return 2
  left_out=$(workspace isolated-without "$comp") || return 2
  local reqs=()
  mapfile -t reqs <<<"$listed"
  make_env "$venv" "${reqs[@]}"
  if [ "$torch_free" = yes ]; then
    # The pure-Python promise (ppe-config): neither torch nor numpy may be in this environment.
    if "$venv/bin/python" -c "import importlib.util as u, sys; sys.exit(0 if (u.find_spec('torch') or u.find_spec('numpy')) else 1)"; then
      echo "$comp's environment contains torch or numpy" >&2
      return 1
    fi
  fi
  # Run from a scratch directory so that nothing from the checkout's src/ is importable; the
  # root pyproject.toml still configures pytest via -c. The two long ones run with several
  # workers (workspace.toml's `workers`) while the short ones run beside them.
  # The tests of the real components that the extras it leaves out would bring skip here on
  # purpose, even where CI requires the real components (the root conftest.py).
  local parallel=()
  if [ "$workers" -gt 1 ]; then parallel=(-n "$workers"); fi
  (cd "$venv" && PPE_EXTRAS_LEFT_OUT=${left_out//$'\n'/,} "$ROOT/$venv/bin/python" -m pytest \
      -c "$ROOT/pyproject.toml" --rootdir "$ROOT" -p no:cacheprovider -q "${parallel[@]}" \
      "$ROOT/packages/$comp/tests") || return
  # A passed environment goes (about 500 MB each with torch's compiled bytecode: the index
  # scenarios that follow need the disk); a failed one stays for a look. ISOLATED_KEEP=1 keeps it.
  if [ -z "${ISOLATED_KEEP:-}" ]; then rm -rf "$venv"; fi
}

failed=0
pids=()
for comp in "${COMPONENTS[@]}"; do
  # two at a time: the machine has two cores
  while [ "$(jobs -rp | wc -l)" -ge 2 ]; do sleep 1; done
  ( if run_one "$comp" >"$LOGS/$comp.log" 2>&1; then echo "isolated $comp: ok ($(tail -1 "$LOGS/$comp.log"))";
    else echo "isolated $comp: FAILED"; tail -40 "$LOGS/$comp.log"; exit 1; fi ) &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
exit $failed
