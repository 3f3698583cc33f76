"""What a preparation did: counts, skips by reason, trained-token fraction, packing efficiency, length histogram."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Annotated

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from rich.table import Table

from crosstune.data.bad_input import Ledger
from crosstune.data.packing import Rows

FIGURES = ConfigDict(strict=True, extra="allow", frozen=True, allow_inf_nan=False)  # keys a newer crosstune adds: kept
Count = Annotated[int, Field(ge=0)]
Measure = Annotated[float, Field(ge=0)]  # finite too: FIGURES refuses NaN and the infinities


class Lengths(BaseModel):
    """Token length of a split's records before the length policy: percentiles, max, mean, the fraction that fits."""

    model_config = FIGURES
    p50: Count
    p90: Count
    p99: Count
    max: Count
    mean: Measure
    fraction_within_max_seq_len: Annotated[float, Field(ge=0, le=1)]


class Histogram(BaseModel):
    """The lengths' histogram: counts[i] records between edges[i] and edges[i + 1] (both empty: no records)."""

    model_config = FIGURES
    edges: list[float]
    counts: list[Count]

    @field_validator("edges")
    @classmethod
    def _increasing(cls, edges: list[float]) -> list[float]:
        if any(b <= a for a, b in zip(edges, edges[1:], strict=False)):
            raise ValueError("the edges must increase")
        return edges

    @field_validator("counts")
    @classmethod
    def _one_per_bin(cls, counts: list[int], info: ValidationInfo) -> list[int]:
        edges = info.data.get("edges")  # absent when they did not type
        if edges is not None and len(counts) != (bins := max(len(edges) - 1, 0)):
            raise ValueError(f"the edges hold {bins} bins, one count each: {len(counts)} given")
        return counts


class SplitStats(BaseModel):
    """One split's figures in stats.json, as split_stats writes them."""

    model_config = FIGURES
    records_in: Count
    records_out: Count
    skipped: dict[str, Count]
    skipped_examples: list[str]
    dropped: dict[str, Count]
    dropped_examples: list[str]
    subsampled_out: Count
    blank_lines: Count
    truncated: Count
    truncated_tokens_cut: Count
    tokens: Count
    target_tokens: Count
    trained_fraction: Measure
    straddling_tokens: Count
    untrained_turns: Count
    rows: Count
    row_length: Count
    packing_efficiency: Measure
    padding_efficiency: Measure
    malformed_markup: dict[str, Count]
    lengths: Lengths
    histogram: Histogram


class PreparedStats(BaseModel):
    """stats.json, the one shape its writer (save_stats) and its readers (PreparedDataset.stats) check: the recipe's
    name, each split's figures and the warnings (a system prompt the targets disobey...)."""

    model_config = FIGURES
    recipe: str
    splits: dict[str, SplitStats]
    warnings: list[str]


PERCENTILES = tuple(int(name[1:]) for name in Lengths.model_fields if name.startswith("p"))  # (50, 90, 99)
DROP_LABELS = {"too_long": "longer than max_seq_len", "prompt_too_long": "prompt alone longer than max_seq_len"}


def split_stats(
    rows: Rows,
    raw_lengths: np.ndarray,
    ledger: Ledger,
    malformed: Counter,
    subsampled_out: int,
    blank_lines: int,
    straddling: int,
    truncated_tokens_cut: int,
    untrained_turns: int,
) -> dict:
    """The figures of one split (JSON-ready). `raw_lengths`: token length of every tokenized record before the
    length policy, so the histogram shows what max_seq_len cut or dropped. `ledger`: the records skipped as bad and
    those the length policy dropped."""
    n_rows, row_len = rows.input_ids.shape
    n_docs = len(rows.doc_row)
    tokens = int(np.count_nonzero(rows.segment_ids))
    targets = int(rows.loss_mask.sum(dtype=np.int64))
    lengths = {f"p{q}": _pct(raw_lengths, q) for q in PERCENTILES}
    lengths["max"] = int(raw_lengths.max()) if raw_lengths.size else 0
    lengths["mean"] = round(float(raw_lengths.mean()), 1) if raw_lengths.size else 0.0
    lengths["fraction_within_max_seq_len"] = _ratio(int((raw_lengths <= row_len).sum()), raw_lengths.size)
    counts, edges = np.histogram(raw_lengths, bins=40) if raw_lengths.size else (np.zeros(0), np.zeros(0))
    skipped, dropped = ledger.skipped, ledger.dropped
    return {
        "records_in": n_docs + sum(skipped.values()) + sum(dropped.values()) + subsampled_out,
        "records_out": n_docs,
        "skipped": dict(sorted(skipped.items())),
        "skipped_examples": ledger.examples,
        "dropped": dict(sorted(dropped.items())),  # longer than max_seq_len: the length policy, not bad records
        "dropped_examples": ledger.dropped_examples,
        "subsampled_out": subsampled_out,
        "blank_lines": blank_lines,
        "truncated": int(rows.doc_truncated.sum()),
        "truncated_tokens_cut": truncated_tokens_cut,
        "tokens": tokens,
        "target_tokens": targets,
        "trained_fraction": _ratio(targets, tokens),
        "straddling_tokens": straddling,
        "untrained_turns": untrained_turns,  # earlier assistant turns the template never serves as rendered
        "rows": int(n_rows),
        "row_length": int(row_len),
        "packing_efficiency": _ratio(tokens, n_rows * row_len),
        "padding_efficiency": _ratio(tokens, n_docs * row_len),  # one padded row per record, for comparison
        "malformed_markup": dict(sorted(malformed.items())),
        "lengths": lengths,
        "histogram": {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts]},
    }


def _pct(values: np.ndarray, q: int) -> int:
    return int(np.percentile(values, q, method="higher")) if values.size else 0


def _ratio(a: int, b: int) -> float:
    return round(a / b, 4) if b else 0.0


def stats_table(stats: dict, title: str = "Prepared data") -> Table:
    """A rich table: one row per figure, one column per split."""
    splits = stats["splits"]
    table = Table(title=title)
    table.add_column("figure")
    for name in splits:
        table.add_column(name, justify="right")

    def row(label: str, fn) -> None:
        table.add_row(label, *(fn(s) for s in splits.values()))

    row("records in", lambda s: f"{s['records_in']:,}")
    row("records out", lambda s: f"{s['records_out']:,}")
    reasons = sorted({r for s in splits.values() for r in s["skipped"]})
    for reason in reasons:
        row(f"  skipped: {reason}", lambda s, r=reason: f"{s['skipped'].get(r, 0):,}")
    for reason in sorted({r for s in splits.values() for r in s.get("dropped", {})}):
        row(f"  dropped: {DROP_LABELS.get(reason, reason)}", lambda s, r=reason: f"{s.get('dropped', {}).get(r, 0):,}")
    row("  subsampled out", lambda s: f"{s['subsampled_out']:,}")
    row("truncated (tokens cut)", lambda s: f"{s['truncated']:,} ({s['truncated_tokens_cut']:,})")
    row("tokens", lambda s: f"{s['tokens']:,}")
    row("trained tokens", lambda s: f"{s['target_tokens']:,} ({s['trained_fraction']:.1%})")
    if any(s.get("untrained_turns") for s in splits.values()):  # only a non-prefix-stable template leaves some
        row("  untrained earlier assistant turns", lambda s: f"{s.get('untrained_turns', 0):,}")
    row("rows × length", lambda s: f"{s['rows']:,} × {s['row_length']}")
    row("packing efficiency (non-pad)", lambda s: f"{s['packing_efficiency']:.1%}")
    row("  vs one record per row", lambda s: f"{s['padding_efficiency']:.1%}")
    for rule in sorted({r for s in splits.values() for r in s["malformed_markup"]}):
        row(f"markup: {rule}", lambda s, r=rule: f"{s['malformed_markup'].get(r, 0):,}")
    row("length p50 / p90 / p99 / max", lambda s: "{p50} / {p90} / {p99} / {max}".format(**s["lengths"]))
    row("fraction ≤ max_seq_len", lambda s: f"{s['lengths']['fraction_within_max_seq_len']:.1%}")
    return table


def skipped_examples(stats: dict) -> list[str]:
    return [f"{name}: {e}" for name, s in stats["splits"].items() for e in s["skipped_examples"]]


def dropped_examples(stats: dict) -> list[str]:
    return [f"{name}: {e}" for name, s in stats["splits"].items() for e in s.get("dropped_examples", [])]


def summary_line(stats: dict, split: str = "train") -> str:
    """One line: records kept of those read, and what was dropped (length policy) or skipped (bad records)."""
    s = stats["splits"][split]
    parts = [f"{split}: kept {s['records_out']:,} of {s['records_in']:,} records"]
    dropped, skipped = s.get("dropped", {}), s["skipped"]
    if dropped:
        what = ", ".join(f"{n:,} {DROP_LABELS.get(r, r)} {s['row_length']}" for r, n in dropped.items())
        parts.append(f"dropped {what}" if len(dropped) == 1 else f"dropped {sum(dropped.values()):,} ({what})")
    if skipped:
        parts.append(f"skipped {sum(skipped.values()):,} bad ({', '.join(f'{r} {n:,}' for r, n in skipped.items())})")
    if s["subsampled_out"]:
        parts.append(f"{s['subsampled_out']:,} left out by data.subsample")
    return "; ".join(parts)


def save_stats(folder: Path, stats: dict) -> None:
    """stats.json, once its figures type as PreparedStats (what its readers check), and lengths.png (token-length
    histogram per split, max_seq_len and percentiles marked)."""
    folder = Path(folder)
    figures = PreparedStats.model_validate(stats)
    (folder / "stats.json").write_text(json.dumps(stats, indent=1, ensure_ascii=False) + "\n")
    import matplotlib

    matplotlib.use("Agg")  # files only: never open a window
    import matplotlib.pyplot as plt

    splits = figures.splits
    fig, axes = plt.subplots(1, max(1, len(splits)), figsize=(6 * max(1, len(splits)), 3.6), squeeze=False)
    for ax, (name, s) in zip(axes[0], splits.items(), strict=False):
        if s.histogram.counts:
            ax.stairs(s.histogram.counts, s.histogram.edges, fill=True, alpha=0.6)
        ax.axvline(s.row_length, color="red", label=f"max_seq_len {s.row_length}")
        for q, style in zip(PERCENTILES, (":", "--", "-."), strict=True):
            at = getattr(s.lengths, f"p{q}")
            ax.axvline(at, color="black", linestyle=style, label=f"p{q} {at}")
        ax.set_title(f"{name}: tokens per record ({s.lengths.fraction_within_max_seq_len:.1%} ≤ max_seq_len)")
        ax.set_xlabel("tokens")
        ax.set_ylabel("records")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(folder / "lengths.png", dpi=100)
    plt.close(fig)
