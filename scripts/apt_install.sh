#!/usr/bin/env bash
# Installs a Debian package when any of its commands is missing; quiet when they are all there.
#   apt_install.sh PACKAGE VERSION_FLAG COMMAND...   e.g. apt_install.sh iverilog -V iverilog vvp
# PACKAGE may name several, separated by spaces ("slurmd munge"); APT_OPTIONS adds options to apt-get install.
# No pipes here: under pipefail a reader that stops early (head -1) kills the writer with SIGPIPE -> exit 141.
set -euo pipefail
package=$1 version_flag=$2
shift 2
missing=""
for tool in "$@"; do command -v "$tool" >/dev/null || missing=1; done
[ -z "$missing" ] && exit 0
echo "Installing $package from Debian..."
SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "$package is missing: run 'apt-get install $package' as root" >&2; exit 1; }
  SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
# Another apt/dpkg run (unattended upgrades, a second install) holds the lock for a while: wait instead of failing.
apt=($SUDO apt-get -o DPkg::Lock::Timeout=600)
read -ra packages <<<"$package"
read -ra options <<<"${APT_OPTIONS:-}"
if ! "${apt[@]}" install -y -q "${options[@]}" "${packages[@]}" >/dev/null 2>&1; then
  # A fresh machine often has no package lists yet: update once, then try again (showing apt's own error).
  "${apt[@]}" update -q >/dev/null 2>&1 || true
  "${apt[@]}" install -y -q "${options[@]}" "${packages[@]}" >/dev/null || {
    echo "apt-get could not install $package (output above): install it by hand ('apt-get install $package')" >&2
    exit 1
  }
fi
for tool in "$@"; do
  command -v "$tool" >/dev/null || {
    echo "apt-get installed $package but $tool is not on PATH ($PATH): add its folder to PATH" >&2
    exit 1
  }
done
# stdout only: Debian's chromium launcher prints a shell error of its own on stderr ("[: 25276059648: unexpected
# operator", its memory check); captured whole, then cut: no early-closing pipe.
version=$("$1" "$version_flag" 2>/dev/null || true)
[ -n "$version" ] || version="$package $(dpkg-query -W -f='${Version}' "$package" 2>/dev/null || true)"
echo "installed: ${version%%$'\n'*}"
