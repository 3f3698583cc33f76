"""The real-dimension rehearsal: a Gemma 4 size's true dimensions (31B by default; --size 26b-a4b, e4b, e2b) with 2
layers (one sliding, one global), saved as the hub checkpoint is (Gemma4ForConditionalGeneration with a small vision
tower, bf16, 4 shards, vocab 262,144), through prepare -> train torch -> train jax -> export both -> parity, each
stage a `crosstune` command in its own process: wall time and peak RSS per stage (the process tree's largest
resident set, os.wait4). The recipe is the size's shipped one (SIZE_RECIPES: its LoRA and data settings).

    .venv/bin/python bench/rehearsal.py --work /tmp/rehearsal                  # ~15 min, ~15 GB peak: use the lock
    .venv/bin/python bench/rehearsal.py --work DIR --size 26b-a4b              # the MoE: all 128 experts per layer
    .venv/bin/python bench/rehearsal.py --work DIR --jax-vocab 262144 --jax-set train.precision=bf16

The jax leg (train jax, its exports and the torch-vs-jax parity) runs on its own copy of the model at --jax-vocab
with --jax-set overrides (its compute dtype, say): at vocab 262,144 the jax step needed more host memory than this
24 GiB machine has (docs/BENCHMARKS.md). The torch leg and its exports always run at --vocab. --json writes the
stage table and the checks (merged = bf16(base + B·A) on a q_proj shard tensor, vision tower untouched, parity's
verdict) for tests/bench/test_rehearsal.py.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from crosstune.units import bytes_to_gb

CLI = [sys.executable, "-m", "crosstune.cli"]
REPO = Path(__file__).resolve().parents[1]
MARKER = ".crosstune-rehearsal"
# A size's shipped GPU recipe (LoRA r=64 on 7 targets, the seed's data settings); other sizes take the 31B's
SIZE_RECIPES = {
    "31b": "gemma4-31b-2xh100.yaml",
    "26b-a4b": "gemma4-26b-a4b-2xh100.yaml",
    "e4b": "gemma4-e4b-1xh100.yaml",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--work",
        type=Path,
        required=True,
        help="work folder, new or an earlier rehearsal's (emptied first); ~12 GB of disk",
    )
    parser.add_argument("--size", default="31b", help="a gemma4 size (tiny: a quick check of the script itself)")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=262144, help="vocabulary of the torch leg's model")
    parser.add_argument("--jax-vocab", type=int, default=32768, help="vocabulary of the jax leg's model")
    parser.add_argument("--jax-set", action="append", default=[], help="recipe override for the jax leg only")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--seq", type=int, default=512, help="data.max_seq_len")
    parser.add_argument(
        "--tp",
        type=int,
        default=None,
        help="jax mesh tp (fsdp 1) over the fake CPU devices "
        "(default: the largest of 4, 2, 1 that splits every layer type's heads)",
    )
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    if args.tp is None:
        from crosstune.families import get_family

        spec = get_family("gemma4").spec(args.size)
        args.tp = next(tp for tp in (4, 2, 1) if not spec.tp_problems(tp))

    work = args.work.resolve()
    if work.exists() and any(work.iterdir()) and not (work / MARKER).is_file():
        sys.exit(f"{work} holds files this script did not write: choose an empty or new --work folder")
    shutil.rmtree(work, ignore_errors=True)  # an earlier rehearsal's (it carries the marker)
    work.mkdir(parents=True)
    (work / MARKER).write_text("written by bench/rehearsal.py; emptied by its next run\n")
    stages: list[dict] = []
    run = lambda name, cmd: stages.append(stage(name, cmd, work / "logs"))  # noqa: E731

    model = work / f"model-{args.vocab}"
    jax_model = model if args.jax_vocab == args.vocab else work / f"model-{args.jax_vocab}"
    build = ["model", "build", "--family", "gemma4", "--size", args.size, "--layers", str(args.layers)]
    build += ["--layout", "multimodal", "--dtype", "bfloat16", "--shards", str(args.shards)]
    run(f"build (vocab {args.vocab:,})", [*build, "--vocab", str(args.vocab), "--out", str(model)])
    if jax_model != model:
        run(f"build (vocab {args.jax_vocab:,})", [*build, "--vocab", str(args.jax_vocab), "--out", str(jax_model)])
    run("synthetic data", ["data", "synth", "--out", str(work / "corpus"), "--n", "64", "--seed", "0", "--n-eval", "0"])

    torch_recipe = write_recipe(work, "torch", model, args, [])
    jax_recipe = write_recipe(work, "jax", jax_model, args, args.jax_set)
    run(f"data prepare (vocab {args.vocab:,})", ["data", "prepare", str(torch_recipe)])
    if jax_model != model:
        run(f"data prepare (vocab {args.jax_vocab:,})", ["data", "prepare", str(jax_recipe)])
    run("train torch", ["train", str(torch_recipe), "--backend", "torch", "--run-dir", str(work / "run-torch")])
    run("train jax", ["train", str(jax_recipe), "--backend", "jax", "--run-dir", str(work / "run-jax")])
    for backend in ("torch", "jax"):
        out = work / f"export-{backend}"
        run(f"export {backend} run (both)", ["export", str(work / f"run-{backend}"), "--to", "both", "--out", str(out)])
    run("parity (bf16)", ["parity", str(jax_recipe), "--precision", "bf16"])

    checks = {
        "losses": {b: losses(work / f"run-{b}") for b in ("torch", "jax")},
        "merged": {b: merged_check(m, work / f"export-{b}") for b, m in (("torch", model), ("jax", jax_model))},
        "parity_ok": stages[-1]["rc"] == 0,
    }
    result = {"args": {k: str(v) for k, v in vars(args).items()}, "stages": stages, "checks": checks}
    print(table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    failed = [s["stage"] for s in stages if s["rc"] != 0]
    if failed:
        sys.exit(f"failed stages: {', '.join(failed)} (logs in {work / 'logs'})")


def stage(name: str, args: list[str], logs: Path) -> dict:
    """One `crosstune` command: wall seconds and the peak RSS of its process tree (ru_maxrss of the child, which
    Linux reports as the largest of it and its waited-for descendants)."""
    logs.mkdir(exist_ok=True)
    log = logs / (name.split(" (")[0].replace(" ", "-") + f"-{len(list(logs.iterdir()))}.log")
    print(f"[rehearsal] {name}: {' '.join(args)}", flush=True)
    t0 = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen([*CLI, *args], stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    rss = bytes_to_gb(usage.ru_maxrss * 1024)  # ru_maxrss: KiB
    print(f"[rehearsal] {name}: exit {proc.returncode}, {wall:.0f} s, peak RSS {rss:.1f} GB (log {log})", flush=True)
    return {
        "stage": name,
        "rc": proc.returncode,
        "wall_s": round(wall, 1),
        "peak_rss_gb": round(rss, 2),
        "log": str(log),
    }


def write_recipe(work: Path, leg: str, model: Path, args, extra: list[str]) -> Path:
    """The size's GPU recipe on this CPU: its model, LoRA and data settings, a few steps of short rows."""
    from crosstune.recipe import load_recipe

    sets = [
        f"name=rehearsal-{leg}",
        f"output_dir={work / 'runs'}",
        f"model.path={model}",
        f"model.size={args.size}",
        "hardware=cpu",
        "backend.torch={devices: 1, nodes: 1, fsdp: false}",
        f"backend.jax.mesh={{fsdp: 1, tp: {args.tp}}}",
        "serve.tensor_parallel_size=1",
        f"data.sources=[{{path: {work / 'corpus' / 'train.jsonl'}}}]",
        f"data.max_seq_len={args.seq}",
        "data.subsample=null",
        f"data.prepared_dir={work / ('data-' + leg)}",
        f"train.max_steps={args.steps}",
        "train.warmup_steps=0",
        "train.grad_accumulation=1",
        f"train.checkpoint_every={args.steps}",
        f"eval.problems={work / 'corpus' / 'eval'}",
        *extra,
    ]
    recipe = load_recipe(REPO / "recipes" / SIZE_RECIPES.get(args.size, SIZE_RECIPES["31b"]), sets)
    path = work / f"recipe-{leg}.yaml"
    import yaml

    path.write_text(yaml.safe_dump(recipe.model_dump(mode="json"), sort_keys=False))
    return path


def losses(run_dir: Path) -> list[float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r["loss"] for r in rows]


def merged_check(base: Path, export: Path) -> dict:
    """A q_proj of the merged shards against bf16(base + scale·B@A) from the exported adapter, and the vision
    tower's first tensor against the base, byte for byte."""
    import numpy as np

    from crosstune.run.lora_weights import read_peft_adapter
    from crosstune.run.shards import SafetensorsFile, from_float32

    index = json.loads((base / "model.safetensors.index.json").read_text())["weight_map"]
    name = "model.language_model.layers.0.self_attn.q_proj.weight"
    vision = next(n for n in index if n.startswith("model.vision_tower."))
    lora, _ = read_peft_adapter(export / "adapter", family="gemma4")
    before = SafetensorsFile(base / index[name])
    after = SafetensorsFile(export / "merged" / index[name])
    want = from_float32(before.read(name) + lora.delta("model.layers.0.self_attn.q_proj"), "BF16")
    rows = before.tensors[name].shape[0]
    got = after.read_rows(name, 0, rows)
    v_rows = SafetensorsFile(base / index[vision]).tensors[vision].shape[0]
    return {
        "tensor": name,
        "equal": bool(np.array_equal(got, want)),
        "changed": bool(not np.array_equal(got, before.read_rows(name, 0, rows))),
        "vision_untouched": bool(
            np.array_equal(
                SafetensorsFile(export / "merged" / index[vision]).read_rows(vision, 0, v_rows),
                SafetensorsFile(base / index[vision]).read_rows(vision, 0, v_rows),
            )
        ),
    }


def table(result: dict) -> str:
    lines = ["| stage | wall | peak RSS | exit |", "|---|---|---|---|"]
    for s in result["stages"]:
        minutes, seconds = divmod(round(s["wall_s"]), 60)
        lines.append(f"| {s['stage']} | {minutes}:{seconds:02d} | {s['peak_rss_gb']:.1f} GB | {s['rc']} |")
    c = result["checks"]
    lines.append("")
    lines.append(f"losses: {c['losses']}; merged = bf16(base + B·A): {c['merged']}; parity ok: {c['parity_ok']}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
