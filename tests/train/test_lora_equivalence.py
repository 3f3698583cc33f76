"""Same LoRA on both backends by construction: one seeded initial LoRA installed by torch (PEFT) and jax
(Qwix, k/v as the exact block LoRA), the same loss curve step by step, and exported adapters with one tensor set."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.helpers.jax_recipes import tiny_recipe, train_both
from tests.helpers.loss_curves import assert_curves_agree

pytest.importorskip("tunix")

LR = "train.learning_rate=5e-4"


def _torch_initial(recipe):
    """The LoRA the torch backend starts from: PEFT's model, with crosstune's initial LoRA installed."""
    from peft import get_peft_model

    from crosstune.run.lora_weights import LoraWeights
    from crosstune.train.torch.lora import install_initial_lora, lora_config, peft_lora_params
    from crosstune.train.torch.model import build_model

    model, _ = build_model(recipe, on_gpu=False)
    config, _ = lora_config(recipe, model)
    peft_model = get_peft_model(model, config)
    install_initial_lora(peft_model, recipe)
    params = peft_lora_params(peft_model)
    modules = {
        m: (params[(m, "A")].detach().numpy().copy(), params[(m, "B")].detach().numpy().copy()) for m, _ in params
    }
    return LoraWeights(
        recipe.model.family, recipe.lora.rank, float(recipe.lora.alpha), tuple(recipe.lora.targets), modules
    )


def _jax_initial(recipe, model_dir):
    """The LoRA the jax backend starts from (its Qwix params, mapped to the PEFT layout) and the raw Qwix params."""
    import jax
    from flax import nnx

    from crosstune.families import get_family
    from crosstune.train.jax.lora import param_name, qwix_to_lora
    from crosstune.train.jax.model import build_model, make_mesh, mesh_context

    mesh = make_mesh(1, 2)
    with mesh_context(mesh):
        model, _ = build_model(recipe.model.family, model_dir, mesh, lora=recipe.lora, seed=recipe.train.seed)
    leaves = jax.tree_util.tree_leaves_with_path(nnx.state(model, nnx.LoRAParam))
    params = {param_name(p): np.asarray(v) for p, v in leaves}
    spec = get_family(recipe.model.family).spec_from_hf_config(
        __import__("json").loads((model_dir / "config.json").read_text())
    )
    return qwix_to_lora(params, spec, rank=recipe.lora.rank, alpha=recipe.lora.alpha), params


@pytest.mark.parametrize("family", ["gemma4", "gemma3"])
def test_both_backends_start_from_the_same_lora(family, tmp_path, tiny_gemma3_dir, tiny_gemma4_dir, synth_corpus_dir):
    from crosstune.train.lora_init import lora_differences

    model_dir = {"gemma3": tiny_gemma3_dir, "gemma4": tiny_gemma4_dir}[family]
    recipe = tiny_recipe(model_dir, synth_corpus_dir, tmp_path, family)
    torch_lora = _torch_initial(recipe)
    jax_lora, qwix = _jax_initial(recipe, model_dir)
    assert lora_differences(torch_lora, jax_lora) == []  # bit for bit, every module, A and B
    r = recipe.lora.rank
    for name, (a, b) in torch_lora.modules.items():
        bound = 1 / math.sqrt(a.shape[1])  # PEFT's kaiming_uniform(a=√5): U(±1/√fan_in)
        assert np.abs(a).max() <= bound and a.std() == pytest.approx(bound / math.sqrt(3), rel=0.2), name
        assert not b.any(), name
    k_a = torch_lora.modules["model.layers.0.self_attn.k_proj"][0]
    assert not np.array_equal(k_a, torch_lora.modules["model.layers.0.self_attn.v_proj"][0])  # separate A
    fused = {n: v for n, v in qwix.items() if "kv_einsum" in n}  # gemma4: kv_einsum; gemma3 tiny: qkv_einsum
    assert fused and all(v.shape[-1 if n.endswith("_a") else 0] in (2 * r, 3 * r) for n, v in fused.items())
    # the comparison can fail: one element off anywhere is reported
    name = next(iter(torch_lora.modules))
    torch_lora.modules[name][0][0, 0] += 1e-7
    (problem,) = lora_differences(torch_lora, jax_lora)
    assert problem.startswith(f"{name}.lora_A: max |Δ| ")


def test_optimizer_keeps_block_lora_diagonal():
    """Off-diagonal blocks of a fused k/v LoRA B get no gradient (they would couple k's A to v's output)."""
    import jax.numpy as jnp

    from crosstune.train.jax.optimizer import keep_block_lora_diagonal

    r = 2
    grads = {
        "layers": {
            0: {
                "attn": {
                    "kv_einsum": {"w_lora_b": jnp.ones((2 * r, 2, 3, 4)), "w_lora_a": jnp.ones((5, 2 * r))},
                    "q_einsum": {"w_lora_b": jnp.ones((r, 2, 4))},
                }
            }
        }
    }
    masked, _ = keep_block_lora_diagonal(r).update(grads, None)
    kv = np.asarray(masked["layers"][0]["attn"]["kv_einsum"]["w_lora_b"])
    assert kv[:r, 0].all() and kv[r:, 1].all() and not kv[:r, 1].any() and not kv[r:, 0].any()
    assert np.asarray(masked["layers"][0]["attn"]["kv_einsum"]["w_lora_a"]).all()
    assert np.asarray(masked["layers"][0]["attn"]["q_einsum"]["w_lora_b"]).all()


def test_loss_curves_agree_3_steps(three_step_runs):
    """The default suite's variant (tests/train/conftest.py THREE_STEPS: steps 1-2 are the base model, step 3 after
    one real AdamW update); and the padding each backend computes."""
    from crosstune.run.metrics import read_metrics

    runs = three_step_runs
    assert_curves_agree(runs, base_steps=2)
    # the same real tokens; jax computes every position of its [1, 512] rows, torch only the padding-free tokens
    jax_rows, torch_rows = (read_metrics(runs[b].run_dir) for b in ("jax", "torch"))
    assert [r.tokens for r in jax_rows] == [r.tokens for r in torch_rows]
    assert all(r.computed_tokens == 512 >= r.tokens for r in jax_rows)
    assert all(r.computed_tokens == r.tokens for r in torch_rows)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["gemma4", "gemma3"])
@pytest.mark.parametrize("accumulation", [1, 2])
def test_loss_curves_agree_and_adapters_match(
    family, accumulation, tmp_path, tiny_gemma3_dir, tiny_gemma4_dir, synth_corpus_dir
):
    """6 steps from the same seed, fp32, dropout 0, with and without gradient accumulation; then the exported
    adapters (crosstune export of each run, which on Gemma 4 adds the v_proj copies vLLM needs on k_eq_v layers to
    both): the same tensor names, shapes and parameter count."""
    from safetensors.numpy import load_file

    from crosstune.export import export_run

    model_dir = {"gemma3": tiny_gemma3_dir, "gemma4": tiny_gemma4_dir}[family]
    steps = ("train.max_steps=6", "train.warmup_steps=1", f"train.grad_accumulation={accumulation}", LR)
    recipe = tiny_recipe(model_dir, synth_corpus_dir, tmp_path, family, *steps)
    runs = train_both(recipe, tmp_path, family)
    gaps = assert_curves_agree(runs, base_steps=2)
    print(f"{family} k={accumulation} loss gaps per step: {[f'{g:.1e}' for g in gaps]}")  # docs' numbers (-s)

    exported = {}
    for backend in ("jax", "torch"):
        export_run(runs[backend].run_dir, "adapter", tmp_path / f"{backend}-adapter")
        exported[backend] = load_file(str(tmp_path / f"{backend}-adapter" / "adapter_model.safetensors"))
    jax_tensors, torch_tensors = exported["jax"], exported["torch"]
    assert {k: v.shape for k, v in jax_tensors.items()} == {k: v.shape for k, v in torch_tensors.items()}
    assert sum(v.size for v in jax_tensors.values()) == sum(v.size for v in torch_tensors.values())


def test_jax_activation_recompute_keeps_the_lora(tmp_path, tiny_gemma4_dir, synth_corpus_dir):
    """Qwix creates LoRA params while tracing a forward pass; under tunix's nnx.remat those were dropped (the build
    stopped: no LoRA on any module). Built with remat: the LoRA is there and the step recomputes (XLA barriers)."""
    import jax.numpy as jnp
    from flax import nnx

    from crosstune.train.jax.loss import loss_fn
    from crosstune.train.jax.model import build_model, lora_modules, make_mesh, mesh_context

    recipe = tiny_recipe(tiny_gemma4_dir, synth_corpus_dir, tmp_path, "gemma4")
    mesh = make_mesh(1, 1)
    with mesh_context(mesh):
        model, _ = build_model("gemma4", tiny_gemma4_dir, mesh, lora=recipe.lora, remat=True)
    assert len(lora_modules(model)) == 6 * 6  # q, kv (k on the global layer), o, gate, up, down in 6 layers
    tokens = jnp.arange(2 * 16).reshape(2, 16) % 1000 + 3
    inputs = dict(
        input_tokens=tokens,
        input_mask=jnp.ones((2, 16), bool),
        positions=jnp.tile(jnp.arange(16), (2, 1)),
        segment_ids=jnp.ones((2, 16), jnp.int32),
        loss_weight=jnp.full((2,), 1 / 30, jnp.float32),
    )
    step = nnx.jit(lambda m, x: nnx.grad(loss_fn, argnums=nnx.DiffState(0, nnx.LoRAParam))(m, **x))
    with mesh_context(mesh):
        assert step.lower(model, inputs).as_text().count("optimization_barrier") == 6  # one per decoder layer
