"""Splash attention for packed rows (`backend.jax.attention: splash`): jax's block-sparse Pallas kernel
(`jax.experimental.pallas.ops.tpu.splash_attention`) with the rows' segment ids, so packed documents never attend
to each other, and the sliding layers' local window, so blocks outside it are skipped, not computed and masked.

Tunix 0.1.7's own splash path (`use_flash_attention`) builds causal/local masks without segment ids (packed
documents would attend across) and refuses a sliding-window KV cache; no tunix release the lock can take passes
segment ids (0.1.7 is the newest on PyPI). So the attention modules of a built model get a subclass whose training
path (`block` without a cache) runs tunix's own projections, norms and RoPE — the lines of tunix 0.1.7's `block`
before its score einsum, as they are — then the kernel under shard_map over (fsdp rows, tp heads), then tunix's
output projection. With a cache (decoding) it is tunix's block unchanged. The model then takes the rows' segment
ids [B, L] where it took the dense [B, L, L] mask (crosstune.train.jax.loss.loss_fn passes them).

On a CPU the kernel runs in Pallas interpret mode (equivalence tests; far too slow to train with). The kernel's
work, which XLA's cost_analysis does not count, is counted here from its own block mask (`kernel_work`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as splash
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as mask_lib
from jax.interpreters import pxla
from jax.sharding import PartitionSpec as P
from tunix.models.gemma3 import model as gemma3
from tunix.models.gemma4 import model as gemma4
from tunix.utils.sharding_utils import shard

from crosstune.train.jax import moe

SCOPE = "crosstune_attention_"  # + layer type: names each kernel call in the HLO's op_name metadata
# the name splash gives its residuals (output, logsumexp): what recompute dots_and_attention keeps (train.jax.remat)
SPLASH_RESIDUALS = "crosstune_splash_residuals"
# matmuls of block size per visited block, per kernel phase: fwd q·kᵀ, p·v; dkv q·kᵀ, dO·vᵀ, pᵀ·dO, dSᵀ·q (+ dS·k
# when the backward is fused: dq computed in the dkv pass); dq (unfused) q·kᵀ, dO·vᵀ, dS·k
MATMULS = {"fwd": 2, "dkv": 4, "dq": 3}
FUSED_DKV = 5


def block_size(length: int, block: int) -> int:
    """The kernel's tile for rows of `length` tokens and the recipe's backend.jax.splash_block."""
    block = min(block, length)
    if length % block or block % 128:
        raise ValueError(
            f"backend.jax.attention splash tiles the sequence in blocks of {block} (a multiple of 128): "
            f"data.max_seq_len {length} must be a multiple of it (e.g. {max(128, length // 128 * 128)})"
        )
    return block


def _mask(window: int | None, length: int) -> mask_lib.Mask:
    if window:
        return mask_lib.LocalMask((length, length), window_size=(window - 1, 0), offset=0)
    return mask_lib.CausalMask((length, length))


@functools.lru_cache(maxsize=32)
def make_kernel(
    window: int | None, length: int, heads: int, interpret: bool, block: int = 512, fused: bool = True
) -> splash.SplashAttentionKernel:
    """The kernel for `heads` local heads of one layer type (every head the same causal or local mask), tiled in
    `block` (backend.jax.splash_block), its backward one fused dq+dkv pass or two
    (backend.jax.splash_fused_backward)."""
    b = block_size(length, block)
    sizes = splash.BlockSizes(
        block_q=b,
        block_kv=b,
        block_kv_compute=b,
        block_q_dkv=b,
        block_kv_dkv=b,
        block_kv_dkv_compute=b,
        **({} if fused else {"block_q_dq": b, "block_kv_dq": b}),
        use_fused_bwd_kernel=fused,
    )
    mask = mask_lib.MultiHeadMask([_mask(window, length) for _ in range(heads)])
    # Called while a step is traced (inside shard_map) and kept for the next layer of the type: its block-mask
    # arrays must be concrete, or the second layer meets the first one's tracers (UnexpectedTracerError).
    with jax.ensure_compile_time_eval():
        return splash.make_splash_mha(
            mask,
            block_sizes=sizes,
            head_shards=1,
            q_seq_shards=1,
            interpret=interpret,
            residual_checkpoint_name=SPLASH_RESIDUALS,
        )


def splash_attention(
    q, k, v, segment_ids, *, window: int | None, interpret: bool, mesh=None, block: int = 512, fused: bool = True
) -> jax.Array:
    """q [B, T, N, H], k and v [B, T, K, H] (K divides N), segment_ids [B, T] -> [B, T, N, H]: causal (within
    `window` tokens back when given) attention within each segment, no scaling of q (the callers scale)."""
    mesh = mesh if mesh is not None else pxla.thread_resources.env.physical_mesh  # tunix's legacy mesh context

    def local(q, k, v, seg):
        kernel = make_kernel(window, q.shape[2], q.shape[1], interpret, block, fused)
        one = lambda q, k, v, s: kernel(q, k, v, segment_ids=splash.SegmentIds(q=s, kv=s))  # noqa: E731
        return jax.vmap(one)(q, k, v, seg)

    q, k, v = (x.transpose(0, 2, 1, 3) for x in (q, k, v))
    axes = {} if mesh.empty else dict(mesh.shape)
    if not axes:
        return local(q, k, v, segment_ids).transpose(0, 2, 1, 3)
    tp, kv_heads = axes.get("tp", 1), k.shape[1]
    if q.shape[1] % tp or (kv_heads % tp and kv_heads != 1):
        raise ValueError(f"splash attention shards heads over tp={tp}: {q.shape[1]} query and {kv_heads} KV heads")
    rows = "fsdp" if q.shape[0] % axes.get("fsdp", 1) == 0 else None
    heads = P(rows, "tp", None, None)
    kv = heads if kv_heads % tp == 0 else P(rows, None, None, None)  # one KV head: every tp shard reads it
    out = jax.shard_map(local, mesh=mesh, in_specs=(heads, kv, kv, P(rows, None)), out_specs=heads, check_vma=False)(
        q, k, v, segment_ids
    )
    return out.transpose(0, 2, 1, 3)


def _normalize_v(v):  # Gemma 4's parameter-free RMS norm of the values (tunix 0.1.7, Attention.block)
    return v * jax.lax.rsqrt(jnp.mean(jnp.square(v), axis=-1, keepdims=True) + 1e-06)


def own_kv(attn: gemma4.Attention, x, segment_pos) -> tuple:
    """A Gemma 4 attention's own K/V for its input `x`, normed and roped, as tunix 0.1.7's Attention.block computes
    them without a shared cache (crosstune.train.jax.kv_carry computes them apart from the block)."""
    x, act = x.astype(attn.config.dtype), attn.config.shd_config.act_btnh
    if hasattr(attn, "k_einsum"):  # k_eq_v: the keys are the values
        k = v = attn.k_einsum(x)
    else:
        k, v = attn.kv_einsum(x)
    k, v = shard(k, act), _normalize_v(shard(v, act))
    rope = dict(
        base_frequency=attn.rope_base_frequency,
        scale_factor=attn.rope_scale_factor,
        rope_proportion=attn.rope_proportion,
    )
    return gemma4.apply_rope(attn._key_norm(k), segment_pos, **rope), v


class Gemma4SplashAttention(gemma4.Attention):
    """tunix's Gemma 4 attention whose training path runs splash with segment ids (attn_mask: [B, L] ids)."""

    def block(self, x, segment_pos, cache, attn_mask, kv_shared_cache=None):
        if cache is not None or attn_mask.ndim != 2:
            return super().block(x, segment_pos, cache, attn_mask, kv_shared_cache)
        act, rope = (
            self.config.shd_config.act_btnh,
            dict(
                base_frequency=self.rope_base_frequency,
                scale_factor=self.rope_scale_factor,
                rope_proportion=self.rope_proportion,
            ),
        )
        x = x.astype(self.config.dtype)
        q = gemma4.apply_rope(self._query_norm(shard(self.q_einsum(x), act)), segment_pos, **rope)
        if kv_shared_cache is not None:  # a KV-shared layer (E models): its owner's normed, roped K/V, as tunix's
            k, v = kv_shared_cache["k"], kv_shared_cache["v"]
        else:
            k, v = own_kv(self, x, segment_pos)
        sliding = self.attn_type == gemma4.AttentionType.LOCAL_SLIDING
        with jax.named_scope(SCOPE + ("sliding" if sliding else "global")):
            encoded = splash_attention(
                q,
                k,
                v,
                attn_mask,
                window=self.config.sliding_window_size if sliding else None,
                interpret=self.splash_interpret,
                block=self.splash_block,
                fused=self.splash_fused,
            )
        out = shard(self.attn_vec_einsum(encoded), self.config.shd_config.act_btd)
        return {"v": v, "k": k}, out, (k, v)


class Gemma3SplashAttention(gemma3.Attention):
    """tunix's Gemma 3 attention whose training path runs splash with segment ids (attn_mask: [B, L] ids)."""

    def block(self, x, segment_pos, cache, attn_mask):
        if cache is not None or attn_mask.ndim != 2:
            return super().block(x, segment_pos, cache, attn_mask)
        act = self.shd_config.act_btnh
        if self.use_qkv_einsum:
            q, k, v = self.qkv_einsum(x)
        else:
            q, (k, v) = self.q_einsum(x), self.kv_einsum(x)
        q, k, v = shard(q, act), shard(k, act), shard(v, act)
        rope = dict(
            head_dim=self.head_dim, base_frequency=self.rope_base_frequency, scale_factor=self.rope_scale_factor
        )
        q = gemma3.apply_rope(self._query_norm(q), segment_pos, **rope) * self.query_pre_attn_scalar
        k = gemma3.apply_rope(self._key_norm(k), segment_pos, **rope)
        sliding = self.attn_type == gemma3.AttentionType.LOCAL_SLIDING
        with jax.named_scope(SCOPE + ("sliding" if sliding else "global")):
            encoded = splash_attention(
                q,
                k,
                v,
                attn_mask,
                window=self.sliding_window_size if sliding else None,
                interpret=self.splash_interpret,
                block=self.splash_block,
                fused=self.splash_fused,
            )
        return None, shard(self.attn_vec_einsum(encoded), self.shd_config.act_btd)


SPLASH = {gemma4.Attention: Gemma4SplashAttention, gemma3.Attention: Gemma3SplashAttention}


def uses_splash(model: nnx.Module) -> bool:
    """Whether `model`'s attention modules take segment ids (use_splash was applied)."""
    return any(isinstance(m, tuple(SPLASH.values())) for _, m in model.iter_modules())


def use_splash(model: nnx.Module, *, interpret: bool, block: int = 512, fused: bool = True) -> int:
    """Give every tunix attention module of `model` the splash training path (in place); the number changed.
    `interpret`: run the kernel in Pallas interpret mode (anything but a real TPU); `block`, `fused`: make_kernel's."""
    n = 0
    for _, module in model.iter_modules():
        cls = SPLASH.get(type(module))
        if cls is not None:
            module.__class__ = cls
            module.splash_interpret, module.splash_block, module.splash_fused = interpret, block, fused
            n += 1
    return n


# --- the kernel's work, for the roofline --------------------------------------------------------------------------
@dataclass(frozen=True)
class KernelWork:
    flops: float  # per device and micro-step
    bytes: float
    note: str


def _visited_blocks(kernel: splash.SplashAttentionKernel, head: int = 0) -> int:
    """(q block, kv block) pairs the kernel computes for one head: those its block mask doesn't skip."""
    block_mask = kernel.fwd_mask_info.block_mask
    if block_mask is None:  # every block full
        data = np.asarray(kernel.fwd_mask_info.data_next)
        return int(np.prod(data.shape[-2:]))
    return int(np.count_nonzero(np.asarray(block_mask)[head]))


def kernel_work(recipe, spec, custom_calls: dict[str, int], mesh) -> KernelWork:
    """Flops and HBM bytes per device of the splash calls the compiled program makes (`custom_calls` from the
    HLO, keyed `kernel|scope`), counted from each layer type's mask: per visited block, MATMULS[phase] matmuls of
    2·block²·head_dim flops; bytes: q read and the output written once, k and v read once per visited block."""
    if not custom_calls:
        return KernelWork(0.0, 0.0, "no Pallas kernels: XLA's cost_analysis counts every op")
    tp = mesh.shape["tp"]
    rows, length = recipe.train.per_device_batch_size, recipe.data.max_seq_len  # each device: its rows, N/tp heads
    jax_section = recipe.backend.jax
    b, a = block_size(length, jax_section.splash_block), 2 if recipe.train.precision == "bf16" else 4  # bytes/element
    matmuls = MATMULS | ({"dkv": FUSED_DKV} if jax_section.splash_fused_backward else {})
    flops = moved = 0.0
    counted: list[str] = []
    for key, calls in sorted(custom_calls.items()):
        kernel_name, _, scope = key.partition("|")
        if kernel_name.startswith(moe.RAGGED_DOT) and spec.moe is not None:  # the MoE's experts (train/jax/moe.py)
            if kernel_name != moe.RAGGED_DOT_METADATA:
                f, m = moe.ragged_dot_work(recipe, spec, calls, mesh)
                flops, moved = flops + f, moved + m
                counted.append(f"{calls} × {kernel_name} (experts)")
            continue
        phase = next((p for p in MATMULS if f"_{p}" in kernel_name), None)
        kind = spec.attention.get(scope.removeprefix(SCOPE)) if scope.startswith(SCOPE) else None
        if not kernel_name.startswith("splash_") or phase is None or kind is None:
            raise ValueError(f"Pallas kernel {key!r} in the compiled step: no work count for it (only splash's)")
        heads = kind.num_heads // tp
        visited = _visited_blocks(make_kernel(kind.window, length, 1, True, b, jax_section.splash_fused_backward))
        flops += calls * rows * heads * visited * matmuls[phase] * 2 * b * b * kind.head_dim
        kv_heads = max(1, kind.num_kv_heads // tp)
        moved += calls * rows * a * kind.head_dim * (2 * heads * length + 2 * kv_heads * visited * b)
        counted.append(f"{calls} × {kernel_name} ({kind.name})")
    note = "Pallas kernels' work counted from their block masks and the experts' shapes (not in cost_analysis): "
    note += ", ".join(counted)
    return KernelWork(flops, moved, note)
