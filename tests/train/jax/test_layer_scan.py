"""The decoder layers held stacked and scanned over groups (crosstune.train.jax.layer_scan, backend.jax.scan_layers)
compute the step they replace: the same loss and LoRA gradients with the LoRA dropout on (the same masks: the one
dropout RNG stream is the scan's carry, so every draw gets the key it gets unrolled), the same RNG count after the
step, under each remat mode; the layers after the complete groups run after the scan. The program is a loop whose
text does not grow with depth. Stacked names map back to tunix's per-layer ones.

Tolerances from the fp32 arithmetic: the scanned and unrolled programs run the same ops on the same values, but XLA
fuses a while body apart from its neighbours, so a reduction may be summed in another order: a few fp32 ulps per
value. The loss (a sum of ~60 token CEs) to 1e-6 relative; each LoRA gradient (summed over tokens and back through
up to 7 layers) to 1e-5 of its tensor's largest entry (measured ≤ 2e-6)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

pytest.importorskip("tunix")

LOSS_RTOL = 1e-6
GRAD_RTOL = 1e-5
LENGTH = 32
PAIR = ("sliding", "global")


def _config(layers: int, *, kv_shared: int = 0, moe: bool = False) -> dict:
    """A tiny Gemma 4 (31B layout: k_eq_v global layers, softcap) whose attention pattern repeats every 2 layers;
    with `kv_shared`, the E sizes' layout: the last `kv_shared` layers reuse earlier layers' K/V and have MLPs twice
    as wide (E2B's), and every layer takes a per-layer input; with `moe`, the 26B-A4B's: 8 experts of width 32, 2 per
    token, beside the dense MLP."""
    from crosstune.families import get_family
    from crosstune.families.gemma4.family import make_spec
    from crosstune.families.spec import MoE

    e = dict(kv_shared=kv_shared, per_layer_input=16, double_wide=True) if kv_shared else {}
    e |= dict(moe=MoE(num_experts=8, top_k=2, expert_dim=32)) if moe else {}
    spec = make_spec("gemma-4-scan-test", layers, 64, 128, 4, 2, 32, 1, 64, 16, 128, every=2, **e)
    types = (PAIR * layers)[:layers]
    return get_family("gemma4").hf_config(dataclasses.replace(spec, layer_types=types))


def _gemma3_config(layers: int) -> dict:
    """A tiny Gemma 3: 5 sliding : 1 global, so 14 layers are 2 groups of 6 and 2 layers after them."""
    from crosstune.families import get_family
    from crosstune.families.gemma3.family import make_spec

    return get_family("gemma3").hf_config(make_spec("gemma-3-scan-test", layers, 64, 128, 4, 2, 32, 16, 128, 32.0))


def _model(
    mesh,
    layers: int,
    *,
    scan: bool,
    remat=None,
    dropout: float = 0.25,
    family: str = "gemma4",
    kv_shared: int = 0,
    moe: bool = False,
):
    """The tunix model with crosstune's Qwix LoRA (r=4, all targets, dropout), random base and LoRA from seed 0,
    its layers stacked last when `scan` (as the run's worker does)."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from crosstune.recipe.schema import LoraSection
    from crosstune.train.jax.layer_scan import stack_layers
    from crosstune.train.jax.model import abstract_model, mesh_context

    lora = LoraSection(rank=4, alpha=8.0, dropout=dropout)
    config = _config(layers, kv_shared=kv_shared, moe=moe) if family == "gemma4" else _gemma3_config(layers)
    model, _ = abstract_model(family, config, mesh, remat=remat, lora=lora, platform="cpu")
    graphdef, abstract = nnx.split(model)
    leaves, tree = jax.tree.flatten(abstract)
    rng = np.random.default_rng(0)  # numpy's draws: a jax.random draw per shape would compile ~75 programs (~8 s)
    values = [
        jnp.asarray(0.05 * rng.standard_normal(x.shape), x.dtype)
        if jnp.issubdtype(x.dtype, jnp.floating)
        else jnp.zeros(x.shape, x.dtype)
        for x in leaves
    ]
    model = nnx.merge(graphdef, jax.tree.unflatten(tree, values))
    if dropout:
        model.set_attributes(qwix_rngs=nnx.Rngs(dropout=3))  # as crosstune.train.jax.model.build_model does
    if scan:
        with mesh_context(mesh):
            stack_layers(model, mesh)
    return model


def _inputs(length: int = LENGTH) -> dict:
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    segments = np.ones((2, length), np.int32)
    segments[0, 20:] = 2
    return {
        "input_tokens": jnp.asarray(rng.integers(0, 128, segments.shape), jnp.int32),
        "input_mask": jnp.asarray(rng.random(segments.shape) < 0.9),
        "positions": jnp.asarray(np.r_[np.arange(20), np.arange(length - 20)][None].repeat(2, 0), jnp.int32),
        "segment_ids": jnp.asarray(segments),
        "loss_weight": jnp.full((2,), 1 / 60, jnp.float32),
    }


def _step(model, mesh):
    """Loss and LoRA gradients (by tunix's per-layer names) of crosstune's loss, and the dropout RNG count after it."""
    import jax
    from flax import nnx

    from crosstune.train.jax.layer_scan import per_layer
    from crosstune.train.jax.lora import param_name
    from crosstune.train.jax.loss import loss_fn
    from crosstune.train.jax.model import mesh_context

    with mesh_context(mesh):
        fn = nnx.jit(nnx.value_and_grad(loss_fn, argnums=nnx.DiffState(0, nnx.LoRAParam)))
        loss, grads = fn(model, **_inputs())
    counts = [int(x) for x in jax.tree.leaves(nnx.state(model, nnx.RngCount))]
    named = per_layer({param_name(p): np.asarray(g) for p, g in jax.tree_util.tree_leaves_with_path(grads)})
    return float(loss), named, counts


def _assert_same_step(scanned, unrolled) -> None:
    loss, grads, counts = scanned
    ref_loss, ref_grads, ref_counts = unrolled
    assert loss == pytest.approx(ref_loss, rel=LOSS_RTOL)
    assert grads.keys() == ref_grads.keys() and grads
    worst = max(np.abs(grads[k] - ref_grads[k]).max() / np.abs(ref_grads[k]).max() for k in grads)
    assert worst <= GRAD_RTOL, worst
    assert counts == ref_counts and counts[0] > 0  # one shared stream, advanced by every draw of every layer


@pytest.fixture(scope="module")
def mesh():
    from crosstune.train.jax.model import make_mesh

    return make_mesh(1, 1)


@pytest.mark.slow  # ~26 s each; the default suite has the E layout's (two segments, a tail, dropout) below
@pytest.mark.parametrize("remat", [None, "full", "dots"])
def test_stacked_layers_compute_the_unrolled_step(mesh, remat):
    """7 layers of period 2: 3 groups stacked and the 7th layer after them."""
    scanned = _step(_model(mesh, 7, scan=True, remat=remat), mesh)
    _assert_same_step(scanned, _step(_model(mesh, 7, scan=False, remat=remat), mesh))
    assert len(scanned[1]) == 7 * 6 * 2  # 7 layers × 6 adapted modules × A, B, by their per-layer names


def test_the_model_holds_one_array_per_tensor_of_a_group(mesh):
    """The 7 layers' LoRA params: 2 positions × 6 modules × A, B stacked [3, ...], and the 7th layer's 12."""
    from flax import nnx

    from crosstune.train.jax.layer_scan import stacked
    from crosstune.train.jax.lora import param_name

    model = _model(mesh, 7, scan=True)
    assert stacked(model)
    import jax

    names = {param_name(p): x.shape for p, x in jax.tree_util.tree_leaves_with_path(nnx.state(model, nnx.LoRAParam))}
    stack = [n for n in names if n.startswith("layers.0.stack.")]
    assert len(stack) == 2 * 6 * 2 and all(names[n][0] == 3 for n in stack)
    assert len([n for n in names if n.startswith("layers.0.tail.6.")]) == 12


def test_moe_layers_scan_without_a_copy_of_their_transposed_experts(mesh):
    """The 26B-A4B's layout (8 experts of width 32 beside the dense MLP), 4 layers: 2 groups of 2. Tunix transposes
    each layer's experts for ragged_dot ([E, 2, X, D] to [E, D, 2X]); the scan's residuals hold no such copy
    ([G, E, D, 2X], one per group position without crosstune.train.jax.moe.ScannedMoE), only the stacked weights
    themselves: each layer's backward transposes them again (XLA for the 26B-A4B's 2 layers on one v5e chip: 13.69
    GB against 15.74). The same loss and gradients as unrolled, dropout on."""
    from flax import nnx
    from jax._src.ad_checkpoint import saved_residuals

    from crosstune.train.jax.loss import loss_fn
    from crosstune.train.jax.model import mesh_context

    scanned = _model(mesh, 4, scan=True, moe=True)
    graphdef, state = nnx.split(scanned)
    with mesh_context(mesh):
        saved = saved_residuals(lambda s: loss_fn(nnx.merge(graphdef, s), **_inputs()), state)
    looped = [a.shape for a, where in saved if where.startswith("output of scan")]
    assert looped and (2, 8, 64, 64) not in looped, looped  # G, E, D (64), 2X (2 × 32)
    assert any("['moe']['gating_einsum']" in where for _, where in saved)  # the stacked weights, as they are
    _assert_same_step(_step(scanned, mesh), _step(_model(mesh, 4, scan=False, moe=True), mesh))


@pytest.mark.slow  # ~20 s, beyond the default suite's budget (tests/budget.toml)
def test_gemma3_two_groups_and_a_tail(mesh):
    scanned = _step(_model(mesh, 14, scan=True, family="gemma3"), mesh)
    _assert_same_step(scanned, _step(_model(mesh, 14, scan=False, family="gemma3"), mesh))


@pytest.mark.slow
def test_dropout_masks_are_drawn_in_the_scan(mesh):
    """Without dropout the loss differs (so the masks above were drawn and matched, not absent): the LoRA branch
    is small next to the base at these weights (1.6e-4 of the loss), far above fp32 rounding (~1e-7)."""
    with_dropout = _step(_model(mesh, 4, scan=True), mesh)[0]
    without = _step(_model(mesh, 4, scan=True, dropout=0.0), mesh)[0]
    assert abs(with_dropout - without) > 1e-5 * abs(without)


def _lowered_text(model, mesh) -> str:
    """The StableHLO of the loss and its LoRA gradients (nnx.jit's lowering: the program the step runs)."""
    from flax import nnx

    from crosstune.train.jax.loss import loss_fn
    from crosstune.train.jax.model import mesh_context

    with mesh_context(mesh):
        fn = nnx.jit(nnx.value_and_grad(loss_fn, argnums=nnx.DiffState(0, nnx.LoRAParam)))
        return fn.lower(model, **_inputs()).lowered.as_text()


def test_the_stacked_program_is_a_loop_that_does_not_grow_with_depth(mesh):
    scanned = {n: _lowered_text(_model(mesh, n, scan=True), mesh) for n in (4, 8)}  # 2 and 4 groups
    unrolled = {n: _lowered_text(_model(mesh, n, scan=False), mesh) for n in (4, 8)}
    loops = {n: text.count("stablehlo.while") for n, text in scanned.items()}
    assert loops[4] == loops[8] > unrolled[4].count("stablehlo.while")  # the forward's scan and its transpose
    lines = {n: text.count("\n") for n, text in scanned.items()}
    assert lines[4] == lines[8], lines  # the same program: only the groups' dimension differs
    assert unrolled[8].count("\n") > 1.5 * unrolled[4].count("\n")


def _remats(jaxpr) -> list[bool]:
    """prevent_cse of every jax.checkpoint in `jaxpr` and the jaxprs its equations hold (a scan's body)."""
    import jax

    out = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "remat2":  # jax.checkpoint's primitive
            out.append(eqn.params["prevent_cse"])
        for value in eqn.params.values():
            for inner in value if isinstance(value, (list, tuple)) else [value]:
                if isinstance(inner, jax.extend.core.ClosedJaxpr):
                    out += _remats(inner.jaxpr)
                elif isinstance(inner, jax.extend.core.Jaxpr):
                    out += _remats(inner)
    return out


def test_a_scanned_layer_s_recompute_has_no_barrier_against_cse(mesh):
    """dots in a scan: each layer's jax.checkpoint without prevent_cse's barrier (crosstune.train.jax.remat.in_scan),
    one per layer of the body; unrolled, with it, one per layer. In a scan the forward and the backward are two
    loops, so XLA can't merge a recompute into its forward, and the barrier only made it copy each layer's slice of
    the stacked weights and kept outputs (the 31B's 4 layers for one v5e chip: 46 dynamic-slice fusions, 5 without)."""
    import jax
    from flax import nnx

    from crosstune.train.jax.loss import loss_fn
    from crosstune.train.jax.model import mesh_context

    found = {}
    for scan in (True, False):
        graphdef, state = nnx.split(_model(mesh, 4, scan=scan, remat="dots"))
        with mesh_context(mesh):
            jaxpr = jax.make_jaxpr(lambda s, g=graphdef: loss_fn(nnx.merge(g, s), **_inputs()))(state)
        found[scan] = _remats(jaxpr.jaxpr)
    assert found == {True: [False, False], False: [True] * 4}  # a body of 2 layers (period 2); 4 layers unrolled


def test_dots_and_attention_keeps_the_splash_kernel_s_residuals(mesh):
    """recompute dots_and_attention (what a scan's body needs to hold what XLA holds unrolled): each layer's
    backward reads splash's output [B, N, T, H] and logsumexp [B, N, T], saved by the name the kernel gives them,
    where dots saves neither (the backward runs the kernel's forward again); both save the weight matmuls'."""
    from flax import nnx
    from jax._src.ad_checkpoint import saved_residuals  # jax.ad_checkpoint exports only the printing form

    from crosstune.train.jax.attention import use_splash
    from crosstune.train.jax.loss import loss_fn
    from crosstune.train.jax.model import mesh_context

    kept = {}
    for mode in ("dots", "dots_and_attention"):
        model = _model(mesh, 2, scan=False, remat=mode, dropout=0.0)
        assert use_splash(model, interpret=True, block=128) == 2
        graphdef, state = nnx.split(model)
        with mesh_context(mesh):
            saved = saved_residuals(lambda s, g=graphdef: loss_fn(nnx.merge(g, s), **_inputs(128)), state)
        kept[mode] = sorted(a.shape for a, where in saved if "train/jax/attention.py" in where)
        kept[mode, "dots"] = sum(where.startswith("output of dot_general") for _, where in saved)
    assert kept["dots"] == []
    assert kept["dots_and_attention"] == [(2, 4, 128), (2, 4, 128), (2, 4, 128, 32), (2, 4, 128, 64)]  # both layers
    assert kept["dots", "dots"] == kept["dots_and_attention", "dots"] > 0


def test_e_sizes_stack_in_two_segments(mesh):
    """The E layout, 9 layers of which the last 5 read layers 2's (sliding) and 3's (global) K/V (tunix's sharing
    pattern), every layer with a per-layer input: the 4 that own their K/V stacked (2 groups of 2), then the 5 that
    share (2 groups of 2 and one after, MLPs twice as wide); the same loss and gradients as unrolled, dropout on."""
    from crosstune.train.jax.layer_scan import segments

    unrolled = _model(mesh, 9, scan=False, kv_shared=5)
    assert segments(unrolled) == [(0, 4), (4, 9)]
    assert sorted(set(unrolled.kv_cache_sharing_patterns[4:])) == [2, 3]
    scanned = _model(mesh, 9, scan=True, kv_shared=5)
    layout = [(s.first, s.groups, len(s.stack), sorted(s.tail), s.sources) for s in scanned.layers]
    assert layout == [(0, 2, 2, [], (2, 3)), (4, 2, 2, ["8"], ())]
    result = _step(scanned, mesh)
    _assert_same_step(result, _step(unrolled, mesh))
    assert "layers.8.per_layer_input_gate.w_lora_a" not in result[1]  # LoRA adapts attention and MLP only
    assert {f"layers.{i}.mlp.up_proj.kernel_lora_a" for i in range(9)} <= result[1].keys()


def test_refuses_kv_sharing_that_does_not_split_in_two(mesh):
    from crosstune.train.jax.layer_scan import ScanError, segments

    model = _model(mesh, 9, scan=False, kv_shared=5, dropout=0.0)
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


def _runs_agree(base, tmp_path, synth_corpus_dir, last_layer: int) -> None:
    """The whole jax run (build_model, HeldOnceStep, AdamW with the block LoRA's mask, LoRA dropout, an Orbax
    checkpoint) on `base`, unrolled and stacked: the same losses (the gradients agree to ~1e-6, above), the same
    adapter up to what AdamW makes of that: an entry whose gradient is ~0 moves by up to lr a step either way
    (m/sqrt(v) = ±1 at the first step), so 3 steps part two runs by at most 2 · 3 · lr. The adapter exported from the
    stacked checkpoint is the run's own, exactly (a change of layout only)."""
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


@pytest.mark.slow
def test_a_run_with_stacked_layers_trains_and_exports_as_unrolled(tmp_path, tiny_gemma4_dir, synth_corpus_dir):
    """13 layers: 2 groups of 6 stacked + 1 after."""
    _runs_agree(_deepened(tiny_gemma4_dir, tmp_path / "deep", 13), tmp_path, synth_corpus_dir, 12)


@pytest.mark.slow
def test_an_e_size_run_with_stacked_segments_trains_and_exports_as_unrolled(
    tmp_path, tiny_gemma4_e_dir, synth_corpus_dir
):
    """The tiny E model (per-layer inputs, the last 3 of 6 layers KV-shared): two segments, names `layers.1.…`."""
    _runs_agree(tiny_gemma4_e_dir, tmp_path, synth_corpus_dir, 5)
