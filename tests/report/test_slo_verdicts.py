"""One SLO judge: the table `bench serve` prints and the report's serving cost give the same verdict on the same
sweep — failed requests miss, a value equal to its limit meets it, a hair above misses and is shown as above — and
goodput counts requests by the same rule."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from crosstune.cost.prices import PriceBook
from crosstune.report.document import Document
from crosstune.report.serving_sections import serving_section
from crosstune.servebench.bench_table import render_summary
from crosstune.servebench.client import RequestRecord
from crosstune.servebench.request_metrics import saturation, summarize
from crosstune.servebench.slo import cell_misses, request_meets
from crosstune.servebench.summary_cells import read_sweep
from crosstune.servebench.sweep import SweepConfig, new_summary

LIMIT_MS = 2000.0
SLO = {"p99_ttft_ms": LIMIT_MS}
HAIR_S = 2.0000001  # 2000.0001 ms: above the limit, and the same as it once rounded to .1f (the old bench text)


def requests(ctx: int, conc: int, ttft_s: float, failed: int = 0, n: int = 4) -> list[RequestRecord]:
    """`n` requests of 8 tokens with TTFT `ttft_s` (the cell's p99 is exactly that), the last `failed` timed out."""
    out = []
    for i in range(n):
        r = RequestRecord(ctx, conc, None, i, ctx, 8, ttft_s=ttft_s, e2el_s=ttft_s + 0.07)
        r.itl_s, r.chunk_tokens, r.completion_tokens, r.prompt_tokens = [0.01] * 7, [1] * 8, 8, ctx
        if i >= n - failed:
            r.error = "timeout: no complete answer within the 120 s deadline per request (--timeout)"
        out.append(r)
    return out


CELLS = {  # (context, concurrency): (requests, the verdict both tables must give)
    (128, 1): (requests(128, 1, 2.0), "met"),  # p99 TTFT exactly at the limit
    (128, 2): (requests(128, 2, HAIR_S), "missed: p99_ttft_ms 2,000.0001 > 2,000"),
    (128, 4): (requests(128, 4, 1.0, failed=1), "missed: 1 failed request(s)"),  # latencies well within
    (128, 8): (
        requests(128, 8, 1.0, failed=4),
        "missed: 4 failed request(s), no completed request, p99_ttft_ms not measured",
    ),
    (256, 1): (requests(256, 1, HAIR_S), "missed: p99_ttft_ms 2,000.0001 > 2,000"),
}


def bench_summary(tmp_path) -> dict:
    """The summary `bench serve --slo p99_ttft_ms=2000` writes for these cells (its own summarize())."""
    cfg = SweepConfig("http://127.0.0.1:1", "m", tmp_path, [128, 256], slo_ms=SLO, label="s", target="2xh100")
    summary = new_summary(cfg)
    for records, _ in CELLS.values():
        cell = summarize(records, 1.0, SLO)
        cell |= {"warmup": {"sent": 0, "failed": 0}, "load_avg_1m": [1.0, 1.0], "server": None}
        summary["cells"].append(cell)
    summary["saturation"] = saturation(summary["cells"])
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    return summary


def bench_table_verdicts(summary: dict) -> dict[tuple[int, int], str]:
    """The SLO column of the table `bench serve` prints, per (context, load)."""
    console = Console(record=True, width=1000)
    render_summary(summary, console)
    rows = [line.strip("│ ").split("│") for line in console.export_text().splitlines() if line.startswith("│")]
    return {(int(r[0]), int(r[1])): r[-1].strip() for r in rows if r[0].strip().isdigit()}


def test_the_bench_table_and_the_report_give_the_same_verdicts(tmp_path):
    summary = bench_summary(tmp_path)
    expected = {key: verdict for key, (_, verdict) in CELLS.items()}
    assert bench_table_verdicts(summary) == expected
    assert [c["slo_misses"] for c in summary["cells"]] == [
        [] if v == "met" else v.removeprefix("missed: ").split(", ") for v in expected.values()
    ]  # what summary.json records for each cell
    sweep = read_sweep(tmp_path / "summary.json")
    report = {(c.context_len, c.concurrency): c.slo_misses(SLO) for c in sweep.cells}
    assert {k: "met" if not m else "missed: " + ", ".join(m) for k, m in report.items()} == expected
    doc = Document("report")
    serving_section(doc, [sweep], PriceBook(), SLO)
    [cost] = [t for t in doc.sections[0].items if getattr(t, "title", "") == "Serving cost"]
    slo_rows = {int(r[1]): r for r in cost.rows if r[2].startswith("SLO")}
    assert slo_rows[128][2] == "SLO p99_ttft_ms <= 2,000" and slo_rows[128][3] == "1"  # the only cell that met it
    assert slo_rows[256][3] == "n/a" and slo_rows[256][6].endswith(
        "no load at context 256 meets the SLO (p99_ttft_ms <= 2,000) — concurrency 1: p99_ttft_ms 2,000.0001 > 2,000"
    )


def test_goodput_counts_the_requests_the_one_rule_passes(tmp_path):
    summary = bench_summary(tmp_path)
    goodput = [c["goodput"] for c in summary["cells"]]
    assert goodput == [4.0, 0.0, 3.0, 0.0, 0.0]  # per second of a 1 s cell: a failed request never counts


def test_a_request_is_judged_on_what_it_has_and_a_failed_one_never_meets():
    slo = {"p99_tpot_ms": 50.0, "median_tpot_ms": 40.0, "p99_e2el_ms": 1000.0}  # TPOT: the tighter 40 ms counts
    assert request_meets(True, {"ttft": 0.5, "tpot": 0.04, "e2el": 1.0}, slo)  # both exactly at their limits
    assert not request_meets(True, {"ttft": 0.5, "tpot": 0.0400001, "e2el": 1.0}, slo)
    assert request_meets(True, {"ttft": 0.5, "tpot": None, "e2el": 0.5}, slo)  # one output token: no TPOT
    assert not request_meets(True, {"ttft": 0.5, "tpot": None, "e2el": 1.001}, slo)
    assert not request_meets(False, {"ttft": 0.1, "tpot": 0.01, "e2el": 0.2}, slo)  # a failure, however fast
    assert request_meets(True, {"ttft": 99.0, "tpot": 0.01, "e2el": 0.2}, {"p99_itl_ms": 1.0})  # ITL: cells only


@pytest.mark.parametrize(
    ("value", "shown"),
    [(2000.04, "2,000.04"), (2000.0000001, "2,000.0000001"), (2000.5, "2,000.5"), (3456.78, "3,456.8")],
)
def test_a_miss_is_shown_with_the_decimals_that_make_it_a_miss(value, shown):
    assert cell_misses(1, 0, {"p99_ttft_ms": value}, SLO) == [f"p99_ttft_ms {shown} > 2,000"]
    assert cell_misses(1, 0, {"p99_ttft_ms": 2000.0}, SLO) == []
