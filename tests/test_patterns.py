"""User patterns run under a bound on their work (crosstune.patterns), and a peek into a folder stays bounded and
follows no link (crosstune.confinement.first_files): `(.*.*)*q_projX` as an imported target regex ran for minutes
and ignored Ctrl-C; a TRL `dataset_name: "/"` walked the whole file system through links to find a JSON file."""

from __future__ import annotations

import time

import pytest

from crosstune.confinement import first_files
from crosstune.patterns import PATTERN_WORK_S, PatternError, user_pattern
from crosstune.recipe.convert import import_config
from crosstune.recipe.porting import ImportRefused


def test_a_pattern_past_its_bound_of_work_is_refused_in_one_line():
    matches = user_pattern(r"(.*?,){11}P", "lora_target_modules")
    started = time.monotonic()
    with pytest.raises(PatternError) as e:
        matches("1," * 30)
    assert time.monotonic() - started < 10 * PATTERN_WORK_S
    assert str(e.value).startswith("lora_target_modules: '(.*?,){11}P' took more than 1 s matching '1,1,")
    assert "\n" not in str(e.value)


def test_patterns_match_as_peft_matches_them():
    whole = user_pattern(r"model\.layers\.\d+\.self_attn\.(q|v)_proj", "t")
    assert whole("model.layers.3.self_attn.q_proj") and not whole("x.model.layers.3.self_attn.q_proj")
    suffix = user_pattern("self_attn.q_proj", "rank_pattern", suffix=True)  # PEFT's rank_pattern: the name's end
    assert suffix("model.layers.3.self_attn.q_proj") and not suffix("model.layers.3.self_attn.q_proj_x")
    for bad, why in (("(", "is not a regular expression"), ("x" * 1001, "a pattern of 1,001 characters")):
        with pytest.raises(PatternError, match=why):
            user_pattern(bad, "t")


def test_the_nested_repeat_of_the_report_ends_at_once(hub_cache, tmp_path):
    config = tmp_path / "trl.yaml"
    lines = ["model_name_or_path: google/gemma-4-31B-it", "dataset_name: acme/d", "use_peft: true"]
    config.write_text("\n".join([*lines, "lora_target_modules: '(.*.*)*q_projX'"]) + "\n")
    started = time.monotonic()
    with pytest.raises(ImportRefused, match="matches none of gemma4's"):
        import_config(config, tmp_path / "r.yaml")
    assert time.monotonic() - started < 30


def test_a_peek_into_a_folder_is_bounded_and_enters_no_link(tmp_path):
    data = tmp_path / "data"
    (data / "a").mkdir(parents=True)
    (data / "a" / "rows.jsonl").write_text("{}\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.jsonl").write_text("{}\n")
    (data / "0-link").symlink_to(outside)
    (data / "0-file.jsonl").symlink_to(outside / "secret.jsonl")
    assert list(first_files(data)) == [data / "a" / "rows.jsonl"]
    assert list(first_files(data, root=tmp_path)) == [data / "0-file.jsonl", data / "a" / "rows.jsonl"]
    many = tmp_path / "many"
    many.mkdir()
    for i in range(50):
        (many / f"{i:02d}").write_text("")
    assert len(list(first_files(many, limit=10))) == 10


def test_a_dataset_named_root_is_not_a_walk_of_the_file_system(hub_cache, tmp_path):
    config = tmp_path / "trl.yaml"
    config.write_text('model_name_or_path: google/gemma-4-31B-it\ndataset_name: "/"\nuse_peft: true\n')
    started = time.monotonic()
    try:
        import_config(config, tmp_path / "r.yaml")
    except ImportRefused:
        pass  # refused or imported: what matters is that it looked at a bounded number of entries
    assert time.monotonic() - started < 30
