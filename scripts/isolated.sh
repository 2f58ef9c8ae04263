#!/usr/bin/env bash
# Install each component ALONE (from the wheels built by check_wheels.py) into a fresh virtual
# environment and run its own tests there. Proves that every distribution declares what it needs;
# ppe-config's environment must not contain torch or numpy.
# Usage: scripts/isolated.sh DIST_DIR [component ...]
set -euo pipefail
cd "$(dirname "$0")/.."
DIST=$(realpath "${1:?wheel directory}")
shift
COMPONENTS=("$@")
[ ${#COMPONENTS[@]} -gt 0 ] || COMPONENTS=(ppe-config ppe-dataset ppe-core ppe-runtime-cuda ppe-onnx ppe-training)
PY=${PYTHON:-python3.11}
ROOT=$(pwd)
LOGS=${ISOLATED_LOGS:-.venvs/logs}
mkdir -p .venvs "$LOGS"
TEST_DEPS=(pytest==9.2.0 pytest-xdist==3.8.0 hypothesis==6.170.15)
# the local S3 server of the object-storage tests (ppe-core and ppe-training only: it stays
# out of ppe-config's torch- and numpy-free environment)
S3_TEST_DEPS=("moto[server]==5.2.5")

wheel() { ls "$DIST"/"$(echo "$1" | tr - _)"-*.whl; }

run_one() {
  local comp=$1 venv=.venvs/$1 reqs=()
  case $comp in
    ppe-core)         reqs=("$(wheel ppe-core)[tensorboard,s3]" torch==2.13.0 "${S3_TEST_DEPS[@]}") ;;
    ppe-training)     reqs=("$(wheel ppe-core)[tensorboard,s3]" "$(wheel ppe-training)[ignite,plot,slack,notebook,pandas,yaml,torchdata,s3]" torch==2.13.0 "${S3_TEST_DEPS[@]}") ;;
    ppe-runtime-cuda) reqs=("$(wheel ppe-core)" "$(wheel ppe-runtime-cuda)" torch==2.13.0) ;;
    ppe-onnx)         reqs=("$(wheel ppe-core)" "$(wheel ppe-onnx)[runtime]" torch==2.13.0) ;;
    # without optuna (which needs numpy): the optuna tests run in the full suite
    ppe-config)       reqs=("$(wheel ppe-config)[yaml]") ;;
    ppe-dataset)      reqs=("$(wheel ppe-dataset)" torch==2.13.0) ;;
    *) echo "unknown component $comp" >&2; return 2 ;;
  esac
  rm -rf "$venv"
  "$PY" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "${reqs[@]}" "${TEST_DEPS[@]}" 2>&1 \
    | grep -v "is ignored: it is neither" || true
  "$venv/bin/python" -m pip check >/dev/null
  if [ "$comp" = ppe-config ]; then
    # The pure-Python promise: neither torch nor numpy may be in this environment.
    if "$venv/bin/python" -c "import importlib.util as u, sys; sys.exit(0 if (u.find_spec('torch') or u.find_spec('numpy')) else 1)"; then
      echo "ppe-config's environment contains torch or numpy" >&2
      return 1
    fi
  fi
  # Run from a scratch directory so that nothing from the checkout's src/ is importable; the
  # root pyproject.toml still configures pytest via -c.
  # The tests marked slow (several processes: torchrun, mpirun, a killed writer) need nothing
  # the fast ones do not import; they run once, in the full suite, not again here.
  (cd "$venv" && "$ROOT/$venv/bin/python" -m pytest -c "$ROOT/pyproject.toml" --rootdir "$ROOT" \
      -p no:cacheprovider -q -m "not slow" "$ROOT/packages/$comp/tests")
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
