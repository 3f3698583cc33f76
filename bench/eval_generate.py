"""Local generation speed: samples/s of the local engine (`crosstune eval --hf-model`) one prompt at a time, as it
was, against batched generate() calls, greedy and sampled, on the demo's model and prompts.

The demo's shipped base (Gemma 4, 1.6M parameters) on held-out synthetic problems (codev prompts, 128 new tokens,
1 torch thread: the demo's settings). Each configuration runs in its own process (so its peak RSS is its own),
alternating with the one-at-a-time baseline, best of --repeats; the batched completions are checked to equal the
baseline's, text for text.

    .venv/bin/python bench/eval_generate.py --problems 16 --repeats 2 --batch-sizes 8,16,32
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import tempfile
import time
from pathlib import Path


def measure(batch_size: int, n: int, temperature: float, problems: int, threads: int) -> dict:
    """In a fresh process: generate n samples per problem with `batch_size`; time, peak RSS and the texts."""
    import torch

    from crosstune.demo.split import HELD_OUT_KINDS
    from crosstune.evals.generation.cache import CompletionCache, SamplingParams
    from crosstune.evals.generation.generate import generate_completions
    from crosstune.evals.generation.local import TransformersGenerator
    from crosstune.evals.problems.problem_sets import load_problems
    from crosstune.pretrain.base_model import SHIPPED_BASES
    from crosstune.synth import generate_corpus

    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory(prefix="bench-eval-generate-") as tmp:
        generate_corpus(Path(tmp), n_train=0, n_eval=problems, seed=0, task_kinds=HELD_OUT_KINDS)
        chosen = load_problems(Path(tmp) / "eval")
        engine = TransformersGenerator(next(SHIPPED_BASES.iterdir()), batch_size=batch_size)
        params = SamplingParams(n=n, temperature=temperature, top_p=0.95, max_tokens=128, seed=0)
        start = time.perf_counter()
        generation = generate_completions(chosen, engine, params, CompletionCache(Path(tmp) / "c.jsonl"), "codev")
        seconds = time.perf_counter() - start
    texts = [t for p in chosen for t in generation.completions[p.name]]
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": seconds, "samples": len(texts), "peak_rss_mib": peak_mib, "texts": texts}


def run(batch_size: int, n: int, temperature: float, args: argparse.Namespace) -> dict:
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        return pool.apply(measure, (batch_size, n, temperature, args.problems, args.threads))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--batch-sizes", default="8,16,32")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    print(f"{args.problems} problems, 128 new tokens, {args.threads} torch thread(s), best of {args.repeats}")
    for label, n, temperature in (("greedy", 1, 0.0), ("sampled n=5 T=0.8", 5, 0.8)):
        best: dict[int, dict] = {}
        for _ in range(args.repeats):
            for size in [1, *sizes]:  # the baseline (one at a time) alternates with the batched runs
                result = run(size, n, temperature, args)
                if size not in best or result["seconds"] < best[size]["seconds"]:
                    best[size] = result
        base = best[1]
        print(f"\n{label}: {base['samples']} samples")
        print("| batch | samples/s | seconds | peak RSS (MiB) | vs one at a time | same texts |")
        print("|---|---|---|---|---|---|")
        for size, result in best.items():
            rate = result["samples"] / result["seconds"]
            ratio = base["seconds"] / result["seconds"]
            same = result["texts"] == base["texts"]
            print(
                f"| {size} | {rate:.2f} | {result['seconds']:.1f} | {result['peak_rss_mib']:.0f} | {ratio:.2f}× "
                f"| {'yes' if same else 'NO'} |"
            )


if __name__ == "__main__":
    main()
