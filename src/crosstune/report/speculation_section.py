"""The report's table of speculative decoding: each drafted sweep beside an undrafted one of the same model and
context, with the serving cost per 1M output tokens of both (crosstune.cost's serving_costs, at saturation), the
ratio, and the engine's acceptance at the drafted sweep's operating point. A drafted and an undrafted sweep are
different configurations (servebench.speculation): they are set side by side here, never compared as one."""

from __future__ import annotations

from crosstune.cost.costs import ServingCost
from crosstune.report.document import Table
from crosstune.report.sections import num, usd
from crosstune.servebench.speculation import NONE
from crosstune.servebench.summary_cells import Sweep

KEY = "speculative decoding"


def drafter_cost_table(sweeps: list[Sweep], costs: list[list[ServingCost] | None]) -> Table | None:
    """Per (undrafted, drafted) pair of sweeps and shared context: $ / 1M output tokens without and with the drafter,
    drafted / undrafted, peak output tok/s of both, and acceptance at the drafted operating point. None: no pair."""
    plain = [(s, c) for s, c in zip(sweeps, costs, strict=True) if s.declared.get(KEY, NONE) == NONE and c]
    drafted = [(s, c) for s, c in zip(sweeps, costs, strict=True) if s.declared.get(KEY, NONE) != NONE and c]
    rows = []
    for d, d_costs in drafted:
        for p, p_costs in plain:
            by_ctx = {c.context_len: c for c in p_costs}
            for dc in d_costs:
                pc = by_ctx.get(dc.context_len)
                if pc is None or pc.cell is None or dc.cell is None:
                    continue
                a, b = pc.usd_per_m_output, dc.usd_per_m_output
                rate = dc.cell.acceptance_rate
                rows.append(
                    [
                        str(dc.context_len),
                        p.label,
                        d.label,
                        usd(a),
                        usd(b),
                        "n/a" if a is None or b is None or not a else f"{b / a:.2f}×",
                        num(pc.cell.output_throughput, 1),
                        num(dc.cell.output_throughput, 1),
                        "n/a" if rate is None else f"{100 * rate:.1f} %",
                        num(dc.cell.mean_accepted_length, 2),
                    ]
                )
    if not rows:
        return None
    headers = [
        "context",
        "without drafter",
        "with drafter",
        "$ / 1M out, without",
        "$ / 1M out, with",
        "with / without",
        "peak tok/s without",
        "peak tok/s with",
        "acceptance",
        "mean accepted length",
    ]

    caption = (
        "each at its saturation point (crosstune.cost); acceptance and mean accepted length are vLLM's spec_decode "
        "counters over the drafted sweep's peak cell (accepted / proposed; 1 + accepted / drafts)"
    )
    return Table("Serving cost with and without the MTP drafter", headers, rows, caption=caption)
