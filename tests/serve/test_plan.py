"""`crosstune serve plan`: vLLM's tensor-parallel rules on the seed's targets, KV capacity, flags; CPU refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from crosstune.families import get_family
from crosstune.recipe import load_recipe
from crosstune.serve.capacity import kv_bytes_per_token, vllm_tp_layout, vllm_tps
from crosstune.serve.engine import TEXT_ONLY_FLAG, ServeError, cpu_head_dim_problems, max_lora_rank
from crosstune.serve.layouts import why_not
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


# Every dp × tp filling the target's chips, widest tp first, keyed (dp, tp): KV tokens one replica holds (None: vLLM
# won't start it: weights over the HBM budget, or no max_model_len sequence fits); and the layout served (the rule's,
# or the recipe's tp on its own hardware)
LAYOUTS = [
    ("gemma4-31b-tpu-v5p-8", "tpu-v6e-8", (2, 4), {(1, 8): 153753, (2, 4): 49923, (4, 2): None, (8, 1): None}),
    ("gemma4-31b-tpu-v5p-8", "tpu-v5p-8", (1, 4), {(1, 4): 301610, (2, 2): 116618, (4, 1): 24122}),
    ("gemma4-31b-2xh100", "2xh100", (1, 2), {(1, 2): 84272, (2, 1): None}),
    ("gemma4-31b-2xh100", "1xh200", (1, 1), {(1, 1): 68874}),
    ("gemma4-31b-2xh100", "8xh100", (2, 4), {(1, 8): 496578, (2, 4): 236918, (4, 2): 84272, (8, 1): None}),
    ("gemma4-31b-2xh100", "tpu-v5e-8", (1, 8), {(1, 8): 36566, (2, 4): None, (4, 2): None, (8, 1): None}),
    ("gemma3-27b-tpu-v6e-8", "tpu-v6e-8", (1, 8), {(1, 8): 313410, (2, 4): 103529, (4, 2): None, (8, 1): None}),
    ("gemma4-26b-a4b-tpu-v5p-8", "tpu-v5p-8", (2, 2), {(1, 4): 1150679, (2, 2): 515750, (4, 1): 145854}),
    ("gemma4-26b-a4b-2xh100", "2xh100", (1, 2), {(1, 2): 386367, (2, 1): 81162}),
    ("gemma4-e4b-1xh100", "1xh100", (1, 1), {(1, 1): 939121}),
    ("gemma4-e4b-tpu-v6e-4", "tpu-v6e-4", (2, 2), {(1, 4): 798119, (2, 2): 669264, (4, 1): 204497}),
    ("gemma4-12b-1xh100", "1xh100", (1, 1), {(1, 1): 130593}),
    ("gemma4-12b-tpu-v6e-4", "tpu-v6e-4", (2, 2), {(1, 4): 209987, (2, 2): 81549, (4, 1): None}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "target", "chosen", "tokens"), LAYOUTS)
def test_shipped_targets_layouts_and_capacities(name, target, chosen, tokens):
    plan = serve_plan(recipe(name), target)
    assert plan.ok, plan.blockers
    assert {(lay.dp, lay.tp): lay.capacity.kv_tokens if lay.starts else None for lay in plan.layouts} == tokens
    assert (plan.dp, plan.tp) == chosen and plan.capacities["bf16"].kv_tokens == tokens[chosen]
    assert f"--tensor-parallel-size {plan.tp} " in plan.command()
    assert ("--data-parallel-size" in plan.command()) == (plan.dp > 1)
    if plan.dp > 1:
        assert f"--data-parallel-size {plan.dp} --tensor-parallel-size {plan.tp}" in plan.docker
    platform = plan.target.chip.platform
    assert f"vllm/vllm-{'openai' if platform == 'gpu' else 'tpu'}:latest serve /model" in plan.docker
    assert ("--disable_chunked_mm_input" in plan.command()) == (platform == "tpu" and plan.spec.family == "gemma4")
    assert all(f.why for f in plan.flags)  # every flag explained
    # the hub's checkpoints are multimodal: served for text, every modality's limit 0 (Gemma 4's video too)
    assert TEXT_ONLY_FLAG in plan.command().split() and "--limit-mm-per-prompt" not in plan.command()


def test_31b_on_v6e_8_chooses_dp2_tp4_over_replicating_tp8():
    """The layout rule on v6e-8: tp 8 holds the global layers' 4 KV heads twice; dp 2 × tp 4 splits every head group
    (vLLM's TPU team benchmarks it so). tp 8 holds more tokens per chip (weights split 8 ways), which the reason
    says."""
    plan = serve_plan(recipe("gemma4-31b-tpu-v5p-8"), "tpu-v6e-8")
    assert (plan.dp, plan.tp) == (2, 4) and plan.layout.replicated == []
    assert plan.choice == (
        "no KV head replicated (tp 8 holds the global layers' 4 KV heads ×2); "
        "the most KV tokens per chip of those (12,480)"
    )
    tp8, dp2 = plan.layouts[0], plan.layouts[1]
    assert why_not(plan.spec, tp8, dp2) == (
        "replicates the global layers' 4 KV heads ×2 (1.54× the chosen layout's KV tokens per chip)"
    )
    # per chip: a replica's tokens over its tp chips; 153,753 / 8 and 49,923 / 4
    assert (tp8.kv_tokens_per_chip, dp2.kv_tokens_per_chip) == (19219, 12480)
    # 16,384-token sequences: 9 on the one tp-8 replica; 3 on each of the two tp-4 replicas
    assert (tp8.sequences_total(16384), dp2.sequences_total(16384)) == (9, 6)
    assert why_not(plan.spec, plan.layouts[2], dp2).startswith("won't start: weights 28.7 GiB per chip")
    pinned = serve_plan(recipe("gemma4-31b-tpu-v5p-8"), "tpu-v6e-8", tp=8)
    assert (pinned.dp, pinned.tp) == (1, 8) and "--data-parallel-size" not in pinned.command()
    assert pinned.choice.startswith("pinned by --tp/--dp; the rule would choose dp 2 × tp 4 (this one: replicates")


def test_budget_by_hand_dp2_tp4_on_v6e():
    """KV budget = 32 GB × 0.9 − weights per chip − 2 GiB reserve; tokens = budget ÷ bytes per token per rank
    (tp 4: 50 sliding layers × K+V × 4 heads × 256 × 2 B + 10 global × K+V × 1 head × 512 × 2 B; no sliding cache on
    vLLM-TPU)."""
    plan = serve_plan(recipe("gemma4-31b-tpu-v5p-8"), "tpu-v6e-8")
    cap = plan.capacities["bf16"]
    budget = 32e9 / 2**30 * 0.9 - cap.weights_gib - 2.0
    assert cap.kv_budget_gib == pytest.approx(budget, rel=1e-12)
    assert cap.kv_tokens == int(budget * 2**30 // (50 * 2 * 4 * 256 * 2 + 10 * 2 * 1 * 512 * 2))


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
    assert (
        "= 16 chips but tpu-v6e-8 has 8 chips"
        in serve_plan(recipe("gemma4-31b-2xh100"), "tpu-v6e-8", tp=16).blockers[0]
    )


def test_cpu_plan_and_head_sizes():
    plan = serve_plan(recipe("tiny-cpu"), "cpu", model_dir=Path("/nonexistent"))
    assert plan.ok and plan.docker is None and plan.env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert "--dtype float32" in plan.command() and "--host 127.0.0.1" in plan.command()
    assert TEXT_ONLY_FLAG not in plan.command()  # a tiny model is text-only
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
    assert "vllm/vllm-tpu:latest" in ok.output and "--data-parallel-size 2 --tensor-parallel-size 4" in ok.output
    assert "chosen dp 2 × tp 4: no KV head replicated" in ok.output
    assert "tp 8: replicates the global layers' 4 KV heads ×2" in ok.output
    assert "attention on sliding (head_dim 256), global (head_dim 512): ragged paged attention" in ok.output
    assert "LoRA: vLLM-TPU's JAX model path has no LoRA manager" in ok.output
    bad = runner.invoke(app, ["serve", "plan", str(RECIPES / "gemma4-31b-2xh100.yaml"), "--tp", "3"])
    assert bad.exit_code == 1 and "can't serve" in bad.output


def test_cli_serve_plan_refuses_an_unknown_kv_cache_dtype_in_one_line():
    """An unknown `--kv-cache-dtype` is one line (it was a KeyError's traceback): the recipe schema's list answers."""
    from tests.helpers.serve import cli, one_line_error

    result = cli("serve", "plan", str(RECIPES / "tiny-cpu.yaml"), "--kv-cache-dtype", "bogus")
    assert one_line_error(result) == "error: --kv-cache-dtype 'bogus': one of auto, fp8"


@pytest.mark.parametrize("args", [["--tp", "8"], ["--tp", "3"], ["--target", "2xh100", "--tp", "8"]])
def test_cli_serve_plan_refuses_before_printing_any_command(args):
    """A plan that can't serve says so right after the heads table, and prints no `vllm serve`
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
    """The served model's name: the recipe's on its own hardware; on another target the model's name (a recipe named
    for 2xh100 must not name a TPU server); --name overrides both, the adapter following it."""
    home = serve_plan(recipe("gemma4-31b-2xh100"), "2xh100")
    assert "--served-model-name gemma4-31b-2xh100 " in home.command()
    away = serve_plan(recipe("gemma4-31b-2xh100"), "tpu-v6e-8", adapter=Path("/a"), adapter_rank=64)
    assert "--served-model-name gemma-4-31b-it " in away.command() and "gemma-4-31b-it-lora=/a" in away.command()
    assert "gemma-4-31b-it-lora=/adapter" in away.docker and "gemma4-31b-2xh100" not in away.docker
    named = serve_plan(recipe("gemma4-31b-2xh100"), "1xh200", name="coder")
    assert "--served-model-name coder " in named.command()


@pytest.mark.parametrize(
    ("target", "fp8_kv", "doubles"),
    [
        ("tpu-v5p-8", "bf16", False),
        ("tpu-v5e-8", "bf16", False),
        ("tpu-v6e-8", "storage", True),
        ("2xh100", "native", True),
        ("1xh200", "native", True),
    ],
)
def test_fp8_kv_capacity_is_what_the_chip_allocates(target, fp8_kv, doubles):
    """hardware.CHIPS' fp8_kv (tpu-inference's dtype matrix, #3126, #1136; Hopper): v5 chips allocate bf16 for
    `--kv-cache-dtype fp8`, so the plan shows bf16's capacity for it and says why; elsewhere one byte per element
    (floor rounding: ±1 token)."""
    plan = serve_plan(recipe("gemma4-31b-2xh100", kv_cache_dtype="fp8", max_model_len=4096), target)
    assert plan.ok, plan.blockers
    assert plan.target.chip.fp8_kv == fp8_kv and "--kv-cache-dtype fp8" in plan.command()
    bf16, fp8 = plan.capacities["bf16"], plan.capacities["fp8"]
    if doubles:
        assert abs(fp8.kv_tokens - 2 * bf16.kv_tokens) <= 1 and plan.kv_allocated["fp8"] == "fp8"
    else:
        assert fp8 == bf16 and plan.kv_allocated["fp8"] == "bfloat16"
    warned = [n for n in plan.notes if n.startswith("--kv-cache-dtype fp8 on")]
    assert bool(warned) == (fp8_kv != "native")
    if fp8_kv == "bf16":
        assert "bf16 is allocated" in warned[0] and "capacities are for bfloat16" in warned[0]


def test_cpu_capacity_is_what_vllm_cpu_logs():
    """vllm-cpu 0.32 served the tiny Gemma 4 (1 GiB KV, float32, max_model_len 1024) and logged "CPU KV cache size:
    316,551 tokens, Maximum concurrency for 1,024 tokens per request: 309.13x" (tests/helpers/fake_vllm.KV_LINE).
    Its admission rule by hand: 128-token blocks; the 5 sliding layers (window 32) hold min(1024, 31 + 2 × 2048)
    tokens = 8 blocks, plus one; the global layer 8 blocks: (5 × 9 × 128 × 2·2·32·4 + 8 × 128 × 2·1·64·4) bytes."""
    from crosstune.hardware import HARDWARE
    from crosstune.serve.capacity import capacity, kv_bytes_per_sequence
    from crosstune.serve.engine import kv_paging

    tiny, paging = get_family("gemma4").spec("tiny"), kv_paging(HARDWARE["cpu"], sliding_cache=True)
    assert kv_bytes_per_sequence(tiny, 1, 1024, "float32", paging) == 5 * 9 * 128 * 512 + 8 * 128 * 512
    cap = capacity(
        tiny, 1, weight_dtype="float32", kv_dtype="float32", kv_budget_gib=1.0, lengths=[1024], paging=paging
    )
    assert round(cap.max_concurrency, 2) == 309.13 and cap.engine_tokens == 316551


def test_cli_serve_plan_names_a_missing_adapter_config(tmp_path):
    from typer.testing import CliRunner

    from crosstune.cli import _register, app

    if not any(c.name == "export" for c in app.registered_commands):
        _register()
    args = ["serve", "plan", str(RECIPES / "gemma4-31b-2xh100.yaml"), "--adapter", str(tmp_path)]
    bad = CliRunner().invoke(app, args)
    assert bad.exit_code == 1 and f"--adapter {tmp_path}: no adapter_config.json" in bad.output
    (tmp_path / "adapter_config.json").write_text('{"r": 16}')
    pinned = CliRunner().invoke(app, [*args, "--target", "tpu-v6e-8", "--dp", "1", "--tp", "8"])
    assert pinned.exit_code == 0, pinned.output
    assert "MODEL_IMPL_TYPE=vllm vllm serve" in pinned.output and "--max-lora-rank 16" in pinned.output
    assert "chosen tp 8: pinned by --tp/--dp; the rule would choose dp 2 × tp 4" in pinned.output
