"""`crosstune model ...` commands."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from crosstune.families import get_family
from crosstune.fsutil import staged_dir
from crosstune.models.tiny import build_tiny_model

model_app = typer.Typer(
    help="Build model checkpoints locally (tiny test models, the demo's pretrained base).", no_args_is_help=True
)


@model_app.command("tiny")
def tiny(
    family: str = typer.Option(..., "--family", help="Model family: gemma3 or gemma4."),
    out: Path = typer.Option(..., "--out", help="Directory to write the checkpoint into (must be empty or new)."),
    seed: int = typer.Option(0, "--seed", help="Weight-init seed; the same seed gives byte-identical files."),
    corpus: Path | None = typer.Option(
        None,
        "--corpus",
        help="Corpus directory with train.jsonl to train the tokenizer on "
        "(default: a small synthetic Verilog corpus, fixed seed).",
    ),
    force: bool = typer.Option(False, "--force", help="Replace OUT if it is not empty (its contents are deleted)."),
) -> None:
    """Build a tiny random-weight Gemma checkpoint (HF layout, fp32) with a locally trained tokenizer.

    Shapes are the family's "tiny" spec: hidden 64, 6 layers (5 sliding : 1 global), vocab 1024.

    It loads offline with AutoModelForCausalLM and AutoTokenizer; meant for tests and CPU smoke runs.
    """

    console = Console()
    try:
        fam = get_family(family)
    except KeyError as e:
        raise typer.BadParameter(str(e.args[0]), param_hint="--family") from None
    if out.exists() and not out.is_dir():
        raise typer.BadParameter(f"{out} exists and is not a directory", param_hint="--out")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise typer.BadParameter(f"{out} is not empty; choose a new directory or pass --force", param_hint="--out")
        cwd = Path.cwd()
        if out.resolve() in (cwd, *cwd.parents):
            raise typer.BadParameter(f"{out} holds the working directory; --force won't delete it", param_hint="--out")
    if corpus is not None and not (corpus / "train.jsonl").is_file():
        raise typer.BadParameter(f"{corpus / 'train.jsonl'} not found", param_hint="--corpus")

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    # Build next to OUT and swap in at the end: a failed build leaves OUT as it was (--force was checked above).
    with staged_dir(out, may_replace=lambda _: None) as tmp:
        with console.status(f"building tiny {fam.name} (training tokenizer, initialising weights)"):
            build_tiny_model(fam.name, tmp, seed=seed, corpus_dir=corpus)

    spec = fam.spec("tiny")
    console.print(
        f"[bold]tiny {fam.name}[/bold] → {out}  params {spec.total_params:,}  vocab {spec.vocab_size}  seed {seed}"
    )
    console.print("layer types: " + " ".join(spec.layer_types))
    table = Table("layer type", "layers", "heads", "KV heads", "head_dim", "window", "v_proj")
    for kind_name in dict.fromkeys(spec.layer_types):
        a = spec.attention[kind_name]
        layers = ",".join(str(i) for i in spec.layers_of(kind_name))
        table.add_row(
            kind_name,
            layers,
            str(a.num_heads),
            str(a.num_kv_heads),
            str(a.head_dim),
            str(a.window or "-"),
            "no (k = v)" if a.k_eq_v else "yes",
        )
    console.print(table)
    files = Table("file", "bytes")
    for path in sorted(out.iterdir()):
        files.add_row(path.name, f"{path.stat().st_size:,}")
    console.print(files)
