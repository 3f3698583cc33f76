#!/usr/bin/env bash
# Installs Debian's Icarus Verilog (version 11) when missing; quiet when it is already there.
exec bash "${BASH_SOURCE[0]%/*}/apt_install.sh" iverilog -V iverilog vvp
