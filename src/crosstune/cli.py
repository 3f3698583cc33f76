"""The `crosstune` command line. Each pipeline area registers its own sub-app; heavy imports stay lazy."""

from __future__ import annotations

import errno
import functools
import inspect
import os
import sys
import time
import traceback

import typer
from typer.core import TyperGroup

from crosstune.errors import (
    EXIT_INTERRUPTED,
    CrosstuneError,
    Interrupted,
    disk_full_line,
    link_loop_line,
    one_line,
    os_error_line,
    shown,
    undecodable_line,
    write_fault_line,
    written_path,
)

DEBUG = "CROSSTUNE_DEBUG"  # =1: a bug shows its traceback here instead of in a crash file
_TYPERS_OWN = (typer.Exit, typer.Abort, typer.exceptions.TyperException)  # usage errors (exit 2), chosen exits


def _say(lines: list[str]) -> None:
    typer.echo(f"error: {shown(lines)}", err=True)


class _ExpectedFailures(TyperGroup):
    """The one top-level handler: whatever a command raises ends in one line on stderr and an exit status, never a
    traceback. A CrosstuneError is its message; an OSError (any kind), pathlib's link loop and an undecodable file
    are `PATH: what failed (why)`; anything else is a bug, said so in one line with where its traceback was written
    (CROSSTUNE_DEBUG=1: raised, traceback and all). Exit 2 stays typer's, for its own usage errors. It also unwraps
    every command's help (`unwrap_help`) as the command tree is built."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        unwrap_help(self)

    def invoke(self, ctx: typer.Context):
        try:
            bound_numeric_options(self)
            return super().invoke(ctx)
        except _TYPERS_OWN:  # typer's usage errors (exit 2), --help, and the exit status a command chose
            raise
        except Interrupted as e:  # not an error: it says what was kept and how to go on
            typer.echo(shown(e.lines), err=True)
            raise typer.Exit(e.exit_code) from None
        except CrosstuneError as e:
            _say(e.lines)
            raise typer.Exit(e.exit_code) from None
        except KeyboardInterrupt:
            # Commands that save progress raise crosstune.errors.Interrupted with what was kept instead.
            typer.echo("\ninterrupted (Ctrl-C)", err=True)
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except Exception as e:
            line = failure_line(e)
            if line is None and os.environ.get(DEBUG) == "1":
                raise
            _say([line or bug_line(e)])
            raise typer.Exit(1) from None


def unwrap_help(group) -> None:
    """Every help text under `group` as rich should wrap it: rich keeps a docstring's hard line breaks inside a
    paragraph (typer joins them in the first paragraph only), so a paragraph's lines are joined here, once for every
    command. Paragraphs (blank lines) and list items (lines opening with "- ") stay apart; a paragraph marked with
    click's \\b, or whose every line is indented (an example), is kept as written, and what follows click's \\f
    (a note for the code's reader) is left as it is for click to drop."""
    if getattr(group, "help", None):
        group.help = unwrapped(group.help)
    for command in getattr(group, "commands", {}).values():
        unwrap_help(command)


def unwrapped(text: str) -> str:
    shown, cut, hidden = inspect.cleandoc(text).partition("\f")  # after click's \f: for the code's reader only
    paragraphs = []
    for paragraph in shown.rstrip().split("\n\n"):
        lines = paragraph.split("\n")
        if paragraph.startswith("\b") or all(line[:1].isspace() for line in lines):
            paragraphs.append(paragraph)
            continue
        joined: list[str] = []
        for line in lines:
            if joined and not line.lstrip().startswith("- "):
                joined[-1] = f"{joined[-1].rstrip()} {line.strip()}"
            else:
                joined.append(line.rstrip())
        paragraphs.append("\n".join(joined))
    return "\n\n".join(paragraphs) + cut + hidden


def failure_line(e: Exception) -> str | None:
    """The one line of a failure that is not a bug: the file system's (the disk full, a name too long, a parent that
    is a file, a link loop...) and an undecodable file; None for anything else."""
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
        return disk_full_line(e.filename if e.filename else written_path(e))
    if (line := write_fault_line(e)) is not None:  # torch's zip writer, safetensors: not OSErrors
        return line
    if isinstance(e, OSError):
        return os_error_line(e)
    if isinstance(e, RuntimeError) and not isinstance(e, RecursionError):
        return link_loop_line(e)
    if isinstance(e, UnicodeDecodeError):
        return undecodable_line(e)
    return None


def bug_line(e: Exception) -> str:
    """A bug in one line, its traceback written to a crash file (crosstune's cache, crashes/) named there."""
    what = one_line(f"{type(e).__name__}: {e}" if str(e) else type(e).__name__)
    what = what if len(what) <= 300 else what[:300] + "…"
    try:
        crash = write_crash(e)
    except OSError as not_written:
        where = f"its traceback could not be written ({one_line(str(not_written))}); rerun with {DEBUG}=1 to see it"
    else:
        where = f"its traceback is in {crash}: please report it with that file ({DEBUG}=1 shows it here)"
    return f"a bug in crosstune: {what}; {where}"


def write_crash(e: Exception):
    """The traceback of `e` with the command line and versions, in crosstune's cache under crashes/; its path."""
    from crosstune import __version__
    from crosstune.fsutil import cache_home

    folder = cache_home() / "crashes"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
    head = f"crosstune {__version__}, Python {sys.version.split()[0]}\ncommand: {' '.join(sys.argv)}\n\n"
    # an argument of undecodable bytes is a lone surrogate in sys.argv: written escaped, never a second crash
    path.write_text(head + "".join(traceback.format_exception(e)), encoding="utf-8", errors="backslashreplace")
    return path


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
