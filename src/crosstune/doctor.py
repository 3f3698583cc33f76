"""`crosstune doctor`: what this machine has for each stage of the pipeline."""

from __future__ import annotations

import importlib
import importlib.metadata as md
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

# The serving stack (vLLM) lives in its own environment: its pins conflict with the training stack's.
SERVE_VENV = Path(os.environ.get("CROSSTUNE_SERVE_VENV", ".venv-serve"))


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)


def _version(dist: str) -> str:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "not installed"


def _torch_row() -> tuple[str, str]:
    try:
        torch = importlib.import_module("torch")
    except ImportError as e:
        return "missing", str(e)
    if torch.cuda.is_available():
        names = {torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())}
        devices = f"{torch.cuda.device_count()} CUDA ({', '.join(names)})"
    else:
        devices = f"CPU only, {torch.get_num_threads()} threads"
    return torch.__version__, devices


def _jax_row() -> tuple[str, str]:
    try:
        jax = importlib.import_module("jax")
    except ImportError as e:
        return "missing", str(e)
    devs = jax.devices()
    kinds = sorted({d.device_kind for d in devs})
    return jax.__version__, f"{len(devs)} × {', '.join(kinds)} ({jax.default_backend()})"


def _iverilog_row() -> tuple[str, str]:
    exe = shutil.which("iverilog")
    if not exe:
        return "missing", "install: apt-get install iverilog (or `make setup`)"
    out = subprocess.run([exe, "-V"], capture_output=True, text=True, timeout=10).stdout.splitlines()
    return (out[0].replace("Icarus Verilog version ", "") if out else "unknown"), exe


def _vllm_row() -> tuple[str, str]:
    py = SERVE_VENV / "bin" / "python"
    if not py.exists():
        return "not set up", f"no serving environment at {SERVE_VENV} (vLLM runs in its own venv)"
    probe = "import importlib.metadata as m; print(m.version('vllm'))"
    r = subprocess.run([str(py), "-c", probe], capture_output=True, text=True, timeout=120)
    return (r.stdout.strip(), str(SERVE_VENV)) if r.returncode == 0 else ("broken", r.stderr.strip()[-200:])


def doctor() -> None:
    """Report Python, torch/jax versions and devices, tunix/qwix/trl/peft, iverilog and vLLM availability."""
    table = Table(title="crosstune doctor", show_lines=False)
    table.add_column("component")
    table.add_column("version")
    table.add_column("details", overflow="fold")
    table.add_row("python", platform.python_version(), sys.executable)
    table.add_row("torch", *_torch_row())
    table.add_row("jax", *_jax_row())
    for dist in (
        "transformers",
        "peft",
        "trl",
        "accelerate",
        "google-tunix",
        "qwix",
        "flax",
        "optax",
        "orbax-checkpoint",
        "grain",
        "safetensors",
    ):
        table.add_row(dist, _version(dist), "")
    table.add_row("iverilog", *_iverilog_row())
    table.add_row("vllm (serving env)", *_vllm_row())
    xla = os.environ.get("XLA_FLAGS", "")
    table.add_row(
        "XLA_FLAGS", "", xla or "unset (JAX sees 1 CPU device; set --xla_force_host_platform_device_count=8 for meshes)"
    )
    table.add_row(
        "threads",
        "",
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')} "
        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}, {os.cpu_count()} cores",
    )
    Console().print(table)
