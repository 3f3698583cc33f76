"""The output policy (crosstune.ownership): one manifest shape, and one rule — a command replaces only files it wrote,
which its manifest proves (listed, sha256 and size unchanged); anything else in its way is refused, naming it."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crosstune.ownership import (
    FileEntry,
    FileKind,
    OutputKind,
    OutputRefused,
    ResumedKind,
    claim,
    file_refusal,
    owned_files,
    owned_output,
    read_manifest,
    refusal,
    restamp,
    unlisted,
    verify,
    write_manifest,
    write_owned_file,
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
    assert verify(out, KIND) == [
        "a.txt (changed since crosstune thing wrote it)",
        "link (a link)",
        "notes.md (not in its thing_manifest.json)",
        "b.txt (missing)",
    ]
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


def test_files_listed_by_sha256_or_name_alone_are_read_and_a_manifest_without_made_by_is_not_the_kinds(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.txt").write_text("alpha")
    (out / "b.txt").write_text("beta")
    digest = hashlib.sha256(b"alpha").hexdigest()
    files = {"a.txt": digest, "b.txt": None}
    (out / KIND.manifest).write_text(json.dumps({"made_by": KIND.made_by, "files": files}))
    manifest, _ = read_manifest(out, KIND)
    assert manifest.files == {
        "a.txt": FileEntry(sha256=digest, bytes=None),
        "b.txt": FileEntry(sha256=None, bytes=None),
    }
    assert refusal(out, KIND) is None  # b.txt: proven by its name alone, all that shape records
    (out / KIND.manifest).write_text(json.dumps({"files": files}))
    assert read_manifest(out, KIND) == (None, "its thing_manifest.json is not crosstune thing's")


def test_a_manifest_read_is_typed_and_a_wrong_typed_entry_makes_it_not_one(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.txt").write_text("alpha")
    write_manifest(out, KIND, {"source": {"step": 3}})
    manifest, why = read_manifest(out, KIND)
    assert why == "" and (manifest.format, manifest.made_by, manifest.writing) == (1, KIND.made_by, [])
    assert manifest.files["a.txt"].bytes == 5 and manifest.fields() == {"source": {"step": 3}}
    raw = json.loads((out / KIND.manifest).read_text())
    raw["files"]["a.txt"]["bytes"] = "5"
    (out / KIND.manifest).write_text(json.dumps(raw))
    assert read_manifest(out, KIND) == (
        None,
        "its thing_manifest.json: files.a.txt.bytes: input should be a valid integer (got '5')",
    )
    assert refusal(out, KIND).startswith(f"--out {out} holds files that are not crosstune thing's output: a.txt")


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
    assert "writing" not in pinned and pinned["files"]["report.md"] == {
        "sha256": hashlib.sha256(b"first").hexdigest(),
        "bytes": 5,
    }
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


def test_a_manifest_naming_a_path_outside_its_folder_proves_nothing_and_nothing_outside_is_read(tmp_path):
    """A hand-edited `writing` claim of `../secret.txt`: the run pinned it, reading and hashing the file outside
    into the manifest. A name that leaves the folder (`..`, absolute, or through a link) makes the manifest not one."""
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "secret.txt").write_text("key")
    shape = {"format": 1, "made_by": KIND.made_by, "created": "", "files": {}}
    for listed in ({"writing": ["../secret.txt"]}, {"files": {"/etc/hostname": {}}}, {"files": {"sub/secret.txt": {}}}):
        (out / KIND.manifest).write_text(json.dumps(shape | listed))
        (out / "sub").unlink(missing_ok=True)
        (out / "sub").symlink_to(tmp_path)
        name = next(iter(listed.get("writing") or listed["files"]))
        assert read_manifest(out, KIND) == (
            None,
            f"its {KIND.manifest} lists {name!r}, which is not a name inside {out}",
        )
    (out / "sub").unlink()
    (out / KIND.manifest).write_text(json.dumps(shape | {"writing": ["../secret.txt"]}))
    with owned_files(out, KIND, ["report.md"]):
        (out / "report.md").write_text("mine")
    assert sorted(json.loads((out / KIND.manifest).read_text())["files"]) == ["report.md"]


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


# --- folders resumed in place, one-file outputs -------------------------------------------------------------------
def _read_note(folder: Path) -> dict | None:
    path = folder / "note.json"
    return json.loads(path.read_text()) if path.is_file() else None


RESUMED = ResumedKind("crosstune thing", "note.json", "thing folder", _read_note, transient=(".lock",))


def test_a_resumed_folder_is_new_empty_or_proven_by_its_manifest(tmp_path):
    assert claim(tmp_path / "new", RESUMED) is None and not (tmp_path / "new").exists()  # nothing written yet
    (tmp_path / "started" / "empty").mkdir(parents=True)
    (tmp_path / "started" / ".lock").write_text("pid")  # a run that died before its manifest: not a user's file
    assert claim(tmp_path / "started", RESUMED) is None
    (tmp_path / "mine" / "sub").mkdir(parents=True)
    (tmp_path / "mine" / "sub" / "a.txt").write_text("mine")
    (tmp_path / "mine" / "thesis.tex").write_text("mine")
    with pytest.raises(OutputRefused) as refused:
        claim(tmp_path / "mine", RESUMED, label="--dir")
    assert str(refused.value) == (
        f"--dir {tmp_path / 'mine'} is not empty and holds no thing folder (no note.json): sub, thesis.tex; "
        "crosstune thing writes only into its own thing folder: give a new or empty folder"
    )
    (tmp_path / "mine" / "note.json").write_text('{"by": "crosstune thing"}')
    assert claim(tmp_path / "mine", RESUMED) == {"by": "crosstune thing"}  # resumed: others' files left alone
    with pytest.raises(OutputRefused, match="is inside .*thesis.tex, which is a file"):
        claim(tmp_path / "mine" / "thesis.tex" / "x", RESUMED)


def test_unlisted_names_what_a_resumed_folders_manifest_does_not(tmp_path):
    (tmp_path / "export" / "merged").mkdir(parents=True)
    for rel in ("export/merged/model.safetensors", "export/notes.txt", "plan.json"):
        (tmp_path / rel).write_text("x")
    os.symlink(tmp_path / "plan.json", tmp_path / "export" / "link")
    wrote = ["export/merged/model.safetensors", "plan.json"]
    assert unlisted(tmp_path, ["export", "plan.json", "absent"], wrote) == ["export/link", "export/notes.txt"]


SPEC = FileKind("crosstune thing")


def test_a_one_file_output_is_replaced_only_when_it_is_its_own_unchanged(tmp_path):
    spec = tmp_path / "job.yaml"
    write_owned_file(spec, "name: a\nrun: x", SPEC)
    body, stamp = spec.read_text().rsplit("\n", 2)[0] + "\n", spec.read_text().splitlines()[-1]
    assert body == "name: a\nrun: x\n" and stamp == (
        f"# crosstune thing wrote this file; sha256 of the lines above: {hashlib.sha256(body.encode()).hexdigest()}"
    )
    write_owned_file(spec, "name: b\n", SPEC)  # its own, unchanged: replaced
    assert spec.read_text().startswith("name: b\n# crosstune thing wrote")
    spec.write_text(spec.read_text().replace("name: b", "name: edited"))
    why = f"--out {spec} exists and has changed since crosstune thing wrote it"
    assert file_refusal(spec, SPEC).startswith(why)
    with pytest.raises(OutputRefused, match="has changed since crosstune thing wrote it"):
        write_owned_file(spec, "name: c\n", SPEC)
    assert "name: edited" in spec.read_text()
    mine = tmp_path / "mine.yaml"
    mine.write_text("# crosstune 0.1: a user's copy of a spec's head line\nname: mine\n")
    assert file_refusal(mine, SPEC).startswith(f"--out {mine} exists and is not a file crosstune thing wrote")
    with pytest.raises(OutputRefused, match="is a folder"):
        write_owned_file(tmp_path, "x", SPEC)


# --- one mechanism ------------------------------------------------------------------------------------------------
KINDS = ("OutputKind", "ResumedKind")


def other_output_mechanisms(src: Path) -> list[str]:
    """file:line: what, for every output rule outside crosstune/ownership/: a function whose name says it claims
    a folder, a constant named a marker, or a `.crosstune-*` file name that is not a manifest given to ownership
    (OutputKind / ResumedKind). fsutil's temp-folder record is the swap's own (who may clean a dead writer's temp
    folder), not an output's proof."""
    found = []
    for path in sorted((src / "crosstune").rglob("*.py")):
        rel = path.relative_to(src).as_posix()
        if rel.startswith("crosstune/ownership/"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        values = {
            t.id: n.value.value
            for n in ast.walk(tree)
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
            for t in n.targets
            if isinstance(t, ast.Name)
        }
        manifests = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in KINDS:
                arg = node.args[1] if len(node.args) > 1 else None
                manifests.add(arg.value if isinstance(arg, ast.Constant) else values.get(getattr(arg, "id", None)))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and "claim" in node.name.lower():
                found.append(f"{rel}:{node.lineno}: def {node.name}")
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                names = [t.id for t in node.targets if isinstance(t, ast.Name) and "MARKER" in t.id.upper()]
                found += [f"{rel}:{node.lineno}: {name}" for name in names if isinstance(node.value.value, str)]
            elif isinstance(node, ast.Constant) and str(node.value).startswith(".crosstune-"):
                if node.value not in manifests and (rel, node.value) != ("crosstune/fsutil.py", ".crosstune-tmp.json"):
                    found.append(f"{rel}:{node.lineno}: {node.value!r}")
    return sorted(found)


def test_ownership_is_the_one_output_mechanism():
    """No marker file, no claim function, beside crosstune.ownership (there were five, each its own rule)."""
    assert other_output_mechanisms(REPO / "src") == []


def test_the_scan_finds_the_mechanisms_there_were(tmp_path):
    (tmp_path / "crosstune" / "demo").mkdir(parents=True)
    (tmp_path / "crosstune" / "demo" / "context.py").write_text(
        'DEMO_MARKER = ".crosstune-demo"\n\n\ndef claim_output_folder(out):\n    pass\n'
    )
    (tmp_path / "crosstune" / "launch.py").write_text('MARKER = "# crosstune "\nMARKERS = ("o", "s")\n')
    (tmp_path / "crosstune" / "kept.py").write_text(
        'from crosstune import ownership\nNAME = ".crosstune-kept.json"\nK = ownership.OutputKind("x", NAME)\n'
    )
    assert other_output_mechanisms(tmp_path) == [
        "crosstune/demo/context.py:1: '.crosstune-demo'",
        "crosstune/demo/context.py:1: DEMO_MARKER",
        "crosstune/demo/context.py:4: def claim_output_folder",
        "crosstune/launch.py:1: MARKER",
    ]
