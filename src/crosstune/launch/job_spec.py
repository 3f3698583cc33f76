"""What every job spec shares: the recipe (its hash, the target it runs on, the backend), the project version, the
install steps README's "Real hardware" gives (the lock plus the accelerator's packages, all from PyPI), and the study
command."""

from __future__ import annotations

import importlib.metadata as md
import re
from dataclasses import dataclass, field
from pathlib import Path

from crosstune.emit import Raw, shell_line, yaml_text
from crosstune.errors import InputError
from crosstune.hardware import HardwareTarget, get_hardware
from crosstune.recipe import Recipe, load_recipe, recipe_hash
from crosstune.recipe.schema import BACKEND_NAMES

JAX_VERSION = "0.10.2"
# What an accelerator adds to the lock, every package from PyPI: the index the lock itself installs from, and the
# one CI reaches, so tests/launch/test_install_sets.py resolves exactly what the specs install. PyPI's torch 2.13.0
# (the lock's pin) is its CUDA 13.0 build on Linux x86_64, as vLLM's own GPU wheels pin it: JAX's CUDA plugin for the
# same CUDA major shares its libraries. jax[tpu] brings libtpu from PyPI (requirements-tpu-compile.txt's version).
ACCELERATOR_PACKAGES = {("tpu", "jax"): [f"jax[tpu]=={JAX_VERSION}"], ("gpu", "jax"): [f"jax[cuda13]=={JAX_VERSION}"]}
# The torch stack: what the jax backend never imports. A TPU host's training venv is the lock without it
# (requirements-jax.lock, `make lock` writes it: jax_lock_text), so no CUDA torch (~3.5 GB from PyPI) is installed
# where no GPU is.
TORCH_STACK = ("torch", "trl", "peft", "accelerate")
JAX_LOCK = "requirements-jax.lock"
# The serving venv's Python per platform: vllm-tpu's wheels are for CPython 3.12 only (on 3.11 the resolver would
# pick an older release); vLLM's GPU wheels are abi3.
SERVE_PYTHON = {"tpu": "3.12", "gpu": "3.11"}
STUDY_PORT = 29500  # torch rendezvous on node 0 (crosstune.train.torch.launch's default)


class LaunchError(InputError):
    """A job spec that can't be written or submitted as asked; the message says why and what to do."""


def project_version() -> str:
    try:
        return md.version("crosstune")
    except md.PackageNotFoundError:
        return "unknown"


@dataclass(frozen=True)
class Job:
    """One study to launch: the recipe (as given and as loaded), where it runs and with which backend."""

    recipe_file: Path  # as the job sees it: relative to the checkout the job runs in
    recipe: Recipe
    target: HardwareTarget
    backend: str
    bundle: str  # the bundle's folder name
    overrides: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return re.sub(r"[^a-z0-9-]", "-", f"crosstune-{self.recipe.name}-{self.backend}".lower())[:52].strip("-")

    @property
    def recipe_hash(self) -> str:
        return recipe_hash(self.recipe)

    @property
    def version(self) -> str:
        return project_version()

    def labels(self) -> dict[str, str]:
        return {"CROSSTUNE_RECIPE_HASH": self.recipe_hash, "CROSSTUNE_VERSION": self.version}

    def study(self, out: Raw, *extra: str, exe: str = ".venv/bin/crosstune") -> Raw:
        """The `crosstune study` command line for this job (crosstune.emit's shell line). `out` is the bundle's path
        where the job runs, shell crosstune wrote (it may hold "$VARIABLES"); every other word is a quoted value."""
        argv = [exe, "study", str(self.recipe_file), "--backend", self.backend]
        for item in self.overrides:
            argv += ["--set", item]
        return Raw(shell_line("{argv} --out {out}", argv=[*argv, *extra], out=out))


def make_job(recipe_file: Path, target: str | None, backend: str | None, overrides: list[str] | None) -> Job:
    """Load the recipe as the job will (with `--set hardware=TARGET` when a target is given) and settle the backend:
    the given one, else jax on TPUs and torch on GPUs (the seed's pairing), else the recipe's."""
    overrides = list(overrides or [])
    if target:
        try:
            get_hardware(target)
        except KeyError as e:
            raise LaunchError(f"--target {target!r}: {e.args[0]}") from None
        overrides.append(f"hardware={target}")
    recipe = load_recipe(recipe_file, overrides)
    hw = get_hardware(recipe.hardware)
    if backend is None:
        backend = {"tpu": "jax", "gpu": "torch"}.get(hw.chip.platform, recipe.backend.default)
    if backend not in BACKEND_NAMES:
        raise LaunchError(f"--backend {backend!r}: one of {', '.join(BACKEND_NAMES)}")
    if hw.chip.platform == "tpu" and backend == "torch":
        raise LaunchError(f"{hw.name} is a TPU: the torch backend runs on GPUs; give --backend jax")
    bundle = f"{recipe.name}-{backend}" + ("" if recipe.name.endswith(hw.name) else f"-{hw.name}")
    return Job(Path(recipe_file), recipe, hw, backend, bundle, overrides)


def to_yaml(data: dict, head: list[str]) -> str:
    """A YAML spec under its head comment (crosstune.emit): setup and run scripts as literal blocks, as people
    write them, and no line folded."""
    return yaml_text(data, head=head, blocks=True, width=1000)


def install_steps(job: Job) -> list[str]:
    """Shell lines that install crosstune from the lock plus the accelerator's wheels, into .venv of the checkout."""
    steps = [
        "python3 -m pip install -q --user uv",  # a Python 3.11 venv whatever the image's Python is
        "python3 -m uv venv --python 3.11 .venv",
        f"python3 -m uv pip install --python .venv/bin/python -r {lock_file(job.target.chip.platform, job.backend)}",
    ]
    if extra := accelerator_packages(job.target.chip.platform, job.backend):
        steps.append(shell_line("python3 -m uv pip install --python .venv/bin/python {extra}", extra=extra))
    steps += serving_steps(job)
    steps += [
        "python3 -m uv pip install --python .venv/bin/python --no-deps -e .",
        # the evaluator's simulator
        "(command -v iverilog >/dev/null || { sudo apt-get update -q && sudo apt-get install -y -q iverilog; })",
    ]
    return steps


def lock_file(platform: str, backend: str) -> str:
    """The pins the job's training venv installs: the jax backend on a TPU has no use for the torch stack."""
    return JAX_LOCK if (platform, backend) == ("tpu", "jax") else "requirements.lock"


def jax_lock_text(lock: str) -> str:
    """requirements-jax.lock's text from requirements.lock's: every pin but the torch stack's."""
    head = [
        f"# requirements.lock without {', '.join(TORCH_STACK)} (crosstune.launch.job_spec.TORCH_STACK): what a",
        "# TPU host's jax training venv installs. 'make lock' regenerates it; do not edit.",
    ]
    pins = [line for line in lock.splitlines() if line and not line.startswith("#")]
    return "\n".join(head + [p for p in pins if p.split("==")[0].lower() not in TORCH_STACK]) + "\n"


def accelerator_packages(platform: str, backend: str) -> list[str]:
    """The requirements installed on top of the lock for `backend` on `platform` (none: the lock is all)."""
    return list(ACCELERATOR_PACKAGES.get((platform, backend), []))


def serving_package(platform: str) -> str | None:
    """The vLLM build the serving venv gets on `platform` (None: no serving environment is installed)."""
    from crosstune.serve.engine import VLLM_VERSION

    return {"tpu": f"vllm-tpu=={VLLM_VERSION}", "gpu": f"vllm=={VLLM_VERSION}"}.get(platform)


def serving_steps(job: Job) -> list[str]:
    """vLLM for the accelerator in its own venv (.venv-serve: its pins conflict with the training stack's), stamped
    the way crosstune.serve.engine finds a serving environment."""
    from crosstune.serve.engine import VLLM_VERSION

    platform = job.target.chip.platform
    package = serving_package(platform)
    if package is None:
        return []
    return [
        f"python3 -m uv venv --python {SERVE_PYTHON[platform]} .venv-serve",
        f'python3 -m uv pip install --python .venv-serve/bin/python "{package}"',
        f"touch .venv-serve/.installed-vllm-{platform}-{VLLM_VERSION}",
    ]
