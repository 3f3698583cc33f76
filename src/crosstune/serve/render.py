"""`crosstune serve plan` output: heads vs tp, the command, every flag with its reason, and KV capacity."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from crosstune.serve.capacity import kv_heads_per_rank
from crosstune.serve.plan import ServePlan


def render_serve_plan(plan: ServePlan, out: Console) -> None:
    spec, hw, tp = plan.spec, plan.target, plan.tp
    heads = Table(title=f"{spec.name} on {hw.name} ({hw.devices} × {hw.chip.name}), vLLM tp={tp}")
    for col in ("layer type", "layers", "query heads", "KV heads", "head_dim", "KV heads / rank", "vLLM"):
        heads.add_column(col)
    for name in dict.fromkeys(spec.layer_types):
        a = spec.attention[name]
        kv = a.num_kv_heads
        if a.num_heads % tp or (kv % tp if kv >= tp else tp % kv):
            verdict = "[red]rejected[/red]"
        else:
            verdict = f"[yellow]KV replicated ×{tp // kv}[/yellow]" if kv < tp else "[green]splits[/green]"
        heads.add_row(
            name,
            str(len(spec.layers_of(name))),
            str(a.num_heads),
            str(a.num_kv_heads),
            str(a.head_dim),
            str(kv_heads_per_rank(a.num_kv_heads, tp)),
            verdict,
        )
    out.print(heads)
    if not plan.ok:  # refuse first: an invalid command is never printed, not even to be read past
        for b in plan.blockers:
            out.print(f"[red]can't serve[/red]: {b}", highlight=False)
        for note in plan.notes:
            out.print(f"[yellow]note[/yellow]: {note}", highlight=False)
        return

    out.print("[bold]command[/bold]")
    out.print(plan.command(), markup=False, highlight=False, soft_wrap=True)
    if plan.docker:
        out.print("[bold]docker[/bold]")
        out.print(plan.docker, markup=False, highlight=False, soft_wrap=True)
    flags = Table(title="flags")
    flags.add_column("flag")
    flags.add_column("why")
    for k, v in plan.env.items():
        flags.add_row(
            f"{k}={v}",
            "GiB of RAM for the CPU KV cache (default 0.9 × host RAM); sized for the "
            "recipe's largest concurrency at max_model_len",
        )
    for f in plan.flags:
        flags.add_row(" ".join(f.args), f.why)
    out.print(flags)

    lengths = next(iter(plan.capacities.values())).sequences
    cap = Table(title="capacity per chip (estimate): concurrent sequences of prompt + output tokens")
    for col in ("KV dtype", "weights GiB", "KV GiB", "KV tokens", *(f"{n} tok" for n in lengths)):
        cap.add_column(col, justify="right")
    for name, c in plan.capacities.items():
        chosen = " ◀" if (name == "fp8") == (plan.kv_dtype == "fp8") else ""
        cap.add_row(
            name + chosen,
            f"{c.weights_gib:,.2f}",
            f"{c.kv_budget_gib:,.1f}",
            f"{c.kv_tokens:,}",
            *(f"{c.sequences[n]:,}" for n in lengths),
        )
    out.print(cap)
    for note in plan.notes:
        out.print(f"[yellow]note[/yellow]: {note}", highlight=False)
    out.print(f"[green]plan ok[/green] for {hw.name}")
