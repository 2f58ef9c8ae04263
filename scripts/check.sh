#!/usr/bin/env bash
# Every check of the project, in the order CI runs them (called by `make test` and .ci/run).
# Prints one timing line per step; stops at the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
V=.venv/bin
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT
export MPLBACKEND=Agg NO_MKDOCS_2_WARNING=1
# hatch's build environments and uv's cache live in the scratch folder: nothing is cached outside
export HATCH_DATA_DIR="$SCRATCH/hatch" HATCH_CACHE_DIR="$SCRATCH/hatch-cache" UV_CACHE_DIR="$SCRATCH/uv-cache"

step() {
  local name=$1; shift
  local t0=$SECONDS
  echo "== $name"
  "$@"
  echo "== $name: done in $((SECONDS - t0)) s"
}

step "ruff" bash -c "$V/ruff check . && $V/ruff format --check ."
step "mypy (strict, every src/)" "$V/mypy"
step "wheels and sdists: build (hatch), contents, sdist = wheel, metadata (twine check)" "$V/python" scripts/check_wheels.py --out "$SCRATCH/dist"
# Each test runs once: every component's tests in its own environment (isolated.sh), then the
# cross-component tests of tests/ through the meta-package, with ppe-config's optuna tests (its
# own environment stays without optuna, which needs numpy).
step "each component alone in a fresh environment, with all its tests" bash scripts/isolated.sh "$SCRATCH/dist"
rm -rf "$SCRATCH/uv-cache"  # torch unpacked; the index scenarios keep a cache of their own
step "package index: install, pin, upgrade, PPE 0.9, lowest versions" \
  "$V/python" scripts/check_index.py --dist "$SCRATCH/dist" --work "$SCRATCH/index"
rm -rf "$SCRATCH/index"  # its environments, wheels and caches: the disk is for the next steps
step "cross-component tests through the meta-package" "$V/python" -m pytest -n 2 -q -p no:cacheprovider \
  tests packages/ppe-config/tests/test_optuna.py
step "main job" "$V/python" examples/train_digits.py --out "$SCRATCH/result"
step "docs (mkdocs --strict)" "$V/mkdocs" build --strict --quiet --site-dir "$SCRATCH/site"
echo "== all checks passed in $SECONDS s"
