"""The parity check's verdict (crosstune.parity.check.ParityReport) as a rich table: `crosstune parity` and the demo
print it."""

from __future__ import annotations

from rich.table import Table

from crosstune.parity.check import GRAD_ATOL, GRAD_RTOL, GradDiff, ParityReport
from crosstune.run.lora_weights import module_target


def report_table(report: ParityReport) -> Table:
    def mark(ok: bool) -> str:
        return "[green]ok[/green]" if ok else "[red]FAIL[/red]"

    fsdp, tp = report.mesh
    title = (
        f"torch vs jax: one training step ({report.family}, {report.rows} rows × {report.accumulation} micro-batches, "
        f"{report.precision}, jax mesh {fsdp}×{tp})"
    )
    table = Table(title=title)
    rtol = report.grads[0].rtol if report.grads else GRAD_RTOL
    table.caption = (
        f"grad rows: worst layer, max |g| (torch) and max |Δg|; tolerance {rtol:.0e}·max|g| + {GRAD_ATOL:.0e}. "
        "Frozen: gradient elements whose sign the backends disagree on (noise floor), held for the step."
    )
    for col in ("quantity", "torch", "jax", "|Δ|", "tol", ""):
        table.add_column(col, justify="right" if col not in ("quantity", "") else "left")
    rc = report.recompute
    table.add_row("activation recompute", str(rc["torch"]), str(rc["jax"]), "", "same", mark(rc["torch"] == rc["jax"]))
    tok_ok = report.tokens["torch"] == report.tokens["jax"]
    table.add_row(
        "trained tokens",
        str(report.tokens["torch"]),
        str(report.tokens["jax"]),
        str(abs(report.tokens["torch"] - report.tokens["jax"])),
        "0",
        mark(tok_ok),
    )
    table.add_row(
        "loss",
        f"{report.loss['torch']:.6f}",
        f"{report.loss['jax']:.6f}",
        f"{report.loss_diff:.2e}",
        f"{report.loss_tol:.0e}",
        mark(report.loss_diff <= report.loss_tol),
    )
    by_kind: dict[tuple[str, str], list[GradDiff]] = {}
    for g in report.grads:
        by_kind.setdefault((module_target(g.module)[1], g.part), []).append(g)
    for (target, part), diffs in by_kind.items():
        worst = max(diffs, key=lambda g: g.max_abs / max(g.scale, 1e-30))
        table.add_row(
            f"∇ {target}.lora_{part} ×{len(diffs)}",
            f"{worst.scale:.2e}",
            "",
            f"{worst.max_abs:.2e}",
            f"{GRAD_ATOL + worst.rtol * worst.scale:.0e}",
            mark(all(g.ok for g in diffs)),
        )
    table.add_row("frozen elements", f"{report.frozen}/{report.elements}", "", "", "", "")
    table.add_row("LoRA after step", "", "", f"{report.weight_diff:.2e}", "", "")
    table.add_row(
        "loss after step",
        f"{report.loss_after['torch']:.6f}",
        f"{report.loss_after['jax']:.6f}",
        f"{report.loss_after_diff:.2e}",
        f"{report.loss_tol:.0e}",
        mark(report.loss_after_diff <= report.loss_tol),
    )
    d = report.dropout
    if d is not None:
        table.add_row(
            f"loss, dropout {d.p} (mean ± s.e., {len(d.losses['torch'])} draws)",
            f"{d.mean('torch'):.6f} ± {d.sem('torch'):.1e}",
            f"{d.mean('jax'):.6f} ± {d.sem('jax'):.1e}",
            f"{abs(d.mean('torch') - d.mean('jax')):.2e}",
            f"{d.bound:.0e}",
            mark(d.ok),
        )
    return table
