"""What each jax recompute mode keeps, as the planner counts it against XLA's compile: `dots` keeps every weight
matmul's output (a LoRA target's B output beside its frozen matmul's), `dots_and_attention` splash's residuals too,
and with it a scan over layer groups holds what the planner's unrolled model says (crosstune.train.jax.remat)."""

from __future__ import annotations

import pytest

from crosstune.planner import plan_recipe
from crosstune.planner.aot_report import with_layers
from crosstune.planner.planned_recipe import load_for_plan
from crosstune.planner.timing import work
from tests.helpers.paths import RECIPES

G4 = RECIPES / "gemma4-31b-tpu-v5p-8.yaml"
ONE_CHIP = ["hardware=tpu-v5e-1", "backend.jax.mesh.fsdp=1", "backend.jax.mesh.tp=1", "serve.tensor_parallel_size=1"]
REMAT = ["train.gradient_checkpointing=true", "train.kernels.recompute="]


def _plan(sets: list[str], layers: int | None = None, recipe=G4):
    loaded = load_for_plan(recipe, sets)
    planned = plan_recipe(loaded, "jax")
    return (planned if layers is None else plan_recipe(loaded, "jax", spec=with_layers(planned.spec, layers))), loaded


def test_dots_keeps_each_lora_target_s_b_output_beside_its_matmul_s():
    """`dots` saves every dot's output: a LoRA target's frozen matmul and its B matmul (as wide, summed after) both.
    XLA's compile of the 31B's first 6 layers on v5p-8 with dots + splash: 4.66 GB per chip (docs/BENCHMARKS.md;
    5.00 before the loss's chunks were serialized and the dropout's draws sharded, 4.56 with 32-bit draws); counting
    one output per target the planner said 3.96, then 4.54 (−2.6 %), and 4.45 (−4.6 %) since the recomputed layer's
    working set no longer counts again the q/k/v and gate/up outputs dots keeps (the v5e chip's 4 layers with
    dots_and_attention, unrolled: +6.8 %, +10.4 % before; tests/planner/test_timing.py), and 4.30 (−7.9 %) since it
    holds the larger of the loss and a layer's recompute, not their sum (the chip's 4 layers: +1.8 %)."""
    six = _plan([REMAT[0], REMAT[1] + "dots"], 6)[0].jax_memory
    assert six.total == pytest.approx(4.30, abs=0.01) and abs(six.total / 4.662 - 1) < 0.10
    fewer = _plan([REMAT[0], REMAT[1] + "dots", "lora.targets=[q]"], 6)[0].jax_memory
    saved = six.activations - fewer.activations
    gate_up_down_kvo = 6 * 3072 * (2 * 5376 + 5376 / 4 * 2) * 2 / 1e9  # gate, up ([F/tp]), o, down ([D/tp]), bf16
    assert saved > gate_up_down_kvo  # the six other targets' B outputs (k and v too) are no longer saved


@pytest.mark.parametrize(
    ("recipe", "xla_gb", "planner_gb"),
    [("gemma4-31b-tpu-v5p-8.yaml", 36.60, 33.88), ("gemma4-e4b-tpu-v6e-4.yaml", 15.14, 15.01)],
)
def test_a_scan_keeping_matmuls_and_attention_holds_what_the_planner_s_unrolled_model_says(recipe, xla_gb, planner_gb):
    """With recompute dots_and_attention a scanned step keeps what the unrolled one keeps but its elementwise tensors,
    so the planner's unrolled model holds for it, but for the weights gathered over fsdp (one group's at a time:
    crosstune.planner.memory). XLA's compile of each recipe's full depth scanned with it (`plan RECIPE --compile --set
    train.gradient_checkpointing=true --set train.kernels.recompute=dots_and_attention --set
    backend.jax.scan_layers=true`, docs/BENCHMARKS.md): the 31B on v5p-8 (fsdp 1) 36.60 GB, XLA's total
    (2026-12-07; 36.51 while a scanned layer's recompute kept jax.checkpoint's barrier against CSE); the E4B on v6e-4
    (fsdp 2; its recipe, its 7 groups in one body) 15.14, XLA's peak (2026-12-07, stop 65; total 16.69), where the
    planner said 18.44 while it counted every layer's gathered weights. Without recompute the same scans hold 59.21
    and 39.53 GB, far outside it."""
    sets = [REMAT[0], REMAT[1] + "dots_and_attention", "backend.jax.scan_layers=true"]
    memory = _plan(sets, recipe=RECIPES / recipe)[0].jax_memory
    assert memory.total == pytest.approx(planner_gb, abs=0.01)
    assert abs(memory.total / xla_gb - 1) < 0.10


def test_dots_and_attention_keeps_splash_s_residuals_and_skips_its_forward():
    """recompute dots_and_attention is dots plus splash's residuals kept: the planner adds each layer's output
    [tokens, heads × head_dim] and fp32 logsumexp [heads, tokens] to dots' memory, and prices the attention as the
    step without recompute does (no second forward: 2 of splash's matmuls per block pair fewer than dots)."""
    one_chip = [*ONE_CHIP, "data.max_seq_len=4096"]
    planned = {mode: _plan([*one_chip, REMAT[0], REMAT[1] + mode], 4) for mode in ("dots", "dots_and_attention")}
    planned["none"] = _plan(one_chip, 4)
    spec = planned["none"][0].spec
    splash = (
        sum(4096 * spec.kind(i).num_heads * (spec.kind(i).head_dim * 2 + 4) for i in range(4)) / 1e9
    )  # 1 row a chip
    memory = {mode: plan.jax_memory.activations for mode, (plan, _) in planned.items()}
    assert memory["dots_and_attention"] - memory["dots"] == pytest.approx(splash, rel=1e-9)
    kinds = {mode: work(plan, recipe) for mode, (plan, recipe) in planned.items()}
    assert kinds["dots_and_attention"]["attention"] == kinds["none"]["attention"] < kinds["dots"]["attention"]
    assert kinds["dots_and_attention"]["matmul"] == kinds["dots"]["matmul"] == kinds["none"]["matmul"]  # kept
