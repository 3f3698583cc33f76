"""`crosstune demo --out`: the demo resumes only its own folder (demo.json, read through crosstune.ownership.claim),
refusing any other before any work; the shipped recipe works from a wheel."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from typer.testing import CliRunner

from crosstune.cli import _register, app
from tests.helpers.paths import REPO

_register()
runner = CliRunner()


def test_out_dot_in_a_folder_of_user_files_is_refused_and_deletes_nothing(tmp_path, monkeypatch):
    (tmp_path / "thesis.tex").write_text("years of work")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "main.py").write_text("print('mine')")
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["demo", "--out", "."], terminal_width=400)
    assert result.exit_code == 1, result.output
    assert f"--out {tmp_path} is not empty and holds no demo folder (no demo.json): src, thesis.tex;" in " ".join(
        result.output.split()
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src", "thesis.tex"]


def test_out_naming_a_file_is_refused(tmp_path):
    afile = tmp_path / "notes.txt"
    afile.write_text("keep")
    result = runner.invoke(app, ["demo", "--out", str(afile)], terminal_width=400)
    assert result.exit_code == 1 and f"--out {afile} is a file" in result.output
    assert afile.read_text() == "keep"


def test_a_demo_json_the_demo_did_not_write_is_refused(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "demo.json").write_text('{"made_by": "someone else"}')
    result = runner.invoke(app, ["demo", "--out", str(out)], terminal_width=400)
    assert result.exit_code == 1
    assert f"{out / 'demo.json'}: not the manifest of a `crosstune demo` folder" in " ".join(result.output.split())
    assert [p.name for p in out.iterdir()] == ["demo.json"]


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
        [sys.executable, "-c", probe],
        env={**env, "PYTHONPATH": str(target)},
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    module, recipe, name = result.stdout.splitlines()
    assert module.startswith(str(target)) and recipe == str(target / "crosstune" / "recipes" / "demo-cpu.yaml")
    assert name == "demo-cpu"


def test_demo_json_is_read_typed_and_a_wrong_typed_key_is_refused_naming_it(tmp_path):
    from crosstune.demo.figures import DemoRun, read_demo_manifest, start_manifest, write_manifest

    out = tmp_path / "out"
    out.mkdir()
    started = start_manifest(out, None, {"seed": 0})
    assert "runs" not in json.loads((out / "demo.json").read_text())  # no run has finished
    run = DemoRun(finished="now", seconds=1.5, corpus_reused=False, cpu={"model": "m"})
    write_manifest(out, started.model_copy(update={"bundles": {"torch": "torch"}, "runs": [run]}))
    again = start_manifest(out, read_demo_manifest(out), {"seed": 1})  # a second run keeps the first's record
    assert (again.settings, again.bundles, again.runs) == ({"seed": 1}, {}, [run])
    assert read_demo_manifest(out) == again
    raw = json.loads((out / "demo.json").read_text())
    (out / "demo.json").write_text(json.dumps({**raw, "runs": [{**raw["runs"][0], "seconds": "1.5"}]}))
    result = runner.invoke(app, ["demo", "--out", str(out)], terminal_width=400)
    assert result.exit_code == 1
    assert f"{out / 'demo.json'}: runs.0.seconds: input should be a valid number (got '1.5')" in " ".join(
        result.output.split()
    )
