"""pass@k (Chen et al. 2021) with its 95 % interval, VerilogEval v2's integer-percent pass rate, the reports."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from crosstune.evals.judge.significance import bootstrap_interval, interval_method
from crosstune.evals.judge.verdict import CATEGORIES, PASS


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
    codes: list[str]  # verdict code per judged sample, in sample order
    other_codes: list[str] = field(default_factory=list)  # the other rule's codes, for comparison
    failed: int = 0  # samples whose generation failed: not judged, not in n

    @property
    def n(self) -> int:
        return len(self.codes)

    @property
    def passed(self) -> int:
        return self.codes.count(PASS)

    def pass_at(self, k: int) -> float | None:
        return pass_at_k(self.n, self.passed, k) if k <= self.n else None

    def upstream_percent(self) -> int | None:
        return upstream_percent(self.n, self.passed) if self.n else None


def summarize(scores: Sequence[ProblemScore], ks: Sequence[int], mode: str, extra: dict | None = None) -> dict:
    """The summary written to summary.json: mean pass@k and its interval, upstream pass rate, category counts,
    problems.

    pass@k averages the problems with at least k judged samples (`pass_at_k_problems` counts them): when
    generation failed for some samples, it is computed over what completed. `pass_at_k_ci` is its 95 % interval
    over the same problems (`pass_at_k_ci_method` names the method).
    """
    if not scores:
        raise ValueError("no problems to summarize")
    pass_at, counted, intervals = {}, {}, {}
    for k in ks:
        values = [v for v in (s.pass_at(k) for s in scores) if v is not None]
        pass_at[str(k)], counted[str(k)] = (sum(values) / len(values) if values else None), len(values)
        intervals[str(k)] = list(bootstrap_interval(values)) if values else None
    percents = [p for p in (s.upstream_percent() for s in scores) if p is not None]
    other_mode = "upstream_compatible" if mode == "strict" else "strict"
    other_pass1 = [pass_at_k(len(s.other_codes), s.other_codes.count(PASS), 1) for s in scores if s.other_codes]
    categories = Counter(code for s in scores for code in s.codes)
    return {
        "mode": mode,
        "problems": len(scores),
        "samples": sum(s.n for s in scores),
        "pass_at_k": pass_at,
        "pass_at_k_ci": intervals,
        "pass_at_k_ci_method": interval_method(),
        "pass_at_k_problems": counted,
        "upstream_pass_rate": sum(percents) / len(percents) if percents else None,
        f"{other_mode}_pass_at_1": sum(other_pass1) / len(other_pass1) if other_pass1 else None,
        "categories": {code: categories[code] for code in CATEGORIES if categories[code]},
        "per_problem": [
            {
                "problem": s.name,
                "n": s.n,
                "passed": s.passed,
                "failed": s.failed,
                "pass_at_k": {str(k): s.pass_at(k) for k in ks},
                "upstream_percent": s.upstream_percent(),
                "codes": "".join(s.codes),
                f"{other_mode}_codes": "".join(s.other_codes),
            }
            for s in scores
        ],
        **(extra or {}),
    }


def benchmark_name(summary: dict) -> str:
    return "RTLLM" if summary.get("task") == "rtllm" else "VerilogEval"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}"


def markdown_report(summary: dict) -> str:
    """summary.md: headline numbers, category legend with counts, and the per-problem table."""
    ks = list(summary["pass_at_k"])
    lines = [f"# {benchmark_name(summary)} evaluation ({summary['mode']} verdict)", ""]
    lines += [f"- problems: {summary['problems']}, samples judged: {summary['samples']}"]
    if summary.get("engine"):
        lines += [f"- engine: {summary['engine'].get('name')}"]
    if summary.get("protocol"):
        protocol = summary["protocol"]
        departs = protocol.get("deviations")
        lines += [
            f"- protocol: {protocol['name']}"
            + (f" (departs from it in {', '.join(departs)})" if departs else "")
            + " — "
            + ", ".join(f"{k} {v}" for k, v in protocol["settings"].items())
        ]
    generation = summary.get("generation")
    if generation and generation["failed"]:
        lines += [
            f"- **generation: {generation['failed']} of {generation['requested']} samples failed** (listed "
            "below); every number here is computed over the completed samples only"
        ]
    lines += [
        f"- pass@{k}: {_pct(v)} %{_interval(summary, k)}{_over(summary, k)}" for k, v in summary["pass_at_k"].items()
    ]
    rate = summary["upstream_pass_rate"]
    lines += [f"- upstream-style pass rate (mean of integer percents): {'n/a' if rate is None else f'{rate:.2f}'}"]
    for key, label in (("strict_pass_at_1", "strict"), ("upstream_compatible_pass_at_1", "upstream")):
        if summary.get(key) is not None:
            lines += [f"- pass@1 of the same runs under the {label} verdict: {_pct(summary[key])} %"]
    lines += ["", "| code | meaning | samples |", "|---|---|---|"]
    lines += [f"| `{c}` | {CATEGORIES[c]} | {count} |" for c, count in summary["categories"].items()]
    lines += ["", "| problem | n | passed | failed | " + " | ".join(f"pass@{k}" for k in ks) + " | % | codes |"]
    lines += ["|---|---|---|---|" + "---|" * len(ks) + "---|---|"]
    for row in summary["per_problem"]:
        cells = " | ".join(_pct(row["pass_at_k"][k]) for k in ks)
        percent = "n/a" if row["upstream_percent"] is None else row["upstream_percent"]
        lines += [
            f"| {row['problem']} | {row['n']} | {row['passed']} | {row['failed']} | {cells} | {percent} "
            f"| `{row['codes']}` |"
        ]
    if generation and generation["failed"]:
        lines += ["", "## Samples whose generation failed", "", "| problem | sample | reason |", "|---|---|---|"]
        for f in generation["failed_samples"]:
            reason = " ".join(f["reason"].split()).replace("|", "\\|")
            lines += [f"| {f['problem']} | {f['sample']} | {reason} |"]
    return "\n".join(lines) + "\n"


def _interval(summary: dict, k: str) -> str:
    bounds = (summary.get("pass_at_k_ci") or {}).get(k)
    if not bounds:
        return ""
    method = summary.get("pass_at_k_ci_method", {})
    return f" (95 % interval {_pct(bounds[0])}–{_pct(bounds[1])} %, {method.get('method', 'bootstrap')})"


def _over(summary: dict, k: str) -> str:
    """How many problems pass@k averages, when not all of them (some lack k completed samples)."""
    counted = summary.get("pass_at_k_problems", {}).get(k, summary["problems"])
    return (
        ""
        if counted == summary["problems"]
        else f" (over the {counted} of {summary['problems']} problems with >= {k} completed samples)"
    )


REPORT_FILES = ("summary.json", "summary.md", "samples.jsonl")  # what write_reports writes, in this order


def write_reports(out_dir: Path, summary: dict, records: Sequence[dict]) -> list[Path]:
    """Write summary.json, summary.md and samples.jsonl (one verdict record per sample) into `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / name for name in REPORT_FILES]
    paths[0].write_text(json.dumps(summary, indent=2) + "\n")
    paths[1].write_text(markdown_report(summary))
    paths[2].write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    return paths
