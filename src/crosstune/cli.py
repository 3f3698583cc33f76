"""The `crosstune` command line. Each pipeline area registers its own sub-app; heavy imports stay lazy."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="crosstune",
    help="One LoRA fine-tuning recipe for Gemma, two stacks (torch: TRL+PEFT+FSDP2, jax: Tunix+Qwix+Optax), "
    "measured side by side.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register() -> None:
    from crosstune.commands import register_all

    register_all(app)


def main() -> None:
    _register()
    app()
