"""Write a corpus: CodeV-R1-layout train.jsonl, a VerilogEval-layout eval set, and a manifest, all from one seed."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from crosstune.errors import CrosstuneError
from crosstune.ownership import OutputKind, owned_output, read_manifest, verify, write_manifest
from crosstune.synth.design import Design, Params, TaskKind, render_module
from crosstune.synth.prompts import SYSTEM_PROMPT, eval_prompt, train_prompt, train_response
from crosstune.synth.tasks import TASK_KIND_BY_NAME, TASK_KINDS
from crosstune.synth.testbench import render_testbench
from crosstune.untrusted_files import read_json

SYNTH_VERSION = 1
MAX_DRAWS = 2000  # draws per record before deciding a task kind's parameter space is used up
TOP_MODULE_SHARE = 0.3  # share of train records whose module is named TopModule, as in the eval set
# Whose corpus a folder is (crosstune.ownership): hidden, beside manifest.json, which stays byte-identical per seed.
SYNTH_OUTPUT = OutputKind("crosstune synth", ".crosstune-synth.json")


class OutputNotEmptyError(CrosstuneError, FileExistsError):
    """The output directory holds files synth can't replace: a user's, or an earlier corpus without --force."""


class SynthError(CrosstuneError, ValueError):
    """Counts or task kinds the generator can't meet; the message says which option to change."""


@dataclass(frozen=True)
class CorpusSummary:
    out_dir: Path
    seed: int
    train_path: Path
    eval_dir: Path
    manifest_path: Path
    counts: dict[str, tuple[int, int]]  # task kind -> (train records, eval problems)
    reused: bool = False  # an earlier corpus of the same arguments, unchanged, was kept (generate_corpus's `reuse`)

    @property
    def n_train(self) -> int:
        return sum(t for t, _ in self.counts.values())

    @property
    def n_eval(self) -> int:
        return sum(e for _, e in self.counts.values())


def param_key(task_kind: str, params: Params) -> str:
    """The identity of a task for train/eval disjointness: its kind plus functional parameters."""
    return json.dumps([task_kind, params], sort_keys=True, separators=(",", ":"))


def build_design(task_kind: str, params: Params, style_seed: int = 0) -> Design:
    """Rebuild a design from a manifest entry (the functional behaviour depends only on `params`)."""
    return TASK_KIND_BY_NAME[task_kind].build(params, random.Random(style_seed))


def _draw(kind: TaskKind, rng: random.Random, taken: set[str], what: str) -> Params:
    for _ in range(MAX_DRAWS):
        params = kind.sample(rng)
        if param_key(kind.name, params) not in taken:
            return params
    raise SynthError(
        f"task kind {kind.name!r} ran out of fresh parameter sets for {what} after {MAX_DRAWS} draws; "
        "ask for fewer eval problems (--n-eval)"
    )


def select_task_kinds(names: Sequence[str] | None) -> tuple[TaskKind, ...]:
    """The named task kinds in registry order (all of them for None); an unknown name is refused."""
    if names is None:
        return TASK_KINDS
    unknown = sorted(set(names) - set(TASK_KIND_BY_NAME))
    if unknown or not names:
        known = ", ".join(TASK_KIND_BY_NAME)
        raise SynthError(f"unknown task kinds {unknown or '(none given)'}: choose from {known}")
    return tuple(f for f in TASK_KINDS if f.name in set(names))


def plan_eval(n_eval: int, seed: int, kinds: tuple[TaskKind, ...] = TASK_KINDS) -> list[Design]:
    """Eval problems cycle through the task kinds in registry order, so any n_eval >= len(kinds) covers all."""
    rngs = {k.name: random.Random(f"{seed}:eval:{k.name}") for k in kinds}
    taken: set[str] = set()
    designs = []
    for i in range(n_eval):
        kind = kinds[i % len(kinds)]
        params = _draw(kind, rngs[kind.name], taken, "eval problems")
        taken.add(param_key(kind.name, params))
        designs.append(kind.build(params, random.Random(f"{seed}:eval-style:{i}")))
    return designs


def _train_kinds(n_train: int, seed: int, kinds: tuple[TaskKind, ...] = TASK_KINDS) -> list[TaskKind]:
    """Balanced counts per task kind (differing by at most one), in a seeded shuffled order."""
    rng = random.Random(f"{seed}:train-order")
    extra = set(rng.sample(range(len(kinds)), n_train % len(kinds)))
    order = [kind for i, kind in enumerate(kinds) for _ in range(n_train // len(kinds) + (i in extra))]
    rng.shuffle(order)
    return order


@dataclass(frozen=True)
class TrainRecord:
    design: Design
    module: str  # module name used in the prompt and answer: the design's slug or TopModule
    record: dict[str, str]  # the JSONL object: system, prompt, response


def plan_train(
    n_train: int, seed: int, eval_keys: set[str], kinds: tuple[TaskKind, ...] = TASK_KINDS
) -> list[TrainRecord]:
    """Training designs with their JSONL records; parameters used by the eval set are never drawn."""
    out = []
    for i, kind in enumerate(_train_kinds(n_train, seed, kinds)):
        rng = random.Random(f"{seed}:train:{i}")
        params = _draw(kind, rng, eval_keys, "training records")
        design = kind.build(params, rng)
        name = "TopModule" if rng.random() < TOP_MODULE_SHARE else design.slug
        record = {
            "system": SYSTEM_PROMPT,
            "prompt": train_prompt(design, name, rng),
            "response": train_response(design, name, rng),
        }
        out.append(TrainRecord(design, name, record))
    return out


def _earlier(out_dir: Path, settings: dict, chosen: tuple[TaskKind, ...]) -> dict | None:
    """The manifest.json of the corpus at `out_dir` when synth wrote it with `settings` and `chosen` task kinds and
    nothing changed since (every file as its ownership manifest lists it)."""
    if read_manifest(out_dir, SYNTH_OUTPUT)[0] is None or verify(out_dir, SYNTH_OUTPUT):
        return None
    manifest = read_json(out_dir / "manifest.json")
    same = {k: manifest.get(k) for k in settings} == settings and list(manifest["families"]) == [f.name for f in chosen]
    return manifest if same else None


def generate_corpus(
    out_dir: Path,
    n_train: int,
    n_eval: int,
    seed: int,
    force: bool = False,
    progress: Callable[[int], None] | None = None,
    task_kinds: Sequence[str] | None = None,
    split: dict | None = None,
    reuse: bool = False,
) -> CorpusSummary:
    """Generate train.jsonl, eval/ and manifest.json under `out_dir`; byte-identical for the same arguments.

    `task_kinds` restricts train and eval to those task kinds (default: all; with all of them the output is the
    same as before the option existed). `split`, when given, is recorded as the manifest's "split" (what the data
    is held out from, e.g. a base model's task kinds). `progress(1)` is called after each train record and eval problem.
    The folder is written whole and swapped into place (crosstune.ownership): an existing one is replaced only when
    it is an earlier corpus, unchanged, and `force` is given; anything else in it is refused, naming the files.
    `reuse`: an earlier corpus of the same arguments, unchanged, is kept as it is (its files' times too: data
    preparation fingerprints sources by size and time), without `force`.
    """
    if n_train < 0 or n_eval < 0:
        raise SynthError(f"counts must be >= 0, got n_train={n_train}, n_eval={n_eval}")
    out_dir = Path(out_dir)
    chosen = select_task_kinds(task_kinds)
    settings = {
        "version": SYNTH_VERSION,
        "seed": seed,
        "n_train": n_train,
        "n_eval": n_eval,
        **({"split": split} if split is not None else {}),
    }
    if reuse and out_dir.is_dir() and (earlier := _earlier(out_dir, settings, chosen)) is not None:
        counts = {name: (f["train"], f["eval"]) for name, f in earlier["families"].items()}
        return CorpusSummary(
            out_dir, seed, out_dir / "train.jsonl", out_dir / "eval", out_dir / "manifest.json", counts, reused=True
        )
    evals = plan_eval(n_eval, seed, chosen)
    eval_keys = {param_key(d.task_kind, d.params) for d in evals}
    train = plan_train(n_train, seed, eval_keys, chosen)
    overlap = eval_keys & {param_key(t.design.task_kind, t.design.params) for t in train}
    if overlap:
        raise RuntimeError(f"train/eval parameter overlap (generator bug): {sorted(overlap)[:3]}")
    with owned_output(out_dir, SYNTH_OUTPUT, overwrite=force, flag="--force", error=OutputNotEmptyError) as tmp:
        counts = _write(tmp, settings, train, evals, chosen, progress)
        write_manifest(tmp, SYNTH_OUTPUT)
    return CorpusSummary(out_dir, seed, out_dir / "train.jsonl", out_dir / "eval", out_dir / "manifest.json", counts)


def _write(out_dir: Path, settings: dict, train: list[TrainRecord], evals: list[Design], chosen, progress) -> dict:
    (out_dir / "eval").mkdir(parents=True, exist_ok=True)
    with (out_dir / "train.jsonl").open("w", encoding="utf-8", newline="\n") as fh:
        for t in train:
            fh.write(json.dumps(t.record, ensure_ascii=False) + "\n")
            if progress:
                progress(1)
    problems = _write_eval(out_dir / "eval", evals, progress)

    train_counts = Counter(t.design.task_kind for t in train)
    eval_counts = Counter(d.task_kind for d in evals)
    counts = {f.name: (train_counts[f.name], eval_counts[f.name]) for f in chosen}
    manifest = {
        "version": SYNTH_VERSION,
        "generator": "crosstune.synth",
        "seed": settings["seed"],
        "n_train": settings["n_train"],
        "n_eval": settings["n_eval"],
        # the manifest's key names ("families", "family") are its format's: the Verilog task kinds
        "families": {
            f.name: {"summary": f.summary, "train": counts[f.name][0], "eval": counts[f.name][1]} for f in chosen
        },
        "train": [
            {
                "index": i,
                "family": t.design.task_kind,
                "slug": t.design.slug,
                "module": t.module,
                "params": t.design.params,
            }
            for i, t in enumerate(train)
        ],
        "eval": [
            {"problem": p, "family": d.task_kind, "params": d.params} for p, d in zip(problems, evals, strict=True)
        ],
        **({"split": settings["split"]} if "split" in settings else {}),
    }
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return counts


def _write_eval(eval_dir: Path, designs: list[Design], progress: Callable[[int], None] | None) -> list[str]:
    names = [f"Prob{i + 1:03d}_{d.slug}" for i, d in enumerate(designs)]
    if len(set(names)) != len(names):
        raise RuntimeError("duplicate eval problem names (generator bug: a slug does not encode all parameters)")
    for name, design in zip(names, designs, strict=True):
        (eval_dir / f"{name}_prompt.txt").write_text(eval_prompt(design), encoding="utf-8")
        (eval_dir / f"{name}_ref.sv").write_text(render_module(design, "RefModule"), encoding="utf-8")
        (eval_dir / f"{name}_test.sv").write_text(render_testbench(design), encoding="utf-8")
        if progress:
            progress(1)
    (eval_dir / "problems.txt").write_text("".join(f"{n}\n" for n in names), encoding="utf-8")
    return names
