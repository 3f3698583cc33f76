"""pass@k (Chen et al. 2021), VerilogEval v2's integer-percent pass rate, and the written reports."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from crosstune.evals.verdict import CATEGORIES, PASS


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimate of P(at least one of k samples passes) from n samples with c passing.

    Product form 1 - prod_{i=n-c+1..n} (1 - k/i), numerically stable where the binomial ratio overflows.
    """
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:
        return 1.0
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1.0 - k / i
    return 1.0 - product


def upstream_percent(n: int, c: int) -> int:
    """VerilogEval v2's per-problem pass rate: int((c/n)*100), truncated like sv-iv-analyze."""
    return int((c / n) * 100)


@dataclass
class ProblemScore:
    name: str
    codes: list[str]  # verdict code per sample, in sample order
    other_codes: list[str] = field(default_factory=list)  # the other rule's codes, for comparison

    @property
    def n(self) -> int:
        return len(self.codes)

    @property
    def passed(self) -> int:
        return self.codes.count(PASS)

    def pass_at(self, k: int) -> float | None:
        return pass_at_k(self.n, self.passed, k) if k <= self.n else None


def summarize(scores: Sequence[ProblemScore], ks: Sequence[int], mode: str, extra: dict | None = None) -> dict:
    """The summary written to summary.json: mean pass@k, upstream pass rate, category counts, problems."""
    if not scores:
        raise ValueError("no problems to summarize")
    pass_at = {}
    for k in ks:
        values = [s.pass_at(k) for s in scores]
        pass_at[str(k)] = None if any(v is None for v in values) else sum(values) / len(values)
    other_mode = "upstream_compatible" if mode == "strict" else "strict"
    other_pass1 = [pass_at_k(len(s.other_codes), s.other_codes.count(PASS), 1) for s in scores if s.other_codes]
    categories = Counter(code for s in scores for code in s.codes)
    return {
        "mode": mode,
        "problems": len(scores),
        "samples": sum(s.n for s in scores),
        "pass_at_k": pass_at,
        "upstream_pass_rate": sum(upstream_percent(s.n, s.passed) for s in scores) / len(scores),
        f"{other_mode}_pass_at_1": sum(other_pass1) / len(other_pass1) if other_pass1 else None,
        "categories": {code: categories[code] for code in CATEGORIES if categories[code]},
        "per_problem": [
            {
                "problem": s.name,
                "n": s.n,
                "passed": s.passed,
                "pass_at_k": {str(k): s.pass_at(k) for k in ks},
                "upstream_percent": upstream_percent(s.n, s.passed),
                "codes": "".join(s.codes),
                f"{other_mode}_codes": "".join(s.other_codes),
            }
            for s in scores
        ],
        **(extra or {}),
    }


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}"


def markdown_report(summary: dict) -> str:
    """summary.md: headline numbers, category legend with counts, and the per-problem table."""
    ks = list(summary["pass_at_k"])
    lines = [f"# VerilogEval evaluation ({summary['mode']} verdict)", ""]
    lines += [f"- problems: {summary['problems']}, samples: {summary['samples']}"]
    lines += [f"- pass@{k}: {_pct(v)} %" for k, v in summary["pass_at_k"].items()]
    lines += [f"- upstream-style pass rate (mean of integer percents): {summary['upstream_pass_rate']:.2f}"]
    for key, label in (("strict_pass_at_1", "strict"), ("upstream_compatible_pass_at_1", "upstream")):
        if summary.get(key) is not None:
            lines += [f"- pass@1 of the same runs under the {label} verdict: {_pct(summary[key])} %"]
    lines += ["", "| code | meaning | samples |", "|---|---|---|"]
    lines += [f"| `{c}` | {CATEGORIES[c]} | {count} |" for c, count in summary["categories"].items()]
    lines += ["", "| problem | n | passed | " + " | ".join(f"pass@{k}" for k in ks) + " | % | codes |"]
    lines += ["|---|---|---|" + "---|" * len(ks) + "---|---|"]
    for row in summary["per_problem"]:
        cells = " | ".join(_pct(row["pass_at_k"][k]) for k in ks)
        lines += [f"| {row['problem']} | {row['n']} | {row['passed']} | {cells} | {row['upstream_percent']} "
                  f"| `{row['codes']}` |"]  # fmt: skip
    return "\n".join(lines) + "\n"


def write_reports(out_dir: Path, summary: dict, records: Sequence[dict]) -> list[Path]:
    """Write summary.json, summary.md and samples.jsonl (one verdict record per sample) into `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "summary.json", out_dir / "summary.md", out_dir / "samples.jsonl"]
    paths[0].write_text(json.dumps(summary, indent=2) + "\n")
    paths[1].write_text(markdown_report(summary))
    paths[2].write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    return paths
