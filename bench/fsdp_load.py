"""Per-rank peak host memory of loading a checkpoint for FSDP2 over 2 gloo ranks: every rank loading the whole model
then sharding it (`from_pretrained`, as crosstune once loaded) against the meta-device model each rank fills with
its own shard only (crosstune.train.torch.sharded_load), measured in the same run on the same checkpoint.

    .venv/bin/python bench/fsdp_load.py --model DIR                       # fp32, as the torch backend on CPU
    .venv/bin/python bench/fsdp_load.py --model DIR --dtype bfloat16      # the dtype a GPU rank loads

Each variant runs the torch backend's own pieces in 2 processes (torchrun, gloo): `build_model` (whole, or empty
on the meta device), PEFT LoRA from the recipe (the 2xH100 seed recipe: r=64 on 7 targets) and the run's initial
LoRA, `fully_shard` per decoder layer and the root (what accelerate's FSDP2 preparation does), then the shard load,
and one forward pass of the same tokens (its loss must be the same both ways: the same weights). Peak RSS is each
rank's VmHWM (memory-mapped checkpoint pages it touched included); ratio = sharded / whole, per rank.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "gemma4-31b-2xh100.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="an HF checkpoint (e.g. `crosstune model build`)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--worker", choices=["whole", "shard"], help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    results = {}
    with tempfile.TemporaryDirectory(prefix="crosstune-fsdp-load-") as tmp:
        for mode in ("whole", "shard"):
            out = Path(tmp) / mode
            cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={args.ranks}", "--standalone"]
            cmd += [__file__, "--worker", mode, "--model", str(args.model), "--dtype", args.dtype, "--out", str(out)]
            env = dict(os.environ, OMP_NUM_THREADS="1")
            t0 = time.perf_counter()
            done = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if done.returncode:
                sys.exit(f"{mode}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
            ranks = [json.loads((Path(f"{out}.{r}.json")).read_text()) for r in range(args.ranks)]
            results[mode] = {"wall_s": round(time.perf_counter() - t0, 1), "ranks": ranks}
    print(f"{args.model} ({args.dtype}), {args.ranks} gloo ranks")
    print("| load | rank | peak RSS | RSS after load | bytes read | load s | loss |")
    print("|---|---|---|---|---|---|---|")
    for mode, r in results.items():
        for x in r["ranks"]:
            print(
                f"| {mode} | {x['rank']} | {x['peak_gb']:.2f} GB | {x['rss_gb']:.2f} GB | {x['read_gb']:.2f} GB | "
                f"{x['load_s']:.1f} | {x['loss']:.6f} |"
            )
    for rank in range(args.ranks):
        whole, shard = results["whole"]["ranks"][rank], results["shard"]["ranks"][rank]
        print(f"rank {rank}: peak RSS sharded / whole = {shard['peak_gb'] / whole['peak_gb']:.2f}")
    losses = {x["loss"] for r in results.values() for x in r["ranks"]}
    print(f"same loss both ways on every rank: {len(losses) == 1} ({sorted(losses)})")


def worker(args) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    from crosstune.families import get_family
    from crosstune.recipe import load_recipe
    from crosstune.train.parts import load_torch_shard, torch_lora_model
    from crosstune.units import bytes_to_gb

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    recipe = load_recipe(
        RECIPE,
        [
            f"model.path={args.model}",
            "hardware=cpu",
            "serve.tensor_parallel_size=1",
            f"model.dtype={args.dtype}",
            "train.precision=fp32",
        ],
    )
    t0 = time.perf_counter()
    # on_gpu=True: the recipe's dtype (model.dtype); the CPU path would always take fp32
    model, _, spec = torch_lora_model(recipe, on_gpu=args.dtype != "float32", empty=args.worker == "shard")
    layer_class = get_family("gemma4").decoder_layer_class
    for module in list(model.modules()):
        if type(module).__name__ == layer_class:
            fully_shard(module)
    fully_shard(model)
    read = load_torch_shard(model, args.model) if args.worker == "shard" else 0
    load_s = time.perf_counter() - t0
    rss = _status("VmRSS")
    tokens = torch.arange(64).remainder(spec.vocab_size)[None] + 10
    with torch.no_grad():
        loss = float(model(input_ids=tokens, labels=tokens, use_cache=False).loss)
    result = {
        "rank": rank,
        "peak_gb": _status("VmHWM"),
        "rss_gb": rss,
        "read_gb": bytes_to_gb(read),
        "load_s": load_s,
        "loss": loss,
    }
    Path(f"{args.out}.{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def _status(field: str) -> float:
    """A /proc/self/status figure (kB) in GB: VmHWM is this process's own peak RSS (not inherited across fork)."""
    from crosstune.units import bytes_to_gb

    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return bytes_to_gb(int(line.split()[1]) * 1024)
    raise KeyError(field)


if __name__ == "__main__":
    main()
