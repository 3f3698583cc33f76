"""Score completions (or the references themselves) on a problem set and write the reports.

Two parallel phases over a pool of single-threaded worker processes (sandbox.py's preexec_fn needs
that): first each problem's reference is simulated as the design to measure its sample count N (cached
on disk by content), then every sample is judged against its problem's N.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, replace
from functools import cache
from pathlib import Path

from crosstune.evals.judge import landlock
from crosstune.evals.judge.extract import UNFINISHED, extract_code
from crosstune.evals.judge.sandbox import Limits
from crosstune.evals.judge.scoring import ProblemScore, summarize, write_reports
from crosstune.evals.judge.simulate import Outcome, instrument, judge_design, reference_as_design
from crosstune.evals.judge.verdict import PASS
from crosstune.evals.problems.problem_sets import Problem
from crosstune.evals.results import EvalSummary
from crosstune.untrusted_files import read_json

REFERENCE_COUNTS = "reference_counts.json"  # in the output folder: the references' outcomes, cached across runs

Progress = Callable[[str, int, int], None]  # (phase, done, total)


@dataclass
class EvalReport:
    summary: dict  # as written to summary.json; `summary_record` is it typed
    records: list[dict]
    paths: list[Path] = field(default_factory=list)

    @property
    def summary_record(self) -> EvalSummary:
        """The summary in its schema (crosstune.evals.results.EvalSummary), as a reader of summary.json gets it."""
        return EvalSummary.model_validate(self.summary)


@cache
def iverilog_version() -> str:
    result = subprocess.run(["iverilog", "-V"], capture_output=True, text=True, check=False)
    return (result.stdout or result.stderr).splitlines()[0] if (result.stdout or result.stderr) else "unknown"


def _reference_key(problem: Problem) -> str:
    """Covers everything the reference's outcome depends on (VerilogEval's keys are unchanged: ref, test, iverilog)."""
    parts = [problem.ref, problem.test, iverilog_version()]
    if problem.suite == "rtllm":
        data = hashlib.sha256(b"".join(name.encode() + b"\0" + body for name, body in problem.data_files)).hexdigest()
        parts += [problem.suite, problem.top, problem.ref_top, problem.testbench_top, data]
    return hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()[:20]


def _run_parallel(
    jobs: Sequence[tuple[str, Problem, int | None]],
    limits: Limits,
    workers: int,
    workroot: Path | None,
    on_done: Callable[[int], None],
) -> list[Outcome]:
    """judge_design over `jobs` (design, problem, expected N) on `workers` processes, in job order."""
    results: list[Outcome | None] = [None] * len(jobs)
    if not jobs:
        return []
    root = str(workroot) if workroot else None
    context = multiprocessing.get_context("forkserver")  # workers never inherit this process's threads
    with ProcessPoolExecutor(max_workers=max(1, workers), mp_context=context) as pool:
        futures = {pool.submit(judge_design, *job, limits, root): i for i, job in enumerate(jobs)}
        for done, future in enumerate(as_completed(futures), start=1):
            results[futures[future]] = future.result()
            on_done(done)
    return [r for r in results if r is not None]


def _is_limit_outcome(outcome: dict) -> bool:
    """A run stopped by a resource bound (wall time, CPU, memory, file or output size): it says how busy the
    machine was, not what the reference does, so it is never cached. Older caches lack `limit`: their limit
    outcomes are the T/L verdicts without a simulated sample count."""
    if outcome.get("limit"):
        return True
    return "limit" not in outcome and outcome.get("strict") in ("T", "L") and outcome.get("samples") is None


def _load_reference_cache(counts_file: Path | None) -> dict[str, dict]:
    """Cached reference outcomes, without limit outcomes; an unreadable file is a cache miss, not an error."""
    if counts_file is None or not counts_file.exists():
        return {}
    try:
        cached = read_json(counts_file)
    except (OSError, ValueError):
        return {}
    if not isinstance(cached, dict):
        return {}
    return {key: value for key, value in cached.items() if isinstance(value, dict) and not _is_limit_outcome(value)}


def measure_references(
    problems: Sequence[Problem],
    limits: Limits,
    workers: int,
    counts_file: Path | None = None,
    workroot: Path | None = None,
    on_progress: Progress | None = None,
) -> dict[str, Outcome]:
    """Each problem's reference judged as the design; `.samples` is its N when `.strict` is a pass.

    Outcomes are cached in `counts_file` (JSON keyed by a hash of ref, testbench and iverilog version), except
    those stopped by a resource limit: the next run measures those again.
    """
    for problem in problems:  # a testbench without the result line fails here, naming its file
        instrument(problem, "0")
    cached = _load_reference_cache(counts_file)
    todo = [p for p in problems if _reference_key(p) not in cached]
    jobs = [(reference_as_design(p), p, None) for p in todo]
    total = len(problems)

    def tick(done: int) -> None:
        if on_progress:
            on_progress("references", total - len(todo) + done, total)

    tick(0)
    fresh = {
        _reference_key(p): o.to_dict()
        for p, o in zip(todo, _run_parallel(jobs, limits, workers, workroot, tick), strict=True)
    }
    if counts_file:
        keep = {**cached, **{key: value for key, value in fresh.items() if not _is_limit_outcome(value)}}
        counts_file.parent.mkdir(parents=True, exist_ok=True)
        counts_file.write_text(json.dumps(keep, indent=1) + "\n")
    outcomes = {**cached, **fresh}
    return {p.name: Outcome(**outcomes[_reference_key(p)]) for p in problems}


def _broken(reference: Outcome) -> Outcome:
    return Outcome("B", "B", f"the reference does not pass: {reference.strict} ({reference.detail})")


def evaluate_completions(
    problems: Sequence[Problem],
    completions: Mapping[str, Sequence[str | None]] | None,
    out_dir: Path,
    ks: Sequence[int] = (1,),
    upstream_compatible: bool = False,
    workers: int | None = None,
    limits: Limits = Limits(),
    workroot: Path | None = None,
    on_progress: Progress | None = None,
    extra_summary: dict | None = None,
    failure_reasons: Mapping[tuple[str, int], str] | None = None,
    from_cache: int | None = None,
) -> EvalReport:
    """Judge `completions[problem]` (all problems need the same count n >= max(ks)) and write reports.

    A None completion is a sample whose generation failed (`failure_reasons[(problem, sample)]` says why): it
    is recorded and listed, and pass@k is computed over the completed samples only. `from_cache`: how many of the
    completions came from the completion cache (recorded under "generation").
    `completions=None` judges each reference as the design (a self-check of the problem set, n = 1).
    """
    failure_reasons = failure_reasons or {}
    workers = workers or len(os.sched_getaffinity(0))  # the CPUs this process may use, not the host's
    out_dir = Path(out_dir)
    references = measure_references(problems, limits, workers, out_dir / REFERENCE_COUNTS, workroot, on_progress)
    samples = _samples(problems, completions, ks)
    outcomes = _judge(
        problems, samples, references, completions is None, upstream_compatible, limits, workers, workroot, on_progress
    )
    mode = "upstream_compatible" if upstream_compatible else "strict"
    records, scores, failed = _scores(problems, samples, outcomes, failure_reasons, upstream_compatible)
    extra = {
        "sandbox": {"landlock_abi": landlock.abi_version(), "limits": asdict(limits)},
        "iverilog": iverilog_version(),
        "references_passing": sum(r.strict == PASS for r in references.values()),
        **(extra_summary or {}),
    }
    if completions is not None:
        requested = sum(len(v) for v in samples.values())
        extra["generation"] = {
            "requested": requested,
            "completed": requested - len(failed),
            "failed": len(failed),
            "failed_samples": failed,
        }
        if from_cache is not None:
            extra["generation"]["from_cache"] = from_cache
    summary = summarize(scores, ks, mode, extra)
    return EvalReport(summary, records, write_reports(out_dir, summary, records))


Sample = tuple[str, str, bool] | None  # (the code judged, the extraction rule, interface prepended); None: failed


def _samples(
    problems: Sequence[Problem], completions: Mapping[str, Sequence[str | None]] | None, ks: Sequence[int]
) -> dict[str, list[Sample]]:
    """Each problem's samples as designs to judge (the references themselves when `completions` is None), the same
    count n >= max(ks) for every problem."""
    if completions is None:
        samples = {p.name: [(reference_as_design(p), "reference", False)] for p in problems}
    else:
        missing = [p.name for p in problems if not completions.get(p.name)]
        if missing:
            raise ValueError(f"no completions for {len(missing)} problem(s), e.g. {missing[0]}")
        samples = {}
        for p in problems:
            extractions = [None if text is None else extract_code(text, p.ifc, p.top) for text in completions[p.name]]
            samples[p.name] = [None if e is None else (e.code, e.rule, e.interface_prepended) for e in extractions]
    counts = sorted({len(v) for v in samples.values()})
    if len(counts) != 1 or min(ks) < 1 or max(ks) > counts[0]:
        raise ValueError(f"every problem needs the same number of samples n >= max(k) = {max(ks)}; got n in {counts}")

    return samples


def _judge(
    problems: Sequence[Problem],
    samples: dict[str, list[Sample]],
    references: dict[str, Outcome],
    references_only: bool,
    upstream_compatible: bool,
    limits: Limits,
    workers: int,
    workroot: Path | None,
    on_progress: Progress | None,
) -> dict[tuple[str, int], Outcome]:
    """Each judged sample's outcome by (problem, sample): simulated in parallel, or settled without a simulation
    (the reference itself, an unfinished thought, a broken reference under the strict rule)."""
    outcomes: dict[tuple[str, int], Outcome] = {}
    jobs, slots = [], []
    for p in problems:
        ref = references[p.name]
        for i, sample in enumerate(samples[p.name]):
            if sample is None:
                continue  # generation failed: nothing to judge
            code = sample[0]
            if references_only:
                outcomes[(p.name, i)] = ref  # the reference run is this sample's run
            elif sample[1] == UNFINISHED:
                outcomes[(p.name, i)] = Outcome("U", "U", "the thinking never closed: there is no answer to judge")
            elif ref.strict != PASS and not upstream_compatible:
                outcomes[(p.name, i)] = _broken(ref)
            else:  # upstream's rule needs no N, so it still judges samples of a broken reference
                jobs.append((code, p, ref.samples if ref.strict == PASS else None))
                slots.append((p.name, i))

    def tick(done: int) -> None:
        if on_progress:
            on_progress("samples", done, len(jobs))

    for slot, outcome in zip(slots, _run_parallel(jobs, limits, workers, workroot, tick), strict=True):
        broken = references[slot[0]].strict != PASS
        outcomes[slot] = replace(outcome, strict="B") if broken else outcome
    return outcomes


def _scores(
    problems: Sequence[Problem],
    samples: dict[str, list[Sample]],
    outcomes: dict[tuple[str, int], Outcome],
    failure_reasons: Mapping[tuple[str, int], str],
    upstream_compatible: bool,
) -> tuple[list[dict], list[ProblemScore], list[dict]]:
    """The per-sample records, the per-problem scores (the verdict mode's codes first) and the failed samples."""
    records, scores, failed = [], [], []
    for p in problems:
        score = ProblemScore(p.name, [])
        for i, sample in enumerate(samples[p.name]):
            if sample is None:
                reason = failure_reasons.get((p.name, i), "no completion")
                failed.append({"problem": p.name, "sample": i, "reason": reason})
                records.append(
                    {"problem": p.name, "sample": i, "verdict": None, "generation": "failed", "reason": reason}
                )
                score.failed += 1
                continue
            _, rule, prepended = sample
            outcome = outcomes[(p.name, i)]
            primary, other = (
                (outcome.upstream, outcome.strict) if upstream_compatible else (outcome.strict, outcome.upstream)
            )
            score.codes.append(primary)
            score.other_codes.append(other)
            records.append(
                {
                    "problem": p.name,
                    "sample": i,
                    "verdict": primary,
                    "generation": "ok",
                    "rule": rule,
                    "interface_prepended": prepended,
                    **outcome.to_dict(),
                }
            )
        scores.append(score)
    return records, scores, failed
