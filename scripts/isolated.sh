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
COMPONENTS=("$@")
# the longest first: two run at a time
[ ${#COMPONENTS[@]} -gt 0 ] || COMPONENTS=(ppe-training ppe-core ppe-onnx ppe-dataset ppe-runtime-cuda ppe-config)
PY=${PYTHON:-python3.11}
ROOT=$(pwd)
LOGS=${ISOLATED_LOGS:-.venvs/logs}
mkdir -p .venvs "$LOGS"
TEST_DEPS=(pytest==9.2.0 pytest-xdist==3.8.0 hypothesis==6.170.15)
# the local S3 server of the object-storage tests (ppe-core and ppe-training only: it stays
# out of ppe-config's torch- and numpy-free environment)
S3_TEST_DEPS=("moto[server]==5.2.5")
# mpi4py for the mpi tests of ppe-training, where OpenMPI is installed (scripts/install_mpi.sh)
MPI_TEST_DEPS=()
if command -v mpirun >/dev/null 2>&1; then MPI_TEST_DEPS=("mpi4py>=4,<5"); fi

wheel() { ls "$DIST"/"$(echo "$1" | tr - _)"-*.whl; }

# uv does not read pip's configuration: hand it the find-links and extra indexes pip has here
# (torch's local wheels, package mirrors).
UV=()
if "$ROOT/.venv/bin/python" -m uv --version >/dev/null 2>&1; then
  UV=("$ROOT/.venv/bin/python" -m uv)
  UV_SOURCES=(--index-strategy unsafe-best-match)
  pip_config() { "$ROOT/.venv/bin/python" -m pip config get "$1" 2>/dev/null || true; }
  for link in $(pip_config global.find-links); do UV_SOURCES+=(--find-links "$link"); done
  for index in $(pip_config global.extra-index-url); do
    # uv refuses a file:// index that is not there (pip only warns)
    if [[ $index != file://* ]] || [ -d "${index#file://}" ]; then
      UV_SOURCES+=(--extra-index-url "$index")
    fi
  done
fi

make_env() {  # make_env VENV REQUIREMENT...: a fresh environment with the requirements
  local venv=$1; shift
  rm -rf "$venv"
  if [ ${#UV[@]} -gt 0 ]; then
    "${UV[@]}" venv -q --python "$PY" "$venv"
    # --compile-bytecode as pip does: where PYTHONDONTWRITEBYTECODE is set, nothing compiles
    # later, and every process the tests start would compile torch again (6 s an import)
    "${UV[@]}" pip install -q --compile-bytecode --python "$venv/bin/python" "${UV_SOURCES[@]}" "$@"
    "${UV[@]}" pip check -q --python "$venv/bin/python"
  else
    "$PY" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "$@" 2>&1 \
      | grep -v "is ignored: it is neither" || true
    "$venv/bin/python" -m pip check >/dev/null
  fi
}

run_one() {
  local comp=$1 venv=.venvs/$1 reqs=()
  case $comp in
    ppe-core)         reqs=("$(wheel ppe-core)[tensorboard,s3]" torch==2.13.0 "${S3_TEST_DEPS[@]}") ;;
    ppe-training)     reqs=("$(wheel ppe-core)[tensorboard,s3]" "$(wheel ppe-training)[ignite,plot,slack,notebook,pandas,yaml,torchdata,s3]" torch==2.13.0 "${S3_TEST_DEPS[@]}" "${MPI_TEST_DEPS[@]}") ;;
    ppe-runtime-cuda) reqs=("$(wheel ppe-core)" "$(wheel ppe-runtime-cuda)" torch==2.13.0) ;;
    ppe-onnx)         reqs=("$(wheel ppe-core)" "$(wheel ppe-onnx)[runtime]" torch==2.13.0) ;;
    # without optuna (which needs numpy): the optuna tests run in the full suite
    ppe-config)       reqs=("$(wheel ppe-config)[yaml]") ;;
    ppe-dataset)      reqs=("$(wheel ppe-dataset)" torch==2.13.0) ;;
    *) echo "unknown component $comp" >&2; return 2 ;;
  esac
  make_env "$venv" "${reqs[@]}" "${TEST_DEPS[@]}"
  if [ "$comp" = ppe-config ]; then
    # The pure-Python promise: neither torch nor numpy may be in this environment.
    if "$venv/bin/python" -c "import importlib.util as u, sys; sys.exit(0 if (u.find_spec('torch') or u.find_spec('numpy')) else 1)"; then
      echo "ppe-config's environment contains torch or numpy" >&2
      return 1
    fi
  fi
  # Run from a scratch directory so that nothing from the checkout's src/ is importable; the
  # root pyproject.toml still configures pytest via -c. The two long ones use both cores
  # while the short ones run beside them.
  local workers=()
  case $comp in ppe-training|ppe-core) workers=(-n 2) ;; esac
  (cd "$venv" && "$ROOT/$venv/bin/python" -m pytest -c "$ROOT/pyproject.toml" --rootdir "$ROOT" \
      -p no:cacheprovider -q "${workers[@]}" "$ROOT/packages/$comp/tests")
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
