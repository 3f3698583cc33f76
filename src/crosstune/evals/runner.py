"""The evaluation as a library call: an EvalConfig in, an EvalReport out (generate cached, judge, write reports).

`crosstune eval`, the demo, the report and the serving bench build an EvalConfig and call `run_eval`; what it
prints and how it exits is theirs (crosstune.evals.show). Failures are EvalError; Ctrl-C is EvalInterrupted,
which says what was kept.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from crosstune.errors import CrosstuneError, Interrupted
from crosstune.evals.cache import CompletionCache, SamplingParams, load_samples_file
from crosstune.evals.endpoint import EndpointGenerator, Timeouts
from crosstune.evals.evaluate import EvalReport, evaluate_completions
from crosstune.evals.generate import GenerationError, Generator, TransformersGenerator, generate_completions
from crosstune.evals.problems import SPEC_TO_RTL, ProblemSetError, load_problems
from crosstune.evals.sandbox import Limits

PARTIAL_EXIT_CODE = 3  # the report is written, but some samples could not be generated

OnProgress = Callable[[str, int, int], None]  # (phase, done, total)


class EvalError(CrosstuneError):
    """An evaluation that could not run: a bad configuration, problem set, model or endpoint (the message says)."""


class EvalInterrupted(Interrupted):
    """Ctrl-C during an evaluation; the message says which samples are kept and how to resume."""


@dataclass(frozen=True)
class EvalConfig:
    """Everything one evaluation needs. Exactly one design source: `endpoint` (with `model`), `hf_model`,
    `samples_file`, or `references_only`."""

    problems: Path
    out: Path
    task: str = SPEC_TO_RTL
    patterns: tuple[str, ...] = ()  # problem names or globs; empty: all
    endpoint: str | None = None
    model: str | None = None
    hf_model: Path | None = None
    samples_file: Path | None = None
    references_only: bool = False
    sampling: SamplingParams = field(default_factory=SamplingParams)
    ks: tuple[int, ...] = (1,)
    prompt_style: str = "verilogeval"
    shots: int = 0
    concurrency: int = 8
    api_key: str | None = field(default=None, repr=False)
    upstream_compatible: bool = False
    workers: int | None = None
    limits: Limits = field(default_factory=Limits)
    request_timeouts: Timeouts = field(default_factory=Timeouts)
    retries: int = 5

    def __post_init__(self) -> None:
        sources = [self.endpoint is not None, self.hf_model is not None, self.samples_file is not None]
        if sum(sources) + self.references_only != 1:
            raise EvalError("give exactly one of --endpoint, --hf-model, --samples-file, --references-only")
        if self.endpoint is not None and not self.model:
            raise EvalError("--endpoint needs --model (the name the server serves)")
        if not self.ks or min(self.ks) < 1:
            raise EvalError(f"pass@k values must be >= 1, got {list(self.ks)}")
        if self.references_only and (self.sampling.n, tuple(self.ks)) != (1, (1,)):
            raise EvalError("--references-only judges one design per problem: n = 1 and k = 1")
        if max(self.ks) > self.sampling.n and self.samples_file is None:
            raise EvalError(f"--k {max(self.ks)} needs --n >= {max(self.ks)}")


def run_eval(config: EvalConfig, on_progress: OnProgress | None = None) -> EvalReport:
    """Generate (cached in `config.out`/completions.jsonl), judge and write the reports. Raises EvalError, or
    EvalInterrupted on Ctrl-C (completed samples stay cached: the same call resumes)."""
    report_progress = on_progress or (lambda phase, done, total: None)
    generated = {"done": 0, "total": 0}
    try:
        problems = load_problems(config.problems, config.task, list(config.patterns) or None)
        extra: dict = {"problems_path": str(config.problems), "task": problems[0].task}
        completions, failure_reasons = None, None
        if config.samples_file is not None:
            completions = load_samples_file(config.samples_file)
            extra["samples_file"] = str(config.samples_file)
        elif not config.references_only:
            backend: Generator = (
                EndpointGenerator(
                    config.endpoint, config.model, config.api_key, config.request_timeouts, config.retries
                )
                if config.endpoint is not None
                else TransformersGenerator(config.hf_model)  # type: ignore[arg-type]
            )

            def on_generated(done: int, total: int) -> None:
                generated.update(done=done, total=total)
                report_progress("generation", done, total)

            generation = generate_completions(
                problems, backend, config.sampling, CompletionCache(config.out / "completions.jsonl"),
                config.prompt_style, config.shots, config.concurrency, on_generated,
            )  # fmt: skip
            completions, failure_reasons = generation.completions, generation.failure_reasons
            extra.update(model=backend.model, sampling=asdict(config.sampling), prompt_style=config.prompt_style,
                         shots=config.shots)  # fmt: skip
        return evaluate_completions(
            problems, completions, config.out, ks=config.ks, upstream_compatible=config.upstream_compatible,
            workers=config.workers, limits=config.limits, on_progress=report_progress, extra_summary=extra,
            failure_reasons=failure_reasons,
        )  # fmt: skip
    except (ProblemSetError, GenerationError, FileNotFoundError, ValueError) as e:
        raise EvalError(str(e)) from e
    except KeyboardInterrupt:
        raise EvalInterrupted(_interrupted_message(config.out, generated)) from None


def _interrupted_message(out: Path, generated: dict[str, int]) -> str:
    if not generated["total"]:
        return "interrupted: no report was written."
    return (f"interrupted: {generated['done']} of {generated['total']} samples are kept in "
            f"{out / 'completions.jsonl'}; no report was written. Run the same command again to resume: only the "
            "missing samples are requested.")  # fmt: skip
