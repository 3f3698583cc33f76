"""What the demo writes beside its bundles and what it prints: demo.json, the manifest of its folder (resumed in
place: crosstune.ownership.claim reads it through `read_demo_manifest`), with its settings, the figures and each
run's machine and time; and the table of the base and both fine-tunes, read from the bundles' evaluations."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from rich.table import Table

from crosstune.errors import InputError, validation_line
from crosstune.evals.results import EvalSummary, evaluation_at
from crosstune.fsutil import atomic_write_text
from crosstune.ownership import ResumedKind
from crosstune.study.context import BASE, EVAL, FINETUNE
from crosstune.untrusted_files import read_json

MADE_BY, DEMO_MANIFEST, FORMAT = "crosstune demo", "demo.json", 1
CORPUS, REPORT = "corpus", "report"  # beside one bundle per backend (named by the backend)


class DemoRun(BaseModel):
    """One finished run of the demo in its folder: when, how long, whether the corpus was kept, the CPU."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True)
    finished: str
    seconds: float
    corpus_reused: bool
    cpu: dict[str, Any]  # crosstune.study.machine's record of the CPU


class DemoManifest(BaseModel):
    """demo.json: written as a run starts (settings; bundles and report not yet made), completed as it ends (the
    figures, the engines, one more of `runs`)."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True)  # what a newer demo adds is kept
    format: int
    made_by: str
    created: str
    settings: dict[str, Any]
    bundles: dict[str, str]
    report: str | None
    figures: dict[str, dict[str, Any]] | None = None  # None: no run has finished
    engines: list[str] | None = None
    runs: list[DemoRun] = Field(default_factory=list)


def read_demo_manifest(out: Path) -> DemoManifest | None:
    """OUT/demo.json, None when there is none; an InputError when the file is not a demo's, or names the key whose
    value has the wrong type."""
    path = Path(out) / DEMO_MANIFEST
    if not path.is_file():
        return None
    try:
        data = read_json(path)
    except (OSError, ValueError):
        data = None
    if not isinstance(data, dict) or data.get("made_by") != MADE_BY:
        raise InputError(f"{path}: not the manifest of a `crosstune demo` folder: give the demo another --out")
    try:
        return DemoManifest.model_validate(data)
    except ValidationError as e:
        raise InputError(f"{path}: {validation_line(e)}; give the demo another --out") from None


DEMO_FOLDER = ResumedKind(MADE_BY, DEMO_MANIFEST, "demo folder", read_demo_manifest)


def start_manifest(out: Path, earlier: DemoManifest | None, settings: dict[str, Any]) -> DemoManifest:
    """demo.json as a run starts (written before any work: the folder is the demo's from then on)."""
    fresh = {"settings": settings, "bundles": {}, "report": None}
    if earlier is None:
        created = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        manifest = DemoManifest(format=FORMAT, made_by=MADE_BY, created=created, **fresh)
    else:
        manifest = earlier.model_copy(update=fresh)
    write_manifest(out, manifest)
    return manifest


def write_manifest(out: Path, manifest: DemoManifest) -> None:
    """demo.json, the keys set so far (a run not yet finished has no figures, engines or runs)."""
    record = manifest.model_dump(mode="json", exclude_unset=True)
    atomic_write_text(Path(out) / DEMO_MANIFEST, json.dumps(record, indent=2) + "\n")


@dataclass(frozen=True)
class Score:
    """One evaluated model: its label, where its evaluation is (bundle-relative to OUT) and its summary.json."""

    label: str
    rel: str
    summary: EvalSummary

    @property
    def passed(self) -> int | None:
        """Problems passed, when every problem had one sample (greedy): the count behind pass@1."""
        rows = self.summary.per_problem
        return sum(r.passed or 0 for r in rows) if rows and all(r.n == 1 for r in rows) else None

    def cell(self, k: str) -> str:
        value = self.summary.pass_at_k.get(k)
        if value is None:
            return "n/a"
        count = f" ({self.passed}/{self.summary.problems})" if k == "1" and self.passed is not None else ""
        return f"{100 * value:.1f} %{count}"

    def interval(self) -> str:
        lo, hi = (self.summary.pass_at_k_ci or {}).get("1") or (None, None)
        return "n/a" if lo is None else f"{100 * lo:.1f}–{100 * hi:.1f} %"


def read_scores(out: Path, backends: tuple[str, ...]) -> list[Score]:
    """The base (evaluated in the first bundle) and each backend's fine-tune, as the bundles' evaluations hold them."""
    rows = [("base (pretrained, never saw these task kinds)", f"{backends[0]}/{EVAL}/{BASE}")]
    rows += [(f"LoRA fine-tune, {b}", f"{b}/{EVAL}/{FINETUNE}") for b in backends]
    scores = []
    for label, rel in rows:
        found = evaluation_at(out / rel)  # the one reader of summary.json, its figures checked
        if found is None:
            raise InputError(f"{out / rel / 'summary.json'}: missing or not an evaluation's summary: rerun the demo")
        scores.append(Score(label, rel, found.summary))
    return scores


def _categories(summary: EvalSummary) -> str:
    from crosstune.evals.judge.verdict import CATEGORIES

    counts = sorted(summary.categories.items(), key=lambda x: -x[1])
    return ", ".join(f"{CATEGORIES.get(code, code)} {n}" for code, n in counts)


def engines(scores: list[Score]) -> list[str]:
    """The engines that generated the evaluations (one, when the comparison is fair)."""
    return sorted({str(s.summary.engine.name if s.summary.engine else None) for s in scores})


def scores_table(scores: list[Score]) -> Table:
    first = scores[0].summary
    t, n = (first.sampling.temperature, first.sampling.n) if first.sampling else (None, None)
    how = "greedy" if t == 0 else f"{n} samples at T={t}"
    ks = list(first.pass_at_k)
    table = Table(title=f"Held-out problems: pass@k on {first.problems} problems ({how})")
    for col in ("model", *(f"pass@{k}" for k in ks), "pass@1, 95 % interval", "verdicts (evaluator categories)"):
        table.add_column(col, overflow="fold")
    for s in scores:
        table.add_row(s.label, *(s.cell(k) for k in ks), s.interval(), _categories(s.summary))
    return table


def as_record(scores: list[Score]) -> dict[str, Any]:
    """The table's numbers, as demo.json keeps them."""
    return {
        s.label: {
            "evaluation": s.rel,
            "problems": s.summary.problems,
            "passed": s.passed,
            "pass_at_k": s.summary.pass_at_k,
            "pass_at_k_ci": s.summary.pass_at_k_ci,
        }
        for s in scores
    }


def machine_line(host: dict[str, Any]) -> str:
    """The CPU and its load, as the bundle recorded them: the demo's figures depend on the CPU (docs/BENCHMARKS.md)."""
    cpu = host.get("cpu", {})
    load = cpu.get("load_avg")
    shown = "n/a" if not load else " / ".join(f"{x:.1f}" for x in load)
    return (
        f"{cpu.get('model')} ({cpu.get('id') or 'id n/a'}; {', '.join(cpu.get('isa') or []) or 'isa n/a'}), "
        f"{cpu.get('usable_cores')} cores, load average {shown} (1 / 5 / 15 min) at the start"
    )
