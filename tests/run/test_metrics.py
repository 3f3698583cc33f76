"""Shared training metrics: definitions, derived rates, LoRA-convention MFU, JSONL + TensorBoard writing."""

import json

import pytest

from crosstune.families import get_family
from crosstune.hardware import get_hardware
from crosstune.run.metrics import METRIC_DEFINITIONS, MetricsRowBuilder, MetricsWriter, StepMetrics, read_metrics

G4 = get_family("gemma4").spec("31b")


MEASURED = dict(
    step=1,
    loss=1.5,
    learning_rate=1e-4,
    grad_norm=0.3,
    trained_tokens=4 * 3072,
    tokens=8 * 3072,
    computed_tokens=8 * 3072,
    step_time_s=2.0,
    peak_memory_gib=None,
)


def rows(hw="tpu-v5p-8", devices=4, remat=True, attention=True, matmuls=True) -> MetricsRowBuilder:
    """The builder for a Gemma 4 31B run at 3072 tokens, 10 micro-batches per epoch, 1 per step."""
    return MetricsRowBuilder(
        spec=G4,
        context=3072,
        hardware=get_hardware(hw),
        devices=devices,
        recompute_activations=remat,
        recompute_attention=attention,
        recompute_matmuls=matmuls,
        accumulation=1,
        micro_batches_per_epoch=10,
    )


def step(n, hw="tpu-v5p-8", devices=4, remat=True, tokens=8 * 3072, seconds=2.0, computed=None):
    return rows(hw, devices, remat).row(
        step=n,
        loss=1.5,
        learning_rate=1e-4,
        grad_norm=0.3,
        trained_tokens=tokens // 2,
        tokens=tokens,
        computed_tokens=tokens if computed is None else computed,
        step_time_s=seconds,
        peak_memory_gib=None,
    )


def test_every_metric_field_is_defined():
    """The definitions are the schema's field descriptions: none may be left empty."""
    assert list(METRIC_DEFINITIONS) == list(StepMetrics.model_fields)
    assert all(len(text) > 20 for text in METRIC_DEFINITIONS.values()), METRIC_DEFINITIONS


def test_rates_mfu_and_hfu_by_hand():
    m = step(1)
    assert m.tokens_per_s == 8 * 3072 / 2.0 and m.trained_tokens_per_s == 4 * 3072 / 2.0
    # mfu: model FLOPs = forward + backward to activations (2x forward), recompute NOT counted (that is hfu)
    flops = 8 * 3072 * 2 * G4.forward_flops_per_token(3072)
    assert m.mfu == pytest.approx(flops / (2.0 * 459e12 * 4), rel=1e-12)
    assert step(1, remat=False).mfu == m.mfu  # recompute changes the hardware's work, not the model's
    assert m.hfu == pytest.approx(m.mfu * 3 / 2) and step(1, remat=False).hfu == pytest.approx(m.mfu)
    # The seed's TPU run: 763 tok/s on v5p-8 at ~3k tokens -> about 5% MFU under the LoRA convention.
    seed = step(1, tokens=763, seconds=1.0, remat=False)
    assert 0.04 < seed.mfu < 0.07
    cpu = step(1, hw="cpu", devices=1)
    assert cpu.mfu is None and cpu.mfu_computed is None and cpu.hfu is None


def test_hfu_counts_what_each_recompute_policy_recomputes():
    """The recomputed forward follows the policy: all of it under full recompute; less the attention under torch's
    selective (its outputs kept); the attention alone under jax's dots (every weight matmul's output kept). Gemma 4
    31B at 3072 tokens: attention is 3.69e9 of the forward's 6.51e10 FLOPs per token."""
    forward, attention = G4.forward_flops_per_token(3072), G4.attention_flops_per_token(3072)
    assert attention == pytest.approx(3.691e9, rel=1e-3) and forward == pytest.approx(6.508e10, rel=1e-3)
    per_token = {}
    for name, attn, matmuls in (("full", True, True), ("selective", False, True), ("dots", True, False)):
        m = rows(attention=attn, matmuls=matmuls).row(**MEASURED)
        per_token[name] = m.hfu * 2.0 * 459e12 * 4 / (8 * 3072)
        assert m.mfu == step(1).mfu  # the model's FLOPs don't depend on the policy
    assert per_token["full"] == pytest.approx(3 * forward, rel=1e-12)
    assert per_token["selective"] == pytest.approx(3 * forward - attention, rel=1e-12)
    assert per_token["dots"] == pytest.approx(2 * forward + attention, rel=1e-12)
    off = rows(remat=False, matmuls=False).row(**MEASURED)
    assert off.hfu == pytest.approx(off.mfu)  # nothing recomputed: no policy adds anything


def test_padding_is_counted_apart_from_real_tokens():
    """Unpacked rows: the jax backend computes 8 whole rows of 3072 positions for 44.6 % real tokens (the
    demo's figure); `mfu` credits the real tokens only, `mfu_computed` and `hfu` the positions computed."""
    real = round(0.446 * 8 * 3072)
    m = step(1, tokens=real, computed=8 * 3072)
    assert m.computed_tokens == 8 * 3072 and m.tokens == real
    assert m.mfu_computed == pytest.approx(m.mfu * 8 * 3072 / real)
    assert m.hfu == pytest.approx(m.mfu_computed * 3 / 2)


def test_writer_jsonl_tensorboard_and_resume(tmp_path):
    w = MetricsWriter(tmp_path)
    for n in (1, 2, 3):
        w.write(step(n))
    w.close()
    rows = read_metrics(tmp_path)
    assert [r.step for r in rows] == [1, 2, 3] and set(rows[0].model_dump()) == set(METRIC_DEFINITIONS)
    assert list((tmp_path / "tensorboard").iterdir())
    # A run resumed from the step-2 checkpoint rewrites step 3 instead of duplicating it.
    w = MetricsWriter(tmp_path, resume_from_step=2)
    w.write(step(3))
    w.close()
    assert [r.step for r in read_metrics(tmp_path)] == [1, 2, 3]
    assert json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])["loss"] == 1.5
