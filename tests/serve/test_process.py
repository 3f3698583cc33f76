"""`serve start/stop` with a stand-in `vllm` executable (tests/helpers/fake_vllm.py): readiness is a real 1-token
completion, an engine that dies at its first request or exits 0 early is caught, stop ends the whole process group,
and a model whose head size the CPU attention rejects is refused before anything starts."""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest

from crosstune.serve.engine import ServeError
from crosstune.serve.process import start_server, stop_server
from crosstune.serve.proctree import group_members
from crosstune.serve.state import read_state
from tests.helpers.export import write_export_manifest
from tests.helpers.paths import RECIPES
from tests.helpers.ports import free_port


def test_start_ready_then_stop_ends_the_group(tmp_path, tiny_gemma4_dir, fake_vllm):
    fake_vllm.setenv("FAKE_VLLM_MODE", "ok")
    state = start_server(tiny_gemma4_dir, tmp_path / "s", name="tiny", port=free_port(), ready_timeout_s=30)
    assert read_state(tmp_path / "s").pid == state.pid and len(group_members(state.pid)) == 2
    recorded = read_state(tmp_path / "s")
    assert recorded.leader["cmdline"].startswith(f"{sys.executable} ") and [m["cmdline"] for m in recorded.members] == [
        "sleep 300"
    ]
    assert stop_server(tmp_path / "s")
    assert not group_members(state.pid)  # the `sleep` child went too
    assert not (tmp_path / "s" / "server.json").exists() and not stop_server(tmp_path / "s")


@pytest.mark.parametrize(
    ("mode", "message"),
    [("die_on_request", "died at its first request"), ("exit_early", "exited (status 0) before it was ready")],
)
def test_dead_engine_detected_whatever_the_exit_status(tmp_path, tiny_gemma4_dir, fake_vllm, mode, message):
    fake_vllm.setenv("FAKE_VLLM_MODE", mode)
    with pytest.raises(ServeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        start_server(tiny_gemma4_dir, tmp_path / "s", name="tiny", port=free_port(), ready_timeout_s=30)
    assert not (tmp_path / "s" / "server.json").exists()


def test_unsupported_head_size_refused_up_front(tmp_path, tiny_gemma4_dir, monkeypatch):
    monkeypatch.setenv("CROSSTUNE_SERVE_VENV", str(tmp_path / "no-venv"))  # never reached
    model = tmp_path / "head16"
    shutil.copytree(tiny_gemma4_dir, model)
    cfg = json.loads((model / "config.json").read_text())
    cfg["head_dim"] = 16
    (model / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ServeError, match="sliding layers have head_dim 16; vLLM's CPU attention accepts only"):
        start_server(model, tmp_path / "s", name="tiny", port=free_port())
    assert not (tmp_path / "s").exists()


def test_missing_serving_env_names_the_command(tmp_path, tiny_gemma4_dir, monkeypatch):
    monkeypatch.setenv("CROSSTUNE_SERVE_VENV", str(tmp_path / "no-venv"))
    with pytest.raises(ServeError, match="make serve-env"):
        start_server(tiny_gemma4_dir, tmp_path / "s", name="tiny", port=free_port())
    assert os.environ["CROSSTUNE_SERVE_VENV"].endswith("no-venv")


def test_template_mismatch_between_training_data_and_served_tokenizer(tmp_path, tiny_gemma4_dir, tiny_gemma3_dir):
    """The seed trained Gemma 4 on Gemma 3's turn format: the prepared data's tokenizer hash catches it."""
    import yaml
    from transformers import AutoTokenizer

    from crosstune.data.prepared import tokenizer_hash
    from crosstune.recipe import load_recipe
    from crosstune.serve.template import check_template

    data = yaml.safe_load((RECIPES / "tiny-cpu.yaml").read_text())
    data["model"]["path"] = str(tiny_gemma4_dir)
    data["data"]["prepared_dir"] = str(tmp_path / "prepared")
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(data))
    recipe = load_recipe(tmp_path / "r.yaml")
    assert check_template(recipe, tiny_gemma4_dir) is None  # nothing prepared yet: nothing to compare
    (tmp_path / "prepared").mkdir()
    manifest = tmp_path / "prepared" / "manifest.json"
    for trained_with, verdict in ((tiny_gemma4_dir, None), (tiny_gemma3_dir, "differs")):
        manifest.write_text(json.dumps({"tokenizer_hash": tokenizer_hash(AutoTokenizer.from_pretrained(trained_with))}))
        problem = check_template(recipe, tiny_gemma4_dir)
        assert problem is None if verdict is None else "differs from the one the training data was prepared" in problem


def test_cli_serve_start_and_stop(tmp_path, tiny_gemma4_dir, fake_vllm):
    from typer.testing import CliRunner

    from crosstune.cli import _register, app

    if not any(c.name == "export" for c in app.registered_commands):
        _register()
    fake_vllm.setenv("FAKE_VLLM_MODE", "ok")
    runner = CliRunner()
    state = tmp_path / "state"
    started = runner.invoke(
        app, ["serve", "start", str(tiny_gemma4_dir), "--port", str(free_port()), "--state-dir", str(state)]
    )
    assert started.exit_code == 0, started.output
    assert "ready" in started.output and read_state(state).model == tiny_gemma4_dir.name
    stopped = runner.invoke(app, ["serve", "stop", "--state-dir", str(state)])
    assert stopped.exit_code == 0 and "stopped" in stopped.output


def test_export_carries_the_runs_template_hash_and_serve_checks_it(tmp_path, tiny_gemma4_dir, tiny_gemma3_dir):
    """run.json's data.chat_template_sha256 → export_manifest.json's source → compared with the served template."""
    import shutil

    from transformers import AutoTokenizer

    from crosstune.data.prepared import chat_template_hash
    from crosstune.serve.template import check_export_template

    exported = tmp_path / "merged"
    shutil.copytree(tiny_gemma4_dir, exported)
    assert check_export_template(exported) is None  # not an export: nothing recorded
    for trained_with, verdict in ((tiny_gemma4_dir, None), (tiny_gemma3_dir, "is not the one")):
        recorded = chat_template_hash(AutoTokenizer.from_pretrained(trained_with))
        (exported / "export_manifest.json").unlink(missing_ok=True)
        write_export_manifest(exported, "merged", chat_template_sha256=recorded)
        problem = check_export_template(exported)
        assert problem is None if verdict is None else verdict in problem


def test_adapters_on_a_mixture_of_experts_are_refused_before_anything_starts(tmp_path, tiny_gemma4_moe_dir, fake_vllm):
    """vLLM's CPU build serves LoRA on an MoE only through Triton kernels it lacks (it died at the first request:
    tests/serve/test_vllm.py); the base and the merged export start."""
    fake_vllm.setenv("FAKE_VLLM_MODE", "ok")
    with pytest.raises(ServeError, match="mixture-of-experts model run Triton kernels .* serve the merged export"):
        start_server(tiny_gemma4_moe_dir, tmp_path / "s", name="t", port=free_port(), adapter=tmp_path / "adapter")
    assert not (tmp_path / "s").exists()
    state = start_server(tiny_gemma4_moe_dir, tmp_path / "s", name="t", port=free_port(), ready_timeout_s=30)
    assert stop_server(tmp_path / "s") and not group_members(state.pid)


def test_a_multimodal_checkpoint_is_served_for_text(tmp_path, tiny_gemma4_dir, tiny_gemma4_unified_dir):
    """The hub's layout (`...ForConditionalGeneration`) gets vLLM's --language-model-only: without it vLLM 0.32
    builds the 12B's multimodal processor at start-up and dies on the preprocessor files an export has not."""
    from crosstune.model_configs import read_model_config
    from crosstune.serve.engine import TEXT_ONLY_FLAG, multimodal_checkpoint
    from crosstune.serve.process import vllm_argv

    assert multimodal_checkpoint(read_model_config(tiny_gemma4_unified_dir))
    assert not multimodal_checkpoint(read_model_config(tiny_gemma4_dir))
    argv = vllm_argv(
        tmp_path / "vllm",
        tiny_gemma4_unified_dir,
        "m",
        8123,
        dtype="float32",
        max_model_len=256,
        adapters={},
        text_only=True,
    )
    assert argv.count(TEXT_ONLY_FLAG) == 1 and TEXT_ONLY_FLAG not in vllm_argv(
        tmp_path / "vllm", tiny_gemma4_dir, "m", 8123, dtype="float32", max_model_len=256, adapters={}
    )


def test_the_12b_is_refused_where_its_torchvision_import_fails(tmp_path, tiny_gemma4_unified_dir, fake_vllm):
    """A serving environment made before install_serve_env.sh's Fix 4 can't import torchvision, which vLLM's
    gemma4_unified.py needs: `serve start` says so and what to do before starting anything."""
    import os
    from pathlib import Path

    from crosstune.serve.engine import ServeError

    python = Path(os.environ["CROSSTUNE_SERVE_VENV"]) / "bin" / "python"
    python.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'torchvision'\" >&2\nexit 1\n")
    python.chmod(0o755)
    with pytest.raises(
        ServeError,
        match=r"can't import it \(ModuleNotFoundError: No module named 'torchvision'\)\. "
        r"Re-run `make serve-env`",
    ):
        start_server(tiny_gemma4_unified_dir, tmp_path / "s", name="tiny", port=free_port())
    assert not (tmp_path / "s").exists()
