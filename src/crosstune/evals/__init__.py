"""VerilogEval v2 and RTLLM evaluation with iverilog: problems, prompts, generation (cached; an endpoint or a local
engine), code extraction, sandboxed simulation, strict and upstream-compatible verdicts, pass@k with intervals,
named protocols. Three rooms import only downward: problems/ (sets, prompt styles, protocols) ← generation/ ←
judge/. `crosstune eval` drives it; `runner.run_eval(settings.EvalConfig)` is the library call."""

from crosstune.evals.evaluate import EvalReport, evaluate_completions, measure_references
from crosstune.evals.generation.cache import CompletionCache, SamplingParams, load_samples_file
from crosstune.evals.generation.endpoint import EndpointGenerator, EndpointUnreachable, Timeouts
from crosstune.evals.generation.generate import (
    Generation,
    GenerationError,
    SampleFailure,
    generate_completions,
)
from crosstune.evals.generation.local import TransformersGenerator
from crosstune.evals.judge.extract import Extraction, extract_code
from crosstune.evals.judge.sandbox import Limits
from crosstune.evals.judge.scoring import pass_at_k
from crosstune.evals.judge.significance import PairedTest, bootstrap_interval, paired_permutation_test
from crosstune.evals.judge.simulate import Outcome, judge_design
from crosstune.evals.judge.verdict import CATEGORIES, upstream_verdict
from crosstune.evals.problems.problem_sets import Problem, ProblemSetError, load_problems
from crosstune.evals.problems.prompt_styles import build_messages
from crosstune.evals.problems.protocols import PROTOCOLS, Protocol

__all__ = [
    "CATEGORIES",
    "CompletionCache",
    "EndpointGenerator",
    "EndpointUnreachable",
    "EvalReport",
    "Extraction",
    "Generation",
    "GenerationError",
    "Limits",
    "Outcome",
    "PROTOCOLS",
    "PairedTest",
    "Protocol",
    "Problem",
    "ProblemSetError",
    "SampleFailure",
    "SamplingParams",
    "Timeouts",
    "TransformersGenerator",
    "bootstrap_interval",
    "build_messages",
    "evaluate_completions",
    "extract_code",
    "generate_completions",
    "judge_design",
    "load_problems",
    "load_samples_file",
    "measure_references",
    "paired_permutation_test",
    "pass_at_k",
    "upstream_verdict",
]
