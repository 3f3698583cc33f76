"""`crosstune study RECIPE --backend B --out BUNDLE`: the whole study on this machine into one resumable bundle."""

from __future__ import annotations

from pathlib import Path

import typer

from crosstune.study.context import OPTIONAL_STAGES
from crosstune.study.runner import STAGE_NAMES

WITH_HELP = "stages a study runs only when asked, comma-separated: " + "; ".join(
    f"{name}: {what}" for name, what in OPTIONAL_STAGES.items()
)
BUCKET_HELP = (
    "gs://B, s3://B or a folder: the bundle's copy at BUCKET/<bundle name>, pushed after every stage and checkpoint, "
    "pulled when this machine's is missing or behind (preemption: docs/FAILURE_MODES.md)"
)


def register(app: typer.Typer) -> None:
    app.command("study")(study)


def _stages(text: str | None) -> list[str] | None:
    return None if text is None else [s.strip() for s in text.split(",") if s.strip()]


def study(
    recipe_file: Path = typer.Argument(..., help="recipe YAML"),
    out: Path = typer.Option(..., "--out", help="the bundle folder: new or empty, or an earlier study's (resumed)"),
    backend: str = typer.Option(None, "--backend", help="torch or jax (default: the recipe's backend.default)"),
    from_stage: str = typer.Option(None, "--from", help=f"start at this stage: {', '.join(STAGE_NAMES)}"),
    only: str = typer.Option(None, "--only", help="run just these stages, comma-separated (e.g. serve,bench,eval)"),
    with_: str = typer.Option(None, "--with", help=WITH_HELP),
    pretrain_steps: int = typer.Option(
        None, "--pretrain-steps", help="--with pretrain: its steps (default 1200; another count, another base)"
    ),
    pretrain_cache: Path = typer.Option(
        None, "--pretrain-cache", help="--with pretrain: its cache (default: $CROSSTUNE_CACHE or ~/.cache/crosstune)"
    ),
    overrides: list[str] = typer.Option(None, "--set", help="override a recipe value: --set train.max_steps=10"),
    prices: Path = typer.Option(None, "--prices", help="price overrides YAML for the cost stage (as crosstune cost)"),
    bucket: str = typer.Option(None, "--bucket", help=BUCKET_HELP),
    nodes: int = typer.Option(None, "--nodes", help="torch: machines (default: backend.torch.nodes)"),
    node_rank: int = typer.Option(0, "--node-rank", help="torch, several nodes: this machine's index, 0 = main"),
    main_address: str = typer.Option(None, "--main-address", help="torch, several nodes: HOST[:PORT] of node 0"),
) -> None:
    """Run the study on this machine: prepare → plan → train → export → serve → bench → eval → cost, into BUNDLE.

    The bundle is self-describing (bundle.json: hardware, library versions, recipe/data/tokenizer/chat-template
    hashes, each stage's status, time and outputs, paths relative to the bundle) and can be copied elsewhere. Rerunning
    skips every stage whose inputs are unchanged and whose outputs still hash as recorded, redoes one whose inputs
    changed (the files it reads count by content: new weights at the same model.path retrain), and resumes one that
    was interrupted (Ctrl-C, kill -9): training from its last checkpoint. A redone stage makes the later stages that
    read it stale (left out of the report) until they are redone too. --from and
    --only choose stages, e.g. train on a TPU v5p-8, copy the bundle, then `--from serve` on a v6e-8. Without a vLLM
    serving environment, serve and bench are skipped (saying how to create one) and eval runs the merged model locally.
    Compare bundles with `crosstune report BUNDLE_A BUNDLE_B --out DIR`.
    """
    from crosstune.study.runner import run_study

    overrides = list(overrides or []) + ([f"backend.torch.nodes={nodes}"] if nodes else [])
    launch = {k: v for k, v in {"node_rank": node_rank, "main_address": main_address}.items() if v}
    cache = pretrain_cache.resolve() / "pretrained" if pretrain_cache else None  # as `crosstune pretrain --cache`
    run_study(
        recipe_file,
        backend,
        out,
        overrides=overrides,
        only=_stages(only),
        from_stage=from_stage,
        launch=launch,
        prices=prices,
        bucket=bucket,
        with_=tuple(_stages(with_) or ()),
        pretrain_steps=pretrain_steps,
        pretrain_cache=cache,
    )
