"""Outputs (exports, preparations, run metadata) never destroy their sources, appear with the umask's modes, and
what a killed writer leaves behind is cleaned by the next one; damaged LoRA values are refused by name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crosstune.export import ExportError, export_run
from crosstune.recipe import load_recipe
from tests.helpers.export import torch_run
from tests.helpers.jax_recipes import REPO


@pytest.fixture
def run(tmp_path, tiny_gemma4_dir) -> Path:
    return torch_run(tmp_path / "work" / "run", tiny_gemma4_dir, "gemma4")


def _hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


# --- 6: --out never swallows the source ---------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["run", "parent", "base"])
def test_out_that_is_or_contains_the_source_is_refused(run, tiny_gemma4_dir, where):
    out = {"run": run, "parent": run.parent, "base": tiny_gemma4_dir}[where]
    (run.parent / "notes.txt").write_text("mine")
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    with pytest.raises(ExportError, match="the export's source .*: writing there would replace it"):
        export_run(run, "adapter", out, overwrite=True)
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before  # nothing deleted
    assert (run.parent / "notes.txt").read_text() == "mine"


def test_overwrite_replaces_only_an_earlier_export(run, tmp_path):
    out = tmp_path / "folder"
    out.mkdir()
    (out / "thesis.tex").write_text("years of work")
    with pytest.raises(ExportError, match=r"not crosstune export's output: thesis.tex \(no export_manifest.json"):
        export_run(run, "adapter", out, overwrite=True)
    assert (out / "thesis.tex").read_text() == "years of work"
    export_run(run, "both", tmp_path / "export")
    export_run(run, "merged", tmp_path / "export", overwrite=True)  # an earlier export (both): replaced
    assert (tmp_path / "export" / "export_manifest.json").is_file()


def test_an_earlier_export_with_a_file_added_or_changed_is_refused_naming_it(run, tmp_path):
    out = tmp_path / "export"
    export_run(run, "both", out)
    before = _tree(out)
    (out / "merged" / "notes.md").write_text("my notes on this model")
    with pytest.raises(ExportError, match=r"merged/notes.md \(not in its export_manifest.json\)"):
        export_run(run, "adapter", out, overwrite=True)
    (out / "merged" / "notes.md").unlink()
    (out / "adapter" / "adapter_config.json").write_text("{}")  # edited by hand
    with pytest.raises(ExportError, match=r"adapter/adapter_config.json \(changed since crosstune export wrote it\)"):
        export_run(run, "adapter", out, overwrite=True)
    assert {k: v for k, v in _tree(out).items() if k != "adapter/adapter_config.json"} == {
        k: v for k, v in before.items() if k != "adapter/adapter_config.json"
    }
    assert (out / "adapter" / "adapter_config.json").read_text() == "{}"


def test_an_export_written_before_the_format_epoch_is_not_replaced(run, tmp_path):
    """Its manifest (format 1: kind, source, created, files, no made_by) is from before crosstune.FORMAT_EPOCH's one
    shape: it proves nothing, so even --overwrite replaces nothing there."""
    out = tmp_path / "export"
    export_run(run, "adapter", out)
    manifest = json.loads((out / "export_manifest.json").read_text())
    old = {k: manifest[k] for k in ("format", "kind", "source", "created", "files")}
    (out / "export_manifest.json").write_text(json.dumps(old))
    before = _tree(out)
    with pytest.raises(ExportError, match="export_manifest.json is not crosstune export's"):
        export_run(run, "adapter", out, overwrite=True)
    assert _tree(out) == before


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# --- 7: values no training can reach are refused, naming the tensor -----------------------------------------------
DAMAGED = [(7e35, r"\|value\| up to 7e\+35, beyond the"), (float("nan"), "not finite")]


@pytest.mark.parametrize(("value", "match"), DAMAGED)
def test_damaged_lora_values_are_refused_naming_the_tensor(run, tmp_path, value, match):
    """A run without recorded checksums (an older crosstune): the value check still stops a damaged adapter."""
    from safetensors.torch import load_file, save_file

    path = run / "adapter" / "adapter_model.safetensors"
    tensors = load_file(path)
    name = sorted(k for k in tensors if "lora_B" in k)[0]
    tensors[name][0, 0] = value
    save_file(tensors, path)
    module = name.removeprefix("base_model.model.").removesuffix(".lora_B.weight")
    with pytest.raises(ExportError, match=f"{module}.lora_B: .*{match}"):
        export_run(run, "adapter", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_magnitude_bound_follows_the_recipe():
    from crosstune.recipe.schema import TrainSection
    from crosstune.run.integrity import lora_magnitude_bound

    train = TrainSection(learning_rate=1e-3, adam_beta1=0.9, adam_beta2=0.999, max_steps=100)
    # √6 from the initialiser + 100 steps × lr × (1 − 0.9)/√(1 − 0.999) = 2.449 + 0.316
    assert lora_magnitude_bound(train, 100) == pytest.approx(6**0.5 + 100 * 1e-3 * 0.1 / 0.001**0.5)
    ratio_below_1 = train.model_copy(update={"adam_beta2": 0.9})
    assert lora_magnitude_bound(ratio_below_1, 100) == pytest.approx(6**0.5 + 0.1)


# --- 11: a killed writer's temp folder is cleaned by the next one -------------------------------------------------
KILLED_EXPORT = """
import os, signal, sys
from pathlib import Path
import crosstune.export.run_export as runs
runs.write_manifest = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)  # dies with the files half written
runs.export_run(Path(sys.argv[1]), "adapter", Path(sys.argv[2]))
"""
KILLED_PREPARE = """
import os, signal, sys
import crosstune.data.prepared as prepared
from crosstune.data import prepare_dataset
from crosstune.recipe import load_recipe
prepared.save_stats = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
prepare_dataset(load_recipe(sys.argv[1]), lenient=True, force=sys.argv[2:] == ["--force"])
"""


def _killed(script: str, *args: object) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    done = subprocess.run([sys.executable, "-c", script, *map(str, args)], env=env, capture_output=True, timeout=300)
    assert done.returncode == -9, done.stderr.decode()[-2000:]


def test_kill_9_during_export_leaves_a_temp_folder_the_next_export_removes(run, tmp_path, capsys):
    out = tmp_path / "exports" / "adapter"
    _killed(KILLED_EXPORT, run, out)
    left = _hidden(out.parent)
    assert len(left) == 1 and left[0].startswith(".adapter.tmp-") and not out.exists()
    export_run(run, "adapter", out)
    assert _hidden(out.parent) == [] and (out / "adapter_model.safetensors").is_file()
    assert f"[cleanup] removed {out.parent / left[0]}: a temp folder left by process" in capsys.readouterr().err


def test_kill_9_during_an_overwriting_export_leaves_the_earlier_export(run, tmp_path):
    out = tmp_path / "exports" / "adapter"
    export_run(run, "adapter", out)
    before = _tree(out)
    _killed(KILLED_EXPORT.replace("Path(sys.argv[2]))", "Path(sys.argv[2]), overwrite=True)"), run, out)
    assert _tree(out) == before  # the earlier export, whole; the next export cleans the dead one's temp folder
    export_run(run, "adapter", out, overwrite=True)  # a rerun replaces its own export
    manifest = "export_manifest.json"  # its `created` is the rerun's
    assert {k: v for k, v in _tree(out).items() if k != manifest} == {k: v for k, v in before.items() if k != manifest}
    assert _hidden(out.parent) == []


def test_kill_9_during_prepare_leaves_a_temp_folder_the_next_prepare_removes(tmp_path, tiny_gemma4_dir, capsys):
    from crosstune.data import prepare_dataset

    recipe_file = _recipe(tmp_path, tiny_gemma4_dir)
    _killed(KILLED_PREPARE, recipe_file)
    left = _hidden(tmp_path)
    assert len(left) == 1 and left[0].startswith(".prepared.tmp-")
    prepare_dataset(load_recipe(recipe_file), lenient=True)
    assert _hidden(tmp_path) == [] and (tmp_path / "prepared" / "manifest.json").is_file()
    assert "[cleanup] removed" in capsys.readouterr().err


def test_kill_9_during_a_forced_prepare_leaves_the_earlier_preparation(tmp_path, tiny_gemma4_dir):
    from crosstune.data import prepare_dataset

    recipe_file = _recipe(tmp_path, tiny_gemma4_dir)
    prepare_dataset(load_recipe(recipe_file), lenient=True)
    before = _tree(tmp_path / "prepared")
    _killed(KILLED_PREPARE, recipe_file, "--force")
    assert _tree(tmp_path / "prepared") == before
    assert prepare_dataset(load_recipe(recipe_file), lenient=True).reused


def test_a_live_writers_temp_folder_is_left_alone(tmp_path):
    from crosstune.fsutil import TEMP_WRITER, clean_stale_temps, staged_dir

    with staged_dir(tmp_path / "out") as tmp:
        assert (tmp / TEMP_WRITER).is_file()
        assert clean_stale_temps(tmp_path) == [] and tmp.is_dir()  # this process is alive
        (tmp / "x").write_text("1")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"] and (tmp_path / "out" / "x").read_text() == "1"


def _recipe(root: Path, model: Path) -> Path:
    corpus = root / "train.jsonl"
    corpus.write_text("".join(json.dumps({"question": f"q{i}", "answer": f"a{i}"}) + "\n" for i in range(4)))
    path = root / "recipe.yaml"
    path.write_text(
        f"name: t\noutput_dir: {root}/runs\nmodel: {{family: gemma4, path: {model}}}\n"
        f"data: {{sources: [{{path: {corpus}, format: jsonl}}], columns: {{preset: qa}}, max_seq_len: 128, "
        f"prepared_dir: {root}/prepared}}\n"
    )
    return path


# --- 12: modes follow the umask -----------------------------------------------------------------------------------
@pytest.fixture
def umask_022():
    before = os.umask(0o022)
    yield
    os.umask(before)


def _modes(folder: Path) -> set[tuple[str, int]]:
    return {("d" if p.is_dir() else "f", p.stat().st_mode & 0o777) for p in [folder, *folder.rglob("*")]}


def test_exports_and_run_metadata_honour_the_umask(umask_022, run, tmp_path, tiny_gemma4_dir):
    from crosstune.data import prepare_dataset
    from crosstune.families import model_dir_spec
    from crosstune.run.records import StackFacts
    from crosstune.run.rundir import start_run_record
    from tests.helpers.records import run_record

    export_run(run, "both", tmp_path / "export")
    assert _modes(tmp_path / "export") == {("d", 0o755), ("f", 0o644)}
    recipe_file = _recipe(tmp_path, tiny_gemma4_dir)
    made = run_record("torch")
    facts = StackFacts(**{name: getattr(made, name) for name in StackFacts.model_fields})
    spec, data = model_dir_spec(tiny_gemma4_dir, "gemma4"), made.data.model_dump()
    start_run_record(
        tmp_path / "meta",
        load_recipe(recipe_file),
        "torch",
        facts,
        spec=spec,
        global_batch=2,
        grad_accumulation=1,
        seq_len=1024,
        total_steps=2,
        resumed_from_step=0,
        data=data,
    )
    assert _modes(tmp_path / "meta") == {("d", 0o755), ("f", 0o644)}
    prepare_dataset(load_recipe(recipe_file))
    assert _modes(tmp_path / "prepared") == {("d", 0o755), ("f", 0o644)}
