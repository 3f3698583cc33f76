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


def test_out_is_replaced_only_when_it_is_the_command_s_own_unchanged_and_read_within_bounds(hub_cache, tmp_path):
    """The one-file rule (crosstune.ownership.FileKind): the last line holds the sha256 of what was written; a head
    comment proves nothing (any file starting with it was replaced, a user's edits lost), a link is never followed,
    and a huge file is refused by its size, never read (a 3 GB file was read whole to look at three lines)."""
    out = tmp_path / "r.yaml"

    def import_to(path):
        return CliRunner().invoke(app, ["recipe", "import", str(TRL), "--out", str(path)], terminal_width=400)

    assert import_to(out).exit_code == 0 and import_to(out).exit_code == 0  # its own, unchanged: replaced
    edited = out.read_text().replace("rank: 64", "rank: 32")
    out.write_text(edited)  # the user's edit
    done = import_to(out)
    assert done.exit_code == 1 and "has changed since crosstune recipe import wrote it" in done.output
    assert out.read_text() == edited
    head_only = tmp_path / "mine.yaml"
    head_only.write_text("# crosstune recipe import: a user's recipe that starts like one\nname: mine\n")
    assert import_to(head_only).exit_code == 1 and head_only.read_text().endswith("name: mine\n")
    victim = tmp_path / "victim.yaml"
    victim.write_text(out.read_text())
    (tmp_path / "link.yaml").symlink_to(victim)
    done = import_to(tmp_path / "link.yaml")
    assert done.exit_code == 1 and "exists and is a link" in done.output and victim.read_text() == out.read_text()
    huge = tmp_path / "huge.yaml"
    with open(huge, "wb") as f:
        f.truncate(3 << 30)  # sparse: nothing on disk, 3 GB to a reader
    done = import_to(huge)
    assert done.exit_code == 1 and "is 3,221,225,472 bytes, more than any file crosstune recipe import writes" in (
        " ".join(done.output.split())
    )


def test_a_refusal_naming_a_file_with_a_newline_stays_one_line_per_problem(tmp_path):
    """Found by the fuzzer (recipe-export, seed 48): a recipe named `r\\npush_to_hub: true\\n.yaml` with a bad value
    split the refusal over three lines; each problem is one line, the name's newline written as its escape."""
    recipe = tmp_path / "r\npush_to_hub: true\n.yaml"
    text = (REPO / "recipes" / "tiny-cpu.yaml").read_text()
    recipe.write_text(text.replace("learning_rate:", "adam_beta1: {}\n  learning_rate:", 1))
    done = CliRunner().invoke(app, ["recipe", "export", str(recipe), "--to", "trl"], terminal_width=400)
    lines = [line for line in done.output.splitlines() if line.strip()]
    assert done.exit_code == 1 and lines[-1].startswith("error: ") and "r\\npush_to_hub: true\\n.yaml:" in lines[-1]
    assert "error at train.adam_beta1" in lines[-1]
