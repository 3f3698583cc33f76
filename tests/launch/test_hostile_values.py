"""`crosstune launch` under hostile values: what the engine's grammar takes is written only inside a quoted value
(every spec run with its engine's commands stubbed: the study receives the value verbatim and nothing else runs);
what it refuses is one line naming the option, exit 1, nothing written."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from crosstune.launch.job_spec import LaunchError
from tests.helpers.launch_specs import H100, K8S_ROUND_TRIP, SKY_LOAD, SRUN_STUB, V5P, fails, in_launch_env, launch
from tests.helpers.paths import REPO

# Every way out of a shell word or a YAML scalar: quotes, command substitution, a newline into a new command (or a
# new #SBATCH directive), a YAML key, a comment. A command that escapes creates a file named PWNED.
HOSTILE = "x'\"; touch PWNED; $(touch PWNED) `touch PWNED` \\\n#SBATCH --wrap=touch\ntouch PWNED\nkey: v # c"
# `--set` values are YAML: the hostile text as a single-quoted YAML scalar, its newlines kept in the shell word
AS_YAML = "'" + HOSTILE.replace("'", "''") + "'"
# Records each argv the study gets, one JSON list a line; creates the --out folder as the study would.
STUDY_STUB = """#!/usr/bin/env python3
import json, os, sys
with open(os.environ["STUB_LOG"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
if os.environ.get("STUB_MKDIR"):
    os.makedirs(sys.argv[sys.argv.index("--out") + 1], exist_ok=True)
"""


@pytest.fixture
def hostile_checkout(tmp_path, monkeypatch):
    """A checkout whose recipes sit in a folder with a hostile name; the current directory (the job's workdir)."""
    checkout = tmp_path / "checkout"
    recipes = checkout / ("recipes " + HOSTILE.replace("/", "_"))
    recipes.mkdir(parents=True)
    for recipe in (H100, V5P):
        shutil.copy(REPO / recipe, recipes / Path(recipe).name)
    (checkout / ".venv" / "bin").mkdir(parents=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for path in (checkout / ".venv" / "bin" / "crosstune", bin_dir / "crosstune"):
        path.write_text(STUDY_STUB)
        path.chmod(0o755)
    monkeypatch.chdir(checkout)
    return checkout, recipes.relative_to(checkout), bin_dir


def stubbed_run(script: str, cwd: Path, log: Path, env: dict[str, str]) -> list[list[str]]:
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=cwd,
        env={**os.environ, "STUB_LOG": str(log), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in log.read_text().splitlines()]


def assert_verbatim(argvs: list[list[str]], recipe: Path) -> None:
    assert argvs
    for argv in argvs:
        assert argv[:2] == ["study", str(recipe)]
        assert f"model.path={AS_YAML}" in argv and f"description={AS_YAML}" in argv


def test_hostile_values_the_grammar_takes_land_only_inside_quoted_values(hostile_checkout, tmp_path):
    checkout, recipes, bin_dir = hostile_checkout
    sets = ["--set", f"model.path={AS_YAML}", "--set", f"description={AS_YAML}"]
    h100, v5p = recipes / Path(H100).name, recipes / Path(V5P).name

    named = HOSTILE.replace("/", "_")  # --out too: a spec's own file name is never written into it
    script = tmp_path / f"study {named}.sbatch"
    # Slurm's bucket may be any folder name
    launch(
        str(h100),
        "--on",
        "slurm",
        "--target",
        "8xh100",
        "--nodes",
        "2",
        "--time",
        "2-00:00:00",
        *sets,
        "--bucket",
        HOSTILE,
        "--out",
        str(script),
    )
    text = script.read_text()
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    # sbatch reads directives up to the first line that is not a comment (sbatch(1)): the hostile one is after it
    head = list(itertools.takewhile(lambda line: line.startswith("#"), text.splitlines()))
    assert [line for line in head if line.startswith("#SBATCH")][-1] == "#SBATCH --time=2-00:00:00"
    assert "#SBATCH --wrap=touch" in text and "#SBATCH --wrap=touch" not in head
    (bin_dir / "srun").write_text(SRUN_STUB)
    (bin_dir / "scontrol").write_text("#!/bin/bash\nprintf 'gpu-a\\ngpu-b\\n'\n")
    for stub in ("srun", "scontrol"):
        (bin_dir / stub).chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "CROSSTUNE_HOME": str(checkout), "SLURM_JOB_NODELIST": "g"}
    argvs = stubbed_run(text, checkout, tmp_path / "slurm.log", env)
    assert_verbatim(argvs, h100)
    assert all(argv[argv.index("--bucket") + 1] == HOSTILE for argv in argvs)

    sky = tmp_path / f"sky {named}.yaml"
    launch(str(h100), "--on", "skypilot", "--bucket", "gs://my-bundles", *sets, "--out", str(sky))
    task = yaml.safe_load(sky.read_text())
    bucket = tmp_path / "bucket"
    run = task["run"].replace("/crosstune-bucket", str(bucket))
    env = {"HOME": str(tmp_path / "home"), "STUB_MKDIR": "1"}
    argvs = stubbed_run(run, checkout, tmp_path / "sky.log", env)
    assert_verbatim(argvs, h100)
    assert all(argv[-2:] == ["--bucket", str(bucket)] for argv in argvs)  # the study keeps the bucket's copy itself

    gke = tmp_path / f"jobset {named}.yaml"
    launch(
        str(v5p),
        "--on",
        "gke",
        "--image",
        "us-docker.pkg.dev/p/r/crosstune-tpu:0.1.0",
        "--pvc",
        "bundles",
        *sets,
        "--out",
        str(gke),
    )
    doc = yaml.safe_load(gke.read_text())
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "TPU_WORKER_ID": "0"}
    for i, rj in enumerate(doc["spec"]["replicatedJobs"]):
        (container,) = rj["template"]["spec"]["template"]["spec"]["containers"]
        assert container["command"][:2] == ["bash", "-c"]
        argvs = stubbed_run(container["command"][2], checkout, tmp_path / f"gke{i}.log", env)
        assert_verbatim(argvs, v5p)
        assert all(argv[argv.index("--out") + 1] == "/bundles/gemma4-31b-tpu-v5p-8-jax" for argv in argvs)
    assert not list(tmp_path.rglob("PWNED"))  # no command escaped, anywhere

    loaded = in_launch_env(SKY_LOAD, str(sky))  # the engines' own loaders take the specs
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    (verdict,) = [json.loads(line) for line in loaded.stdout.splitlines() if line.startswith("{")]
    assert "error" not in verdict and verdict["run"] == task["run"]
    checked = in_launch_env(K8S_ROUND_TRIP, stdin=json.dumps(doc))
    assert checked.returncode == 0, checked.stderr[-3000:]
    assert json.loads(checked.stdout.splitlines()[-1]) == []


REFUSED = [
    ("slurm", ["--time", "1:00:00\ntouch PWNED"], "--time '1:00:00\\ntouch PWNED': not a Slurm time limit"),
    ("slurm", ["--time", "forever"], "--time 'forever': not a Slurm time limit"),
    ("slurm", ["--nodes", "0"], "--nodes: 0 is not a whole number >= 1"),
    ("skypilot", ["--bucket", "b\ntouch PWNED"], "--bucket 'b\\ntouch PWNED': not a GCS bucket name"),
    ("skypilot", ["--bucket", "gs://My;Bucket"], "--bucket 'gs://My;Bucket': not a GCS bucket name"),
    ("gke", ["--bucket", "google-bundles", "--image", "i"], "--bucket 'google-bundles': not a GCS bucket name"),
    ("gke", ["--pvc", "a b", "--image", "i"], "--pvc 'a b': not a Kubernetes object name"),
    ("gke", ["--pvc", "c", "--image", "i\n- x"], "--image 'i\\n- x': not a container image reference"),
    ("slurm", ["--target", "8xh100\nx"], "--target '8xh100\\nx': unknown hardware"),
    ("slurm", ["--backend", "torch\n"], "--backend 'torch\\n': one of torch, jax"),
    ("slurm\n", [], "--on 'slurm\\n': one of skypilot, gke, slurm"),
]


@pytest.mark.parametrize(
    ("on", "args", "message"), REFUSED, ids=[" ".join(a[:1]) + f"-{i}" for i, (_, a, _) in enumerate(REFUSED)]
)
def test_hostile_values_the_grammar_refuses_are_one_line_naming_the_option(tmp_path, on, args, message):
    out = tmp_path / "spec"
    recipe = V5P if on == "gke" else H100
    said = fails(recipe, "--on", on, *args, "--out", str(out))
    assert said.startswith(f"error: {message}") and "\n" not in said
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_a_recipe_name_with_a_final_newline_is_refused(tmp_path, monkeypatch):
    """SAFE_NAME's old `$` matched before a final newline: every spec came out broken with rc 0."""
    monkeypatch.chdir(tmp_path)
    text = (REPO / H100).read_text().replace("name: gemma4-31b-2xh100\n", 'name: "gemma4\\n"\n', 1)
    Path("r.yaml").write_text(text)
    said = fails("r.yaml", "--on", "slurm", "--out", "s.sbatch")
    assert "r.yaml:3: error at name: 'gemma4\\n' can't name a folder" in said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.yaml"]


def test_out_inside_a_file_or_a_folder_is_refused_before_the_recipe_is_read(tmp_path):
    (tmp_path / "afile").write_text("mine\n")
    said = fails("missing.yaml", "--on", "slurm", "--out", str(tmp_path / "afile" / "s.sbatch"))
    assert (
        said == f"error: --out {tmp_path}/afile/s.sbatch is inside {tmp_path}/afile, which is a file: give a "
        "path in a folder"
    )
    assert "is a folder: give a file name" in fails(H100, "--on", "slurm", "--out", str(tmp_path))
    os.mkfifo(tmp_path / "pipe")
    assert "is not a regular file" in fails(H100, "--on", "slurm", "--out", str(tmp_path / "pipe"))
    assert (tmp_path / "afile").read_text() == "mine\n"


def test_the_grammar_takes_what_the_engines_take():
    """The control for the refusals: the values each engine documents pass unchanged."""
    from crosstune.launch import engine_grammar as g

    for value in ("30", "30:00", "12:00:00", "2-00", "2-12:30", "2-12:30:00", "UNLIMITED", "infinite"):
        assert g.slurm_time(value) == value
    for value in ("bundles", "nfs-claim.v2", "a"):
        assert g.dns_subdomain(value, "--pvc") == value
    assert [g.gcs_bucket(b) for b in ("gs://my-bundles", "a.b_c-d", "abc")] == ["my-bundles", "a.b_c-d", "abc"]
    for value in (
        "crosstune",
        "us-docker.pkg.dev/p/r/crosstune-tpu:0.1.0",
        "localhost:5000/a/b__c:v1",
        f"ghcr.io/o/img@sha256:{'0' * 64}",
        f"img:1.0@sha256:{'a' * 64}",
    ):
        assert g.image_reference(value) == value
    for refused, value in (
        (g.slurm_time, "12:00:00 "),
        (g.gcs_bucket, "gs://goog-x"),
        (g.gcs_bucket, "1.2.3.4"),
        (g.image_reference, "reg/Path"),
        (g.image_reference, "img:"),
    ):
        with pytest.raises(LaunchError):
            refused(value)
