"""`crosstune pretrain`: the demo's small Gemma 4 base (crosstune.pretrain.base_model), cached by content hash."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from crosstune.untrusted_files import read_json


def register(app: typer.Typer) -> None:
    app.command("pretrain")(pretrain)


def pretrain(
    steps: int = typer.Option(None, "--steps", help="Training steps (default: 1200, the base the demo uses)."),
    cache: Path = typer.Option(None, "--cache", help="Cache folder (default: $CROSSTUNE_CACHE or ~/.cache/crosstune)."),
    rebuild: bool = typer.Option(
        False, "--rebuild", help="Train it even though crosstune ships this base (then compare: the bytes match)."
    ),
) -> None:
    """Pretrain the demo's small Gemma 4 base in full on CPU, on the Verilog task kinds the demo does not hold out.

    The result is cached in a content-addressed folder (a hash of the config, the model shape, the training text,
    the library versions and the thread count): a second run with the same inputs returns at once. The default base
    ships with crosstune under that same name, so it is returned at once unless --rebuild. `crosstune demo` starts
    from it.
    """
    import dataclasses

    from crosstune.pretrain.base_model import DONE, SHIPPED_BASES, PretrainConfig, pretrained_base

    config = PretrainConfig() if steps is None else dataclasses.replace(PretrainConfig(), steps=steps)
    out = Console()
    root = cache.resolve() / "pretrained" if cache else None
    base = pretrained_base(config, root, log=lambda line: out.print(line, highlight=False), shipped=not rebuild)
    info = read_json(base / DONE)
    where = " (shipped with crosstune)" if base.parent == SHIPPED_BASES else ""
    out.print(
        f"[bold]base[/bold] {base}{where}\n{config.steps} steps on {len(config.task_kinds)} task kinds "
        f"(not seen: {', '.join(info['families_not_seen'])}); loss {info['losses'][0]:.3f} → {info['losses'][-1]:.3f}; "
        f"{info['seconds']:.0f} s when built",
        highlight=False,
    )
