"""Gemma 4's mixture of experts routed as transformers routes it, on tunix 0.1.7's own MoE weights and kernels.

Tunix 0.1.7's decoder layer feeds its router the expert input (`moe_pre_ffw_norm` of the residual), transformers'
`Gemma4TextRouter` the residual itself (its own unscaled RMS norm, then `router.scale`); with a trained
`pre_feedforward_layernorm_2` the two pick different experts (tests/train/jax/test_hf_parity.py shows the logits
apart by the size of the logits). Newer tunix passes the residual (`self.moe(x, router_input=attn)`, google/tunix
c7d8950); no release the lock can take has it. Tunix also takes the top k with `jax.lax.approx_max_k`, which is
exact on CPU but approximate (recall 0.95) on a TPU; transformers' `torch.topk` is exact. So every MoE layer of a
built model gets the subclasses below: the layer's `block` is tunix 0.1.7's with the residual as router input, the
router is tunix's with an exact `jax.lax.top_k`. Weights, the renormalised top-k softmax, `per_expert_scale` and the
ragged-dot experts are tunix's own, unchanged. Neither stack adds an auxiliary load-balancing loss to the LoRA
objective (docs/BACKEND_EQUIVALENCE.md).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx
from tunix.models.gemma4 import model as gemma4
from tunix.models.gemma4 import moe as tunix_moe


class ResidualRoutedMoE(tunix_moe.MoERagged):
    """tunix's MoERagged with transformers' router input and exact top-k."""

    def _router(self, router_logits: jax.Array):
        router_logits = router_logits.astype(jnp.float32)
        router_probs = jax.nn.softmax(router_logits, axis=-1)
        _, choices = jax.lax.top_k(router_logits, k=self.num_experts_per_datapoint)
        weights = router_probs / tunix_moe._renormalization_factor(router_probs, choices)
        return weights, choices

    def __call__(self, x, router_input=None):
        r = x if router_input is None else router_input
        var = jnp.mean(jnp.square(r.astype(jnp.float32)), axis=-1, keepdims=True)
        r = r * jax.lax.rsqrt(var + 1e-06).astype(r.dtype)
        r = r * jax.lax.rsqrt(jnp.array(self.features, dtype=r.dtype)) * self.router_scale.value.astype(r.dtype)
        logits = jnp.einsum("gsd,de->gse", r, self.router_logits.value.astype(r.dtype))
        weights, choices = self._router(logits)
        return self._run_ffw_and_routing(x, choices, weights)


class ResidualRoutedLayer(gemma4.DecoderLayer):
    """tunix 0.1.7's DecoderLayer.block, the router reading the residual (`attn`, before `moe_pre_ffw_norm`)."""

    def block(self, x, segment_pos, cache, attn_mask, per_layer_input=None, kv_shared_cache=None):
        norm = self.pre_attention_norm(x)
        cache, attn, kv = self.attn(norm, segment_pos, cache, attn_mask, kv_shared_cache=kv_shared_cache)
        attn = self.post_attention_norm(attn)
        attn += x
        ffw = self.dense_post_ffw_norm(self.mlp(self.pre_ffw_norm(attn)))
        ffw += self.moe_post_ffw_norm(self.moe(self.moe_pre_ffw_norm(attn), router_input=attn))
        ffw = self.post_ffw_norm(ffw)
        ffw += attn
        if self.config.per_layer_input_dim > 0 and per_layer_input is not None:
            mapped = jax.nn.gelu(self.per_layer_input_gate(ffw)) * per_layer_input
            ffw += self.post_per_layer_input_norm(self.per_layer_projection(mapped))
        return cache, ffw * self.skip_scale.value, kv


def _not_a_layout_change(prim, *_, **__) -> bool:
    """A remat policy: every value saved for the backward but the outputs of transposes, reshapes and dtype casts,
    which the backward recomputes from their inputs."""
    return prim not in (jax.lax.transpose_p, jax.lax.reshape_p, jax.lax.convert_element_type_p)


class ScannedMoE(ResidualRoutedMoE):
    """ResidualRoutedMoE in a scan over layers (crosstune.train.jax.layer_scan): the experts' weights that tunix
    transposes for `ragged_dot` ([E, 2, X, D] to [E, D, 2X]) are transposed again in the backward, as XLA does in the
    unrolled step, not saved. The scan saves every residual of its body: that copy of each layer's experts (1 GB a
    layer for the 26B-A4B), written into a stacked buffer and read back: 12 of the 30 ms its 2 layers took more
    scanned than unrolled on the v5e chip (docs/BENCHMARKS.md)."""

    def __call__(self, x, router_input=None):
        call = nnx.remat(  # in a scan's body: no barrier against CSE needed (jax.checkpoint's prevent_cse)
            ResidualRoutedMoE.__call__, policy=_not_a_layout_change, prevent_cse=False, graph_updates=False
        )
        return call(self, x, router_input)


def recompute_transposed_experts(model: nnx.Module) -> int:
    """Every MoE of `model` (routed as route_on_residual made it) as a ScannedMoE, in place; the number changed."""
    n = 0
    for _, module in model.iter_modules():
        if type(module) is ResidualRoutedMoE:
            module.__class__ = ScannedMoE
            n += 1
    return n


def route_on_residual(model: nnx.Module) -> int:
    """Give every MoE decoder layer of a tunix Gemma 4 `model` transformers' routing (in place); the number
    changed."""
    n = 0
    for _, module in model.iter_modules():
        if type(module) is gemma4.DecoderLayer and getattr(module.config, "enable_moe", False):
            module.__class__ = ResidualRoutedLayer
            module.moe.__class__ = ResidualRoutedMoE
            n += 1
    return n


# --- the experts' work, for the roofline -------------------------------------------------------------------------
RAGGED_DOT = "ragged-dot"  # XLA:TPU lowers jax.lax.ragged_dot to Pallas kernels named ragged-dot-<...>
RAGGED_DOT_METADATA = "ragged-dot-metadata"  # the group offsets: no matmul


def ragged_dot_work(recipe, spec, calls: int, mesh) -> tuple[float, float]:
    """Flops and HBM bytes per device of `calls` ragged-dot kernels (which XLA's cost_analysis does not count): the
    experts' matmuls. Every call is one of the fused gate/up [D -> 2X] or down [X -> D] matmuls over this device's
    share of the micro-step's tokens times top_k, forward or back to its input (the experts are frozen: no weight
    gradient), so on average T·k·3·D·X flops; it reads half the experts' weights this device holds on average."""
    m, d = spec.moe, spec.hidden_size
    devices = len(mesh.devices.flat)
    rows = recipe.train.per_device_batch_size * mesh.shape["fsdp"]
    routed = rows * recipe.data.max_seq_len * m.top_k / devices  # token copies per device, the work split evenly
    a = 2 if recipe.train.precision == "bf16" else 4
    flops = calls * routed * 3 * d * m.expert_dim
    moved = calls * a * (m.num_experts * 1.5 * d * m.expert_dim / devices + routed * (d + 1.5 * m.expert_dim))
    return flops, moved
