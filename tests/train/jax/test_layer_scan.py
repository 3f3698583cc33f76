"""The decoder layers held stacked and scanned over groups (crosstune.train.jax.layer_scan, backend.jax.scan_layers):
the model holds one array per tensor of a group, the layers after the complete groups run after the scan, the
Gemma 4 E2B stacks in two segments and the E4B in one body, and the program is a loop whose text does not grow with
depth. Stacked names map back to tunix's per-layer ones; a whole run trains and exports as unrolled. What the scan's
body saves and recomputes, and that it computes the unrolled step: tests/train/jax/test_scan_recompute.py."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.scan_models import assert_same_step, loss_and_grads, step_inputs, tiny_model

pytest.importorskip("tunix")


def test_the_model_holds_one_array_per_tensor_of_a_group(mesh):
    """The 7 layers' LoRA params: 2 positions × 6 modules × A, B stacked [3, ...], and the 7th layer's 12."""
    from flax import nnx

    from crosstune.train.jax.layer_scan import stacked
    from crosstune.train.jax.lora import param_name

    model = tiny_model(mesh, 7, scan=True)
    assert stacked(model)
    import jax

    names = {param_name(p): x.shape for p, x in jax.tree_util.tree_leaves_with_path(nnx.state(model, nnx.LoRAParam))}
    stack = [n for n in names if n.startswith("layers.0.stack.")]
    assert len(stack) == 2 * 6 * 2 and all(names[n][0] == 3 for n in stack)
    assert len([n for n in names if n.startswith("layers.0.tail.6.")]) == 12


@pytest.mark.slow  # ~20 s, beyond the default suite's budget (tests/budget.toml)
def test_gemma3_two_groups_and_a_tail(mesh):
    scanned = loss_and_grads(tiny_model(mesh, 14, scan=True, family="gemma3"), mesh)
    assert_same_step(scanned, loss_and_grads(tiny_model(mesh, 14, scan=False, family="gemma3"), mesh))


def _lowered_text(model, mesh) -> str:
    """The StableHLO of the loss and its LoRA gradients (nnx.jit's lowering: the program the step runs)."""
    from flax import nnx

    from crosstune.train.jax.loss import loss_fn
    from crosstune.train.jax.model import mesh_context

    with mesh_context(mesh):
        fn = nnx.jit(nnx.value_and_grad(loss_fn, argnums=nnx.DiffState(0, nnx.LoRAParam)))
        return fn.lower(model, **step_inputs()).lowered.as_text()


def test_the_stacked_program_is_a_loop_that_does_not_grow_with_depth(mesh):
    scanned = {n: _lowered_text(tiny_model(mesh, n, scan=True), mesh) for n in (4, 8)}  # 2 and 4 groups
    unrolled = {n: _lowered_text(tiny_model(mesh, n, scan=False), mesh) for n in (4, 8)}
    loops = {n: text.count("stablehlo.while") for n, text in scanned.items()}
    assert loops[4] == loops[8] > unrolled[4].count("stablehlo.while")  # the forward's scan and its transpose
    lines = {n: text.count("\n") for n, text in scanned.items()}
    assert lines[4] == lines[8], lines  # the same program: only the groups' dimension differs
    assert unrolled[8].count("\n") > 1.5 * unrolled[4].count("\n")


def test_e_sizes_stack_in_two_segments(mesh):
    """The E2B's layout, 9 layers of which the last 5 read layers 2's (sliding) and 3's (global) K/V (tunix's sharing
    pattern), every layer with a per-layer input: the 4 that own their K/V stacked (2 groups of 2), then the 5 that
    share (2 groups of 2 and one after, MLPs twice as wide: not one body, crosstune.train.jax.kv_carry); the same
    loss and gradients as unrolled, dropout on."""
    from crosstune.train.jax.layer_scan import segments

    unrolled = tiny_model(mesh, 9, scan=False, kv_shared=5)
    assert segments(unrolled) == [(0, 4), (4, 9)]
    assert sorted(set(unrolled.kv_cache_sharing_patterns[4:])) == [2, 3]
    scanned = tiny_model(mesh, 9, scan=True, kv_shared=5)
    layout = [(s.first, s.groups, len(s.stack), sorted(s.tail), s.sources) for s in scanned.layers]
    assert layout == [(0, 2, 2, [], (2, 3)), (4, 2, 2, ["8"], ())]
    result = loss_and_grads(scanned, mesh)
    assert_same_step(result, loss_and_grads(unrolled, mesh))
    assert "layers.8.per_layer_input_gate.w_lora_a" not in result[1]  # LoRA adapts attention and MLP only
    assert {f"layers.{i}.mlp.up_proj.kernel_lora_a" for i in range(9)} <= result[1].keys()


def test_e4b_layout_scans_in_one_body(mesh):
    """The E4B's layout (the sharing layers built as the owning ones: MLPs as wide), 9 layers of which the last 5 read
    layers 2's and 3's K/V: one stack, 4 groups of 2 (the first 2 own their K/V) and a sharing tail layer, scanned by
    one loop as a model without KV sharing (the forward's scan and its transpose; two segments: two of each), the
    sharing layers without K/V LoRA as unrolled; the same loss and gradients as unrolled, dropout on, to the
    tolerances of tests/helpers/scan_models.py: the one body adds only exact operations (the flag's cond and the
    carry's selects pick values, the zero padding of the K/V LoRA is never read), so the scan and unrolled steps
    differ as any scan does, by the order XLA sums a reduction in (measured: the loss equal, gradients 1.4e-6). A
    flag flipped (the first groups reading, the last computing) or the carry keeping the first group's K/V (layers
    0's and 1's, not 2's and 3's) fails the loss by far more (checked by hand)."""
    unrolled = tiny_model(mesh, 9, scan=False, kv_shared=5, double_wide=False)
    scanned = tiny_model(mesh, 9, scan=True, kv_shared=5, double_wide=False)
    layout = [(s.first, s.groups, s.owning, len(s.stack), sorted(s.tail)) for s in scanned.layers]
    assert layout == [(0, 4, 2, 2, ["8"])]
    assert scanned.kv_cache_sharing_patterns == [0]  # tunix's loop meets one layer, sharing nothing
    result = loss_and_grads(scanned, mesh)
    assert_same_step(result, loss_and_grads(unrolled, mesh))
    assert {f"layers.{i}.attn.kv_einsum.w_lora_a" for i in (0, 2)} <= result[1].keys()
    assert not any(f"layers.{i}.attn.k" in name for i in range(4, 9) for name in result[1])
    loops = {
        kw.get("kv_shared"): _lowered_text(tiny_model(mesh, 9, scan=True, **kw), mesh).count("stablehlo.while")
        for kw in (dict(kv_shared=5, double_wide=False), dict())
    }
    assert loops[5] == loops[None], loops


def test_refuses_kv_sharing_that_does_not_split_in_two(mesh):
    from crosstune.train.jax.layer_scan import ScanError, segments

    model = tiny_model(mesh, 9, scan=False, kv_shared=5, dropout=0.0)
    model.kv_cache_sharing_patterns = [*range(4), 2, 5, 3, 2, 3]  # layer 5 owns its K/V after layer 4 shares
    with pytest.raises(ScanError, match=r"owning their K/V after layer 4.*scan_layers: false"):
        segments(model)


def test_stacked_names_map_to_tunix_layers():
    from crosstune.train.jax.layer_scan import ScanError, layer_name, per_layer

    a = np.arange(3 * 2).reshape(3, 2)
    params = {
        "layers.0.stack.0.attn.q_einsum.w_lora_a": a,
        "layers.0.stack.1.mlp.down_proj.kernel_lora_b": a + 10,
        "layers.0.tail.6.attn.q_einsum.w_lora_a": a[0],
        "embedder.x": a,
    }
    out = per_layer(params)
    assert sorted(out) == sorted(
        [f"layers.{i}.attn.q_einsum.w_lora_a" for i in (0, 2, 4, 6)]
        + [f"layers.{i}.mlp.down_proj.kernel_lora_b" for i in (1, 3, 5)]
        + ["embedder.x"]
    )
    np.testing.assert_array_equal(out["layers.4.attn.q_einsum.w_lora_a"], a[2])
    np.testing.assert_array_equal(out["layers.5.mlp.down_proj.kernel_lora_b"], a[2] + 10)
    assert per_layer({"layers.3.attn.x": a}) == {"layers.3.attn.x": a}  # an unstacked model's names
    assert layer_name("opt.mu.layers.0.stack.1.attn.kv_einsum.w_lora_b") == (
        "opt.mu.layers.1.attn.kv_einsum.w_lora_b",
        1,
    )
    with pytest.raises(ScanError, match=r"^layers.0.stack.1.attn.q_einsum.w_lora_a: .* positions \[1\]"):
        per_layer({"layers.0.stack.1.attn.q_einsum.w_lora_a": a})
    # a damaged checkpoint's names and shapes: refused naming the tensor, never an IndexError or a silent overwrite
    one = "layers.0.stack.0.attn.q_einsum.w_lora_a"
    with pytest.raises(ScanError, match=r"w_lora_b: stacked with 2 groups"):
        per_layer({one: a, "layers.0.stack.0.attn.q_einsum.w_lora_b": a[:2]})
    with pytest.raises(ScanError, match=r"stacked with None groups"):
        per_layer({one: np.float32(1.0)})
    with pytest.raises(ScanError, match=r"layers.2.attn.q_einsum.w_lora_a: a second tensor for layers.2"):
        per_layer({one: a, "layers.2.attn.q_einsum.w_lora_a": a[0]})
    with pytest.raises(ScanError, match=r"^layers.0.tail.2.attn.q_einsum.w_lora_a: segment 0's tail layers \[2\]"):
        per_layer({one: a, "layers.0.tail.2.attn.q_einsum.w_lora_a": a[0]})
    with pytest.raises(ScanError, match=r"^layers.2.stack.0.x: segment 2, but .* segments \[0, 2\]"):
        per_layer({one: a, "layers.2.stack.0.x": a})  # no segment 1
    with pytest.raises(ScanError, match=r"^layers.1.tail.3.x: segment 1, but"):
        per_layer({one: a, "layers.1.tail.3.x": a[0]})  # a tail without its segment's groups
    # one body of a KV-sharing model (kv_carry): its K/V LoRA of the first (owning) groups alone, no more
    kv = "layers.0.stack.0.attn.kv_einsum.w_lora_a"
    owned = per_layer({one: a, "layers.0.stack.1.x": a, kv: a[:2]})  # 3 groups of 2, the first 2 owning
    assert sorted(k for k in owned if "kv_einsum" in k) == [
        "layers.0.attn.kv_einsum.w_lora_a",
        "layers.2.attn.kv_einsum.w_lora_a",
    ]
    with pytest.raises(ScanError, match=r"kv_einsum.w_lora_a: stacked with 4 groups"):
        per_layer({one: a, kv: np.zeros((4, 2))})
    # two segments (the E sizes): the second's layers follow the first's groups and tail
    two = per_layer({one: a, "layers.0.tail.3.x": a[0], "layers.1.stack.0.x": a, "layers.1.stack.1.x": a})
    assert sorted(k for k in two if k.endswith(".x")) == [f"layers.{i}.x" for i in (3, 4, 5, 6, 7, 8, 9)]
    np.testing.assert_array_equal(two["layers.8.x"], a[2])  # segment 1 from layer 4: group 2, position 0


def test_recipe_field_is_omitted_while_unset():
    from crosstune.recipe.backend_schema import JaxBackendSection
    from crosstune.train.jax.config import ModelSettings

    assert "scan_layers" not in JaxBackendSection().model_dump()
    assert JaxBackendSection(scan_layers=True).model_dump()["scan_layers"] is True
    assert ModelSettings.__dataclass_fields__["scan_layers"].default is False


def _deepened(base, out, layers: int):
    """`base` (the tiny Gemma 4: 6 layers, 5 sliding : 1 global) with `layers` layers, layer i a copy of i mod 6."""
    import json
    import shutil

    from safetensors.numpy import load_file, save_file

    shutil.copytree(base, out)
    config = json.loads((out / "config.json").read_text())
    period = config["num_hidden_layers"]
    config["num_hidden_layers"] = layers
    config["layer_types"] = [config["layer_types"][i % period] for i in range(layers)]
    (out / "config.json").write_text(json.dumps(config))
    tensors = load_file(out / "model.safetensors")
    for name in [n for n in tensors if ".layers." in n]:
        head, rest = name.split(".layers.")
        index, tail = rest.split(".", 1)
        for i in range(int(index) + period, layers, period):
            tensors[f"{head}.layers.{i}.{tail}"] = tensors[name]
    save_file(tensors, out / "model.safetensors")
    return out


def _runs_agree(base, tmp_path, synth_corpus_dir, last_layer: int) -> set[str]:
    """The whole jax run (build_model, HeldOnceStep, AdamW with the block LoRA's mask, LoRA dropout, an Orbax
    checkpoint) on `base`, unrolled and stacked: the same losses (the gradients agree to ~1e-6, above), the same
    adapter up to what AdamW makes of that: an entry whose gradient is ~0 moves by up to lr a step either way
    (m/sqrt(v) = ±1 at the first step), so 3 steps part two runs by at most 2 · 3 · lr. The adapter exported from the
    stacked checkpoint is the run's own, exactly (a change of layout only). Returns the stacked checkpoint's
    segments (its `layers.<s>` keys, as Orbax holds them)."""
    import orbax.checkpoint as ocp

    from crosstune.data import prepare_dataset
    from crosstune.export import export_run, read_peft_adapter
    from crosstune.train.session import train
    from tests.helpers.jax_recipes import tiny_recipe

    losses, adapters = {}, {}
    for scan in (False, True):
        recipe = tiny_recipe(
            base,
            synth_corpus_dir,
            tmp_path,
            "gemma4",
            "lora.dropout=0.05",
            "train.max_steps=3",
            "train.checkpoint_every=3",
            f"backend.jax.scan_layers={str(scan).lower()}",
        )
        prepare_dataset(recipe)
        run = tmp_path / "runs" / f"scan-{scan}"
        losses[scan] = train(recipe, run, progress=False, backend="jax").losses
        export_run(run, "adapter", tmp_path / f"export-{scan}")
        adapters[scan] = read_peft_adapter(run / "adapter", family="gemma4")[0].modules
        exported = read_peft_adapter(tmp_path / f"export-{scan}", family="gemma4")[0].modules
        assert exported.keys() == adapters[scan].keys()
        assert f"model.layers.{last_layer}.self_attn.q_proj" in exported
        for name, pair in exported.items():
            for x, y in zip(pair, adapters[scan][name], strict=True):
                np.testing.assert_array_equal(x, y, err_msg=name)
    np.testing.assert_allclose(losses[True], losses[False], rtol=1e-5)
    assert adapters[True].keys() == adapters[False].keys()
    bound = 2 * 3 * recipe.train.learning_rate
    for name, pair in adapters[False].items():
        for x, y in zip(adapters[True][name], pair, strict=True):
            np.testing.assert_allclose(x, y, rtol=0, atol=bound, err_msg=name)
    checkpointer = ocp.PyTreeCheckpointer()
    tree = checkpointer.metadata(tmp_path / "runs" / "scan-True" / "checkpoints" / "3" / "model_params").item_metadata
    return set(tree.tree["layers"])


@pytest.mark.slow
def test_a_run_with_stacked_layers_trains_and_exports_as_unrolled(tmp_path, tiny_gemma4_dir, synth_corpus_dir):
    """13 layers: 2 groups of 6 stacked + 1 after."""
    assert _runs_agree(_deepened(tiny_gemma4_dir, tmp_path / "deep", 13), tmp_path, synth_corpus_dir, 12) == {"0"}


@pytest.mark.slow
def test_an_e_size_run_with_stacked_segments_trains_and_exports_as_unrolled(
    tmp_path, tiny_gemma4_e_dir, synth_corpus_dir
):
    """The tiny E model (per-layer inputs, the last 3 of 6 layers KV-shared): two segments, names `layers.1.…`."""
    assert _runs_agree(tiny_gemma4_e_dir, tmp_path, synth_corpus_dir, 5) == {"0", "1"}


@pytest.mark.slow
def test_an_e4b_run_in_one_body_trains_and_exports_as_unrolled(tmp_path, tiny_gemma4_e4b_dir, synth_corpus_dir):
    """tiny-e4b (the last 3 of 6 layers KV-shared, built as the owning ones): one scan body over 2 groups
    (crosstune.train.jax.kv_carry), the sharing layers' K/V LoRA absent, names `layers.0.…` alone."""
    assert _runs_agree(tiny_gemma4_e4b_dir, tmp_path, synth_corpus_dir, 5) == {"0"}
