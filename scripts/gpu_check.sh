#!/usr/bin/env bash
# The GPU check: what only a CUDA machine can run, in one command of at most GPU_CHECK_BUDGET
# seconds (420 by default; about 4 minutes on one H100/H200):
#   1. setup: our seven wheels built from this tree (hatchling), installed with the carried
#      wheels into a target folder put first on PYTHONPATH, so that the machine's own torch
#      and CuPy are used; the environment report (torch, CUDA, the device, CuPy, warnings);
#   2. every `gpu`-marked test (`pytest -n 8 -m gpu` over the testpaths of pyproject.toml);
#   3. the rest of ppe-runtime-cuda's tests and the documentation pages with CUDA blocks;
#   4. the trainer's host-device synchronizations per iteration (scripts/gpu_check.py syncs);
#   5. benchmarks/loop_overhead.py --device cuda: the manager's and the trainer's overhead;
#   6. benchmarks/sharded_snapshot.py --device cuda --ranks 1: the asynchronous snapshot's
#      blocked time against a synchronous save;
# then a summary. Each step has its own timeout; a failed step does not stop the next ones.
# Everything goes to stdout and, per step, to $OUT/ (at most 8 files) where OUT is set.
#
# Usage:
#   bash scripts/gpu_check.sh prepare  # here (network): the wheels the GPU machine lacks -> .whl/
#   bash scripts/gpu_check.sh          # on the GPU machine, .whl carried; exit 1 if a step failed
#   bash scripts/gpu_check.sh --cpu    # anywhere (CI: tests/test_gpu_check.py): the same setup,
#                                      # the gpu tests' collection, the benchmarks' arguments and
#                                      # the sync counter on the CPU (about 10 s of CPU time)
# PYTHON picks the interpreter (python3 by default; prepare uses .venv/bin/python's versions);
# GPU_CHECK_STEPS="tests" (or "benchmarks") runs only those steps after the setup.
#
# Why the wheels are built on the GPU machine (from the tree that traveled) rather than here:
# a .whl/ built before the last edit would test stale code without saying so. The GPU machine
# has no hatchling, so prepare downloads it (and its dependencies) into .whl/build/, used for
# the build alone (its own PYTHONPATH); .whl/run/ holds what the tests and benchmarks import
# that the machine lacks (pytorch-ignite). Both are pure-Python wheels, well under 1 MiB.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=$(command -v -- "${PYTHON:-python3}") || { echo "no ${PYTHON:-python3}"; exit 2; }
[[ $PY = /* ]] || PY=$ROOT/$PY  # absolute (not resolved: a venv's python is a link)
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore PYTHONUNBUFFERED=1 MPLBACKEND=Agg CI=${CI:-true}
# The GPU machine has only the components the gpu tests need (no S3 server, Jupyter kernel,
# optuna...): the modules that also hold tests of those skip them here instead of failing at
# collection, as CI (where every component must be present) would make them.
export PPE_REQUIRE_REAL_COMPONENTS=0

# Wheels carried to the GPU machine, at the versions of the development environment.
BUILD_WHEELS=(hatchling packaging pathspec pluggy tomlkit trove-classifiers)
RUN_WHEELS=(pytorch-ignite)

# What the GPU run executes; --cpu collects and parses the same (with the gpu tests' files
# instead of every test folder, which takes longer to collect).
GPU_TESTS=(-m gpu --continue-on-collection-errors)
CUDA_TESTS=(-m "not gpu" packages/ppe-runtime-cuda/tests)
DOC_TEST=tests/test_docs_snippets.py::test_every_python_block_of_the_page_runs_and_its_checks_hold
for page in $(grep -rlE --include='*.md' '^<!-- requires: cuda' README.md docs | sort); do
  CUDA_TESTS+=("$DOC_TEST[$page]")
done
SYNC_ARGS=(--device cuda --iters-per-epoch 100 --epochs 3)
LOOP_ARGS=(--device cuda)
SHARDED_ARGS=(--device cuda --ranks 1 --repeats 3)

pip_target() {  # pip_target DIR WHEEL...: install without index or dependencies into DIR
  local dir=$1; shift
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$dir" "$@"
}

prepare() {
  local src=${PYTHON:-.venv/bin/python} exclude kind name version names
  if exclude=$(git rev-parse --git-path info/exclude 2>/dev/null); then
    mkdir -p "$(dirname "$exclude")"
    grep -qxF /.whl/ "$exclude" 2>/dev/null || echo /.whl/ >>"$exclude"
  fi
  rm -rf .whl && mkdir -p .whl/build .whl/run
  for kind in build run; do
    if [ "$kind" = build ]; then names=("${BUILD_WHEELS[@]}"); else names=("${RUN_WHEELS[@]}"); fi
    for name in "${names[@]}"; do
      version=$("$src" -c "import importlib.metadata as m; print(m.version('$name'))") || {
        echo "ERROR: $name is not installed in $src (run make env)"; return 1; }
      "$src" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d ".whl/$kind" "$name==$version" || return 1
    done
  done
  ls .whl/build .whl/run
  echo "prepared .whl ($(du -sh .whl | cut -f1)); on the GPU machine: carry [\".whl\"], run"
  echo "  bash scripts/gpu_check.sh"
}

# The setup (inside a timeout): build the wheels, install them, check the install.
setup() {
  local tools=$WORK/build-tools wheels=$WORK/wheels build_path project
  if compgen -G ".whl/build/hatchling-*.whl" >/dev/null; then
    pip_target "$tools" .whl/build/*.whl || return 1
    build_path=$tools
  elif "$PY" -c "import hatchling" 2>/dev/null; then
    build_path=${PYTHONPATH:-}
  else
    echo "ERROR: no hatchling: run 'bash scripts/gpu_check.sh prepare' where pip reaches PyPI" \
      "and carry .whl"
    return 1
  fi
  local built
  for project in packages/*/ .; do
    built=$(cd "$project" && PYTHONPATH=$build_path "$PY" -m hatchling build -t wheel \
      -d "$wheels" 2>&1) || { echo "$built"; echo "ERROR: building $project's wheel failed"; return 1; }
  done
  local run=()
  if compgen -G ".whl/run/*.whl" >/dev/null; then
    run=(.whl/run/*.whl)
  elif [ "$MODE" = gpu ]; then
    echo "WARNING: no .whl/run/ (bash scripts/gpu_check.sh prepare): tests and benchmarks" \
      "needing ${RUN_WHEELS[*]} will fail"
  fi
  pip_target "$SITE" "$wheels"/*.whl "${run[@]}" || return 1
  echo "installed into $SITE:" $(cd "$SITE" && ls -d *.dist-info | sed 's/\.dist-info//')
}

wanted() {  # wanted PART: whether GPU_CHECK_STEPS ("tests", "benchmarks", both by default) has it
  [[ " ${GPU_CHECK_STEPS:-tests benchmarks} " = *" $1 "* ]]
}

RESULTS=()
step() {  # step NAME LOG TIMEOUT COMMAND...: one timed step, its output to stdout and LOG
  local name=$1 log=$2 limit=$3; shift 3
  local left=$((BUDGET - SECONDS - 10)) t0=$SECONDS rc
  if ((left < 20)); then
    RESULTS+=("$(printf '%-26s skipped (the budget of %s s is spent)' "$name" "$BUDGET")")
    FAILED=$((FAILED + 1))
    return 1
  fi
  ((limit > left)) && limit=$left
  echo "== $name (timeout ${limit} s)" | tee -a "$log"
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$log"
  rc=${PIPESTATUS[0]}
  local status=ok
  ((rc == 124 || rc == 137)) && status="TIMED OUT after $limit s"
  ((rc != 0 && rc != 124 && rc != 137)) && status="FAILED (exit $rc)"
  echo "== $name: $status in $((SECONDS - t0)) s" | tee -a "$log"
  RESULTS+=("$(printf '%-26s %s in %d s' "$name" "$status" $((SECONDS - t0)))")
  FAILED=$((FAILED + (rc != 0)))
  return "$rc"
}

pytest_line() {  # the closing line of pytest in LOG
  grep -E '^=* ?[0-9]+ (passed|failed|skipped|deselected|errors?|xfailed|xpassed)' "$1" \
    | tail -1 | sed -E 's/^=+ //; s/ =+$//'
}

summary() {
  local file line
  echo
  echo "== GPU check summary ($MODE mode, $SECONDS s)"
  grep -hE '^(torch |CUDA device|cupy |python )' "$LOGS/01-setup.txt" 2>/dev/null | sed 's/^/  /'
  printf '  %s\n' "${RESULTS[@]}"
  for file in 02-gpu-tests 03-cuda-tests; do
    [ -f "$LOGS/$file.txt" ] && echo "  $file: $(pytest_line "$LOGS/$file.txt")"
  done
  grep -hE '^(FAILED|ERROR) ' "$LOGS"/0[23]-*.txt 2>/dev/null | sed 's/^/    /' | head -40
  grep -h '^WARNING' "$LOGS/01-setup.txt" 2>/dev/null | sed 's/^/  /'
  echo "  figures:"
  grep -h '^RESULT' "$LOGS/04-syncs.txt" 2>/dev/null | sed 's/^RESULT /    /'
  if [ -f "$LOGS/05-loop-overhead.txt" ]; then
    grep -E '^(MLP|Empty run_iteration\(\) reporting a 0-d tensor, [0-9]|Engines)|overhead|manager cost|create_trainer|ignite  |all 5 extensions' \
      "$LOGS/05-loop-overhead.txt" | grep -v '^==' | sed 's/^/    /'
  fi
  if [ -f "$LOGS/06-sharded-snapshot.txt" ]; then
    grep -E 'ranks, |sharded snapshot  |rank 0 gathers|async_save: loop blocked|the next training step|ratio' \
      "$LOGS/06-sharded-snapshot.txt" | grep -v '^==' | sed 's/^/    /'
  fi
  echo "== $([ "$FAILED" = 0 ] && echo "all steps passed" || echo "$FAILED step(s) failed")"
}

case "${1:-gpu}" in
  prepare) prepare; exit ;;
  --cpu|--dry-run) MODE=cpu ;;
  gpu) MODE=gpu ;;
  *) echo "usage: bash scripts/gpu_check.sh [prepare | --cpu]"; exit 2 ;;
esac

if [ "${GPU_CHECK_SETUP:-}" = 1 ]; then  # the setup step, run again under its timeout
  setup
  exit
fi

BUDGET=${GPU_CHECK_BUDGET:-420}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ppe-gpu-check.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
SITE=$WORK/site
LOGS=${OUT:-$WORK/logs}
mkdir -p "$LOGS"
FAILED=0
export WORK SITE MODE PY
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}

HELPER=(scripts/gpu_check.py)
step "setup: build, install" "$LOGS/01-setup.txt" 120 \
  env GPU_CHECK_SETUP=1 bash "$ROOT/scripts/gpu_check.sh" "$@" \
  || { summary; exit 1; }

if [ "$MODE" = cpu ]; then
  mapfile -t gpu_files < <(grep -rlE 'mark\.gpu' packages/*/tests tests | sort)
  step "dry run (CPU)" "$LOGS/02-dry-run.txt" 120 "$PY" "${HELPER[@]}" dry-run --site "$SITE" \
    --collect "$(printf '%q ' "${GPU_TESTS[@]}" "${gpu_files[@]}")" \
    --collect "$(printf '%q ' "${CUDA_TESTS[@]}")" \
    --parse benchmarks/loop_overhead.py "${LOOP_ARGS[*]}" \
    --parse benchmarks/sharded_snapshot.py "${SHARDED_ARGS[*]}" \
    --parse scripts/gpu_check.py "syncs ${SYNC_ARGS[*]}"
  summary
  exit $((FAILED > 0))
fi

step "environment" "$LOGS/01-setup.txt" 90 "$PY" "${HELPER[@]}" env --site "$SITE" --need-cuda \
  || { summary; exit 1; }
parallel=()
"$PY" -c "import xdist" 2>/dev/null && parallel=(-n 8)
"$PY" -c "import pytest_timeout" 2>/dev/null && parallel+=(--timeout 150)
# pytest-benchmark (installed there) warns under xdist, an error with filterwarnings=error.
PYTEST=("$PY" -m pytest -p no:cacheprovider -p no:benchmark -q "${parallel[@]}")
if wanted tests; then
  step "gpu tests" "$LOGS/02-gpu-tests.txt" 270 "${PYTEST[@]}" "${GPU_TESTS[@]}"
  step "CUDA pages, runtime-cuda" "$LOGS/03-cuda-tests.txt" 90 "${PYTEST[@]}" "${CUDA_TESTS[@]}"
fi
if wanted benchmarks; then
  step "trainer syncs" "$LOGS/04-syncs.txt" 90 "$PY" "${HELPER[@]}" syncs "${SYNC_ARGS[@]}"
  step "loop overhead" "$LOGS/05-loop-overhead.txt" 180 \
    "$PY" benchmarks/loop_overhead.py "${LOOP_ARGS[@]}"
  step "sharded snapshot" "$LOGS/06-sharded-snapshot.txt" 180 \
    "$PY" benchmarks/sharded_snapshot.py "${SHARDED_ARGS[@]}"
fi
summary | tee "$LOGS/summary.txt"
exit $((FAILED > 0))
