"""What guards a run directory, for both backends: one writer at a time, absolute paths, one rule for leniently
prepared data, --resume that can't change what was trained, and checkpoints whose bytes are verified."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
import yaml

from crosstune.recipe import load_recipe

# Strict recipe (data.strict defaults to true) on the synthetic corpus plus two broken lines, which `--lenient`
# skips; 512-token rows drop the longer records (the length policy: dropped and counted in either mode).
RECIPE = """\
name: guards
output_dir: {root}/runs
model: {{family: gemma4, path: {model}, dtype: float32}}
lora: {{rank: 4, alpha: 8, dropout: 0.0, targets: [q, o]}}
data:
  sources: [{{path: {root}/train.jsonl}}]
  max_seq_len: 512
  truncation: drop
  packing: true
  subsample: {{size: 12, seed: 0}}
  prepared_dir: {root}/prepared
train:
  max_steps: 2
  learning_rate: 1.0e-3
  schedule: constant
  per_device_batch_size: 1
  grad_accumulation: 1
  gradient_checkpointing: false
  precision: fp32
  log_every: 1
  checkpoint_every: 1
  keep_last: 3
  seed: 0
backend:
  jax: {{mesh: {{fsdp: 1, tp: 1}}}}
hardware: cpu
"""


@pytest.fixture(scope="module")
def lenient_workspace(tmp_path_factory, tiny_gemma4_dir, synth_corpus_dir):
    """A strict recipe whose data was prepared with `data prepare --lenient` (some records skipped)."""
    from crosstune.data import prepare_dataset

    root = tmp_path_factory.mktemp("guards")
    broken = b'{"prompt": "p", "response": "a"\n{"system": "s", "prompt": "p"}\n'  # bad JSON, no response
    (root / "train.jsonl").write_bytes((synth_corpus_dir / "train.jsonl").read_bytes() + broken)
    path = root / "recipe.yaml"
    path.write_text(RECIPE.format(root=root, model=tiny_gemma4_dir))
    prepared = prepare_dataset(load_recipe(path), lenient=True)
    train = prepared.stats["splits"]["train"]
    assert train["skipped"] == {"bad_json": 1, "missing_field": 1} and sum(train["dropped"].values()) > 0
    return root, path, train


def _in(folder: Path):
    """chdir for the block: the run directory is given relative to it."""
    import contextlib

    @contextlib.contextmanager
    def cd():
        before = Path.cwd()
        os.chdir(folder)
        try:
            yield
        finally:
            os.chdir(before)

    return cd()


@pytest.fixture(scope="module")
def torch_run(lenient_workspace):
    """A finished 2-step torch run, started with a relative --run-dir."""
    from crosstune.train.session import train

    root, path, _ = lenient_workspace
    with _in(root):
        result = train(load_recipe(path), Path("torch-run"), progress=False, backend="torch")
    assert result.run_dir == root / "torch-run" and result.steps == 2
    return result.run_dir


@pytest.fixture(scope="module")
def jax_run(lenient_workspace):
    """A finished 2-step jax run, started with a relative --run-dir (Orbax refuses relative checkpoint paths)."""
    from crosstune.train.session import train

    root, path, _ = lenient_workspace
    with _in(root):
        result = train(load_recipe(path), Path("jax-run"), progress=False, backend="jax")
    assert result.run_dir == root / "jax-run"
    return result.run_dir


def _copy_run(run: Path, to: Path) -> Path:
    import shutil

    shutil.copytree(run, to, ignore=shutil.ignore_patterns(".lock"))
    return to


def _flip_middle(path: Path, n: int = 8) -> None:
    """Flip n bytes in the middle of a file: it still parses, its values are garbage."""
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    data[mid : mid + n] = bytes(b ^ 0xFF for b in data[mid : mid + n])
    path.write_bytes(bytes(data))


# --- 9: paths resolved once, for both backends --------------------------------------------------------------------
def test_relative_run_dir_works_for_both_backends(torch_run, jax_run):
    for run in (torch_run, jax_run):
        assert run.is_absolute() and json.loads((run / "run.json").read_text())["steps"] == 2
    assert (torch_run / "checkpoints" / "checkpoint-2").is_dir()
    assert sorted(int(p.name) for p in (jax_run / "checkpoints").iterdir() if p.name.isdigit()) == [1, 2]


# --- 10: one rule for leniently prepared data ---------------------------------------------------------------------
def test_both_backends_train_on_lenient_data_and_record_it(lenient_workspace, torch_run, jax_run):
    root, _, train = lenient_workspace
    for run in (torch_run, jax_run):
        data = json.loads((run / "run.json").read_text())["data"]
        assert data["lenient"] is True and data["skipped_records"] == 2
        assert data["prepared_dir"] == str(root / "prepared") and data["skipped_by_reason"] == train["skipped"]
        assert data["dropped_by_reason"] == train["dropped"] == {"too_long": data["dropped_records"]}


def test_runs_and_exports_carry_the_data_template_hash(lenient_workspace, torch_run, jax_run, tmp_path):
    """What is trained is what is served: the hash of the chat template the rows were rendered with travels run.json
    → export."""
    from crosstune.export import export_run

    root, _, _ = lenient_workspace
    want = json.loads((root / "prepared" / "manifest.json").read_text())["chat_template_sha256"]
    assert len(want) == 64
    for run in (torch_run, jax_run):
        assert json.loads((run / "run.json").read_text())["data"]["chat_template_sha256"] == want
        out = export_run(run, "adapter", tmp_path / run.name)["adapter"]
        assert json.loads((out / "export_manifest.json").read_text())["source"]["chat_template_sha256"] == want


# --- 5: one writer per run directory ------------------------------------------------------------------------------
def test_a_second_train_into_a_busy_run_dir_is_refused_naming_the_holder(lenient_workspace, tmp_path):
    from crosstune.fsutil import LockedError
    from crosstune.run.rundir import held_run_dir
    from crosstune.train.session import train

    _, path, _ = lenient_workspace
    recipe, run = load_recipe(path), tmp_path / "busy"
    holder = f"PID {os.getpid()} on host {socket.gethostname()}"
    with held_run_dir(run, recipe, "torch", resume=False):
        for backend in ("torch", "jax"):
            with pytest.raises(LockedError, match=f"run directory {run} is in use by {holder}"):
                train(recipe, run, backend=backend, progress=False)
    assert sorted(p.name for p in run.iterdir()) == [".lock"]  # nothing of either run was written


def test_a_fresh_run_refuses_a_users_folder_naming_what_it_holds(tmp_path):
    """A run directory is resumed in place, proven by its run.json (ownership.claim): a user's folder is refused
    before anything is written (no lock); a run killed before its run.json (only the lock) is taken again."""
    from crosstune.ownership import OutputRefused
    from crosstune.run.rundir import held_run_dir

    mine = tmp_path / "mine"
    (mine / "tensorboard").mkdir(parents=True)
    (mine / "tensorboard" / "events.mine").write_text("my runs")
    with pytest.raises(
        OutputRefused, match=f"--run-dir {mine} is not empty and holds no run directory \\(no run.json\\): tensorboard;"
    ):
        with held_run_dir(mine, None, "torch", resume=False):
            pass
    assert [p.relative_to(mine).as_posix() for p in sorted(mine.rglob("*"))] == [
        "tensorboard",
        "tensorboard/events.mine",
    ]
    started = tmp_path / "started"
    with held_run_dir(started, None, "torch", resume=False) as run:
        assert run == started
    with held_run_dir(started, None, "torch", resume=False):  # its lock alone: not a user's file
        pass


def test_a_second_prepare_of_the_same_folder_is_refused(lenient_workspace):
    from crosstune.data import prepare_dataset, prepared_dir
    from crosstune.fsutil import LockedError, exclusive_lock, lock_path

    _, path, _ = lenient_workspace
    recipe = load_recipe(path)
    with exclusive_lock(lock_path(prepared_dir(recipe)), "test", "test"):
        with pytest.raises(LockedError, match=f"the preparation .*prepared is in use by PID {os.getpid()}"):
            prepare_dataset(recipe, lenient=True, force=True)


# --- 8: --resume continues what was trained, or says why not ------------------------------------------------------
def test_resume_refuses_a_recipe_that_changes_what_was_trained(lenient_workspace, torch_run, jax_run):
    from crosstune.run.resume import ResumeError
    from crosstune.train.session import train

    _, path, _ = lenient_workspace
    changed = load_recipe(path, ["lora.rank=8", "train.learning_rate=0.01", "train.max_steps=4"])
    for backend, run in (("torch", torch_run), ("jax", jax_run)):
        before = {name: (run / name).read_bytes() for name in ("run.json", "recipe.yaml")}
        with pytest.raises(ResumeError) as err:
            train(changed, run, backend=backend, resume=True, progress=False)
        message = str(err.value)
        assert "lora.rank: 4 → 8" in message and "train.learning_rate: 0.001 → 0.01" in message
        assert "max_steps" not in message  # a longer run is allowed; only what changes the training is listed
        assert {name: (run / name).read_bytes() for name in before} == before  # the metadata still describes the run


def test_resume_refuses_the_other_backend(lenient_workspace, torch_run):
    from crosstune.run.resume import ResumeError
    from crosstune.train.session import train

    _, path, _ = lenient_workspace
    with pytest.raises(ResumeError, match="trained by the torch backend: resume it with --backend torch"):
        train(load_recipe(path), torch_run, backend="jax", resume=True, progress=False)


def test_resume_of_a_finished_run_trains_nothing(lenient_workspace, torch_run, jax_run):
    from crosstune.run.metrics import read_metrics
    from crosstune.run.resume import ResumeError
    from crosstune.train.session import train

    _, path, _ = lenient_workspace
    for backend, run in (("torch", torch_run), ("jax", jax_run)):
        with pytest.raises(ResumeError, match="already at step 2 of 2: nothing to resume"):
            train(load_recipe(path), run, backend=backend, resume=True, progress=False)
        assert [r.step for r in read_metrics(run)] == [1, 2]


def test_resume_of_a_finished_checkpoint_trains_nothing_without_run_json_steps(lenient_workspace, torch_run, tmp_path):
    """Killed after the last checkpoint, before run.json recorded `steps`: the backend sees it from the checkpoint."""
    from crosstune.run.metrics import read_metrics
    from crosstune.run.resume import ResumeError
    from crosstune.train.session import train

    _, path, _ = lenient_workspace
    run = _copy_run(torch_run, tmp_path / "run")
    meta = json.loads((run / "run.json").read_text())
    meta["steps"] = None  # as run.json is while training runs
    (run / "run.json").write_text(json.dumps(meta))
    with pytest.raises(ResumeError, match="already at step 2 of 2: nothing to resume"):
        train(load_recipe(path), run, resume=True, progress=False, backend="torch")
    assert [r.step for r in read_metrics(run)] == [1, 2]


def test_resume_with_more_steps_continues_past_a_torn_metrics_line(lenient_workspace, torch_run, tmp_path, capsys):
    """The process died while appending step 3's row: resume drops the torn line, says so, and trains step 3."""
    from crosstune.run.metrics import read_metrics
    from crosstune.train.session import train

    _, path, _ = lenient_workspace
    run = _copy_run(torch_run, tmp_path / "run")
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"step": 3, "epoch": 0.3, "lo')
    result = train(load_recipe(path, ["train.max_steps=3"]), run, resume=True, progress=False, backend="torch")
    err = capsys.readouterr().err
    assert "metrics.jsonl:3: dropped a torn last line" in err
    assert "[resume] train.max_steps: 2 → 3 (safe: the run length" in err
    assert result.steps == 3 and [r.step for r in read_metrics(run)] == [1, 2, 3]
    assert yaml.safe_load((run / "recipe.yaml").read_text())["train"]["max_steps"] == 3


# --- 7: checkpoint bytes are verified before export and resume ----------------------------------------------------
def test_flipped_bytes_in_a_torch_checkpoint_are_refused(lenient_workspace, torch_run, tmp_path):
    from crosstune.export import export_run
    from crosstune.run.integrity import CheckpointCorruptError
    from crosstune.train.session import train

    _, path, _ = lenient_workspace
    run = _copy_run(torch_run, tmp_path / "run")
    export_run(run, "adapter", tmp_path / "good")  # intact: exports
    adapter = run / "adapter" / "adapter_model.safetensors"
    _flip_middle(adapter)
    with pytest.raises(CheckpointCorruptError, match=f"{adapter}: its sha256 differs"):
        export_run(run, "adapter", tmp_path / "out")
    ckpt = run / "checkpoints" / "checkpoint-2" / "adapter_model.safetensors"
    _flip_middle(ckpt)
    with pytest.raises(CheckpointCorruptError, match=f"{ckpt}: its sha256 differs"):
        export_run(run, "adapter", tmp_path / "out", step=2)
    with pytest.raises(CheckpointCorruptError, match=f"{ckpt}: its sha256 differs"):
        train(load_recipe(path, ["train.max_steps=3"]), run, resume=True, progress=False, backend="torch")
    assert not (tmp_path / "out").exists()


def test_flipped_bytes_in_an_orbax_checkpoint_are_refused(lenient_workspace, jax_run, tmp_path):
    from crosstune.export import export_run
    from crosstune.run.integrity import CHECKSUMS, CheckpointCorruptError
    from crosstune.train.session import train

    _, path, _ = lenient_workspace
    run = _copy_run(jax_run, tmp_path / "run")
    step = run / "checkpoints" / "2"
    assert (step / CHECKSUMS).is_file()
    data = max((p for p in (step / "model_params").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    _flip_middle(data)
    with pytest.raises(CheckpointCorruptError, match=f"{data}: its sha256 differs"):
        export_run(run, "adapter", tmp_path / "out")
    with pytest.raises(CheckpointCorruptError, match=f"{data}: its sha256 differs"):
        train(load_recipe(path, ["train.max_steps=3"]), run, resume=True, progress=False, backend="jax")
    export_run(run, "adapter", tmp_path / "earlier", step=1)  # the intact step still exports


# --- the session finalises both backends' runs the same way -------------------------------------------------------
def test_both_backends_leave_a_peft_adapter_of_the_final_step(torch_run, jax_run):
    """<run>/adapter is a PEFT adapter for both backends: for jax the session writes it from the last Orbax
    checkpoint (read through the backend's read_lora), with checksums; run.json's steps names its step."""
    import numpy as np

    from crosstune.run.integrity import verify_checksums
    from crosstune.run.lora_weights import read_peft_adapter
    from crosstune.train.session import read_run_lora

    for run in (torch_run, jax_run):
        meta = json.loads((run / "run.json").read_text())
        assert meta["steps"] == 2 and (run / "loss.png").is_file()
        assert (meta["global_batch"], meta["grad_accumulation"]) == (1, 1)  # the session's step plan, both backends
        assert verify_checksums(run / "adapter", "adapter")
        adapter, config = read_peft_adapter(run / "adapter", family="gemma4")
        assert (config["r"], float(config["lora_alpha"])) == (meta["lora"]["rank"], float(meta["lora"]["alpha"]))
    saved = read_run_lora(jax_run, 2)
    adapter, _ = read_peft_adapter(jax_run / "adapter", family="gemma4")
    assert saved.step == 2 and sorted(adapter.modules) == sorted(saved.lora.modules)
    for name, (a, b) in saved.lora.modules.items():  # the same arrays, written as float32 safetensors
        np.testing.assert_array_equal(adapter.modules[name][0], a)
        np.testing.assert_array_equal(adapter.modules[name][1], b)
