"""A MoE layer's expert matmuls timed four ways on an attached TPU, forward and backward to their input (the experts
are frozen, as LoRA trains them), at the Gemma 4 26B-A4B's shapes: what decides how a scan over MoE layers should
hold its experts (docs/BENCHMARKS.md, "The 26B-A4B's experts in a scan").

- unrolled: tunix 0.1.7's MoERagged (one tensor per layer in its layout [E, 2, X, D], transposed for `ragged_dot`).
- scan_slices: the layers stacked and scanned, each iteration slicing its layer's experts out of the stack.
- unrolled_two_layouts: each layer's experts kept in both layouts `ragged_dot` reads them in, forward ([E, D, 2X],
  [E, X, D]) and backward ([E, 2X, D], [E, D, X]), a custom VJP reading the backward's: no transposed copies.
- scan_padded_two_layouts: the stack whole ([L·E, ...], both layouts), each iteration's group sizes zero but at
  its layer's E experts: no slice and no copy.
- scan_padded_one_layout: the same with the forward's layout only (XLA lays out the backward's operand).

Routing is random and sorted by expert, as tunix sorts it; every way returns the same gradient (its checksum).

    python bench/tpu_moe_layouts.py [--layers 2] [--small] [--out FILE.json]   # --small: CPU-sized shapes
"""

from __future__ import annotations

import argparse
import functools
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

from crosstune.families.gemma4 import SIZES

TOKENS = 4096  # one packed row, as the 26B-A4B's chip rows ran (docs/BENCHMARKS.md)


@functools.partial(jax.custom_vjp)
def _matmul(x, forward, backward, groups):
    return jax.lax.ragged_dot(x, forward, groups)


def _matmul_fwd(x, forward, backward, groups):
    return jax.lax.ragged_dot(x, forward, groups), (forward, backward, groups)


def _matmul_bwd(saved, dy):
    forward, backward, groups = saved
    return jax.lax.ragged_dot(dy, backward, groups), jnp.zeros_like(forward), jnp.zeros_like(backward), None


_matmul.defvjp(_matmul_fwd, _matmul_bwd)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--small", action="store_true", help="CPU-sized shapes (a check that the ways agree)")
    parser.add_argument("--out", help="the results as JSON")
    args = parser.parse_args()
    spec = SIZES["26b-a4b"]  # its experts' shapes; rows: TOKENS routed top_k times each
    moe = spec.moe
    e, d, x_dim, rows = (
        (8, 64, 32, 512) if args.small else (moe.num_experts, spec.hidden_size, moe.expert_dim, TOKENS * moe.top_k)
    )
    # each layer adds `scale` × its experts' output to its input: small beside it on the chip, as large as it at CPU
    # sizes, where the ways' agreement is a check of the experts' part of the gradient (tests/train/jax)
    scale = 1.0 if args.small else 0.01
    spread = (d**-0.5, x_dim**-0.5) if args.small else (0.02, 0.02)  # the experts' weights' std: gate, down
    n = args.layers
    bf16 = jnp.bfloat16
    sizes = jnp.asarray(np.bincount(np.random.default_rng(0).integers(0, e, rows), minlength=e), jnp.int32)
    x0 = jax.random.normal(jax.random.key(0), (rows, d), bf16)
    probe = jax.random.normal(jax.random.key(9), (rows, d), jnp.float32)

    def tunix_layer(x, gate, down, groups):
        w = jnp.transpose(gate, (0, 3, 1, 2)).reshape(gate.shape[0], d, 2 * x_dim)
        h = jax.lax.ragged_dot(x, w, groups)
        return x + scale * jax.lax.ragged_dot(jax.nn.gelu(h[:, :x_dim]) * h[:, x_dim:], down, groups)

    def two_layout_layer(x, gate_f, gate_b, down_f, down_b, groups):
        h = _matmul(x, gate_f, gate_b, groups)
        return x + scale * _matmul(jax.nn.gelu(h[:, :x_dim]) * h[:, x_dim:], down_f, down_b, groups)

    def padded(i):  # the stack's group sizes: this layer's experts at its offset, every other layer's empty
        return jax.lax.dynamic_update_slice(jnp.zeros(n * e, jnp.int32), sizes, (i * e,))

    def loss_of(run):
        return lambda x, *weights: jnp.sum(run(x, *weights).astype(jnp.float32) * probe)

    def timed(name, run, *weights):
        compiled = jax.jit(jax.grad(loss_of(run))).lower(x0, *weights).compile()
        grad = compiled(x0, *weights)
        grad.block_until_ready()
        times = []
        for _ in range(10):
            t0 = time.perf_counter()
            compiled(x0, *weights).block_until_ready()
            times.append(time.perf_counter() - t0)
        temp = compiled.memory_analysis().temp_size_in_bytes
        row = {"ms": 1e3 * float(np.median(times)), "temp_gb": temp / 1e9, "checksum": float(jnp.sum(grad * probe))}
        print(name, json.dumps(row), flush=True)
        return row

    keys = jax.random.split(jax.random.key(1), 2 * n)
    gates = [spread[0] * jax.random.normal(keys[2 * i], (e, 2, x_dim, d), bf16) for i in range(n)]
    downs = [spread[1] * jax.random.normal(keys[2 * i + 1], (e, x_dim, d), bf16) for i in range(n)]

    def unrolled(x, *w):
        for i in range(n):
            x = tunix_layer(x, w[i], w[n + i], sizes)
        return x

    results = {"unrolled": timed("unrolled", unrolled, *gates, *downs)}
    gate, down = jnp.stack(gates), jnp.stack(downs)
    for w in gates + downs:  # one copy of the experts on the chip at a time (the 26B's: 1.5 GB a layer)
        w.delete()

    def scan_slices(x, gate, down):
        return jax.lax.scan(lambda x, w: (tunix_layer(x, *w, sizes), None), x, (gate, down))[0]

    results["scan_slices"] = timed("scan_slices", scan_slices, gate, down)
    layouts = []  # per layer: gate forward [E, D, 2X] and backward [E, 2X, D], down forward and backward
    for g, w in zip(gate, down, strict=True):
        layouts += [jnp.transpose(g, (0, 3, 1, 2)).reshape(e, d, 2 * x_dim), g.reshape(e, 2 * x_dim, d), w]
        layouts.append(jnp.swapaxes(w, 1, 2))

    def unrolled_two(x, *w):
        for i in range(n):
            x = two_layout_layer(x, *w[4 * i : 4 * i + 4], sizes)
        return x

    results["unrolled_two_layouts"] = timed("unrolled_two_layouts", unrolled_two, *layouts)
    for w in layouts:
        w.delete()
    stacks = (  # [L·E, ...]: gate forward and backward, down forward and backward
        jnp.transpose(gate, (0, 1, 4, 2, 3)).reshape(n * e, d, 2 * x_dim),
        gate.reshape(n * e, 2 * x_dim, d),
        down.reshape(n * e, x_dim, d),
        jnp.swapaxes(down, 2, 3).reshape(n * e, d, x_dim),
    )

    def scan_padded_two(x, gf, gb, df, db):
        return jax.lax.scan(lambda x, i: (two_layout_layer(x, gf, gb, df, db, padded(i)), None), x, jnp.arange(n))[0]

    results["scan_padded_two_layouts"] = timed("scan_padded_two_layouts", scan_padded_two, *stacks)
    for w in stacks:
        w.delete()

    def scan_padded_one(x, gate, down):
        gf = jnp.transpose(gate, (0, 1, 4, 2, 3)).reshape(n * e, d, 2 * x_dim)
        df = down.reshape(n * e, x_dim, d)

        def layer(x, i):
            h = jax.lax.ragged_dot(x, gf, padded(i))
            return x + scale * jax.lax.ragged_dot(jax.nn.gelu(h[:, :x_dim]) * h[:, x_dim:], df, padded(i)), None

        return jax.lax.scan(layer, x, jnp.arange(n))[0]

    results["scan_padded_one_layout"] = timed("scan_padded_one_layout", scan_padded_one, gate, down)
    results["shapes"] = {"experts": e, "hidden": d, "expert_dim": x_dim, "rows": rows, "layers": n}
    results["device"] = jax.devices()[0].device_kind
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
