"""Speculative decoding in the serving plan: the published drafter per model, vLLM's --speculative-config on the
command and the docker line, TPU with an adapter refused with its source, `serve start --draft` checks."""

from __future__ import annotations

import json
import shlex

import pytest
from typer.testing import CliRunner

from crosstune.cli import _register, app
from crosstune.recipe import load_recipe
from crosstune.serve.drafter import Drafter, published_drafter, resolve
from crosstune.serve.plan import serve_plan
from crosstune.serve.process import vllm_argv
from tests.helpers.paths import RECIPES


def recipe(name: str):
    return load_recipe(RECIPES / f"{name}.yaml")


def _spec_config(argv: list[str]) -> dict:
    return json.loads(argv[argv.index("--speculative-config") + 1])


@pytest.mark.parametrize(
    ("family", "size", "path", "want"),
    [
        ("gemma4", "31b", None, "google/gemma-4-31B-it-assistant"),
        ("gemma4", "26b-a4b", None, "google/gemma-4-26B-A4B-it-assistant"),
        ("gemma4", None, "hf://google/gemma-4-E4B-it", "google/gemma-4-E4B-it-assistant"),
        ("gemma4", "tiny", None, None),
        ("gemma3", "27b", "hf://google/gemma-3-27b-it", None),
    ],
)
def test_published_drafters(family, size, path, want):
    assert published_drafter(family, size, path) == want


def test_gpu_plan_carries_the_speculative_config_on_command_and_docker():
    r = recipe("gemma4-31b-2xh100")
    drafter = resolve("auto", family="gemma4", size="31b", model_path=r.model.path, tokens=3)
    plan = serve_plan(r, "2xh100", drafter=drafter)
    assert plan.ok
    want = {"method": "mtp", "model": "google/gemma-4-31B-it-assistant", "num_speculative_tokens": 3}
    assert _spec_config(plan.argv()) == want
    docker = shlex.split(plan.docker)
    assert _spec_config(docker) == want
    assert "$HOME/.cache/huggingface:/root/.cache/huggingface" in docker  # a hub-id drafter is read from the cache
    assert any("google/gemma-4-31B-it-assistant" in n and "gemma4_mtp" in n for n in plan.notes)
    assert "--speculative-config" not in serve_plan(r, "2xh100").argv()  # only when asked


def test_local_drafter_is_mounted_in_the_container(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    plan = serve_plan(recipe("gemma4-31b-2xh100"), "1xh200", drafter=Drafter(str(tmp_path), 2, "given"))
    docker = shlex.split(plan.docker)
    assert f"{tmp_path}:/drafter:ro" in docker
    assert _spec_config(docker)["model"] == "/drafter" and _spec_config(plan.argv())["model"] == str(tmp_path)


def test_tpu_drafter_runs_without_adapter_and_is_refused_with_one(tmp_path):
    r = recipe("gemma4-31b-tpu-v5p-8")
    drafter = resolve("auto", family="gemma4", size="31b", model_path=None, tokens=None)
    plan = serve_plan(r, "tpu-v5p-8", drafter=drafter)
    assert plan.ok and _spec_config(plan.argv())["num_speculative_tokens"] == 1
    assert any("tpu_inference/models/jax/gemma4_mtp.py" in n for n in plan.notes)
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    refused = serve_plan(r, "tpu-v5p-8", drafter=drafter, adapter=adapter, adapter_rank=16)
    assert not refused.ok
    assert "no LoRA manager" in refused.blockers[-1] and "--merged" in refused.blockers[-1]


def test_auto_without_a_published_drafter_says_what_to_do():
    with pytest.raises(ValueError, match="no published MTP drafter for gemma3.*e2b, e4b.*--assistant"):
        resolve("auto", family="gemma3", size="27b", model_path=None, tokens=None)
    if not any(c.name == "export" for c in app.registered_commands):
        _register()
    out = CliRunner().invoke(app, ["serve", "plan", str(RECIPES / "tiny-cpu.yaml"), "--draft", "auto"])
    assert out.exit_code == 1 and "no published MTP drafter for gemma4 tiny" in " ".join(out.output.split())


def test_vllm_argv_with_a_drafter(tmp_path):
    argv = vllm_argv(
        tmp_path / "vllm",
        tmp_path,
        "m",
        8123,
        dtype="float32",
        max_model_len=512,
        adapters={},
        drafter=Drafter(str(tmp_path / "d"), 2, "given"),
    )
    assert _spec_config(argv) == {"method": "mtp", "model": str(tmp_path / "d"), "num_speculative_tokens": 2}


def test_draft_is_a_drafter_folder_by_its_absolute_path_or_a_hub_id_and_nothing_else(tmp_path, monkeypatch):
    """A bare name was mounted as it was (`-v name:/drafter`), which Docker reads as a named volume: now a folder is
    a drafter's (its config.json says gemma4_assistant) and mounted by its absolute path, a hub id is hf://OWNER/NAME,
    and anything else is refused."""
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "drafter"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "gemma4_assistant"}))
    given = resolve("drafter", family="gemma4", size="31b", model_path=None, tokens=None)
    assert given.model == str(folder) and given.local
    plan = serve_plan(recipe("gemma4-31b-2xh100"), "2xh100", drafter=given)
    assert f"-v {folder}:/drafter:ro" in plan.docker
    hub = resolve("hf://google/gemma-4-31B-it-assistant", family="gemma4", size="31b", model_path=None, tokens=None)
    assert hub.model == "google/gemma-4-31B-it-assistant" and not hub.local
    refused = {"name": "neither a drafter folder", "google/gemma-4-31B-it": "neither a", "hf://a/b/c": "not a hub id"}
    for name, why in refused.items():
        with pytest.raises(ValueError, match=why):
            resolve(name, family="gemma4", size="31b", model_path=None, tokens=None)
    (folder / "config.json").write_text(json.dumps({"model_type": "gemma4_text"}))
    with pytest.raises(ValueError, match="a 'gemma4_text' model, not a Gemma 4 MTP drafter"):
        resolve("drafter", family="gemma4", size="31b", model_path=None, tokens=None)
