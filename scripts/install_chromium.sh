#!/usr/bin/env bash
# Installs Debian's chromium (the report test renders report.html in it) when missing; quiet when already there.
exec bash "${BASH_SOURCE[0]%/*}/apt_install.sh" chromium --version chromium
