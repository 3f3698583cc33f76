"""`crosstune model tiny|build --out`: a build replaces only an earlier build of its own, unchanged (its
.crosstune-model.json, the one manifest shape of crosstune.ownership); `--force` never deletes a user's folder: it is
refused naming the files, and a build killed mid-write leaves the earlier one whole."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from tests.helpers.paths import REPO

MANIFEST = ".crosstune-model.json"  # crosstune.models.build.MODEL.manifest


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _cli(*args: str):
    from crosstune.cli import _register, app

    _register()
    return CliRunner(env={"COLUMNS": "400"}).invoke(app, ["model", "tiny", "--family", "gemma3", *args])


def test_force_refuses_a_users_folder_naming_its_files(tmp_path, synth_corpus_dir):
    out = tmp_path / "mine"
    (out / "notes").mkdir(parents=True)
    (out / "notes" / "thesis.tex").write_text("years of work")
    (out / "config.json").write_text("{}")
    before = _tree(out)
    for extra in (["--force"], []):  # --force deleted such a folder's contents before (c3601e4)
        result = _cli("--out", str(out), "--corpus", str(synth_corpus_dir), *extra)
        assert result.exit_code == 1, result.output  # a bad --out: refused before anything is built
        assert (
            f"--out {out} holds files that are not crosstune model's output: config.json, notes/thesis.tex (no "
            f"{MANIFEST} lists it)"
        ) in " ".join(result.output.split())
    assert _tree(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["mine"]  # no temp folder left


def test_force_replaces_its_own_build_and_refuses_one_changed_or_added_to(tmp_path, synth_corpus_dir):
    out = tmp_path / "m"
    assert _cli("--out", str(out), "--corpus", str(synth_corpus_dir)).exit_code == 0
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["made_by"] == "crosstune model" and manifest["settings"]["seed"] == 0
    assert sorted(manifest["files"]) == sorted(rel for rel in _tree(out) if rel != MANIFEST)
    (out / "README.md").write_text("my model card")
    result = _cli("--out", str(out), "--corpus", str(synth_corpus_dir), "--force")
    assert f"README.md (not in its {MANIFEST})" in " ".join(result.output.split()), result.output
    (out / "README.md").unlink()
    (out / "config.json").write_text((out / "config.json").read_text().replace("gemma3", "gemma3 "))
    result = _cli("--out", str(out), "--corpus", str(synth_corpus_dir), "--force")
    assert "config.json (changed since crosstune model wrote it)" in " ".join(result.output.split()), result.output
    assert "gemma3 " in (out / "config.json").read_text()  # refused: left as the user made it


KILLED_BUILD = """
import os, signal, sys
import crosstune.models.cli as cli
from crosstune.cli import _register, app
real = cli.build_checkpoint
def build_then_die(*args, **kwargs):
    real(*args, **kwargs)  # the new files are all written...
    os.kill(os.getpid(), signal.SIGKILL)  # ...and the process dies before the swap
cli.build_checkpoint = build_then_die
_register()
app(["model", "tiny", "--family", "gemma3", "--out", sys.argv[1], "--corpus", sys.argv[2], "--force", "--seed", "5"])
"""


def test_kill_9_during_a_forced_build_leaves_the_earlier_build(tmp_path, synth_corpus_dir):
    out = tmp_path / "m"
    assert _cli("--out", str(out), "--corpus", str(synth_corpus_dir)).exit_code == 0
    before = _tree(out)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    args = [sys.executable, "-c", KILLED_BUILD, str(out), str(synth_corpus_dir)]
    done = subprocess.run(args, env=env, capture_output=True, timeout=300)
    assert done.returncode == -9, done.stderr.decode()[-2000:]
    assert _tree(out) == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".m.tmp-")] != []  # the dead build's temp folder
    assert _cli("--out", str(out), "--corpus", str(synth_corpus_dir), "--force").exit_code == 0  # cleans it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_a_corpus_file_linked_out_of_the_corpus_is_refused_and_never_learned(tmp_path):
    # `--corpus C` read C/train.jsonl through a link to a file outside: the tokenizer learned it (found by the fuzzer)
    import pytest

    from crosstune.confinement import ConfinementError
    from crosstune.models import corpus_texts

    (tmp_path / "corpus").mkdir()
    (tmp_path / "key.jsonl").write_text('{"prompt": "sk-live-0123", "completion": "x"}\n')
    (tmp_path / "corpus" / "train.jsonl").symlink_to(tmp_path / "key.jsonl")
    with pytest.raises(ConfinementError, match=r"corpus/train.jsonl leads out of the corpus "):
        corpus_texts(tmp_path / "corpus")
