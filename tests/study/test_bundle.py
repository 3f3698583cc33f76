"""A study writes only into its own bundle (study.bundle.open_bundle, through ownership.claim): bundle.json proves
it; any other non-empty folder is refused naming what is in it, and nothing there changes."""

from __future__ import annotations

import pytest

from crosstune.study.bundle import StudyError, open_bundle, write_manifest


def test_a_users_folder_is_refused_naming_what_it_holds(tmp_path):
    (tmp_path / "thesis.tex").write_text("keep")
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "plot.png").write_bytes(b"png")
    (tmp_path / "empty").mkdir()  # holds nothing to lose: not named
    with pytest.raises(StudyError) as refused:
        open_bundle(tmp_path, "r", "torch")
    assert str(refused.value) == (
        f"--out {tmp_path} is not empty and holds no study bundle (no bundle.json): figures, thesis.tex; crosstune "
        "study writes only into its own study bundle: give a new or empty folder"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "figures", "thesis.tex"]


def test_its_own_bundle_is_claimed_again_and_a_new_folder_gets_a_new_manifest(tmp_path):
    fresh = open_bundle(tmp_path / "b", "r", "torch")
    assert (fresh.recipe.name, fresh.backend, fresh.stages) == ("r", "torch", {})
    (tmp_path / "b").mkdir()
    write_manifest(tmp_path / "b", fresh)
    (tmp_path / "b" / "notes.md").write_text("mine, beside the study's folders")
    assert open_bundle(tmp_path / "b", "r", "torch") == fresh
    with pytest.raises(StudyError, match="holds a torch study: give --backend torch"):
        open_bundle(tmp_path / "b", "r", "jax")
