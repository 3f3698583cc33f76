#!/usr/bin/env bash
# Installs Debian's Icarus Verilog (version 11) when missing; quiet when it is already there.
set -euo pipefail
command -v iverilog >/dev/null && command -v vvp >/dev/null && exit 0
echo "Installing iverilog from Debian..."
SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "iverilog is missing: run 'apt-get install iverilog' as root" >&2; exit 1; }
  SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get install -y -q iverilog >/dev/null 2>&1 || { $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q iverilog >/dev/null; }
iverilog -V 2>&1 | head -1
