"""The evaluation as a library call: an EvalConfig in, an EvalReport out (generate cached, judge, write reports).

`crosstune eval` and the study build an EvalConfig (crosstune.evals.settings: its settings resolved once) and call
`run_eval`; what it prints and how it exits is theirs (crosstune.evals.show). Failures are EvalError; Ctrl-C is
EvalInterrupted, which says what was kept. summary.json records the engine that generated the completions and the
protocol they were sampled under.

The output folder may hold others' files: the evaluator writes only its own names there (OUTPUT_FILES), and one of
them already there is replaced only when eval_manifest.json proves the evaluator wrote it (crosstune.ownership.
owned_files): unchanged since, or claimed by a run that died writing it (a kill -9 mid-generation resumes).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from crosstune.errors import Interrupted
from crosstune.evals.evaluate import REFERENCE_COUNTS, EvalReport, evaluate_completions
from crosstune.evals.generation.cache import CompletionCache, load_samples_file, samples_file_engines
from crosstune.evals.generation.endpoint import EndpointGenerator
from crosstune.evals.generation.generate import GenerationError, Generator, generate_completions
from crosstune.evals.generation.local import TransformersGenerator
from crosstune.evals.judge.scoring import REPORT_FILES
from crosstune.evals.problems.problem_sets import ProblemSetError, load_problems
from crosstune.evals.problems.protocols import protocol_record
from crosstune.evals.settings import EvalConfig, EvalError
from crosstune.ownership import OutputKind, owned_files

PARTIAL_EXIT_CODE = 3  # the report is written, but some samples could not be generated

OnProgress = Callable[[str, int, int], None]  # (phase, done, total)
CACHE_FILE = "completions.jsonl"  # the completion cache, in the output folder: reruns resume from it
OUTPUT_FILES = (*REPORT_FILES, REFERENCE_COUNTS, CACHE_FILE)  # all the evaluator writes into its folder
EVAL_OUTPUT = OutputKind("crosstune eval", "eval_manifest.json")


class EvalInterrupted(Interrupted):
    """Ctrl-C during an evaluation; the message says which samples are kept and how to resume."""


def run_eval(config: EvalConfig, on_progress: OnProgress | None = None) -> EvalReport:
    """Generate (cached in `config.out`/completions.jsonl), judge and write the reports. Raises EvalError (a file
    in `config.out` at a name it writes that is not its own: before any work), or EvalInterrupted on Ctrl-C
    (completed samples stay cached: the same call resumes)."""
    generates = config.endpoint is not None or config.hf_model is not None
    names = [n for n in OUTPUT_FILES if generates or n != CACHE_FILE]
    with owned_files(config.out, EVAL_OUTPUT, names, error=EvalError):
        return _evaluate(config, on_progress)


def _evaluate(config: EvalConfig, on_progress: OnProgress | None) -> EvalReport:
    report_progress = on_progress or (lambda phase, done, total: None)
    generated = {"done": 0, "total": 0}
    try:
        problems = load_problems(config.problems, config.task, list(config.patterns) or None)
        suite = problems[0].suite
        extra: dict = {"problems_path": str(config.problems), "task": problems[0].task, "suite": suite}
        completions, failure_reasons, from_cache = None, None, None
        if config.references_only:
            extra["engine"] = {"name": "none (the references themselves)", "kind": "reference"}
        if config.samples_file is not None:
            completions = load_samples_file(config.samples_file)
            extra.update(
                samples_file=str(config.samples_file), engine=_one_engine(samples_file_engines(config.samples_file))
            )
        elif not config.references_only:
            backend: Generator = (
                EndpointGenerator(
                    config.endpoint, config.model, config.api_key, config.settings.timeouts, config.retries
                )
                if config.endpoint is not None
                else TransformersGenerator(config.hf_model, batch_size=config.batch_size)  # type: ignore[arg-type]
            )

            def on_generated(done: int, total: int) -> None:
                generated.update(done=done, total=total)
                report_progress("generation", done, total)

            settings = config.settings
            generation = generate_completions(
                problems,
                backend,
                settings.sampling,
                CompletionCache(config.out / CACHE_FILE),
                settings.prompt_style,
                settings.shots,
                config.concurrency,
                on_generated,
                config.model_revision,
            )
            completions, failure_reasons = generation.completions, generation.failure_reasons
            from_cache = generation.from_cache
            extra.update(
                model=backend.model,
                model_identity=generation.identity,
                **config.summary_fields(),
                engine=_one_engine(generation.engines or [backend.engine]),
            )
        if not config.references_only:
            extra["protocol"] = protocol_record(config.settings.protocol, suite, config.settings.protocol_settings())
            if config.samples_file is not None:  # completions made elsewhere: the settings are as stated
                extra["protocol"]["settings_observed"] = False
        return evaluate_completions(
            problems,
            completions,
            config.out,
            ks=config.settings.ks,
            upstream_compatible=config.upstream_compatible,
            workers=config.workers,
            limits=config.limits,
            on_progress=report_progress,
            extra_summary=extra,
            failure_reasons=failure_reasons,
            from_cache=from_cache,
        )
    except (ProblemSetError, GenerationError, FileNotFoundError, ValueError) as e:
        raise EvalError(str(e)) from e
    except KeyboardInterrupt:
        raise EvalInterrupted(_interrupted_message(config.out, generated)) from None


def _one_engine(engines: list[dict]) -> dict:
    """The engine of an evaluation; several (a cache filled by different engines) are reported as mixed."""
    if len(engines) == 1:
        return engines[0]
    if not engines:
        return {"name": "unknown (not recorded)", "kind": "unknown"}
    return {"name": "mixed: " + ", ".join(e.get("name", "?") for e in engines), "kind": "mixed", "engines": engines}


def _interrupted_message(out: Path, generated: dict[str, int]) -> str:
    if not generated["total"]:
        return "interrupted: no report was written."
    return (
        f"interrupted: {generated['done']} of {generated['total']} samples are kept in "
        f"{out / CACHE_FILE}; no report was written. Run the same command again to resume: only the "
        "missing samples are requested."
    )
