#!/usr/bin/env bash
# Installs Debian's Icarus Verilog (version 11) when missing; quiet when it is already there.
# No pipes here: under pipefail a reader that stops early (head -1) kills the writer with SIGPIPE -> exit 141.
set -euo pipefail
command -v iverilog >/dev/null && command -v vvp >/dev/null && exit 0
echo "Installing iverilog from Debian..."
SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "iverilog is missing: run 'apt-get install iverilog' as root" >&2; exit 1; }
  SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get install -y -q iverilog >/dev/null 2>&1; then
  # A fresh machine often has no package lists yet: update once, then try again (showing apt's own error).
  $SUDO apt-get update -q >/dev/null 2>&1 || true
  $SUDO apt-get install -y -q iverilog >/dev/null || {
    echo "apt-get could not install iverilog (output above): install it by hand ('apt-get install iverilog')" >&2
    exit 1
  }
fi
if ! command -v iverilog >/dev/null || ! command -v vvp >/dev/null; then
  echo "apt-get installed iverilog but iverilog/vvp are not on PATH ($PATH): add their folder to PATH" >&2
  exit 1
fi
version=$(iverilog -V 2>&1 || true)  # captured whole, then cut: no early-closing pipe
echo "installed: ${version%%$'\n'*}"
