"""The demo's stages, in order: each a function of the DemoContext that returns its one-line result.

The story: a base pretrained on CPU on some synthetic Verilog task families (`crosstune pretrain`, cached)
scores ~0 on families it never saw; a LoRA on those families, trained by each backend, lifts pass@1 on held-out
problems of them, scored by the same evaluator.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from crosstune.demo.context import DemoContext, console
from crosstune.demo.evaluation import stage_eval, stage_report
from crosstune.recipes import shipped_recipe


def stage_corpus(ctx: DemoContext) -> str:
    from crosstune.demo.split import BASE_FAMILIES, HELD_OUT_FAMILIES
    from crosstune.pretrain.base_model import PretrainConfig
    from crosstune.synth import generate_corpus

    base = PretrainConfig()
    split = {
        "families": list(HELD_OUT_FAMILIES),
        "base_families": list(BASE_FAMILIES),
        "base_corpus_seed": base.corpus_seed,
        "note": "train and eval hold only families the pretrained base never saw; eval parameters appear in no "
        "training record (the base's corpus has none of these families, this train.jsonl draws fresh parameters)",
    }
    summary = generate_corpus(
        ctx.corpus_dir, n_train=ctx.n_train, n_eval=ctx.n_eval, seed=ctx.seed, families=HELD_OUT_FAMILIES, split=split
    )
    note = f"{summary.n_train} train records, {summary.n_eval} held-out eval problems, {len(summary.counts)} families"
    ctx.made.append(("synthetic NL→Verilog corpus (families the base never saw)", ctx.corpus_dir, note))
    return note + ": " + ", ".join(sorted(summary.counts)) + " (split recorded in manifest.json)"


def stage_base_model(ctx: DemoContext) -> str:
    import dataclasses
    import json
    import shutil

    from crosstune.families import get_family
    from crosstune.pretrain.base_model import DONE, SHIPPED_BASES, PretrainConfig, pretrained_base

    config = PretrainConfig() if ctx.base_steps is None else dataclasses.replace(PretrainConfig(), steps=ctx.base_steps)
    cached = pretrained_base(config, ctx.cache_root, log=lambda line: console.print("   " + line, highlight=False))
    shutil.copytree(cached, ctx.model_dir)  # the runs' run.json names the demo's own copy as their base
    info = json.loads((cached / DONE).read_text())
    spec = get_family(config.family).spec(config.size)
    source = "shipped with crosstune" if cached.parent == SHIPPED_BASES else "cache"
    ctx.made.append((f"pretrained small Gemma 4 (copy; {source})", ctx.model_dir, f"{spec.total_params:,} params"))
    return (
        f"{spec.total_params:,} parameters, layer types {''.join(t[0] for t in spec.layer_types)} (s=sliding, "
        f"g=global), trained in full for {config.steps} steps on {len(config.families)} families "
        f"(loss {info['losses'][0]:.2f} → {info['losses'][-1]:.2f}, {info['seconds']:.0f} s when built); "
        f"{source} {cached}"
    )


def stage_recipe(ctx: DemoContext) -> str:
    from crosstune.recipe import load_recipe

    recipe = load_recipe(ctx.recipe_file, ctx.overrides())
    warnings = recipe.warnings
    ctx.made.append(("validated recipe", ctx.recipe_file, f"{len(warnings)} warning(s)"))
    for w in warnings:
        console.print("   " + w.render(ctx.recipe_file), markup=False, highlight=False)
    targets = ",".join(recipe.lora.targets)
    return f"recipe {recipe.name!r}: LoRA r={recipe.lora.rank} on {targets}, hardware {recipe.hardware}"


def stage_prepare(ctx: DemoContext) -> str:
    from crosstune.data import prepare_dataset
    from crosstune.data.stats import stats_table
    from crosstune.recipe import load_recipe

    recipe = load_recipe(ctx.recipe_file, ctx.overrides())
    prepared = prepare_dataset(recipe, force=True)
    console.print(stats_table(prepared.stats, title="Prepared data"))
    s = prepared.stats["splits"]["train"]
    ctx.made.append(("prepared data (shards, manifest, stats)", prepared.path, f"{s['rows']} rows × {s['row_length']}"))
    skipped, dropped = sum(s["skipped"].values()), sum(s.get("dropped", {}).values())
    return (
        f"{s['records_out']} records ({skipped} skipped, {dropped} too long) → {s['rows']} rows of {s['row_length']}, "
        f"{s['trained_fraction']:.0%} of tokens trained, {s['packing_efficiency']:.0%} non-padding"
    )


def stage_train_torch(ctx: DemoContext) -> str:
    from crosstune.recipe import load_recipe
    from crosstune.train.session import train

    recipe = load_recipe(ctx.recipe_file, ctx.overrides())
    result = train(recipe, backend="torch")
    ctx.made.append(("torch LoRA run (metrics, loss.png, adapter/)", result.run_dir, f"{result.steps} steps"))
    return f"{result.steps} steps, loss {result.losses[0]:.3f} → {result.final_loss:.3f}; curve in loss.png"


def stage_plan(ctx: DemoContext) -> str:
    from crosstune.planner import plan_recipe
    from crosstune.planner.planned_recipe import load_for_plan
    from crosstune.planner.view import render_plan
    from crosstune.recipe import load_recipe

    tiny = plan_recipe(load_recipe(ctx.recipe_file, ctx.overrides()), backend="jax")
    render_plan(tiny, console)
    seed_recipe = shipped_recipe("gemma4-31b-tpu-v5p-8.yaml")
    big = plan_recipe(load_for_plan(seed_recipe), backend="jax")
    render_plan(big, console)
    tp8 = plan_recipe(load_for_plan(seed_recipe, ["hardware=tpu-v6e-8", "backend.jax.mesh.tp=8"]), backend="jax")
    console.print(f"   Gemma 4 31B, tp=8 on v6e-8: {tp8.blockers[0]}", markup=False, highlight=False)
    m = big.jax_memory
    return f"Gemma 4 31B on v5p-8 (fsdp×tp = 1×4): {m.total:.1f} of {m.hbm:.0f} GB per chip; tp=8 rejected up front"


def stage_train_jax(ctx: DemoContext) -> str:
    from crosstune.recipe import load_recipe
    from crosstune.run.records import read_run_record
    from crosstune.train.session import train

    recipe = load_recipe(ctx.recipe_file, ctx.overrides())
    result = train(recipe, backend="jax")
    record = read_run_record(result.run_dir)
    mesh = f"fsdp×tp = {record.mesh.fsdp}×{record.mesh.tp}"
    ctx.made.append(("jax LoRA run (metrics, loss.png, Orbax checkpoints/)", result.run_dir, f"{result.steps} steps"))
    return (
        f"{result.steps} steps on {mesh}, loss {result.losses[0]:.3f} → {result.final_loss:.3f}; "
        f"compile {record.compile_time_s:.0f} s (kept out of the step times)"
    )


def stage_parity(ctx: DemoContext) -> str:
    from crosstune.parity.check import run_parity
    from crosstune.parity.table import report_table

    report = run_parity(ctx.recipe_file, ctx.overrides())
    console.print(report_table(report))
    if not report.ok:
        raise RuntimeError("parity failed: the torch and jax backends disagree beyond tolerance (table above)")
    worst = max(g.max_abs / g.scale for g in report.grads)
    return (
        f"same {report.tokens['jax']} trained tokens; loss |Δ| {report.loss_diff:.1e}, LoRA gradients within "
        f"{worst:.0e} (relative), loss after one AdamW step |Δ| {report.loss_after_diff:.1e}"
    )


def stage_export(ctx: DemoContext) -> str:
    import json

    from crosstune.export import export_run
    from crosstune.recipe import load_recipe
    from crosstune.run.rundir import default_run_dir

    recipe = load_recipe(ctx.recipe_file, ctx.overrides())
    made = export_run(default_run_dir(recipe, "jax"), "both", ctx.out / "export", overwrite=True)
    for kind, where in made.items():
        manifest = json.loads((where / "export_manifest.json").read_text())
        size = sum(f["bytes"] for f in manifest["files"].values())
        what = "merged HF model (base + LoRA)" if kind == "merged" else "PEFT adapter"
        ctx.made.append((f"{what} from the jax run", where, f"step {manifest['source']['step']}, {size / 1e6:.1f} MB"))
    diff = _merged_vs_adapter(made["merged"], made["adapter"], ctx.model_dir)
    return f"jax run → merged model and PEFT adapter; transformers logits merged vs base+adapter: max |Δ| {diff:.1e}"


def _merged_vs_adapter(merged: Path, adapter: Path, base: Path) -> float:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    tokens = torch.arange(10, 42).reshape(1, -1)
    with torch.no_grad():
        a = AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32).eval()(tokens).logits
        with_adapter = PeftModel.from_pretrained(
            AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), adapter
        )
        b = with_adapter.eval()(tokens).logits
    return float((a - b).abs().max())


def stage_export_torch(ctx: DemoContext) -> str:
    from crosstune.export import export_run
    from crosstune.recipe import load_recipe
    from crosstune.run.rundir import default_run_dir

    recipe = load_recipe(ctx.recipe_file, ctx.overrides())
    made = export_run(default_run_dir(recipe, "torch"), "merged", ctx.out / "export-torch" / "merged", overwrite=True)
    ctx.made.append(("merged HF model from the torch run", made["merged"], "evaluated below"))
    return f"torch run → merged model {made['merged']}"


def stage_serve(ctx: DemoContext) -> str:
    from crosstune.demo.serving import serving_stage

    # The jax fine-tune's merged export, as a user would deploy it; skipped (saying how) without `make serve-env`.
    summary = serving_stage(ctx.out / "export" / "merged", ctx.out / "serve", console)
    if summary is None:
        return "skipped: no vLLM serving environment (`make serve-env` creates it, ~3 min, 3.4 GB)"
    ctx.made.append(
        ("vLLM serving sweep of the jax fine-tune (summary.json, requests.jsonl, plots)", ctx.out / "serve", "")
    )
    return f"served with vLLM's CPU build and swept: {ctx.out / 'serve'}"


Stage = tuple[str, Callable[[DemoContext], str]]
STAGES: list[Stage] = [
    ("synthesize the held-out Verilog corpus", stage_corpus),
    ("the pretrained small Gemma 4 base (shipped, or crosstune pretrain)", stage_base_model),
    ("validate the recipe", stage_recipe),
    ("prepare data", stage_prepare),
    ("train LoRA with the torch backend (TRL + PEFT)", stage_train_torch),
    ("plan the mesh and memory (crosstune plan)", stage_plan),
    ("train LoRA with the jax backend (Tunix + Qwix)", stage_train_jax),
    ("parity: both backends on one training step", stage_parity),
    ("export the jax run (merged HF model + PEFT adapter)", stage_export),
    ("export the torch run (merged HF model)", stage_export_torch),
    ("serve the jax fine-tune with vLLM and benchmark it (when the serving env exists)", stage_serve),
    ("evaluate base vs both fine-tunes: pass@k with iverilog, sandboxed", stage_eval),
    ("cost and report (crosstune.cost, crosstune.report)", stage_report),
]
