"""The torch backend's `train.kernels` switches against their reference paths, on one packed row: a tiny random
Gemma with LoRA on all seven targets, loss and every LoRA gradient. The equivalence tests (tests/train/torch) and
bench/kernels_equivalence.py (the figures in docs/BENCHMARKS.md) measure with these same functions."""

from __future__ import annotations

from collections import Counter

import torch
import transformers
from torch.utils._python_dispatch import TorchDispatchMode

from crosstune.families import get_family
from crosstune.train.torch.attention import FLEX, register_flex_attention
from crosstune.train.torch.layers import compile_decoder_layers, lora_input_casting

DOC_LENGTHS = [70, 90, 45, 51]  # 4 documents in one 256-token row; each longer than the tiny window (32)


def tiny_peft_model(family: str):
    """A tiny random `family` causal LM (no tokenizer needed) with LoRA on all seven targets, B non-zero so every
    LoRA matrix gets a gradient; frozen base, fp32, no KV cache."""
    from peft import LoraConfig, get_peft_model

    fam = get_family(family)
    spec = fam.spec("tiny")
    hf = fam.hf_config(spec, vocab_size=spec.vocab_size, pad_token_id=0, bos_token_id=2, eos_token_id=[1])
    hf["dtype"] = "float32"
    config = transformers.CONFIG_MAPPING[hf.pop("model_type")](**hf)
    torch.manual_seed(0)
    model = getattr(transformers, fam.hf_causal_lm_class)(config).float()
    model.config.use_cache = False
    lora = LoraConfig(
        r=4,
        lora_alpha=8,
        target_modules=fam.peft_target_regex(["q", "k", "v", "o", "gate", "up", "down"]),
        init_lora_weights=False,
    )
    return get_peft_model(model, lora), spec


def packed_row(vocab: int) -> dict[str, torch.Tensor]:
    """One padding-free row: position ids restart per document, the first label of each document is masked."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, vocab, (1, sum(DOC_LENGTHS)), generator=g)
    positions = torch.cat([torch.arange(n) for n in DOC_LENGTHS])[None]
    labels = ids.clone()
    labels[positions == 0] = -100
    return {"input_ids": ids, "position_ids": positions, "labels": labels}


def loss_and_lora_grads(model, batch: dict, impl: str) -> tuple[float, dict[str, torch.Tensor]]:
    model.base_model.model.set_attn_implementation(impl)
    model.zero_grad(set_to_none=True)
    loss = model(**batch, use_cache=False).loss
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    return loss.item(), grads


class OpCounter(TorchDispatchMode):
    """Counts the aten ops that actually execute (an op that selective checkpointing answers from its saved outputs
    never reaches this mode, which sits outside the checkpoint's own)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func)] += 1
        return func(*args, **(kwargs or {}))


def bf16_base_fp32_lora(family: str):
    """What TRL trains on a GPU with precision bf16: the base in bf16, PEFT's LoRA weights upcast to fp32."""
    model, spec = tiny_peft_model(family)
    model.base_model.model.to(torch.bfloat16)
    for name, p in model.named_parameters():
        if "lora_" in name:
            p.data = p.data.float()
    return model, spec


def run_with_casting(model, batch, *, lora_input_cast: bool, autocast: bool) -> tuple[float, dict, list]:
    """Loss, LoRA gradients and the (from, to) dtypes of every input cast PEFT's LoRA layers performed."""
    from types import SimpleNamespace

    from peft.tuners.lora.layer import Linear

    casts: list = []
    original = Linear._cast_input_dtype

    def spy(self, x, dtype):
        if x is not None and x.dtype != dtype and self.cast_input_dtype_enabled:
            casts.append((x.dtype, dtype))
        return original(self, x, dtype)

    Linear._cast_input_dtype = spy
    try:
        model.zero_grad(set_to_none=True)
        with lora_input_casting(model, SimpleNamespace(lora_input_cast=lora_input_cast)):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                loss = model(**batch, use_cache=False).loss
            loss.backward()
    finally:
        Linear._cast_input_dtype = original
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    return loss.item(), grads, casts


def loss_grads_and_ops(family: str, recompute: str) -> tuple[float, dict, Counter]:
    from trl.models import enable_selective_activation_checkpointing

    model, spec = tiny_peft_model(family)
    base = model.base_model.model
    if recompute == "selective":  # what SFTTrainer does for gradient_checkpointing_kwargs {"selective": True}
        enable_selective_activation_checkpointing(base)
    if recompute != "none":
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    counter = OpCounter()
    with counter:
        loss, grads = loss_and_lora_grads(model, packed_row(spec.vocab_size), "sdpa")
    return loss, grads, counter.ops


def compare(ref: tuple, other: tuple) -> tuple[float, float, float]:
    """(|Δloss|, max |Δgrad|, max over tensors of max |Δgrad| / max |grad|) of two (loss, LoRA grads) results."""
    (ref_loss, ref_grads), (loss, grads) = ref, other
    abs_diff = max((grads[n] - g).abs().max().item() for n, g in ref_grads.items())
    rel_diff = max(((grads[n] - g).abs().max() / g.abs().max()).item() for n, g in ref_grads.items())
    return abs(loss - ref_loss), abs_diff, rel_diff


def kernel_equivalence(
    family: str,
) -> tuple[list[tuple[str, float, float, float]], list[tuple[str, float, float, float]]]:
    """Rows of (what is compared, |Δloss|, max |Δgrad|, max relative Δgrad) on the tiny `family` and the packed row:
    first the attention (the FlexAttention path, eager, against sdpa and eager attention; sdpa against eager; a
    control, the row as one document: the size of a masking mistake), then the `train.kernels` switches against
    their reference paths (lora_input_cast, recompute full and selective, compiled decoder layers).
    docs/BENCHMARKS.md's table."""
    import torch.nn.attention.flex_attention as flex

    register_flex_attention()
    model, spec = tiny_peft_model(family)
    batch = packed_row(spec.vocab_size)
    validate = flex._validate_device
    flex._validate_device = lambda *tensors: None  # torch has no CPU FlexAttention backward: its eager reference math
    try:
        runs = {impl: loss_and_lora_grads(model, batch, impl) for impl in ("sdpa", "eager", FLEX)}
    finally:
        flex._validate_device = validate
    runs["one document"] = loss_and_lora_grads(
        model, dict(batch, position_ids=torch.arange(sum(DOC_LENGTHS))[None]), "sdpa"
    )
    attention = []
    for a, b in (("sdpa", FLEX), ("eager", FLEX), ("sdpa", "eager"), ("sdpa", "one document")):
        label = f"{b} vs {a}" if b != "one document" else "control: same row as one document (sdpa)"
        attention.append((label, *compare(runs[a], runs[b])))
    model, spec = bf16_base_fp32_lora(family)
    cast, no_cast = (run_with_casting(model, batch, lora_input_cast=c, autocast=True)[:2] for c in (True, False))
    pairs = {"lora_input_cast false vs true (bf16 autocast)": (cast, no_cast)}
    none = loss_grads_and_ops(family, "none")[:2]
    for mode in ("full", "selective"):
        pairs[f"recompute {mode} vs none (fp32)"] = (none, loss_grads_and_ops(family, mode)[:2])
    model, spec = tiny_peft_model(family)
    model.base_model.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    eager_layers = loss_and_lora_grads(model, batch, "sdpa")
    compile_decoder_layers(model, get_family(family).decoder_layer_class)
    pairs["compiled vs eager decoder layers (fp32)"] = (eager_layers, loss_and_lora_grads(model, batch, "sdpa"))
    return attention, [(label, *compare(ref, other)) for label, (ref, other) in pairs.items()]
