"""`crosstune parity`: torch (TRL+PEFT) and jax (Tunix+Qwix) compute the same loss, LoRA gradients and AdamW step on
tiny Gemma 3 / Gemma 4 with the tiny-cpu recipe (fp32)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from crosstune import parity
from crosstune.parity import GRAD_RTOL, LOSS_TOL, GradDiff, ParityReport, report_table, run_parity

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "tiny-cpu.yaml"


def overrides(family: str, model_dir: Path, corpus: Path, out: Path) -> list[str]:
    return [
        f"model.family={family}",
        f"model.path={model_dir}",
        f"data.sources=[{{path: {corpus / 'train.jsonl'}}}]",
        "data.truncation=truncate",
        f"output_dir={out}",
        f"eval.problems={corpus / 'eval'}",
    ]


@pytest.mark.parametrize("family", ["gemma4", "gemma3"])
def test_backends_agree_on_one_training_step(family, tmp_path, synth_corpus_dir, tiny_gemma3_dir, tiny_gemma4_dir):
    model_dir = {"gemma3": tiny_gemma3_dir, "gemma4": tiny_gemma4_dir}[family]
    report = run_parity(RECIPE, overrides(family, model_dir, synth_corpus_dir, tmp_path))
    assert report.tokens["torch"] == report.tokens["jax"] > 0  # same rows, same loss mask
    assert report.loss_diff <= LOSS_TOL
    assert report.loss_after_diff <= LOSS_TOL
    assert report.loss["torch"] - report.loss_after["torch"] > 0.01  # the step did something
    worst = max(report.grads, key=lambda g: g.max_abs / g.scale)
    assert all(g.ok for g in report.grads), worst
    assert report.frozen <= report.elements // 10_000
    assert report.ok


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
    assert table.row_count == 6  # tokens, loss, 1 grad kind, frozen, weights, loss after
