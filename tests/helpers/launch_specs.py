"""What the launch tests share: `crosstune launch` in-process from the checkout, and the engines' own loaders
(SkyPilot's task loader, Kubernetes' models) run in the launch environment (.venv-launch)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crosstune.cli import _register, app
from crosstune.launch.cli import launch_venv

_register()
runner = CliRunner()
V5P = "recipes/gemma4-31b-tpu-v5p-8.yaml"
H100 = "recipes/gemma4-31b-2xh100.yaml"
RESOLVING_PIP = "26.3"  # scripts/install_launch_env.sh's
NEEDS_LAUNCH_ENV = "needs the launch environment (SkyPilot + its Kubernetes client): run `make launch-env`"


def launch(*args: str) -> str:
    result = runner.invoke(app, ["launch", *args], terminal_width=400)
    assert result.exit_code == 0, result.output
    return result.output


def fails(*args: str) -> str:
    result = runner.invoke(app, ["launch", *args], terminal_width=400)
    assert result.exit_code == 1, result.output
    return " ".join(result.output.split())


def launch_python() -> Path:
    py = launch_venv() / "bin" / "python"
    if not py.is_file():
        pytest.skip(NEEDS_LAUNCH_ENV)
    return py


def resolving_pip() -> tuple[list[str], dict[str, str]]:
    """pip of the launch environment (`make launch-env` pins one whose fast-deps resolves from metadata alone) and an
    environment in which no pip configuration of this machine applies (its local wheel folders and caps)."""
    py = launch_venv() / "bin" / "python"
    if not any(launch_venv().glob(f".installed-skypilot-*-pip-{RESOLVING_PIP}")):
        pytest.fail(f"the launch environment has no pip {RESOLVING_PIP}: run `make launch-env`")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != "PYTHONPATH"}
    return [str(py), "-m", "pip"], {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def in_launch_env(code: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    py = launch_python()
    return subprocess.run(
        [str(py), "-c", code, *args], input=stdin, capture_output=True, text=True, env=env, timeout=300
    )


SKY_LOAD = """
import json, sys
import sky
for path in sys.argv[1:]:
    try:
        task = sky.Task.from_yaml(path)
    except Exception as e:  # the loader's own verdict, whatever its class
        print(json.dumps({"path": path, "error": str(e)}))
        continue
    (res,) = task.resources
    print(json.dumps({"path": path, "name": task.name, "accelerators": res.accelerators, "args": res.accelerator_args,
                      "mounts": sorted(task.storage_mounts), "run": task.run}))
"""

K8S_ROUND_TRIP = """
import json, sys
from kubernetes.client import ApiClient

class Response:
    def __init__(self, obj):
        self.data = json.dumps(obj)

def dropped(a, b, path):
    if isinstance(a, dict):
        out = []
        for k, v in a.items():
            out += dropped(v, b.get(k) if isinstance(b, dict) else None, f"{path}.{k}")
        return out
    if isinstance(a, list):
        b = b if isinstance(b, list) and len(b) == len(a) else [None] * len(a)
        return [p for i, (x, y) in enumerate(zip(a, b)) for p in dropped(x, y, f"{path}[{i}]")]
    return [] if str(a) == str(b) else [f"{path}: {a!r} -> {b!r}"]

api, problems = ApiClient(), []
for i, rj in enumerate(json.load(sys.stdin)["spec"]["replicatedJobs"]):
    model = api.deserialize(Response(rj["template"]), "V1JobTemplateSpec")
    problems += dropped(rj["template"], api.sanitize_for_serialization(model), f"replicatedJobs[{i}].template")
print(json.dumps(problems))
"""

SRUN_STUB = """#!/bin/bash
nodes=1; while [[ $1 == -* ]]; do case $1 in --nodes=*) nodes=${1#--nodes=};; -w) shift;; esac; shift; done
for ((i = 0; i < nodes; i++)); do SLURM_NODEID=$i "$@"; done
"""
