"""`crosstune doctor`: what this machine has for each stage of the pipeline."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)


def doctor() -> None:
    """Report Python, torch/jax versions and devices, tunix/qwix/trl/peft, iverilog and vLLM availability."""
