"""What the demo's numbers rest on, measured: a base's greedy pass@1 on fresh problems of the families it was
pretrained on (`base`: `crosstune eval`'s run_eval), and a torch LoRA's greedy pass@1 on the demo's 60 held-out
problems (`lora`: the demo's torch study, prepare → train → export → eval), with recipe overrides, so a change to the
base or to the LoRA's hyper-parameters is judged by the evaluator before the demo.

    .venv/bin/python bench/demo_quality.py base ~/.cache/crosstune/pretrained/gemma4-small-<hash>
    .venv/bin/python bench/demo_quality.py lora ~/.cache/crosstune/pretrained/gemma4-small-<hash> --steps 120 \\
        --set train.learning_rate=1e-2
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path


def categories(summary: dict) -> str:
    return ", ".join(f"{code} {n}" for code, n in sorted(summary["categories"].items(), key=lambda x: -x[1]))


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

    from crosstune.demo.runner import demo_overrides
    from crosstune.demo.split import DEFAULT_EVAL, DEFAULT_TRAIN, HELD_OUT_KINDS
    from crosstune.evals.runner import run_eval
    from crosstune.evals.settings import EvalConfig, EvalSettings
    from crosstune.pretrain.base_model import BASE_KINDS
    from crosstune.recipe import load_recipe
    from crosstune.recipes import shipped_recipe
    from crosstune.study.runner import run_study
    from crosstune.synth import generate_corpus

    recipe_file = shipped_recipe("demo-cpu.yaml")
    with tempfile.TemporaryDirectory(prefix="bench-demo-quality-") as tmp:
        tmp = Path(tmp)
        if args.what == "base":  # seed 777: parameters the base's corpus (seed 1000) drew only by chance
            generate_corpus(tmp / "corpus", n_train=0, n_eval=args.problems, seed=777, task_kinds=BASE_KINDS)
            problems = tmp / "corpus" / "eval"  # the demo's evaluation settings (greedy), on the base's families
            settings = EvalSettings.resolve(load_recipe(recipe_file).eval, problems=problems)
            config = EvalConfig(
                problems=problems, out=tmp / "eval", hf_model=args.base.resolve(), settings=settings, concurrency=1
            )
            summary = run_eval(config).summary
            print(
                f"base on its own families: pass@1 {100 * summary['pass_at_k']['1']:.1f} % on "
                f"{summary['problems']} problems, {categories(summary)}"
            )
            return
        generate_corpus(tmp / "corpus", DEFAULT_TRAIN, DEFAULT_EVAL, 0, task_kinds=HELD_OUT_KINDS)
        sets = [*demo_overrides(tmp / "corpus", args.steps), f"model.path={args.base.resolve()}", *args.overrides]
        start = time.perf_counter()
        manifest = run_study(
            recipe_file, "torch", tmp / "bundle", overrides=sets, only=["prepare", "train", "export", "eval"]
        )
        summary = json.loads((tmp / "bundle" / "eval" / "finetune" / "summary.json").read_text())
        print(manifest.stages["train"].note, f"({time.perf_counter() - start:.0f} s with the evaluation)")
        print(
            f"torch LoRA on the held-out families: pass@1 {100 * summary['pass_at_k']['1']:.1f} % on "
            f"{summary['problems']} problems, {categories(summary)}"
        )


if __name__ == "__main__":
    main()
