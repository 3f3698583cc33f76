#!/usr/bin/env bash
# GPU training throughput of the torch backend: a randomly initialised Gemma-4-31B-shaped model cut to LAYERS decoder
# layers (the 31B's hidden 5376, 32 heads, 16/4 KV heads, head_dim 256/512, k_eq_v globals, 262k vocab; 5:1
# sliding/global), LoRA r=64 on q k v o gate up down, bf16, remat, packed rows of SEQ tokens, STEPS optimizer steps.
# Prints median trained tokens/s (all GPUs) and MFU (LoRA convention, crosstune.train.metrics) over steps 3..N.
#
#   bench/gpu_train.sh                          # 1 GPU, 8 layers, 4096 tokens, 20 steps, hardware 1xh100
#   GPUS=8 HARDWARE=8xh100 LAYERS=8 bench/gpu_train.sh     # FSDP2 over 8 GPUs (crosstune launches the workers)
#
# Needs: the repo's .venv with a CUDA build of torch, GPUs, ~40 GB host RAM per GPU process at 8 layers.
set -euo pipefail
cd "$(dirname "$0")/.."
GPUS=${GPUS:-1} LAYERS=${LAYERS:-8} SEQ=${SEQ:-4096} STEPS=${STEPS:-20} HARDWARE=${HARDWARE:-1xh100}
BATCH=${BATCH:-1} ACCUM=${ACCUM:-1} WORK=${WORK:-/tmp/crosstune-gpu-train}
PY=.venv/bin/python
export OMP_WAIT_POLICY=PASSIVE HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$WORK"

"$PY" - "$WORK" "$LAYERS" <<'PY'
import shutil, sys
from pathlib import Path

import torch
import transformers

from crosstune.families.gemma4 import GEMMA4, make_spec
from crosstune.models.tiny import build_tiny_model
from crosstune.synth import generate_corpus

work, layers = Path(sys.argv[1]), int(sys.argv[2])
model_dir = work / f"gemma4-31b-shape-{layers}l"
if not (model_dir / "config.json").is_file():
    generate_corpus(work / "corpus", n_train=2000, n_eval=4, seed=0)
    tiny = build_tiny_model("gemma4", work / "tiny", seed=0, corpus_dir=work / "corpus")  # its tokenizer only
    spec = make_spec("gemma-4-31b-shape", layers, 5376, 21504, 32, 16, 256, 4, 512, 1024, 262144)
    hf = GEMMA4.hf_config(spec, dtype="bfloat16", pad_token_id=0, bos_token_id=2, eos_token_id=[1, 5])
    config = transformers.CONFIG_MAPPING[hf.pop("model_type")](**hf)
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)  # build in bf16, on the GPU (fast init), then save
    with torch.device("cuda"):
        model = transformers.Gemma4ForCausalLM(config)
    model.save_pretrained(model_dir, max_shard_size="5GB")
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"):
        shutil.copy(tiny / name, model_dir / name)
    print(f"built {model_dir}: {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters")
PY

FSDP=false; [ "$GPUS" -gt 1 ] && FSDP=true
cat > "$WORK/recipe.yaml" <<YAML
name: gpu-train-bench
output_dir: $WORK/runs
model: {family: gemma4, path: $WORK/gemma4-31b-shape-${LAYERS}l, dtype: bfloat16}
lora: {rank: 64, alpha: 64, dropout: 0.05, targets: [q, k, v, o, gate, up, down]}
data:
  sources: [{path: $WORK/corpus/train.jsonl}]
  max_seq_len: $SEQ
  packing: true
  strict: false
train:
  max_steps: $STEPS
  learning_rate: 1.0e-4
  schedule: cosine
  warmup_steps: 2
  per_device_batch_size: $BATCH
  grad_accumulation: $ACCUM
  gradient_checkpointing: true
  precision: bf16
  log_every: 1
  checkpoint_every: 100000
backend:
  torch: {devices: $GPUS, nodes: 1, fsdp: $FSDP}
hardware: $HARDWARE
YAML

.venv/bin/crosstune data prepare "$WORK/recipe.yaml"
rm -rf "$WORK/runs/gpu-train-bench-torch"
.venv/bin/crosstune train "$WORK/recipe.yaml" --backend torch

"$PY" - "$WORK/runs/gpu-train-bench-torch" <<'PY'
import statistics, sys
from crosstune.train.metrics import read_metrics

rows = read_metrics(sys.argv[1])[2:]  # steps 3..N: after CUDA/allocator warm-up
tps = statistics.median(r["trained_tokens_per_s"] for r in rows)
aps = statistics.median(r["tokens_per_s"] for r in rows)
mfu = statistics.median(r["mfu"] for r in rows)
hfu = statistics.median(r["hfu"] for r in rows)
mem = max(r["peak_memory_gb"] for r in rows)
print(f"median over steps 3..{rows[-1]['step']}: {tps:,.0f} trained tok/s, {aps:,.0f} tok/s (all GPUs), "
      f"MFU {mfu:.1%} (LoRA convention, recompute not counted), HFU {hfu:.1%} (recompute counted), "
      f"peak memory {mem:.1f} GiB per GPU")
PY
