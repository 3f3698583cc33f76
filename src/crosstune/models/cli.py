"""`crosstune model ...` commands."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from crosstune.errors import InputError
from crosstune.families import get_family
from crosstune.models.build import (
    DTYPES,
    LAYOUTS,
    MODEL,
    build_checkpoint,
    memory_problem,
    resolve_writer,
    sized_spec,
)
from crosstune.models.build_rules import ModelOptionError, ShardCountError
from crosstune.models.tokenizer import corpus_texts
from crosstune.ownership import check_out, owned_output, write_manifest

model_app = typer.Typer(
    help="Build model checkpoints locally (tiny test models, real-size rehearsal models, the demo's pretrained base).",
    no_args_is_help=True,
)
CorpusOpt = typer.Option(
    None,
    "--corpus",
    help="Corpus directory with train.jsonl to train the tokenizer on (default: a small synthetic Verilog corpus, "
    "fixed seed).",
)
SeedOpt = typer.Option(0, "--seed", help="Weight-init seed; the same arguments give byte-identical files.")
OutOpt = typer.Option(..., "--out", help="Directory to write the checkpoint into (new, empty, or an earlier build).")
ForceOpt = typer.Option(
    False,
    "--force",
    help=f"Replace OUT when it is an earlier `crosstune model` build, unchanged ({MODEL.manifest} "
    "in it lists every file); a folder holding anything else is refused, naming the files.",
)
LayoutOpt = typer.Option(
    "causal",
    "--layout",
    help="causal: text-only *ForCausalLM; multimodal: *ForConditionalGeneration with a small "
    "vision tower (the official checkpoints' layout)",
)
ShardsOpt = typer.Option(1, "--shards", help="safetensors files (more than 1: with model.safetensors.index.json)")
WriterOpt = typer.Option(
    "auto",
    "--writer",
    help="torch: transformers' model classes and init; numpy: the same files of the causal layout without torch "
    "(a TPU host's jax-only install), drawn tensor by tensor, a shard at a time; auto: torch where it imports, "
    "numpy otherwise",
)
AssistantOpt = typer.Option(
    None,
    "--assistant",
    help="build the Gemma 4 MTP drafter (transformers' gemma4_assistant) of the model in this "
    "folder instead of a model: it reads that base's K/V; served with `serve start --draft`",
)
FitOpt = typer.Option(
    None,
    "--fit-steps",
    help="with --assistant: steps fitting the drafter to the base's greedy outputs (default: 150 "
    "for tiny, 0 for build: a random drafter proposes tokens the base rejects)",
)


def register(app: typer.Typer) -> None:
    """`crosstune model tiny|build`."""
    app.add_typer(model_app, name="model")


@model_app.command("tiny")
def tiny(
    family: str = typer.Option(..., "--family", help="Model family: gemma3 or gemma4."),
    out: Path = OutOpt,
    seed: int = SeedOpt,
    corpus: Path | None = CorpusOpt,
    layout: str = LayoutOpt,
    dtype: str = typer.Option("float32", "--dtype", help="float32 or bfloat16"),
    shards: int = ShardsOpt,
    writer: str = WriterOpt,
    force: bool = ForceOpt,
    assistant: Path | None = AssistantOpt,
    fit_steps: int | None = FitOpt,
) -> None:
    """Build a tiny random-weight Gemma checkpoint (HF layout, fp32 by default) with a locally trained tokenizer.

    Shapes are the family's "tiny" spec: hidden 64, 6 layers (5 sliding : 1 global), vocab 1024. `--layout
    multimodal --dtype bfloat16 --shards 2` gives the hub's layout at the same size.

    It loads offline with AutoModelForCausalLM and AutoTokenizer; meant for tests and CPU smoke runs.

    `--assistant BASE` builds BASE's MTP drafter instead, fitted to BASE's greedy outputs (~1-2 min):

        crosstune model tiny --family gemma4 --assistant BASE --out DRAFTER
    """
    if assistant is not None:
        return _assistant(family, assistant, out, seed, dtype, 150 if fit_steps is None else fit_steps, force)
    _build(family, out, "tiny", None, None, layout, dtype, shards, seed, corpus, force, writer)


@model_app.command("build")
def build(
    family: str = typer.Option(..., "--family", help="Model family: gemma3 or gemma4."),
    size: str = typer.Option(
        ...,
        "--size",
        help="A size of the family (gemma4: e2b, e4b, 26b-a4b, 12b, 31b, tiny, tiny-e, tiny-e4b, tiny-moe, "
        "tiny-unified, small; gemma3: 1b ... 27b, tiny).",
    ),
    out: Path = OutOpt,
    layers: int = typer.Option(
        None,
        "--layers",
        help="Decoder layers (default: the size's; fewer than 6 "
        "end with a global layer, so 2 = one sliding + one global)",
    ),
    vocab: int = typer.Option(None, "--vocab", help="Vocabulary size (default: the size's, 262,144 for 31b)"),
    layout: str = LayoutOpt,
    dtype: str = typer.Option("bfloat16", "--dtype", help="float32 or bfloat16 (the hub's checkpoints: bfloat16)"),
    shards: int = ShardsOpt,
    seed: int = SeedOpt,
    corpus: Path | None = CorpusOpt,
    writer: str = WriterOpt,
    force: bool = ForceOpt,
    assistant: Path | None = AssistantOpt,
    fit_steps: int | None = FitOpt,
) -> None:
    """Build a random-weight checkpoint of a real size in the hub's layout, with a tokenizer of its vocabulary.

    The 31B's true dimensions with 2 layers, as the real checkpoint is stored (2.4 B parameters, ~4.8 GB, ~1-2 min
    and ~8 GB of RAM here):

        crosstune model build --family gemma4 --size 31b --layers 2 --layout multimodal --shards 4 --out DIR

    The 12B ("unified") as Google publishes it: Gemma4UnifiedForConditionalGeneration, the decoder under
    model.language_model. beside a small encoder-free vision embedder (`--size 12b --layout multimodal`).

    The tokenizer is trained locally (byte-level BPE, the family's special tokens and chat template); a vocabulary
    larger than the corpus supports learns its extra entries from seeded pseudo-words.

    Without torch (a TPU host's jax-only install, requirements-jax.lock) the causal layout is written with numpy
    (`--writer numpy`): the same files, holding one shard at a time; give more --shards to hold less.

    `--assistant BASE` builds BASE's MTP drafter instead (4 layers, half BASE's hidden size; random unless --fit-steps).
    """
    if assistant is not None:
        return _assistant(family, assistant, out, seed, dtype, fit_steps or 0, force)
    _build(family, out, size, layers, vocab, layout, dtype, shards, seed, corpus, force, writer)


def _build(family, out, size, layers, vocab, layout, dtype, shards, seed, corpus, force, writer) -> None:
    console = Console()
    try:
        fam = get_family(family)
    except KeyError as e:
        raise ModelOptionError(f"--family: {e.args[0]}") from None
    if size not in fam.sizes:
        raise ModelOptionError(f"--size: unknown {fam.name} size {size!r}; known: {', '.join(fam.sizes)}")
    if layout not in LAYOUTS:
        raise ModelOptionError(f"--layout {layout!r}: one of {', '.join(LAYOUTS)}")
    if dtype not in DTYPES:
        raise ModelOptionError(f"--dtype {dtype!r}: one of {', '.join(DTYPES)}")
    most = fam.spec(size).num_layers
    if layers is not None and layers > most:
        raise ModelOptionError(f"--layers {layers}: a {fam.name} {size} has {most} layers: give at most {most}")
    if corpus is not None and not (corpus / "train.jsonl").is_file():
        raise InputError(f"--corpus: {corpus / 'train.jsonl'} not found: give a corpus folder (`crosstune synth`'s)")
    check_out(out, inputs=[Path.cwd()], what="working directory")  # one line, before any work
    if corpus is not None:
        try:  # read before any work, so a damaged corpus is named as such (not as a build option)
            corpus_texts(corpus)
        except ValueError as e:
            raise InputError(f"--corpus {corpus}: {e}: fix the file or give another corpus") from None

    writer = resolve_writer(writer, layout)  # one line naming what to install, before any work

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    spec = sized_spec(fam.name, size, layers, vocab)
    try:  # before anything is allocated: the 31B's 62 GB was allocated blind
        problem = memory_problem(spec, dtype, shards, writer)
    except ShardCountError as e:
        raise ModelOptionError(f"--shards {shards}: {e}") from None
    if problem:
        fewer = "more --shards or " if writer == "numpy" else ""
        raise ModelOptionError(f"{problem}: give {fewer}--layers (e.g. --layers 2: the size's true dimensions)")
    settings = {"family": fam.name, "size": size, "layers": layers, "vocab": vocab, "layout": layout, "dtype": dtype,
                "shards": shards, "seed": seed, "corpus": None if corpus is None else str(corpus),
                "writer": writer}  # fmt: skip
    # Built beside OUT and swapped in at the end: a failed build leaves OUT as it was; refused before any work.
    staged = owned_output(out, MODEL, inputs=[Path.cwd()], what="working directory", overwrite=force, flag="--force")
    try:
        with staged as tmp, console.status(f"building {spec.name}") as status:
            build_checkpoint(
                fam.name,
                tmp,
                size=size,
                layers=layers,
                vocab=vocab,
                layout=layout,
                dtype=dtype,
                shards=shards,
                seed=seed,
                corpus_dir=corpus,
                writer=writer,
                say=lambda message: status.update(f"{spec.name}: {message}"),
            )
            write_manifest(tmp, MODEL, {"settings": settings})
    except ShardCountError as e:
        raise ModelOptionError(f"--shards {shards}: {e}") from None
    _report(console, spec, out, layout, dtype, seed, writer)


def _assistant(family: str, base: Path, out: Path, seed: int, dtype: str, fit_steps: int, force: bool) -> None:
    """`--assistant BASE`: BASE's MTP drafter (models.assistant), fitted for `fit_steps` (models.drafter_fit)."""
    from crosstune.models.assistant import base_text_config, build_assistant, save_assistant

    if family != "gemma4":
        raise ModelOptionError(f"--assistant: MTP drafters exist for Gemma 4 only, not --family {family}")
    if dtype not in DTYPES:
        raise ModelOptionError(f"--dtype {dtype!r}: one of {', '.join(DTYPES)}")
    if fit_steps < 0:
        raise ModelOptionError(f"--fit-steps {fit_steps}: 0 (a random drafter) or more")
    if not (base / "config.json").is_file():
        raise InputError(f"--assistant {base}: no config.json (give a Gemma 4 model folder: crosstune model tiny)")
    base_text_config(base)  # refused before any work
    check_out(out, inputs=[Path.cwd(), base], what="working directory or base model")
    console = Console()
    staged = owned_output(out, MODEL, inputs=[Path.cwd(), base], what="base model", overwrite=force, flag="--force")
    with staged as tmp, console.status("building the drafter") as status:
        drafter = build_assistant(base, tmp, seed=seed, dtype=dtype)
        fit = None
        if fit_steps:
            import torch
            import transformers

            from crosstune.models.drafter_fit import fit_drafter

            status.update(f"fitting the drafter to {base.name}'s greedy outputs ({fit_steps} steps)")
            model = transformers.AutoModelForCausalLM.from_pretrained(base, dtype="float32")
            fit = fit_drafter(model, drafter.float(), steps=fit_steps, seed=seed)
            drafter = drafter.to(getattr(torch, dtype))
        save_assistant(drafter, base, tmp)
        settings = {"assistant_of": str(base), "seed": seed, "dtype": dtype, "fit_steps": fit_steps}
        write_manifest(tmp, MODEL, {"settings": settings, "fit": None if fit is None else fit.__dict__})
    text = drafter.config.get_text_config()
    console.print(
        f"[bold]MTP drafter[/bold] of {base} → {out}: {text.num_hidden_layers} layers, hidden {text.hidden_size} "
        f"(base {drafter.config.backbone_hidden_size}), {sum(p.numel() for p in drafter.parameters()):,} params"
    )
    if fit is not None:
        seen, held = (", ".join(f"{a:.1%}" for a in acc) for acc in (fit.accuracy, fit.held_out))
        console.print(
            f"fit: {fit.steps} steps on {fit.sequences} greedy continuations, loss {fit.first_loss:.2f} → "
            f"{fit.last_loss:.2f}; top-1 = the base's next token, per draft step: fit data {seen}, other prompts {held}"
        )


def _report(console: Console, spec, out: Path, layout: str, dtype: str, seed: int, writer: str) -> None:
    console.print(
        f"[bold]{spec.name}[/bold] ({layout}, {dtype}) → {out}  decoder params {spec.total_params:,}  "
        f"vocab {spec.vocab_size:,}  seed {seed}  written by {writer}"
    )
    console.print("layer types: " + " ".join(spec.layer_types))
    if spec.per_layer_input_dim:
        console.print(
            f"per-layer inputs: {spec.per_layer_input_dim} per layer ({spec.per_layer_embedding_params:,} "
            "embedding params)"
        )
    if spec.kv_shared_layers:
        shared = range(spec.first_kv_shared, spec.num_layers)
        sources = sorted({spec.kv_source(i) for i in shared})
        console.print(
            f"KV-shared layers {shared.start}-{shared.stop - 1} (no k/v projections), reusing layers {sources}; "
            f"MLP {spec.mlp_dim(shared.start)} there"
        )
    if spec.moe is not None:
        moe = spec.moe
        console.print(
            f"MoE: {moe.num_experts} experts of {moe.expert_dim}, top {moe.top_k}, beside the dense MLP of "
            f"{spec.intermediate_size}; {spec.active_params:,} params active per token"
        )
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
