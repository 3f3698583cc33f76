"""The prepared folder (crosstune.data.prepared) replaces only an earlier preparation, unchanged: manifest.json is
its manifest in crosstune.ownership's one shape. A user's file in data.prepared_dir is refused by name, with or
without --force, before any tokenizing; a preparation written before the format epoch is not crosstune's to replace."""

from __future__ import annotations

import json
import re

import pytest
from transformers import AutoTokenizer
from typer.testing import CliRunner

from crosstune.cli import _register, app
from crosstune.data import DataError, prepare_dataset
from tests.helpers.data import recipe_for, write_jsonl

_register()  # every command under the top-level handler, as `crosstune` runs them

GOOD = {"prompt": "Write a buffer.", "response": "assign y = a;"}


@pytest.fixture
def recipe(tmp_path, tiny_gemma3_dir):
    src = write_jsonl(tmp_path / "d.jsonl", [GOOD] * 3)
    return recipe_for(tmp_path, tiny_gemma3_dir, "gemma3", [{"path": str(src)}], max_seq_len=128)


@pytest.fixture(scope="module")
def tok(tiny_gemma3_dir):
    return AutoTokenizer.from_pretrained(tiny_gemma3_dir)


def _where(recipe):
    from crosstune.data.prepared import prepared_dir

    return prepared_dir(recipe)


def _tree(folder) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_users_folder_is_refused_naming_its_files_with_or_without_force(recipe, tok, monkeypatch):
    import crosstune.data.prepare as prepare

    dest = _where(recipe)
    dest.mkdir(parents=True)
    (dest / "notes.txt").write_text("mine")
    monkeypatch.setattr(prepare, "_encode_split", None)  # refused before any tokenizing: never reached
    for force in (False, True):
        with pytest.raises(DataError) as refused:
            prepare_dataset(recipe, tokenizer=tok, force=force)
        assert str(refused.value) == (
            f"data.prepared_dir {dest} holds files that are not crosstune data prepare's output: notes.txt (no "
            "manifest.json lists it); it replaces only what it wrote itself: move them out or choose another "
            "data.prepared_dir"
        )
    assert _tree(dest) == {"notes.txt": b"mine"}


def test_a_prepared_dir_that_is_a_file_is_refused_by_name(recipe, tok):
    # it left a NotADirectoryError traceback (found by the fuzzer)
    dest = _where(recipe)
    dest.parent.mkdir(parents=True)
    dest.write_text("mine")
    with pytest.raises(DataError, match=rf"^data.prepared_dir {dest} is not a folder: point it at a new folder"):
        prepare_dataset(recipe, tokenizer=tok)
    assert dest.read_text() == "mine"


def test_a_file_of_a_preparation_linked_out_of_it_is_refused_before_anything_is_read(recipe, tok, tmp_path):
    # `data stats DIR` read manifest.json through a link to a file outside (found by the fuzzer)
    from crosstune.confinement import ConfinementError
    from crosstune.data.prepared import open_prepared

    first = prepare_dataset(recipe, tokenizer=tok)
    key = tmp_path / "key.json"
    key.write_text('{"secret": 1}')
    for name in ("manifest.json", "stats.json"):
        saved = (first.path / name).read_bytes()
        (first.path / name).unlink()
        (first.path / name).symlink_to(key)
        with pytest.raises(ConfinementError, match=rf"^{first.path / name} leads out of the prepared data"):
            open_prepared(first.path)
        (first.path / name).unlink()
        (first.path / name).write_bytes(saved)
    assert open_prepared(first.path).manifest == first.manifest


def test_stats_changed_since_the_preparation_are_refused_not_plotted(recipe, tok):
    # a stats.json whose counts were edited left a TypeError traceback from the plot (found by the fuzzer)
    from crosstune.data.prepared import open_prepared

    first = prepare_dataset(recipe, tokenizer=tok)
    stats = json.loads((first.path / "stats.json").read_text())
    stats["splits"]["train"]["histogram"]["counts"][0] = None
    (first.path / "stats.json").write_text(json.dumps(stats))
    with pytest.raises(DataError, match=r"stats.json: changed since crosstune data prepare wrote it \(re-run"):
        _ = open_prepared(first.path).stats
    (first.path / "manifest.json").write_text("[1, 2]")  # a manifest that is not one: an AttributeError it was
    with pytest.raises(DataError, match=r"manifest.json: not a preparation's manifest \(a JSON object\)"):
        open_prepared(first.path)


BAD_FIGURES = [  # (key under splits.train, value written there, what the refusal says after "splits.train.")
    ("histogram.counts.17", "nan", "histogram.counts.17: input should be a valid integer (got 'nan')"),
    ("histogram.counts.0", -1, "histogram.counts.0: input should be greater than or equal to 0 (got -1)"),
    ("histogram.edges.1", float("nan"), "histogram.edges.1: input should be a finite number (got nan)"),
    ("histogram.edges", [2.0, 1.0], "histogram.edges: value error, the edges must increase (got [2.0, 1.0])"),
    ("histogram.counts", [1], "histogram.counts: value error, the edges hold 40 bins, one count each: 1 given"),
    ("lengths.p90", 1.5, "lengths.p90: input should be a valid integer (got 1.5)"),
    ("packing_efficiency", "0.9", "packing_efficiency: input should be a valid number (got '0.9')"),
]


@pytest.mark.parametrize(("key", "value", "why"), BAD_FIGURES, ids=[k for k, _, _ in BAD_FIGURES])
def test_stats_whose_figures_do_not_type_are_refused_naming_the_file_and_the_key(recipe, tok, key, value, why):
    # a histogram count "nan" in stats.json reached matplotlib: a TypeError reported as a bug (make fuzz seed
    # 1796584750, data-stats-27); every reader of stats.json types it as PreparedStats
    from crosstune.data.prepared import open_prepared, restamp_stats

    first = prepare_dataset(recipe, tokenizer=tok)
    path = first.path / "stats.json"
    stats = json.loads(path.read_text())
    *parents, last = key.split(".")
    held = stats["splits"]["train"]
    for part in parents:
        held = held[int(part)] if isinstance(held, list) else held[part]
    held[int(last) if isinstance(held, list) else last] = value
    path.write_text(written := json.dumps(stats))
    restamp_stats(first.path)  # the file is the preparation's (as a damaged manifest leaves it): its figure is not
    refusal = rf"^{re.escape(str(path))}: splits\.train\.{re.escape(why)}"
    with pytest.raises(DataError, match=refusal):
        _ = open_prepared(first.path).stats
    shown = CliRunner().invoke(app, ["data", "stats", str(first.path)])
    assert shown.exit_code == 1 and "Traceback" not in shown.output and "a bug in crosstune" not in shown.output
    hint = re.escape("(re-run `crosstune data prepare RECIPE --force`)")
    assert re.search(rf"^error: {refusal[1:]}.* {hint}$", shown.output, re.M), shown.output
    assert path.read_text() == written  # refused before anything is rewritten


def test_force_replaces_its_own_preparation_and_refuses_one_changed_or_added_to(recipe, tok):
    first = prepare_dataset(recipe, tokenizer=tok)
    manifest = first.manifest
    assert manifest["made_by"] == "crosstune data prepare" and manifest["data_hash"]
    assert sorted(manifest["files"]) == sorted(rel for rel in _tree(first.path) if rel != "manifest.json")
    (first.path / "train" / "README").write_text("my notes")
    with pytest.raises(DataError, match=r"train/README \(not in its manifest.json\)"):
        prepare_dataset(recipe, tokenizer=tok, force=True)
    (first.path / "train" / "README").unlink()
    (first.path / "train" / "records.json").write_text("[]\n")
    with pytest.raises(DataError, match=r"train/records.json \(changed since crosstune data prepare wrote it\)"):
        prepare_dataset(recipe, tokenizer=tok, force=True)
    assert (first.path / "train" / "records.json").read_text() == "[]\n"
    (first.path / "train" / "records.json").unlink()
    again = prepare_dataset(recipe, tokenizer=tok, force=True)
    assert not again.reused and again.split("train").record_sources == [
        f"{recipe.data.sources[0].path}:{i}" for i in (1, 2, 3)
    ]


def test_a_preparation_from_before_the_format_epoch_is_not_replaced(recipe, tok):
    """Its manifest.json had no made_by and no files (before crosstune.FORMAT_EPOCH's one shape): it proves none of
    the folder's files, so even --force replaces nothing there."""
    first = prepare_dataset(recipe, tokenizer=tok)
    old = {k: v for k, v in first.manifest.items() if k not in ("format", "made_by", "created", "files")}
    (first.path / "manifest.json").write_text(json.dumps(old))
    before = _tree(first.path)
    with pytest.raises(DataError, match=r"holds files that are not crosstune data prepare's output: .*manifest.json"):
        prepare_dataset(recipe, tokenizer=tok, force=True)
    assert _tree(first.path) == before


def test_data_stats_rewrites_the_stats_and_the_manifest_follows(recipe, tok, monkeypatch):
    import crosstune.data.cli as cli

    first = prepare_dataset(recipe, tokenizer=tok)
    real = cli.save_stats

    def another_matplotlib(folder, stats):  # renders the same histogram in other bytes
        real(folder, stats)
        with (folder / "lengths.png").open("ab") as f:
            f.write(b"\0")

    monkeypatch.setattr(cli, "save_stats", another_matplotlib)
    assert CliRunner().invoke(app, ["data", "stats", str(first.path)]).exit_code == 0
    manifest = json.loads((first.path / "manifest.json").read_text())
    assert manifest["files"]["lengths.png"]["bytes"] == first.manifest["files"]["lengths.png"]["bytes"] + 1
    assert manifest["created"] == first.manifest["created"]
    assert not prepare_dataset(recipe, tokenizer=tok, force=True).reused  # still its own, unchanged
