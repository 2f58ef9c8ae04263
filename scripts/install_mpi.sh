#!/usr/bin/env bash
# Install what the `mpi`-marked tests need: OpenMPI (Debian's openmpi-bin and libopenmpi-dev, as
# root, when `mpirun` is missing) and mpi4py into the workspace environment .venv.
# Idempotent: does nothing when both are already there. Called by CI before the test suite;
# without them the `mpi` tests skip with a message naming this script (in CI they fail).
# Usage: scripts/install_mpi.sh   (environment: VENV=.venv)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}

if ! command -v mpirun >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install_mpi.sh: mpirun is missing and installing OpenMPI needs root:" >&2
    echo "  sudo apt-get install -y openmpi-bin libopenmpi-dev" >&2
    exit 1
  fi
  echo "== installing OpenMPI (apt-get install openmpi-bin libopenmpi-dev)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends openmpi-bin libopenmpi-dev >/dev/null
fi
mpirun --version | head -n 1

if ! "$VENV/bin/python" -c "import mpi4py" >/dev/null 2>&1; then
  echo "== installing mpi4py into $VENV"
  # workspace.toml's range, the one scripts/isolated.sh installs
  mpi4py=$("$VENV/bin/python" scripts/workspace.py mpi)
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$mpi4py"
fi
"$VENV/bin/python" -c "import mpi4py; print('mpi4py', mpi4py.__version__)"
