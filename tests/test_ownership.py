"""The output policy (crosstune.ownership): one manifest shape, and one rule — a command replaces only files it wrote,
which its manifest proves (listed, sha256 and size unchanged); anything else in its way is refused, naming it."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crosstune.ownership import (
    OutputKind,
    OutputRefused,
    owned_files,
    owned_output,
    read_manifest,
    refusal,
    restamp,
    verify,
    write_manifest,
)
from tests.helpers.paths import REPO

KIND = OutputKind("crosstune thing", "thing_manifest.json")
WHY = "it replaces only what it wrote itself: move them out or choose another --out"


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _made(dest: Path, files: dict[str, str], **fields) -> Path:
    with owned_output(dest, KIND) as tmp:
        for rel, text in files.items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_text(text)
        write_manifest(tmp, KIND, fields)
    return dest


def test_the_manifest_lists_every_file_with_sha256_and_size_beside_the_commands_fields(tmp_path):
    out = _made(tmp_path / "out", {"a.txt": "alpha", "sub/b.bin": "bb"}, source={"step": 3})
    manifest = json.loads((out / KIND.manifest).read_text())
    assert sorted(manifest) == ["created", "files", "format", "made_by", "source"]
    assert (manifest["format"], manifest["made_by"], manifest["source"]) == (1, "crosstune thing", {"step": 3})
    assert manifest["files"] == {
        "a.txt": {"sha256": hashlib.sha256(b"alpha").hexdigest(), "bytes": 5},
        "sub/b.bin": {"sha256": hashlib.sha256(b"bb").hexdigest(), "bytes": 2},
    }
    assert refusal(out, KIND) is None and verify(out, KIND) == []
    with pytest.raises(ValueError, match=r"fields \['files'\] would hide the shape's own"):
        write_manifest(out, KIND, {"files": []})


def test_what_is_not_proven_is_named_with_why(tmp_path):
    out = _made(tmp_path / "out", {"a.txt": "alpha", "b.txt": "beta"})
    (out / "a.txt").write_text("edited")
    (out / "notes.md").write_text("mine")
    os.symlink(out / "b.txt", out / "link")
    (out / "b.txt").unlink()
    assert refusal(out, KIND) == (
        f"--out {out} holds files that are not crosstune thing's output: a.txt (changed since crosstune thing wrote "
        f"it); link (a link); notes.md (not in its thing_manifest.json); {WHY}"
    )
    assert verify(out, KIND) == ["a.txt (changed since crosstune thing wrote it)", "link (a link)",
                                 "notes.md (not in its thing_manifest.json)", "b.txt (missing)"]  # fmt: skip
    mine = tmp_path / "mine"
    mine.mkdir()
    for i in range(7):
        (mine / f"f{i}").write_text("x")
    assert refusal(mine, KIND, "data.dir") == (
        f"data.dir {mine} holds files that are not crosstune thing's output: f0, f1, f2, f3, f4 and 2 more (no "
        "thing_manifest.json lists it); it replaces only what it wrote itself: move them out or choose another "
        "data.dir"
    )
    (mine / KIND.manifest).write_text(json.dumps({"made_by": "crosstune other", "files": {}}))
    assert "(its thing_manifest.json is not crosstune thing's)" in refusal(mine, KIND)


def test_owned_output_replaces_its_own_only_with_overwrite_and_keeps_it_on_failure(tmp_path):
    out = _made(tmp_path / "out", {"a.txt": "first"})
    before = _tree(out)
    with pytest.raises(OutputRefused, match=f"--out {out} holds an earlier output of crosstune thing: pass --force"):
        with owned_output(out, KIND, overwrite=False, flag="--force"):
            pytest.fail("the block runs only once the folder may be replaced")
    with pytest.raises(RuntimeError, match="disk trouble"), owned_output(out, KIND) as tmp:
        (tmp / "a.txt").write_text("second")
        raise RuntimeError("disk trouble")
    assert _tree(out) == before
    with pytest.raises(Exception, match="wrote b.txt without listing it in thing_manifest.json"):
        with owned_output(out, KIND) as tmp:
            write_manifest(tmp, KIND)
            (tmp / "b.txt").write_text("written after the manifest")
    assert _tree(out) == before
    _made(out, {"a.txt": "second"})
    assert (out / "a.txt").read_text() == "second" and sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_owned_output_refuses_a_file_and_an_input_before_the_block(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("keep")
    for dest, where in ((afile, "is a file"), (afile / "sub", f"is inside {afile}, which is a file")):
        with pytest.raises(OutputRefused, match=f"--out {dest} {where}: give a folder"), owned_output(dest, KIND):
            pytest.fail("refused first")
    source = tmp_path / "in" / "src"
    source.mkdir(parents=True)
    with pytest.raises(OutputRefused, match="contains the thing's input"):
        with owned_output(tmp_path / "in", KIND, inputs=[source], what="thing's input"):
            pytest.fail("refused first")
    assert afile.read_text() == "keep" and source.is_dir()


def test_parts_each_with_their_own_manifest_prove_the_folder(tmp_path):
    kind = OutputKind("crosstune thing", "thing_manifest.json", parts=("left", "right"))
    with owned_output(tmp_path / "out", kind) as tmp:
        for part in kind.parts:
            (tmp / part).mkdir()
            (tmp / part / "w.bin").write_text(part)
            write_manifest(tmp / part, kind)
    out = tmp_path / "out"
    assert refusal(out, kind) is None
    (out / "right" / "extra").write_text("x")
    (out / "notes.txt").write_text("mine")
    assert refusal(out, kind) == (
        f"--out {out} holds files that are not crosstune thing's output: notes.txt (no thing_manifest.json lists it); "
        f"right/extra (not in its thing_manifest.json); {WHY}"
    )


def test_an_older_manifest_is_read_through_the_kinds_legacy(tmp_path):
    kind = OutputKind(KIND.made_by, KIND.manifest, legacy=lambda m, folder: {**m, "made_by": KIND.made_by})
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.txt").write_text("alpha")
    (out / "b.txt").write_text("beta")
    digest = hashlib.sha256(b"alpha").hexdigest()
    (out / KIND.manifest).write_text(json.dumps({"files": {"a.txt": digest, "b.txt": None}}))
    manifest, _ = read_manifest(out, kind)
    assert manifest["files"] == {"a.txt": {"sha256": digest, "bytes": None}, "b.txt": {"sha256": None, "bytes": None}}
    assert refusal(out, kind) is None  # b.txt: proven by its name alone, all that older shape recorded
    assert read_manifest(out, KIND) == (None, "its thing_manifest.json is not crosstune thing's")


def test_owned_files_claims_then_pins_and_leaves_others_files_alone(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with owned_files(out, KIND, ["cache.jsonl", "report.md"]):
        claimed = json.loads((out / KIND.manifest).read_text())
        assert claimed["writing"] == ["cache.jsonl", "report.md"] and claimed["files"] == {}
        (out / "cache.jsonl").write_text("1\n")
        (out / "report.md").write_text("first")
    pinned = json.loads((out / KIND.manifest).read_text())
    assert "writing" not in pinned and pinned["files"]["report.md"] == {"sha256": hashlib.sha256(b"first").hexdigest(),
                                                                        "bytes": 5}  # fmt: skip
    with owned_files(out, KIND, ["report.md"]):  # a run writing less keeps the cache proven
        (out / "report.md").write_text("second")
    assert sorted(json.loads((out / KIND.manifest).read_text())["files"]) == ["cache.jsonl", "report.md"]
    (out / "report.md").write_text("edited by hand")
    with pytest.raises(OutputRefused, match=r"report.md \(changed since crosstune thing wrote it\)"):
        with owned_files(out, KIND, ["cache.jsonl", "report.md"]):
            pytest.fail("refused first")
    assert (out / "notes.txt").read_text() == "mine" and (out / "report.md").read_text() == "edited by hand"
    with pytest.raises(OutputRefused, match=r"notes.txt \(not in its thing_manifest.json\)"):
        with owned_files(out, KIND, ["notes.txt"]):
            pytest.fail("refused first")


KILLED = """
import os, signal, sys
from pathlib import Path
from crosstune.ownership import OutputKind, owned_files
with owned_files(Path(sys.argv[1]), OutputKind("crosstune thing", "thing_manifest.json"), ["cache.jsonl"]):
    with open(Path(sys.argv[1]) / "cache.jsonl", "a") as f:
        f.write("torn")
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_owned_files_killed_while_writing_leaves_its_claim_for_the_next_run(tmp_path):
    out = tmp_path / "out"
    with owned_files(out, KIND, ["cache.jsonl"]):
        (out / "cache.jsonl").write_text("1\n")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    done = subprocess.run([sys.executable, "-c", KILLED, str(out)], env=env, capture_output=True, timeout=60)
    assert done.returncode == -9, done.stderr.decode()
    assert json.loads((out / KIND.manifest).read_text())["writing"] == ["cache.jsonl"]
    with owned_files(out, KIND, ["cache.jsonl"]):  # the dead run's file: its own, whatever it holds
        assert (out / "cache.jsonl").read_text() == "1\ntorn"
    assert json.loads((out / KIND.manifest).read_text())["files"]["cache.jsonl"]["bytes"] == 6


def test_owned_files_that_wrote_nothing_leaves_no_trace(tmp_path):
    with pytest.raises(ValueError, match="no problems"), owned_files(tmp_path / "new", KIND, ["report.md"]):
        raise ValueError("no problems")
    assert not (tmp_path / "new").exists()


def test_restamp_records_files_rewritten_in_place_by_their_own_command(tmp_path):
    out = _made(tmp_path / "out", {"stats.json": "{}"}, hashes={"n": 1})
    created = json.loads((out / KIND.manifest).read_text())["created"]
    (out / "stats.json").write_text('{"rows": 3}')
    assert "stats.json (changed since" in refusal(out, KIND)
    restamp(out, KIND, ["stats.json"])
    manifest = json.loads((out / KIND.manifest).read_text())
    assert refusal(out, KIND) is None and manifest["hashes"] == {"n": 1} and manifest["created"] == created
