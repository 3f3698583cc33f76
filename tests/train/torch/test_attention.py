"""FlexAttention (`train.kernels.attention: flex`) equals the reference attention on packed rows: tiny Gemma 4 and
Gemma 3, fp32, several documents per row, documents longer than the 32-token sliding window; loss and LoRA
gradients. And the BlockMasks skip what they should: cross-document blocks and blocks beyond the window."""

from __future__ import annotations

import pytest
import torch
import transformers

from crosstune.families import get_family
from crosstune.train.torch.attention import (
    FLEX,
    SPARSE_BLOCK,
    attention_implementation,
    flex_kernel_options,
    register_flex_attention,
)
from crosstune.train.torch.equivalence import DOC_LENGTHS, loss_and_lora_grads, packed_row, tiny_peft_model

# Loss: a mean of ~250 fp32 token log-probs of magnitude ~7; the kernels' different summation orders move it by
# ~5e-7 (measured: sdpa vs eager and sdpa vs flex on tiny Gemma 4); merging the documents moves it by 6e-3.
LOSS_ATOL = 1e-5
# LoRA gradients, per tensor, relative to its largest entry. The CPU sdpa kernel accumulates in another order than
# eager: the two references differ by up to 2.6e-4 (Gemma 4: attention scale 1.0 and the softcap make the softmax
# sharp) and 6.7e-5 (Gemma 3). Flex vs eager (the same dense math) measured 2.1e-6. Merging the documents moves
# gradients by > 2x their size. Tolerances: 4x the sdpa floor, 10x the eager one.
GRAD_RTOL_SDPA = 1e-3
GRAD_RTOL_EAGER = 2e-5


@pytest.fixture
def eager_flex_backward(monkeypatch):
    """torch refuses FlexAttention backward on CPU because its *compiled* CPU kernel has none; the eager path
    (`flex_attention` uncompiled: the dense math of torch's own reference implementation, with autograd) has one.
    Lift the guard for these tests: they check the masks, the softcap score_mod and the GQA layout crosstune
    hands to flex_attention, forward and backward; the Triton kernel itself is the GPU check's job."""
    import torch.nn.attention.flex_attention as flex

    monkeypatch.setattr(flex, "_validate_device", lambda *tensors: None)
    register_flex_attention()


@pytest.mark.parametrize("family", ["gemma4", "gemma3"])
def test_flex_equals_reference_on_packed_rows(family, eager_flex_backward):
    model, spec = tiny_peft_model(family)
    assert min(DOC_LENGTHS) > spec.attention["sliding"].window  # the window cuts inside every document
    batch = packed_row(spec.vocab_size)
    ref_loss, ref_grads = loss_and_lora_grads(model, batch, "sdpa")
    flex_loss, flex_grads = loss_and_lora_grads(model, batch, FLEX)
    eager_loss, eager_grads = loss_and_lora_grads(model, batch, "eager")

    assert abs(flex_loss - ref_loss) <= LOSS_ATOL
    assert abs(flex_loss - eager_loss) <= LOSS_ATOL
    assert ref_grads.keys() == flex_grads.keys() == eager_grads.keys() and len(ref_grads) >= 2 * 7
    for name, ref in ref_grads.items():
        assert ref.abs().max() > 0, name
        assert (flex_grads[name] - ref).abs().max() <= GRAD_RTOL_SDPA * ref.abs().max(), name
        eager = eager_grads[name]
        assert (flex_grads[name] - eager).abs().max() <= GRAD_RTOL_EAGER * eager.abs().max(), name

    # Negative control: the same tokens as one document (positions 0..255) give another loss: the masks matter.
    merged = dict(batch, position_ids=torch.arange(sum(DOC_LENGTHS))[None])
    merged_loss, _ = loss_and_lora_grads(model, merged, FLEX)
    assert abs(merged_loss - flex_loss) > 100 * LOSS_ATOL


def test_block_masks_skip_other_documents_and_out_of_window_blocks():
    """A 1024-token row of eight 128-token documents: the full-attention mask keeps only the diagonal blocks (each
    document is one block), the sliding mask (window 32 < block) keeps the same; a single 1024-token document keeps
    the causal triangle (36 of 64 blocks) for full layers and at most 2 blocks per query block for sliding ones."""
    from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask

    register_flex_attention()
    fam = get_family("gemma4")
    spec = fam.spec("tiny")
    hf = fam.hf_config(spec, vocab_size=spec.vocab_size, pad_token_id=0, bos_token_id=2, eos_token_id=[1])
    config = transformers.CONFIG_MAPPING[hf.pop("model_type")](**hf)
    config._attn_implementation = FLEX
    n, doc = 1024, 128
    embeds = torch.zeros(1, n, 8)

    def blocks(positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        kw = dict(config=config, inputs_embeds=embeds, attention_mask=None, past_key_values=None)
        full = create_causal_mask(**kw, position_ids=positions)
        sliding = create_sliding_window_causal_mask(**kw, position_ids=positions)
        assert full.BLOCK_SIZE == (SPARSE_BLOCK, SPARSE_BLOCK)
        return full.to_dense()[0, 0], sliding.to_dense()[0, 0]  # [q blocks, kv blocks], 1 = visited

    packed_full, packed_sliding = blocks(torch.arange(n).remainder(doc)[None])
    assert torch.equal(packed_full, torch.eye(n // doc, dtype=packed_full.dtype))
    assert torch.equal(packed_sliding, packed_full)

    one_full, one_sliding = blocks(torch.arange(n)[None])
    assert torch.equal(one_full, torch.ones(8, 8, dtype=one_full.dtype).tril())
    assert int(one_sliding.sum()) == 8 + 7  # the diagonal block and the one before it
    assert int(one_sliding.sum(-1).max()) == 2


def test_head_dim_512_kernel_options_fit_h200_shared_memory():
    """Forward smem = Q tile + stages × (K + V tiles), bf16; H100/H200 allow 232,448 B per block. torch's default
    (64, 32, 3 stages) is the 263,168 B measured failure; ours must fit."""
    smem_limit, bookkeeping, bf16 = 232_448, 1_024, 2

    def forward_smem(block_m: int, block_n: int, stages: int, d: int = 512) -> int:
        return block_m * d * bf16 + stages * 2 * block_n * d * bf16 + bookkeeping

    assert forward_smem(64, 32, 3) == 263_168  # the failure seen on the H200 with torch's defaults
    opts = flex_kernel_options(512)
    assert forward_smem(opts["fwd_BLOCK_M"], opts["fwd_BLOCK_N"], opts["fwd_num_stages"]) <= smem_limit
    assert SPARSE_BLOCK % opts["fwd_BLOCK_M"] == 0 and SPARSE_BLOCK % opts["fwd_BLOCK_N"] == 0
    bwd = 4 * opts["bwd_BLOCK_N1"] * 512 * bf16 * opts["bwd_num_stages"]
    assert bwd <= smem_limit
    assert flex_kernel_options(256) is None  # torch's defaults fit (cuDNN-sized heads)


def test_flex_is_refused_for_cpu_training():
    assert attention_implementation("sdpa", on_gpu=False) == "sdpa"
    with pytest.raises(ValueError, match="train.kernels.attention: flex .* CUDA"):
        attention_implementation("flex", on_gpu=False)
