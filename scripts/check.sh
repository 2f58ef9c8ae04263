#!/usr/bin/env bash
# Every check of the project, in the order CI runs them (called by `make test` and .ci/run).
# Prints one timing line per step; stops at the first failure. Ends with which real-component
# suites (OpenMPI, Slurm, the S3 server, ignite...) ran and which skipped, with their counts.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
V=.venv/bin
SCRATCH=$(mktemp -d)
# Every pytest run below writes there the counts of its real-component tests (the root
# conftest.py); scripts/real_components.py sums them up at the end, or where a step failed.
export PPE_REAL_COMPONENTS_DIR="$SCRATCH/real-components"
summed=no
finish() {
  if [ "$summed" = no ] && [ -d "$PPE_REAL_COMPONENTS_DIR" ]; then
    "$V/python" scripts/real_components.py "$PPE_REAL_COMPONENTS_DIR" || true
  fi
  rm -rf "$SCRATCH"
}
trap finish EXIT
export MPLBACKEND=Agg NO_MKDOCS_2_WARNING=1
# The environments compile their modules at first import (bootstrap.sh compiles only torch at
# install, isolated.sh nothing): Python writes the .pyc files for the next process.
unset PYTHONDONTWRITEBYTECODE
# hatch's build environments and uv's cache live in the scratch folder: nothing is cached outside
export HATCH_DATA_DIR="$SCRATCH/hatch" HATCH_CACHE_DIR="$SCRATCH/hatch-cache" UV_CACHE_DIR="$SCRATCH/uv-cache"

step() {  # step NAME COMMAND...: runs it, its output as it comes
  local name=$1; shift
  local t0=$SECONDS
  echo "== $name"
  "$@"
  echo "== $name: done in $((SECONDS - t0)) s"
}

# Steps that leave a core idle part of the time (mypy uses one; the index scenarios wait on pip,
# the cross-component tests on torchrun's agents) run side by side: `beside NAME COMMAND...`
# starts one, its output kept in a log; `together` waits for all of them and prints each step
# whole, in the order they were started. A failed one fails the check once the others have ended.
BESIDE=()
beside() {
  local name=$1 n=${#BESIDE[@]}; shift
  BESIDE+=("$name")
  ( t0=$SECONDS; status=0; "$@" >"$SCRATCH/beside-$n.log" 2>&1 || status=$?
    echo "$((SECONDS - t0)) $status" >"$SCRATCH/beside-$n.end" ) &
}
together() {
  wait
  local n failed=0 seconds status
  for n in "${!BESIDE[@]}"; do
    # no end file: the step's shell was killed
    read -r seconds status <"$SCRATCH/beside-$n.end" 2>/dev/null || { seconds=?; status=1; }
    echo "== ${BESIDE[n]}"
    cat "$SCRATCH/beside-$n.log"
    if [ "$status" -ne 0 ]; then
      echo "== ${BESIDE[n]}: FAILED (exit status $status) after $seconds s"
      failed=1
    else
      echo "== ${BESIDE[n]}: done in $seconds s"
    fi
  done
  BESIDE=()
  rm -f "$SCRATCH"/beside-*
  return $failed
}

step "ruff" bash -c "$V/ruff check . && $V/ruff format --check ."
# mypy (one core, 25 s) runs beside the wheel build and the first minute of the isolated tests
beside "mypy (strict, every src/)" "$V/mypy"
step "wheels and sdists: build (hatch), contents, sdist = wheel, metadata (twine check)" \
  "$V/python" scripts/check_wheels.py --out "$SCRATCH/dist"
# Each test runs once: every component's tests in its own environment (isolated.sh), then the
# cross-component tests of tests/ through the meta-package, with ppe-config's optuna tests (its
# own environment stays without optuna, which needs numpy).
beside "each component alone in a fresh environment, with all its tests" \
  bash scripts/isolated.sh "$SCRATCH/dist"
together
rm -rf "$SCRATCH/uv-cache"  # torch unpacked; the index scenarios keep a cache of their own
beside "package index: install, pin, upgrade, PPE 0.9, lowest versions" \
  "$V/python" scripts/check_index.py --dist "$SCRATCH/dist" --work "$SCRATCH/index"
beside "cross-component tests through the meta-package" "$V/python" -m pytest -n 2 -q -p no:cacheprovider \
  tests packages/ppe-config/tests/test_optuna.py
beside "main job" "$V/python" examples/train_digits.py --out "$SCRATCH/result"
beside "docs (mkdocs --strict)" "$V/mkdocs" build --strict --quiet --site-dir "$SCRATCH/site"
together
echo "== all checks passed in $SECONDS s"
summed=yes
"$V/python" scripts/real_components.py "$PPE_REAL_COMPONENTS_DIR"
