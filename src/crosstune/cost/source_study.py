"""The seed's published cost figures, recomputed by this cost model from the seed's own inputs.

Published: training TPU v5p-8 3.34 h × $16.80/h = $56.11 (763 tok/s), 2×H100 5.39 h × $22.12/h = $119.23
(486 tok/s), 2.12× cheaper on TPU; serving at 4096 tokens TPU v6e-8 +66 % output throughput → 41 % cheaper per
output token; TCO "train + serve" 1.82× cheaper on TPU, with no serving volume stated.

Which serving assumption gives 1.82×: one hour of serving on each target (v6e-8 at $21.60/h, 2×H100 at
$22.12/h) on top of one training run: (119.23 + 22.12) / (56.11 + 21.60) = 1.819. Billing serving per token at the
4096-token ratio instead moves the TCO ratio from 2.12× (no serving) towards 1.70× (serving dominates); it equals
1.82× only when the GPU's serving bill is ≈ $242 (≈ 10.9 hours of 2×H100), a volume the seed never states.
"""

from __future__ import annotations

from crosstune.cost.costs import ServingCost, TrainingCost, what_if_serving, what_if_training
from crosstune.cost.prices import PriceBook
from crosstune.cost.tco import Option, Workload

TPU_TRAIN, GPU_TRAIN = "tpu-v5p-8", "2xh100"
TPU_SERVE, GPU_SERVE = "tpu-v6e-8", "2xh100"
TPU_HOURS, GPU_HOURS = 3.34, 5.39
TPU_TOKENS_PER_S, GPU_TOKENS_PER_S = 763.0, 486.0
TPU_THROUGHPUT_GAIN_4096 = 1.66  # "4096 tokens: TPU +66 % throughput"
SEED_TCO_RATIO = 1.82


def seed_training(book: PriceBook | None = None) -> tuple[TrainingCost, TrainingCost]:
    """(TPU, GPU) training costs from the seed's hours (tokens from its tokens/s × hours)."""
    book = book or PriceBook()
    runs = []
    for target, hours, rate in ((TPU_TRAIN, TPU_HOURS, TPU_TOKENS_PER_S), (GPU_TRAIN, GPU_HOURS, GPU_TOKENS_PER_S)):
        tokens = rate * hours * 3600
        runs.append(
            what_if_training(
                book,
                target,
                trained_tokens=tokens,
                hours=hours,
                label=f"seed · {target}",
                assumptions=["the seed's published hours and tokens/s"],
            )
        )
    return runs[0], runs[1]


def seed_serving(gpu_output_tokens_per_s: float, book: PriceBook | None = None) -> tuple[ServingCost, ServingCost]:
    """(TPU, GPU) serving at 4096 tokens; the seed gives only the ratio, so the GPU's throughput is a parameter."""
    book = book or PriceBook()
    tpu = what_if_serving(book, TPU_SERVE, 4096, gpu_output_tokens_per_s * TPU_THROUGHPUT_GAIN_4096)
    return tpu, what_if_serving(book, GPU_SERVE, 4096, gpu_output_tokens_per_s)


def seed_options(gpu_output_tokens_per_s: float = 1000.0, book: PriceBook | None = None) -> tuple[Option, Option]:
    train_tpu, train_gpu = seed_training(book)
    serve_tpu, serve_gpu = seed_serving(gpu_output_tokens_per_s, book)
    return Option("TPU", train_tpu, serve_tpu), Option("GPU", train_gpu, serve_gpu)


# The assumption that reproduces the seed's 1.82×: train once + the endpoint up one hour on each target.
SEED_TCO_WORKLOAD = Workload(days=1, serve_hours_per_day=1.0)


def gpu_serving_bill_for_ratio(ratio: float, book: PriceBook | None = None) -> float:
    """Per-token billing: the GPU serving bill ($) at which GPU total / TPU total = `ratio` (4096-token costs)."""
    tpu, gpu = seed_options(book=book)
    per_token = tpu.serve.usd_per_m_output / gpu.serve.usd_per_m_output  # TPU $/token ÷ GPU $/token
    # (gpu_train + S) / (tpu_train + per_token·S) = ratio  →  S = (ratio·tpu_train − gpu_train) / (1 − ratio·per_token)
    return (ratio * tpu.train_usd - gpu.train_usd) / (1 - ratio * per_token)
