"""The `crosstune` command line. Each pipeline area registers its own sub-app; heavy imports stay lazy."""

from __future__ import annotations

import errno
import functools
import sys

import typer
from typer.core import TyperGroup

from crosstune.errors import EXIT_INTERRUPTED, CrosstuneError, Interrupted


def _say(message: str) -> None:
    typer.echo(f"error: {message}", err=True)


class _ExpectedFailures(TyperGroup):
    """The one top-level handler: expected failures become one message and an exit status, never a traceback.

    Anything else is a bug and keeps its traceback."""

    def invoke(self, ctx: typer.Context):
        try:
            return super().invoke(ctx)
        except Interrupted as e:  # not an error: it says what was kept and how to go on
            typer.echo(str(e), err=True)
            raise typer.Exit(e.exit_code) from None
        except CrosstuneError as e:
            _say(str(e))
            raise typer.Exit(e.exit_code) from None
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
            where = e.filename or "the output folder"
            _say(
                f"disk full writing {where}: free space there (or point the output elsewhere) and rerun; "
                "finished outputs and checkpoints are kept and nothing half-written is used (train: add --resume)"
            )
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            # Commands that save progress raise crosstune.errors.Interrupted with what was kept instead.
            typer.echo("\ninterrupted (Ctrl-C)", err=True)
            raise typer.Exit(EXIT_INTERRUPTED) from None


app = typer.Typer(
    name="crosstune",
    cls=_ExpectedFailures,
    help="One LoRA fine-tuning recipe for Gemma, two stacks (torch: TRL+PEFT+FSDP2, jax: Tunix+Qwix+Optax), "
    "measured side by side.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@functools.cache  # once per process: typer would list every command again on each call (tests call it per module)
def _register() -> None:
    from crosstune.commands import register_all

    register_all(app)


def main() -> None:
    _register()
    app()


if __name__ == "__main__":
    sys.exit(main())
