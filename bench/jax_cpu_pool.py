"""The cost of pinning XLA's CPU thread pool (crosstune.train.jax.data.CPU_THREAD_POOL): the demo's jax LoRA on its
shipped base, one process per configuration, alternating, each --repeat times; steady-state s/step (steps 2..N,
metrics.jsonl's step_time_s) against the unpinned pool of the same device count, and whether the losses agree.

    .venv/bin/python bench/jax_cpu_pool.py                 # 20 steps, 2 repeats, 2 and 8 fake devices
    .venv/bin/python bench/jax_cpu_pool.py --steps 10 --repeat 1 --devices 2

Unpinned, XLA sizes its pool max(cores, devices): on 2 cores that is 2 threads on 2 fake devices, 8 on 8. Pinned
(NPROC=8, what the backend sets) it is 8 on both. A configuration is run as `NPROC=<pool>` explicitly, so the
unpinned pool is reproduced on any machine by naming its size.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
DRIVER = """
import sys
from pathlib import Path
from crosstune.recipe import load_recipe
from crosstune.train.session import train
train(load_recipe(sys.argv[1]), Path(sys.argv[2]), progress=False, backend="jax")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--devices", type=int, nargs="+", default=[2, 8], help="fake CPU device counts")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "src"))
    with tempfile.TemporaryDirectory(prefix="bench-jax-cpu-pool-") as tmp:
        run(Path(tmp), args)


def recipe_file(root: Path, steps: int) -> Path:
    """The shipped demo recipe on the shipped base and 200 fresh records of the held-out families, prepared."""
    from crosstune.data import prepare_dataset
    from crosstune.demo.split import HELD_OUT_KINDS
    from crosstune.pretrain.base_model import pretrained_base
    from crosstune.recipe import load_recipe
    from crosstune.recipes import shipped_recipe
    from crosstune.synth import generate_corpus

    generate_corpus(root / "corpus", n_train=200, n_eval=0, seed=0, task_kinds=HELD_OUT_KINDS)
    recipe = load_recipe(
        shipped_recipe("demo-cpu.yaml"),
        [
            f"model.path={pretrained_base()}",
            f"data.sources=[{{path: {root / 'corpus' / 'train.jsonl'}}}]",
            f"output_dir={root / 'runs'}",
            f"train.max_steps={steps}",
            f"train.checkpoint_every={steps}",
        ],
    )
    prepare_dataset(recipe)
    path = root / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe.model_dump(mode="json"), sort_keys=False))
    return path


def one_run(recipe: Path, run_dir: Path, devices: int, pool: int) -> dict:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO / "src"),
        "NPROC": str(pool),
        "OMP_NUM_THREADS": "2",
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
    }
    done = subprocess.run([sys.executable, "-c", DRIVER, str(recipe), str(run_dir)], env=env, capture_output=True)
    if done.returncode != 0:
        raise SystemExit(done.stderr.decode()[-3000:])
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "loss" in r]
    steady = rows[1:]
    return {"s_per_step": sum(r["step_time_s"] for r in steady) / len(steady), "curve": [r["loss"] for r in rows]}


def run(root: Path, args) -> None:
    recipe = recipe_file(root, args.steps)
    configs = []
    for devices in args.devices:
        unpinned = max(len(os.sched_getaffinity(0)), devices)  # XLA counts the cores this process may use
        configs += [(devices, unpinned, "unpinned"), (devices, 8, "pinned")]
    best: dict[tuple, dict] = {}
    for rep in range(args.repeat):
        for devices, pool, label in configs:
            r = one_run(recipe, root / "runs" / f"d{devices}-p{pool}-{label}-{rep}", devices, pool)
            print(f"{devices} devices, pool {pool} ({label}) #{rep + 1}: {r['s_per_step']:.3f} s/step", flush=True)
            key = (devices, pool, label)
            if key not in best or r["s_per_step"] < best[key]["s_per_step"]:
                best[key] = r
    print(f"\nbest of {args.repeat}, {args.steps} steps, steady state (steps 2..{args.steps}):")
    pinned_curves = {tuple(r["curve"]) for (_, _, label), r in best.items() if label == "pinned"}
    for devices in args.devices:
        (u_key, u), (p_key, p) = [(k, r) for k, r in best.items() if k[0] == devices]
        print(
            f"  {devices} devices: unpinned (pool {u_key[1]}) {u['s_per_step']:.3f} s/step, pinned (pool 8) "
            f"{p['s_per_step']:.3f} s/step: {p['s_per_step'] / u['s_per_step']:.2f}x the time; "
            f"same losses as unpinned: {u['curve'] == p['curve']}"
        )
    print(f"  pinned runs on {args.devices} devices give one loss curve: {len(pinned_curves) == 1}")


if __name__ == "__main__":
    main()
