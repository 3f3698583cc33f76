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

import contextvars
import functools

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


# --- a scan's MoE layers: the experts' stack whole, each layer's group sizes padded to its own experts --------------
GROUP: contextvars.ContextVar = contextvars.ContextVar("crosstune_scan_group")  # the scan body's group index (traced)


class WholeExperts(nnx.Param):
    """A scanned MoE's experts, every group's, in one of the layouts ragged_dot reads ([E·G, K, N], E-major): a
    loop-invariant operand of the scan (crosstune.train.jax.layer_scan._scanned never slices it). A Param (not a
    LoRAParam): part of the frozen base the train step holds once (crosstune.train.jax.train_step.FROZEN)."""


def _dot(x, whole, g, sizes, sliced: bool):
    """`x`'s rows (sorted by expert, `sizes` [E] of them each) through group g's experts in `whole` [E·G, K, N]."""
    e = sizes.shape[0]
    if sliced:  # [E·G] E-major as [E, G]: a split of the sharded dim each device makes in place, then g's column
        w = jax.lax.dynamic_index_in_dim(whole.reshape(e, -1, *whole.shape[1:]), g, axis=1, keepdims=False)
        return jax.lax.ragged_dot(x, w, sizes)
    return jax.lax.ragged_dot(x, whole, group_sizes(sizes, g, whole.shape[0] // e))


@functools.partial(jax.custom_vjp, nondiff_argnums=(5,))
def _experts(x, forward, backward, g, sizes, sliced):
    return _dot(x, forward, g, sizes, sliced)


def _experts_fwd(x, forward, backward, g, sizes, sliced):
    return _dot(x, forward, g, sizes, sliced), (backward, g, sizes)


def _experts_bwd(sliced, saved, dy):  # to the input only, through the layout kept for it: the experts are frozen
    backward, g, sizes = saved
    return _dot(dy, backward, g, sizes, sliced), None, None, None, None


_experts.defvjp(_experts_fwd, _experts_bwd)


def _group(groups: int):
    """The group the scan's body runs (GROUP); a function so a test can offset it."""
    return GROUP.get()


class WholeMoE(ResidualRoutedMoE):
    """ResidualRoutedMoE in a scan over layer groups, reading its experts from the whole stack of every group's
    (`WholeExperts`: forward layouts gate [E·G, D, 2X] and down [E·G, X, D], backward ones [E·G, 2X, D] and
    [E·G, D, X]; index e·G + g) with group sizes zero but at group g's own experts (g: `GROUP`, the scan's xs).

    Why: sliced per iteration, a layer's experts are copied out of the stack in both of the scan's loops (XLA feeds
    ragged_dot no dynamic-slice in place): 64.5 ms against 33.4 unrolled for the 26B-A4B's 2 layers on the v5e chip,
    33.3 whole (bench/tpu_moe_layouts.py). The backward reads the layout kept for it, a custom VJP, so it transposes
    nothing either. E-major (not G-major) so the stack's leading dim shards over `fsdp` as one layer's experts do
    (each device: the same experts of every layer); the rows stay sorted, as they are sorted by expert.

    Where the experts are split across devices along E (fsdp > 1), XLA gathers ragged_dot's experts whole before
    the dot, as unrolled it gathers each layer's: padded, that is every group's experts at each layer (G times the
    collective bytes; the 26B-A4B's 12 layers on a v5p-8: 1.02 GB gathers of [E·G, D/tp, 2X] in each loop). So
    there (`sliced_experts`) the layer takes its own experts first, g's column of the E-major stack viewed as
    [E, G, ...] (each device slices its own shard, then XLA gathers one layer's, as unrolled); still both layouts,
    so nothing is transposed. The price either way: the experts are held twice (both layouts; the 26B-A4B's 12
    layers on a v5p-8: 10.10 GB of arguments per device against 5.54).

    Only the weight access and the two ragged dots are ours: the routing, the dispatch and collection
    (tunix_moe._expert_dispatch, _expert_collect), per_expert_scale and the combine weights are tunix's own, as in
    its _run_ffw_and_routing, so the layer computes what unrolled tunix does."""

    def _run_ffw_and_routing(self, x, expert_choices, expert_weights):
        sizes, sorted_xs, reverse, combine = tunix_moe._expert_dispatch(x, expert_choices, expert_weights)
        g, sliced = _group(self.stacked_groups), self.sliced_experts
        h = _experts(sorted_xs, self.gate_forward.get_value(), self.gate_backward.get_value(), g, sizes, sliced)
        h = h.reshape(h.shape[0], 2, self.hidden_dim)
        act = nnx.gelu(h[:, 0, :]) * h[:, 1, :]
        out = _experts(act, self.down_forward.get_value(), self.down_backward.get_value(), g, sizes, sliced)
        experts = jnp.repeat(jnp.arange(self.num_experts), sizes, total_repeat_length=out.shape[0])
        out = out * self.per_expert_scale.value.astype(out.dtype)[experts, None]
        out = tunix_moe._expert_collect(out, xs_reverse_argsort=reverse, xs_combine_weights=combine)
        return jnp.einsum("blkd,blk->bld", out, combine, preferred_element_type=out.dtype)


def group_sizes(sizes, g, groups: int):
    """One layer's [E] group sizes in the stack's E-major order ([E·G], e·G + g), zero at every other group's."""
    return jnp.zeros((sizes.shape[0], groups), sizes.dtype).at[:, g].set(sizes).reshape(-1)


def _layouts(gate, down, dtype):
    """[G, E, 2, X, D] and [G, E, X, D] stacked -> gate forward, gate backward, down forward, down backward."""
    g, e, _, x_dim, d = gate.shape
    gate = jnp.swapaxes(gate, 0, 1).reshape(e * g, 2, x_dim, d).astype(dtype)  # E-major: e·G + g
    down = jnp.swapaxes(down, 0, 1).reshape(e * g, x_dim, d).astype(dtype)
    gate_forward = jnp.transpose(gate, (0, 3, 1, 2)).reshape(e * g, d, 2 * x_dim)
    return gate_forward, gate.reshape(e * g, 2 * x_dim, d), down, jnp.swapaxes(down, 1, 2)


def hold_whole(moe: ResidualRoutedMoE, groups: int, mesh) -> None:
    """A stacked MoE (its Variables [G, ...] by crosstune.train.jax.layer_scan._stack) as a WholeMoE, in place: its
    experts in the four layouts (compute dtype), each sharded as the layer's experts are along E (its gate
    [E, 2, X, D] spec (e, _, x, d) -> forward (e, d, x), backward (e, x, d); down (e, x, d) -> (e, x, d), (e, d, x)),
    the stacked originals dropped."""
    from jax.sharding import NamedSharding, PartitionSpec

    gate_var, down_var = moe.gating_einsum, moe.linear
    ge, _, gx, gd = (tuple(gate_var.get_metadata().get("out_sharding") or ()) + (None,) * 5)[1:5]
    de, dx, dd = (tuple(down_var.get_metadata().get("out_sharding") or ()) + (None,) * 4)[1:4]
    specs = ((ge, gd, gx), (ge, gx, gd), (de, dx, dd), (de, dd, dx))
    shardings = tuple(NamedSharding(mesh, PartitionSpec(*s)) for s in specs)
    gate, down = gate_var.get_value(), down_var.get_value()
    dtype = moe.config.dtype
    if isinstance(gate, jax.ShapeDtypeStruct):
        shapes = jax.eval_shape(lambda a, b: _layouts(a, b, dtype), gate, down)
        values = [jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=h) for s, h in zip(shapes, shardings, strict=True)]
    else:
        values = jax.jit(lambda a, b: _layouts(a, b, dtype), out_shardings=shardings)(gate, down)
        gate.delete()
        down.delete()
    del moe.gating_einsum, moe.linear
    names = ("gate_forward", "gate_backward", "down_forward", "down_backward")
    for name, value, spec in zip(names, values, specs, strict=True):
        setattr(moe, name, WholeExperts(value, out_sharding=spec))
    moe.stacked_groups = groups
    axes = ge if isinstance(ge, tuple) else (ge,)
    moe.sliced_experts = any(a is not None and mesh.shape[a] > 1 for a in axes)  # WholeMoE: gathered if split
    moe.__class__ = WholeMoE


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
