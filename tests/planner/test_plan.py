"""The planner's verdicts for the real Gemma 4 31B and Gemma 3 27B shapes on the seed's hardware."""

from __future__ import annotations

from pathlib import Path

import pytest

from crosstune.planner import plan_recipe, replicated_tensors
from crosstune.planner.planned_recipe import load_for_plan
from tests.helpers.compiled_step import compiled_step
from tests.helpers.paths import REPO

G4 = REPO / "recipes" / "gemma4-31b-tpu-v5p-8.yaml"
G3 = REPO / "recipes" / "gemma3-27b-tpu-v6e-8.yaml"
# hardware -> (fsdp, tp, torch devices): every device used, torch FSDP over the GPUs
HARDWARE = {"tpu-v5p-8": (1, 4, 1), "tpu-v6e-8": (2, 4, 1), "2xh100": (2, 1, 2), "1xh200": (1, 1, 1)}


def _recipe(path: Path, hardware: str, *overrides: str):
    fsdp, tp, gpus = HARDWARE[hardware]
    # a recipe's step is its --search winner on its own hardware (the 31B's and the 27B's recompute nothing, with
    # splash, on their own mesh); moved to other hardware it runs with remat and dense attention on the mesh above,
    # as the recipes' comments say
    home = path.stem.endswith(hardware.removeprefix("tpu"))
    moved = (
        []
        if home
        else [
            "train.gradient_checkpointing=true",
            "backend.jax.attention=dense",
            f"backend.jax.mesh.fsdp={fsdp}",
            f"backend.jax.mesh.tp={tp}",
        ]
    )
    return load_for_plan(
        path,
        [
            *moved,
            f"hardware={hardware}",
            f"backend.torch.devices={gpus}",
            f"backend.torch.fsdp={str(gpus > 1).lower()}",
            "serve.tensor_parallel_size=1",
            *overrides,
        ],
    )


# (recipe, hardware) -> (jax GB per device, torch GB per GPU or None on TPUs), all of which fit. The jax side's logits
# term is the chunked loss's (crosstune.train.jax.logits): one chunk's 2 fp32 + 1 bf16 buffers, not all the logits
FITS = {
    # its recipe (remat off, splash, scanned): XLA at full depth 59.21 GB scanned (−3.7 %), 33.75 unrolled
    (G4, "tpu-v5p-8"): (57.0, None),
    # fsdp 2 × tp 4, full remat, dense, scanned: + one group's layers and the head's embedding gathered over fsdp
    # (2.2 GB; 26.7 in all counting every layer's): XLA's peak at full depth 14.96 GB (−9.8 %; its total 18.04)
    (G4, "tpu-v6e-8"): (13.5, None),
    (G4, "2xh100"): (41.9, 49.4),
    (G4, "1xh200"): (73.7, 81.9),
    (G3, "tpu-v5p-8"): (16.3, None),
    # its recipe (remat off, splash, tp 8, scanned): XLA at full depth 24.99 GB scanned (−10.4 %), 20.68 unrolled
    (G3, "tpu-v6e-8"): (22.4, None),
    (G3, "2xh100"): (34.2, 39.9),
    (G3, "1xh200"): (61.8, 67.0),
}


@pytest.mark.parametrize(("path", "hardware"), list(FITS), ids=[f"{p.stem[:6]}-{h}" for p, h in FITS])
def test_real_models_fit_the_seed_hardware(path, hardware):
    jax_gb, torch_gb = FITS[(path, hardware)]
    recipe = _recipe(path, hardware)
    jax_plan = plan_recipe(recipe, backend="jax")
    assert jax_plan.ok, jax_plan.blockers
    assert jax_plan.jax_memory.total == pytest.approx(jax_gb, abs=0.1)
    assert jax_plan.jax_memory.fits and not jax_plan.replicated
    torch_plan = plan_recipe(recipe, backend="torch")
    if torch_gb is None:
        assert not torch_plan.ok and "runs on GPUs or CPU" in torch_plan.blockers[0]
    else:
        assert torch_plan.ok, torch_plan.blockers
        assert torch_plan.torch_memory.total == pytest.approx(torch_gb, abs=0.1)


def test_gemma4_31b_base_weights_split_over_four_chips():
    plan = plan_recipe(_recipe(G4, "tpu-v5p-8"), backend="jax")
    assert plan.spec.total_params == pytest.approx(30.7e9, rel=0.01)
    assert plan.jax_memory.base == pytest.approx(2 * plan.spec.total_params / 4 / 1e9, rel=0.01)  # bf16 / tp=4
    # the recipe recomputes nothing and scans: every residual of the scan's body (crosstune.planner.scanned), above
    # the unrolled working set; splash keeps no [heads, L, L] scores, so that fits (dense would hold 2× more)
    assert plan.jax_memory.activations == pytest.approx(37.47, abs=0.01)
    assert plan.jax_memory.activations_no_remat == pytest.approx(13.25, abs=0.01)
    dense = plan_recipe(_recipe(G4, "tpu-v5p-8", "backend.jax.attention=dense"), backend="jax").jax_memory
    assert dense.activations_no_remat == pytest.approx(30.49, abs=0.01)


def test_gemma4_31b_tp8_is_rejected_with_reason_options_and_cost():
    recipe = _recipe(G4, "tpu-v6e-8", "backend.jax.mesh.fsdp=1", "backend.jax.mesh.tp=8")
    plan = plan_recipe(recipe, backend="jax")
    assert not plan.ok
    (reason,) = plan.blockers
    assert "tp=8 cannot shard gemma-4-31b: 4 KV heads on global layers (10) not divisible by tp=8" in reason
    assert "Valid: tp ∈ {1, 2, 4}, or tp=8 with backend.jax.replicate_indivisible_heads: true" in reason
    assert "+0.21 GB per device" in reason
    verdicts = {o.tp: o.verdict for o in plan.jax_options}
    # tp=1 and tp=2 (fsdp 8 and 4) fit: scanned under full remat, one group's decoder layers are gathered over fsdp
    # at a time. XLA's compile at fsdp 8 × tp 1 (2026-12-07, stop 65): a peak of 23.66 GB of the 28.8 a program may
    # hold (total 26.33), the planner 26.72 (+12.9 %); it said "out of memory" while it counted every layer's
    assert verdicts == {1: "ok", 2: "ok", 4: "ok", 8: "needs replication"}

    allowed = plan_recipe(
        _recipe(
            G4,
            "tpu-v6e-8",
            "backend.jax.mesh.fsdp=1",
            "backend.jax.mesh.tp=8",
            "backend.jax.replicate_indivisible_heads=true",
        ),
        backend="jax",
    )
    assert allowed.ok and allowed.notes
    globals_ = {f"layers.{i}.attn.k_einsum" for i in allowed.spec.layers_of("global")}
    assert {p.rsplit(".", 1)[0] for p in allowed.replicated} == globals_  # only the global layers' keys


def test_gemma4_31b_tp8_on_v5p8_has_too_few_chips():
    plan = plan_recipe(_recipe(G4, "tpu-v5p-8", "backend.jax.mesh.tp=8"), backend="jax")
    assert any("but tpu-v5p-8 has 4 devices" in b for b in plan.blockers)
    assert any("4 KV heads on global layers" in b for b in plan.blockers)


def test_gemma3_27b_takes_tp8():
    plan = plan_recipe(_recipe(G3, "tpu-v6e-8", "backend.jax.mesh.fsdp=1", "backend.jax.mesh.tp=8"), backend="jax")
    assert plan.ok and not plan.tp_issues


def test_out_of_memory_without_remat():
    recipe = _recipe(
        G4, "tpu-v6e-8", "backend.jax.mesh.fsdp=8", "backend.jax.mesh.tp=1", "train.gradient_checkpointing=false"
    )
    plan = plan_recipe(recipe, backend="jax")
    assert not plan.ok and "> the 28.8 GB a program may hold of 32 GB HBM" in plan.blockers[0]  # 90 % of v6e's 32
    assert "activations" in plan.blockers[0]


def test_torch_devices_beyond_the_gpus():
    plan = plan_recipe(_recipe(G4, "1xh200", "backend.torch.devices=2"), backend="torch")
    assert plan.blockers == ["backend.torch.devices=2 but 1xh200 has 1 GPUs"]


def test_tiny_gemma4_tp4_replication_prediction():
    """What the planner says tp=4 keeps whole on the tiny Gemma 4 (the training test checks the real model)."""
    from crosstune.families import get_family

    spec = get_family("gemma4").spec("tiny")
    got = replicated_tensors(spec, 1, 4)
    assert got == [f"layers.{i}.attn.kv_einsum.w" for i in range(5)] + ["layers.5.attn.k_einsum.w"]
    assert replicated_tensors(spec, 1, 2) == ["layers.5.attn.k_einsum.w"]  # 1 global KV head: kept whole


def test_plan_cli_exit_codes_and_tables():
    from typer.testing import CliRunner

    from crosstune.cli import _register, app

    _register()
    runner = CliRunner()
    ok = runner.invoke(app, ["plan", str(G4)], terminal_width=200)
    assert ok.exit_code == 0, ok.output
    assert "JAX meshes over all devices" in ok.output and "plan ok" in ok.output
    args = ["plan", str(G4), "--set", "hardware=tpu-v6e-8", "--set", "backend.jax.mesh.tp=8"]
    bad = runner.invoke(app, args, terminal_width=200)
    assert bad.exit_code == 1
    assert "4 KV heads on global layers (10) not divisible by tp=8" in bad.output


def test_selective_recompute_adds_the_kept_attention_outputs():
    """torch, 31B on one H200 at the recipe's 3072 tokens: selective recompute keeps each layer's attention output
    (32 heads × head_dim, bf16) and fp32 logsumexp (32 heads) on top of full remat: 50 sliding layers at head_dim
    256 and 10 global ones at 512."""
    full = plan_recipe(_recipe(G4, "1xh200"), backend="torch").torch_memory
    selective = plan_recipe(_recipe(G4, "1xh200", "train.kernels.recompute=selective"), backend="torch")
    kept = 3072 * 32 * (50 * (256 * 2 + 4) + 10 * (512 * 2 + 4)) / 1e9
    assert selective.ok and kept == pytest.approx(3.547, abs=1e-3)
    assert selective.torch_memory.activations == pytest.approx(full.activations + kept, rel=1e-12)
    assert selective.torch_memory.total == pytest.approx(full.total + kept, rel=1e-12)
    assert full.activations_selective == selective.torch_memory.activations  # the table's row, either way
    assert selective.jax_memory.activations_selective is None  # a torch-only mode


def test_torch_on_cpu_is_planned_in_fp32():
    """The torch backend trains in fp32 without a GPU (a bf16 recipe included), so the planner's
    torch column counts 4 bytes per weight there (the 2-layer rehearsal measured 14.8 GB against 4.8 shown)."""
    cpu = ["hardware=cpu", "backend.jax.mesh.fsdp=1", "backend.jax.mesh.tp=1", "serve.tensor_parallel_size=1"]
    plan = plan_recipe(load_for_plan(REPO / "recipes" / "gemma4-31b-2xh100.yaml", [*cpu, "backend.torch.fsdp=false"]))
    assert plan.torch_memory is not None and plan.torch_devices == 2
    assert plan.torch_memory.base == pytest.approx(plan.spec.total_params * 4 / 1e9)
    gpu = plan_recipe(_recipe(G4, "1xh200"))  # bf16 on a GPU: 2 bytes per weight
    assert gpu.torch_memory.base == pytest.approx(plan.spec.total_params * 2 / 1e9)


G4_MOE = REPO / "recipes" / "gemma4-26b-a4b-tpu-v5p-8.yaml"
UNROLLED = "backend.jax.scan_layers=false"  # the XLA figures below: the unrolled step's (the recipe scans)


def test_the_moe_planner_holds_a_few_layers_of_gathered_experts():
    """Gemma 4 26B-A4B on v5p-8 (fsdp 2 × tp 2): the dense layers' fsdp-gathered weights are held to their backward,
    the experts' only where a layer runs (XLA's temp grew 0.18-0.20 GB per layer with remat, not the 0.76 GB of one
    layer's gathered experts): EXPERT_LAYERS_LIVE layers of them, and the LM head's embedding while the loss runs."""
    from crosstune.planner.memory import EXPERT_LAYERS_LIVE

    remat = ["train.gradient_checkpointing=true", "backend.jax.attention=dense", UNROLLED]
    plan = plan_recipe(load_for_plan(G4_MOE, remat), backend="jax")
    experts_one_layer = (128 * 2 * 704 * 2816 / 2 + 128 * 704 * 2816 / 2) * 2 / 1e9  # gate/up + down, / tp, bf16
    assert experts_one_layer == pytest.approx(0.761, abs=1e-3)
    head = 262144 / 2 * 2816 * 2 / 1e9  # the embedding gathered over fsdp, its vocabulary still over tp
    dense = plan.jax_memory.gathered - EXPERT_LAYERS_LIVE * experts_one_layer - head
    assert dense == pytest.approx(30 * 0.0556, abs=0.01)  # attention + the dense MLP of 30 layers, / tp, bf16
    assert plan.jax_memory.total == pytest.approx(17.63, abs=0.01)


@pytest.mark.xfail(
    strict=True, reason="not shipped, not modelled: the unrolled remat MoE's temporaries are 2x the planner's"
)
def test_the_remat_moe_planner_is_within_ten_percent_of_xla_at_full_depth():
    """The 26B-A4B with remat and dense attention (not the shipped recipe: its --search loser) at full depth on
    v5p-8: XLA holds 23.63 GB per chip (arguments 13.29, temp 10.12; docs/BENCHMARKS.md), the planner 17.63 (-25 %):
    its remat term counts one layer's working set, and XLA keeps 0.2 GB per layer more than the planner (6.0 GB at
    30). Strict: when the planner learns what that is, this passes and the mark goes."""
    remat = ["train.gradient_checkpointing=true", "backend.jax.attention=dense", UNROLLED]
    plan = plan_recipe(load_for_plan(G4_MOE, remat), backend="jax")
    assert abs(plan.jax_memory.total / 23.63 - 1) < 0.10


# XLA's compiles of the 26B-A4B's `plan --search` winner (remat none, splash; the recipe as shipped), v5p-8:
# layers -> (arguments, temporaries) GB per chip (docs/BENCHMARKS.md, "TPU v5e chip, measured": the loss's barrier,
# both its outputs used; 16-bit dropout draws), and how near the planner's temporaries are at that depth (the totals:
# within 5 % at each)
MOE_WINNER_XLA = {6: (2.953, 5.872, 0.07), 12: (5.537, 9.829, 0.05), 30: (13.290, 22.347, 0.05)}


@pytest.mark.parametrize("layers", sorted(MOE_WINNER_XLA))
def test_the_moe_planner_matches_xla_with_nothing_recomputed(layers):
    """With nothing recomputed each MoE layer holds its tokens' top-k copies: XLA's temp grows 0.66-0.70 GB per layer
    (6 → 12 → 30 layers); the planner's 0.67 (three [T·k, D] bf16 copies, a fit: docs/BENCHMARKS.md has what XLA's
    buffers hold), the running layer's gathered experts and the head's gathered embedding are within 5 % of XLA's
    temp at 12 and 30 layers and 7 % at 6 (+6.3 %: the barrier's link took 0.13 GB off XLA's temp there, 0.46 at 12
    and 30); the arguments (weights, LoRA and AdamW) are exact per layer."""
    from crosstune.planner.aot_report import with_layers

    recipe = load_for_plan(G4_MOE, [UNROLLED])
    assert not recipe.train.gradient_checkpointing and recipe.backend.jax.attention == "splash"
    spec = plan_recipe(recipe, "jax").spec
    mem = plan_recipe(recipe, "jax", spec=with_layers(spec, layers)).jax_memory
    args, temp, near = MOE_WINNER_XLA[layers]
    assert mem.base + mem.lora == pytest.approx(args, rel=0.02)
    assert mem.gathered + mem.activations + mem.logits == pytest.approx(temp, rel=near)
    assert abs(mem.total / (args + temp) - 1) < 0.05


def test_the_e4b_planner_is_within_ten_percent_of_xla_at_full_depth():
    """Gemma 4 E4B's `plan --search` winner on v6e-4 (remat none, splash, fsdp 2 × tp 2, unrolled; the recipe as
    shipped until it scanned its layers with dots_and_attention, tests/planner/test_recompute_modes.py):
    XLA's full-depth compile holds 18.08 GB per chip (arguments 4.86, temp 12.98, code 0.23; docs/BENCHMARKS.md); the
    planner says 18.08 (+0.0 %: weights, LoRA and AdamW 4.89, the rest 13.19 with the head's embedding gathered over
    fsdp, 0.67 GB, which it left out before and was 10.2 % under; 19.40 GB before the barrier's link held, 18.88 with
    32-bit dropout draws, which XLA kept for the backward at the MLP's width)."""
    unrolled = ["train.gradient_checkpointing=false", "train.kernels.recompute=full", "backend.jax.scan_layers=false"]
    recipe = load_for_plan(REPO / "recipes" / "gemma4-e4b-tpu-v6e-4.yaml", unrolled)
    assert not recipe.train.gradient_checkpointing and recipe.backend.jax.attention == "splash"
    mem = plan_recipe(recipe, "jax").jax_memory
    assert mem.base + mem.lora == pytest.approx(4.863, rel=0.01)
    assert mem.total == pytest.approx(18.08, abs=0.01)
    assert abs(mem.total / 18.08 - 1) < 0.10


def test_the_compile_report_sets_planner_and_xla_in_one_unit():
    """`plan --compile`: the planner's estimate (GB) and XLA's compiled bytes are compared in one unit
    (crosstune.units). A compile whose bytes are exactly the planner's total reads 0.0 % and the same figure in both
    columns; had one side been GiB and the other GB, they would differ by 7.4 % (2^30 / 10^9)."""
    import io

    from rich.console import Console

    from crosstune.planner.aot_report import compile_report
    from crosstune.planner.view import render_compiled
    from crosstune.units import GB, GIB, bytes_to_gib

    plan = plan_recipe(_recipe(G4, "tpu-v5p-8"), "jax")
    total = round(plan.jax_memory.total * GB)
    step = compiled_step(argument_bytes=total - 10**9)
    report = compile_report(plan, step)
    assert report["xla"]["per_device_bytes"] == report["planner"]["per_device_bytes"] == total
    assert abs(report["planner"]["relative_to_xla"]) < 1e-9  # rounding to whole bytes only
    out = io.StringIO()
    render_compiled(report, Console(file=out, width=200))
    text = out.getvalue()
    row = next(line for line in text.splitlines() if line.strip().lstrip("│ ").startswith("total"))
    figure = f"{plan.jax_memory.total:,.2f}"
    assert row.count(figure) == 2 and ("+0.0% vs XLA" in row or "-0.0% vs XLA" in row), row
    assert "Per device, GB" in text and f"host peak RSS {bytes_to_gib(3 * GIB):.1f} GiB" in text


def test_a_scanned_step_s_roofline_counts_its_loop_s_runs_and_its_plan_says_what_the_planner_leaves_out():
    """XLA's cost_analysis counts a loop's body once: a scanned step's roofline adds its loop's later runs
    (crosstune.planner.loops); a record compiled before they were counted gives no roofline and says why; the plan
    notes that its activations are the unrolled step's (crosstune.train.jax.layer_scan)."""
    import io

    from rich.console import Console

    from crosstune.planner.aot_report import SCANNED_NOTE, compile_report
    from crosstune.planner.estimate import SCANNED_MEMORY_NOTE
    from crosstune.planner.view import render_compiled

    plan = plan_recipe(_recipe(G4, "tpu-v5p-8", "backend.jax.scan_layers=true"), "jax")
    assert SCANNED_MEMORY_NOTE not in plan.notes and plan.ok  # fsdp 1: the scan's residuals are counted
    e4b = load_for_plan(REPO / "recipes" / "gemma4-e4b-tpu-v6e-4.yaml", ["backend.jax.scan_layers=true"])
    assert plan_recipe(e4b, "jax").ok  # KV shared across layers: two segments stacked apart
    unrolled = _recipe(G4, "tpu-v5p-8", "backend.jax.scan_layers=false")
    assert SCANNED_MEMORY_NOTE not in plan_recipe(unrolled, "jax").notes
    report = compile_report(plan, compiled_step(scanned=True))
    assert report["roofline"] is None and report["roofline_note"] == SCANNED_NOTE
    assert compile_report(plan, compiled_step())["roofline"]["micro_step_s"] > 0
    counted = compile_report(plan, compiled_step(scanned=True, loops_counted=True, loop_flops=9e14, loop_bytes=9e12))
    assert counted["roofline_note"] is None and counted["xla"]["loop_flops"] == 9e14
    assert counted["roofline"]["compute_s"] == pytest.approx(1e15 / 459e12)  # 1e14 in the body once + 9e14
    assert "each while loop's body counted for every run" in counted["roofline"]["note"]
    unknown = compile_report(plan, compiled_step(scanned=True, loops_counted=True, uncounted_loops=1))
    assert unknown["roofline"] is None and "no trip count" in unknown["roofline_note"]
    out = io.StringIO()
    render_compiled(report, Console(file=out, width=300))
    assert "roofline: none: the layers run as a scan" in out.getvalue()


def test_the_12b_recipes_fit_their_targets():
    """Gemma 4 12B ("unified"): one H100 in bf16 on torch (base 23.8 GB of 11.9 B parameters), and a v6e-4 at
    fsdp 2 × tp 2 on jax, where the global layers' single KV head (k_einsum) is kept whole on both tp ranks. Its
    recipe scans with full remat, so one group's layers are gathered over fsdp at a time: XLA's peak at full depth
    11.81 GB per chip (its total 14.36; 2026-12-07, `plan recipes/gemma4-12b-tpu-v6e-4.yaml --compile`), the planner
    21.35 while it counted every layer's."""
    gpu = plan_recipe(load_for_plan(REPO / "recipes" / "gemma4-12b-1xh100.yaml"), backend="torch")
    assert gpu.ok and gpu.torch_memory.base == pytest.approx(23.8, abs=0.05)
    assert gpu.torch_memory.total == pytest.approx(39.5, abs=0.1)
    tpu = plan_recipe(load_for_plan(REPO / "recipes" / "gemma4-12b-tpu-v6e-4.yaml"), backend="jax")
    assert tpu.ok and tpu.jax_memory.total == pytest.approx(11.8, abs=0.1) and tpu.jax_memory.fits
    assert abs(tpu.jax_memory.total / 11.81 - 1) < 0.10
    assert tpu.replicated == [f"layers.{i}.attn.k_einsum.w" for i in range(5, 48, 6)]


@pytest.mark.parametrize("value", ["~", "[1]", "four"])
def test_a_planned_value_of_the_wrong_type_is_the_recipe_s_own_refusal(value):
    # the planner explains a wrong mesh; a mesh that is not a number left a pydantic traceback (found by the fuzzer)
    from crosstune.recipe import RecipeError

    with pytest.raises(RecipeError, match=r"error at backend\.jax\.mesh\.tp: "):
        load_for_plan(G4, [f"backend.jax.mesh.tp={value}"])
