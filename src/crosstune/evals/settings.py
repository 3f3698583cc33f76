"""What one evaluation is asked to do (EvalConfig), and its settings resolved once for every entry point.

`EvalSettings.resolve` is the one constructor of the settings: the caller's options > the recipe's written eval
lines > the named protocol's preset > the eval section's defaults (recipe/schema.py EVAL_DEFAULTS, shots 0).
`crosstune eval` (with or without a recipe) and the study's eval stages both call it, so one recipe is sampled
the same way by either; the command only parses its options into EvalOptions. A named protocol comes from the
options or else the recipe's `eval.protocol`; its preset depends on the problem set's suite. pass@k's k is filtered
to those n allows only when nobody chose it (the built-in 1 and 5 under `--n 1`). A protocol's tasks on a checkout
are `protocol_tasks(name, problems)` (one EvalConfig, one run_eval, one output folder per task).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from crosstune.errors import CrosstuneError
from crosstune.evals.generation.cache import SamplingParams
from crosstune.evals.generation.endpoint import Timeouts
from crosstune.evals.generation.local import DEFAULT_BATCH_SIZE
from crosstune.evals.judge.sandbox import Limits
from crosstune.evals.problems.problem_sets import TASK_FOLDERS, ProblemSetError, suite_of
from crosstune.evals.problems.protocols import SETTINGS, UnknownProtocol, get_protocol
from crosstune.recipe.schema import EVAL_DEFAULTS, EvalSection

DEFAULT_SHOTS = 0  # in-context examples; no recipe line sets them, a protocol or --shots does


class EvalError(CrosstuneError):
    """An evaluation that could not run: a bad configuration, problem set, model or endpoint (the message says)."""


@dataclass(frozen=True)
class EvalOptions:
    """What a caller states outright, above any recipe (None: not stated); named as the recipe's eval lines."""

    protocol: str | None = None
    samples: int | None = None
    k: tuple[int, ...] | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    prompt_style: str | None = None
    shots: int | None = None
    connect_timeout_s: float | None = None
    read_timeout_s: float | None = None
    request_timeout_s: float | None = None
    seed: int = SamplingParams.seed  # base seed: sample i is drawn with seed + i


# The layered values, by the recipe's eval line names (shots has no line); a protocol's preset names n "n".
_LAYERED = tuple(f.name for f in fields(EvalOptions) if f.name not in ("protocol", "seed"))


@dataclass(frozen=True)
class EvalSettings:
    """How an evaluation samples and asks: made by `resolve` (the module doc's order)."""

    sampling: SamplingParams
    ks: tuple[int, ...]
    prompt_style: str
    shots: int
    timeouts: Timeouts
    protocol: str | None

    @classmethod
    def resolve(
        cls, section: EvalSection | None = None, options: EvalOptions | None = None, problems: Path | None = None
    ) -> EvalSettings:
        """The settings of an evaluation of the problem set at `problems` (needed only under a protocol: its suite
        picks the preset's sampling), from the recipe's eval `section` (None: no recipe) and the caller's `options`."""
        options = options or EvalOptions()
        protocol = options.protocol or (section.protocol if section is not None else None)
        layers = [
            {**{name: getattr(EVAL_DEFAULTS, name) for name in _LAYERED if name != "shots"}, "shots": DEFAULT_SHOTS}
        ]
        if protocol is not None:
            layers.append(_preset(protocol, problems))
        if section is not None:  # the lines the recipe writes (the rest are the section's defaults, layer one)
            layers.append({name: getattr(section, name) for name in section.model_fields_set if name in _LAYERED})
        layers.append({name: getattr(options, name) for name in _LAYERED if getattr(options, name) is not None})
        values = {name: value for layer in layers for name, value in layer.items()}
        ks = tuple(values["k"])
        if not any("k" in layer for layer in layers[1:]):  # the built-in k: only those n samples allow
            ks = tuple(k for k in ks if k <= values["samples"]) or (1,)
        return cls(
            sampling=SamplingParams(
                n=values["samples"],
                temperature=values["temperature"],
                top_p=values["top_p"],
                max_tokens=values["max_tokens"],
                seed=options.seed,
            ),
            ks=ks,
            prompt_style=values["prompt_style"],
            shots=values["shots"],
            timeouts=Timeouts(values["connect_timeout_s"], values["read_timeout_s"], values["request_timeout_s"]),
            protocol=protocol,
        )

    def protocol_settings(self) -> dict:
        """The settings a protocol fixes, as these have them (protocols.SETTINGS: summary.json's record)."""
        s = self.sampling
        used = {"n": s.n, "k": list(self.ks), "temperature": s.temperature, "top_p": s.top_p,
                "max_tokens": s.max_tokens, "prompt_style": self.prompt_style, "shots": self.shots}  # fmt: skip
        return {key: used[key] for key in SETTINGS}


def _preset(name: str, problems: Path | None) -> dict:
    """The protocol's settings for the problem set at `problems`, by the recipe's line names."""
    if problems is None:
        raise EvalError(f"protocol {name}: no problem set to take its suite from (give --problems or eval.problems)")
    try:
        preset = get_protocol(name).settings(suite_of(problems))
    except (UnknownProtocol, ProblemSetError) as e:
        raise EvalError(str(e)) from None
    return {("samples" if key == "n" else key): value for key, value in preset.items()}


@dataclass(frozen=True)
class EvalConfig:
    """Everything one evaluation needs. Exactly one design source: `endpoint` (with `model`), `hf_model`,
    `samples_file`, or `references_only`. `task`: a VerilogEval task (None: spec-to-rtl; an RTLLM set has one).
    `settings`: how it samples (EvalSettings.resolve; without a recipe or options: the section's defaults).
    `batch_size`: prompts per generate() call of the local engine (`hf_model`). `model_revision`: what the caller
    knows of the model's version (the study: its export's sha256), part of the completion cache's key.
    `references_only` judges one design per problem (n = 1, k = 1 whatever is given)."""

    problems: Path
    out: Path
    task: str | None = None
    patterns: tuple[str, ...] = ()  # problem names or globs; empty: all
    endpoint: str | None = None
    model: str | None = None
    hf_model: Path | None = None
    samples_file: Path | None = None
    references_only: bool = False
    settings: EvalSettings = field(default_factory=EvalSettings.resolve)
    concurrency: int = 8
    api_key: str | None = field(default=None, repr=False)
    upstream_compatible: bool = False
    workers: int | None = None
    limits: Limits = field(default_factory=Limits)
    retries: int = 5
    batch_size: int = DEFAULT_BATCH_SIZE
    model_revision: str | None = None

    def __post_init__(self) -> None:
        sources = [self.endpoint is not None, self.hf_model is not None, self.samples_file is not None]
        if sum(sources) + self.references_only != 1:
            raise EvalError("give exactly one of --endpoint, --hf-model, --samples-file, --references-only")
        if self.endpoint is not None and not self.model:
            raise EvalError("--endpoint needs --model (the name the server serves)")
        ks, n = self.settings.ks, self.settings.sampling.n
        if not ks or min(ks) < 1:
            raise EvalError(f"pass@k values must be >= 1, got {list(ks)}")
        if self.references_only:  # one design per problem, the reference: nothing is sampled
            one = replace(self.settings, sampling=replace(self.settings.sampling, n=1), ks=(1,))
            object.__setattr__(self, "settings", one)
        elif max(ks) > n and self.samples_file is None:
            raise EvalError(f"--k {max(ks)} needs --n >= {max(ks)}")
        if self.settings.protocol is not None:
            try:
                get_protocol(self.settings.protocol)
            except UnknownProtocol as e:
                raise EvalError(str(e)) from None
        if self.batch_size < 1:
            raise EvalError(f"batch size must be >= 1, got {self.batch_size}")

    def summary_fields(self) -> dict:
        """How the completions were asked for, as summary.json records it."""
        s = self.settings
        return {"sampling": asdict(s.sampling), "prompt_style": s.prompt_style, "shots": s.shots}


def protocol_tasks(name: str, problems: Path) -> list[str | None]:
    """The protocol's tasks that the problem set at `problems` holds, in the protocol's order: for a VerilogEval
    checkout each task folder present, for a single task folder or an RTLLM set its one task (None: as loaded)."""
    tasks = get_protocol(name).tasks
    path = Path(problems).expanduser()
    if suite_of(path) == "rtllm" or (path / "problems.txt").is_file():
        return [None]
    return [t for t in tasks if t in TASK_FOLDERS and (path / TASK_FOLDERS[t] / "problems.txt").is_file()]
