"""`crosstune parity`: torch (TRL+PEFT) and jax (Tunix+Qwix) compute the same loss, LoRA gradients and AdamW step on
tiny Gemma 3 / Gemma 4 with the tiny-cpu recipe (fp32)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from crosstune.parity import check as parity
from crosstune.parity.check import (
    BF16_EPS,
    GRAD_RTOL,
    LOSS_TOL,
    DropoutCheck,
    GradDiff,
    ParityReport,
    run_parity,
)
from crosstune.parity.table import report_table
from tests.helpers.paths import RECIPES

RECIPE = RECIPES / "tiny-cpu.yaml"


def overrides(family: str, model_dir: Path, corpus: Path, out: Path) -> list[str]:
    return [
        f"model.family={family}",
        f"model.path={model_dir}",
        f"data.sources=[{{path: {corpus / 'train.jsonl'}}}]",
        "data.truncation=truncate",
        f"output_dir={out}",
        f"eval.problems={corpus / 'eval'}",
    ]


# gemma3 also runs the step as 2 accumulated micro-batches with activation recompute on both sides (no extra cost).
VARIANTS = {"gemma4": [], "gemma3": ["train.grad_accumulation=2", "train.gradient_checkpointing=true"]}


# gemma3 (accumulation + recompute on both sides, ~33 CPU s) is slow: gemma4 keeps the parity check in the default
# suite, and tests/train/test_step_probe.py runs both backends' step with accumulation 2
@pytest.mark.parametrize("family", ["gemma4", pytest.param("gemma3", marks=pytest.mark.slow)])
def test_backends_agree_on_one_training_step(family, tmp_path, synth_corpus_dir, tiny_gemma3_dir, tiny_gemma4_dir):
    model_dir = {"gemma3": tiny_gemma3_dir, "gemma4": tiny_gemma4_dir}[family]
    report = run_parity(RECIPE, overrides(family, model_dir, synth_corpus_dir, tmp_path) + VARIANTS[family])
    assert_agree(report)
    if family == "gemma3":
        assert report.accumulation == 2 and report.recompute == {"torch": True, "jax": True}


def assert_agree(report: ParityReport) -> None:
    assert report.tokens["torch"] == report.tokens["jax"] > 0  # same rows, same loss mask
    assert report.loss_diff <= report.loss_tol
    assert report.loss_after_diff <= report.loss_tol
    assert report.loss["torch"] - report.loss_after["torch"] > 0.01  # the step did something
    worst = max(report.grads, key=lambda g: g.max_abs / g.scale)
    assert all(g.ok for g in report.grads), worst
    assert report.ok


@pytest.mark.slow
def test_sharded_mesh_accumulation_and_recompute(tmp_path, synth_corpus_dir, tiny_gemma4_dir):
    """jax on fsdp=2 × tp=4 (inputs split over fsdp, 2 KV heads replicated over tp) vs one torch process."""
    mesh = ["backend.jax.mesh.fsdp=2", "backend.jax.mesh.tp=4", "backend.jax.replicate_indivisible_heads=true"]
    variant = [*mesh, "train.grad_accumulation=2", "train.gradient_checkpointing=true"]
    report = run_parity(RECIPE, overrides("gemma4", tiny_gemma4_dir, synth_corpus_dir, tmp_path) + variant)
    assert report.mesh == (2, 4) and report.rows == 4 and report.accumulation == 2
    assert report.recompute == {"torch": True, "jax": True}
    assert_agree(report)
    assert report.frozen <= report.elements // 10_000


@pytest.mark.slow
def test_bf16_on_both_sides(tmp_path, synth_corpus_dir, tiny_gemma4_dir):
    report = run_parity(RECIPE, overrides("gemma4", tiny_gemma4_dir, synth_corpus_dir, tmp_path), precision="bf16")
    assert report.precision == "bf16" and report.loss_tol == pytest.approx(4 * 2**-8 * report.loss["torch"])
    assert report.loss_diff > 1e-4  # really bf16: fp32 agrees to ~1e-6
    assert report.ok


@pytest.mark.slow
def test_lora_dropout_agrees_in_expectation(tmp_path, synth_corpus_dir, tiny_gemma4_dir):
    report = run_parity(
        RECIPE, overrides("gemma4", tiny_gemma4_dir, synth_corpus_dir, tmp_path), dropout=0.1, dropout_samples=8
    )
    d = report.dropout
    assert d is not None and d.p == 0.1 and len(d.losses["torch"]) == len(d.losses["jax"]) == 8
    assert d.ok and report.ok, (d.mean("torch"), d.mean("jax"), d.bound)


def _report(loss_after_jax: float, grad_diff: float = 1e-8) -> ParityReport:
    return ParityReport(
        "gemma4",
        2,
        tokens={"torch": 10, "jax": 10},
        loss={"torch": 7.0, "jax": 7.0},
        loss_after={"torch": 6.9, "jax": loss_after_jax},
        grads=[GradDiff("model.layers.0.self_attn.q_proj", "A", grad_diff, 1.0)],
    )


def test_out_of_tolerance_fails_with_exit_code(monkeypatch, tmp_path):
    assert _report(6.9).ok
    assert not _report(6.9 + 2 * LOSS_TOL).ok
    assert not _report(6.9, grad_diff=2 * GRAD_RTOL).ok
    from crosstune.cli import _register, app

    if not any(c.name == "parity" for c in app.registered_commands):
        _register()
    monkeypatch.setattr(parity, "run_parity", lambda *a, **k: _report(6.9 + 2 * LOSS_TOL))
    result = CliRunner().invoke(app, ["parity", str(RECIPE)], terminal_width=200)
    assert result.exit_code == 1 and "parity FAILED" in result.output
    monkeypatch.setattr(parity, "run_parity", lambda *a, **k: _report(6.9))
    result = CliRunner().invoke(app, ["parity", str(RECIPE)], terminal_width=200)
    assert result.exit_code == 0 and "parity ok" in result.output
    assert "loss after" in result.output


def test_table_lists_every_lora_kind():
    table = report_table(_report(6.9))
    assert table.row_count == 7  # recompute, tokens, loss, 1 grad kind, frozen, weights, loss after


def test_bf16_tolerances_come_from_bf16_precision():
    report = _report(6.9)
    report.precision = "bf16"
    assert report.loss_tol == pytest.approx(4 * 2**-8 * 7.0)  # relative to the loss, 4 bf16 ulps
    assert report.ok
    report.loss_after["jax"] = 6.9 + 1.01 * report.loss_tol
    assert not report.ok
    assert BF16_EPS == 2**-8 and GradDiff("m", "A", 1.0, 1.0, math.inf).ok  # bf16 gradients: reported only


def test_dropout_check_needs_active_dropout_and_agreeing_means():
    rng = np.random.default_rng(0)
    torch_draws, jax_draws = list(7.0 + 0.01 * rng.standard_normal(8)), list(7.0 + 0.01 * rng.standard_normal(8))
    assert DropoutCheck(0.1, {"torch": torch_draws, "jax": jax_draws}, LOSS_TOL).ok
    shifted = [x + 0.05 for x in jax_draws]  # ~14 standard errors apart: e.g. a missing 1/(1-p) rescale
    assert not DropoutCheck(0.1, {"torch": torch_draws, "jax": shifted}, LOSS_TOL).ok
    inactive = [7.0] * 8  # one side ignored the dropout rate
    assert not DropoutCheck(0.1, {"torch": torch_draws, "jax": inactive}, LOSS_TOL).ok
    report = _report(6.9)
    report.dropout = DropoutCheck(0.1, {"torch": torch_draws, "jax": shifted}, LOSS_TOL)
    assert not report.ok and report_table(report).row_count == 8


def test_recompute_must_be_on_both_sides_or_neither():
    report = _report(6.9)
    report.recompute = {"torch": True, "jax": False}
    assert not report.ok
