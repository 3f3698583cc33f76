#!/usr/bin/env bash
# Installs Debian's Slurm (22.05 on bookworm: slurmctld, slurmd, the client commands) and MUNGE when missing; quiet
# when they are there. scripts/slurm_local.sh starts them as a single-node cluster (`make test-launch` does).
# Package scripts must not start the daemons (no systemd here, and the cluster has its own configuration): without a
# policy-rc.d saying so, one is in place for the install and removed after it.
set -euo pipefail
policy=${POLICY_RC_D:-/usr/sbin/policy-rc.d}  # invoke-rc.d's; the variable is for tests/test_install_scripts.py
if [ ! -e "$policy" ] && { ! command -v slurmd || ! command -v sbatch || ! command -v munged; } >/dev/null; then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO sh -c "printf '#!/bin/sh\nexit 101\n' > $policy && chmod 755 $policy"
  trap '$SUDO rm -f "$policy"' EXIT
fi
APT_OPTIONS=--no-install-recommends bash "${BASH_SOURCE[0]%/*}/apt_install.sh" "slurmctld slurmd slurm-client munge" \
  -V slurmd slurmctld sbatch munged
