"""`crosstune serve plan`: vLLM's tensor-parallel rules on the seed's targets, KV capacity, flags; CPU refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from crosstune.families import get_family
from crosstune.recipe import load_recipe
from crosstune.serve.capacity import kv_bytes_per_token, vllm_tp_layout, vllm_tps
from crosstune.serve.engine import ServeError, cpu_head_dim_problems, max_lora_rank
from crosstune.serve.plan import serve_plan
from tests.helpers.paths import RECIPES

G4_31B = get_family("gemma4").spec("31b")


def recipe(name: str, **serve):
    r = load_recipe(RECIPES / f"{name}.yaml")
    for k, v in serve.items():
        setattr(r.serve, k, v)
    return r


def test_gemma4_31b_tp8_replicates_global_kv_heads():
    """4 global KV heads, tp=8: the training planner can't shard them; vLLM serves them, each head on 2 ranks."""
    assert G4_31B.tp_problems(8)  # Tunix/Qwix shard: indivisible
    layout = vllm_tp_layout(G4_31B, 8)
    assert layout.ok and len(layout.replicated) == 1 and "4 KV heads on global layers (10)" in layout.replicated[0]
    assert "replicated on 2 ranks" in layout.replicated[0]
    assert vllm_tp_layout(G4_31B, 2).replicated == [] and vllm_tp_layout(G4_31B, 4).replicated == []
    assert vllm_tps(G4_31B, 8) == [1, 2, 4, 8]
    bad = vllm_tp_layout(G4_31B, 3)
    assert not bad.ok and "32 query heads on sliding layers (50) not divisible by tp=3" in bad.errors[0]
    assert "tp=6 is not a multiple of the 4 KV heads" in " ".join(vllm_tp_layout(G4_31B, 6).errors)


@pytest.mark.parametrize(
    ("name", "target", "tp"),
    [
        ("gemma4-31b-2xh100", "2xh100", 2),
        ("gemma4-31b-tpu-v5p-8", "tpu-v5p-8", 4),
        ("gemma4-31b-2xh100", "tpu-v6e-8", 8),  # the seed's TPU serving run
        ("gemma4-31b-2xh100", "1xh200", 1),
        ("gemma3-27b-tpu-v6e-8", "tpu-v6e-8", 8),
    ],
)
def test_seed_targets_plan(name, target, tp):
    plan = serve_plan(recipe(name), target)
    assert plan.ok, plan.blockers
    assert plan.tp == tp and f"--tensor-parallel-size {tp}" in plan.command()
    platform = plan.target.chip.platform
    assert f"vllm/vllm-{'openai' if platform == 'gpu' else 'tpu'}:latest serve /model" in plan.docker
    assert ("--disable_chunked_mm_input" in plan.command()) == (platform == "tpu" and plan.spec.family == "gemma4")
    assert all(f.why for f in plan.flags)  # every flag explained
    bf16, fp8 = plan.capacities["bf16"], plan.capacities["fp8"]
    # fp8 KV: one byte per element instead of two -> exactly twice the tokens (floor rounding: ±1)
    assert abs(fp8.kv_tokens - 2 * bf16.kv_tokens) <= 1 and bf16.kv_tokens > 0
    assert all(fp8.sequences[n] >= 2 * bf16.sequences[n] for n in bf16.sequences)


def test_kv_bytes_per_token_by_hand():
    # tp=2: sliding 50 layers × (K+V) × 8 heads × 256 × 2 B; global 10 × 2 × 2 heads × 512 × 2 B
    assert kv_bytes_per_token(G4_31B, 2, "bfloat16") == 50 * 2 * 8 * 256 * 2 + 10 * 2 * 2 * 512 * 2
    # tp=8: the 4 global heads are replicated -> one per rank, not half a head
    assert kv_bytes_per_token(G4_31B, 8, "fp8") == 50 * 2 * 2 * 256 + 10 * 2 * 1 * 512


def test_blockers_name_the_fix():
    too_long = serve_plan(recipe("gemma4-31b-2xh100", max_model_len=4_000_000), "1xh200")
    assert not too_long.ok and "not one sequence of max_model_len=4000000 fits" in too_long.blockers[0]
    plan = serve_plan(recipe("gemma4-31b-2xh100"), "tpu-v6e-8", tp=3)
    assert "vLLM accepts tp ∈ [1, 2, 4, 8]" in plan.blockers[-1]
    assert "has 8 chips" in serve_plan(recipe("gemma4-31b-2xh100"), "tpu-v6e-8", tp=16).blockers[0]


def test_cpu_plan_and_head_sizes():
    plan = serve_plan(recipe("tiny-cpu"), "cpu", model_dir=Path("/nonexistent"))
    assert plan.ok and plan.docker is None and plan.env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert "--dtype float32" in plan.command() and "--host 127.0.0.1" in plan.command()
    fam = get_family("gemma4")
    assert cpu_head_dim_problems(fam.spec("tiny")) == []
    old_tiny = get_family("gemma4").spec_from_hf_config({**fam.hf_config(fam.spec("tiny")), "head_dim": 16})
    assert cpu_head_dim_problems(old_tiny) == [
        "sliding layers have head_dim 16; vLLM's CPU attention accepts only "
        "[32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512]"
    ]


def test_lora_rank_rounded_up_to_an_allowed_value():
    assert [max_lora_rank(r) for r in (1, 4, 8, 9, 64, 300, 512)] == [1, 8, 8, 16, 64, 320, 512]
    with pytest.raises(ServeError, match="exceeds"):
        max_lora_rank(513)
    plan = serve_plan(recipe("gemma4-31b-2xh100"), "2xh100", adapter=Path("/a"), adapter_rank=48)
    assert "--max-lora-rank 64" in plan.command() and "--enable-lora" in plan.command()
    assert "-v /a:/adapter:ro" in plan.docker and "gemma4-31b-2xh100-lora=/adapter" in plan.docker


def test_cli_serve_plan_exit_codes():
    from typer.testing import CliRunner

    from crosstune.cli import _register, app

    if not any(c.name == "export" for c in app.registered_commands):
        _register()
    runner = CliRunner()
    ok = runner.invoke(app, ["serve", "plan", str(RECIPES / "gemma4-31b-2xh100.yaml"), "--target", "tpu-v6e-8"])
    assert ok.exit_code == 0, ok.output
    assert "vllm/vllm-tpu:latest" in ok.output and "replicated on 2 ranks" in ok.output
    bad = runner.invoke(app, ["serve", "plan", str(RECIPES / "gemma4-31b-2xh100.yaml"), "--tp", "3"])
    assert bad.exit_code == 1 and "can't serve" in bad.output


@pytest.mark.parametrize("args", [["--tp", "8"], ["--tp", "3"], ["--target", "2xh100", "--tp", "8"]])
def test_cli_serve_plan_refuses_before_printing_any_command(args):
    """Issue 21, item 7: a plan that can't serve says so right after the heads table, and prints no `vllm serve`
    command, docker line or flag table to copy."""
    from typer.testing import CliRunner

    from crosstune.cli import _register, app

    if not any(c.name == "export" for c in app.registered_commands):
        _register()
    bad = CliRunner().invoke(app, ["serve", "plan", str(RECIPES / "gemma4-31b-tpu-v5p-8.yaml"), *args])
    assert bad.exit_code == 1
    assert "can't serve" in bad.output and "vllm serve" not in bad.output and "docker" not in bad.output
    assert "--served-model-name" not in bad.output and "capacity per chip" not in bad.output


def test_served_model_name_follows_the_target():
    """Issue 21, item 7: the recipe's name on its own hardware; on another target the model's name (a recipe named
    for 2xh100 must not name a TPU server); --name overrides both, the adapter following it."""
    home = serve_plan(recipe("gemma4-31b-2xh100"), "2xh100")
    assert "--served-model-name gemma4-31b-2xh100 " in home.command()
    away = serve_plan(recipe("gemma4-31b-2xh100"), "tpu-v6e-8", adapter=Path("/a"), adapter_rank=64)
    assert "--served-model-name gemma-4-31b-it " in away.command() and "gemma-4-31b-it-lora=/a" in away.command()
    assert "gemma-4-31b-it-lora=/adapter" in away.docker and "gemma4-31b-2xh100" not in away.docker
    named = serve_plan(recipe("gemma4-31b-2xh100"), "1xh200", name="coder")
    assert "--served-model-name coder " in named.command()
