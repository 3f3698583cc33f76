"""JAX training throughput on CPU: `crosstune train --backend jax` on the tiny recipe, against the torch backend on
the same recipe, rows and hyper-parameters, measured in the same run; compilation reported apart from step time.

    .venv/bin/python bench/train_jax.py                          # recipes/tiny-cpu.yaml: tiny Gemma 4, 30 steps
    .venv/bin/python bench/train_jax.py --steps 12 --repeat 1 --meshes 1x1 1x2

Runs alternate (jax on each mesh, then torch), --repeat times; each figure is the best run. Steady-state throughput
= tokens of steps 2..N / the sum of their step_time_s (metrics.jsonl: both backends time steps the same way and
leave compilation and checkpoint saves out); wall = the whole train() call (model load, compile, steps, saves).
JAX meshes run on fake CPU devices (XLA_FLAGS=--xla_force_host_platform_device_count=8, set here before JAX is
imported): on 2 shared cores a bigger mesh adds partitioning overhead, not compute.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--meshes", nargs="+", default=["1x2", "1x1"], help="fsdp x tp meshes for the jax runs")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-torch", action="store_true", help="skip the torch baseline")
    args = parser.parse_args()
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    with tempfile.TemporaryDirectory(prefix="bench-train-jax-") as tmp:
        run(Path(tmp), args)


def setup(root: Path, steps: int) -> list[str]:
    """A tiny Gemma 4 and a synthetic corpus; the tiny recipe's overrides pointing at them."""
    from crosstune.models.tiny import build_tiny_model
    from crosstune.synth import generate_corpus

    generate_corpus(root / "corpus", n_train=400, n_eval=4, seed=0)
    build_tiny_model("gemma4", root / "model", seed=0, corpus_dir=root / "corpus")
    return [
        f"model.path={root / 'model'}",
        f"data.sources=[{{path: {root / 'corpus' / 'train.jsonl'}}}]",
        f"data.prepared_dir={root / 'data'}",
        "data.strict=false",  # skip the few synthetic records longer than max_seq_len
        f"output_dir={root / 'runs'}",
        f"train.max_steps={steps}",
        f"train.checkpoint_every={steps}",
    ]


def one_run(backend: str, overrides: list[str], run_dir: Path) -> dict:
    from crosstune.recipe import load_recipe
    from crosstune.run.metrics import read_metrics
    from crosstune.run.records import read_run_record
    from crosstune.train.session import train

    recipe = load_recipe(REPO / "recipes" / "tiny-cpu.yaml", overrides)
    t0 = time.perf_counter()
    train(recipe, run_dir, backend=backend, progress=False)
    wall = time.perf_counter() - t0
    rows = read_metrics(run_dir)
    steady = rows[1:]
    step_s = sum(r.step_time_s for r in steady)
    record = read_run_record(run_dir)
    return {
        "wall": wall,
        "compile": record.compile_time_s,
        "first_step": rows[0].step_time_s,
        "steps_per_s": len(steady) / step_s,
        "tokens_per_s": sum(r.tokens for r in steady) / step_s,
        "trained_tokens_per_s": sum(r.trained_tokens for r in steady) / step_s,
        "loss": (rows[0].loss, rows[-1].loss),
        "tokens": sum(r.tokens for r in rows),
    }


def run(root: Path, args) -> None:
    from rich.console import Console
    from rich.table import Table

    from crosstune.data import prepare_dataset
    from crosstune.recipe import load_recipe

    base = setup(root, args.steps)
    prepare_dataset(load_recipe(REPO / "recipes" / "tiny-cpu.yaml", base))
    configs = []
    for mesh in args.meshes:
        fsdp, tp = mesh.split("x")
        configs.append((f"jax {mesh}", "jax", [f"backend.jax.mesh.fsdp={fsdp}", f"backend.jax.mesh.tp={tp}"]))
    if not args.no_torch:
        configs.append(("torch", "torch", []))
    best: dict[str, dict] = {}
    for rep in range(args.repeat):
        for name, backend, extra in configs:
            result = one_run(backend, base + extra, root / "runs" / f"{name.replace(' ', '-')}-{rep}")
            rate = f"{result['steps_per_s']:.2f} steps/s, {result['tokens_per_s']:,.0f} tok/s"
            print(f"{name} #{rep + 1}: {rate}, wall {result['wall']:.1f} s, compile {result['compile'] or 0:.1f} s")
            if name not in best or result["steps_per_s"] > best[name]["steps_per_s"]:
                best[name] = result
    table = Table(title=f"tiny Gemma 4, recipes/tiny-cpu.yaml, {args.steps} steps, best of {args.repeat}")
    for col in ("run", "steps/s", "tokens/s", "trained tok/s", "compile s", "step 1 s", "wall s", "loss first→last"):
        table.add_column(col, justify="right")
    for name, r in best.items():
        compile_s = "–" if r["compile"] is None else f"{r['compile']:.1f}"
        rates = (f"{r['steps_per_s']:.2f}", f"{r['tokens_per_s']:,.0f}", f"{r['trained_tokens_per_s']:,.0f}")
        loss = f"{r['loss'][0]:.3f}→{r['loss'][1]:.3f}"
        table.add_row(name, *rates, compile_s, f"{r['first_step']:.2f}", f"{r['wall']:.1f}", loss)
    console = Console(width=160)
    console.print(table)
    if "torch" in best:
        for name, r in best.items():
            if name != "torch":
                ratio = r["tokens_per_s"] / best["torch"]["tokens_per_s"]
                console.print(f"{name} vs torch, steady-state tokens/s: {ratio:.2f}×")


if __name__ == "__main__":
    main()
