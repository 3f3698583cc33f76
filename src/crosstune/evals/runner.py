"""The evaluation as a library call: an EvalConfig in, an EvalReport out (generate cached, judge, write reports).

`crosstune eval`, the demo, the report and the serving bench build an EvalConfig and call `run_eval`; what it
prints and how it exits is theirs (crosstune.evals.show). Failures are EvalError; Ctrl-C is EvalInterrupted,
which says what was kept. A named protocol is `EvalConfig.for_protocol(name, problems, out, ...)`; its tasks on a
checkout are `protocol_tasks(name, problems)` (one EvalConfig, one run_eval, one output folder per task).
summary.json records the engine that generated the completions and the protocol they were sampled under.

The output folder may hold others' files: the evaluator writes only its own names there (OUTPUT_FILES), and one of
them already there is replaced only when eval_manifest.json proves the evaluator wrote it (crosstune.ownership.
owned_files): unchanged since, or claimed by a run that died writing it (a kill -9 mid-generation resumes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from crosstune.errors import CrosstuneError, Interrupted
from crosstune.evals.evaluate import REFERENCE_COUNTS, EvalReport, evaluate_completions
from crosstune.evals.generation.cache import CompletionCache, SamplingParams, load_samples_file, samples_file_engines
from crosstune.evals.generation.endpoint import EndpointGenerator, Timeouts
from crosstune.evals.generation.generate import GenerationError, Generator, generate_completions
from crosstune.evals.generation.local import DEFAULT_BATCH_SIZE, TransformersGenerator
from crosstune.evals.judge.sandbox import Limits
from crosstune.evals.judge.scoring import REPORT_FILES
from crosstune.evals.problems.problem_sets import TASK_FOLDERS, ProblemSetError, load_problems, suite_of
from crosstune.evals.problems.protocols import UnknownProtocol, get_protocol, protocol_record
from crosstune.ownership import OutputKind, owned_files
from crosstune.recipe.schema import EVAL_DEFAULTS

PARTIAL_EXIT_CODE = 3  # the report is written, but some samples could not be generated

OnProgress = Callable[[str, int, int], None]  # (phase, done, total)
CACHE_FILE = "completions.jsonl"  # the completion cache, in the output folder: reruns resume from it
OUTPUT_FILES = (*REPORT_FILES, REFERENCE_COUNTS, CACHE_FILE)  # all the evaluator writes into its folder
EVAL_OUTPUT = OutputKind("crosstune eval", "eval_manifest.json")


class EvalError(CrosstuneError):
    """An evaluation that could not run: a bad configuration, problem set, model or endpoint (the message says)."""


class EvalInterrupted(Interrupted):
    """Ctrl-C during an evaluation; the message says which samples are kept and how to resume."""


@dataclass(frozen=True)
class EvalConfig:
    """Everything one evaluation needs. Exactly one design source: `endpoint` (with `model`), `hf_model`,
    `samples_file`, or `references_only`. `task`: a VerilogEval task (None: spec-to-rtl; an RTLLM set has one).
    `protocol` names the preset the settings come from (recorded with any departure from it; see for_protocol).
    `batch_size`: prompts per generate() call of the local engine (`hf_model`). `model_revision`: what the caller
    knows of the model's version (the study: its export's sha256), part of the completion cache's key. Defaults are
    the recipe's (EVAL_DEFAULTS); `references_only` judges one design per problem (n = 1, k = 1 whatever is given)."""

    problems: Path
    out: Path
    task: str | None = None
    patterns: tuple[str, ...] = ()  # problem names or globs; empty: all
    endpoint: str | None = None
    model: str | None = None
    hf_model: Path | None = None
    samples_file: Path | None = None
    references_only: bool = False
    sampling: SamplingParams = field(default_factory=SamplingParams)
    ks: tuple[int, ...] = tuple(EVAL_DEFAULTS.k)
    prompt_style: str = EVAL_DEFAULTS.prompt_style
    shots: int = 0
    concurrency: int = 8
    api_key: str | None = field(default=None, repr=False)
    upstream_compatible: bool = False
    workers: int | None = None
    limits: Limits = field(default_factory=Limits)
    request_timeouts: Timeouts = field(default_factory=Timeouts)
    retries: int = 5
    protocol: str | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    model_revision: str | None = None

    @classmethod
    def for_protocol(
        cls, name: str, problems: Path, out: Path, seed: int = SamplingParams.seed, **fields
    ) -> EvalConfig:
        """An EvalConfig with the protocol's n, k, sampling, token budget, prompt style and shots for the problem
        set at `problems`; `fields` set anything else (a design source, task, ...) and may override the preset."""
        try:
            preset = get_protocol(name).settings(suite_of(problems))
        except (UnknownProtocol, ProblemSetError) as e:
            raise EvalError(str(e)) from None
        sampling = SamplingParams(n=preset["n"], temperature=preset["temperature"], top_p=preset["top_p"],
                                  max_tokens=preset["max_tokens"], seed=seed)  # fmt: skip
        defaults = {"sampling": sampling, "ks": tuple(preset["k"]), "prompt_style": preset["prompt_style"],
                    "shots": preset["shots"]}  # fmt: skip
        return cls(problems=problems, out=out, protocol=name, **{**defaults, **fields})

    def __post_init__(self) -> None:
        sources = [self.endpoint is not None, self.hf_model is not None, self.samples_file is not None]
        if sum(sources) + self.references_only != 1:
            raise EvalError("give exactly one of --endpoint, --hf-model, --samples-file, --references-only")
        if self.endpoint is not None and not self.model:
            raise EvalError("--endpoint needs --model (the name the server serves)")
        if not self.ks or min(self.ks) < 1:
            raise EvalError(f"pass@k values must be >= 1, got {list(self.ks)}")
        if self.references_only:  # one design per problem, the reference: nothing is sampled
            object.__setattr__(self, "sampling", replace(self.sampling, n=1))
            object.__setattr__(self, "ks", (1,))
        if max(self.ks) > self.sampling.n and self.samples_file is None:
            raise EvalError(f"--k {max(self.ks)} needs --n >= {max(self.ks)}")
        if self.protocol is not None:
            try:
                get_protocol(self.protocol)
            except UnknownProtocol as e:
                raise EvalError(str(e)) from None
        if self.batch_size < 1:
            raise EvalError(f"batch size must be >= 1, got {self.batch_size}")

    def settings(self) -> dict:
        """The settings a protocol fixes, as this config has them (protocols.SETTINGS)."""
        s = self.sampling
        return {"n": s.n, "k": list(self.ks), "temperature": s.temperature, "top_p": s.top_p,
                "max_tokens": s.max_tokens, "prompt_style": self.prompt_style, "shots": self.shots}  # fmt: skip


def protocol_tasks(name: str, problems: Path) -> list[str | None]:
    """The protocol's tasks that the problem set at `problems` holds, in the protocol's order: for a VerilogEval
    checkout each task folder present, for a single task folder or an RTLLM set its one task (None: as loaded)."""
    tasks = get_protocol(name).tasks
    path = Path(problems).expanduser()
    if suite_of(path) == "rtllm" or (path / "problems.txt").is_file():
        return [None]
    return [t for t in tasks if t in TASK_FOLDERS and (path / TASK_FOLDERS[t] / "problems.txt").is_file()]


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
            extra.update(samples_file=str(config.samples_file),
                         engine=_one_engine(samples_file_engines(config.samples_file)))  # fmt: skip
        elif not config.references_only:
            backend: Generator = (
                EndpointGenerator(
                    config.endpoint, config.model, config.api_key, config.request_timeouts, config.retries
                )
                if config.endpoint is not None
                else TransformersGenerator(config.hf_model, batch_size=config.batch_size)  # type: ignore[arg-type]
            )

            def on_generated(done: int, total: int) -> None:
                generated.update(done=done, total=total)
                report_progress("generation", done, total)

            generation = generate_completions(
                problems, backend, config.sampling, CompletionCache(config.out / CACHE_FILE),
                config.prompt_style, config.shots, config.concurrency, on_generated, config.model_revision,
            )  # fmt: skip
            completions, failure_reasons = generation.completions, generation.failure_reasons
            from_cache = generation.from_cache
            extra.update(model=backend.model, model_identity=generation.identity, sampling=asdict(config.sampling),
                         prompt_style=config.prompt_style, shots=config.shots,
                         engine=_one_engine(generation.engines or [backend.engine]))  # fmt: skip
        if not config.references_only:
            extra["protocol"] = protocol_record(config.protocol, suite, config.settings())
            if config.samples_file is not None:  # completions made elsewhere: the settings are as stated
                extra["protocol"]["settings_observed"] = False
        return evaluate_completions(
            problems, completions, config.out, ks=config.ks, upstream_compatible=config.upstream_compatible,
            workers=config.workers, limits=config.limits, on_progress=report_progress, extra_summary=extra,
            failure_reasons=failure_reasons, from_cache=from_cache,
        )  # fmt: skip
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
    return (f"interrupted: {generated['done']} of {generated['total']} samples are kept in "
            f"{out / CACHE_FILE}; no report was written. Run the same command again to resume: only the "
            "missing samples are requested.")  # fmt: skip
