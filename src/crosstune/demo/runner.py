"""`run_demo`: the demo as a caller of the study, nothing of its own in between. Into OUT:

    OUT/demo.json     the folder's manifest: settings, figures, each run's machine and time (demo.figures)
    OUT/corpus/       the held-out corpus (crosstune synth; kept when it is already the one asked for)
    OUT/torch/        a study bundle: base (--with pretrain), parity, data, run, export, eval of the base and of
                      the fine-tune, cost (crosstune.study)
    OUT/jax/          a study bundle: base, data, run, export, eval of the fine-tune, cost
    OUT/report/       `crosstune report` over the two bundles

A second run finds every stage of both bundles up to date (bundle.json's fingerprints) and the corpus unchanged, so
it trains nothing; changed settings redo what they change (e.g. --steps: train and what reads it)."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from crosstune.demo import figures
from crosstune.demo.split import DEFAULT_EVAL, DEFAULT_TRAIN, HELD_OUT_KINDS, split_record
from crosstune.ownership import claim
from crosstune.recipes import shipped_recipe
from crosstune.train.backend import BACKENDS

# What each backend's study runs beyond the default stages: both train from the same base; the first also checks
# parity (before its training) and evaluates the base, once, by the engine that evaluates the fine-tunes.
FIRST_WITH, OTHERS_WITH = ("pretrain", "parity", "eval-base"), ("pretrain",)


@dataclass(frozen=True)
class DemoResult:
    out: Path
    bundles: dict[str, Path]
    report: Path
    scores: list[figures.Score]
    seconds: float
    host: dict[str, Any]  # this machine as the first bundle recorded it when this run started (CPU, load)


def demo_overrides(corpus: Path, steps: int | None) -> list[str]:
    """Point the demo recipe at the corpus (the base is the pretrain stage's: the study points model.path)."""
    sets = [f"data.sources=[{{path: {corpus / 'train.jsonl'}}}]", f"eval.problems={corpus / 'eval'}"]
    return sets + ([f"train.max_steps={steps}"] if steps else [])


def run_demo(
    out: Path,
    recipe_file: Path | None = None,
    *,
    seed: int = 0,
    n_train: int = DEFAULT_TRAIN,
    n_eval: int = DEFAULT_EVAL,
    steps: int | None = None,
    base_steps: int | None = None,
    cache: Path | None = None,
    console: Console | None = None,
) -> DemoResult:
    """Run (or resume) the demo into `out`: corpus, one study per backend, the report; demo.json records it."""
    from crosstune.report.writer import write_report
    from crosstune.study.runner import run_study
    from crosstune.synth import generate_corpus

    console = console or Console(soft_wrap=True, highlight=False)
    t0 = time.perf_counter()
    out = Path(out).expanduser().absolute()
    recipe_file = Path(recipe_file or shipped_recipe("demo-cpu.yaml"))
    earlier = claim(out, figures.DEMO_FOLDER)  # new, empty or an earlier demo's: before any work
    settings = {"recipe": str(recipe_file.resolve()), "seed": seed, "n_train": n_train, "n_eval": n_eval,
                "steps": steps, "base_steps": base_steps}  # fmt: skip
    manifest = figures.start_manifest(out, earlier, settings)

    console.rule("[bold]the held-out corpus (crosstune synth)", align="left")
    corpus = generate_corpus(
        out / figures.CORPUS,
        n_train,
        n_eval,
        seed,
        task_kinds=HELD_OUT_KINDS,
        split=split_record(),
        reuse=True,
        force=True,
    )
    made = "kept: the same corpus is there" if corpus.reused else "written"
    console.print(f"{corpus.n_train} train records, {corpus.n_eval} problems of {', '.join(corpus.counts)}: {made}")
    bundles, hosts = {}, []
    for i, backend in enumerate(BACKENDS):
        console.rule(f"[bold]the {backend} study (crosstune study)", align="left")
        bundles[backend] = out / backend
        studied = run_study(
            recipe_file,
            backend,
            bundles[backend],
            overrides=demo_overrides(out / figures.CORPUS, steps),
            with_=FIRST_WITH if i == 0 else OTHERS_WITH,
            pretrain_steps=base_steps,
            pretrain_cache=cache,
            console=console,
        )
        hosts.append(studied.hosts[socket.gethostname()])
    console.rule("[bold]the report (crosstune report)", align="left")
    report = write_report(list(bundles.values()), out / figures.REPORT)
    scores = figures.read_scores(out, tuple(bundles))
    seconds = time.perf_counter() - t0
    run = figures.DemoRun(
        finished=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        seconds=round(seconds, 1),
        corpus_reused=corpus.reused,
        cpu=hosts[0]["cpu"],
    )
    manifest = manifest.model_copy(
        update={
            "bundles": {b: p.name for b, p in bundles.items()},
            "report": str(report.relative_to(out)),
            "figures": figures.as_record(scores),
            "engines": figures.engines(scores),
            "runs": [*manifest.runs, run],
        }
    )
    figures.write_manifest(out, manifest)
    return DemoResult(out, bundles, report, scores, seconds, hosts[0])
