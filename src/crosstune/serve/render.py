"""`crosstune serve plan` output: heads vs tp, the command, every flag with its reason, and KV capacity."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from crosstune.serve.capacity import kv_heads_per_rank
from crosstune.serve.layouts import CHOICE_RULE, why_not
from crosstune.serve.plan import ServePlan


def render_serve_plan(plan: ServePlan, out: Console) -> None:
    spec, hw, tp = plan.spec, plan.target, plan.tp
    where = f"dp {plan.dp} × tp {tp}" if plan.dp > 1 else f"tp={tp}"
    heads = Table(title=f"{spec.name} on {hw.name} ({hw.devices} × {hw.chip.name}), vLLM {where}")
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
    for backend, why in dict.fromkeys((a.backend, a.why) for a in plan.attention):
        types = ", ".join(f"{a.layer_type} (head_dim {a.head_dim})" for a in plan.attention if a.backend == backend)
        out.print(f"attention on {types}: [bold]{backend}[/bold] — {why}", highlight=False)
    _render_layouts(plan, out)
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
        flags.add_row(f"{k}={v}", plan.env_why.get(k, ""))
    for f in plan.flags:
        flags.add_row(" ".join(f.args), f.why)
    out.print(flags)

    lengths = next(iter(plan.capacities.values())).sequences
    per = f"per replica of {plan.dp}" if plan.dp > 1 else "per chip"
    cap = Table(title=f"capacity {per} (estimate): concurrent sequences of prompt + output tokens")
    for col in ("KV dtype", "weights GiB", "KV GiB", "KV tokens", *(f"{n} tok" for n in lengths)):
        cap.add_column(col, justify="right", no_wrap=col == "KV dtype")
    for name, c in plan.capacities.items():
        chosen = " ◀" if (name == "fp8") == (plan.kv_dtype == "fp8") else ""
        label = name
        if name == "fp8" and plan.platform != "cpu":
            real = plan.kv_allocated.get(name, "fp8")
            label = f"fp8 → {_short(real)} allocated" if real != "fp8" else f"fp8 ({plan.target.chip.fp8_kv})"
        cap.add_row(
            label + chosen,
            f"{c.weights_gib:,.2f}",
            f"{c.kv_budget_gib:,.1f}",
            f"{c.kv_tokens:,}",
            *(f"{c.sequences[n]:,}" for n in lengths),
        )
    out.print(cap)
    c = plan.capacities[next(k for k in plan.capacities if (k == "fp8") == (plan.kv_dtype == "fp8"))]
    out.print(
        f"vLLM should log ≈ {c.engine_tokens:,} tokens, maximum concurrency {c.max_concurrency:.2f}x for "
        f"{plan.max_model_len:,} tokens per request{' per replica' if plan.dp > 1 else ''} (its admission rule); "
        "`serve start` records what it does log",
        highlight=False,
    )
    for note in plan.notes:
        out.print(f"[yellow]note[/yellow]: {note}", highlight=False)
    if plan.lora is not None:
        out.print(f"LoRA: {plan.lora.why}", highlight=False)
    out.print(f"[green]plan ok[/green] for {hw.name}")


def _short(dtype: str) -> str:
    return {"bfloat16": "bf16", "float32": "fp32"}.get(dtype, dtype)


def _render_layouts(plan: ServePlan, out: Console) -> None:
    """Every dp × tp the target allows, the chosen one marked, then why it was chosen and why each other was not."""
    if len(plan.layouts) < 2:
        return
    n = plan.max_model_len
    kv = _short(plan.layouts[0].capacity.kv_dtype)
    table = Table(title=f"layouts on {plan.target.name} (KV {kv}, estimates)")
    table.add_column("layout", no_wrap=True)
    for col in ("weights GiB/chip", "KV GiB/chip", "KV tokens/replica", "KV tokens/chip", f"{n}-tok seqs"):
        table.add_column(col, justify="right")
    chosen = next((lay for lay in plan.layouts if (lay.dp, lay.tp) == (plan.dp, plan.tp)), None)
    for lay in plan.layouts:
        table.add_row(
            lay.name + (" ◀" if lay is chosen else ""),
            f"{lay.capacity.weights_gib:,.2f}",
            f"{lay.capacity.kv_budget_gib:,.1f}",
            f"{lay.capacity.kv_tokens:,}",
            f"{lay.kv_tokens_per_chip:,}",
            f"{lay.sequences_total(n):,}",
        )
    out.print(table)
    out.print(f"rule: {CHOICE_RULE}", highlight=False)
    if chosen is not None:
        out.print(f"[green]chosen[/green] {chosen.name}: {plan.choice}", highlight=False)
    for lay in plan.layouts:
        if lay is not chosen:
            out.print(f"  {lay.name}: {why_not(plan.spec, lay, chosen)}", highlight=False)
