"""The command `recipe import` prints next finishes: `crosstune study` on an imported recipe (a TRL config of the tiny
model, no eval problems) trains and exports, skips its eval stage with a line saying what evaluating needs, and exits
0, never failing after the training a user paid for."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from crosstune.cli import _register, app
from crosstune.study.bundle import read_manifest
from crosstune.study.evaluation import NO_PROBLEMS

_register()


def test_the_imported_recipe_s_study_completes_and_skips_eval_saying_why(
    tmp_path, tiny_gemma4_dir, synth_corpus_dir, monkeypatch
):
    monkeypatch.setenv("CROSSTUNE_SERVE_VENV", str(tmp_path / "no-serve-env"))  # no vLLM: serve and bench skip
    rows = [json.loads(line) for line in (synth_corpus_dir / "train.jsonl").read_text().splitlines()[:8]]
    (tmp_path / "data.jsonl").write_text(
        "".join(json.dumps({"prompt": r["prompt"], "completion": r["response"]}) + "\n" for r in rows)
    )
    (tmp_path / "trl.yaml").write_text(
        f"model_name_or_path: {tiny_gemma4_dir}\ndataset_name: data.jsonl\nuse_peft: true\nlora_r: 4\n"
        "lora_target_modules: [q_proj, k_proj, v_proj]\nmax_length: 256\nper_device_train_batch_size: 2\n"
        "max_steps: 2\nbf16: false\nsave_steps: 1\n"
    )
    recipe, bundle = tmp_path / "imported.yaml", tmp_path / "bundle"
    runner = CliRunner()
    result = runner.invoke(
        app, ["recipe", "import", str(tmp_path / "trl.yaml"), "--out", str(recipe)], terminal_width=400
    )
    assert result.exit_code == 0, result.output
    assert f"next: crosstune plan {recipe}   then   crosstune study {recipe} --backend torch --out BUNDLE" in (
        result.output
    )
    assert "the study skips its eval stage until the recipe names problems: add --set eval.problems=PATH" in (
        result.output
    )
    result = runner.invoke(app, ["study", str(recipe), "--backend", "torch", "--out", str(bundle)], terminal_width=400)
    assert result.exit_code == 0, result.output[-3000:]
    stages = read_manifest(bundle).stages
    assert {name: stages[name].status for name in ("train", "export", "eval")} == {
        "train": "done",
        "export": "done",
        "eval": "skipped",
    }
    assert stages["eval"].note == NO_PROBLEMS
    assert "eval: skipped in" in result.output and NO_PROBLEMS in result.output.replace("\n", "")
