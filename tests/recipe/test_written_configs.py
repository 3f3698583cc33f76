"""What `recipe import` and `recipe export` write is a serialised value (crosstune.emit): a newline in an imported
key, in a value or in a file name can't add a key to the written recipe or config, and the head comment stays
comment lines. The emitters themselves: tests/test_emit.py."""

from __future__ import annotations

import yaml
from typer.testing import CliRunner

from crosstune.cli import _register, app
from crosstune.recipe import load_recipe
from crosstune.recipe.convert import import_config
from tests.helpers.paths import REPO

_register()
TRL = REPO / "tests" / "fixtures" / "ports" / "trl" / "gemma4-31b-lora.yaml"
HOSTILE_KEY = "my_key\noutput_dir: /tmp/elsewhere\neval:\n  problems: /etc"


def _comment_head(text: str) -> list[str]:
    lines = text.splitlines()
    return lines[: next(i for i, line in enumerate(lines) if not line.startswith("#"))]


def test_a_newline_in_an_imported_key_or_value_adds_no_key_to_the_recipe(hub_cache, tmp_path):
    config = tmp_path / "trl.yaml"
    hostile = yaml.safe_dump({HOSTILE_KEY: 1, "report_to": "wandb\npush_to_hub: true"})
    config.write_text(TRL.read_text().replace("report_to: none\n", "") + hostile)
    out = tmp_path / "r.yaml"
    written = import_config(config, out).text
    out.write_text(written)
    recipe = load_recipe(out)
    assert recipe.output_dir == "runs" and recipe.eval.problems is None
    head = _comment_head(written)
    assert any("my_key\\noutput_dir: /tmp/elsewhere" in line for line in head)  # listed, escaped, one line
    assert set(yaml.safe_load(written)) <= set(recipe.model_dump())


def test_a_newline_in_the_recipe_s_file_name_adds_no_key_to_an_exported_config(tmp_path):
    recipe = tmp_path / "r\npush_to_hub: true\nhub_model_id: someone_else\n.yaml"
    recipe.write_text((REPO / "recipes" / "tiny-cpu.yaml").read_text().replace("../demo-out", str(REPO / "demo-out")))
    for to in ("trl", "axolotl"):
        out = tmp_path / f"{to}.yaml"
        done = CliRunner().invoke(app, ["recipe", "export", str(recipe), "--to", to, "--out", str(out)])
        assert done.exit_code == 0, done.output
        config = yaml.safe_load(out.read_text())
        assert config.get("push_to_hub") in (None, False) and "hub_model_id" not in config
        assert "\\npush_to_hub: true" in _comment_head(out.read_text())[0]
