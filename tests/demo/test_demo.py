"""`crosstune demo` is a caller of the study: a corpus, a bundle per backend, the report, demo.json; a second run
finds every stage up to date and trains nothing. The default suite runs it on the torch backend at tiny settings
(the shipped base, 2 steps, 8 records, 4 problems); the slow test runs both backends with parity, as `make demo`."""

from __future__ import annotations

import json
import time

import pytest
from rich.console import Console

from crosstune.demo import runner as demo_runner
from crosstune.demo.runner import run_demo
from crosstune.study.bundle import read_manifest
from crosstune.study.runner import STAGE_NAMES

TINY = {"steps": 2, "n_train": 8, "n_eval": 4}


def demo(out, **kwargs):
    console = Console(record=True, width=200)
    t0 = time.perf_counter()
    result = run_demo(out, **TINY, **kwargs, console=console)
    return result, console.export_text(), time.perf_counter() - t0


@pytest.fixture(scope="module")
def torch_demo(tmp_path_factory):
    """The demo on the torch backend alone (its study with pretrain and eval-base; parity needs both backends),
    twice: (out, first (result, log, s), second (result, log, s), the torch bundle's manifest after the first)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("CROSSTUNE_SERVE_VENV", str(tmp_path_factory.mktemp("no-serve-env")))
    mp.setattr(demo_runner, "BACKENDS", ("torch",))
    mp.setattr(demo_runner, "FIRST_WITH", ("pretrain", "eval-base"))
    try:
        out = tmp_path_factory.mktemp("demo") / "demo-out"
        first = demo(out)
        manifest = read_manifest(out / "torch")
        second = demo(out)
    finally:
        mp.undo()
    return out, first, second, manifest


def test_the_demo_makes_a_corpus_a_bundle_per_backend_a_report_and_its_manifest(torch_demo):
    out, (result, log, _), _, _ = torch_demo
    assert sorted(p.name for p in out.iterdir()) == ["corpus", "demo.json", "report", "torch"]
    manifest = read_manifest(out / "torch")
    assert manifest.with_ == ["pretrain", "eval-base"]
    stages = manifest.stages
    assert list(stages) == [
        "pretrain",
        "prepare",
        "plan",
        "train",
        "export",
        "serve",
        "bench",
        "eval",
        "eval-base",
        "cost",
    ]
    assert {n: s.status for n, s in stages.items() if s.status != "done"} == {"serve": "skipped", "bench": "skipped"}
    run = json.loads((out / "torch" / "runs" / "demo-cpu-torch" / "run.json").read_text())
    assert run["base_model"] == str(out / "torch" / "base") and run["steps"] == 2  # trained on the bundle's base
    assert stages["pretrain"].record["key"].startswith("gemma4-small-")
    assert manifest.contents.evals == ["eval/finetune", "eval/base"]
    corpus = json.loads((out / "corpus" / "manifest.json").read_text())
    assert (corpus["n_train"], corpus["n_eval"]) == (8, 4) and corpus["split"]["families"] == list(corpus["families"])
    demo_json = json.loads((out / "demo.json").read_text())
    assert demo_json["made_by"] == "crosstune demo" and demo_json["bundles"] == {"torch": "torch"}
    assert demo_json["report"] == "report/report.html" and (out / "report" / "report.html").is_file()
    figures = demo_json["figures"]
    assert list(figures) == ["base (pretrained, never saw these task kinds)", "LoRA fine-tune, torch"]
    assert all(f["problems"] == 4 and f["passed"] == round(4 * f["pass_at_k"]["1"]) for f in figures.values())
    assert demo_json["engines"] == [result.scores[0].summary.engine.name]  # one engine for both models
    cpu = demo_json["runs"][0]["cpu"]
    assert cpu["model"] and "cpu family" in cpu["id"] and len(cpu["load_avg"]) == 3
    md = (out / "report" / "report.md").read_text()
    assert "| torch · base |" in md and "| torch · finetune |" in md


def test_a_second_demo_resumes_every_stage_and_trains_nothing(torch_demo):
    out, (first, _, t_first), (second, log, t_second), before = torch_demo
    assert "kept: the same corpus is there" in log
    assert log.count(": up to date (") == len(STAGE_NAMES) - 2 + 2  # pretrain, eval-base too; serve, bench skipped
    assert log.count(": skipped before, nothing changed (") == 2
    after = read_manifest(out / "torch").stages
    assert {n: s.started for n, s in after.items()} == {n: s.started for n, s in before.stages.items()}
    assert [r["corpus_reused"] for r in json.loads((out / "demo.json").read_text())["runs"]] == [False, True]
    assert [s.summary for s in second.scores] == [s.summary for s in first.scores]
    assert t_second < 0.5 * t_first, (t_first, t_second)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_demo_on_both_backends_with_parity_then_a_rerun_that_redoes_nothing(tmp_path, monkeypatch):
    """As `make demo` runs it (both backends, parity in the first study), at tiny settings; the rerun keeps every
    stage of both bundles, so nothing is trained or evaluated again."""
    monkeypatch.setenv("CROSSTUNE_SERVE_VENV", str(tmp_path / "no-serve-env"))
    out = tmp_path / "demo-out"
    first, _, t_first = demo(out)
    before = {b: read_manifest(out / b) for b in ("torch", "jax")}
    assert before["torch"].stages["parity"].record == {"ok": True}
    assert "parity" not in before["jax"].stages and "eval-base" not in before["jax"].stages
    assert [s.label for s in first.scores] == [
        "base (pretrained, never saw these task kinds)",
        "LoRA fine-tune, torch",
        "LoRA fine-tune, jax",
    ]
    second, log, t_second = demo(out)
    for b in ("torch", "jax"):
        after = read_manifest(out / b).stages
        assert {n: s.started for n, s in after.items()} == {n: s.started for n, s in before[b].stages.items()}
    assert "train: up to date (" in log and "redoing" not in log
    assert t_second < 0.25 * t_first, (t_first, t_second)


def test_a_new_base_redoes_pretrain_and_makes_every_stage_that_reads_it_stale(torch_demo, tmp_path, monkeypatch):
    """The pretrain stage follows the study's rules: other settings (here --base-steps) redo it, and the stages that
    read the base, directly or through another, are stale until redone (the plan reads only its config: kept)."""
    import shutil

    from safetensors.numpy import load_file, save_file

    import crosstune.pretrain.base_model as base_model
    from crosstune.demo.runner import demo_overrides
    from crosstune.recipes import shipped_recipe
    from crosstune.study.runner import run_study

    out, _, _, _ = torch_demo
    bundle, other = tmp_path / "torch", tmp_path / "other-base"
    shutil.copytree(out / "torch", bundle)
    shutil.copytree(base_model.pretrained_base(), other)
    weights = load_file(str(other / "model.safetensors"))
    embed = next(name for name in weights if name.endswith("embed_tokens.weight"))
    save_file({**weights, embed: weights[embed] * 2}, str(other / "model.safetensors"), metadata={"format": "pt"})
    asked = []
    monkeypatch.setattr(base_model, "pretrained_base", lambda config, *a, **k: asked.append(config.steps) or other)
    console = Console(record=True, width=200)
    sets = demo_overrides(out / "corpus", TINY["steps"])
    manifest = run_study(
        shipped_recipe("demo-cpu.yaml"),
        "torch",
        bundle,
        overrides=sets,
        only=["pretrain"],
        with_=("pretrain", "eval-base"),
        pretrain_steps=7,
        console=console,
    )
    log = console.export_text()
    assert asked == [7] and "pretrain: its inputs changed since it ran: redoing it" in log
    assert (bundle / "base" / "model.safetensors").read_bytes() == (other / "model.safetensors").read_bytes()
    status = {name: entry.status for name, entry in manifest.stages.items()}
    assert status == {
        "pretrain": "done",
        "prepare": "stale",
        "plan": "done",
        "train": "stale",
        "export": "stale",
        "serve": "stale",
        "bench": "stale",
        "eval": "stale",
        "eval-base": "stale",
        "cost": "stale",
    }
    assert manifest.contents.model_dump() == {"runs": [], "evals": [], "sweeps": []}
