"""`crosstune data ...` commands."""

from __future__ import annotations

import typer

data_app = typer.Typer(help="Synthesize, prepare and inspect training data.", no_args_is_help=True)
