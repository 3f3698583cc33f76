#!/usr/bin/env bash
# Installs Debian's chromium (the report test renders report.html in it) when missing; quiet when already there.
set -euo pipefail
command -v chromium >/dev/null && exit 0
echo "Installing chromium from Debian (~300 MB, once)..."
SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "chromium is missing: run 'apt-get install chromium' as root" >&2; exit 1; }
  SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get install -y -q chromium >/dev/null 2>&1 || { $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q chromium >/dev/null; }
chromium --version 2>/dev/null | head -1
