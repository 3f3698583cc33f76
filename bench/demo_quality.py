"""What the demo's numbers rest on, measured: a base's greedy pass@1 on fresh problems of the families it was
pretrained on (`base`), and a torch LoRA's greedy pass@1 on the demo's 60 held-out problems (`lora`), with recipe
overrides, so a change to the base or to the LoRA's hyper-parameters is judged by the evaluator before the demo.

    .venv/bin/python bench/demo_quality.py base ~/.cache/crosstune/pretrained/gemma4-small-<hash>
    .venv/bin/python bench/demo_quality.py lora ~/.cache/crosstune/pretrained/gemma4-small-<hash> --steps 120 \\
        --set train.learning_rate=1e-2
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path


def score(ctx, model: Path, out: Path) -> str:
    from crosstune.demo.evaluation import evaluate_model

    summary = evaluate_model(ctx, model, out, n=1, temperature=0.0, patterns=None)
    return f"pass@1 {100 * float(summary['pass_at_k']['1']):.1f} % on {summary['problems']} problems, " + ", ".join(
        f"{code} {n}" for code, n in sorted(summary["categories"].items(), key=lambda x: -x[1])
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("base", "lora"))
    parser.add_argument("base", type=Path, help="a pretrained base folder (`crosstune pretrain` prints it)")
    parser.add_argument("--steps", type=int, default=None, help="LoRA steps (default: the demo recipe's)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="demo recipe override")
    parser.add_argument("--problems", type=int, default=44, help="base: fresh problems of the base's families")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ["OMP_NUM_THREADS"] = str(args.threads)

    from crosstune import demo
    from crosstune.pretrain.base_model import BASE_FAMILIES
    from crosstune.recipes import shipped_recipe
    from crosstune.synth import generate_corpus

    with tempfile.TemporaryDirectory(prefix="bench-demo-quality-") as tmp:
        ctx = demo.DemoContext(Path(tmp), shipped_recipe("demo-cpu.yaml"), 0, demo.DEFAULT_TRAIN, demo.DEFAULT_EVAL)
        ctx.steps = args.steps
        if args.what == "base":  # seed 777: parameters the base's corpus (seed 1000) drew only by chance
            generate_corpus(ctx.corpus_dir, n_train=0, n_eval=args.problems, seed=777, families=BASE_FAMILIES)
            print(f"base on its own families: {score(ctx, args.base, ctx.out / 'eval')}")
            return
        base_overrides = ctx.overrides
        ctx.overrides = lambda: base_overrides() + args.overrides  # type: ignore[method-assign]
        demo.stage_corpus(ctx)
        shutil.copytree(args.base, ctx.model_dir)
        demo.stage_prepare(ctx)
        start = time.perf_counter()
        print(demo.stage_train_torch(ctx), f"({time.perf_counter() - start:.0f} s)")
        demo.stage_export_torch(ctx)
        print(f"torch LoRA on the held-out families: {score(ctx, ctx.out / 'export-torch' / 'merged', ctx.out / 'e')}")


if __name__ == "__main__":
    main()
