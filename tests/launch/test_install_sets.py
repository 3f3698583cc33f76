"""The accelerator environments the launch specs install (crosstune.launch.job_spec: the SkyPilot setup, and
docker/Dockerfile.tpu for GKE), resolved with pip's resolver in a dry run against PyPI, the index the specs install
from: a conflict fails here, not on a rented VM.

Metadata only: this machine's PyPI serves no PEP 658 metadata, so a plain `pip install --dry-run` downloads every
wheel it considers (3.5 GB for the TPU set, measured); pip's fast-deps reads each wheel's METADATA through HTTP range
requests instead (~130 MB a set, mostly index pages). A pip that starts downloading a wheel is stopped and the test
fails. The four sets run at once (~1-2 min: network-bound)."""

from __future__ import annotations

import fnmatch
import json
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from crosstune.launch.job_spec import (
    JAX_LOCK,
    JAX_VERSION,
    SERVE_PYTHON,
    TORCH_STACK,
    accelerator_packages,
    jax_lock_text,
    lock_file,
    serving_package,
)
from crosstune.serve.engine import VLLM_VERSION
from tests.helpers.launch_specs import resolving_pip
from tests.helpers.paths import REPO

PYPI = "https://pypi.org/simple"  # uv's and pip's default index: what the specs install from
LOCK = REPO / "requirements.lock"
# Python 3.12 is resolved for a platform (pip then takes wheels only): Ubuntu 22.04's glibc 2.35, the TPU VM runtimes'
MANYLINUX_2_35 = [f"manylinux_2_{minor}_x86_64" for minor in range(35, 16, -1)] + ["manylinux2014_x86_64"]
WHEEL_DOWNLOAD = re.compile(r"Downloading (\S+\.whl) \(")


@dataclass(frozen=True)
class InstallSet:
    name: str
    requirements: list[str]
    python: str
    lock: Path | None  # the training venv's pins the set is installed over (None: a venv of its own)


SETS = [
    InstallSet("tpu", accelerator_packages("tpu", "jax"), "3.11", REPO / lock_file("tpu", "jax")),
    # the torch backend's GPU set is the lock alone (PyPI's torch is the CUDA build): inside this one
    InstallSet("gpu", accelerator_packages("gpu", "jax"), "3.11", REPO / lock_file("gpu", "jax")),
    InstallSet("serve-tpu", [serving_package("tpu")], SERVE_PYTHON["tpu"], None),
    InstallSet("serve-gpu", [serving_package("gpu")], SERVE_PYTHON["gpu"], None),
]
CONFLICT = InstallSet("control", ["jax[tpu]==0.10.1"], "3.11", LOCK)  # the lock pins jax 0.10.2


def pip_argv(pip: list[str], chosen: InstallSet, folder: Path) -> list[str]:
    argv = [
        *pip,
        "install",
        "--dry-run",
        "--ignore-installed",
        "--use-feature=fast-deps",
        "--index-url",
        PYPI,
        "--report",
        str(folder / "report.json"),
        "--target",
        str(folder / "target"),
    ]
    if chosen.python == "3.11":  # this interpreter's: Linux x86_64, CPython 3.11, as on the VMs
        argv += ["--prefer-binary"]
    else:
        argv += ["--python-version", chosen.python, "--only-binary", ":all:"]
        argv += [a for tag in MANYLINUX_2_35 for a in ("--platform", tag)]
    return argv + (["-r", str(chosen.lock)] if chosen.lock else []) + chosen.requirements


def resolve_all(sets: list[InstallSet], tmp_path: Path) -> dict[str, tuple[int, str, dict]]:
    """Run pip's dry run for every set at once; stop any that downloads a wheel. name -> (exit, output, report)."""
    pip, env = resolving_pip()
    running = {}
    for chosen in sets:
        folder = tmp_path / chosen.name
        folder.mkdir()
        log = (folder / "pip.log").open("w")
        # niced: pip waits on the network, and make test-launch runs the Slurm drill beside it
        argv = ["nice", "-n", "10", *pip_argv(pip, chosen, folder)]
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
        running[chosen.name] = (proc, folder, log)
    deadline = time.monotonic() + 780
    try:
        while any(proc.poll() is None for proc, _, _ in running.values()) and time.monotonic() < deadline:
            for name, (proc, folder, _) in running.items():
                if proc.poll() is None and (found := WHEEL_DOWNLOAD.search((folder / "pip.log").read_text())):
                    proc.kill()
                    pytest.fail(f"{name}: pip downloads the wheel {found.group(1)} (no metadata-only resolution)")
            time.sleep(0.5)
    finally:
        for proc, _, log in running.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            log.close()
    results = {}
    for name, (proc, folder, _) in running.items():
        report = folder / "report.json"
        results[name] = (
            proc.returncode,
            (folder / "pip.log").read_text(),
            json.loads(report.read_text()) if report.is_file() else {},
        )
    return results


def versions(report: dict) -> dict[str, dict]:
    return {_name(item["metadata"]["name"]): item["metadata"] for item in report["install"]}


def _name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked() -> dict[str, str]:
    pins = (line.split("==") for line in LOCK.read_text().splitlines() if "==" in line and not line.startswith("#"))
    return {_name(name): version for name, version in pins}


@pytest.mark.resolve
@pytest.mark.timeout(900)
def test_every_install_set_the_specs_write_resolves_against_the_lock_and_a_conflict_fails(tmp_path):
    results = resolve_all([*SETS, CONFLICT], tmp_path)
    for name, (code, output, _) in results.items():
        if name != "control":
            assert code == 0, f"{name}: {output[-3000:]}"
    code, output, _ = results["control"]
    assert code != 0 and "ResolutionImpossible" in output, output[-2000:]  # a conflict fails the set

    lock = locked()
    got = {name: versions(report) for name, (_, _, report) in results.items() if name != "control"}
    for name in ("tpu", "gpu"):  # installed over the lock: every locked version stays
        pinned = {k: v for k, v in lock.items() if name == "gpu" or k not in TORCH_STACK}
        assert {k: got[name][k]["version"] for k in pinned} == pinned, name
    assert not set(got["tpu"]) & set(TORCH_STACK)  # a TPU host installs no torch
    tpu_compile = (REPO / "requirements-tpu-compile.txt").read_text().split("==")[1].strip()
    assert fnmatch.fnmatch(got["tpu"]["libtpu"]["version"], tpu_compile)  # the libtpu `make tpu-compile-env` holds
    torch = got["gpu"]["torch"]
    assert any(dep.startswith("cuda-toolkit") for dep in torch["requires_dist"])  # PyPI's torch: the CUDA build
    assert got["gpu"]["jax-cuda13-plugin"]["version"] == JAX_VERSION
    assert not [k for k in got["gpu"] if k.endswith("-cu12")]  # one CUDA major for torch and jax
    assert got["serve-gpu"]["vllm"]["version"] == VLLM_VERSION
    assert got["serve-gpu"]["torch"]["version"] == lock["torch"]  # vLLM's torch is the training venv's
    assert got["serve-tpu"]["vllm-tpu"]["version"] == VLLM_VERSION


def test_the_jax_lock_is_the_lock_without_the_torch_stack():
    """requirements-jax.lock is what `make lock` writes from requirements.lock (jax_lock_text), not a second list."""
    assert (REPO / JAX_LOCK).read_text() == jax_lock_text(LOCK.read_text())
    assert "torch==" not in (REPO / JAX_LOCK).read_text() and "jax==" in (REPO / JAX_LOCK).read_text()


def test_the_tpu_image_installs_what_the_specs_install():
    """docker/Dockerfile.tpu (GKE's image) names the same packages, the same serving Python and no other index."""
    dockerfile = (REPO / "docker" / "Dockerfile.tpu").read_text()
    for requirement in [*accelerator_packages("tpu", "jax"), serving_package("tpu")]:
        assert f'"{requirement}"' in dockerfile
    assert f"--python {SERVE_PYTHON['tpu']} .venv-serve" in dockerfile
    assert f"-r {lock_file('tpu', 'jax')}" in dockerfile
    assert f".installed-vllm-tpu-{VLLM_VERSION}" in dockerfile
    commands = "\n".join(line for line in dockerfile.splitlines() if not line.startswith("#"))
    assert not re.search(r"(-f|--find-links|--index-url|--extra-index-url) ", commands)  # PyPI alone
