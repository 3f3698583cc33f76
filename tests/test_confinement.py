"""The one owner of confinement (crosstune.confinement): a path under a root the user named is resolved and stays
inside it, a link that leaves is refused by name in one line, and walks and deletes follow no link. A scan of
src/ finds every walk, copy or delete that could follow a link outside the owner; each one left says why it is
safe (ALLOWED)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from crosstune.confinement import (
    ConfinementError,
    inside,
    leads_out,
    listing,
    no_link_below,
    relative_name,
    remove,
    walk_files,
)
from tests.helpers.paths import REPO


def _tree(tmp_path) -> tuple[Path, Path]:
    """root/ (a.txt, sub/b.txt, in -> sub, out -> ../outside, out.txt -> ../outside/key) and outside/key."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "key").write_text("key")
    (root / "a.txt").write_text("a")
    (root / "sub" / "b.txt").write_text("b")
    (root / "in").symlink_to(root / "sub")
    (root / "out").symlink_to(outside)
    (root / "out.txt").symlink_to(outside / "key")
    return root, outside


def test_a_path_is_read_inside_its_root_and_a_link_out_is_refused_by_name(tmp_path):
    root, outside = _tree(tmp_path)
    assert inside(root, "in/b.txt", label="--problems") == root / "sub" / "b.txt"  # a link inside: followed
    assert inside(root, root / "a.txt", label="--problems") == root / "a.txt"
    for rel, target in (("out.txt", outside / "key"), ("out/key", outside / "key"), ("../outside", outside)):
        with pytest.raises(ConfinementError) as refused:
            inside(root, rel, label="--problems", fix="remove the link")
        assert str(refused.value) == f"{root / rel} leads out of --problems {root} (to {target}): remove the link"
        assert leads_out(root, rel)
    (tmp_path / "alias").symlink_to(root)  # the root named through a link: its own files are inside
    assert inside(tmp_path / "alias", "a.txt", label="x") == root / "a.txt" and not leads_out(tmp_path / "alias", "in")


def test_a_root_named_by_a_relative_path_confines_as_an_absolute_one(tmp_path, monkeypatch):
    # inside() joined a relative root to its own path twice and looked at a path that does not exist (found by the
    # fuzzer: `data stats out/prepared` read manifest.json through a link out)
    _tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfinementError, match=r"^root/out.txt leads out of x "):
        inside(Path("root"), "out.txt", label="x")
    assert inside(Path("root"), "in/b.txt", label="x") == tmp_path / "root" / "sub" / "b.txt"


def test_a_link_loop_is_refused_by_name_not_a_traceback(tmp_path):
    root, _ = _tree(tmp_path)
    (root / "loop").symlink_to("loop")  # pathlib's resolve raises RuntimeError on it (found by the fuzzer)
    with pytest.raises(ConfinementError, match=rf"^{root}/loop/x is a link loop inside the run directory {root}: f$"):
        inside(root, "loop/x", label="the run directory", fix="f")
    assert leads_out(root, "loop")


def test_a_write_refuses_every_link_on_its_way_and_a_name_from_a_file_stays_relative(tmp_path):
    root, outside = _tree(tmp_path)
    assert no_link_below(root, "sub/new/c.txt", label="the bundle", fix="f") == root / "sub" / "new" / "c.txt"
    with pytest.raises(ConfinementError, match=rf"^{root}/in is a link \(to {root}/sub\) inside the bundle {root}: f$"):
        no_link_below(root, "in/c.txt", label="the bundle", fix="f")  # inside, but not the folder its name says
    good, bad = ["a", "a/b.c", ".hidden"], ["", ".", "../a", "a/../../b", "/etc/x", "a\\b", "a\0b", 3, None]
    assert [relative_name(n) for n in good] == good and [relative_name(n) for n in bad] == [None] * len(bad)


def test_walks_and_deletes_follow_no_link(tmp_path):
    root, outside = _tree(tmp_path)
    assert listing(root) == ["a.txt", "in", "out", "out.txt", "sub/b.txt"]  # links listed as links, not entered
    assert [rel for rel, _ in walk_files(root)] == ["a.txt", "sub/b.txt"] and list(walk_files(root / "out")) == []
    remove(root / "out")  # a folder link: unlinked, its target kept
    remove(root / "out.txt")
    remove(root / "nothing")
    (root / "sub" / "deep").symlink_to(outside)
    remove(root / "sub")  # a folder holding a link: the link goes, its target stays
    assert sorted(p.name for p in root.iterdir()) == ["a.txt", "in"] and (outside / "key").read_text() == "key"


# --- no code bypasses the owner -----------------------------------------------------------------------------------
# Each use of a call that follows links (or deletes a tree) outside crosstune/confinement.py, and why it is safe.
ALLOWED: dict[tuple[str, str], str] = {
    ("crosstune/fsutil.py", "rmtree"): "crosstune's own temp folders, made by this process or proven a dead "
    "process's by their writer record, never a link (clean_stale_temps skips links)",
    ("crosstune/fsutil.py", "rglob"): "files_fingerprint hashes what a stage reads and discloses nothing; a model "
    "in the hub cache is links into its blobs by design, so links must be followed there",
    ("crosstune/recipe/checks.py", "glob"): "only asks whether a recipe's path or pattern matches anything",
    ("crosstune/data/sources.py", "glob"): "the user's own data-source pattern; its rows stay on this machine",
    ("crosstune/data/sources.py", "rglob"): "the user's own data folder (a hub snapshot is links into its blobs); "
    "its rows stay on this machine",
    ("crosstune/serve/state.py", "glob"): "crosstune's own serve state folder, one level down",
    ("crosstune/study/stages.py", "copytree"): "copies a pretrain cache entry crosstune wrote itself into the "
    "bundle, swapped into place by staged_dir",
    ("crosstune/study/stages.py", "glob"): "TOKENIZER_PATTERNS, one-level patterns in the model's folder (a hub "
    "snapshot is links into its blobs by design), hashed only",
}
OWNER = "crosstune/confinement.py"


def _kind(node: ast.Call) -> str | None:
    """What a call is, if it walks, copies or deletes a tree in a way that can follow a link out."""
    name = getattr(node.func, "attr", getattr(node.func, "id", None))
    if name in ("rmtree", "rglob", "copytree"):
        return name
    if name == "walk":
        follow = next((k.value for k in node.keywords if k.arg == "followlinks"), None)
        return None if follow is None or (isinstance(follow, ast.Constant) and follow.value is False) else "walk"
    if name in ("glob", "iglob"):
        module = getattr(node.func.value, "id", None) if isinstance(node.func, ast.Attribute) else None
        pattern = node.args[0] if node.args else None
        one_level = isinstance(pattern, ast.Constant) and "/" not in pattern.value and "**" not in pattern.value
        return "glob" if module == "glob" or not one_level else None
    return None


def bypasses(src: Path) -> dict[tuple[str, str], list[int]]:
    """{(file, kind): lines} of every call that can follow a link or delete a tree, outside the owner."""
    found: dict[tuple[str, str], list[int]] = {}
    for path in sorted((src / "crosstune").rglob("*.py")):
        rel = path.relative_to(src).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if rel != OWNER else ():
            if isinstance(node, ast.Call) and (kind := _kind(node)):
                found.setdefault((rel, kind), []).append(node.lineno)
    return found


def test_no_code_walks_copies_or_deletes_around_the_owner():
    found = bypasses(REPO / "src")
    unexplained = [f"{rel}:{lines}: {kind}" for (rel, kind), lines in found.items() if (rel, kind) not in ALLOWED]
    assert unexplained == [], "use crosstune.confinement (remove, walk_files, listing, inside), or say in ALLOWED why"
    assert sorted(set(ALLOWED) - set(found)) == []  # an entry whose use is gone goes too


def test_the_scan_finds_each_kind_of_bypass(tmp_path):
    (tmp_path / "crosstune").mkdir()
    (tmp_path / "crosstune" / "m.py").write_text(
        "import glob, os, shutil\nfrom pathlib import Path\n"
        "shutil.rmtree(p)\nPath(p).rglob('*')\nshutil.copytree(a, b)\nos.walk(p, followlinks=True)\n"
        "glob.glob('x')\nPath(p).glob('*/m')\nPath(p).glob(pattern)\n"
        "os.walk(p)\nos.walk(p, followlinks=False)\nPath(p).glob('*.v')\n"  # these three follow no folder link
    )
    assert bypasses(tmp_path) == {
        ("crosstune/m.py", "rmtree"): [3],
        ("crosstune/m.py", "rglob"): [4],
        ("crosstune/m.py", "copytree"): [5],
        ("crosstune/m.py", "walk"): [6],
        ("crosstune/m.py", "glob"): [7, 8, 9],
    }
