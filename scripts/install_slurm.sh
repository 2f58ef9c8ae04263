#!/usr/bin/env bash
# Install what the `slurm`-marked tests need: Debian's Slurm (slurm-wlm: slurmctld, slurmd and the
# client commands sbatch, scontrol...) and munge, as root, when slurmctld, slurmd, sbatch or
# munged is missing. Idempotent: does nothing when they are all there. Called by CI before the
# test suite; without them the `slurm` tests skip with a message naming this script (in CI they
# fail).
# Starts no daemon: the tests run their own munged, slurmctld and slurmd, with their own key,
# configuration, ports and logs (packages/ppe-training/tests/_slurm.py). While the packages are
# installed, policy-rc.d keeps their scripts from starting the system's munge and Slurm services.
# Usage: scripts/install_slurm.sh
set -euo pipefail

# the daemons are in /usr/sbin, which is not on every user's PATH
found() { PATH="$PATH:/usr/sbin:/sbin" command -v "$1"; }

missing=()
for command in slurmctld slurmd sbatch munged; do
  found "$command" >/dev/null || missing+=("$command")
done

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install_slurm.sh: ${missing[*]} missing and installing Slurm needs root:" >&2
    echo "  sudo apt-get install -y --no-install-recommends slurm-wlm munge" >&2
    exit 1
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "install_slurm.sh: ${missing[*]} missing and there is no apt-get to install" \
      "Slurm (slurm-wlm, munge) with" >&2
    exit 1
  fi
  echo "== installing Slurm and munge (apt-get install slurm-wlm munge)"
  export DEBIAN_FRONTEND=noninteractive
  policy=/usr/sbin/policy-rc.d
  if [ ! -e "$policy" ]; then
    # exit status 101: invoke-rc.d and deb-systemd-invoke start no service
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    trap 'rm -f "$policy"' EXIT
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
fi
for command in slurmctld slurmd sbatch munged; do
  if ! found "$command" >/dev/null; then
    echo "install_slurm.sh: $command is still missing after apt-get install slurm-wlm munge" >&2
    exit 1
  fi
done
"$(found slurmctld)" -V
"$(found munged)" -V | head -n 1
