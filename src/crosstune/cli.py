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
            bound_numeric_options(self)
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


def numeric_options(group, path: tuple[str, ...] = ()):
    """(command path, parameter) of every int or float parameter of every command under `group`."""
    for name, command in getattr(group, "commands", {}).items():
        if hasattr(command, "commands"):
            yield from numeric_options(command, (*path, name))
            continue
        for param in command.params:
            if param.type_descriptor.annotation in (int, float):
                yield " ".join((*path, name)), param


def bound_numeric_options(group) -> None:
    """Check each numeric option against its bound in crosstune.bounds.OPTIONS as it is parsed, before the command
    runs: one line naming the option, exit 1. An option with no bound is a bug (a test lists every one)."""
    from crosstune.bounds import option_bound

    for command, param in numeric_options(group):
        flag = param.opts[0] if param.opts else param.name
        bound, then = option_bound(command, flag), param.callback
        if bound is None or getattr(then, "bounded", False):
            continue

        def checked(ctx, p, value, bound=bound, flag=flag, then=then, integer=param.type_descriptor.annotation is int):
            bound.check(flag, value, integer=integer)
            return value if then is None else then(ctx, p, value)

        checked.bounded = True  # type: ignore[attr-defined]
        param.callback = checked


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
