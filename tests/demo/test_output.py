"""`crosstune demo --out`: only a folder an earlier demo made is emptied; the shipped recipe works from a wheel."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from typer.testing import CliRunner

import crosstune.demo.stages
from crosstune.cli import _register, app
from crosstune.demo.context import DEMO_MARKER, claim_output_folder
from tests.helpers.paths import REPO

_register()
runner = CliRunner()


@pytest.fixture
def no_stages(monkeypatch):
    """The demo with no stages: what is tested here is what happens to --out before any work."""
    monkeypatch.setattr(crosstune.demo.stages, "STAGES", [])


def test_out_dot_in_a_folder_of_user_files_is_refused_and_deletes_nothing(tmp_path, monkeypatch, no_stages):
    (tmp_path / "thesis.tex").write_text("years of work")
    (tmp_path / "src").mkdir()
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["demo", "--out", "."], terminal_width=400)
    assert result.exit_code == 1, result.output
    assert f"--out {tmp_path} is not empty and was not made by `crosstune demo` (no {DEMO_MARKER} in it)" in (
        result.output
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src", "thesis.tex"]


def test_out_naming_a_file_is_refused(tmp_path, no_stages):
    afile = tmp_path / "notes.txt"
    afile.write_text("keep")
    result = runner.invoke(app, ["demo", "--out", str(afile)], terminal_width=400)
    assert result.exit_code == 1 and f"--out {afile} is a file" in result.output
    assert afile.read_text() == "keep"


def test_a_new_or_empty_folder_gets_the_marker(tmp_path, monkeypatch, no_stages):
    monkeypatch.chdir(tmp_path)  # `--out .` in an empty folder is fine: nothing of the user's is there
    assert runner.invoke(app, ["demo", "--out", "."]).exit_code == 0
    assert [p.name for p in tmp_path.iterdir()] == [DEMO_MARKER]
    claim_output_folder(tmp_path / "new" / "demo")
    assert (tmp_path / "new" / "demo" / DEMO_MARKER).is_file()


def test_an_earlier_demo_folder_is_emptied_but_kept(tmp_path):
    out = tmp_path / "demo-out"
    claim_output_folder(out)
    (out / "runs" / "a").mkdir(parents=True)
    (out / "summary.json").write_text("{}")
    (out / "link").symlink_to(tmp_path)  # a link is removed, never followed
    claim_output_folder(out)
    assert [p.name for p in out.iterdir()] == [DEMO_MARKER]
    assert tmp_path.is_dir()


def test_top_level_recipes_is_the_package_folder():
    """One copy: recipes/ links to the package data the demo reads, so the two can't drift."""
    assert (REPO / "recipes").resolve() == (REPO / "src" / "crosstune" / "recipes").resolve()
    assert (REPO / "recipes" / "tiny-cpu.yaml").is_file()


def test_the_shipped_recipe_is_found_from_a_wheel(tmp_path):
    """Build a wheel, install it into a bare folder, and load the demo's recipe from there (no repo on the path)."""
    wheels, target, tree = tmp_path / "wheels", tmp_path / "site", tmp_path / "tree"
    # A copy of what a build reads, so setuptools' build/ folder never lands in (or leaks stale files from) the repo.
    shutil.copytree(REPO / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, tree / name)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels)]
    subprocess.run([*build, str(tree)], check=True, env=env, capture_output=True, timeout=240)
    (wheel,) = wheels.glob("crosstune-*.whl")
    install = [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)]
    subprocess.run(install, check=True, env=env, capture_output=True, timeout=240)
    probe = (
        "import crosstune, sys; from crosstune.recipes import shipped_recipe; from crosstune.recipe import load_recipe;"
        "p = shipped_recipe('demo-cpu.yaml'); r = load_recipe(p); print(crosstune.__file__); print(p); print(r.name)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], env={**env, "PYTHONPATH": str(target)}, capture_output=True, text=True,
        cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    module, recipe, name = result.stdout.splitlines()
    assert module.startswith(str(target)) and recipe == str(target / "crosstune" / "recipes" / "demo-cpu.yaml")
    assert name == "demo-cpu"
