"""`crosstune study` on the tiny recipe (torch, 2 steps, no serving environment): the bundle, the rerun that skips
every stage, a copied bundle, changed inputs, interruption, and `crosstune report` over two bundles."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import yaml

from crosstune.errors import InputError, Interrupted
from crosstune.report.inputs import BUNDLE_MANIFEST, read_inputs
from crosstune.study import runner
from crosstune.study.bundle import StudyError, read_manifest, write_manifest
from crosstune.study.runner import STAGE_NAMES
from tests.helpers.evals import run as run_eval_command
from tests.helpers.paths import RECIPES
from tests.helpers.study import STEPS, overrides, study


@pytest.fixture(autouse=True)
def no_serving_env(tmp_path_factory, monkeypatch):
    """No vLLM here, whatever the machine has: serve and bench are skipped, eval runs the local engine."""
    monkeypatch.setenv("CROSSTUNE_SERVE_VENV", str(tmp_path_factory.mktemp("no-serve-env")))


@pytest.fixture(scope="module")
def torch_bundle(tmp_path_factory, tiny_gemma4_dir, synth_corpus_dir):
    """One torch study and its immediate rerun: (bundle, first (manifest, log, s), second (manifest, log, s))."""
    mp = pytest.MonkeyPatch()
    mp.setenv("CROSSTUNE_SERVE_VENV", str(tmp_path_factory.mktemp("no-serve-env")))
    try:
        bundle = tmp_path_factory.mktemp("study") / "tiny-torch"
        sets = overrides(tiny_gemma4_dir, synth_corpus_dir)
        first = study(bundle, sets)
        second = study(bundle, sets)
    finally:
        mp.undo()
    return bundle, sets, first, second


def test_a_study_makes_a_self_describing_bundle(torch_bundle):
    bundle, _, (manifest, log, _), _ = torch_bundle
    stages = manifest.stages
    assert list(stages) == STAGE_NAMES
    assert {name: s.status for name, s in stages.items()} == {
        "prepare": "done",
        "plan": "done",
        "train": "done",
        "export": "done",
        "serve": "skipped",
        "bench": "skipped",
        "eval": "done",
        "cost": "done",
    }
    assert stages["serve"].record["enable"] == "make serve-env"
    command = stages["serve"].record["target_plan"]["command"]  # what serves it on the recipe's hardware
    assert command.startswith("VLLM_CPU_KVCACHE_SPACE=") and f"vllm serve {bundle / 'export' / 'merged'}" in command
    layout = stages["serve"].record["target_plan"]["layout"]  # the layout it chose there, and why
    assert (layout["data_parallel_size"], layout["tensor_parallel_size"]) == (1, 1) and layout["why"]
    assert "serve: skipped" in log and "`make serve-env` creates it" in log
    assert stages["train"].record == {"steps": STEPS}
    assert stages["eval"].record["engine"] == "transformers"
    assert manifest.contents.model_dump() == {"runs": ["runs/tiny-cpu-torch"], "evals": ["eval/finetune"], "sweeps": []}
    for entry in stages.values():  # every output is named relative to the bundle and exists there
        for out in entry.outputs or []:
            assert not out.path.startswith("/") and (bundle / out.path).exists()
    assert set(manifest.data) == {"data_hash", "tokenizer_hash", "chat_template_sha256"}
    (host,) = manifest.hosts.values()
    assert host["cuda"] == [] and host["tpu"] is None and host["cpu"]["cores"] >= 1
    assert {"crosstune", "torch", "jax", "transformers"} <= set(host["versions"])
    cost = json.loads((bundle / "cost" / "cost.json").read_text())
    assert cost["training"] is None and "no on-demand price for cpu" in cost["notes"][0]
    for i, name in enumerate(STAGE_NAMES, 1):  # one line per stage, with its time
        assert f"[{i}/8] {name}: " in log


def test_a_second_run_skips_every_stage_in_a_fraction_of_the_time(torch_bundle):
    _, _, (first, _, t_first), (second, log, t_second) = torch_bundle
    for name in STAGE_NAMES:
        assert second.stages[name].started == first.stages[name].started, name  # not run again
    assert log.count(": up to date (") == 6 and log.count(": skipped before, nothing changed (") == 2
    assert t_second < 0.25 * t_first, (t_first, t_second)


def test_a_copied_bundle_is_up_to_date_and_the_report_sets_two_bundles_side_by_side(torch_bundle, tmp_path):
    bundle, sets, _, _ = torch_bundle
    copy = tmp_path / "copied-off-the-machine"
    shutil.copytree(bundle, copy)
    manifest, log, _ = study(copy, sets)
    assert log.count(": up to date (") == 6, log  # paths are relative: nothing is redone in the new place
    inputs = read_inputs([bundle, copy])
    assert [r.path for r in inputs.runs] == [bundle / "runs" / "tiny-cpu-torch", copy / "runs" / "tiny-cpu-torch"]
    assert [e.name for e in inputs.evals] == ["tiny-torch · finetune", "copied-off-the-machine · finetune"]
    from crosstune.report.writer import write_report

    html = write_report([bundle, copy], tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    assert "| trained tokens / s |" in md and "| final loss |" in md
    assert "| tiny-torch · finetune |" in md and "| copied-off-the-machine · finetune |" in md
    assert html.is_file()


def test_changed_eval_settings_redo_eval_and_cost_only(torch_bundle, tmp_path):
    bundle, sets, (first, _, _), _ = torch_bundle
    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    manifest, log, _ = study(copy, [*sets, "eval.max_tokens=12"])
    assert "eval: its inputs changed since it ran: redoing it" in log
    redone = [n for n in STAGE_NAMES if manifest.stages[n].started != first.stages[n].started]
    assert redone == ["eval"]  # cost reads the run and the sweep, not the evaluation
    assert json.loads((copy / "eval" / "finetune" / "summary.json").read_text())["sampling"]["max_tokens"] == 12


def test_eval_and_the_study_sample_a_recipe_s_protocol_alike(torch_bundle, tmp_path):
    """`crosstune eval RECIPE` and the study's eval stage resolve the recipe's eval settings by one constructor: the
    protocol's preset (codev-r1-card: T 0.6, top_p 0.95, the codev prompt) under the lines the recipe writes."""
    bundle, sets, _, _ = torch_bundle
    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    recipe = yaml.safe_load((RECIPES / "tiny-cpu.yaml").read_text())
    problems = next(s.split("=", 1)[1] for s in sets if s.startswith("eval.problems="))
    recipe["eval"] = {"problems": problems, "protocol": "codev-r1-card", "samples": 1, "k": [1], "max_tokens": 16}
    recipe_file = tmp_path / "protocol.yaml"
    recipe_file.write_text(yaml.safe_dump(recipe))
    manifest, log, _ = study(copy, [s for s in sets if not s.startswith("eval.")], recipe=recipe_file, only=["eval"])
    assert manifest.stages["eval"].status == "done", log
    result = run_eval_command(
        str(recipe_file), "--hf-model", str(copy / "export" / "merged"), "--out", str(tmp_path / "eval")
    )
    assert result.exit_code == 0, result.output
    studied = json.loads((copy / "eval" / "finetune" / "summary.json").read_text())
    evaluated = json.loads((tmp_path / "eval" / "summary.json").read_text())
    for key in ("sampling", "prompt_style", "shots", "protocol"):
        assert studied[key] == evaluated[key], key
    assert studied["sampling"] == {"n": 1, "temperature": 0.6, "top_p": 0.95, "max_tokens": 16, "seed": 0}
    assert studied["prompt_style"] == "codev" and studied["protocol"]["name"] == "codev-r1-card"


def repoint(sets: list[str], key: str, value) -> list[str]:
    return [s for s in sets if not s.startswith(f"{key}=")] + [f"{key}={value}"]


def redone(manifest, before) -> list[str]:
    return [n for n in STAGE_NAMES if manifest.stages[n].started != before.stages[n].started]


def test_new_weights_at_model_path_redo_train_and_export_on_the_new_base(torch_bundle, tmp_path, tiny_gemma4_dir):
    from safetensors.numpy import load_file, save_file

    bundle, sets, _, _ = torch_bundle
    copy, model = tmp_path / "b", tmp_path / "model"
    shutil.copytree(bundle, copy)
    shutil.copytree(tiny_gemma4_dir, model)
    sets = repoint(sets, "model.path", model)
    moved, log, _ = study(copy, sets)  # the same files in another folder: nothing to redo
    assert log.count(": up to date (") == 6, log
    weights = load_file(str(model / "model.safetensors"))
    embed = next(name for name in weights if name.endswith("embed_tokens.weight"))
    weights[embed] = weights[embed] * 2  # a new base at the same path (not a LoRA target: merged as it is)
    save_file(weights, str(model / "model.safetensors"), metadata={"format": "pt"})
    manifest, log, _ = study(copy, sets)
    assert "train: its inputs changed since it ran: redoing it" in log
    assert redone(manifest, moved) == ["train", "export", "serve", "bench", "eval", "cost"]  # prepare, plan: same
    merged = load_file(str(copy / "export" / "merged" / "model.safetensors"))
    assert (merged[embed] == weights[embed]).all()  # built on the new base


def test_changed_problem_files_redo_the_evaluation(torch_bundle, tmp_path, synth_corpus_dir):
    bundle, sets, _, _ = torch_bundle
    copy, problems = tmp_path / "b", tmp_path / "problems"
    shutil.copytree(bundle, copy)
    shutil.copytree(synth_corpus_dir / "eval", problems)
    sets = repoint(sets, "eval.problems", problems)
    before, log, _ = study(copy, sets, only=["eval"])  # the same problem files in another folder
    assert "eval: up to date (" in log and "8 problems" in log, log
    names = (problems / "problems.txt").read_text().split()
    (problems / "problems.txt").write_text("\n".join(names[:5]) + "\n")
    manifest, log, _ = study(copy, sets)
    assert "eval: its inputs changed since it ran: redoing it" in log
    assert redone(manifest, before) == ["eval"]
    assert json.loads((copy / "eval" / "finetune" / "summary.json").read_text())["problems"] == 5
    assert manifest.stages["eval"].note.startswith("5 problems")


def test_redoing_train_makes_every_stage_that_reads_it_stale_until_redone(torch_bundle, tmp_path, monkeypatch):
    from crosstune.report.writer import write_report

    bundle, sets, (first, _, _), _ = torch_bundle
    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    sets = [*sets, "train.learning_rate=0.003"]
    on_disk = {}

    def killed(ctx):  # what a kill -9 inside the redone training leaves: the manifest as it is on disk
        on_disk["manifest"] = read_manifest(ctx.bundle)
        raise KeyboardInterrupt

    stages = [
        runner.Stage(*(killed if f == st.run else f for f in vars(st).values())) if st.name == "train" else st
        for st in runner.STAGES
    ]
    monkeypatch.setattr(runner, "STAGES", stages)
    with pytest.raises(Interrupted):
        study(copy, sets, only=["train"])
    later = ["export", "serve", "bench", "eval", "cost"]
    assert [on_disk["manifest"].stages[n].status for n in ["train", *later]] == ["running"] + ["stale"] * 5
    assert on_disk["manifest"].contents.model_dump() == {"runs": [], "evals": [], "sweeps": []}
    monkeypatch.undo()
    monkeypatch.setenv("CROSSTUNE_SERVE_VENV", str(tmp_path / "none"))

    manifest, log, _ = study(copy, sets, only=["train"])
    assert "train: continuing where an earlier run stopped (interrupted)" in log
    assert {n: manifest.stages[n].status for n in ["plan", "train", *later]} == {
        "plan": "done",
        "train": "done",
        **dict.fromkeys(later, "stale"),
    }
    assert manifest.stages["eval"].stale == "train was redone after it"
    assert manifest.contents.model_dump() == {"runs": ["runs/tiny-cpu-torch"], "evals": [], "sweeps": []}
    inputs = read_inputs([copy])
    assert len(inputs.runs) == 1 and inputs.evals == []  # the old evaluation is not set beside the new run
    write_report([copy], tmp_path / "report")
    assert "· finetune |" not in (tmp_path / "report" / "report.md").read_text()
    with pytest.raises(StudyError, match="stage export is stale in .* \\(train was redone after it\\): run it"):
        study(copy, sets, only=["eval"])

    manifest, log, _ = study(copy, sets)
    assert "export: stale (train was redone after it): redoing it" in log
    assert redone(manifest, first) == ["plan", "train", "export", "serve", "bench", "eval", "cost"]
    assert [manifest.stages[n].status for n in STAGE_NAMES] == ["done"] * 4 + ["skipped"] * 2 + ["done"] * 2
    assert manifest.contents == first.contents


def test_a_redo_whose_outputs_come_out_as_recorded_leaves_the_later_stages_up_to_date(torch_bundle, tmp_path):
    bundle, sets, (first, _, _), _ = torch_bundle
    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    (copy / "data" / "stats.json").write_text("{}")  # damaged: prepare is redone, and comes out the same
    manifest, log, _ = study(copy, sets)
    assert "prepare: redoing it: data changed since the stage wrote it" in log
    assert "train, export, serve, bench, eval, cost: up to date again (prepare's outputs came out as recorded)" in log
    assert redone(manifest, first) == ["prepare"]
    assert manifest.contents == first.contents


def test_a_model_path_that_is_gone_is_refused_before_anything_is_cleared(torch_bundle, tmp_path):
    bundle, sets, (first, _, _), _ = torch_bundle
    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)  # a bundle copied to a machine without the base model
    with pytest.raises(StudyError, match=f"model.path {tmp_path / 'gone'}: no such file or folder"):
        study(copy, repoint(sets, "model.path", tmp_path / "gone"))
    assert read_manifest(copy).stages == first.stages and (copy / "runs" / "tiny-cpu-torch" / "adapter").is_dir()


def test_a_stage_recorded_by_an_older_crosstune_is_redone_saying_why(torch_bundle, tmp_path):
    bundle, sets, _, _ = torch_bundle
    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    manifest = read_manifest(copy)
    manifest.stages["plan"].inputs_format = None
    manifest.stages["plan"].inputs = "its recipe sections alone"
    write_manifest(copy, manifest)
    _, log, _ = study(copy, sets, only=["plan"])
    assert "plan: its inputs changed since it ran (recorded by an older crosstune, whose inputs did not" in log


def test_a_changed_output_is_redone(torch_bundle, tmp_path):
    bundle, sets, _, _ = torch_bundle
    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    (copy / "plan" / "plan.json").write_text("{}")
    _, log, _ = study(copy, sets, only=["plan"])
    assert "plan: redoing it: plan/plan.json changed since the stage wrote it (sha256 differs)" in log
    assert json.loads((copy / "plan" / "plan.json").read_text())["blockers"] == []


def test_ctrl_c_in_a_stage_leaves_a_bundle_that_resumes(torch_bundle, tmp_path, monkeypatch):
    bundle, sets, (first, _, _), _ = torch_bundle
    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    manifest = read_manifest(copy)
    manifest.stages["export"].inputs = "an older run's"
    write_manifest(copy, manifest)

    def interrupt(_ctx):
        raise KeyboardInterrupt

    stages = [runner.Stage(*(interrupt if f == st.run else f for f in vars(st).values())) for st in runner.STAGES]
    monkeypatch.setattr(runner, "STAGES", stages)
    with pytest.raises(Interrupted, match="interrupted \\(Ctrl-C\\) in stage export: finished stages are kept"):
        study(copy, sets)
    assert read_manifest(copy).stages["export"].status == "interrupted"
    monkeypatch.undo()
    monkeypatch.setenv("CROSSTUNE_SERVE_VENV", str(tmp_path / "none"))
    manifest, log, _ = study(copy, sets)
    assert "export: continuing where an earlier run stopped (interrupted)" in log
    assert manifest.stages["export"].status == "done"
    assert manifest.stages["train"].started == first.stages["train"].started


def test_stage_selection_and_refusals(torch_bundle, tmp_path):
    _, sets, _, _ = torch_bundle
    with pytest.raises(StudyError, match="stage export never ran in .*: run it first"):
        study(tmp_path / "fresh", sets, only=["eval"])
    with pytest.raises(StudyError, match="unknown stage 'bnech': the stages are prepare, plan, train, export"):
        study(tmp_path / "fresh", sets, from_stage="bnech")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("keep")
    with pytest.raises(StudyError, match="is not empty and holds no study bundle"):
        study(tmp_path / "mine", sets, only=["prepare"])
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["thesis.tex"]
    with pytest.raises(StudyError, match="holds a torch study: give --backend torch"):
        study(torch_bundle[0], sets, backend="jax", only=["plan"])
    with pytest.raises(StudyError, match="only trains its part: give --only train"):
        study(tmp_path / "w", sets, launch={"node_rank": 1})


def test_the_report_names_what_a_bundle_lacks(torch_bundle, tmp_path):
    from crosstune.study.bundle_schema import BundleError

    bundle, _, _, _ = torch_bundle
    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    shutil.rmtree(copy / "eval" / "finetune")
    with pytest.raises(InputError, match=f"lists {copy / 'eval' / 'finetune'}, which is missing: finish the study"):
        read_inputs([copy])
    (copy / BUNDLE_MANIFEST).write_text(json.dumps({"kind": "something-else"}))
    with pytest.raises(BundleError, match="not a study bundle's manifest"):
        read_inputs([copy])


def test_a_failing_stage_is_named_and_recorded(torch_bundle, tmp_path, monkeypatch):
    from crosstune.cost.prices import CostError

    bundle, sets, _, _ = torch_bundle
    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)

    def no_price(_ctx):
        raise CostError("the prices file is unreadable")

    stages = [
        runner.Stage(*(no_price if f == st.run else f for f in vars(st).values())) if st.name == "cost" else st
        for st in runner.STAGES
    ]
    monkeypatch.setattr(runner, "STAGES", stages)
    with pytest.raises(StudyError, match="--prices .*prices.yaml: no such file"):
        study(copy, sets, only=["cost"], prices=tmp_path / "prices.yaml")
    (tmp_path / "prices.yaml").write_text("chips: {cpu: {on_demand: 0.1, source: a test}}\n")
    with pytest.raises(StudyError, match="stage cost failed: the prices file is unreadable — the finished stages"):
        study(copy, sets, only=["cost"], prices=tmp_path / "prices.yaml")
    entry = read_manifest(copy).stages["cost"]
    assert (entry.status, entry.error) == ("failed", "the prices file is unreadable")


def test_the_cost_stage_prices_the_run_at_the_given_rate(torch_bundle, tmp_path):
    bundle, sets, _, _ = torch_bundle
    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    prices = tmp_path / "prices.yaml"
    prices.write_text("chips: {cpu: {on_demand: 3.6, source: a test rate}}\n")
    manifest, log, _ = study(copy, sets, only=["cost"], prices=prices)
    assert "cost: its inputs changed since it ran: redoing it" in log  # the prices are an input
    cost = json.loads((copy / "cost" / "cost.json").read_text())["training"]
    from crosstune.run.run_summary import read_run

    hours = read_run(copy / "runs" / "tiny-cpu-torch").step_time_s / 3600
    assert cost["usd_per_hour"] == 3.6 and "a test rate" in cost["price"]
    assert cost["usd"] == pytest.approx(3.6 * hours, rel=1e-12)  # the same arithmetic, no rounding on the way


def test_a_second_study_into_a_busy_bundle_is_refused_naming_the_holder(torch_bundle):
    from crosstune.fsutil import LockedError, exclusive_lock, lock_path

    bundle, sets, _, _ = torch_bundle
    with exclusive_lock(lock_path(bundle), "a test", "wait"):
        with pytest.raises(LockedError, match=f"the study bundle {bundle} is in use by PID {os.getpid()} on host"):
            study(bundle, sets)


def test_a_redo_never_deletes_a_file_the_stage_did_not_write(torch_bundle, tmp_path):
    bundle, sets, _, _ = torch_bundle
    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    notes = copy / "export" / "notes.txt"
    notes.write_text("mine")  # the export's folder hash changes: the stage must be redone
    with pytest.raises(StudyError, match=r"stage export must be redone, .* files it did not write: export/notes.txt"):
        study(copy, sets)
    assert notes.read_text() == "mine" and (copy / "export" / "merged").is_dir()  # nothing removed
    notes.unlink()
    manifest, log, _ = study(copy, sets)  # its own files again: up to date
    assert "export: up to date" in log and "notes.txt" not in str(manifest.stages["export"].wrote)


def test_eval_base_asks_the_base_through_the_fine_tunes_engine_on_a_server_of_its_own(
    torch_bundle, tmp_path, fake_vllm
):
    """With a serving environment (here a fake vLLM), the base is evaluated through vLLM as the fine-tune is: its own
    server on the base, stopped when the stage ends; its evaluation joins the bundle's contents."""
    from crosstune.serve.state import STATE_FILE

    bundle, sets, _, _ = torch_bundle
    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    fake_vllm.setenv("FAKE_VLLM_MODE", "ok")
    manifest, log, _ = study(copy, sets, only=["eval-base"], with_=("eval-base",))
    entry = manifest.stages["eval-base"]
    assert entry.status == "done" and entry.record["engine"] == "vllm", log
    assert f"starting vLLM on {tiny_model(sets)}" in log
    summary = json.loads((copy / "eval" / "base" / "summary.json").read_text())
    assert summary["problems"] == 8 and summary["engine"]["kind"] == "endpoint"
    server = copy / "eval" / "base" / "server"
    assert any(server.glob("*.log")) and not (server / STATE_FILE).exists()  # it ran, and stopped with the stage
    assert manifest.contents.evals == ["eval/finetune", "eval/base"]


def tiny_model(sets: list[str]) -> str:
    return next(s.split("=", 1)[1] for s in sets if s.startswith("model.path="))
