#!/usr/bin/env bash
# Creates .venv-launch: SkyPilot (with its Kubernetes client) in its own venv, because skypilot pins click<8.2 and
# the training stack's lock has click 8.5. `crosstune launch --submit` runs its `sky`; the launch tests load the
# generated task YAML with SkyPilot's own loader and the JobSet's pod templates with Kubernetes' own models from here,
# and resolve the accelerator install sets the specs write with its pip (tests/launch/test_install_sets.py: a pip
# whose fast-deps reads wheel metadata through range requests). Idempotent: a stamp file marks success.
set -euo pipefail
PYTHON=${PYTHON:-python3.11}
VENV=${LAUNCH_VENV:-.venv-launch}
SKYPILOT_VERSION=0.14.1
PIP_VERSION=26.3
STAMP="$VENV/.installed-skypilot-$SKYPILOT_VERSION-pip-$PIP_VERSION"
[ -f "$STAMP" ] && exit 0
command -v "$PYTHON" >/dev/null || { echo "need $PYTHON (Python 3.11)" >&2; exit 1; }
start=$(date +%s)
echo "Installing skypilot[kubernetes]==$SKYPILOT_VERSION into $VENV (first time: ~3 min, ~0.5 GB)..."
test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
quiet() { grep -v "is ignored: it is neither a file nor a directory" || true; }
"$VENV/bin/pip" install -q "pip==$PIP_VERSION" 2>&1 | quiet
"$VENV/bin/pip" install -q "skypilot[kubernetes]==$SKYPILOT_VERSION" 2>&1 | quiet
"$VENV/bin/python" -c "import sky, kubernetes; print('skypilot', sky.__version__, '+ kubernetes', kubernetes.__version__)"
end=$(date +%s)
size=$(du -sh "$VENV" | cut -f1)
echo "install_seconds=$((end - start)) size=$size" >"$STAMP"
echo "Launch environment ready in $VENV ($size, $((end - start)) s)."
