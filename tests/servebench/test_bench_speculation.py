"""Speculative decoding in the bench: vLLM's spec_decode counters read per cell (proposed / accepted, acceptance
rate, mean accepted length, per position), none without a drafter, and drafted vs undrafted sweeps compared by one
rule in `bench compare` and the report (the drafter is what is compared, not a different workload)."""

from __future__ import annotations

import asyncio

import pytest
from typer.testing import CliRunner

from crosstune.cli import _register, app
from crosstune.cost.prices import PriceBook
from crosstune.report.comparability import compare_sweeps
from crosstune.report.document import Document
from crosstune.report.serving_sections import serving_section
from crosstune.servebench import server_metrics, speculation
from crosstune.servebench.summary_cells import read_sweep
from crosstune.servebench.sweep import SweepConfig, run_sweep
from tests.helpers.fake_openai import FakeOpenAI

METRICS = """# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 20.0
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 7.0
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 5.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 2.0
"""


def sweep(out, tokenizer, url, **kw):
    cfg = SweepConfig(endpoint=url, model="ok", tokenizer=tokenizer, contexts=[16], output_len=8, **kw)
    return asyncio.run(run_sweep(cfg, out)), None


def test_counters_as_vllm_exposes_them():
    """vLLM 0.32's text format (labels engine, model_name, position): deltas, rate, length and positions."""
    after = server_metrics.parse(METRICS)
    before = {k: 0.0 for k in after}
    spec = speculation.cell_speculation(server_metrics.delta(before, after), {"model": "/d", "tokens": 2})
    assert spec == {
        "drafter": "/d",
        "draft_tokens_per_step": 2,
        "drafts": 10.0,
        "proposed_tokens": 20.0,
        "accepted_tokens": 7.0,
        "acceptance_rate": 0.35,
        "mean_accepted_length": 1.7,
        "acceptance_per_position": [0.5, 0.2],
    }
    assert speculation.cell_speculation(server_metrics.delta({}, {"x": 1.0})) is None  # no drafter: no counters


def test_sweep_records_acceptance_per_cell(tmp_path, tiny_gemma4_dir):
    with FakeOpenAI(draft=[0.6, 0.3]) as server:
        summary, _ = sweep(tmp_path, tiny_gemma4_dir, server.url, concurrency=[1, 2], num_requests=4, warmup=1)
    for cell in summary["cells"]:
        s = cell["speculation"]  # 4 timed requests × 8 tokens, the warm-up's excluded
        assert s["drafts"] == pytest.approx(32 / 1.9) and s["proposed_tokens"] == pytest.approx(2 * 32 / 1.9)
        assert s["acceptance_rate"] == pytest.approx(0.45) and s["mean_accepted_length"] == pytest.approx(1.9)
        assert s["acceptance_per_position"] == pytest.approx([0.6, 0.3])
        assert "acceptance 45.0 %" in speculation.line(cell)
    assert speculation.sweep_kind(summary) != speculation.NONE
    assert read_sweep(tmp_path).declared["speculative decoding"] == "a drafter (the engine's spec_decode counters)"


def test_compare_sets_drafted_against_undrafted_as_the_report_does(tmp_path, tiny_gemma4_dir):
    a, b = tmp_path / "a", tmp_path / "b"
    with FakeOpenAI() as server:
        plain, _ = sweep(a, tiny_gemma4_dir, server.url, concurrency=[1], num_requests=2, warmup=0)
    with FakeOpenAI(draft=[0.5]) as server:
        sweep(b, tiny_gemma4_dir, server.url, concurrency=[1], num_requests=2, warmup=0)
    assert plain["cells"][0]["speculation"] is None and speculation.sweep_kind(plain) == speculation.NONE
    assert read_sweep(a).declared["speculative decoding"] == "no drafter"
    if not any(c.name == "export" for c in app.registered_commands):
        _register()
    out = CliRunner().invoke(app, ["bench", "compare", str(a), str(b)])
    text = " ".join(out.output.split())
    assert out.exit_code == 0, text
    assert f"compared: speculative decoding — A ({a}): no drafter; B ({b}): a drafter" in text
    assert "output_throughput" in text  # the table of ratios follows
    assert CliRunner().invoke(app, ["bench", "compare", str(b), str(b)]).exit_code == 0


def test_report_sets_cost_with_and_without_the_drafter_side_by_side(tmp_path, tiny_gemma4_dir):
    """Two sweeps of one model, one drafted: the report's comparability names the difference as the subject (not a
    workload error), and its drafter table prices both at saturation with the drafted cell's acceptance."""
    a, b = tmp_path / "plain", tmp_path / "mtp"
    with FakeOpenAI() as server:
        sweep(
            a, tiny_gemma4_dir, server.url, concurrency=[1, 2], num_requests=3, warmup=0, label="plain", target="2xh100"
        )
    with FakeOpenAI(draft=[0.5, 0.25]) as server:
        sweep(
            b, tiny_gemma4_dir, server.url, concurrency=[1, 2], num_requests=3, warmup=0, label="mtp", target="2xh100"
        )
    sweeps = [read_sweep(a), read_sweep(b)]
    notes = compare_sweeps(sweeps)
    assert not [n for n in notes if n.level == "error"]
    assert any("compared: speculative decoding — plain: no drafter; mtp: a drafter" in n.text for n in notes)
    doc = Document("report")
    costs = serving_section(doc, sweeps, PriceBook(), None)
    [table] = [t for t in doc.sections[0].items if getattr(t, "title", "").startswith("Serving cost with and")]
    [row] = table.rows
    plain_cost, mtp_cost = costs[0][0], costs[1][0]
    assert row[:3] == ["16", "plain", "mtp"]
    assert row[5] == f"{mtp_cost.usd_per_m_output / plain_cost.usd_per_m_output:.2f}×"
    assert row[8] == "37.5 %" and row[9] == "1.75"  # (0.5 + 0.25) / 2 accepted; 1 + 0.75 per drafting step
