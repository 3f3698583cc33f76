"""How the Qwix LoRA computes inside the jax step: Qwix's LoraProvider with two sharp edges fixed in one place.

- **The LoRA matmuls run in the activations' dtype.** crosstune keeps the LoRA weights in fp32 (the optimizer's master
  copy, as PEFT does), and Qwix multiplies them as they are: a bf16 activation times an fp32 A promotes the whole
  LoRA branch to fp32 — an fp32 copy of every adapted layer's input, multi-pass fp32 matmuls on a TPU, and an fp32
  output added to the bf16 projection. PEFT under bf16 autocast (the torch backend) runs the LoRA matmuls in bf16
  from the same fp32 weights. Here A and B are cast to the input's dtype before the matmuls (a no-op in fp32 runs),
  so the jax step computes what the torch step computes; the weights, their gradients and AdamW stay fp32.
- **The dropout mask comes from XLA's RngBitGenerator** (`jax.random` with an "rbg" key), not from threefry, which
  Qwix's nnx.Dropout draws with: threefry hashes 20 rounds per 32 random bits on the vector unit, and the LoRA
  dropout of a 31B decoder layer needs ~0.23 G random numbers per 4096-token row (every adapted input: q/k/v and
  gate/up read the layer's hidden states, o the attention output, down the MLP's [tokens, 21504]). The key is still
  drawn from the module's `qwix_rngs` stream (its count advances and is checkpointed as before), so a run is as
  reproducible as it was; the masks themselves are other draws than threefry's. On a TPU mesh the step is compiled
  with `SHARDED_RNG`: XLA's SPMD partitioner otherwise replicates an RngBitGenerator, so every chip drew the global
  mask of every adapted input and kept it for the backward (the E4B on v6e-4, fsdp 2 × tp 2: 27.3 GB per chip at
  full depth against 19.4 with the option; docs/BENCHMARKS.md). With it each chip draws its own shard's bits, as
  MaxText runs its rbg keys; the masks then depend on the mesh as well as the seed (the same recipe on the same mesh
  draws the same).

Only the LoRA branch is ours: the frozen projection (`res`) is Qwix's PtqProvider's, and the LoRA params are found
or created by Qwix's own helpers (qwix 0.1.8's `_get_or_create_lora_params`, `_parse_einsum_str_for_lora`,
`_create_lora_layer_shapes`, `_compute_lora_delta`; tests/train/jax/test_lora_provider.py checks this provider
against Qwix's own on the same params).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import qwix
from qwix._src.providers import lora as qwix_lora
from qwix._src.providers import ptq
from qwix._src.utils import flax_util

# the words of an "rbg" key: XLA's RngBitGenerator state (jax.random's rbg implementation)
RBG_WORDS = 4
DRAW_VALUES = 2**16  # a dropout draw's values: 16 bits per element
# XLA:TPU's compile option that lets the SPMD partitioner shard an RngBitGenerator (module docstring)
SHARDED_RNG = {"xla_tpu_spmd_rng_bit_generator_unsafe": True}


def dropout(x: jax.Array, rate: float, key: jax.Array) -> jax.Array:
    """`x` with each element zeroed with probability ~`rate` and the rest scaled by 1 / keep, as nnx.Dropout, the
    mask drawn by XLA's RngBitGenerator from a key derived from `key` (any jax PRNG key): 16 bits per element, kept
    where they fall under round((1 - rate) · 2^16); keep is that threshold's probability (within 2^-17 of 1 - rate),
    so the expectation is x's. The mask goes through an optimization barrier: XLA then keeps the 1-byte mask for the
    backward, not the draws (4 bytes per element with 32-bit draws on a pod: u32[T, F/tp] per layer at the MLP's
    width; 2 bytes with 16-bit draws without the barrier). On the v5e chip: 4.5 ms and 0.15 GB less at the 31B's
    first 4 layers, 1.66 GB less at the 12B's 6 (remat: XLA had kept its draws through it; docs/BENCHMARKS.md)."""
    words = jax.random.key_data(key).reshape(-1).astype(jnp.uint32)
    words = jnp.resize(words, (RBG_WORDS,)) ^ jnp.arange(RBG_WORDS, dtype=jnp.uint32)  # a threefry key has 2
    threshold = min(round((1.0 - rate) * DRAW_VALUES), DRAW_VALUES - 1)
    bits = jax.random.bits(jax.random.wrap_key_data(words, impl="rbg"), x.shape, jnp.uint16)
    mask = jax.lax.optimization_barrier(bits < jnp.uint16(threshold))
    return jax.lax.select(mask, x / jnp.asarray(threshold / DRAW_VALUES, x.dtype), jnp.zeros_like(x))


def _params(name: str, rule: qwix.LoraRule, a_shape, b_shape, a_transpose, b_transpose) -> tuple:
    """The module's LoRA A and B for weight `name`, found or created by Qwix (its own shapes and shardings)."""
    return qwix_lora._get_or_create_lora_params(
        name=name,
        rule=rule,
        a_shape=a_shape,
        b_shape=b_shape,
        a_sharding_transpose=a_transpose,
        b_sharding_transpose=b_transpose,
    )


class LoraProvider(qwix.LoraProvider):
    """qwix.LoraProvider whose LoRA branch runs in the input's dtype with RngBitGenerator dropout (module docstring)."""

    def _branch_input(self, rule: qwix.LoraRule, lhs: jax.Array) -> jax.Array:
        return dropout(lhs, rule.dropout, flax_util.make_rng("dropout")) if rule.dropout > 0 else lhs

    def einsum(self, einsum_str: str, *operands, **kwargs) -> jax.Array:
        res = ptq.PtqProvider.einsum(self, einsum_str, *operands, **kwargs)
        rule, _ = self._get_current_rule_and_op_id("einsum", repeated_call=True)
        if not isinstance(rule, qwix.LoraRule):
            return res
        if len(operands) != 2:
            raise ValueError(f"LoRA on an einsum of {len(operands)} operands ({einsum_str}): Qwix supports two")
        lhs, rhs = operands
        weight_name = flax_util.find_param(rhs, ptq.WithAux)
        if weight_name is None:  # rhs is not a weight
            return res
        a_shape, b_shape, lora_str, a_transpose, b_transpose = qwix_lora._parse_einsum_str_for_lora(
            lhs.shape, rhs.shape, einsum_str, rule.rank
        )
        setattr(flax_util.get_current_module(), weight_name + "_lora_einsum_str", lora_str)  # as Qwix records it
        lora_a, lora_b = _params(weight_name, rule, a_shape, b_shape, a_transpose, b_transpose)
        x = self._branch_input(rule, lhs)
        delta = jnp.einsum(lora_str, x, lora_a.astype(x.dtype), lora_b.astype(x.dtype), **kwargs)
        return res + delta * jnp.asarray(rule.alpha / rule.rank, delta.dtype)

    def dot_general(
        self, lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, out_sharding=None
    ) -> jax.Array:
        res = ptq.PtqProvider.dot_general(
            self, lhs, rhs, dimension_numbers, precision, preferred_element_type, out_sharding=out_sharding
        )
        rule, _ = self._get_current_rule_and_op_id("dot_general", repeated_call=True)
        if not isinstance(rule, qwix.LoraRule):
            return res
        weight_name = flax_util.find_param(rhs, ptq.WithAux)
        if weight_name is None:  # rhs is not a weight
            return res
        (lhs_ca, rhs_ca), (lhs_ba, rhs_ba) = dimension_numbers
        rhs_ra = tuple(i for i in range(rhs.ndim) if i not in rhs_ca and i not in rhs_ba)
        contract = tuple(rhs.shape[i] for i in rhs_ca)
        batch = tuple(rhs.shape[i] for i in rhs_ba)
        remain = tuple(rhs.shape[i] for i in rhs_ra)
        a_shape, a_transpose, b_shape, b_transpose = qwix_lora._create_lora_layer_shapes(
            rhs_ca, rhs_ba, rhs_ra, contract, batch, remain, rule.rank
        )
        lora_a, lora_b = _params(weight_name, rule, a_shape, b_shape, a_transpose, b_transpose)
        x = self._branch_input(rule, lhs)
        delta = qwix_lora._compute_lora_delta(
            x,
            lora_a.astype(x.dtype),
            lora_b.astype(x.dtype),
            lhs_ca,
            lhs_ba,
            contract,
            batch,
            remain,
            rule.rank,
            precision=precision,
        )
        return res + delta * jnp.asarray(rule.alpha / rule.rank, delta.dtype)
