"""What `crosstune plan RECIPE` shows (the command is crosstune.plan.cli's: --compile needs the jax backend):
the planner's verdict as rich tables, or one JSON object, and XLA's numbers next to the planner's. The recipe it
plans is read by crosstune.planner.planned_recipe."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from crosstune.planner.aot_report import planner_bytes
from crosstune.planner.estimate import Plan
from crosstune.planner.memory import Memory
from crosstune.recipe import Recipe
from crosstune.units import GB, bytes_to_gib

console = Console(soft_wrap=True)


def _gb(x: float | None) -> str:
    return "–" if x is None else f"{x:,.1f}"


def render_plan(plan: Plan, out: Console | None = None) -> None:
    """The planner's tables: model and heads vs tp, JAX mesh options, memory per device for both backends."""
    out = out or console
    spec, hw = plan.spec, plan.hardware
    fsdp, tp = plan.jax_mesh
    heads = Table(title=f"{spec.name} on {hw.name} ({hw.devices} × {hw.chip.name}, {_gb(hw.chip.hbm_gb)} GB HBM)")
    for col in ("layer type", "layers", "query heads", "KV heads", "head_dim", f"tp={tp}"):
        heads.add_column(col)
    for name in dict.fromkeys(spec.layer_types):
        a = spec.attention[name]
        split = [n for n in (a.num_heads, a.num_kv_heads) if n % tp and n != 1]
        verdict = "[green]splits[/green]" if not split else f"[red]can't split {', '.join(map(str, split))}[/red]"
        heads.add_row(
            name, str(len(spec.layers_of(name))), str(a.num_heads), str(a.num_kv_heads), str(a.head_dim), verdict
        )
    out.print(heads)

    options = Table(title="JAX meshes over all devices (fsdp × tp), memory per device")
    for col in ("fsdp", "tp", "verdict", "kept whole over tp", "GB / device"):
        options.add_column(col)
    for o in plan.jax_options:
        chosen = " ◀ recipe" if (o.fsdp, o.tp) == (fsdp, tp) else ""
        color = {"ok": "green", "out of memory": "red"}.get(o.verdict, "yellow")
        options.add_row(
            str(o.fsdp),
            str(o.tp),
            f"[{color}]{o.verdict}[/{color}]{chosen}",
            ", ".join(o.replicated) or "–",
            _gb(o.memory.total),
        )
    out.print(options)

    memory = Table(title=f"Memory per device, GB (fits: ≤ {_gb(hw.chip.usable_gb)} GB, {hw.chip.usable_source})")
    memory.add_column("")
    columns: list[tuple[str, Memory]] = [(f"jax fsdp={fsdp} tp={tp}", plan.jax_memory)]
    if plan.torch_memory is not None:
        columns.append((f"torch {plan.torch_devices} device(s)", plan.torch_memory))
    for title, _ in columns:
        memory.add_column(title, justify="right")
    rows = [
        ("base weights", lambda m: m.base),
        ("LoRA + grads + AdamW", lambda m: m.lora),
        ("layers gathered over fsdp (jax)", lambda m: m.gathered or None),
        ("activations, remat", lambda m: m.activations_remat),
        ("activations, no remat", lambda m: m.activations_no_remat),
        ("activations, selective (torch)", lambda m: m.activations_selective),
        (f"logits ({spec.vocab_size:,} vocab)", lambda m: m.logits),
        ("total (as configured)", lambda m: m.total),
        ("HBM", lambda m: m.hbm),
    ]
    for label, get in rows:
        memory.add_row(label, *(_gb(get(m)) for _, m in columns))
    memory.add_row("fits", *("[green]yes[/green]" if m.fits else "[red]no[/red]" for _, m in columns))
    out.print(memory)
    for note in plan.notes:
        out.print(f"[yellow]note[/yellow]: {note}")
    if plan.ok:
        out.print(f"[green]plan ok[/green] for --backend {plan.backend}")
    for b in plan.blockers:
        out.print(f"[red]can't run[/red] (--backend {plan.backend}): {b}", markup=True, highlight=False)


def plan_json(plan: Plan) -> dict:
    """The planner's verdict as the JSON object `crosstune plan --json` prints (bytes per device)."""
    hbm = plan.hardware.chip.hbm_gb
    return {
        "recipe": plan.recipe_name,
        "hardware": plan.hardware.name,
        "mesh": {"fsdp": plan.jax_mesh[0], "tp": plan.jax_mesh[1]},
        "hbm_bytes_per_device": None if hbm is None else round(hbm * GB),
        "ok": plan.ok,
        "blockers": plan.blockers,
        "planner": planner_bytes(plan.jax_memory),
    }


def _bytes(x: float | int | None) -> str:
    return "–" if x is None else f"{x / GB:,.2f}"


def render_compiled(report: dict, out: Console | None = None) -> None:
    """XLA's per-device memory next to the planner's, the compiled cost and the roofline (crosstune.planner.aot_report
    builds `report`)."""
    out = out or console
    x, p, line, layers = report["xla"], report["planner"], report["roofline"], report["layers"]
    depth = f"{layers['compiled']} of {layers['model']} layers"
    table = Table(
        title=f"Per device, GB: XLA (compiled for {report['topology']}, {report['device_kind']} × "
        f"{report['devices']}, {depth}) vs the planner"
    )
    for col in ("", "XLA", "planner", ""):
        table.add_column(col, justify="right" if col else "left")
    table.add_row(
        "arguments",
        _bytes(x["argument_bytes"]),
        _bytes(p["base_bytes"] + p["lora_optimizer_bytes"]),
        "base + LoRA + optimizer state (+ the batch)",
    )
    table.add_row("outputs", _bytes(x["output_bytes"]), "", f"{x['output_fraction_of_arguments']:.1%} of arguments")
    table.add_row("  reusing an argument's buffer", _bytes(x["alias_bytes"]), "", "donated state, updated in place")
    table.add_row(
        "temporaries",
        _bytes(x["temp_bytes"]),
        _bytes(p["activations_bytes"] + p["logits_bytes"]),
        "activations + logits",
    )
    table.add_row("generated code", _bytes(x["generated_code_bytes"]), "", "")
    table.add_row(
        "total",
        _bytes(x["per_device_bytes"]),
        _bytes(p["per_device_bytes"]),
        f"planner {p['relative_to_xla']:+.1%} vs XLA",
    )
    if x.get("peak_bytes"):  # below the total for a scan: XLA's temp_bytes reads above what the chip holds
        table.add_row(
            "XLA's peak", _bytes(x["peak_bytes"]), "", f"planner {p['relative_to_xla_peak']:+.1%} vs its peak"
        )
    table.add_row("HBM", _bytes(report["hbm_bytes_per_device"]), "", "")
    table.add_row("usable", _bytes(report["usable_bytes_per_device"]), "", "what a program may hold")
    by = "XLA's peak" if report["fits_by"] == "peak" else "XLA's total (no peak in this record)"
    table.add_row("fits", "[green]yes[/green]" if report["fits"] else "[red]no[/red]", "", f"by {by} ≤ usable")
    out.print(table)
    kernels = (
        f" + {x['kernel_flops']:.3g} flops, {x['kernel_bytes']:.3g} bytes in Pallas kernels"
        if x["kernel_flops"]
        else ""
    )
    if x.get("loop_flops"):
        kernels += f" + {x['loop_flops']:.3g} flops, {x['loop_bytes']:.3g} bytes in the loops' runs after their first"
    out.print(
        f"cost per micro-step per device: {x['flops']:.3g} flops, {x['bytes_accessed']:.3g} bytes accessed "
        f"(XLA cost_analysis){kernels}; {x['collective_bytes']:.3g} bytes over ICI in "
        f"{sum(x['collectives'].get('count', {}).values())} collectives (the optimized HLO)",
        highlight=False,
    )
    if x["kernel_note"] and x["kernel_flops"]:
        out.print(f"  {x['kernel_note']}", highlight=False)
    if line is None:
        out.print(f"roofline: {report['roofline_note']}", highlight=False)
    else:
        _print_roofline(line, out)
    t = report["timings_s"]
    out.print(
        f"compile: build {t['build']:.0f} s, lower {t['lower']:.0f} s, XLA {t['compile']:.0f} s; host peak RSS "
        f"{bytes_to_gib(report['host_peak_rss_bytes']):.1f} GiB",  # measured: GiB, as the compile's progress says
        highlight=False,
    )
    if not layers["full_depth"]:
        out.print(
            f"[yellow]note[/yellow]: the first {depth}: a smoke check of the step, not the model's memory (temp "
            "grows faster than linearly with depth); compile without --layers for the full depth",
            highlight=False,
        )


def _print_roofline(line: dict, out: Console) -> None:
    """The three-term roofline line of a compiled step."""
    by_term = line["tokens_per_s_by_term"]
    terms = ", ".join(
        f"{name} {line[key]:.3f} s ({'–' if by_term[t] is None else f'{by_term[t]:,.0f}'} tok/s)"
        for name, key, t in (
            ("compute", "compute_s", "compute"),
            ("HBM", "memory_s", "memory"),
            ("ICI", "ici_s", "ici"),
        )
    )
    out.print(
        f"roofline per micro-step: {terms} ({line['micro_batch_tokens']:,} tokens; {line['bound']}-bound) → "
        f"≥ {line['step_s']:.2f} s per optimizer step (×{line['accumulation']}), ≤ {line['tokens_per_s']:,.0f} "
        f"tokens/s: {line['note']}",
        highlight=False,
    )


def render_search(search, recipe: Recipe, hw, out: Console | None = None) -> None:
    """`plan --search`'s frontier: every compiled candidate, XLA's memory per chip (full depth, or extrapolated from
    the screen), the three-term roofline, the calibrated prediction it is ranked by, and the --set lines of the
    winner (crosstune.planner.search)."""
    from crosstune.planner.search_report import pareto

    out = out or console
    usable = hw.chip.usable_gb
    front = pareto(search.results)
    table = Table(
        title=f"{recipe.name} on {hw.name}: {search.compiles} compiles (screen at {search.depths[0]} and "
        f"{search.depths[1]} layers, finalists at full depth)"
    )
    columns = (
        "candidate",
        "stage",
        "XLA GB/chip",
        "planner GB/chip",
        "compute s",
        "HBM s",
        "ICI s",
        "roofline tok/s",
        "predicted tok/s",
        "",
    )
    for col in columns:
        table.add_column(col, justify="left" if col in ("candidate", "stage", "") else "right")
    ranked = sorted(
        (r for r in search.results if r.step is not None or r.error),
        key=lambda r: ({"final": 0, "screened": 1}.get(r.stage, 2), -r.tokens_per_s),
    )
    for r in ranked:
        line = r.line
        mark = " ◀ winner" if r is search.winner else (" frontier" if r in front else "")
        mark += " (the recipe)" if r is search.baseline else ""
        fits = r.fits(usable)
        gb = "–" if r.step is None else f"[{'green' if fits else 'red'}]{r.held_gb:,.1f}[/] {r.step.held_by}"
        stage = r.stage + ("" if not r.error else f": {r.error[:60]}")
        cells = (
            ("–",) * 4
            if line is None
            else (f"{line.compute_s:.3f}", f"{line.memory_s:.3f}", f"{line.ici_s:.3f}", f"{line.tokens_per_s:,.0f}")
        )
        predicted = "–" if not r.predicted_s else f"{r.tokens_per_s:,.0f}"
        table.add_row(r.candidate.label, stage, gb, f"{r.planner.total:,.1f}", *cells, predicted, mark)
    out.print(table)
    out.print(
        f"XLA GB/chip: what the fit verdict (≤ {_gb(usable)} GB) reads, XLA's peak where the compile reported one, "
        "else its memory_analysis total",
        highlight=False,
    )
    out.print(f"{len(search.results) - len(ranked)} more candidates priced by the planner only", highlight=False)
    for note in search.notes:
        out.print(f"[yellow]note[/yellow]: {note}", highlight=False)
    if search.winner is not None:
        w = search.winner
        sets = " ".join(f"--set {s}" for s in w.candidate.overrides(recipe))
        speed = f"{w.tokens_per_s:,.0f} tokens/s predicted (calibrated)" if w.predicted_s else "–"
        line = w.line
        bound = "no roofline" if line is None else f"≤ {line.tokens_per_s:,.0f} by the roofline ({line.bound}-bound)"
        out.print(
            f"[green]winner[/green]: {w.candidate.label}: {w.held_gb:,.1f} GB per chip (XLA's {w.step.held_by}, "
            f"full depth), {speed}, " + bound,
            highlight=False,
        )
        out.print(f"reproduce: crosstune plan RECIPE --compile {sets}", highlight=False)


def render_measured(report: dict, out: Console | None = None) -> None:
    """`plan --run`: what the chip did beside what the planner predicts (crosstune.planner.measured builds
    `report`)."""
    out = out or console
    m, p, layers = report["measured"], report["predicted"], report["layers"]
    depth = f"{layers['measured']} of {layers['model']} layers"
    title = f"{report['recipe']} on the attached {report['hardware']} ({report['devices']} × {report['device_kind']}"
    table = Table(title=f"{title}, {depth}, {report['micro_batch_tokens']:,} tokens per micro-step)")
    for col in ("", "measured", "planner", "planner / measured"):
        table.add_column(col, justify="right" if col else "left")

    def ratio(key: str) -> str:
        value = report[key]
        return "–" if value is None else f"{value:.2f}"

    predicted_s = p["micro_step_s"]
    table.add_row(
        "s per micro-step",
        f"{m['micro_step_s']:.4f}",
        "–" if predicted_s is None else f"{predicted_s:.4f}",
        ratio("time_predicted_over_measured"),
    )
    table.add_row(
        "tokens/s", f"{m['tokens_per_s']:,.0f}", "–" if p["tokens_per_s"] is None else f"{p['tokens_per_s']:,.0f}", ""
    )
    table.add_row("MFU (4N)", "–" if m["mfu"] is None else f"{m['mfu']:.1%}", "", "")
    table.add_row("peak HBM, GB", _gb(m["peak_gb"]), _gb(p["planner_gb"]), ratio("memory_predicted_over_measured"))
    table.add_row("XLA memory_analysis, GB", _gb(report["xla_gb"]), "", "")
    if report["xla_peak_gb"] is not None:
        table.add_row("XLA's peak, GB", _gb(report["xla_peak_gb"]), "", "")
    usable = report["usable_gb"]
    ran = "ran" if report["ran_within_limit"] else "[red]over XLA's limit[/red]"
    table.add_row(
        "fits",
        f"{ran} (by XLA's {report['within_limit_by']})",
        ("[green]yes[/green]" if p["fits"] else "[red]no[/red]") + f" (≤ {_gb(usable)} GB)",
        "",
    )
    table.add_row("compile, s", f"{m['compile_s']:.1f}", "", "lower + XLA")
    out.print(table)
    if p["by_kind_s"]:
        kinds = ", ".join(f"{k} {v:.4f} s" for k, v in p["by_kind_s"].items())
        out.print(f"planner's micro-step: {kinds} ({p['calibration']})", highlight=False)
    target = report.get("recipe_target")
    if target:
        out.print(
            f"the recipe's own {target['hardware']} (fsdp {target['mesh']['fsdp']} × tp {target['mesh']['tp']}, "
            f"{target['layers']} layers), predicted: {target['micro_step_s']:.3f} s per micro-step, "
            f"{target['tokens_per_s']:,.0f} tokens/s ({target['calibration']})",
            highlight=False,
        )
