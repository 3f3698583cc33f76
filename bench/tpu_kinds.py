"""The rates of the kinds of work the jax step is made of, on the attached TPU (what crosstune.planner.timing's
calibration is measured with): bf16 matmuls at the Gemma 4 31B's projection and LM-head shapes, the step's splash
attention kernel forward + backward on its sliding and global layers (its flops counted from the visited blocks, as
the planner counts them), and an elementwise pass over an MLP-wide bf16 activation (HBM bytes read + written).

    python bench/tpu_kinds.py --out kinds.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

from crosstune.hardware import HARDWARE
from crosstune.planner.timing import SPLASH_MATMULS, visited_blocks
from crosstune.train.parts import splash_attention

TOKENS = 4096  # one 4096-token row
D, Q, KV, F, V = 5376, 8192, 4096, 21504, 262144  # the 31B: hidden, q width, kv width, MLP, vocabulary
MATMULS = {
    "q": (TOKENS, D, Q),
    "kv": (TOKENS, D, KV),
    "o": (TOKENS, Q, D),
    "gate/up": (TOKENS, D, F),
    "down": (TOKENS, F, D),
    "LM head chunk": (512, D, V),
    "LoRA A": (TOKENS, D, 64),
    "LoRA B": (TOKENS, 64, F),
    "8192³": (8192, 8192, 8192),
}
ATTENTION = {  # heads, KV heads, head_dim, window: the 31B's two layer types
    "sliding": (32, 16, 256, 1024),
    "global": (32, 4, 512, None),
}


def _time(fn, *args, repeats: int = 10) -> float:
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chip", default="tpu-v5e", help="the attached chip's catalog name (its peak, bandwidth)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    chip = next(h.chip for h in HARDWARE.values() if h.chip.name == args.chip)
    peak, bandwidth = chip.peak_bf16_tflops * 1e12, chip.hbm_bandwidth_gbs * 1e9
    out: dict[str, dict] = {"matmul": {}, "attention": {}, "elementwise": {}}
    key = jax.random.key(0)
    for name, (m, k, n) in MATMULS.items():
        a = jax.random.normal(key, (m, k), jnp.bfloat16)
        b = jax.random.normal(key, (k, n), jnp.bfloat16)
        s = _time(jax.jit(jnp.matmul), a, b)
        out["matmul"][name] = {"s": s, "tflops": 2 * m * k * n / s / 1e12, "of_peak": 2 * m * k * n / s / peak}
        print(
            f"matmul {name} {m}×{k}×{n}: {2 * m * k * n / s / 1e12:.1f} TFLOP/s ({out['matmul'][name]['of_peak']:.1%})"
        )
    for name, (heads, kv_heads, hd, window) in ATTENTION.items():
        q = jax.random.normal(key, (1, TOKENS, heads, hd), jnp.bfloat16)
        k = jax.random.normal(key, (1, TOKENS, kv_heads, hd), jnp.bfloat16)
        segments = jnp.ones((1, TOKENS), jnp.int32)

        def loss(q, k, window=window, segments=segments):
            return jnp.sum(splash_attention(q, k, k, segments, window=window).astype(jnp.float32))

        s = _time(jax.jit(jax.grad(loss, argnums=(0, 1))), q, k)
        flops = heads * visited_blocks(TOKENS, window, 512) * SPLASH_MATMULS[True] * 2 * 512**2 * hd
        out["attention"][name] = {"s": s, "tflops": flops / s / 1e12, "of_peak": flops / s / peak}
        print(f"splash {name} fwd+bwd: {flops / s / 1e12:.1f} TFLOP/s ({flops / s / peak:.1%})")
    x = jax.random.normal(key, (TOKENS * 2, F), jnp.bfloat16)
    s = _time(jax.jit(lambda x: jnp.tanh(x) * x + 1), x)
    moved = 2 * x.size * 2  # read once, written once
    out["elementwise"]["gelu-like pass"] = {"s": s, "gbs": moved / s / 1e9, "of_bandwidth": moved / s / bandwidth}
    print(f"elementwise: {moved / s / 1e9:.0f} GB/s ({moved / s / bandwidth:.1%} of {chip.hbm_bandwidth_gbs:.0f})")
    if args.out is not None:
        args.out.write_text(json.dumps(out, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
