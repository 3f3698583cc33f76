#!/usr/bin/env bash
# GPU training throughput of the torch backend on the Gemma-4-31B shape (hidden 5376, 32 heads, 16/4 KV heads,
# head_dim 256/512, k_eq_v globals, 262k vocab, 5:1 sliding/global; LAYERS decoder layers, 60 = the full model),
# randomly initialised on the GPU from a config.json (`model.random_init`: no checkpoint is written or read), LoRA
# r=64 on q k v o gate up down, bf16, remat, packed rows of SEQ tokens, STEPS optimizer steps per variant.
#
# In one run: the plain transformers + PEFT loop (bench/gpu_plain_loop.py, same rows) as the baseline, then
# `crosstune train --backend torch` once per VARIANTS entry (name=attention,loss,token_metrics[,key=value...]:
# train.kernels; each key=value after the first three sets train.kernels.key, e.g. recompute=selective).
# Prints, per variant, median tokens/s over steps 3..N, MFU without recompute (forward + backward-to-activations
# model FLOPs, the baseline's convention), crosstune's own `mfu` column, peak memory, and the ratio to the plain loop.
#
#   bench/gpu_train.sh                                # 1 H200, 60 layers, 4096 tokens, 10 steps, all variants
#   LAYERS=8 VARIANTS="baseline=sdpa,trl,true flex=flex,trl,true" bench/gpu_train.sh
#   VARIANTS="baseline=sdpa,trl,true selective=sdpa,trl,true,recompute=selective" bench/gpu_train.sh
#   DRY=1 bench/gpu_train.sh                          # CPU smoke test of this script: tiny shape, 3 steps
#
# Needs: the repo's .venv with a CUDA build of torch (or ../shared/device/on_device.sh's wrappers), one GPU;
# cut-cross-entropy installed for the `cce` variant (it is skipped with a note otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."
DRY=${DRY:-0}
if [ "$DRY" = 1 ]; then
  LAYERS=${LAYERS:-6} SEQ=${SEQ:-1024} STEPS=${STEPS:-3} HARDWARE=${HARDWARE:-cpu} PRECISION=fp32
  VARIANTS=${VARIANTS:-"baseline=sdpa,trl,true lean=sdpa,trl,false"}
else
  LAYERS=${LAYERS:-60} SEQ=${SEQ:-4096} STEPS=${STEPS:-10} HARDWARE=${HARDWARE:-1xh200} PRECISION=bf16
  VARIANTS=${VARIANTS:-"baseline=sdpa,trl,true lean=sdpa,trl,false flex=flex,trl,true flex+lean=flex,trl,false \
flex+cce=flex,cce,false nocast=sdpa,trl,true,lora_input_cast=false compile=sdpa,trl,true,compile=true \
selective=sdpa,trl,true,recompute=selective \
lean+nocast+compile+selective=sdpa,trl,false,lora_input_cast=false,compile=true,recompute=selective"}
fi
WORK=${WORK:-/tmp/crosstune-gpu-train}
PY=.venv/bin/python
export OMP_WAIT_POLICY=PASSIVE HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$WORK"

"$PY" - "$WORK" "$LAYERS" "$DRY" <<'PY'
import json, shutil, sys
from pathlib import Path

from crosstune.families.gemma4 import GEMMA4, make_spec
from crosstune.models.tiny import build_tiny_model
from crosstune.synth import generate_corpus

work, layers, dry = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
model_dir = work / (f"dry-{layers}l" if dry else f"gemma4-31b-shape-{layers}l")
if not (model_dir / "config.json").is_file():
    if not (work / "tiny" / "tokenizer.json").is_file():
        generate_corpus(work / "corpus", n_train=2000, n_eval=4, seed=0)
        build_tiny_model("gemma4", work / "tiny", seed=0, corpus_dir=work / "corpus")  # its tokenizer only
    if dry:  # the tiny model's own shape at LAYERS layers
        spec = make_spec("dry-shape", layers, 64, 128, 4, 2, 32, 1, 64, 32, 1024)
    else:
        spec = make_spec("gemma-4-31b-shape", layers, 5376, 21504, 32, 16, 256, 4, 512, 1024, 262144)
    hf = GEMMA4.hf_config(spec, dtype="bfloat16", pad_token_id=0, bos_token_id=2, eos_token_id=[1, 5])
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.json").write_text(json.dumps(hf, indent=2))  # config only: weights are drawn at load
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"):
        if (work / "tiny" / name).is_file():
            shutil.copy(work / "tiny" / name, model_dir / name)
    print(f"wrote {model_dir}/config.json ({spec.num_layers} layers, {spec.total_params / 1e9:.2f} B parameters)")
PY

MODEL_DIR="$WORK/gemma4-31b-shape-${LAYERS}l"; [ "$DRY" = 1 ] && MODEL_DIR="$WORK/dry-${LAYERS}l"
cat > "$WORK/recipe.yaml" <<YAML
name: gpu-train-bench
output_dir: $WORK/runs
model: {family: gemma4, path: $MODEL_DIR, dtype: bfloat16, random_init: true}
lora: {rank: 64, alpha: 64, dropout: 0.0, targets: [q, k, v, o, gate, up, down]}
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
  per_device_batch_size: 1
  grad_accumulation: 1
  gradient_checkpointing: true
  precision: $PRECISION
  log_every: 1
  checkpoint_every: 100000
backend:
  torch: {devices: 1, nodes: 1, fsdp: false}
hardware: $HARDWARE
YAML

.venv/bin/crosstune data prepare "$WORK/recipe.yaml"
echo "== plain transformers + PEFT loop (baseline)"
"$PY" bench/gpu_plain_loop.py "$WORK/recipe.yaml" "$STEPS" | tee "$WORK/plain.json"

for variant in $VARIANTS; do
  name=${variant%%=*}; IFS=, read -r attention loss metrics extras <<< "${variant#*=}"
  sets=(); for extra in ${extras//,/ }; do sets+=(--set "train.kernels.$extra"); done
  if [ "$loss" = cce ] && ! "$PY" -c "import cut_cross_entropy" 2>/dev/null; then
    echo "== $name: skipped (cut-cross-entropy is not installed: pip install cut-cross-entropy==25.1.1)"
    continue
  fi
  echo "== crosstune train, $name: attention=$attention loss=$loss token_metrics=$metrics ${extras//,/ }"
  rm -rf "$WORK/runs/$name"
  .venv/bin/crosstune train "$WORK/recipe.yaml" --backend torch --run-dir "$WORK/runs/$name" \
    --set "train.kernels.attention=$attention" --set "train.kernels.loss=$loss" \
    --set "train.kernels.token_metrics=$metrics" "${sets[@]}" || echo "== $name: FAILED (exit $?)"
done

"$PY" - "$WORK" "$VARIANTS" <<'PY'
import json, statistics, sys
from pathlib import Path

from crosstune.families import get_family
from crosstune.hardware import get_hardware
from crosstune.recipe import load_recipe
from crosstune.run.metrics import read_metrics

work = Path(sys.argv[1])
recipe = load_recipe(work / "recipe.yaml")
spec = get_family("gemma4").spec_from_hf_config(json.loads(Path(recipe.model.path, "config.json").read_text()))
peak = get_hardware(recipe.hardware).peak_tflops
flops = spec.lora_train_flops_per_token(recipe.data.max_seq_len, recompute_activations=False)
plain = json.loads((work / "plain.json").read_text().strip().splitlines()[-1])


def mfu(tokens_per_s):
    return f"{flops * tokens_per_s / (peak * 1e12):.1%}" if peak else "n/a (no peak on this hardware)"


print(f"\n{spec.num_layers} layers, seq {recipe.data.max_seq_len}, {recipe.hardware}; MFU = forward + "
      f"backward-to-activations model FLOPs ({flops / 1e9:.1f} GFLOP/token), recompute not counted")
print(f"{'variant':30s} {'tokens/s':>10s} {'MFU':>7s} {'mfu col':>8s} {'hfu col':>8s} {'peak GiB':>9s} {'x plain':>8s}")
peak_mem = plain["peak_memory_gib"]
print(f"{'plain loop':30s} {plain['tokens_per_s']:10,.0f} {mfu(plain['tokens_per_s']):>7s} {'':>8s} {'':>8s} "
      f"{peak_mem if peak_mem is None else round(peak_mem, 1)!s:>9s} {1.0:8.2f}")
for variant in sys.argv[2].split():
    name = variant.split("=")[0]
    run = work / "runs" / name
    rows = read_metrics(run)[2:] if (run / "metrics.jsonl").is_file() else []
    if not rows:
        print(f"{name:30s} no metrics (skipped or failed: see above)")
        continue
    tps = statistics.median(r.tokens_per_s for r in rows)
    col = statistics.median(r.mfu for r in rows) if rows[0].mfu is not None else None
    hfu = statistics.median(r.hfu for r in rows) if rows[0].hfu is not None else None
    mem = max(r.peak_memory_gib for r in rows)
    print(f"{name:30s} {tps:10,.0f} {mfu(tps):>7s} {'' if col is None else f'{col:.1%}':>8s} "
          f"{'' if hfu is None else f'{hfu:.1%}':>8s} {mem:9.1f} "
          f"{tps / plain['tokens_per_s']:8.2f}")
PY
