"""The repository tracks no link but `recipes` (-> src/crosstune/recipes). A worktree's local link to an environment
(.venv-tpu-compile -> an absolute path) once slipped into a commit: a fresh clone then held a link to itself and
`make tpu-compile-env` failed with ELOOP before any test ran (CI, stop 44)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.helpers.paths import REPO

ALLOWED = {"recipes": "src/crosstune/recipes"}


def tracked_links() -> dict[str, str]:
    """path -> target of every symlink git tracks (mode 120000)."""
    out = subprocess.run(["git", "ls-files", "-s"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    paths = [line.split("\t", 1)[1] for line in out.splitlines() if line.startswith("120000 ")]
    return {path: os.readlink(REPO / path) for path in paths if (REPO / path).is_symlink()}


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="not a git checkout")
def test_only_the_recipes_link_is_tracked_and_it_stays_inside():
    links = tracked_links()
    assert links == ALLOWED, f"tracked links other than {ALLOWED}: {links} (add local links to .gitignore)"
    for path, target in links.items():
        assert not os.path.isabs(target) and (REPO / path).resolve().is_relative_to(REPO.resolve())


def test_the_environment_folders_are_ignored_also_as_links():
    """`.venv-x/` (trailing slash) ignores a folder but not a link of that name: the entries carry no slash."""
    ignored = (REPO / ".gitignore").read_text().splitlines()
    for name in (".venv", ".venv-serve", ".venv-tpu-compile", ".venv-launch"):
        assert f"/{name}" in ignored, f".gitignore: /{name} (no trailing slash: a link of that name is ignored too)"
