"""`train.kernels` wiring on CPU: the defaults are today's trainer; `token_metrics: false` removes TRL's per-step
entropy / token-accuracy work and host syncs with the loss unchanged; `loss: cce` is refused cleanly where it
cannot run; `model.random_init` builds a model without reading weights. GPU-marked: cut-cross-entropy against the
unfused soft-capped loss and gradients, and compiled FlexAttention at head_dim 512 against sdpa."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from crosstune.recipe import load_recipe


def make_trainer(recipe, run_dir: Path):
    from crosstune.data import torch_dataset, training_data
    from crosstune.train.step_plan import plan_steps
    from crosstune.train.torch.callbacks import CrosstuneSFTTrainer
    from crosstune.train.torch.config import sft_config
    from crosstune.train.torch.kernels import kernel_trainer_class
    from crosstune.train.torch.lora import lora_config
    from crosstune.train.torch.model import build_model

    model, tokenizer = build_model(recipe, on_gpu=False)
    prepared = training_data(recipe, tokenizer)
    plan = plan_steps(recipe.train, len(prepared.split("train")), 1)
    dataset = torch_dataset(prepared, "train", seed=recipe.train.seed, epochs=plan.epochs_read)
    trainer_cls = kernel_trainer_class(CrosstuneSFTTrainer, recipe.train.kernels)
    return trainer_cls(
        model=model,
        args=sft_config(recipe, run_dir, plan.total_steps, progress=False),
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora_config(recipe, model)[0],
        keep_last=1,
    )


def counting(fn, calls: list):
    def wrapper(x, *args, **kwargs):
        calls.append(x)
        return fn(x, *args, **kwargs)

    return wrapper


def test_default_kernels_keep_todays_trainer():
    from crosstune.recipe.schema import KernelsSection
    from crosstune.train.torch.callbacks import CrosstuneSFTTrainer
    from crosstune.train.torch.kernels import LeanLossMixin, kernel_trainer_class

    defaults = KernelsSection()
    assert (defaults.attention, defaults.loss, defaults.token_metrics) == ("sdpa", "trl", True)
    assert kernel_trainer_class(CrosstuneSFTTrainer, defaults) is CrosstuneSFTTrainer
    lean = kernel_trainer_class(CrosstuneSFTTrainer, KernelsSection(token_metrics=False))
    assert issubclass(lean, CrosstuneSFTTrainer) and issubclass(lean, LeanLossMixin)


def test_token_metrics_off_removes_the_extras_and_keeps_the_loss(recipe_path, tmp_path, monkeypatch):
    """Same weights (LoRA B starts at 0, so the adapted model is the base), same batch: the loss is the same
    number; without the metrics the fused head is asked for log-probs only and nothing is gathered for metrics."""
    import trl.trainer.utils as trl_utils

    requested: list[tuple[str, ...]] = []
    original = trl_utils._ChunkedLogProbFunction

    class Spy:  # records which per-token outputs TRL's fused LM head computes
        @staticmethod
        def apply(*args):
            requested.append(tuple(args[-1]))
            return original.apply(*args)

    monkeypatch.setattr(trl_utils, "_ChunkedLogProbFunction", Spy)
    results = {}
    for token_metrics in (True, False):
        recipe = load_recipe(recipe_path, [f"train.kernels.token_metrics={str(token_metrics).lower()}"])
        trainer = make_trainer(recipe, tmp_path / str(token_metrics))
        gathered = []
        trainer.accelerator.gather_for_metrics = counting(trainer.accelerator.gather_for_metrics, gathered)
        inputs = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
        count = (inputs["labels"][..., 1:] != -100).sum()
        requested.clear()
        loss = trainer.compute_loss(trainer.model, dict(inputs), num_items_in_batch=count)
        results[token_metrics] = (loss.item(), list(requested), dict(trainer._metrics["train"]), len(gathered))
        if not token_metrics:  # a request for the logits and metrics is refused, not answered with missing fields
            with pytest.raises(ValueError, match="token_metrics true"):
                trainer.compute_loss(trainer.model, dict(inputs), return_outputs=True)

    full_loss, full_outputs, full_metrics, full_gathers = results[True]
    lean_loss, lean_outputs, lean_metrics, lean_gathers = results[False]
    assert full_outputs == [("log_probs", "entropy", "is_top1")]
    assert {"entropy", "mean_token_accuracy"} <= full_metrics.keys() and full_gathers >= 3
    assert lean_outputs == [("log_probs",)]
    assert not {"entropy", "mean_token_accuracy", "num_tokens"} & lean_metrics.keys() and lean_gathers == 0
    # The same chunked log-prob arithmetic on the same inputs (entropy is an extra accumulator beside it): equal to
    # fp32 rounding of a ~500-term sum of values ~7 (bit-identical in practice).
    assert full_loss > 1.0 and abs(lean_loss - full_loss) <= 1e-6 * full_loss


def test_token_metrics_off_trains(recipe_path, tmp_path):
    from crosstune.run.metrics import read_metrics
    from crosstune.train.session import train

    recipe = load_recipe(recipe_path, ["train.kernels.token_metrics=false"])
    result = train(recipe, tmp_path / "run", progress=False, backend="torch")
    rows = read_metrics(tmp_path / "run")
    assert result.steps == 2 and [r.step for r in rows] == [1, 2]
    assert all(r.loss > 0 and r.trained_tokens > 0 for r in rows)


def test_cce_is_refused_cleanly_on_cpu(recipe_path):
    from crosstune.recipe import RecipeError
    from crosstune.train.torch.kernels import LeanLossMixin, kernel_trainer_class
    from crosstune.train.torch.model import build_model

    with pytest.raises(RecipeError, match="token_metrics false"):
        load_recipe(recipe_path, ["train.kernels.loss=cce"])
    recipe = load_recipe(recipe_path, ["train.kernels.loss=cce", "train.kernels.token_metrics=false"])
    assert issubclass(kernel_trainer_class(object, recipe.train.kernels), LeanLossMixin)
    with pytest.raises(RuntimeError, match="train.kernels.loss: cce .* CUDA GPU .* use loss: trl"):
        build_model(recipe, on_gpu=False)


def test_random_init_reads_no_weights(recipe_path, tiny_gemma4_dir, tmp_path):
    from crosstune.train.torch.model import build_model

    no_weights = tmp_path / "config-only"
    no_weights.mkdir()
    for item in tiny_gemma4_dir.iterdir():
        if item.suffix != ".safetensors":
            shutil.copy(item, no_weights / item.name)
    recipe = load_recipe(recipe_path, [f"model.path={no_weights}"])
    with pytest.raises(OSError):  # the plain path needs the weights
        build_model(recipe, on_gpu=False)
    recipe = load_recipe(recipe_path, [f"model.path={no_weights}", "model.random_init=true"])
    model, _ = build_model(recipe, on_gpu=False)
    pretrained, _ = build_model(load_recipe(recipe_path), on_gpu=False)
    assert model.config.to_dict()["layer_types"] == pretrained.config.to_dict()["layer_types"]
    shapes = {n: p.shape for n, p in pretrained.state_dict().items()}
    assert {n: p.shape for n, p in model.state_dict().items()} == shapes
    embed = model.get_input_embeddings().weight
    assert not torch.equal(embed, pretrained.get_input_embeddings().weight) and embed.std() > 0


# --- GPU checks ---------------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_cce_equals_unfused_softcapped_loss_and_gradients():
    """bf16 inputs, as in training: the reference computes logits, softcap and cross-entropy in fp32 from the same
    bf16 values. CCE's tiles multiply bf16 exactly into fp32 accumulators, so the loss agrees to fp32 summation
    order (~1e-5 relative); its gradients come back in bf16 (relative rounding 2^-9), hence 1e-2 of the largest."""
    pytest.importorskip("cut_cross_entropy")
    from cut_cross_entropy import linear_cross_entropy

    g = torch.Generator(device="cuda").manual_seed(0)
    tokens, hidden, vocab, softcap = 1024, 512, 65536, 30.0
    h = (torch.randn(1, tokens, hidden, device="cuda", generator=g) * 2).bfloat16().requires_grad_()
    w = (torch.randn(vocab, hidden, device="cuda", generator=g) * 0.05).bfloat16().requires_grad_()
    labels = torch.randint(0, vocab, (1, tokens), device="cuda", generator=g)
    labels[:, ::4] = -100
    loss = linear_cross_entropy(h, w, labels, softcap=softcap, reduction="sum", shift=True, filter_eps=None)
    grad_h, grad_w = torch.autograd.grad(loss, (h, w))

    hf, wf = h.detach().float().requires_grad_(), w.detach().float().requires_grad_()
    logits = softcap * torch.tanh((hf[:, :-1] @ wf.T) / softcap)
    ref = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels[:, 1:].flatten(), reduction="sum")
    ref_h, ref_w = torch.autograd.grad(ref, (hf, wf))
    assert abs(loss.item() - ref.item()) <= 1e-5 * ref.item()
    assert (grad_h.float() - ref_h).abs().max() <= 1e-2 * ref_h.abs().max()
    assert (grad_w.float() - ref_w).abs().max() <= 1e-2 * ref_w.abs().max()


@pytest.mark.gpu
@pytest.mark.parametrize("head_dim", [256, 512])
def test_compiled_flex_at_gemma4_head_dims_matches_sdpa(head_dim):
    """The fused Triton kernel with crosstune's kernel options compiles at head_dim 512 (it did not with torch's
    defaults) and equals sdpa with the same document + causal mask, bf16, forward and backward (bf16 outputs:
    2e-2 of the largest value)."""
    from torch.nn.attention.flex_attention import create_block_mask

    from crosstune.train.torch.attention import flex_attention_forward

    g = torch.Generator(device="cuda").manual_seed(0)
    n, heads, kv = 2048, 32, 4
    q, k, v = (torch.randn(1, h, n, head_dim, device="cuda", generator=g).bfloat16() for h in (heads, kv, kv))
    for t in (q, k, v):
        t.requires_grad_()
    doc = torch.arange(n, device="cuda") // 300

    def mask_mod(b, h, qi, ki):
        return (qi >= ki) & (doc[qi] == doc[ki])

    block_mask = create_block_mask(mask_mod, 1, None, n, n, device="cuda")
    out, _ = flex_attention_forward(None, q, k, v, block_mask, scaling=1.0 / head_dim**0.5)
    dense = (doc[:, None] == doc[None, :]) & torch.ones(n, n, dtype=torch.bool, device="cuda").tril()
    ref = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=dense, scale=1.0 / head_dim**0.5, enable_gqa=True
    ).transpose(1, 2)
    assert (out.float() - ref.float()).abs().max() <= 2e-2 * ref.float().abs().max()
    grads = torch.autograd.grad(out.float().square().sum(), (q, k, v))
    ref_grads = torch.autograd.grad(ref.float().square().sum(), (q, k, v))
    for got, want in zip(grads, ref_grads, strict=True):
        assert (got.float() - want.float()).abs().max() <= 2e-2 * want.float().abs().max()
