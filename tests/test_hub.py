"""Models and datasets by hub id (crosstune.hub), for real and without a network: the tests fill a hub cache in the
hub's own layout (tests/helpers/hub_cache.py) from the session's tiny Gemma 4 and a small dataset built here, and
the code users run reads it. Offline a cached id loads and an uncached one is one line saying what to run; online
(against the tests' stand-in hub endpoint) a gated repo's refusal says how to log in; the commit a hub id resolved
to is in a study's stage inputs (run.json's: tests/train/torch/test_trl_cli.py)."""

from __future__ import annotations

import json

import pytest
from huggingface_hub import constants
from rich.console import Console
from typer.testing import CliRunner

from crosstune import hub
from crosstune.cli import _register, app
from crosstune.data.bad_input import DataError, Ledger
from crosstune.data.sources import read_split, source_files
from crosstune.recipe import RecipeError, model_path, model_snapshot, parse_recipe
from crosstune.recipe.hub_ids import hub_model_id
from crosstune.study import stages
from crosstune.study.context import StudyContext
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.hub_cache import dataset_repo, put_in_hub_cache

_register()
MODEL, DATA = "acme/gemma-4-tiny-it", "acme/verilog-sft"
MODEL_REF, DATA_REF = f"hf://{MODEL}", f"hf://{DATA}"  # how a recipe names them
RECIPE = """\
name: hub
model: {{family: gemma4, path: {model}, dtype: float32}}
data:
  sources: [{{path: {data}, config: codev, hub_split: "train[:50%]"}}]
  columns: {{preset: codev_r1}}
train: {{max_steps: 1, precision: fp32}}
hardware: cpu
"""


@pytest.fixture
def cached(hub_cache, tiny_gemma4_dir, synth_corpus_dir, tmp_path):
    """The tiny Gemma 4 and 12 corpus records as hub repos in the cache: (model commit, dataset commit, records)."""
    records = [json.loads(line) for line in (synth_corpus_dir / "train.jsonl").read_text().splitlines()[:12]]
    model = put_in_hub_cache(hub_cache, MODEL, tiny_gemma4_dir)
    data = put_in_hub_cache(hub_cache, DATA, dataset_repo(tmp_path / "repo", records, "codev"), "dataset")
    return model, data, records


def test_a_cached_model_and_dataset_load_offline(cached, hub_cache, tmp_path):
    model_commit, data_commit, records = cached
    assert constants.HF_HUB_OFFLINE  # this machine's default, and the tests'
    recipe = parse_recipe(RECIPE.format(model=MODEL_REF, data=DATA_REF), base_dir=tmp_path)
    assert [p for p in recipe.warnings if p.path in ("model.path", "data.sources[0].path")] == []
    assert model_path(recipe) == hub_cache / "models--acme--gemma-4-tiny-it" / "snapshots" / model_commit
    assert model_snapshot(recipe).commit == model_commit
    assert source_files(recipe, 0) == [(hub_cache / "datasets--acme--verilog-sft" / "snapshots" / data_commit, "hub")]
    rows, blank = read_split(recipe, "train", Ledger(strict=True))
    assert blank == 0 and [r.row for r in rows] == records[:6]  # train[:50%] of 12
    assert rows[0].where == f"{DATA_REF}[train[:50%]]:row 1"


def test_a_path_is_a_path_and_a_hub_id_is_written_hf():
    """The one rule (crosstune.hub): hf://OWNER/NAME is a hub id, anything else a path, whatever is on disk."""
    assert hub_model_id(MODEL) is None  # a path, never sent to the hub
    assert hub_model_id(MODEL_REF) == MODEL
    assert hub_model_id("../models/tiny") is None
    for bad in ("hf://acme/x..y", "hf://acme/" + "x" * 92, "hf://acme/gemmä", "hf://acme", "hf://a/b/c", "hf://a--b/c"):
        with pytest.raises(hub.HubError, match="is not a hub id"):
            hub_model_id(bad)


def test_a_missing_relative_path_is_refused_as_a_path_and_nothing_asks_the_hub(hub_cache, tmp_path, monkeypatch):
    monkeypatch.setattr(hub, "_snapshot", lambda *a: pytest.fail("the hub was asked"))
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE.format(model=MODEL, data=DATA).replace(', config: codev, hub_split: "train[:50%]"', ""))
    said = one_line_failure(["data", "prepare", recipe])
    assert said.startswith("error: ") and str(tmp_path / MODEL) in said
    problems = CliRunner().invoke(app, ["recipe", "validate", str(recipe)], terminal_width=400).output
    assert (
        f"(a hub model is written hf://{MODEL})" in problems and f"(a hub dataset is written hf://{DATA})" in problems
    )


@pytest.mark.parametrize("revision", ["../../../../tmp", "main/../x", "-rf", "a//b", "x.lock", "refs/", "é", ""])
def test_a_revision_is_a_commit_or_a_ref_name(tmp_path, revision):
    text = RECIPE.format(model=MODEL_REF, data=DATA_REF).replace("dtype: float32}", f"revision: {revision!r}}}")
    with pytest.raises(RecipeError, match="not a commit hash or a branch, tag or refs/pr/N name"):
        parse_recipe(text, base_dir=tmp_path)
    with pytest.raises(hub.HubError, match="not a commit hash"):
        hub.resolve(MODEL, "model", revision, fetch=False)


def test_a_ref_holding_a_path_resolves_to_no_folder(cached, hub_cache, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "config.json").write_text("{}")
    ref = hub_cache / "models--acme--gemma-4-tiny-it" / "refs" / "main"
    ref.write_text(f"../../../{elsewhere.name}")
    hub._snapshot.cache_clear()
    with pytest.raises(hub.HubError, match="not a commit's snapshot of .*is .*refs/main damaged"):
        hub.resolve(MODEL, "model", fetch=False)


def one_line_failure(args: list[str]) -> str:
    result = CliRunner().invoke(app, [str(a) for a in args], terminal_width=400)
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "\n" not in result.output.strip() and "Traceback" not in result.output, result.output
    return result.output.strip()


def test_an_uncached_id_offline_is_one_line_saying_what_to_run(hub_cache, tmp_path):
    recipe = tmp_path / "hub.yaml"
    recipe.write_text(RECIPE.format(model="hf://google/gemma-4-31B-it", data=DATA_REF))
    said = one_line_failure(["data", "prepare", recipe])
    assert said == (
        f"error: hub model google/gemma-4-31B-it is not in the hub cache ({hub_cache}) and HF_HUB_OFFLINE=1: fetch "
        "it with `hf download google/gemma-4-31B-it --include '*.json' --include '*.jinja' --include tokenizer.model "
        "--include '*.safetensors'`"
    )
    with pytest.raises(DataError) as e:
        source_files(parse_recipe(RECIPE.format(model=MODEL_REF, data=DATA_REF), base_dir=tmp_path), 0)
    assert str(e.value).startswith(
        f"data.sources[0].path: hub dataset {DATA} is not in the hub cache ({hub_cache}) "
        f"and HF_HUB_OFFLINE=1: fetch it with `hf download {DATA} --repo-type dataset "
        "--include README.md"
    )


def test_a_gated_or_missing_repo_says_how_to_get_access(hub_cache, monkeypatch):
    with FakeOpenAI(hub_errors={"google/gemma-gated": "GatedRepo"}) as endpoint:
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(constants, "ENDPOINT", endpoint.url)
        with pytest.raises(hub.HubError) as gated:
            hub.resolve("google/gemma-gated", "model")
        with pytest.raises(hub.HubError) as missing:
            hub.resolve("acme/no-such-model", "model")
    assert str(gated.value) == (
        f"hub model google/gemma-gated is gated: accept its terms at {endpoint.url}/google/gemma-gated with your "
        "account, then log in here with `hf auth login` (or set HF_TOKEN) and run again"
    )
    assert str(missing.value) == (
        f"hub model acme/no-such-model: no such repo, or it is private: check the id at {endpoint.url}/acme/no-such-"
        "model; for a private repo log in with `hf auth login` (or set HF_TOKEN)"
    )


def test_the_commit_is_among_a_study_stage_s_inputs(cached, tmp_path):
    model_commit, _, _ = cached
    recipe = parse_recipe(RECIPE.format(model=MODEL_REF, data=DATA_REF), base_dir=tmp_path)
    ctx = StudyContext(tmp_path / "bundle", recipe, "torch", Console(quiet=True), {"stages": {}})
    for inputs in (stages.plan_inputs(ctx), stages.train_inputs(ctx), stages.export_inputs(ctx)):
        assert inputs["model_revision"] == model_commit
    assert "config.json" in stages.train_inputs(ctx)["model"]  # the snapshot's files, fingerprinted as a folder's
    local = parse_recipe(RECIPE.format(model=model_path(recipe), data=DATA_REF), base_dir=tmp_path)
    assert "model_revision" not in stages.train_inputs(StudyContext(tmp_path, local, "torch", Console(), {}))


def test_a_serve_plan_serves_a_hub_id_from_the_hub_cache(hub_cache, tmp_path):
    from crosstune.serve.plan import serve_plan

    text = RECIPE.format(model="hf://google/gemma-4-31B-it", data=DATA_REF).replace("dtype: float32}", "size: 31b}")
    plan = serve_plan(parse_recipe(text, base_dir=tmp_path), "2xh100")
    argv = plan.argv()
    assert argv[1:5] == ["serve", "google/gemma-4-31B-it", "--served-model-name", "gemma-4-31B-it"]  # not a commit
    assert '-v "$HOME/.cache/huggingface":/root/.cache/huggingface' in plan.docker  # vLLM reads the hub cache
    assert " serve google/gemma-4-31B-it " in plan.docker and "--revision" not in argv
    pinned = parse_recipe(text.replace("size: 31b}", "size: 31b, revision: v1}"), base_dir=tmp_path)
    assert serve_plan(pinned, "2xh100").argv()[-2:] == ["--revision", "v1"]


@pytest.mark.slow
def test_both_backends_train_a_hub_id_model_and_record_its_commit(cached, tmp_path):
    """The jax backend reads the snapshot as the torch backend does: one step each, the base model's loss on the same
    rows (1e-5: BACKEND_EQUIVALENCE's tolerance before any update), the commit in both run.json files."""
    from crosstune.data import prepare_dataset
    from crosstune.run.metrics import read_metrics
    from crosstune.run.records import read_run_record
    from crosstune.train.session import train

    pytest.importorskip("tunix")
    model_commit, _, _ = cached
    text = RECIPE.format(model=MODEL_REF, data=DATA_REF) + "backend: {jax: {mesh: {fsdp: 1, tp: 2}}}\n"
    recipe = parse_recipe(text + f"output_dir: {tmp_path / 'runs'}\n", base_dir=tmp_path)
    prepare_dataset(recipe)
    losses = {}
    for backend in ("torch", "jax"):
        run = tmp_path / backend
        train(recipe, run, backend=backend, progress=False)
        assert read_run_record(run).base_model_revision == model_commit
        losses[backend] = read_metrics(run)[0].loss
    assert abs(losses["torch"] - losses["jax"]) <= 1e-5, losses


def test_a_snapshot_file_linked_out_of_its_repo_is_refused(cached, hub_cache, tmp_path):
    """Found by the fuzzer (hub-cache #3, seed 0): a snapshot's config.json linked to a file outside the cache was
    read as the model's config."""
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text('{"model_type": "gemma4"}')
    model_commit, _, _ = cached
    config = hub_cache / "models--acme--gemma-4-tiny-it" / "snapshots" / model_commit / "config.json"
    config.unlink()
    config.symlink_to(elsewhere)
    hub._snapshot.cache_clear()
    with pytest.raises(hub.HubError, match=rf"{config} leads out of the hub cache's model {MODEL}"):
        hub.resolve(MODEL, "model", fetch=False)
