"""The decoder-layer fast paths of `train.kernels` (crosstune.train.torch.layers) equal the reference path on CPU:
LoRA input casts off (bf16 autocast and fp32), torch.compile per decoder layer, and selective activation recompute;
loss and every LoRA gradient on tiny Gemma 4 and Gemma 3, one packed row of four documents, each longer than the
32-token sliding window. Plus the recipe rules, the trainer wiring and the hfu FLOP count."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from crosstune.families import get_family
from crosstune.train.torch.equivalence import (
    DOC_LENGTHS,
    bf16_base_fp32_lora,
    loss_and_lora_grads,
    loss_grads_and_ops,
    packed_row,
    run_with_casting,
    tiny_peft_model,
)
from crosstune.train.torch.layers import (
    compile_decoder_layers,
    gradient_checkpointing_kwargs,
)


def max_relative_gap(got: dict, want: dict) -> float:
    """max over LoRA tensors of max |Δgrad| / max |grad|."""
    assert got.keys() == want.keys() and len(want) >= 2 * 7
    return max(((got[n] - g).abs().max() / g.abs().max()).item() for n, g in want.items())


# --- lora_input_cast ------------------------------------------------------------------------------------------
def test_lora_input_cast_off_is_the_same_bf16_arithmetic():
    """bf16 autocast, tiny Gemma 4. The default casts each bf16 LoRA input to fp32, then autocast's F.linear casts it
    back to bf16 (and the fp32 LoRA weight to bf16) before the matmul. bf16 → fp32 → bf16 is exact, so without the
    input cast the matmuls see the same bf16 operands, and the gradients flow back through the same bf16 products
    (the cast's backward is the same exact round trip): the derived tolerance is zero, same process, same kernels."""
    model, spec = bf16_base_fp32_lora("gemma4")
    batch = packed_row(spec.vocab_size)
    lora_modules = sum(1 for m in model.modules() if hasattr(m, "lora_A"))
    ref_loss, ref_grads, ref_casts = run_with_casting(model, batch, lora_input_cast=True, autocast=True)
    loss, grads, casts = run_with_casting(model, batch, lora_input_cast=False, autocast=True)

    assert ref_casts == [(torch.bfloat16, torch.float32)] * lora_modules  # one up-cast per LoRA module: today
    assert casts == []  # the fast path: none
    assert loss == ref_loss and ref_loss > 1.0
    assert ref_grads.keys() == grads.keys() and len(grads) == 2 * lora_modules
    for name, g in ref_grads.items():
        assert g.abs().max() > 0 and torch.equal(grads[name], g), name
    # the fp32 master: the LoRA parameters themselves stay fp32 and autocast hands their gradients back in fp32
    lora_params = [p for n, p in model.named_parameters() if "lora_" in n]
    assert {p.dtype for p in lora_params} == {torch.float32} == {p.grad.dtype for p in lora_params}
    # negative control: without autocast the fp32 LoRA weight meets a bf16 input: the cast is what made it work
    with pytest.raises(RuntimeError, match="dtype"):
        run_with_casting(model, batch, lora_input_cast=False, autocast=False)


def test_lora_input_cast_is_a_no_op_in_fp32():
    """fp32 (CPU training): the input already has the weights' dtype, so neither path casts: identical paths."""
    model, spec = tiny_peft_model("gemma4")
    batch = packed_row(spec.vocab_size)
    ref_loss, ref_grads, ref_casts = run_with_casting(model, batch, lora_input_cast=True, autocast=False)
    loss, grads, casts = run_with_casting(model, batch, lora_input_cast=False, autocast=False)
    assert ref_casts == casts == []
    assert loss == ref_loss and all(torch.equal(grads[n], g) for n, g in ref_grads.items())


# --- compile --------------------------------------------------------------------------------------------------
# Inductor's CPU code fuses the norms, GeGLU, rope and softcap into C++ loops with vectorised exp/tanh and its own
# reduction order: fp32 rounding differences of the size the reference attentions already show between themselves
# (sdpa vs eager: 2.6e-4 of the largest gradient on Gemma 4, whose attention scale 1.0 and softcap sharpen the
# softmax; 6.7e-5 on Gemma 3). Measured compiled vs the same layers uncompiled: 4.3e-4 (Gemma 4), 1.0e-5 (Gemma 3);
# loss 4.8e-7 (bench/kernels_equivalence.py).
COMPILE_GRAD_RTOL = 2e-3
COMPILE_LOSS_ATOL = 1e-5


@pytest.mark.slow  # inductor compiles ~10 graphs per model: 20-50 s on 2 cores with a cold cache
@pytest.mark.parametrize("family", ["gemma4", "gemma3"])
def test_compiled_decoder_layers_equal_eager(family):
    from torch._dynamo.utils import counters

    model, spec = tiny_peft_model(family)
    assert min(DOC_LENGTHS) > spec.attention["sliding"].window  # the window cuts inside every document
    model.base_model.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()  # as training runs it: recompute on, the checkpoint wraps each compiled layer
    batch = packed_row(spec.vocab_size)
    ref_loss, ref_grads = loss_and_lora_grads(model, batch, "sdpa")

    torch._dynamo.reset()
    counters.clear()
    layer_class = get_family(family).decoder_layer_class
    assert compile_decoder_layers(model, layer_class) == spec.num_layers
    loss, grads = loss_and_lora_grads(model, batch, "sdpa")
    assert counters["frames"]["ok"] >= 1 and counters["stats"]["unique_graphs"] >= 1  # the compiled code ran
    assert all(m._compiled_call_impl is not None for m in model.modules() if type(m).__name__ == layer_class)
    assert abs(loss - ref_loss) <= COMPILE_LOSS_ATOL
    assert max_relative_gap(grads, ref_grads) <= COMPILE_GRAD_RTOL

    # negative control: the same tokens as one document through the compiled layers: the masks still matter
    merged = dict(batch, position_ids=torch.arange(sum(DOC_LENGTHS))[None])
    assert abs(loss_and_lora_grads(model, merged, "sdpa")[0] - loss) > 100 * COMPILE_LOSS_ATOL


@pytest.mark.slow  # inductor compilation: ~20 s on 2 cores with a cold cache
def test_compiled_layers_keep_the_attention_under_selective_recompute(monkeypatch):
    """compile + recompute selective (the combined GPU row): inductor calls the SDPA kernel through the dispatcher,
    so TRL's policy still sees it and keeps its outputs; loss and gradients as without recompute, uncompiled."""
    import trl.models.selective_activation_checkpointing as sac

    decisions: Counter = Counter()
    build_policy = sac._build_policy_fn

    def recording_policy(aten_attention_ops):
        policy = build_policy(aten_attention_ops)

        def decide(ctx, op, *args, **kwargs):
            decision = policy(ctx, op, *args, **kwargs)
            decisions[(str(op), decision.name)] += 1
            return decision

        return decide

    monkeypatch.setattr(sac, "_build_policy_fn", recording_policy)
    ref_loss, ref_grads, _ = loss_grads_and_ops("gemma4", "none")
    model, spec = tiny_peft_model("gemma4")
    sac.enable_selective_activation_checkpointing(model.base_model.model)
    model.base_model.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    torch._dynamo.reset()
    compile_decoder_layers(model, get_family("gemma4").decoder_layer_class)
    loss, grads = loss_and_lora_grads(model, packed_row(spec.vocab_size), "sdpa")
    attention = "aten._scaled_dot_product_flash_attention_for_cpu.default"
    assert decisions[(attention, "MUST_SAVE")] == spec.num_layers
    assert abs(loss - ref_loss) <= COMPILE_LOSS_ATOL and max_relative_gap(grads, ref_grads) <= COMPILE_GRAD_RTOL


def test_compile_refuses_a_model_without_the_layer_class():
    model, _ = tiny_peft_model("gemma3")
    with pytest.raises(RuntimeError, match="train.kernels.compile: the model has no Gemma4TextDecoderLayer"):
        compile_decoder_layers(model, "Gemma4TextDecoderLayer")


# --- recompute ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", ["gemma4", "gemma3"])
def test_selective_recompute_equals_no_recompute_and_skips_the_attention(family):
    """fp32, packed row. Recompute re-runs the same kernels on the same inputs in the same process: the same numbers
    (measured: identical); 1e-6 leaves room for a kernel choosing another blocking on its second call."""
    layers = get_family(family).spec("tiny").num_layers
    attention = "aten._scaled_dot_product_flash_attention_for_cpu.default"  # CPU sdpa with the packed rows' mask
    ref_loss, ref_grads, ref_ops = loss_grads_and_ops(family, "none")
    results = {mode: loss_grads_and_ops(family, mode) for mode in ("full", "selective")}

    assert ref_ops[attention] == layers
    assert results["full"][2][attention] == 2 * layers  # the whole layer again in the backward
    assert results["selective"][2][attention] == layers  # its saved outputs answer the recompute
    matmuls = {mode: ops["aten.mm.default"] for mode, (_, _, ops) in results.items()}
    assert matmuls["selective"] == matmuls["full"] > ref_ops["aten.mm.default"]  # the rest is recomputed
    for mode, (loss, grads, _) in results.items():
        assert abs(loss - ref_loss) <= 1e-6 * ref_loss, mode
        assert max_relative_gap(grads, ref_grads) <= 1e-6, mode


def test_recompute_switch_in_the_trainer_config():
    from crosstune.recipe.schema import KernelsSection

    assert gradient_checkpointing_kwargs(KernelsSection()) == {"use_reentrant": False}
    assert gradient_checkpointing_kwargs(KernelsSection(recompute="selective")) == {
        "use_reentrant": False,
        "selective": True,
    }
    assert KernelsSection().recomputes_attention
    assert not KernelsSection(recompute="selective").recomputes_attention


def test_hfu_counts_the_selective_recompute_without_attention():
    """Selective recompute runs the forward again except the attention: 3 × forward − attention FLOPs per token."""
    from crosstune.hardware import get_hardware
    from crosstune.run.metrics import MetricsRowBuilder

    g4 = get_family("gemma4").spec("31b")
    attn = 50 * 4 * 32 * 256 * 1024 + 10 * 4 * 32 * 512 * 4096  # by hand, as tests/families/test_families.py
    forward = g4.forward_flops_per_token(4096)
    assert g4.attention_flops_per_token(4096) == attn
    assert g4.lora_train_flops_per_token(4096, True, recompute_attention=False) == 3 * forward - attn
    assert g4.lora_train_flops_per_token(4096, False, recompute_attention=False) == 2 * forward

    def hfu(recompute_attention: bool) -> float:
        rows = MetricsRowBuilder(
            spec=g4,
            context=4096,
            hardware=get_hardware("1xh200"),
            devices=1,
            recompute_activations=True,
            recompute_attention=recompute_attention,
            recompute_matmuls=True,
            accumulation=1,
            micro_batches_per_epoch=10,
        )
        return rows.row(
            step=1,
            loss=1.0,
            learning_rate=1e-4,
            grad_norm=1.0,
            trained_tokens=2048,
            tokens=4096,
            computed_tokens=4096,
            step_time_s=1.0,
            peak_memory_gib=None,
        ).hfu

    assert hfu(False) == pytest.approx(hfu(True) * (3 * forward - attn) / (3 * forward), rel=1e-12)


def test_recipe_rules_for_the_switches():
    from pydantic import ValidationError

    from crosstune.recipe.schema import KernelsSection, Recipe, TrainSection

    defaults = KernelsSection()
    assert (defaults.lora_input_cast, defaults.compile, defaults.recompute) == (True, False, "full")  # today's path
    with pytest.raises(ValidationError, match="set train.gradient_checkpointing true, or kernels.recompute full"):
        TrainSection(gradient_checkpointing=False, kernels={"recompute": "selective"})
    for attention in ("eager", "flex"):  # not SDPA kernels: the policy would keep nothing, a silent `full`
        with pytest.raises(ValidationError, match=f"attention '{attention}' runs none"):
            KernelsSection(recompute="selective", attention=attention)
    with pytest.raises(ValidationError, match="lora_input_cast false needs train.precision bf16"):
        TrainSection(precision="fp32", kernels={"lora_input_cast": False})
    base = {"name": "r", "model": {"family": "gemma4", "size": "tiny"}, "data": {"sources": [{"path": "x.jsonl"}]}}
    selective = {"kernels": {"recompute": "selective"}}
    assert Recipe(**base, train=selective, backend={"torch": {"devices": 2, "fsdp": False}})  # DDP: Trainer's
    with pytest.raises(ValidationError, match="FSDP2's activation checkpointing .* takes no policy"):
        Recipe(**base, train=selective, backend={"torch": {"devices": 2, "fsdp": True}})


# --- the switches in `crosstune train` ------------------------------------------------------------------------
def train_losses(recipe_path, run_dir, overrides: list[str]) -> list[float]:
    from crosstune.recipe import load_recipe
    from crosstune.run.metrics import read_metrics
    from crosstune.train.session import train

    recipe = load_recipe(recipe_path, ["train.gradient_checkpointing=true", *overrides])
    assert train(recipe, run_dir, progress=False, backend="torch").steps == 2
    return [row.loss for row in read_metrics(run_dir)]


def test_selective_recompute_and_no_lora_cast_train_like_the_default(recipe_path, tmp_path, monkeypatch):
    """Two optimizer steps through TRL (CPU: fp32, so no cast exists to remove; the switch must be harmless), the
    same losses as the default run; TRL's selective checkpointing and PEFT's casting switch are really engaged."""
    import peft.helpers
    import trl.trainer.sft_trainer as sft_trainer

    sac_models, cast_switches = [], []
    real_sac = sft_trainer.enable_selective_activation_checkpointing
    real_casting = peft.helpers.disable_input_dtype_casting

    def sac_spy(model):
        sac_models.append(type(model).__name__)
        return real_sac(model)

    def casting_spy(model, active=True):
        cast_switches.append(active)
        return real_casting(model, active)

    monkeypatch.setattr(sft_trainer, "enable_selective_activation_checkpointing", sac_spy)
    monkeypatch.setattr(peft.helpers, "disable_input_dtype_casting", casting_spy)
    default = train_losses(recipe_path, tmp_path / "default", [])
    assert sac_models == [] and cast_switches == [False]
    fast = train_losses(
        recipe_path,
        tmp_path / "fast",
        ["train.precision=bf16", "train.kernels.lora_input_cast=false", "train.kernels.recompute=selective"],
    )
    assert sac_models == ["PeftModelForCausalLM"] and cast_switches == [False, True]
    # recompute re-runs the same fp32 kernels (see above); step 2 also sees one AdamW step of equal gradients
    assert len(default) == len(fast) == 2 and all(abs(a - b) <= 1e-6 * a for a, b in zip(default, fast, strict=True))


@pytest.mark.slow  # inductor compilation inside the trainer: ~45 s on 2 cores with a cold cache
def test_compiled_layers_train_like_the_default(recipe_path, tmp_path, monkeypatch):
    import crosstune.train.torch.layers as torch_layers

    compiled: list[int] = []
    real = torch_layers.compile_decoder_layers
    monkeypatch.setattr(torch_layers, "compile_decoder_layers", lambda *a: compiled.append(real(*a)) or compiled[-1])
    default = train_losses(recipe_path, tmp_path / "default", [])
    fast = train_losses(recipe_path, tmp_path / "compiled", ["train.kernels.compile=true"])
    assert compiled == [get_family("gemma4").spec("tiny").num_layers]
    # one packed row per step; the compiled layers' fp32 rounding (COMPILE_LOSS_ATOL above), then one AdamW step
    # (lr 1e-3) of gradients equal to 2e-3 of their size: the step-2 loss moves by far less than 1e-4
    assert abs(default[0] - fast[0]) <= COMPILE_LOSS_ATOL and abs(default[1] - fast[1]) <= 1e-4
    # run.json: torch.compile's own seconds (dynamo + inductor) are the compile time, kept out of the step times
    from crosstune.run.metrics import read_metrics
    from crosstune.run.records import read_run_record

    record = read_run_record(tmp_path / "compiled")
    assert record.compile_time_measure == "torch.compile" and record.compile_time_s > 1  # inductor takes seconds
    assert all(row.step_time_s < record.compile_time_s for row in read_metrics(tmp_path / "compiled"))
    assert read_run_record(tmp_path / "default").compile_time_measure == "first-step warm-up"
