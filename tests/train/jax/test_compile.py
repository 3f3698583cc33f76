"""`crosstune plan --compile`: the recipe's real jax step compiled for its TPU topology on this CPU (libtpu from
.venv-tpu-compile), XLA's per-device memory next to the planner's, refusals before compiling, and the hint when
libtpu is missing. The full-depth agreement of planner and compiler is the `tpu_compile` marker's (make
test-tpu-compile: ~10-25 min and ~17 GB per recipe)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from tests.helpers.paths import REPO

G4 = REPO / "recipes" / "gemma4-31b-tpu-v5p-8.yaml"
G3 = REPO / "recipes" / "gemma3-27b-tpu-v6e-8.yaml"
G4_MOE = REPO / "recipes" / "gemma4-26b-a4b-tpu-v5p-8.yaml"
G4_E4B = REPO / "recipes" / "gemma4-e4b-tpu-v6e-4.yaml"
G4_12B = REPO / "recipes" / "gemma4-12b-tpu-v6e-4.yaml"
TINY = REPO / "recipes" / "tiny-cpu.yaml"
TINY_ON_V5P = [
    "--set",
    "hardware=tpu-v5p-8",
    "--set",
    "backend.jax.mesh.fsdp=2",
    "--set",
    "backend.jax.mesh.tp=2",
    "--set",
    "data.max_seq_len=128",
    "--set",
    "lora.dropout=0.05",
]
AGREEMENT = 0.10  # the bound the planner is held to: within ±10 % of what XLA says a device holds (its peak)
# Outputs that reuse no donated buffer at real size: the loss, the grad norm and small scalars (12.6 KB measured at
# full depth for both TPU recipes, docs/BENCHMARKS.md); a second copy of the base would be gigabytes.
UNALIASED = 64 * 1024


def _libtpu():
    from crosstune.train.jax.aot_process import LibtpuMissing, find_libtpu

    try:
        return find_libtpu()
    except LibtpuMissing as e:
        pytest.skip(str(e))


def _plan(*args: str, env: dict | None = None):
    from crosstune.cli import _register, app

    _register()
    return CliRunner().invoke(app, ["plan", *args], env=env, terminal_width=200)


def test_missing_libtpu_says_how_to_install_it(tmp_path):
    result = _plan(str(G4), "--compile", "--json", env={"CROSSTUNE_TPU_COMPILE_ENV": str(tmp_path / "none")})
    assert result.exit_code == 1
    assert f"{tmp_path / 'none'}: no libtpu. --compile needs libtpu (libtpu==0.0.42.*" in result.output
    assert "make tpu-compile-env" in result.output and "CROSSTUNE_TPU_COMPILE_ENV" in result.output


def test_the_pin_is_the_one_the_make_target_installs():
    from crosstune.train.jax.aot_process import LIBTPU_REQUIREMENT

    assert (REPO / "requirements-tpu-compile.txt").read_text().split() == [LIBTPU_REQUIREMENT]


def test_a_mesh_the_planner_refuses_is_refused_before_compiling(tmp_path):
    """tp=8 can't split Gemma 4 31B's 4 global KV heads: the planner's reason, no compile (and so no libtpu)."""
    env = {"CROSSTUNE_TPU_COMPILE_ENV": str(tmp_path / "none")}
    args = ("--set", "hardware=tpu-v5p-16", "--set", "backend.jax.mesh.tp=8", "--compile")
    result = _plan(str(G4), *args, env=env)
    assert result.exit_code == 1, result.output
    assert "4 KV heads on global layers (10) not divisible by tp=8" in result.output
    assert "not compiled" in result.output and "libtpu" not in result.output
    as_json = json.loads(_plan(str(G4), *args, "--json", env=env).stdout)
    assert not as_json["ok"] and "not divisible by tp=8" in as_json["blockers"][0]


def test_compile_needs_a_tpu_target():
    result = _plan(str(TINY), "--compile")
    said = "hardware cpu: --compile compiles for a TPU topology: set hardware to one of tpu-v5p-8"
    assert result.exit_code == 1 and said in result.output


def test_layers_only_with_compile():
    result = _plan(str(G4), "--layers", "2")  # a refusal: one line, exit 1 (exit 2 is typer's own usage errors)
    assert result.exit_code == 1 and "--layers goes with --compile" in result.output


def test_tiny_step_compiles_for_a_v5p_8(capfd):
    """The tiny Gemma 4 recipe's first layer on a v5p-8 (2 × 2 mesh, LoRA dropout): the JSON object's fields, the
    frozen base held once (every output reuses a donated buffer but the loss and grad norm), progress on stderr."""
    _libtpu()
    result = _plan(str(TINY), *TINY_ON_V5P, "--compile", "--layers", "1", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    x = report["xla"]
    assert report["topology"] == "v5p:2x2x1" and report["device_kind"] == "TPU v5" and report["devices"] == 4
    assert report["layers"] == {"compiled": 1, "model": 6, "full_depth": False}
    assert report["hbm_bytes_per_device"] == 95_000_000_000 and report["fits"]
    assert (
        x["per_device_bytes"]
        == x["argument_bytes"] + x["output_bytes"] - x["alias_bytes"] + x["temp_bytes"] + x["generated_code_bytes"]
    )
    assert 0 < x["output_bytes"] - x["alias_bytes"] < 4096
    assert x["flops"] > 0 and x["bytes_accessed"] > 0 and report["planner"]["per_device_bytes"] > 0
    line = report["roofline"]
    assert line["micro_step_s"] == max(line["compute_s"], line["memory_s"]) > 0
    assert line["tokens_per_s"] == pytest.approx(4 * 128 / line["micro_step_s"])  # 2 rows/device × fsdp 2 × 128
    assert "upper bound" in line["note"] and "first 1 layers only" in line["note"]
    err = result.stderr + capfd.readouterr().err  # CliRunner holds sys.stderr; the child writes through it
    assert "[3/3] XLA compiling for TPU v5 × 4" in err and "INVALID_ARGUMENT" not in err


@pytest.mark.slow
def test_real_dimensions_hold_the_base_once(capfd):
    """Gemma 4 31B's true widths, first 2 layers, v5p-8 at tp=4 (~2 min, ~4 GB): the outputs are the LoRA and
    optimizer state only, a small fraction of the arguments (tunix's own jit returned the whole base: outputs =
    arguments, docs/BENCHMARKS.md)."""
    _libtpu()
    result = _plan(str(G4), "--compile", "--layers", "2", "--json")
    assert result.exit_code == 0, result.output + capfd.readouterr().err
    x = json.loads(result.stdout)["xla"]
    assert x["output_fraction_of_arguments"] < 0.1 and x["output_bytes"] - x["alias_bytes"] < UNALIASED


@pytest.mark.slow
def test_tiny_moe_counts_the_experts_kernels(capfd):
    """The tiny MoE recipe on a v5p-8 (~40 s): XLA:TPU lowers the experts' ragged_dot to Pallas kernels that
    cost_analysis doesn't count; their work comes from the experts' shapes (train/jax/moe.ragged_dot_work): 4
    ragged dots per layer (gate/up and down, forward and back to their input) of T·k·3·D·X flops each."""
    _libtpu()
    moe = ["--set", "model.size=tiny-moe", "--set", "model.path=null"]
    result = _plan(str(TINY), *TINY_ON_V5P, *moe, "--compile", "--json")
    assert result.exit_code == 0, result.output + capfd.readouterr().err
    x = json.loads(result.stdout)["xla"]
    assert "24 × ragged-dot-none (experts)" in x["kernel_note"]
    routed = 4 * 128 * 2 / 4  # 2 rows/device × fsdp 2 × 128 tokens × top 2, split over 4 devices
    assert x["kernel_flops"] == pytest.approx(24 * routed * 3 * 64 * 32)


@pytest.mark.tpu_compile
@pytest.mark.timeout(3600)
@pytest.mark.parametrize(
    "recipe",
    [G4, G3, G4_MOE, G4_E4B, G4_12B],
    ids=["31b-v5p-8", "gemma3-27b-v6e-8", "26b-a4b-v5p-8", "e4b-v6e-4", "12b-v6e-4"],
)
def test_planner_agrees_with_the_compiler_at_full_depth(recipe, capfd):
    """The shipped TPU recipes compiled at full depth, as they ship (every one scans): the step fits its chip's HBM
    by XLA's peak, the planner is within ±10 % of that peak (2026-12-07, stop 65: −1.8, −7.6, −4.3, −0.9 and −0.1 %;
    docs/BENCHMARKS.md, "Scanned over fsdp"), and the outputs are the LoRA and optimizer state only (no second copy
    of the base). Gemma 3 unrolled with nothing recomputed, not shipped, is 30 % under XLA's total (not checked)."""
    _libtpu()
    result = _plan(str(recipe), "--compile", "--json")
    assert result.exit_code == 0, result.output + capfd.readouterr().err
    report = json.loads(result.stdout)
    x = report["xla"]
    assert report["layers"]["full_depth"] and report["fits"] and report["fits_by"] == "peak"
    assert abs(report["planner"]["relative_to_xla_peak"]) <= AGREEMENT, report
    assert x["output_fraction_of_arguments"] < 0.25 and x["output_bytes"] - x["alias_bytes"] < UNALIASED
    print(json.dumps(report, indent=1), file=os.sys.stderr)


@pytest.mark.slow
def test_search_on_the_tiny_recipe_picks_a_winner_that_fits(tmp_path, capfd):
    """`plan --search` end to end on the tiny Gemma 4 for a v5p-8 (3 compiles, ~1 min): a screened candidate is
    compiled at full depth, fits, and its --set lines reproduce it; a second search reuses the cache."""
    _libtpu()
    args = (str(TINY), *TINY_ON_V5P, "--search", "--max-compiles", "3", "--cache", str(tmp_path), "--json")
    result = _plan(*args)
    assert result.exit_code == 0, result.output + capfd.readouterr().err
    found = json.loads(result.stdout)
    assert found["compiles"] == 3 and found["depths"] == [1, 2] and found["winner"]["stage"] == "final"
    assert found["winner"]["fits"] and found["winner"]["xla_bytes_per_device"] > 0
    assert len(list(tmp_path.glob("*.json"))) == 3
    again = _plan(*args)
    assert json.loads(again.stdout)["winner"] == found["winner"] and "reused" in again.stderr


@pytest.mark.slow
def test_a_scanned_step_s_roofline_counts_its_loops_as_the_unrolled_step_s(capfd):
    """The 31B's first 2 layers on v5p-8 (splash, nothing recomputed), scanned (2 groups of 1) and unrolled (~1 and
    ~1.5 min here): XLA:TPU prints no trip count, so the loops' are read from their conditions; the splash kernels
    run once per layer in both, and the scan's roofline flops are the unrolled step's but for the first layer's
    backward to its input, which XLA drops unrolled (the embeddings are frozen) and not in a loop: within that
    layer's input-gradient matmuls (2 · tokens · Σ of q, k, v, gate, up's weights / tp: 4.9e11; 1.35e11 measured).
    Counted once, the scan's loops would leave out a layer's work: 1.5e12 flops."""
    from crosstune.planner import plan_recipe
    from crosstune.planner.planned_recipe import load_for_plan

    _libtpu()
    reports = {}
    for scan in ("true", "false"):
        result = _plan(str(G4), "--compile", "--layers", "2", "--json", "--set", f"backend.jax.scan_layers={scan}")
        assert result.exit_code == 0, result.output + capfd.readouterr().err
        reports[scan] = json.loads(result.stdout)
    scanned, unrolled = reports["true"]["xla"], reports["false"]["xla"]
    assert reports["true"]["roofline_note"] is None and scanned["uncounted_loops"] == 0
    assert scanned["collectives"]["custom_calls"] == unrolled["collectives"]["custom_calls"]
    assert scanned["kernel_flops"] == unrolled["kernel_flops"] > 0
    spec = plan_recipe(load_for_plan(G4), "jax").spec
    shapes = spec.projection_shapes(0)
    first_layer_dx = 2 * 3072 * sum(o * i for t, (o, i) in shapes.items() if t in ("q", "k", "v", "gate", "up")) / 4
    total = {k: x["flops"] + x["loop_flops"] + x["kernel_flops"] for k, x in (("s", scanned), ("u", unrolled))}
    assert 0 <= total["s"] - total["u"] <= first_layer_dx < scanned["loop_flops"]
    line = reports["true"]["roofline"]
    assert line["compute_s"] == pytest.approx(reports["false"]["roofline"]["compute_s"], rel=0.05)


@pytest.mark.tpu_compile
@pytest.mark.timeout(3600)
def test_splash_compiles_for_a_v5p_8(capfd):
    """Gemma 4 31B's first 6 layers (5 sliding with head_dim 256, 1 k_eq_v global with head_dim 512) with splash
    attention, tp 4 on v5p-8 (~5-25 min, ~6 GB): the kernels of both layer types are in the program, their work is
    counted from the model (cost_analysis has none of it), the step fits."""
    _libtpu()
    sets = ("--set", "backend.jax.attention=splash", "--set", "train.gradient_checkpointing=false")
    result = _plan(str(G4), *sets, "--compile", "--layers", "6", "--json")
    assert result.exit_code == 0, result.output + capfd.readouterr().err
    report = json.loads(result.stdout)
    calls = report["xla"]["collectives"]["custom_calls"]
    for kind in ("sliding", "global"):
        assert calls[f"splash_mha_fwd_segmented_residuals|crosstune_attention_{kind}"] >= 1
        assert calls[f"splash_mha_dkv_segmented_no_residuals|crosstune_attention_{kind}"] >= 1
    assert report["xla"]["kernel_flops"] > 0 and "block masks" in report["xla"]["kernel_note"] and report["fits"]
    print(json.dumps(report, indent=1), file=os.sys.stderr)


# In the libtpu child: the LoRA dropout of a [8, 256, 512] input sharded fsdp 2 × tp 2 on a v5p-8's compile-only
# devices, compiled with XLA's default options and with the step's (compiler_options, a recipe's scoped VMEM too);
# the draws' shapes out of each
_DRAWS = """
import json, re, sys
import jax, jax.numpy as jnp
from crosstune.planner.planned_recipe import load_for_plan
from crosstune.train.jax.aot import topology_mesh
from crosstune.train.jax.lora_provider import dropout
from crosstune.train.jax.xla_options import compiler_options
from jax.sharding import NamedSharding, PartitionSpec as P
recipe = load_for_plan(sys.argv[1], ["hardware=tpu-v5p-8", "backend.jax.mesh.fsdp=2", "backend.jax.mesh.tp=2"])
mesh = topology_mesh(recipe)[2]
x = jax.ShapeDtypeStruct((8, 256, 512), jnp.bfloat16, sharding=NamedSharding(mesh, P("fsdp", None, "tp")))
out = {"options": compiler_options(mesh, 65536)}  # a v5p core's VMEM: the most the step allows there
for name, options in (("default", None), ("step", compiler_options(mesh, 65536))):
    text = jax.jit(lambda x: dropout(x, 0.1, jax.random.key(0)), compiler_options=options).lower(x).compile().as_text()
    out[name] = sorted(set(re.findall(r"= (u[0-9]+\\[[0-9,]+\\])[^ ]* rng-bit-generator\\(", text)))
print(json.dumps(out))
"""


@pytest.mark.slow
def test_each_chip_draws_only_its_shard_of_the_dropout_mask():
    """XLA's SPMD partitioner replicates an RngBitGenerator by default: each of a v5p-8's 4 chips drew the global
    [8, 256, 512] 16-bit draws of an input sharded fsdp 2 × tp 2. The step's compile options (SHARDED_RNG on TPU
    devices) make each chip draw its own [4, 256, 256] shard (~30 s: one libtpu child, two small compiles); XLA:TPU
    takes a recipe's scoped VMEM beside it by the option's name (XLA refuses a name it does not know)."""
    from crosstune.train.jax.aot_process import child_env
    from crosstune.train.jax.lora_provider import SHARDED_RNG

    env = child_env(_libtpu(), "v5p-8")
    done = subprocess.run([sys.executable, "-c", _DRAWS, str(TINY)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    draws = json.loads(done.stdout.strip().splitlines()[-1])
    options = {**SHARDED_RNG, "xla_tpu_scoped_vmem_limit_kib": 65536}
    assert draws == {"options": options, "default": ["u16[8,256,512]"], "step": ["u16[4,256,256]"]}
